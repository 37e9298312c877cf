/* bench_json.h — the result file of a run (--result-json) and the header of
 * its client-side trace: the summary under vLLM's field names, plus the
 * settings that produced it, so two runs can be compared by reading files. */
#ifndef RH_BENCH_JSON_H
#define RH_BENCH_JSON_H

#include "client/bench.h"
#include "client/bench_summary.h"

typedef struct bench_json_settings {
    const metrics_slo *slo;
    const char *dataset;        /* random, shared-prefix, trace */
    double request_rate;        /* req/s; inf: all at once; NaN: the trace's own arrivals */
    double burstiness;
    double rate_scale;          /* a trace's arrivals were divided by this */
    unsigned long long seed;
    int save_detailed;          /* per-request arrays as vLLM's --save-detailed writes them */
    const char *backend;        /* --backend, or what the endpoint implies (openai, openai-chat, sglang) */
    bench_style style;          /* whose summary keys */
    const bench_selection *sel; /* the metrics and percentiles saved (vLLM's style) */
    const bench_peaks *peaks;
    uint32_t random_input_len, random_output_len;
    double random_range_ratio;
    /* The server's counters before and after the run (bench_scrape_metrics),
     * or NULL: its server-side keys are then left out, not written as 0. */
    const bench_scrape *before, *after;
    const char *model_id;       /* the result's model_id (--model), or NULL: the name sent */
    const json_t *extra;        /* more top-level keys (--metadata, the ramp), or NULL */
    int append;                 /* --append-result: one JSON line appended, not the file replaced */
} bench_json_settings;

/* Written to a temporary file and renamed, so FILE is whole or untouched;
 * with js->append, one compact JSON line appended to FILE (vLLM's
 * --append-result). */
int bench_write_json(const char *path, const bench_config *c, const bench_dataset *d, const bench_result *r,
                     const metrics_summary *s, const bench_run_info *info, const bench_json_settings *js, rh_err *e);

/* SGLang's --output-file: the summary under SGLang's names as one JSON line
 * appended to FILE. */
int bench_append_jsonl(const char *path, const bench_config *c, const bench_dataset *d, const bench_result *r,
                       const metrics_summary *s, const bench_json_settings *js, rh_err *e);

/* Model, base URL, endpoint, dataset and load settings as header key/values. */
int bench_trace_header(tr_header *h, const bench_config *c, const bench_dataset *d, const bench_json_settings *js,
                       rh_err *e);

#endif
