/* vidur_profile.h — per-operator GPU times in Vidur's profile format
 * (compute/<gpu>/<org>/<model>/mlp.csv: one row per token count and
 * tensor-parallel size, `time_stats.<op>.median` in milliseconds, per layer
 * and per GPU; see ../shared/gpu-profiles/README.md), read as one kernel
 * measurement per row and operator, with the shape kernel_time.h prices:
 *   emb                 embedding     M tokens, 2·M·h bf16 read and written
 *   *_layernorm         norm          a row of h
 *   attn_pre_proj       gemm          h → (heads + 2·kv heads)·head_dim / tp   (fused QKV)
 *   attn_rope           rope          a row of (heads + kv heads)·head_dim / tp
 *   attn_post_proj      gemm          heads·head_dim / tp → h
 *   mlp_up_proj         gemm          h → 2·I / tp                              (gate and up fused)
 *   mlp_act             activation    a row of I / tp
 *   mlp_down_proj       gemm          I / tp → h
 *   add                 add           a row of h                                (the residual)
 * Kernels measured in 16-bit. */
#ifndef RH_COST_VIDUR_PROFILE_H
#define RH_COST_VIDUR_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "sim/cost/kernel_time.h"
#include "util/err.h"

#define VIDUR_N_OPS 10
/* Vidur's operator names, in the order above (input and post-attention
 * norms apart). */
extern const char *const vidur_op_names[VIDUR_N_OPS];

typedef struct vidur_sample {
    uint8_t op;             /* index into vidur_op_names */
    uint8_t kind;           /* enum rl_kernel_kind */
    uint32_t tp;
    double M, K, N;         /* GEMMs: rows, inputs, outputs per GPU */
    double bytes, row;      /* the others: bytes moved, elements of a token's row */
    double seconds;         /* measured median */
} vidur_sample;

typedef struct vidur_model {
    uint32_t heads, kv_heads, hidden, intermediate, vocab;
} vidur_model;

typedef struct vidur_profile {
    vidur_sample *s;
    size_t n;
    vidur_model model;      /* the shapes of its first row (one model per file) */
    uint32_t max_tokens;
} vidur_profile;

/* Reads one mlp.csv; -1 with the file and line of a bad row. */
int vidur_profile_read(const char *path, vidur_profile *p, rh_err *e);
void vidur_profile_free(vidur_profile *p);

/* The model kernel_time.h gives a sample, with a GPU's kernels of kind
 * (bf16 peak and HBM of the GPU, in FLOP/s and bytes/s). */
double vidur_predict(const vidur_sample *s, const rl_kernel *k, double peak, double hbm);

#endif
