/* replay.h — a trace's requests served by the real engine on the wall clock,
 * and recorded: the loop behind `rehearse replay`.
 *
 * Sending follows the simulator (sim/sim.h) exactly, so a recording and a
 * simulation of the same trace are comparable: open loop, each request at
 * its arrival / rate_scale; or closed loop with max_concurrency clients, a
 * request sent at its arrival or when a client frees up, whichever is later.
 * Latencies count from the send. Every request generates exactly its output
 * length (ignore_eos), greedy unless sampling says otherwise, from prompt
 * ids made by tr_prompt_tokens with the model's vocabulary, so requests
 * sharing block hashes share tokens and the prefix cache hits for real.
 *
 * The recording holds one request record per trace request (send time as
 * arrival, measured TTFT, every token's time, cached tokens, retractions,
 * finish) and one step record per engine step (measured duration and
 * sched_time), under a header naming the model, hardware and every knob. A
 * request the engine refuses (longer than the context or the pool) is
 * recorded with finish "error" and a warning. With speculation on, the
 * header also carries the accepted-length histogram (engine/speculative/hist.h).
 * On failure nothing is written. */
#ifndef RH_ENGINE_REPLAY_H
#define RH_ENGINE_REPLAY_H

#include <stdint.h>

#include "engine/engine.h"
#include "traces/trace.h"

typedef struct replay_config {
    engine_config engine;       /* model and knobs; the replay sets its hooks and clock */
    double rate_scale;          /* 1 */
    uint32_t max_concurrency;   /* 0: open loop */
    uint64_t prompt_seed;       /* seed of the prompt ids (0) */
    kern_sampling sampling;     /* greedy by default; request i's stream is seeded from core.seed and i */
    const char *out_path;       /* the recording (required) */
    const char *trace_name;     /* the input, for the header (may be NULL) */
    int progress;               /* 0: no bar, 1: on a terminal, 2: always */
    /* Warnings (refused requests); NULL: "rehearse replay: warning: ..." on stderr. */
    void (*on_warning)(void *ctx, const char *msg);
    /* Each request's output ids when it finishes (for tests); may be NULL. */
    void (*on_output)(void *ctx, uint64_t index, const int32_t *tokens, uint32_t n);
    void *ctx;
} replay_config;

typedef struct replay_result {
    uint64_t requests, completed, refused;
    uint64_t steps, retractions;
    uint64_t prompt_tokens, cached_tokens, output_tokens;
    uint64_t spec_proposed, spec_accepted;      /* draft tokens, with speculation on */
    double wall_s;              /* from the first send to the last token (model loading excluded) */
} replay_result;

void replay_config_default(replay_config *c);
/* The replay's own flags by CLI name (model, o/output, weights, weight-seed,
 * max-concurrency, rate-scale, prompt-seed, temperature, top-p, top-k,
 * mem-fraction-static) and the speculative ones (engine/speculative/spec.h): 1 set,
 * 0 not one of them, -1 bad value. Values are kept by pointer. Scheduler
 * knobs go to core_config_set. */
int replay_config_set(replay_config *c, const char *name, const char *value, rh_err *e);
/* 1 for the replay's own and speculative flags (all take a value), -1 for any other name. */
int replay_config_takes_value(const char *name);
int replay_run(const replay_config *c, const tr_trace *t, replay_result *out, rh_err *e);

#endif
