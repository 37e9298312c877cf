/* forward.h — the transformer's forward pass over one batch, kernels only.
 *
 * Llama-family decoder: per layer, RMSNorm -> Q,K,V (GQA, optional bias) ->
 * RoPE -> K,V into the pages -> paged attention -> O projection added to the
 * residual; RMSNorm -> SwiGLU MLP added to the residual. Then the final norm
 * and LM head for only the rows that want logits. With LoRA segments, each
 * adapted projection adds (x·Aᵀ)·Bᵀ for the segment's rows to its output
 * (before RoPE, SiLU or the residual add, as the merged W + B·A would).
 *
 * Every pointer here is backend memory and every step is a kern_table call,
 * so the same code drives any backend. The caller (runner.c) has validated
 * the batch and sized the buffers; nothing here can fail. */
#ifndef RH_MODEL_FORWARD_H
#define RH_MODEL_FORWARD_H

#include "engine/model/weights.h"
#include "kernels/kernels.h"

/* Activations, each sized for `rows` rows (logits and lm_tmp for logit_rows,
 * scores for the longest context). */
typedef struct fwd_buffers {
    float *x;                 /* [rows][hidden] residual stream */
    float *xn;                /* [rows][hidden] normed input of a block */
    float *q, *att;           /* [rows][n_heads * head_dim] */
    float *k, *v;             /* [rows][n_kv_heads * head_dim] */
    float *gate, *up;         /* [rows][intermediate] */
    float *cos, *sin;         /* [rows][head_dim / 2] */
    float *scores;            /* [context] */
    float *lm_tmp;            /* [logit_rows][hidden] */
    float *logits;            /* [logit_rows][vocab] */
    float *lora_u;            /* [rows][largest rank]: a LoRA shrink's output (only with LoRA segments) */
} fwd_buffers;

/* A LoRA adapter in backend memory: per layer l and module m (lora.h's
 * enum lora_module), a[l * 7 + m] is A [rank][in] and b[...] is B
 * [out][rank] with the scale folded in; NULL where the adapter has none. */
typedef struct fwd_lora {
    uint32_t rank;
    float *const *a, *const *b;   /* host arrays of backend pointers */
} fwd_lora;

/* Rows row0 .. row0 + rows - 1 run under one adapter (Punica's SGMV
 * segment: the shrink and the expand are one GEMM each per segment). */
typedef struct fwd_lora_seg {
    uint32_t row0, rows;
    const fwd_lora *w;
} fwd_lora_seg;

typedef struct fwd_batch {
    uint32_t rows;
    const int32_t *tokens;        /* [rows] */
    const uint32_t *positions;    /* [rows] */
    kern_attn_batch attn;
    uint32_t n_logits;
    const uint32_t *logit_rows;   /* [n_logits] rows whose logits are wanted, ascending */
    const uint32_t *h_row0, *h_start;   /* host copies of attn.row0 and attn.start (for kern_table.plan) */
    const fwd_lora_seg *lora;     /* host array of n_lora segments, ascending; rows in none run the base */
    uint32_t n_lora;
} fwd_batch;

/* k_pools[l], v_pools[l]: layer l's pools. inv_freq: head_dim / 2 floats. */
void forward_run(const kern_table *K, const model_config *c, const model_weights *w, const float *inv_freq,
                 float *const *k_pools, float *const *v_pools, uint32_t page_size, const fwd_batch *b,
                 fwd_buffers *buf);

/* The same pass on one rank of a tensor-parallel group: c and w are the
 * rank's shard (model_shard_new), and the O and down projections' partial
 * sums are added across ranks. Rank 0 alone adds the residual and those
 * projections' biases, so the sum counts each once. comm NULL: forward_run. */
void forward_run_tp(const kern_table *K, const model_config *c, const model_weights *w, const float *inv_freq,
                    float *const *k_pools, float *const *v_pools, uint32_t page_size, const fwd_batch *b,
                    fwd_buffers *buf, const kern_comm *comm);

#endif
