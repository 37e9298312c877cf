/* metrics.h — serving metrics of a run, with the definitions and JSON field
 * names of vLLM's and SGLang's benchmark clients.
 *
 * Fed one way: measured requests (a recorded engine run, a simulated run, or a
 * benchmark client's trace) and step records go in; a summary comes out.
 *   TTFT  arrival -> first output token
 *   E2E   arrival -> last output token                    (JSON: e2el)
 *   TPOT  (E2E - TTFT) / (output tokens - 1), requests with >1 output token
 *   ITL   gaps between successive token deliveries; tokens delivered together
 *         (speculative accepts) form one delivery, as a streaming client sees them
 *   duration  first arrival -> last completion
 * Completed requests are those that finished by length or stop; aborted and
 * failed ones count in `failed` and in no latency. Goodput counts completed
 * requests meeting every SLO given (ms; 0 = no bound), per second of duration.
 * Memory stays small for long runs: latencies are one double per request, and
 * ITLs are kept as (value, count) runs, so a simulator can feed one run per
 * step instead of one value per token. */
#ifndef RH_METRICS_H
#define RH_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "traces/trace.h"
#include "util/stats.h"

typedef struct metrics_slo {
    double ttft_ms, tpot_ms, e2e_ms;    /* 0: no bound */
} metrics_slo;

typedef struct metrics_summary {
    uint64_t completed, failed;
    /* Of failed: requests refused because no configuration of this server
     * can serve them (set by the driver that refused them, a simulation or
     * an engine replay): longer than the context length, or than the pool. */
    uint64_t failed_context_length, failed_kv_pool;
    double duration;                    /* s */
    uint64_t total_input_tokens, total_output_tokens;
    double request_throughput, input_throughput, output_throughput, total_token_throughput;
    double request_goodput;             /* completed requests meeting the SLOs per s */
    uint64_t good_requests;
    rh_summary ttft_ms, tpot_ms, itl_ms, e2el_ms;
    /* our own, in the same style */
    double cache_hit_rate;              /* cached prompt tokens / prompt tokens */
    uint64_t cached_tokens;
    /* The host tier (SGLang's HiCache): of cached_tokens those loaded back
     * from host memory, their share of prompt tokens, and the tokens the
     * steps moved (loaded back; copied to the host while evictions waited;
     * copied in the background). host_tier: any of these nonzero (the JSON
     * keys and the text lines appear only then). */
    uint64_t cached_host;
    double cache_hit_rate_host;
    uint64_t cached_storage;            /* of cached_host, those fetched from a storage tier first */
    double cache_hit_rate_storage;      /* (the JSON's host figures leave these out, as SGLang's
                                           cache_source="host" does) */
    uint64_t load_back_tokens, write_back_tokens, backup_tokens;
    int host_tier;
    uint64_t retractions;               /* summed over steps (or requests when no steps) */
    uint64_t policy_errors;             /* Lua policy calls that fell back to fcfs (a simulation's; set by it) */
    uint64_t policy_trips;              /* its circuit breaker's trips (engine/core/breaker.h); 0: the JSON
                                           key is left out, as before there was a breaker */
    uint64_t spec_proposed, spec_accepted;
    double spec_accept_rate;            /* accepted / proposed */
    double mean_accepted_len;           /* mean tokens committed per verify (accepted + 1) */
    uint64_t steps;
    double mean_batch_size, max_batch_size;       /* sequences per step */
    double mean_tokens_per_step;
    double mean_kv_use, max_kv_use;               /* pages used / total */
    double mean_waiting, max_waiting;
    double busy_time;                   /* summed step durations, s */
    uint32_t truncated;                 /* 1: the trace was cut short */
} metrics_summary;

typedef struct metrics metrics;

metrics *metrics_new(const metrics_slo *slo);
void metrics_free(metrics *m);
/* A measured request. When token_times are absent the caller may feed ITLs
 * itself with metrics_add_itl; otherwise they come from token_times. */
int metrics_add_request(metrics *m, const tr_request *r);
/* `count` inter-token gaps of `gap_s` seconds. */
int metrics_add_itl(metrics *m, double gap_s, uint64_t count);
int metrics_add_step(metrics *m, const tr_step *s);
void metrics_set_truncated(metrics *m);
/* Computes the summary; the metrics object stays usable. */
int metrics_summarize(metrics *m, metrics_summary *out);

/* A trace file through a fresh metrics object: 1 if it held measured
 * requests (summary filled), 0 if none were measured, -1 on error. */
int metrics_of_trace(const char *path, const metrics_slo *slo, metrics_summary *out, rh_err *e);

/* The same as a sink, for a caller that reads the trace itself (once, with
 * other sinks beside it: a pipe cannot be read twice). */
typedef struct metrics_reader {
    metrics *m;
    uint64_t measured;
} metrics_reader;
int metrics_reader_init(metrics_reader *r, const metrics_slo *slo, rh_err *e);
tr_sink metrics_reader_sink(metrics_reader *r);
/* After the read: 1 and the summary when requests were measured, else 0. */
int metrics_reader_finish(metrics_reader *r, int truncated, metrics_summary *out);
void metrics_reader_free(metrics_reader *r);

/* vLLM-style JSON object (jansson json_t*, returned as void* to keep jansson
 * out of this header). The caller owns the reference. */
void *metrics_to_json(const metrics_summary *s);
/* A human table in the style of vLLM's benchmark summary. */
void metrics_print(FILE *f, const metrics_summary *s, const char *title);

/* Weighted percentile over (value, count) pairs (numpy's linear interpolation
 * on the expanded sample). Sorts the pairs in place. */
typedef struct metrics_wsample {
    double value;
    uint64_t count;
} metrics_wsample;
void metrics_wsummarize(metrics_wsample *x, size_t n, rh_summary *s);

#endif
