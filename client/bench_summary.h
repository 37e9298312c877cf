/* bench_summary.h — a run's summary as vLLM's (`vllm bench serve`) and
 * SGLang's (`sglang.bench_serving`) clients print and save it: their table
 * rows, the metrics and percentiles the user selected (--percentile-metrics
 * ttft,tpot,itl,e2el, --metric-percentiles 50,95,99), the peak output token
 * throughput (output tokens in the busiest one-second bucket, counted from
 * the first successful send) and the peak concurrency (most successful
 * requests in flight at one instant, their [send, end) intervals swept),
 * both as vLLM's client counts them; SGLang's `concurrency` is the summed E2E over the
 * duration. Per-request values come from the results with the definitions
 * of client/bench.h (ITL: the gaps between content chunks, as vLLM's). */
#ifndef RH_BENCH_SUMMARY_H
#define RH_BENCH_SUMMARY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "client/bench.h"

typedef enum bench_style { BENCH_STYLE_VLLM = 0, BENCH_STYLE_SGLANG = 1 } bench_style;

enum { BENCH_M_TTFT = 1, BENCH_M_TPOT = 2, BENCH_M_ITL = 4, BENCH_M_E2EL = 8 };
#define BENCH_MAX_PERCENTILES 16

typedef struct bench_selection {
    unsigned metrics;           /* BENCH_M_* */
    double percentiles[BENCH_MAX_PERCENTILES];
    size_t n_percentiles;
} bench_selection;

/* "ttft,tpot,itl" and "99" (vLLM's defaults when NULL). -1 with a message
 * naming the flag and the bad item. */
int bench_selection_parse(bench_selection *s, const char *metrics, const char *percentiles, rh_err *e);

typedef struct bench_peaks {
    double output_tokens_per_s; /* most output tokens in one second of the run */
    uint64_t concurrent;        /* most successful requests in flight at one instant */
    double concurrency;         /* SGLang's: summed E2E / duration */
} bench_peaks;

void bench_peaks_of(const bench_dataset *d, const bench_result *r, double duration, bench_peaks *p);

typedef struct bench_table {
    const char *backend;        /* printed by SGLang's table */
    uint64_t max_concurrency;   /* 0: not set */
    double request_rate;        /* inf: not configured */
    bool goodput;               /* SLOs given */
} bench_table;

/* The table, in the style's rows and order. -1 out of memory. */
int bench_print_summary(FILE *f, bench_style st, const metrics_summary *s, const bench_dataset *d,
                        const bench_result *r, const bench_selection *sel, const bench_peaks *pk,
                        const bench_table *t);
/* Adds the selected metrics' keys to o: vLLM's mean_/median_/std_/pP_{m}_ms,
 * or SGLang's names (mean_e2e_latency_ms, p95_itl_ms, concurrency, ...), and
 * the peaks. -1 out of memory. */
int bench_summary_json(json_t *o, bench_style st, const bench_dataset *d, const bench_result *r,
                       const bench_selection *sel, const bench_peaks *pk);

#endif
