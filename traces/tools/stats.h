/* stats.h — what a trace holds: counts, arrival span and rate, length
 * percentiles, and the ideal prefix hit ratio of its block hashes.
 *
 * The ideal hit ratio is what an unbounded prefix cache would reach: the
 * fraction of prompt blocks whose hash, with the same preceding hashes (the
 * same prefix), was seen in an earlier request. The accumulator is a sink,
 * so any trace format streams into it; it keeps the lengths (for exact
 * percentiles) and one key per distinct prefix block. */
#ifndef RH_TRACES_STATS_H
#define RH_TRACES_STATS_H

#include <stdio.h>

#include "traces/import/import.h"
#include "util/stats.h"

typedef struct tr_stats {
    uint64_t requests, steps, failed, measured, sessions;
    double first_arrival, last_arrival;
    double span;                /* last - first arrival, s */
    double rate;                /* (requests - 1) / span: the mean inter-arrival rate; 0 if span is 0 */
    rh_summary input, output;   /* token lengths */
    uint64_t input_tokens, output_tokens;
    uint64_t blocks, block_hits;
    double prefix_hit_ratio;    /* block_hits / blocks; 0 without hashes */
    uint64_t adapter_requests;  /* requests with a LoRA adapter */
    uint64_t adapters;          /* distinct adapters */
    uint64_t top_adapter_requests;  /* the most used adapter's requests */
    int truncated;              /* a binary trace cut short */
} tr_stats;

typedef struct tr_stats_acc tr_stats_acc;

tr_stats_acc *tr_stats_new(void);
void tr_stats_free(tr_stats_acc *a);
tr_sink tr_stats_sink(tr_stats_acc *a);
/* The header the trace came with (valid while `a` lives). */
const tr_header *tr_stats_header(const tr_stats_acc *a);
int tr_stats_finish(tr_stats_acc *a, tr_stats *out, rh_err *e);

/* Reads any trace and summarises it; *header (may be NULL) gets a copy of
 * its header, to free with tr_header_free. */
int tr_stats_file(const char *path, const tr_import_opts *o, tr_stats *out, tr_header *header, rh_err *e);

#endif
