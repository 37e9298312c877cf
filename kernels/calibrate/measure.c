/* measure.c — see measure.h. */
#include "kernels/calibrate/measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/stats.h"

#define SAMPLES_CAP 256
#define ITERS_CAP 1000000u

void calib_rule_default(calib_rule *r)
{
    *r = (calib_rule){.min_samples = 5, .max_samples = 30, .tolerance = 0.05, .sample_s = 2e-3,
                      .point_budget_s = 3.0};
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

void calib_measure(const calib_rule *r, calib_sample_fn fn, void *ctx, calib_point *out)
{
    uint32_t max = r->max_samples < SAMPLES_CAP ? r->max_samples : SAMPLES_CAP;
    uint32_t min = r->min_samples < 1 ? 1 : r->min_samples > max ? max : r->min_samples;
    double first;
    fn(ctx, 1, &first);
    uint32_t iters = 1;
    if (first > 0 && first < r->sample_s) {
        double want = ceil(r->sample_s / first);
        iters = want > ITERS_CAP ? ITERS_CAP : (uint32_t)want;
    }
    double s[SAMPLES_CAP], spent = 0, median = 0, spread = 0;
    uint32_t n = 0;
    bool ok = false;
    while (n < max) {
        double took;
        double t = fn(ctx, iters, &took);
        spent += took;
        s[n++] = t / iters;
        if (n < min) continue;
        summarize(s, n, &median, &spread);
        if (spread <= r->tolerance) {
            ok = true;
            break;
        }
        if (spent >= r->point_budget_s) break;
    }
    if (n < min || !ok) summarize(s, n, &median, &spread);
    *out = (calib_point){median, spread, n, iters, ok};
}
