/* core.h — the scheduler and KV-memory core shared by the engine and the simulator.
 *
 * One scheduler, two clocks: this module has no I/O, no threads, no GPU and no
 * clock. The caller passes `now` (seconds) into every call. The real engine
 * drives it with the wall clock and a model runner; the simulator with a
 * virtual clock and a cost model. Both see the same batches for the same
 * inputs, and both receive the same step records and request events.
 *
 * A step is a pair of calls:
 *   core_schedule(c, now, &batch)   forms one batch (or none when idle);
 *   ...the runner computes it (or the cost model prices it)...
 *   core_complete(c, &batch, results, now)   commits the tokens it produced.
 * Requests enter with core_add and leave by finishing or core_abort.
 *
 * Everything is deterministic for a given config (including its seed) and
 * the same sequence of calls. */
#ifndef RH_CORE_H
#define RH_CORE_H

#include <stdbool.h>
#include <stdint.h>

#include "traces/trace.h"
#include "util/err.h"

typedef enum core_policy {
    CORE_POLICY_FCFS = 0,   /* arrival order */
    CORE_POLICY_LPM,        /* longest cached prefix first; fcfs past 128 waiting */
    CORE_POLICY_LOF,        /* longest output first */
    CORE_POLICY_RANDOM,     /* seeded shuffle */
    CORE_POLICY_LUA,        /* a Lua function orders (and may filter) the queue */
} core_policy;

typedef enum core_preset {
    CORE_PRESET_SGLANG = 0, /* prefill-first batch formation, new-token-ratio admission, retraction */
    CORE_PRESET_VLLM,       /* vLLM V1: one token budget, running first, preempt newest on exhaustion */
} core_preset;

typedef enum core_evict {
    CORE_EVICT_LRU = 0,
    CORE_EVICT_LFU,
} core_evict;

typedef struct core_config {
    uint32_t page_size;              /* --page-size: tokens per KV page */
    uint64_t total_pages;            /* pool size in pages (--max-total-tokens / page size) */
    int32_t chunked_prefill_size;    /* --chunked-prefill-size; -1: no chunking */
    uint32_t max_prefill_tokens;     /* --max-prefill-tokens */
    uint32_t max_running_requests;   /* --max-running-requests */
    uint32_t context_length;         /* longest prompt+output a request may have; 0: no limit */
    core_policy policy;              /* --schedule-policy */
    double schedule_conservativeness;/* --schedule-conservativeness */
    bool disable_radix_cache;        /* --disable-radix-cache */
    bool enable_mixed_chunk;         /* --enable-mixed-chunk */
    core_preset preset;              /* --scheduler */
    core_evict evict;                /* --radix-eviction lru|lfu */
    uint64_t seed;                   /* --seed: random policy */
    uint32_t spec_steps;             /* --speculative-num-steps: draft slots per decode (0: off) */
    uint32_t spec_disable_batch_size;/* --speculative-disable-by-batch-size; 0: never */
    const char *lua_policy_path;     /* --policy-script: file defining policy(waiting, state) */
    void *lua_state;                 /* or: a lua_State* owned by the caller ... */
    int lua_policy_ref;              /* ... and a registry reference to the policy function */
} core_config;

/* SGLang-like defaults: page 16, 8192 chunk, 16384 prefill tokens, 256 running, fcfs, lru. */
void core_config_default(core_config *cfg);

/* Sets one knob by its CLI name without dashes ("chunked-prefill-size"; "_"
 * is accepted for "-" so Lua keys work). Returns 1 if set, 0 if the name is
 * not a core knob, -1 with a message naming the knob on a bad value. */
int core_config_set(core_config *cfg, const char *name, const char *value, rh_err *e);
/* One line per knob, "  --name VALUE   meaning (default)", for --help texts. */
const char *core_config_help(void);
/* Rejects impossible combinations (zero budgets, a pool smaller than a page...). */
int core_config_validate(const core_config *cfg, rh_err *e);

typedef struct core core;
typedef struct core_req core_req;

/* A request as handed to the core. Page keys for the prefix cache come from
 * the prompt tokens when given (a chain xxHash of each full page), else from
 * the trace's block hashes (each block of block_size tokens maps onto
 * block_size / page_size page keys). The core copies what it needs. */
typedef struct core_req_desc {
    uint64_t id;
    uint32_t prompt_len;
    uint32_t max_new_tokens;          /* output length: finishes after this many tokens */
    const int32_t *prompt_tokens;     /* may be NULL */
    const uint64_t *block_hashes;     /* may be NULL */
    uint32_t n_block_hashes;
    uint32_t block_size;
    void *user;                       /* the caller's per-request data, handed back in batches and events */
} core_req_desc;

/* One sequence of a batch. Positions start..start+n_new-1 are computed; their
 * K and V go into `pages` (a page table of page ids, covering at least
 * start + n_new tokens). */
typedef struct core_seq {
    core_req *req;
    uint64_t id;
    void *user;
    uint32_t start;         /* tokens already in the KV cache (context) */
    uint32_t n_new;         /* tokens computed this step */
    uint32_t n_spec;        /* draft slots among n_new (decode only): n_new = 1 + n_spec */
    bool prefill;           /* a prompt chunk (else a decode) */
    bool samples;           /* produces output tokens this step (decode, or a prompt's last chunk) */
    const uint32_t *pages;
    uint32_t n_pages;
} core_seq;

typedef struct core_batch {
    core_seq *seqs;         /* owned by the core; valid until core_complete */
    uint32_t n;
    uint32_t prefill_tokens, prefill_seqs, decode_seqs;
} core_batch;

/* What the runner reports per sequence of a batch (NULL results means: every
 * sampling sequence produced exactly one token, no drafts, no stop). */
typedef struct core_seq_result {
    uint32_t proposed;      /* draft tokens actually proposed (<= n_spec) */
    uint32_t accepted;      /* of which accepted; commits accepted + 1 tokens */
    bool stop;              /* EOS or stop string: finish now */
    const int32_t *tokens;  /* the committed token ids (accepted + 1), may be NULL */
} core_seq_result;

enum core_event_kind {
    CORE_EV_ADMITTED = 1,   /* left the waiting queue (cached_tokens known) */
    CORE_EV_TOKENS,         /* committed n_tokens output tokens (the first one is the TTFT) */
    CORE_EV_FINISHED,       /* finish holds the reason; the request is gone after this */
    CORE_EV_RETRACTED,      /* pages freed, back to waiting, will recompute */
    CORE_EV_ABORTED,        /* removed by core_abort */
};

typedef struct core_event {
    int kind;               /* enum core_event_kind */
    uint64_t id;
    void *user;
    double now;
    uint32_t n_tokens;      /* CORE_EV_TOKENS: tokens committed now */
    uint32_t output_len;    /* tokens produced so far */
    uint32_t cached_tokens; /* prompt tokens matched in the prefix cache at admission */
    uint32_t spec_proposed, spec_accepted;   /* this step, for CORE_EV_TOKENS */
    uint8_t finish;         /* enum tr_finish, for CORE_EV_FINISHED */
} core_event;

typedef struct core_hooks {
    void *ctx;
    void (*on_step)(void *ctx, const tr_step *step);     /* after each core_complete */
    void (*on_event)(void *ctx, const core_event *ev);
} core_hooks;

core *core_new(const core_config *cfg, const core_hooks *hooks, rh_err *e);
void core_free(core *c);

/* Queues a request. Fails (NULL) if it can never run: a prompt plus output
 * longer than the context length or than the whole pool. */
core_req *core_add(core *c, const core_req_desc *d, double now, rh_err *e);
/* Removes a request from any state and frees its pages. 0, or -1 if unknown. */
int core_abort(core *c, uint64_t id, double now);

/* Forms the next batch. Returns the number of sequences (0: nothing to run). */
uint32_t core_schedule(core *c, double now, core_batch *out);
/* Commits a batch formed by core_schedule. */
int core_complete(core *c, const core_batch *b, const core_seq_result *results, double now, rh_err *e);

typedef struct core_stats {
    uint32_t waiting, running;
    uint64_t pages_total, pages_free, pages_used, pages_cached;  /* used: held by requests; cached: only by the radix tree */
    uint64_t steps, retractions, finished, aborted;
    uint64_t prompt_tokens, cached_tokens;                       /* cumulative, for the hit rate */
    double new_token_ratio;
} core_stats;

void core_get_stats(const core *c, core_stats *s);
/* Every invariant (free + used + cached = total, lock counts, radix
 * consistency, no request in two queues). 0, or -1 and what broke. */
int core_check(const core *c, rh_err *e);
bool core_idle(const core *c);          /* nothing waiting or running */

#endif
