/* measure.h — timing one grid point until its samples agree.
 *
 * A sample runs the operation `iters` times back to back and reports the
 * seconds per run; iters is chosen once per point so a sample lasts at least
 * sample_s (a 200 ns kernel is timed over thousands of runs, a 50 ms one over
 * one). The points of a grid are sampled in rounds — one sample of every
 * point, then the next — so a burst of load from a neighbour on a shared
 * machine costs many points one sample each, which their medians discard,
 * instead of costing a few points all of theirs. Samples are taken until at
 * least min_samples agree: the interquartile
 * range relative to the median is at most `tolerance`. On a shared machine a
 * point can stay noisy; after max_samples samples or point_budget_s seconds
 * the median is kept and the point is marked unconverged, so a calibration
 * always ends. The median, not the mean or the minimum, is what a step meets
 * in steady state: it ignores the odd preempted sample without assuming the
 * machine is ever idle. */
#ifndef RH_CALIB_MEASURE_H
#define RH_CALIB_MEASURE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct calib_rule {
    uint32_t min_samples, max_samples;
    double tolerance;        /* stop when (p75 - p25) / median <= tolerance */
    double sample_s;         /* a sample repeats the operation until it lasts this long */
    double point_budget_s;   /* stop measuring a point after this long (keeps the median) */
} calib_rule;

/* 5..20 samples, 5% spread, 2 ms samples, 1.5 s per point. */
void calib_rule_default(calib_rule *r);
/* 3..5 samples, 25% spread, 0.2 ms samples, 0.2 s per point: smoke runs and tests. */
void calib_rule_quick(calib_rule *r);

typedef struct calib_point {
    double seconds;          /* median seconds per run */
    double spread;           /* (p75 - p25) / median of the samples */
    uint32_t samples, iters;
    bool converged;
} calib_point;

/* Runs the operation `iters` times; returns the seconds they measured and
 * sets *spent to the seconds the sample took on the run's clock. The two
 * differ for a quantity measured inside a larger call (the runner's time
 * outside its kernels): iters and the point budget are sized by *spent. */
typedef double (*calib_sample_fn)(void *ctx, uint32_t iters, double *spent);

/* Prepares point i (its shape) for the samples that follow; -1 on failure. */
typedef int (*calib_set_fn)(void *ctx, uint32_t i);

/* Measures n points in rounds; on_done (may be NULL) is called as each point
 * finishes. A first run of each point (one run) warms caches and sizes its
 * iters; it is not a sample. -1 when set fails or memory runs out. */
int calib_measure_points(const calib_rule *r, uint32_t n, calib_set_fn set, calib_sample_fn fn, void *ctx,
                         calib_point *out, void (*on_done)(void *arg), void *arg);
/* One point (no set). */
void calib_measure(const calib_rule *r, calib_sample_fn fn, void *ctx, calib_point *out);

#endif
