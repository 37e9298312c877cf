/* measure.c — see measure.h. */
#include "sim/calibrate/measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/stats.h"

#define SAMPLES_CAP 256
#define ITERS_CAP 1000000u

void calib_rule_default(calib_rule *r)
{
    *r = (calib_rule){.min_samples = 5, .max_samples = 20, .tolerance = 0.05, .sample_s = 2e-3,
                      .point_budget_s = 1.5};
}

void calib_rule_quick(calib_rule *r)
{
    *r = (calib_rule){.min_samples = 3, .max_samples = 5, .tolerance = 0.25, .sample_s = 2e-4,
                      .point_budget_s = 0.2};
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median and relative interquartile range of the samples so far. */
static void summarize(const double *s, uint32_t n, double *median, double *spread)
{
    double v[SAMPLES_CAP];
    memcpy(v, s, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_double);
    *median = rh_percentile_sorted(v, n, 50);
    double iqr = rh_percentile_sorted(v, n, 75) - rh_percentile_sorted(v, n, 25);
    *spread = *median > 0 ? iqr / *median : (iqr > 0 ? INFINITY : 0);
}

/* Runs per point: iters sized by one warm-up run, then samples in rounds. */
typedef struct point_state {
    uint32_t iters, n;
    double spent;
    bool done;
} point_state;

static uint32_t iters_for(const calib_rule *r, double first)
{
    if (!(first > 0) || first >= r->sample_s) return 1;
    double want = ceil(r->sample_s / first);
    return want > ITERS_CAP ? ITERS_CAP : (uint32_t)want;
}

int calib_measure_points(const calib_rule *r, uint32_t n, calib_set_fn set, calib_sample_fn fn, void *ctx,
                         calib_point *out, void (*on_done)(void *arg), void *arg)
{
    uint32_t max = r->max_samples < SAMPLES_CAP ? r->max_samples : SAMPLES_CAP;
    if (max < 1) max = 1;
    uint32_t min = r->min_samples < 1 ? 1 : r->min_samples > max ? max : r->min_samples;
    double *s = malloc((size_t)n * max * sizeof *s);
    point_state *ps = calloc(n, sizeof *ps);
    if (!s || !ps) {
        free(s);
        free(ps);
        return -1;
    }
    int rc = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        double first;
        if (set && set(ctx, i) < 0) rc = -1;
        else fn(ctx, 1, &first), ps[i].iters = iters_for(r, first);
    }
    for (uint32_t round = 0; round < max && rc == 0; round++) {
        for (uint32_t i = 0; i < n && rc == 0; i++) {
            point_state *p = &ps[i];
            if (p->done) continue;
            if (set && set(ctx, i) < 0) {
                rc = -1;
                break;
            }
            double took, t = fn(ctx, p->iters, &took);
            p->spent += took;
            s[(size_t)i * max + p->n++] = t / p->iters;
            if (p->n < min) continue;
            double median, spread;
            summarize(s + (size_t)i * max, p->n, &median, &spread);
            bool ok = spread <= r->tolerance;
            if (ok || p->spent >= r->point_budget_s || p->n == max) {
                p->done = true;
                out[i] = (calib_point){median, spread, p->n, p->iters, ok};
                if (on_done) on_done(arg);
            }
        }
    }
    free(s);
    free(ps);
    return rc;
}

void calib_measure(const calib_rule *r, calib_sample_fn fn, void *ctx, calib_point *out)
{
    calib_measure_points(r, 1, NULL, fn, ctx, out, NULL, NULL);
}
