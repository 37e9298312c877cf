/* cost.h — the cost-model interface: how long does one step take?
 *
 * Given a batch shape — per sequence its new tokens and context length, plus
 * the tensor-parallel size and the speculative draft work — a cost model
 * returns the step's duration in seconds. Kinds, one JSON file format with a
 * "kind" and a "version" field:
 *   linear    a + b·prefill tokens + c·decode seqs + d·Σ decode context
 *             + e·Σ(new · (context + new)) over prefill chunks     (cost_linear.c)
 *   table     per-operator times measured by `rehearse calibrate`  (cost_table.c)
 *   fit       coefficients fitted to recorded steps by `rehearse fit`
 *   roofline  FLOPs and bytes of a model preset on a GPU preset     (cost_roofline.c)
 * A cost model never calls back into the scheduler: data flows one way. */
#ifndef RH_COST_H
#define RH_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

typedef struct cost_seq {
    uint32_t n_new;      /* tokens computed this step (prefill chunk, or 1 + drafts) */
    uint32_t context;    /* tokens already in the KV cache */
    bool prefill;
} cost_seq;

typedef struct cost_batch {
    const cost_seq *seqs;
    uint32_t n;
    uint32_t tp;          /* tensor-parallel size; 0 is read as 1 */
    /* Aggregates, filled by cost_batch_summarize (models may use either view). */
    uint32_t prefill_tokens, prefill_seqs, decode_seqs, decode_tokens;
    uint64_t decode_context, prefill_context, prefill_attn;
    /* Speculative drafting done before this step's verify forward: the
     * drafter runs draft_steps forward passes of one token over
     * draft_seqs sequences (0 when speculation is off). */
    uint32_t draft_steps, draft_seqs;
} cost_batch;

/* Fills the aggregate fields from seqs. */
void cost_batch_summarize(cost_batch *b);

typedef struct cost_model cost_model;

typedef struct cost_ops {
    const char *kind;
    double (*step_time)(const cost_model *m, const cost_batch *b);
    /* Time of one draft-model forward over n one-token sequences at the given
     * summed context; NULL: drafting is priced as a fraction of a decode. */
    double (*draft_time)(const cost_model *m, uint32_t n, uint64_t context, uint32_t tp);
    void (*free)(cost_model *m);
} cost_ops;

struct cost_model {
    const cost_ops *ops;
    char *path;           /* file it came from, "" if built in code */
    double draft_ratio;   /* draft forward cost as a fraction of a target decode (default 0.1) */
};

/* Loads any kind from a JSON file; the message names the file and field. */
cost_model *cost_load(const char *path, rh_err *e);
/* The same from a JSON text already in memory (label names it in messages). */
cost_model *cost_parse(const char *json_text, const char *label, rh_err *e);
/* Full step time: drafting (if any) plus the verify/normal forward. */
double cost_step_time(const cost_model *m, const cost_batch *b);
void cost_free(cost_model *m);

/* The linear kind, built in code (tests, Lua). Coefficients in seconds. */
typedef struct cost_linear_coef {
    double base_s, per_prefill_token_s, per_decode_seq_s, per_context_token_s, per_attention_s;
} cost_linear_coef;
cost_model *cost_linear_new(const cost_linear_coef *c);

#endif
