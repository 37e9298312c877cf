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
 * Contract:
 *   - core_schedule returns 0 exactly when nothing waits and nothing runs
 *     (core_idle), so a caller never spins: an idle core always starts the
 *     first request the policy offers when the pool can hold it.
 *   - Hooks run synchronously inside core calls and must not call back into
 *     the core; a request's core_req and `user` pointer are valid until its
 *     CORE_EV_FINISHED or CORE_EV_ABORTED event returns.
 *   - Everything is deterministic for a given config (including its seed) and
 *     the same sequence of calls.
 * Single-threaded: one core per thread; distinct cores share nothing. */
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
    CORE_POLICY_DFS_WEIGHT, /* SGLang's dfs-weight: the waiting requests' matched prefixes as a tree,
                               walked depth first, heavier subtrees first */
} core_policy;

typedef enum core_preset {
    CORE_PRESET_SGLANG = 0, /* prefill-first batch formation, new-token-ratio admission, retraction */
    CORE_PRESET_VLLM,       /* vLLM V1: one token budget, running first, preempt newest on exhaustion */
} core_preset;

typedef enum core_evict {
    CORE_EVICT_LRU = 0,
    CORE_EVICT_LFU,
    CORE_EVICT_SLRU,        /* segmented LRU: pages reused twice outlive the rest (SGLang's slru) */
} core_evict;

typedef enum core_lora_evict {
    CORE_LORA_EVICT_LRU = 0,    /* the adapter slot used longest ago */
    CORE_LORA_EVICT_FIFO,       /* the adapter loaded first */
} core_lora_evict;

typedef enum core_hicache_write {
    CORE_HICACHE_WRITE_THROUGH = 0,         /* every page copied to the host as it enters the tree */
    CORE_HICACHE_WRITE_THROUGH_SELECTIVE,   /* once a second admission reuses it */
    CORE_HICACHE_WRITE_BACK,                /* when eviction takes it off the GPU (the eviction waits) */
} core_hicache_write;

typedef struct core_config {
    uint32_t page_size;              /* --page-size: tokens per KV page */
    uint64_t total_pages;            /* pool size in pages, used when max_total_tokens is 0 */
    uint64_t max_total_tokens;       /* --max-total-tokens; 0: total_pages decides. The pool is
                                        max_total_tokens / page_size pages (resolved in core_new) */
    int32_t chunked_prefill_size;    /* --chunked-prefill-size; -1: no chunking */
    uint32_t max_prefill_tokens;     /* --max-prefill-tokens */
    uint32_t max_running_requests;   /* --max-running-requests */
    uint32_t long_prefill_token_threshold; /* --long-prefill-token-threshold (vllm scheduler); 0: off */
    uint32_t context_length;         /* --context-length: longest prompt+output a request may have; 0: no limit */
    core_policy policy;              /* --schedule-policy */
    double schedule_conservativeness;/* --schedule-conservativeness */
    bool disable_radix_cache;        /* --disable-radix-cache */
    bool enable_mixed_chunk;         /* --enable-mixed-chunk */
    bool enable_priority_scheduling; /* --enable-priority-scheduling: fcfs and lof put each request's
                                        priority first (SGLang's; vLLM's --scheduling-policy priority) */
    bool low_priority_values_first;  /* --schedule-low-priority-values-first (vLLM's order); else
                                        higher values first (SGLang's default) */
    core_preset preset;              /* --scheduler */
    core_evict evict;                /* --radix-eviction lru|lfu|slru */
    uint64_t seed;                   /* --seed: random policy, Lua math.random */
    uint32_t spec_steps;             /* --speculative-num-steps: draft forward passes per step (0: off) */
    uint32_t spec_draft_tokens;      /* --speculative-num-draft-tokens: tokens verified per decode,
                                        the sampled one included; 0: spec_steps + 1. A decode
                                        asks for spec_draft_tokens - 1 extra slots. */
    uint32_t spec_disable_batch_size;/* --speculative-disable-by-batch-size; 0: never */
    const char *lua_policy_path;     /* --policy-script: file defining policy(waiting, state);
                                        must stay valid until core_new, which copies it */
    void *lua_state;                 /* or: a lua_State* owned by the caller ... */
    int lua_policy_ref;              /* ... and a registry reference to the policy function */
    uint64_t policy_max_instructions;/* --policy-max-instructions: Lua VM instructions per call */
    uint64_t policy_max_memory;      /* --policy-max-memory: bytes a --policy-script's Lua state may hold */
    double policy_max_seconds;       /* --policy-max-seconds: wall time one policy call may take, measured
                                        with core_hooks.guard_clock (none given: no such limit) */
    uint32_t policy_window;          /* --policy-window: waiting requests shown to a Lua policy */
    uint32_t policy_max_failures;    /* --policy-max-failures: failures in a row that trip the policy's
                                        circuit breaker (engine/core/lua_box.h); 0: never */
    bool enable_lora;                /* --enable-lora: the adapter rule from the first step (else from
                                        the first request that names an adapter) */
    uint32_t max_loras_per_batch;    /* --max-loras-per-batch (vLLM: --max-loras): distinct LoRA adapters
                                        a batch may hold, and the GPU's adapter slots; the sglang
                                        scheduler counts the base model as one, vllm does not (8) */
    core_lora_evict lora_eviction;   /* --lora-eviction-policy: which adapter slot a load takes */
    bool enable_hierarchical_cache;  /* --enable-hierarchical-cache: a host tier below the GPU pool */
    double hicache_ratio;            /* --hicache-ratio: host tier pages per GPU pool page (2) */
    double hicache_size;             /* --hicache-size: host tier in GB (1e9 B) per GPU; > 0 overrides the
                                        ratio and needs kv_bytes_per_token */
    core_hicache_write hicache_write_policy; /* --hicache-write-policy */
    double kv_bytes_per_token;       /* not a knob: the caller's KV bytes per token on one GPU (what
                                        --hicache-size divides); 0: not known */
    struct kv_tier *hicache_storage; /* not a knob: a storage tier below the host one (SGLang's L3, Mooncake's
                                        store), the caller's, which other cores may share; NULL: none */
} core_config;

/* SGLang-like defaults: page 16, 16384 pages, 8192 chunk, 16384 prefill tokens,
 * 256 running, fcfs, lru, conservativeness 1, Lua limits 10M instructions,
 * 64 MiB and a window of 256 requests. */
void core_config_default(core_config *cfg);

/* Sets one knob by its CLI name without dashes ("chunked-prefill-size"; "_"
 * is accepted for "-" so Lua keys work). Boolean knobs take NULL, "1",
 * "true", "0" or "false". Returns 1 if set, 0 if the name is not a core knob,
 * -1 with a message naming the knob on a bad value. */
int core_config_set(core_config *cfg, const char *name, const char *value, rh_err *e);
/* 1 if the knob takes a value, 0 if it is a boolean flag, -1 if not a core knob:
 * tells a command-line front whether to consume the next argument. */
int core_config_takes_value(const char *name);
/* The knob `name` sets, by our name ("max-num-seqs" -> "max-running-requests",
 * "enable-prefix-caching" -> "disable-radix-cache"); NULL: not a knob. */
const char *core_config_canonical(const char *name);
/* One line per knob, "  --name VALUE   meaning (default)", for --help texts. */
const char *core_config_help(void);
/* Rejects impossible combinations (zero budgets, a pool smaller than a page...). */
int core_config_validate(const core_config *cfg, rh_err *e);
/* Calls fn(name, value) for every knob with its current value as text, in a
 * fixed order (for trace headers and reports). core_config_set accepts every
 * pair back. Pointers are valid only during the call. */
void core_config_foreach(const core_config *cfg, void (*fn)(void *ctx, const char *name, const char *value),
                         void *ctx);

typedef struct core core;
typedef struct core_req core_req;

/* A request as handed to the core. Page keys for the prefix cache come from
 * the prompt tokens when given (a chain xxHash of each full page), else from
 * the trace's block hashes (each block of block_size tokens maps onto
 * block_size / page_size page keys, chained so equal keys imply equal
 * prefixes), else the request shares nothing. The core copies what it needs. */
typedef struct core_req_desc {
    uint64_t id;
    uint32_t prompt_len;              /* >= 1 */
    uint32_t max_new_tokens;          /* >= 1: output length; finishes after this many tokens */
    const int32_t *prompt_tokens;     /* may be NULL */
    const uint64_t *block_hashes;     /* may be NULL */
    uint32_t n_block_hashes;
    uint32_t block_size;
    int32_t priority;                 /* with enable_priority_scheduling: its place in the queue (0: none) */
    uint32_t adapter;                 /* LoRA adapter (0: the base model); its prefix-cache keys are
                                         its own, as SGLang's and vLLM's caches key by adapter */
    void *user;                       /* the caller's per-request data, handed back in batches and events */
    /* The K and V of the prompt arrive with the request (the decode server
     * of a prefill-decode pair; SGLang scheduler only). prompt_len then
     * counts the first output token too, which the prefill side sampled:
     * admission takes pages for the prompt_len - 1 tokens that arrived and
     * computes nothing, and the request decodes from its first step (that
     * decode computes the first output token's K and V, as after a local
     * prefill) for max_new_tokens more. A retracted one recomputes as any. */
    bool kv_ready;
} core_req_desc;

/* One sequence of a batch. Positions start..start+n_new-1 are computed; their
 * K and V go into `pages` (a page table of page ids, covering at least
 * start + n_new tokens). A page table may change between steps (a page
 * found already cached is swapped for the shared copy); positions below
 * `start` always hold valid K and V. */
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
    uint32_t decode_tokens; /* sum of n_new over decodes (1 + draft slots each) */
    uint32_t spec_steps;    /* draft forward passes before this step's verify (0: no drafts) */
    uint64_t index;         /* step number, as in the step record */
    uint32_t n_adapters;    /* distinct LoRA adapters among the sequences (the base not counted) */
    uint32_t adapter_loads; /* of which loaded into a slot for this step (engine/core/lora.c) */
    uint32_t adapter_tokens;/* tokens computed with an adapter */
    /* The host tier (--enable-hierarchical-cache): prompt tokens whose KV
     * loads back from host memory for this step, layer by layer beside the
     * forward, and tokens the evictions that made room while forming it
     * copied to the host and waited for (write_back). */
    uint32_t load_tokens, writeback_tokens;
    uint32_t backup_tokens; /* copied GPU -> host in the background since the previous step */
    uint32_t storage_tokens;/* of load_tokens, fetched from a storage tier into the host first */
    /* The copies between GPU pages and host-tier slots (0 .. host pages) to
     * run, in this order, before the batch's forward: those the previous
     * step's completion decided (backups) and this step's (write-backs,
     * load-backs). Valid until core_complete. */
    const struct kv_copy *copies;
    uint32_t n_copies;
    bool copies_lost;       /* memory ran out logging them: the host tier's data cannot be trusted */
} core_batch;

/* What the runner reports per sequence of a batch (NULL results means: every
 * sampling sequence produced exactly one token, no drafts, no stop). Results
 * of sequences that do not sample are ignored. */
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
    uint32_t cached_tokens; /* tokens matched in the prefix cache at this admission */
    uint32_t cached_host;   /* of which loaded back from the host tier (SGLang's cached_tokens_details.host) */
    uint32_t cached_storage;/* of those, fetched from storage into the host first */
    uint32_t spec_proposed, spec_accepted;   /* this step, for CORE_EV_TOKENS */
    uint32_t retractions;   /* times this request was retracted so far */
    uint8_t finish;         /* enum tr_finish, for CORE_EV_FINISHED and CORE_EV_ABORTED */
} core_event;

typedef struct core_hooks {
    void *ctx;
    void (*on_step)(void *ctx, const tr_step *step);     /* after each core_complete */
    void (*on_event)(void *ctx, const core_event *ev);
    /* A warning the caller should show once (a Lua policy error with its file
     * and line, after which that step fell back to fcfs). May be NULL. */
    void (*on_message)(void *ctx, const char *msg);
    /* The clock of the Lua policy's wall-time guard (--policy-max-seconds),
     * seconds, monotonic; NULL: no guard. Only a watchdog reads it: no
     * scheduling decision depends on it, so the core stays clock-free. */
    double (*guard_clock)(void *ctx);
} core_hooks;

core *core_new(const core_config *cfg, const core_hooks *hooks, rh_err *e);
void core_free(core *c);

/* Whether a request of these lengths can ever run on this core; what a
 * server refuses it for when it cannot (an error to its client, the rest
 * served on: SGLang answers such a request with an error and goes on). */
typedef enum core_fit {
    CORE_FITS = 0,
    CORE_EMPTY,             /* no prompt token, or no output token asked for */
    CORE_OVER_CONTEXT,      /* prompt + output longer than --context-length */
    CORE_OVER_POOL,         /* prompt + output more than the whole KV pool holds */
} core_fit;
/* CORE_FITS, or the reason with a message naming request id and the lengths. */
core_fit core_check_fit(const core *c, uint64_t id, uint32_t prompt_len, uint32_t max_new_tokens, rh_err *e);

/* Queues a request. Fails (NULL) if it can never run (core_check_fit), or
 * its id is already queued or running. */
core_req *core_add(core *c, const core_req_desc *d, double now, rh_err *e);
/* Removes a request from any state and frees its pages. 0, or -1 if unknown.
 * Allowed while a batch holding the request is in flight: its sequence is
 * then skipped by core_complete. */
int core_abort(core *c, uint64_t id, double now);

/* Forms the next batch. Returns the number of sequences (0: nothing to run,
 * or a batch is already in flight). */
uint32_t core_schedule(core *c, double now, core_batch *out);
/* Commits a batch formed by core_schedule. -1 with a message on a result that
 * breaks the contract (accepted > proposed > n_spec) or a batch that is not
 * the one in flight; nothing is committed then. */
int core_complete(core *c, const core_batch *b, const core_seq_result *results, double now, rh_err *e);

typedef struct core_stats {
    uint32_t waiting, running;
    uint64_t pages_total, pages_free, pages_used, pages_cached;  /* used: held by requests; cached: only by the radix tree */
    uint64_t steps, retractions, finished, aborted;
    uint64_t prompt_tokens, cached_tokens;                       /* cumulative over first admissions, for the hit rate */
    uint64_t evicted_pages;                                      /* cumulative */
    uint64_t adapter_loads;                                      /* cumulative LoRA slot loads */
    /* The host tier, cumulative: of cached_tokens those loaded back (first
     * admissions); every load-back; pages copied GPU -> host in the
     * background and while an eviction waited; pages evicted from the GPU
     * that stayed on the host; and the tier's size and use now (pages). */
    uint64_t host_cached_tokens, load_back_tokens, backup_pages, writeback_pages, demoted_pages;
    /* A storage tier (core_config.hicache_storage): of host_cached_tokens those fetched from storage
     * first (first admissions); every fetch; pages this core wrote to storage. */
    uint64_t storage_cached_tokens, storage_fetched_tokens, stored_pages;
    uint64_t host_pages_total, host_pages_used;
    uint64_t policy_errors;                                      /* Lua calls that fell back to fcfs */
    uint64_t policy_trips, policy_skipped;                       /* the breaker's trips, and the calls it
                                                                    did not make (fcfs) */
    double new_token_ratio;
} core_stats;

void core_get_stats(const core *c, core_stats *s);
/* The first Lua policy error ("file:line: message"), or NULL while every
 * policy call has succeeded. The core falls back to fcfs for a failed step;
 * whether a run goes on is its driver's call (the simulator stops unless
 * --policy-fallback; a server keeps serving). */
const char *core_policy_error(const core *c);
/* The LoRA adapters in GPU slots now (ids into ids[0..cap)); how many there are. */
uint32_t core_lora_resident(const core *c, uint32_t *ids, uint32_t cap);
/* The resolved configuration (pool size in pages, strings copied). */
const core_config *core_get_config(const core *c);
/* Every invariant (free + used + cached = total, reference and lock counts,
 * radix consistency, no request in two queues). 0, or -1 and what broke. */
int core_check(const core *c, rh_err *e);
/* Drops every cached prefix page when nothing is queued or running
 * (SGLang's /flush_cache): the pages freed, or -1 when busy. */
int64_t core_flush_cache(core *c);
bool core_idle(const core *c);          /* nothing waiting or running */

#endif
