/* plan.h — the cheapest deployment that meets the SLOs: a search over
 * simulations, not a second model.
 *
 * A candidate is one deployment of one model: a GPU type, a tensor-parallel
 * size, a number of replicas (or a prefill pool and a decode pool), a
 * chunked-prefill size, a max running requests, speculative steps and a
 * router policy. Each one left is a `sim` of the user's trace, run in a
 * fork pool. The search, cheapest work first:
 *   1. memory: a candidate whose weights leave no KV pool is refused, with
 *      the numbers (sim/pool.h sizes the pool as the server would);
 *   2. capacity: one whose replicas cannot keep up with the trace's tokens
 *      even at their best rates (the cost model's own step times at the
 *      candidate's largest batches) is pruned without a simulation;
 *   3. successive halving: every survivor is simulated on a prefix of the
 *      trace, the best 1/eta go on to a prefix eta times longer, the last
 *      rung is the whole trace.
 * Ranking: candidates that meet every SLO first, cheapest first (the
 * smaller worst margin breaks ties), then the rest by how far they miss.
 * Deterministic: the same question gives the same plan, whatever the
 * number of workers and whether it was resumed.
 *
 * SLOs: with quantile q, a candidate meets them when the q-quantile of TTFT
 * and of TPOT over every request are within them (a request that never
 * got its first token counts as over every bound); with an attainment a,
 * when at least a of the requests meet both. */
#ifndef RH_SIM_PLAN_H
#define RH_SIM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/cost/cost.h"
#include "sim/sim.h"
#include "traces/trace.h"
#include "util/err.h"

#define PLAN_MAX_LIST 16

/* How a replica's GPUs share a mixture-of-experts model beyond tensor
 * parallelism (SGLang's --ep-size and --enable-dp-attention): bits of a
 * candidate's `parallel`. Both need tp >= 2; EP needs experts. */
enum { PLAN_PAR_EP = 1, PLAN_PAR_DP_ATTENTION = 2 };

typedef struct plan_gpu {
    char name[48];           /* the GPU preset's name, "h100-sxm" */
    double usd_per_gpu_hour;
    const cost_model *cost;  /* the model on this GPU (a roofline, or a fitted cost file); borrowed */
    const char *cost_text;   /* its JSON, for prediction intervals (NULL: none); borrowed, or text */
    char text[512];          /* the preset roofline's JSON, when plan_gpus_load made it */
} plan_gpu;

/* What the search ranges over; each list in the order given. */
typedef struct plan_space {
    plan_gpu *gpus;
    int n_gpus;
    uint32_t tp[PLAN_MAX_LIST];
    int n_tp;
    uint32_t max_replicas;           /* 1..max_replicas replicas (or prefill + decode replicas) */
    uint32_t max_gpus;               /* tp x replicas at most; 0: no bound */
    int32_t chunk[PLAN_MAX_LIST];    /* --chunked-prefill-size values */
    int n_chunk;
    uint32_t max_running[PLAN_MAX_LIST];
    int n_max_running;
    uint32_t spec_steps[PLAN_MAX_LIST];   /* 0: speculation off */
    int n_spec;
    char spec_algorithm[16];         /* the drafter for spec_steps > 0 ("EAGLE", "NEXTN", ...) */
    uint8_t parallel[4];             /* PLAN_PAR_* combinations: 0 (plain TP), EP, DP attention, both */
    int n_parallel;
    int routers[PLAN_MAX_LIST];      /* router_policy values; matter only with 2+ replicas */
    int n_routers;
    /* Prefill-decode splits as prefill:decode ratios (0:0 for colocated
     * replicas): a candidate with R replicas and ratio p:d has
     * round(R·p/(p+d)) prefill replicas, at least 1 of each. */
    uint32_t pd[PLAN_MAX_LIST][2];
    int n_pd;
} plan_space;

typedef struct plan_slo {
    double ttft_ms, tpot_ms;         /* > 0 */
    double quantile;                 /* in (0, 1): the quantile that must be within them */
    double attainment;               /* > 0: instead, the fraction of requests within both */
} plan_slo;

/* One simulation of a candidate on `requests` requests of the trace at
 * `rate_scale`. */
typedef struct plan_eval {
    uint32_t requests;
    double rate_scale;
    double ttft_p50, ttft_p99, tpot_p50, tpot_p99;   /* ms, over the requests that got their tokens */
    double ttft_q, tpot_q;           /* ms at the SLO's quantile over every request (inf: too many failed) */
    double attainment;               /* fraction of every request within both SLOs */
    double goodput;                  /* req/s within both SLOs */
    double throughput;               /* completed req/s */
    uint64_t completed, failed;
    double sim_s;                    /* wall seconds the simulation took (not part of the plan) */
    /* With intervals: the p95 over the runs of the SLO's quantile of TTFT
     * and TPOT (0: not bounded). plan_judge holds the SLOs to them. */
    double ttft_hi, tpot_hi;
} plan_eval;

enum plan_state { PLAN_NEW = 0, PLAN_REFUSED_MEMORY, PLAN_PRUNED_CAPACITY, PLAN_EVALUATED };

typedef struct plan_cand {
    uint16_t gpu;                    /* index into the space's gpus */
    uint32_t tp, replicas;           /* replicas: whole servers, or prefill + decode */
    uint32_t prefill;                /* prefill replicas (0: colocated) */
    int32_t chunk;
    uint32_t max_running, spec_steps;
    uint8_t parallel;                /* PLAN_PAR_* bits (0 for tp 1) */
    int router;
    uint32_t gpus;
    double usd_hour;
    int state;
    int rung;                        /* the last rung it was evaluated on (-1: none) */
    plan_eval ev;                    /* that evaluation */
    double load;                     /* the capacity bound's busy fraction (> 1: cannot keep up) */
    double score;                    /* the custom objective's, at its last evaluation (NAN without one) */
    uint64_t pool_tokens;            /* its KV pool */
} plan_cand;

/* Where a candidate stands against the SLOs. */
typedef struct plan_verdict {
    bool ok;
    double margin_ttft, margin_tpot; /* 1 − value / SLO (quantile mode) or attainment − target; < 0: missed */
    double worst;                    /* the smaller of the two */
} plan_verdict;

typedef struct plan_opts {
    sim_config base;                 /* every other knob, as `rehearse sim` takes it */
    plan_slo slo;
    uint32_t rungs;                  /* successive-halving rungs; the last is the whole trace. 0: enough for
                                        the candidates to come down to `keep`, ceil(log_eta(n / keep)) */
    uint32_t eta;                    /* each rung keeps 1/eta of its candidates (>= 2) */
    uint32_t keep;                   /* but at least this many (the table's rows) */
    uint32_t min_requests;           /* the first rung's prefix has at least this many requests */
    int workers;                     /* fork pool size; 0: the processors */
    const char *resume_dir;          /* evaluations kept here, and read back on a rerun; NULL: none */
    const char *question;            /* what identifies this plan in resume_dir (its question.txt) */
    bool rate_search;                /* per GPU type, the highest rate its best candidate sustains */
    /* Prediction intervals (sim/intervals.h) for the `keep` best on the
     * whole trace: interval_runs runs each; a candidate meets an SLO only
     * if the p95 of its quantile does. step_noise < 0: each GPU's cost
     * file's own (a fit's), else this sigma for all. 0 runs: none. */
    uint32_t interval_runs;
    double step_noise;
    /* A custom objective (Lua's rehearse.plan{objective = f}): each
     * simulated candidate's score, lower first, NaN for one not acceptable;
     * halving keeps the best scores. NULL: the cheapest that meets the SLOs. */
    double (*objective)(void *ctx, const plan_space *sp, const plan_cand *c);
    void *objective_ctx;
    int progress;                    /* progress bars */
    /* Jobs instead of simulations (--emit-jobs): with resume_dir, an
     * evaluation the folder lacks is not run but written down as a job
     * (jobs.c), and plan_run returns 1 with the round it wrote. */
    bool emit_jobs;
} plan_opts;

void plan_opts_default(plan_opts *o);

/* Per GPU type: its best candidate and the highest rate it sustains. */
typedef struct plan_gpu_rate {
    int best;                        /* candidate index; -1: none meets the SLOs */
    double max_rate_scale;           /* the highest rate scale found within the SLOs */
    double max_rate;                 /* req/s at it */
} plan_gpu_rate;

typedef struct plan_result {
    plan_cand *c;
    uint32_t n;
    uint32_t refused_memory, pruned_capacity;
    uint32_t rung_requests[8], rung_candidates[8];   /* per rung: prefix length and candidates simulated */
    uint32_t backfilled;             /* dropped on a prefix where they met the SLOs, simulated on the whole
                                        trace after all when cheaper ones missed there */
    uint32_t *ranked;                /* the candidates simulated on the whole trace, best first */
    uint32_t n_ranked;
    plan_gpu_rate *per_gpu;          /* n_gpus entries */
    double trace_rate;               /* the trace's arrival rate at rate_scale, req/s */
    uint32_t dropped_too_long;       /* requests left out: longer than the model's context */
    uint64_t simulations, resumed;   /* simulations run, and evaluations read back from resume_dir */
    uint32_t bounded;                /* candidates given prediction intervals */
    double sim_cpu_s;                /* summed wall seconds of the simulations run */
    char first_refusal[256];         /* the memory refusal of the first refused candidate */
    uint32_t jobs_round, jobs;       /* with emit_jobs, when plan_run returned 1: the round written, its jobs */
} plan_result;

/* Runs the plan on trace (requests longer than the model's context left
 * out and counted). 0, or -1 with the message; with emit_jobs, 1 when it
 * stopped at a round of jobs (out holds only jobs_round and jobs then). */
int plan_run(const plan_opts *o, const plan_space *sp, const tr_trace *trace, plan_result *out, rh_err *e);
void plan_result_free(plan_result *r);

/* The default space: TP 1, 2, 4, 8, 1..16 replicas within 64 GPUs, chunked
 * prefill 2048, 4096, 8192, max running 64..512, speculation off or 3
 * EAGLE steps, the cache-aware router, colocated replicas; no GPUs yet. */
void plan_space_default(plan_space *sp);
/* The model on each named GPU (a roofline of the presets) at its price in
 * PRICES.json: gpus[i] and costs[i] (the caller frees costs with
 * cost_free, also after a failure: the ones made are set, the rest NULL). */
int plan_gpus_load(const char *model, char names[][48], int n, const char *prices, plan_gpu *gpus,
                   cost_model **costs, rh_err *e);

/* PRICES.json (prices.c): the price of one GPU type, or the GPU types it
 * prices (in the file's order; at most max). -1 with the file and field. */
int plan_price_of(const char *path, const char *gpu, double *usd, rh_err *e);
int plan_price_names(const char *path, char names[][48], int max, rh_err *e);

/* A plan on a cluster, round by round (jobs.c). A round is the
 * evaluations one step of the search needs at once (a rung, a batch of
 * the dropped, a step of the rate search); plan_run with emit_jobs writes
 * the round it lacks into DIR/jobs/:
 *   round-K.tsv       one evaluation a line (candidate, requests, rate, key)
 *   round-K.sbatch    a Slurm array, one task a shard of the lines
 *   round-K.parallel  the same shards, one command a line (GNU parallel)
 *   pending           "K SHARDS": the round whose results are awaited
 * Each shard runs `SELF plan --job DIR --round K --shard I/SHARDS` from
 * CWD and writes DIR/results/round-K-shard-I.jsonl whole (a rename), so a
 * killed task leaves nothing half-written. Collecting folds a round's
 * results into DIR/evals.jsonl in the round's line order, so the plan
 * that goes on from there is the one a single machine makes. */
int plan_jobs_scripts(const char *dir, uint32_t round, uint32_t n_jobs, uint32_t shards, const char *self,
                      const char *cwd, uint32_t *shards_out, rh_err *e);
/* The lines of round `round` with index ≡ shard (mod shards), evaluated
 * here; *done of them. */
int plan_jobs_run_shard(const plan_opts *o, const plan_space *sp, const tr_trace *trace, const char *dir,
                        uint32_t round, uint32_t shard, uint32_t shards, uint32_t *done, rh_err *e);
/* The pending round: 1 with round and shards, 0 when none, -1 unreadable. */
int plan_jobs_pending(const char *dir, uint32_t *round, uint32_t *shards, rh_err *e);
/* Folds the pending round's results into DIR/evals.jsonl and clears it;
 * -1 naming the shards whose results are missing (nothing folded). */
int plan_jobs_collect(const char *dir, uint32_t *round, rh_err *e);

plan_verdict plan_judge(const plan_slo *slo, const plan_eval *ev);
/* "tp", "ep", "dp-attention", "ep+dp-attention" and back (-1: none of them). */
const char *plan_parallel_name(int parallel);
int plan_parallel_parse(const char *name);
/* Whether the model has experts to spread (EP candidates make sense). */
bool plan_model_has_experts(const cost_model *m);
/* A candidate's stable name: "h100-sxm tp4 x2 chunk4096 run128 spec0 cache-aware" (or "P1+D2"). */
void plan_cand_name(const plan_space *sp, const plan_cand *c, char *buf, size_t n);
/* The `rehearse sim` flags that simulate the candidate (space separated, after --cost). */
void plan_cand_flags(const plan_space *sp, const plan_cand *c, char *buf, size_t n);

#endif
