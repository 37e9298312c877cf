/* slice.h — cutting and reshaping a trace as it streams.
 *
 * Applied in this order to each request: a time window [from, to) on the
 * arrival, after which times are shifted so the window starts at 0; a
 * seeded random sample (each request kept with probability `sample`,
 * decided by a hash of the seed and its position, so the choice does not
 * depend on anything else); the first N requests kept; arrivals divided by
 * `rate_scale` (2 replays twice as fast); input and output lengths times
 * their scales (rounded, at least 1 unless they were 0); then requests
 * longer than max_input_len (prompt) or max_total_len (prompt + output)
 * dropped, so a trace fits a model's context before it is simulated.
 *
 * Scaling an input rescales its block hashes so shared prefixes stay
 * shared: new block j takes the id of the original block that holds its
 * last token, combined with j, renumbered in order of first use. Scaling
 * anything drops measured results (they no longer apply); steps are kept
 * (windowed and shifted) only when the slice is just a time window. */
#ifndef RH_TRACES_SLICE_H
#define RH_TRACES_SLICE_H

#include "traces/import/import.h"

typedef struct tr_slice_opts {
    double from, to;            /* window; to <= from: no upper bound */
    uint64_t first;             /* 0: all */
    double sample;              /* fraction kept, (0, 1] */
    uint64_t seed;
    double rate_scale;          /* > 0 */
    double input_scale, output_scale;   /* > 0 */
    uint32_t max_input_len, max_total_len;   /* 0: no bound */
} tr_slice_opts;

void tr_slice_opts_init(tr_slice_opts *o);   /* everything kept, scales 1 */
int tr_slice_check(const tr_slice_opts *o, rh_err *e);
/* One option by its CLI name (`rate-scale`, `rate_scale`; `length-scale` sets
 * both scales): 1 set, 0 not an option, -1 bad value. */
int tr_slice_opts_set(tr_slice_opts *o, const char *name, const char *value, rh_err *e);

typedef struct tr_slicer tr_slicer;
tr_slicer *tr_slicer_new(const tr_slice_opts *o, const tr_sink *down);
tr_sink tr_slicer_sink(tr_slicer *s);
uint64_t tr_slicer_kept(const tr_slicer *s);
void tr_slicer_free(tr_slicer *s);

/* Slices any trace into a binary trace at `out`. */
int tr_slice_file(const char *in, const tr_import_opts *io, const tr_slice_opts *o, const char *out, uint64_t *kept,
                  rh_err *e);

#endif
