/* engine.h — the real serving engine: the scheduler core, a model runner and
 * per-request sampling, driven by a clock the caller gives.
 *
 * One engine serves many requests; each engine_step runs one batch:
 *   1. core_schedule forms the batch at `now` (read from the clock);
 *   2. the batch is laid out for the runner (page tables are re-read every
 *      step: the core may swap a page for a shared cached copy);
 *   3. a drafter, if any, proposes tokens for decodes that have draft slots;
 *   4. runner_forward computes it; each sampling sequence draws its token
 *      (or verifies its drafts) with its own seeded stream;
 *   5. core_complete commits the tokens at the clock's new `now`.
 * The core's events come back through hooks with the token ids added, and
 * its step records with the measured duration and sched_time (CPU time
 * spent in steps 1-2). Callers: `rehearse replay` (wall clock, from a
 * trace), `rehearse serve` (HTTP, one scheduler thread), tests (any clock).
 *
 * Contract:
 *   - Single-threaded: one thread drives an engine at a time (the forward
 *     pass alone may run on a second one, see engine_step_run). Hooks run
 *     inside engine_step; they may call engine_abort (applied when the
 *     batch has been committed) but not engine_add or engine_step.
 *   - A request's tokens are the same whatever it is batched with (greedy
 *     and seeded sampling alike, up to float rounding of batched GEMMs):
 *     batching, chunking, prefix reuse and retraction never change results;
 *     nor do drafts, except sampled drafts of a draft model, whose tokens
 *     keep the target's distribution but not its draws.
 *   - Bad requests (ids outside the vocabulary, longer than the context or
 *     the pool, bad sampling parameters) are refused by engine_add with one
 *     message; engine_step fails only on broken internal state, after which
 *     the engine may only be freed. */
#ifndef RH_ENGINE_H
#define RH_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/core.h"
#include "engine/model/logits.h"
#include "engine/model/runner.h"
#include "engine/model/tp.h"
#include "engine/speculative/hist.h"
#include "engine/speculative/seam.h"
#include "engine/speculative/spec.h"
#include "traces/trace.h"
#include "util/err.h"

typedef struct engine engine;

/* Speculative counters since engine_new, for /metrics and trace headers. A
 * verify is a decode that had draft slots; hist[j] counts verifies that
 * accepted j drafts (j >= SPEC_HIST_BINS - 1 in the last bin). */
typedef struct engine_spec_stats {
    uint64_t verifies, proposed, accepted;
    uint64_t hist[SPEC_HIST_BINS];
    uint32_t hist_n;            /* bins in use: the draft slots per decode + 1; 0 when off */
    double accept_rate;         /* accepted / proposed (0 when nothing was proposed) */
    double mean_accepted_len;   /* tokens committed per verify: 1 + accepted / verifies */
} engine_spec_stats;

/* A core event as the engine's caller sees it: `user` is the caller's
 * pointer, and a TOKENS event carries the committed ids. */
typedef struct engine_event {
    core_event ev;              /* kind (enum core_event_kind), id, now, counts, finish */
    void *user;                 /* engine_request.user */
    const int32_t *tokens;      /* CORE_EV_TOKENS: the ev.n_tokens new ids; else NULL */
    const int32_t *output;      /* every output id so far (ev.output_len of them) */
    /* When the request asked for logprobs: per new id its log-probability
     * and its top_n most likely alternatives (top_n per id); else NULL. */
    const float *logprobs;
    const logprob_entry *top;
    uint32_t top_n;
    /* When it asked for prompt logprobs, on its first TOKENS event: one per
     * prompt id (the first is NAN: nothing precedes it), top_n each. */
    const float *prompt_logprobs;
    const logprob_entry *prompt_top;
} engine_event;

typedef struct engine_hooks {
    void *ctx;
    void (*on_event)(void *ctx, const engine_event *ev);
    void (*on_step)(void *ctx, const tr_step *step);   /* duration and sched_time measured */
    void (*on_message)(void *ctx, const char *msg);    /* a warning to show once (Lua policy errors) */
} engine_hooks;

/* A forward pass priced instead of computed (`rehearse serve --backend
 * sim`): the engine asks price() how long the batch takes, waits that long,
 * and commits one made-up token per sampling sequence: never EOS, a
 * function of the request's seed and position alone, so a request's tokens
 * are the same whatever it is batched with. No weights are loaded (the
 * model's shapes only), no drafts are made, no tensor parallel runs. */
typedef struct engine_pricer {
    void *ctx;
    double (*price)(void *ctx, const core_batch *b);   /* seconds the forward takes, > 0 */
    void (*wait)(void *ctx, double seconds);           /* NULL: sleep on the wall clock */
    const char *hardware;                              /* what engine_hardware says, e.g. "sim: COST" */
} engine_pricer;

typedef struct engine_config {
    core_config core;           /* every scheduler knob; core.max_total_tokens sizes the KV pool,
                                   0: mem_fraction of available memory (core.total_pages is ignored) */
    const model *m;             /* a model the caller owns and keeps alive, or NULL: */
    const char *model;          /*   a preset name, config.json or Hugging Face directory */
    const char *weights;        /*   safetensors file/index/directory; NULL: the directory's, else dummy */
    uint64_t weight_seed;       /*   seed of dummy weights */
    double mem_fraction;        /* --mem-fraction-static: share of available memory (after the
                                   weights) the pool takes when its size is not given (0.3) */
    uint64_t mem_limit;         /* bytes the KV pool may take; 0: what is available */
    const kern_table *kernels;  /* NULL: the CPU backend */
    tp_config tp;               /* --tp-size, --nnodes, --node-rank, --dist-init-addr (see
                                   engine/model/tp.h); several nodes need core.max_total_tokens */
    const spec_seam *drafter;   /* a caller's drafter (engine/speculative/seam.h), or NULL: spec decides */
    spec_config spec;           /* --speculative-algorithm and its knobs: the engine builds the
                                   drafter (needs core.spec_steps; 3 when 0) */
    const engine_pricer *pricer;/* NULL: the runner computes each forward; else it is priced */
    const char *lora_paths;     /* --lora-paths NAME=PATH[,NAME=PATH...] (a bare PATH is named by itself):
                                   PEFT adapters served from the start (engine_lora_add) */
    uint32_t max_lora_rank;     /* --max-lora-rank: the largest rank accepted; 0: any */
    double (*clock)(void *ctx); /* seconds, non-decreasing; NULL: monotonic time since engine_new */
    void *clock_ctx;
    engine_hooks hooks;
} engine_config;

/* SGLang-like core defaults, no model, mem_fraction 0.3, CPU, no speculation. */
void engine_config_default(engine_config *c);

/* The engine's own flags, shared by every front that runs one (serve,
 * replay, validate): --model, --weights, --weight-seed, --backend,
 * --mem-fraction-static and the tensor-parallel ones. engine_flag_takes_value:
 * 1 for one of them (each takes a value), 0 otherwise. engine_flag_set: 1 set,
 * 0 not one of them, -1 with a message naming the flag. */
int engine_flag_takes_value(const char *name);
int engine_flag_set(engine_config *c, const char *name, const char *value, rh_err *e);
const char *engine_flags_help(void);

/* Loads the model (unless given), sizes the pool, builds core and runner.
 * The context length is the model's unless core.context_length is smaller. */
engine *engine_new(const engine_config *c, rh_err *e);
/* Frees every request still queued or running, without events. */
void engine_free(engine *g);
/* A node other than 0 of a multi-node tensor-parallel group (cfg.tp.node_rank
 * > 0): loads the model, starts this node's ranks and serves node 0's batches
 * until node 0 stops. 0, or -1 with a message. */
int engine_follow(const engine_config *c, rh_err *e);

typedef struct engine_request {
    uint64_t id;                /* unique among live requests */
    const int32_t *prompt;      /* copied */
    uint32_t prompt_len;        /* >= 1 */
    uint32_t max_tokens;        /* >= 1: finishes (length) after this many output tokens */
    kern_sampling sampling;     /* temperature 0: greedy */
    uint64_t seed;              /* the request's sampling stream */
    bool ignore_eos;            /* else the model's EOS id stops it */
    const int32_t *stop_ids;    /* more ids that stop it (copied); the stop id is the last output */
    uint32_t n_stop_ids;
    logit_rules rules;          /* logit_bias, min_tokens, min_p, penalties (copied); zero: none */
    bool logprobs;              /* report each output's logprob ... */
    uint32_t top_logprobs;      /*   and its this many most likely alternatives (<= LOGPROB_MAX_TOP) */
    bool prompt_logprobs;       /* also each prompt id's (echo): every prompt position is computed, so
                                   the request neither reads nor fills the prefix cache */
    int32_t priority;           /* its place in the queue under --enable-priority-scheduling */
    uint32_t adapter;           /* LoRA adapter (engine_lora_find); 0: the base model */
    void *user;                 /* handed back in events */
} engine_request;

/* Queues a request at time `now` (its arrival, usually engine_now). -1 with
 * one message naming the request and what is wrong; nothing is queued then. */
int engine_add(engine *g, const engine_request *r, double now, rh_err *e);
/* Removes a request in any state; its CORE_EV_ABORTED event follows (at once,
 * or after the batch when called from a hook). 0, or -1 if unknown. */
int engine_abort(engine *g, uint64_t id);
/* Runs one batch: 1 when a step ran, 0 when there was nothing to run
 * (engine_idle), -1 with a message when the engine broke. */
int engine_step(engine *g, rh_err *e);
/* engine_step in three parts, for a caller that overlaps its own work with
 * the model's (rehearse serve's overlap scheduling):
 *   engine_step_begin  steps 1-2: forms and lays out the batch (1: a batch
 *                      is in flight, 0: idle, -1 broken);
 *   engine_step_run    steps 3-4: drafts, computes and samples it; may run on
 *                      another thread; notes the clock when done (0 or -1);
 *   engine_step_end    step 5: commits at the time run finished (1 or -1).
 * While a batch is in flight (begin .. end) the driving thread may call
 * engine_add, engine_abort (applied at end), engine_now, engine_idle and the
 * read-only accessors, concurrently with engine_step_run on another thread;
 * the clock must then be callable from both threads. Hooks run only inside
 * begin and end, on the driving thread. A drafter's propose, propose_batch
 * and verified run inside engine_step_run and its forget inside hooks, so
 * never at the same time (aborts wait for the batch). */
int engine_step_begin(engine *g, rh_err *e);
int engine_step_run(engine *g, rh_err *e);
int engine_step_end(engine *g, rh_err *e);
bool engine_idle(const engine *g);
/* A batch is in flight (engine_step_begin .. engine_step_end). */
bool engine_in_flight(const engine *g);
/* core_flush_cache, between steps (-1 while a batch is in flight). */
int64_t engine_flush_cache(engine *g);
/* The engine's clock. */
double engine_now(const engine *g);

const model_config *engine_model(const engine *g);
/* The core, for core_get_stats and core_get_config (the resolved pool). */
const core *engine_core(const engine *g);
/* The machine the kernels run on: "cpu: <CPU model name>". */
const char *engine_hardware(const engine *g);
/* Speculative counters so far (all zero without drafts). */
void engine_get_spec_stats(const engine *g, engine_spec_stats *s);
/* The drafter the engine built from config.spec (draft pool stats and
 * checks, spec.h), or NULL: no speculation, or the caller's own drafter. */
const spec_drafter *engine_spec_drafter(const engine *g);

/* LoRA adapters (PEFT folders, engine/model/peft.h). An adapter gets an id
 * (>= 1) for engine_request.adapter; the core caps how many run in a batch
 * (--max-loras-per-batch) and says which sit in its GPU slots: the engine
 * copies an adapter's weights into the backend when it enters a slot and
 * frees them when it leaves. Not while a batch is in flight; not under
 * tensor parallel. engine_lora_add: the id, or -1 (a name already served,
 * a rank above --max-lora-rank, a folder the loader refuses). remove: -1
 * while requests use it or when unknown. find: the id, 0 when unknown. */
int engine_lora_add(engine *g, const char *name, const char *path, rh_err *e);
int engine_lora_remove(engine *g, const char *name, rh_err *e);
uint32_t engine_lora_find(const engine *g, const char *name);
/* The adapters served, in the order added: *n of them; name and path of
 * the i-th, its id, its requests queued or running, and all it has taken
 * (each out-parameter may be NULL). */
uint32_t engine_lora_count(const engine *g);
const char *engine_lora_name(const engine *g, uint32_t i, const char **path, uint32_t *id, uint32_t *requests);
uint64_t engine_lora_total(const engine *g, uint32_t i);

/* Sets a trace header's model, hardware, "weights" (a path, or the dummy
 * seed) and every core knob (the resolved values), so a recording says what
 * produced it. 0, or -1 out of memory. */
int engine_describe(const engine *g, tr_header *h);

#endif
