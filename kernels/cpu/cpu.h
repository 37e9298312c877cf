/* cpu.h — the CPU backend's kernels, one function per kern_table entry.
 *
 * The forward pass reaches these only through kern_cpu()'s table; they are
 * declared here so tests and benchmarks can call one kernel directly and
 * compare it with a reference. Semantics are those of kernels/kernels.h. */
#ifndef RH_KERNELS_CPU_H
#define RH_KERNELS_CPU_H

#include "kernels/kernels.h"

void cpu_gemm(const float *x, const float *w, const float *bias, float *y, uint32_t m, uint32_t n, uint32_t k,
              int accumulate);
void cpu_lm_head(const float *h, const uint32_t *rows, uint32_t n_rows, const float *norm_w, float eps,
                 const float *w, uint32_t vocab, uint32_t dim, float *tmp, float *logits);

void cpu_embedding(const float *table, const int32_t *ids, uint32_t n, uint32_t dim, float *out);
void cpu_rmsnorm(const float *x, const float *w, float eps, uint32_t rows, uint32_t dim, float *out);
void cpu_rope_angles(const uint32_t *pos, const float *inv_freq, uint32_t rows, uint32_t half, float *cos,
                     float *sin);
void cpu_rope(float *x, const float *cos, const float *sin, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
              uint32_t row_stride);
void cpu_silu_mul(const float *gate, const float *up, float *out, size_t n);

void cpu_kv_write(const float *k, const float *v, const kern_attn_batch *b, const kern_attn_shape *s,
                  float *k_pool, float *v_pool);
void cpu_attention(const float *q, const float *k_pool, const float *v_pool, const kern_attn_batch *b,
                   const kern_attn_shape *s, float *out, float *scratch);

int32_t cpu_sample(const float *logits, uint32_t vocab, const kern_sampling *p, uint64_t *rng,
                   kern_cand *scratch);

#endif
