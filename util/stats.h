/* stats.h — summary statistics with the definitions benchmark tools use.
 *
 * Percentiles interpolate linearly between order statistics (numpy's default,
 * which vLLM's and SGLang's benchmark scripts use), so our p99 equals theirs
 * on the same samples. std is the population standard deviation (numpy's). */
#ifndef RH_STATS_H
#define RH_STATS_H

#include <stddef.h>

typedef struct rh_summary {
    size_t n;
    double mean, std, min, median, p90, p99, max;
} rh_summary;

/* Sorts `x` in place and fills `s`; all zeros when n == 0. */
void rh_summarize(double *x, size_t n, rh_summary *s);

/* Sorts ascending. A radix sort on the IEEE bit patterns for large arrays
 * (summaries of million-request runs), qsort for small ones. */
void rh_sort_doubles(double *x, size_t n);

/* Maps a double to a 64-bit key whose unsigned order is the numeric order. */
static inline unsigned long long rh_double_key(double d)
{
    union { double d; unsigned long long u; } v = {d};
    return (v.u >> 63) ? ~v.u : (v.u | 0x8000000000000000ull);
}

/* q in [0, 100] over an ascending array. */
double rh_percentile_sorted(const double *x, size_t n, double q);

/* A growable array of doubles. */
typedef struct rh_dvec {
    double *v;
    size_t n, cap;
} rh_dvec;

int rh_dvec_push(rh_dvec *d, double x);   /* -1 on out of memory */
void rh_dvec_free(rh_dvec *d);

#endif
