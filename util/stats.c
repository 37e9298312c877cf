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

/* LSD radix sort, 16 bits a pass over the order-preserving keys: four
 * passes over the data beat qsort's n log n comparisons from about 10^4
 * elements on. */
void rh_sort_doubles(double *x, size_t n)
{
    if (n < 4096) {
        qsort(x, n, sizeof *x, cmp_double);
        return;
    }
    unsigned long long *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    size_t *cnt = malloc(65536 * sizeof *cnt);
    if (!a || !b || !cnt) {
        free(a);
        free(b);
        free(cnt);
        qsort(x, n, sizeof *x, cmp_double);
        return;
    }
    for (size_t i = 0; i < n; i++) a[i] = rh_double_key(x[i]);
    for (int shift = 0; shift < 64; shift += 16) {
        memset(cnt, 0, 65536 * sizeof *cnt);
        for (size_t i = 0; i < n; i++) cnt[(a[i] >> shift) & 0xffff]++;
        size_t sum = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t c = cnt[d];
            cnt[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) b[cnt[(a[i] >> shift) & 0xffff]++] = a[i];
        unsigned long long *t = a;
        a = b;
        b = t;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned long long k = a[i];
        union { unsigned long long u; double d; } v;
        v.u = (k >> 63) ? (k & 0x7fffffffffffffffull) : ~k;
        x[i] = v.d;
    }
    free(a);
    free(b);
    free(cnt);
}

void rh_summarize(double *x, size_t n, rh_summary *s)
{
    memset(s, 0, sizeof *s);
    if (n == 0) return;
    rh_sort_doubles(x, n);
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
