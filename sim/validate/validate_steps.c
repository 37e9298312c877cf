/* validate_steps.c — see validate_steps.h. */
#include "sim/validate/validate_steps.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/plot/plot.h"
#include "util/atomic_file.h"

static bool usable(const tr_step *s)
{
    return cost_step_class(s) >= 0 && s->duration > 0 && isfinite(s->duration);
}

static int write_csv(const cost_model *m, const tr_step *steps, size_t n, uint32_t tp, const char *path, rh_err *e)
{
    rh_atomic_file af;
    if (rh_atomic_open(&af, path, e) < 0) return -1;
    FILE *f = af.f;
    fprintf(f, "step,class,measured_ms,predicted_ms,rel_error\n");
    for (size_t i = 0; i < n; i++) {
        if (!usable(&steps[i])) continue;
        cost_batch b;
        cost_batch_from_step(&b, &steps[i]);
        b.tp = tp;
        double pred = cost_step_time(m, &b), meas = steps[i].duration;
        fprintf(f, "%llu,%s,%.6g,%.6g,%.6g\n", (unsigned long long)steps[i].index,
                cost_class_name(cost_step_class(&steps[i])), meas * 1e3, pred * 1e3, fabs(pred - meas) / meas);
    }
    return rh_atomic_commit(&af, e);
}

int validate_steps(const cost_model *m, const tr_step *steps, size_t n, uint32_t tp, const char *csv_path,
                   vs_result *r, rh_err *e)
{
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < n; i++) usable(&steps[i]) ? r->used++ : r->skipped++;
    if (!r->used) return rh_fail(e, "no step record with work and a positive duration to compare");
    if (cost_check_tp(m, tp, e) < 0) return -1;
    if (cost_step_errors(m, steps, n, tp, r->cls, e) < 0) return -1;
    return csv_path ? write_csv(m, steps, n, tp, csv_path, e) : 0;
}

int validate_steps_plot(const char *csv_path, const char *out, const char *title, const char *xlabel,
                        const char *ylabel, rh_err *e)
{
    plot_spec ps;
    plot_spec_init(&ps);
    ps.kind = PLOT_SCATTER;
    ps.csv = csv_path;
    ps.x = "measured_ms";
    ps.y = "predicted_ms";
    ps.by = "class";
    ps.title = title;
    ps.xlabel = xlabel;
    ps.ylabel = ylabel;
    ps.out = out;
    ps.logx = ps.logy = 1;
    ps.diagonal = 1;
    return plot_draw(&ps, e);
}
