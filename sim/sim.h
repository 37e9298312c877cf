/* sim.h — trace replay on a virtual clock: the simulator.
 *
 * Drives engine/core (the same scheduler the engine runs) with a virtual
 * clock: requests arrive from a trace, each step's batch is priced by a cost
 * model, the clock advances by that price, and the step's tokens are
 * committed. Output is what a recorded engine run holds — every request with
 * its TTFT and token times, every step record — plus the metrics summary and
 * time series. Deterministic for a given seed.
 *
 * A cluster (replicas > 1): identical replicas behind engine/router's core
 * on the same virtual clock; each request is routed when it is sent and
 * reaches its replica network_delay_s later. One replica is the single
 * server, byte for byte.
 *
 * Arrivals: open loop (the trace's timestamps divided by rate_scale), or
 * closed loop with max_concurrency clients (a request is sent at its arrival
 * time or when a client frees up, whichever is later; latencies count from
 * the send, as a benchmark client measures them). */
#ifndef RH_SIM_H
#define RH_SIM_H

#include <stdint.h>

#include "engine/core/core.h"
#include "engine/router/router.h"
#include "engine/speculative/hist.h"
#include "sim/cost/cost.h"
#include "traces/metrics/metrics.h"
#include "traces/trace.h"

/* How many draft tokens a verify accepts. A chain accepts each next draft
 * with probability alpha; a model's drafts stop at its depth
 * (--speculative-num-steps). An EAGLE tree of width topk holding k nodes
 * (the k best: up to topk at each depth, shallow first) goes one deeper
 * when one of the b children of its accepted node matches, 1 − (1 − alpha)^b,
 * b being that depth's nodes over the previous depth's. */
typedef struct sim_accept_model {
    double alpha;            /* per-token acceptance probability (used when hist_n == 0) */
    uint32_t hist_n;         /* histogram of accepted lengths 0..hist_n-1, from a recorded trace */
    double hist[SPEC_HIST_BINS];
} sim_accept_model;

typedef struct sim_config {
    core_config core;        /* every scheduler knob */
    double rate_scale;       /* arrivals at timestamp / rate_scale; default 1 */
    uint32_t max_concurrency;/* 0: open loop */
    uint32_t tp;             /* tensor-parallel size for the cost model; 0: the cost file's own */
    int spec_draft_model;    /* 1: drafting costs draft forwards (DRAFT, EAGLE, MTP); 0: n-gram lookup, free */
    /* --speculative-eagle-topk: a model-drafted tree's width (1: a chain of
     * --speculative-num-steps drafts, and then, as SGLang sets it, steps + 1
     * tokens verified); each draft pass runs topk tokens per request. */
    uint32_t spec_topk;
    bool max_running_set;    /* --max-running-requests was given (else SGLang's 48 under model-drafted speculation) */
    bool chunk_set;          /* --chunked-prefill-size was given (else the server's default for the GPU) */
    sim_accept_model accept;
    metrics_slo slo;
    uint64_t seed;           /* acceptance draws */
    uint32_t series_points;  /* time-series resolution for results; default 2000 */
    int progress;            /* draw a progress bar */
    const char *out_path;    /* write the simulated run here (NULL: don't) */
    int token_times;         /* 1: store every token's time in the output file (default 1) */
    bool request_itl;        /* fill sim_request_result.itl_median (keeps every token's time meanwhile) */
    bool policy_fallback;    /* a Lua policy error falls back to fcfs and is counted (summary.policy_errors);
                                false: the run stops with the policy's message */
    /* Without core.max_total_tokens, a cost model that knows its GPU sizes
     * the pool from memory (sim/pool.h); 0: the servers' defaults. Without
     * core.context_length, its model's context length holds. */
    double mem_fraction_static, gpu_memory_utilization;
    /* A cluster: replicas identical servers (0 or 1: one server), the
     * router's policy and thresholds between them, and the network delay a
     * request takes to reach the replica it is routed to (s). */
    uint32_t replicas;
    router_config router;
    double network_delay_s;
    /* Prefill-decode disaggregation (pd_prefill > 0): pd_prefill prefill
     * replicas (the router's policy picks among them) and `replicas` decode
     * replicas (least outstanding), each pool with its own tensor-parallel
     * size (0: tp) and KV pool. A request prefills in the one, its KV moves
     * over the link (latency + bytes / bandwidth per GPU, one transfer at a
     * time per prefill replica), and it decodes in the other; its first
     * token reaches the client when the transfer is done. KV bytes per token
     * per GPU: the cost model's, unless pd_kv_bytes_per_token says. */
    uint32_t pd_prefill;
    uint32_t pd_prefill_tp, pd_decode_tp;
    double pd_link_Bps, pd_link_latency_s;
    double pd_kv_bytes_per_token;
    /* How the server runs the model (SGLang's flags, sim/cost/cost.h's
     * cost_serving): the fields a flag set (SIM_SERVE_* bits in
     * serve_set) laid over the cost file's own when the run starts, into
     * `serving` (what every step is priced with). */
    unsigned serve_set;
    cost_serving serve_flags, serving;
    uint32_t serve_dp_size;      /* --dp-size (serve_flags.dp says whether --enable-dp-attention is on) */
    /* LoRA: the adapters' rank when --max-lora-rank is not given and the
     * trace names adapters (or --enable-lora): the header's adapter.rank,
     * else 16 (vLLM's default --max-lora-rank); set when a run starts. */
    uint32_t lora_rank_header;
    bool trace_adapters;         /* some request of the trace runs with an adapter */
    double spec_accept_length;   /* --speculative-accept-length: mean tokens a verify commits; 0: off */
    /* A storage tier below the replicas' host tiers (--hicache-storage-backend mooncake|file: SGLang's
     * L3; one store the whole cluster shares, as Mooncake's), of storage_gb GB (pages of the KV's bytes
     * per token), read over a link of storage_Bps with storage_latency_s a fetch. */
    bool hicache_storage;
    double storage_gb, storage_Bps, storage_latency_s;
} sim_config;

enum {
    SIM_SERVE_EP = 1, SIM_SERVE_DP = 2, SIM_SERVE_DP_SIZE = 4, SIM_SERVE_A2A = 8, SIM_SERVE_DEEPEP_MODE = 16,
    SIM_SERVE_TBO = 32, SIM_SERVE_IMBALANCE = 64, SIM_SERVE_GRAPH_BS = 128, SIM_SERVE_OVERLAP = 256,
    SIM_SERVE_DENSE_TP = 512, SIM_SERVE_REDUNDANT = 1024, SIM_SERVE_LORA_RANK = 2048
};
/* cfg->serving from the cost model's own and the flags, checked against
 * what the cost model can price. 0, or -1 naming the flag. */
int sim_serving_resolve(sim_config *cfg, const cost_model *cost, rh_err *e);

/* A KV link by name ("nvlink", "ib", "rdma"): bytes/s per GPU each way and
 * the latency of one transfer; 0 when known, -1 for another name. */
int sim_pd_link(const char *name, double *Bps, double *latency_s);

void sim_config_default(sim_config *c);
/* Sets a simulator or core knob by CLI name (1 set, 0 unknown, -1 bad value). */
int sim_config_set(sim_config *c, const char *name, const char *value, rh_err *e);
/* 1 when the knob takes a value, 0 for a boolean (given bare), -1 unknown. */
int sim_config_takes_value(const char *name);
const char *sim_config_help(void);
/* The scheduler knobs a recording's header names (a rehearse serve or
 * replay recording lists every one it ran with); other keys are ignored. */
void sim_config_from_header(sim_config *c, const tr_header *h);

/* Scheduler knobs a command took as flags, kept to be laid over a
 * recording's header once the trace is read: defaults, then the header's
 * knobs, then these (flags win). */
#define SIM_MAX_KNOBS 64
typedef struct sim_knobs {
    const char *kv[SIM_MAX_KNOBS][2];   /* name (in names[]), borrowed value */
    char names[SIM_MAX_KNOBS][64];      /* copied: argument parsers hand names out in one reused buffer */
    int n;
} sim_knobs;
/* Checks the knob against c (so a bad one is refused at once) and keeps it.
 * 0, or -1 with the message. */
int sim_knobs_take(sim_knobs *k, sim_config *c, const char *name, const char *value, rh_err *e);
/* c = defaults, then h's knobs, then k's. */
void sim_config_from_header_and_flags(sim_config *c, const tr_header *h, const sim_knobs *k);

/* Step-level time series, binned in time so a plot has series_points rows. */
typedef struct sim_series {
    uint32_t n;
    double *t;               /* bin start, s */
    double *batch_size;      /* mean sequences per step in the bin */
    double *prefill_tokens;  /* mean prefill tokens per step */
    double *decode_tokens;   /* mean decode tokens per step */
    double *kv_use;          /* mean pages used / total */
    double *waiting;         /* mean waiting requests */
    double *running;         /* mean running requests */
} sim_series;

/* Per-request outcomes in trace order (for CDFs and per-request plots). */
typedef struct sim_request_result {
    uint64_t id;
    double send;             /* s, when it entered the server */
    double ttft, e2e;        /* s; -1 if it never produced a token */
    uint32_t input_len, output_len, cached_tokens, retractions;
    double itl_median;       /* s, with sim_config.request_itl and 2+ tokens; else 0 */
    uint32_t replica;        /* which served it (0 with one server; the decode replica under PD) */
    double kv_transfer_s;    /* PD: its KV's trip from the prefill to the decode replica, queueing included */
} sim_request_result;

/* One replica of a cluster run: the metrics of the requests it served and
 * the steps it ran, under the whole run's names. */
typedef struct sim_replica_result {
    metrics_summary summary;
    sim_series series;
    uint64_t routed, steps;  /* requests the router sent it; steps it ran */
    double busy_s;           /* virtual seconds it spent in steps */
    uint32_t group;          /* its group (sim_run_groups; 0 for sim_run's identical replicas) */
    const char *group_name;  /* borrowed from the group; "" when it has none */
    uint32_t gpus;           /* the GPUs its cost model prices it on */
} sim_replica_result;

typedef struct sim_result {
    metrics_summary summary;
    sim_series series;
    uint64_t n_requests;
    sim_request_result *requests;
    double wall_s;           /* real seconds the simulation took */
    uint64_t pool_tokens;    /* the KV pool the run had */
    char spec_note[200];     /* a speculative setting changed as SGLang changes it ("" when none) */
    char pool_how[256];      /* how it was sized from GPU memory ("" when given or not known) */
    char defaults_how[200];  /* the server's defaults taken for the GPU ("" when given or not known) */
    char refusal[256];       /* the first refused request's reason ("" when none was):
                                summary.failed_context_length and failed_kv_pool count them */
    /* A cluster run (sim_config.replicas > 1); else 0 and NULL. */
    uint32_t n_replicas;
    sim_replica_result *replicas;
    double imbalance_requests;   /* most requests on one replica / the mean (1: even) */
    double imbalance_busy;       /* most busy time on one replica / the mean */
    uint32_t pd_prefill;         /* PD: replicas[0..pd_prefill) prefill, the rest decode; else 0 */
    uint32_t gpus;               /* every replica's GPUs (tensor-parallel sizes summed) */
    double kv_transfer_mean_s;   /* PD: mean KV transfer per request */
    uint64_t router_errors;      /* --router lua with --policy-fallback: picks a script error left to
                                    least-outstanding (without the flag the first stops the run) */
    char router_error[300];      /* the first one's message ("" when none) */
    uint64_t router_trips;       /* the script's breaker tripped (engine/core/breaker.h) */
} sim_result;

/* Runs one simulation. The trace is not modified. cfg's replicas and PD
 * knobs make the groups sim_run_groups runs: `replicas` like servers, or a
 * prefill pool and a decode pool. */
int sim_run(const sim_config *cfg, const tr_trace *trace, const cost_model *cost, sim_result *out, rh_err *e);

/* A cluster of unlike replicas (a CLUSTER.json, sim/cluster.h): groups of
 * `count` like replicas, each group with its own knobs and cost model (its
 * GPU, model, TP size, scheduler, speculation, KV pool). A group is whole
 * servers, or one side of prefill-decode disaggregation; a cluster that has
 * one side has both and nothing else. */
typedef enum sim_role { SIM_ROLE_BOTH = 0, SIM_ROLE_PREFILL, SIM_ROLE_DECODE } sim_role;

typedef struct sim_group {
    uint32_t count;          /* >= 1 */
    sim_role role;
    /* The group's knobs. Only the server's are read from here (core, tp,
     * speculation, memory fractions, pd_kv_bytes_per_token); the run's own
     * (arrivals, seed, router, network, link, SLOs, output, series) come
     * from sim_run_groups' run_cfg. */
    sim_config cfg;
    const cost_model *cost;
    const char *name;        /* for reports ("h100-tp2"); NULL: none */
} sim_group;

/* Runs the cluster: replicas numbered group by group in order, the prefill
 * groups first under PD. The router (run_cfg->router) picks among the
 * whole servers, or among the prefill replicas; decode replicas are the
 * least outstanding. */
int sim_run_groups(const sim_config *run_cfg, const sim_group *groups, uint32_t n_groups, const tr_trace *trace,
                   sim_result *out, rh_err *e);
void sim_result_free(sim_result *r);

/* One server's knobs as a run settles them before its first step: the tp
 * size checked against the cost model, the serving flags resolved, the
 * speculation's shape, and, from the GPU's memory where the cost model
 * knows it, the chunk, the KV pool (core.max_total_tokens) and max running
 * requests the server would take by default. Notes (defaults taken, how the
 * pool was sized) go to notes' spec_note, pool_how and defaults_how. -1
 * with the message when the model does not fit. */
int sim_prepare_server(sim_config *c, const cost_model *cost, sim_result *notes, rh_err *e);

#endif
