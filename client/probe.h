/* probe.h — `rehearse probe`: a designed measurement campaign against any
 * OpenAI-compatible server, every token's time recorded client-side, so
 * `rehearse fit` can fit a cost model to a server it cannot look inside.
 *
 * Runs, in order, each starting when the previous one is done (the server
 * idle again between them):
 *   ttft     lone prompts of log-spaced lengths up to half the context, twice
 *            each: TTFT against prompt length
 *   batch    short prompts decoding together at concurrency 1, 2, 4, ... N:
 *            inter-token latency against batch size
 *   context  N decodes (at least 4) at once after prompts of 1/8, 1/4, 1/2, 3/4
 *            of the context: inter-token latency against context
 *   mixed    a long prompt arriving while N/2 requests decode: prefill chunks
 *            among decodes
 *   prefix   one long prompt, then the same prompt twice: TTFT with the
 *            prefix cached
 *   burst    a closed loop of N clients, lengths drawn: the server under load
 * Prompts are token ids (OpenAI's completions take a list of ints; vLLM,
 * SGLang and rehearse serve do), distinct except where the prefix run
 * repeats one. The campaign stays inside its budget: a run that would start
 * past it is skipped, one in flight at it is stopped (its unfinished
 * requests recorded as failed). */
#ifndef RH_CLIENT_PROBE_H
#define RH_CLIENT_PROBE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "client/bench.h"

typedef struct probe_opts {
    double budget_s;            /* wall seconds for the whole campaign (600) */
    uint32_t max_context;       /* longest prompt + output to send (the server's max_model_len, else 8192) */
    uint32_t max_concurrency;   /* N of the batch and burst runs (32) */
    uint32_t vocab;             /* prompt ids from [0, vocab) (256: within every model's) */
    uint64_t seed;
} probe_opts;

void probe_opts_default(probe_opts *o);

typedef struct probe_run {
    char name[16];
    char what[112];
    size_t start, n;            /* its items in the plan's dataset */
    uint32_t concurrency;       /* 0: every request at its arrival */
} probe_run;

typedef struct probe_plan {
    bench_dataset d;            /* every run's requests, arrivals relative to their run's start */
    probe_run *runs;
    size_t n_runs;
} probe_plan;

int probe_plan_make(const probe_opts *o, probe_plan *p, rh_err *e);
void probe_plan_print(FILE *f, const probe_plan *p);
/* Runs the plan against c's server; out[0 .. d.n): results with sends
 * relative to the campaign's start. *skipped counts runs left out for the
 * budget. -1 only when a run could not start. */
int probe_execute(const bench_config *c, const probe_plan *p, double budget_s, bench_result *out, size_t *skipped,
                  rh_err *e);
void probe_plan_free(probe_plan *p);

#endif
