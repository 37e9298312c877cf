/* cost.h — the cost-model interface: how long does one step take?
 *
 * Given a batch shape — per sequence its new tokens and context length, plus
 * the tensor-parallel size and the speculative draft work — a cost model
 * returns the step's duration in seconds. Kinds, one JSON file format with a
 * "kind" and a "version" field (sim/cost/COST.md documents every field):
 *   linear    a + b·prefill tokens + c·decode seqs + d·Σ decode context
 *             + e·Σ(new · (context + new)) over prefill chunks     (cost_linear.c)
 *   fit       the same formula, coefficients fitted to recorded steps by
 *             `rehearse fit` (cost_fit.c); "fit" is read as "linear"
 *   table     per-operator times measured by `rehearse calibrate`  (cost_table.c)
 *   roofline  FLOPs and bytes of a model preset on a GPU preset     (cost_roofline.c)
 * Adding a kind is one file and one line in the registry of cost.c.
 *
 * Speculative decoding: a decode sequence that verifies k drafts carries
 * n_new = 1 + k tokens; the drafter's own forward passes (draft_steps of
 * them, draft_width tokens each over draft_seqs sequences) are priced by the model's
 * draft_time, or, for a kind without its own drafter, as draft_ratio of a
 * decode-only step of the same sequences. cost_step_time adds both.
 *
 * A cost model never calls back into the scheduler: data flows one way. The
 * models read the aggregate fields of a batch, so a caller may fill them
 * from seqs (cost_batch_summarize) or by hand (cost_batch_from_step); a
 * roofline under data-parallel attention also places each sequence on a
 * rank when it has them (cost_prices_by_aggregates). */
#ifndef RH_COST_H
#define RH_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "traces/trace.h"
#include "util/err.h"

typedef struct cost_seq {
    uint32_t n_new;      /* tokens computed this step (prefill chunk, or 1 + drafts) */
    uint32_t context;    /* tokens already in the KV cache */
    bool prefill;
} cost_seq;

/* How the server runs the model beyond its tensor-parallel size: SGLang's
 * flags of the same names. A roofline prices every field; the other kinds
 * price none (cost_serving_check refuses what a kind cannot price). */
enum { COST_DEEPEP_AUTO, COST_DEEPEP_NORMAL, COST_DEEPEP_LOW_LATENCY };
typedef struct cost_serving {
    uint32_t ep;                 /* --ep-size: 1 (experts split like the MLP) or the GPUs (experts spread) */
    uint32_t dp;                 /* --dp-size with --enable-dp-attention: attention data-parallel groups; 1: off */
    bool deepep;                 /* --moe-a2a-backend deepep: dispatch and combine by DeepEP's kernels */
    int deepep_mode;             /* --deepep-mode: COST_DEEPEP_* (auto: normal for prefill, low latency for decode) */
    bool two_batch_overlap;      /* --enable-two-batch-overlap */
    double expert_imbalance;     /* the busiest GPU's routed tokens over the mean (>= 1); --enable-eplb lowers it */
    int32_t cuda_graph_max_bs;   /* decode batches up to this run as one CUDA graph; 0: none (--disable-cuda-graph) */
    uint32_t dense_tp;           /* --moe-dense-tp-size under DP attention: 1 (each group's dense MLPs whole, on its
                                    own tokens) or 0 (split over every GPU, every group's tokens gathered) */
    uint32_t redundant_experts;  /* --ep-num-redundant-experts: extra copies of busy experts spread with the rest */
    bool overlap;                /* the overlap scheduler (off: --disable-overlap-schedule) */
    /* LoRA (--max-lora-rank, --max-loras-per-batch, --lora-target-modules): adapters of lora_rank on
     * the modules of lora_targets (COST_LORA_* bits; 0: all seven) in lora_slots GPU slots; rank 0:
     * no LoRA served. A roofline prices their kernels, loads and slots; other kinds refuse a rank. */
    uint32_t lora_rank, lora_slots, lora_targets;
    /* --enable-hierarchical-cache: KV loads back from host memory and is written back to it (a
     * roofline prices the copies over the GPU's host link; other kinds refuse it) */
    bool hicache;
    double storage_Bps, storage_latency_s;   /* the storage tier's link per GPU and a fetch's latency */
} cost_serving;

enum {
    COST_LORA_Q = 1, COST_LORA_K = 2, COST_LORA_V = 4, COST_LORA_O = 8,
    COST_LORA_GATE = 16, COST_LORA_UP = 32, COST_LORA_DOWN = 64, COST_LORA_ALL = 127
};
/* "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" (commas or
 * spaces; "all" or "all-linear" for every one) into COST_LORA_* bits; -1
 * naming the module it does not know. */
int cost_lora_targets_parse(const char *list, uint32_t *bits, rh_err *e);

typedef struct cost_batch {
    const cost_seq *seqs;
    uint32_t n;
    uint32_t tp;          /* tensor-parallel size; 0: the cost file's own (1 when it names none) */
    const cost_serving *serving;   /* NULL: the cost file's own (cost_serving_default) */
    /* Aggregates, filled by cost_batch_summarize (models read only these). */
    uint32_t prefill_tokens, prefill_seqs, decode_seqs, decode_tokens;
    uint64_t decode_context, prefill_context, prefill_attn;
    /* Σ over prefill chunks of new·context + new·(new+1)/2: the (query, key)
     * pairs a causal prefill attends. 0 with prefill_tokens > 0 means "not
     * known" (a batch rebuilt from a step record); models then derive it from
     * prefill_attn assuming equal chunks, which is exact for one chunk. */
    uint64_t prefill_causal;
    /* Speculative drafting done before this step's verify forward: the
     * drafter runs draft_steps forward passes of one token over
     * draft_seqs sequences (0 when speculation is off). */
    uint32_t draft_steps, draft_seqs;
    uint32_t draft_width;   /* tokens per drafted sequence in each pass (an EAGLE tree's topk); 0 or 1: one */
    /* LoRA: distinct adapters among the sequences, their tokens, and the
     * adapters loaded into GPU slots before this step (core_batch's) */
    uint32_t lora_adapters, lora_tokens, lora_loads;
    /* The host tier (core_batch's): prompt tokens loading back from host
     * memory beside this step's forward, and tokens evictions copied to the
     * host while forming it (write_back; the step waited for them). */
    uint32_t load_tokens, writeback_tokens;
    uint32_t backup_tokens;   /* copied GPU -> host in the background since the previous step (a GPU hides
                                 them; the CPU engine copies them before this step's forward) */
    uint32_t storage_tokens;  /* of load_tokens, fetched from a storage tier into host memory first */
} cost_batch;

/* Fills the aggregate fields from seqs (leaves tp and the draft fields). */
void cost_batch_summarize(cost_batch *b);
/* Fills a batch (no seqs, tp 0) from a recorded or simulated step. Decodes
 * carrying 1 + k tokens are taken to have been drafted by k forward passes
 * over all decode sequences (draft_steps = k, draft_seqs = decode_seqs). */
void cost_batch_from_step(cost_batch *b, const tr_step *s);

typedef struct cost_model cost_model;

/* One term of a step's price, for `rehearse cost show` and debugging. */
typedef struct cost_term {
    const char *name;     /* "base", "qkv_proj", "allreduce", "drafting", ... */
    double seconds;
    double flops, bytes;  /* per GPU for the step; 0 when the kind does not model them */
    const char *bound;    /* "compute", "memory", "link", or "" */
} cost_term;

/* What one GPU of the deployment a cost model prices holds, for sizing the
 * KV pool as SGLang and vLLM do (sim/pool.h); 0 where the kind cannot say. */
typedef struct cost_memory {
    double gpu_bytes;           /* memory of one GPU, bytes (a preset's memory_GB read as GiB, as devices report it) */
    double weight_bytes;        /* the weights one GPU holds (its shard, replicated parts whole) */
    double kv_bytes_per_token;  /* KV cache per token on one GPU (every layer, K and V, or MLA's latent) */
    /* The drafter's own (an MTP module or a draft model): held only when
     * speculation drafts with it. */
    double draft_weight_bytes, draft_kv_bytes_per_token;
    uint32_t gpus;              /* GPUs the model runs on */
    uint32_t context_length;    /* the model's max_position_embeddings */
    /* Each GPU keeps the KV of its own requests only (data-parallel
     * attention): the pool is gpus times one GPU's. Else every GPU holds
     * its share of every token's KV. */
    bool kv_per_rank;
    /* For the activation reserve: hidden and MLP sizes per GPU. */
    uint32_t hidden, intermediate_per_gpu, vocab;
    char gpu_name[64], model_name[64];
} cost_memory;

/* A step's time in the parts the simulator composes (cost_step_time is
 * their sum): the GPU's (the forward with its graph gaps, the drafting),
 * the host's launches the GPU waits for (eager forwards), the host time on
 * the critical path of every step, and the scheduling an overlap scheduler
 * hides under the previous step's GPU time. */
typedef struct cost_parts {
    double forward_s, draft_s;   /* GPU */
    double launch_s;             /* eager launches beyond the GPU's time */
    double exposed_s;            /* overheads.step_s, forward_s per forward pass, the framework's per-step time */
    double hidden_s;             /* scheduling, hideable */
} cost_parts;
typedef struct cost_ops {
    const char *kind;
    double (*step_time)(const cost_model *m, const cost_batch *b);
    /* Time of one draft forward over n one-token sequences at the given
     * summed context; NULL: drafting is priced by cost_draft_fallback. */
    double (*draft_time)(const cost_model *m, uint32_t n, uint64_t context, uint32_t tp);
    /* 0 if the model can price this tensor-parallel size (0: its own),
     * else -1 and a message naming the size. NULL: every size is fine. */
    int (*check_tp)(const cost_model *m, uint32_t tp, rh_err *e);
    /* Writes up to max terms of the verify/normal forward (drafting is added
     * by cost_breakdown); returns how many. NULL: one term, the total. */
    int (*breakdown)(const cost_model *m, const cost_batch *b, cost_term *terms, int max);
    /* The memory of a deployment at tensor-parallel size tp (0: its own);
     * NULL: the kind knows no GPU (linear, table). */
    void (*memory)(const cost_model *m, uint32_t tp, const cost_serving *sv, cost_memory *out);
    /* The step in parts (cost_parts; the overheads of cost.h are added by
     * cost_step_parts); NULL: step_time and draft_time are all GPU. */
    void (*parts)(const cost_model *m, const cost_batch *b, cost_parts *out);
    /* The file's own serving (ep, dp attention, ...); NULL: SGLang's defaults
     * with nothing spread. */
    void (*serving)(const cost_model *m, uint32_t tp, cost_serving *out);
    /* Whether the kind prices s; NULL: only what cost_serving_default gives. */
    int (*check_serving)(const cost_model *m, uint32_t tp, const cost_serving *s, rh_err *e);
    /* Whether prices at tp and s are a deterministic function of a batch's
     * aggregates, so a memo may keep them; NULL: not known to be (a model
     * drawing noise, say), never remembered. */
    bool (*by_aggregates)(const cost_model *m, uint32_t tp, const cost_serving *s);
    void (*free)(cost_model *m);
} cost_ops;

/* What serving costs outside the forward pass's kernels, in every kind (a
 * cost file's "overheads" object, COST.md), each charged where it occurs:
 * the first two in the step (cost_step_time), the others by the
 * simulator on the requests' way in and their tokens' way out, where a
 * server's tokenizer and detokenizer work beside the GPU. All 0 by default. */
typedef struct cost_overheads {
    double step_s;          /* CPU per step: scheduling, batch preparation; once per step */
    double forward_s;       /* per forward pass: kernel launches; the target's and each draft pass's */
    double request_s;       /* per request on the way to its first token: HTTP, tokenize, admission;
                               one at a time (a tokenizer process) */
    double arrival_s;       /* per request before that, every request at once: the network, a
                               connection, the HTTP parse on the server's many threads */
    double output_token_s;  /* per output token: detokenize, stream */
} cost_overheads;

struct cost_model {
    const cost_ops *ops;
    char *path;           /* file it came from, "" if built in code */
    double draft_ratio;   /* draft forward cost as a fraction of a target decode (default 0.1) */
    cost_overheads over;
};

#define COST_DRAFT_RATIO_DEFAULT 0.1

/* Loads any kind from a JSON file; the message names the file and field. */
cost_model *cost_load(const char *path, rh_err *e);
/* The same from a JSON text already in memory. label names it in messages;
 * relative preset paths in it resolve against label's directory when label
 * is a file path ("runs/cost.json" -> runs/), else the current directory. */
cost_model *cost_parse(const char *json_text, const char *label, rh_err *e);
/* Checks that m prices tensor-parallel size tp (0: its own). A simulator
 * calls this once before it starts: cost_step_time of an unsupported size
 * returns NAN. */
int cost_check_tp(const cost_model *m, uint32_t tp, rh_err *e);
/* Forward passes a batch runs: its own, plus one per draft pass (when the
 * drafts are priced, draft_steps over draft_seqs > 0). */
uint32_t cost_forwards(const cost_batch *b);
/* Full step time: drafting (if any) plus the verify/normal forward, plus
 * the step's CPU time and each forward pass's launch overhead. An empty
 * batch (no prefill tokens, no decode sequences) costs 0. */
double cost_step_time(const cost_model *m, const cost_batch *b);
/* The drafting part alone (0 without draft work). */
double cost_draft_time(const cost_model *m, const cost_batch *b);
/* The price of one draft forward for a kind without its own drafter:
 * draft_ratio x a decode-only step of n sequences at summed context. */
double cost_draft_fallback(const cost_model *m, uint32_t n, uint64_t context, uint32_t tp);
double cost_step_parts(const cost_model *m, const cost_batch *b, cost_parts *p);
/* The step's duration after the previous one's GPU time prev_gpu_s (0 after
 * an idle gap): with the overlap scheduler its scheduling runs meanwhile. */
double cost_parts_duration(const cost_parts *p, bool overlap, double prev_gpu_s);

/* Step prices remembered by the batch's aggregates, for a caller that
 * prices many batches on one model at one tp and serving (a simulated
 * replica group). A step of the same shape as one priced before gets the
 * same parts without the model: exact, for a model whose prices are a
 * function of the aggregates (cost_prices_by_aggregates); for any other
 * nothing is remembered. A fixed table (the last shape in each slot): steady load
 * repeats its shapes, a real trace's mix about a quarter of its steps. */
typedef struct cost_memo cost_memo;
/* NULL (out of memory, or prices not by aggregates alone): price directly. */
cost_memo *cost_memo_new(const cost_model *m, uint32_t tp, const cost_serving *sv);
void cost_memo_free(cost_memo *memo);
/* cost_step_parts through memo (NULL: directly); b's tp and serving must
 * be the memo's. */
double cost_memo_parts(cost_memo *memo, const cost_model *m, const cost_batch *b, cost_parts *p);
/* Whether m's prices at tp and sv are a deterministic function of a
 * batch's aggregates: the kinds here are, but a roofline under
 * data-parallel attention (it places each sequence on a rank) and any
 * kind that does not say so (one drawing noise) are not. */
bool cost_prices_by_aggregates(const cost_model *m, uint32_t tp, const cost_serving *sv);
/* The serving the cost file describes at tensor-parallel size tp (0: its
 * own): its own fields, else SGLang's defaults for the GPU. */
void cost_serving_default(const cost_model *m, uint32_t tp, cost_serving *out);
/* 0 when m can price s at tp, else -1 naming the flag it cannot. */
int cost_serving_check(const cost_model *m, uint32_t tp, const cost_serving *s, rh_err *e);

/* Terms of cost_step_time (then drafting, "step cpu" and "launches" when
 * present); their seconds add up to it. Returns the count written (at most max). */
int cost_breakdown(const cost_model *m, const cost_batch *b, cost_term *terms, int max);
/* 1 and *out filled when the kind knows its GPU and model (roofline), else 0. */
int cost_memory_of(const cost_model *m, uint32_t tp, cost_memory *out);
/* The same laid out as sv says (NULL: the cost file's own serving). */
int cost_memory_of_serving(const cost_model *m, uint32_t tp, const cost_serving *sv, cost_memory *out);
void cost_free(cost_model *m);

/* The linear kind, built in code (tests, Lua). Coefficients in seconds. */
typedef struct cost_linear_coef {
    double base_s, per_prefill_token_s, per_decode_seq_s, per_context_token_s, per_attention_s;
} cost_linear_coef;
cost_model *cost_linear_new(const cost_linear_coef *c);
/* The five features the coefficients multiply, in the order of
 * cost_linear_coef, including the drafting (priced as draft_ratio of a
 * decode-only step per draft forward): cost_step_time of a linear model with
 * coefficients c is exactly Σ c[i]·phi[i] (for its own tp size). */
void cost_linear_features(const cost_batch *b, double draft_ratio, double phi[5]);
/* Writes a linear cost file (temp file + rename). extra, when not NULL, is a
 * jansson object whose members are added (e.g. "fit" provenance). */
int cost_linear_save(const char *path, const cost_linear_coef *c, uint32_t tp_size,
                     double draft_ratio, const void *extra, rh_err *e);

#endif
