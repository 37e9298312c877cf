/* validate_steps.c — `rehearse validate-steps RECORDED COST [-o DIR]`: flags,
 * help and exit codes; the comparison is sim/validate/validate_steps.h. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "sim/validate/validate_steps.h"
#include "util/args.h"
#include "util/fs.h"
#include "util/progress.h"

static const char *help_text =
    "usage: rehearse validate-steps RECORDED COST [-o DIR] [--tp N] [--no-plot] [--json]\n\n"
    "Prices every step record of RECORDED (a trace from rehearse replay or serve) with\n"
    "the cost model COST and compares it with the step's measured duration: prints the\n"
    "median, p90 and max relative error |predicted - measured| / measured for prefill,\n"
    "decode and mixed steps, and writes DIR/steps.csv and a scatter plot of predicted\n"
    "against measured time (DIR/scatter.png and .svg, log axes, y = x line).\n"
    "  -o DIR      output directory (default reports/validate-steps)\n"
    "  --tp N      tensor-parallel size to price at (default: the cost file's own)\n"
    "  --no-plot   write the CSV only\n"
    "  --json      print the summary as JSON\n";

static void print_table(const vs_result *r)
{
    printf("relative error |predicted - measured| / measured:\n");
    printf("  %-8s %8s %8s %8s %8s\n", "class", "steps", "median", "p90", "max");
    for (int c = 0; c < COST_N_CLASSES; c++) {
        const cost_err_summary *s = &r->cls[c];
        if (!s->n) printf("  %-8s %8s\n", cost_class_name(c), "0");
        else
            printf("  %-8s %8zu %7.1f%% %7.1f%% %7.1f%%\n", cost_class_name(c), s->n, s->median * 100, s->p90 * 100,
                   s->max * 100);
    }
}

static json_t *result_json(const vs_result *r, const char *rec, const char *cost, const char *kind)
{
    json_t *cls = json_object();
    for (int c = 0; c < COST_N_CLASSES; c++)
        json_object_set_new(cls, cost_class_name(c),
                            json_pack("{s:I, s:f, s:f, s:f, s:f}", "steps", (json_int_t)r->cls[c].n, "median",
                                      r->cls[c].median, "p90", r->cls[c].p90, "max", r->cls[c].max, "mean",
                                      r->cls[c].mean));
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:o}", "recorded", rec, "cost", cost, "kind", kind, "steps",
                     (json_int_t)r->used, "skipped", (json_int_t)r->skipped, "error", cls);
}

static int fail(const char *msg)
{
    fprintf(stderr, "rehearse validate-steps: %s\n", msg);
    return 1;
}

int validate_steps_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(help_text, stdout);
        return 0;
    }
    rh_args a;
    rh_err e;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    const char *n, *dir = "reports/validate-steps";
    int json = 0, plot = 1;
    unsigned long long tp = 0;
    while ((n = rh_args_next(&a))) {
        const char *v;
        if (!strcmp(n, "json") || !strcmp(n, "no-plot")) {
            if (rh_args_no_value(&a, &e)) return fail(e.msg);
            if (n[0] == 'j') json = 1;
            else plot = 0;
        } else if (!strcmp(n, "o") || !strcmp(n, "output")) {
            if (!(dir = rh_args_value(&a, &e))) return fail(e.msg);
        } else if (!strcmp(n, "tp") || !strcmp(n, "tp-size")) {
            if (!(v = rh_args_value(&a, &e)) || rh_parse_u64(v, "--tp", &tp, &e)) return fail(e.msg);
            if (tp < 1 || tp > 65536) return fail("--tp must be 1..65536");
        } else {
            fprintf(stderr, "rehearse validate-steps: unknown flag --%s (rehearse validate-steps --help)\n", n);
            return 1;
        }
    }
    if (a.npos != 2) return fail("needs RECORDED and COST (rehearse validate-steps --help)");
    cost_model *m = cost_load(a.pos[1], &e);
    if (!m) return fail(e.msg);
    tr_step *steps = NULL;
    size_t n_steps = 0;
    char csv[4096], out[4096];
    snprintf(csv, sizeof csv, "%s/steps.csv", dir);
    snprintf(out, sizeof out, "%s/scatter", dir);
    vs_result r;
    int rc = tr_read_steps(a.pos[0], &steps, &n_steps, NULL, &e);
    if (rc == 0 && n_steps == 0)
        rc = rh_fail(&e, "%s: no step records (a recorded run from rehearse replay or serve has them)", a.pos[0]);
    if (rc == 0 && rh_mkdir_p(dir) < 0) rc = rh_fail(&e, "%s: cannot create: %s", dir, strerror(errno));
    if (rc == 0) rc = validate_steps(m, steps, n_steps, (uint32_t)tp, csv, &r, &e);
    if (rc == 0 && plot) {
        char title[512];
        snprintf(title, sizeof title, "Step time: %s predicted against measured", m->ops->kind);
        rc = validate_steps_plot(csv, out, title, "measured step time (ms)", "predicted step time (ms)", &e);
    }
    if (rc == 0) {
        if (json) {
            json_t *j = result_json(&r, a.pos[0], a.pos[1], m->ops->kind);
            json_object_set_new(j, "csv", json_string(csv));
            if (plot) json_object_set_new(j, "plot", json_string(out));
            json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
            printf("\n");
            json_decref(j);
        } else {
            printf("validate-steps: %zu steps of %s priced by %s (%s); %zu skipped (no work or no duration)\n",
                   r.used, a.pos[0], a.pos[1], m->ops->kind, r.skipped);
            print_table(&r);
            printf("wrote %s%s%s%s\n", csv, plot ? ", " : "", plot ? out : "", plot ? ".png/.svg" : "");
        }
    }
    free(steps);
    cost_free(m);
    return rc < 0 ? fail(e.msg) : 0;
}
