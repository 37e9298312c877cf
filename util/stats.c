/* stats.c — see stats.h. */
#include "util/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double rh_percentile_sorted(const double *x, size_t n, double q)
{
    if (n == 0) return 0;
    double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    if (lo >= n - 1) return x[n - 1];
    double frac = pos - (double)lo;
    return x[lo] + (x[lo + 1] - x[lo]) * frac;
}

void rh_summarize(double *x, size_t n, rh_summary *s)
{
    memset(s, 0, sizeof *s);
    if (n == 0) return;
    qsort(x, n, sizeof *x, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    double mean = sum / (double)n, var = 0;
    for (size_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    s->n = n;
    s->mean = mean;
    s->std = sqrt(var / (double)n);
    s->min = x[0];
    s->max = x[n - 1];
    s->median = rh_percentile_sorted(x, n, 50);
    s->p90 = rh_percentile_sorted(x, n, 90);
    s->p99 = rh_percentile_sorted(x, n, 99);
}

int rh_dvec_push(rh_dvec *d, double x)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        double *v = realloc(d->v, cap * sizeof *v);
        if (!v) return -1;
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n++] = x;
    return 0;
}

void rh_dvec_free(rh_dvec *d)
{
    free(d->v);
    memset(d, 0, sizeof *d);
}
