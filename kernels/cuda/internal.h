/* internal.h — what the CUDA backend's .cu files share: the calling thread's
 * context (device, stream, cuBLAS handle, scratch, the attention plan of the
 * current forward pass), error recording, and bf16 unpacking.
 *
 * One context per host thread, made on first use: a runner is driven by one
 * thread, and tensor-parallel ranks in one process are one thread each, so a
 * thread-local context needs no locks and no handle is shared by two
 * threads. Kernels never fail (kernels.h): a failing CUDA call is recorded
 * as the thread's first error, which cuda_error() and cuda_sync() report. */
#ifndef RH_KERNELS_CUDA_INTERNAL_H
#define RH_KERNELS_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* The project's headers are C: their functions have C linkage. */
extern "C" {
#include "kernels/cpu/cpu.h"
#include "kernels/cuda/cuda.h"
#include "util/err.h"
}

typedef __nv_bfloat16 bf16;

/* What kern_table.plan learned about the batch on the host. */
struct attn_plan {
    const uint32_t *row0;      /* the device array it describes */
    uint32_t n_seqs, rows;
    uint32_t max_new;          /* most new tokens of one sequence */
    uint32_t max_ctx;          /* longest context (start + new) */
};

struct cuda_ctx {
    int ready, failed;
    int device;
    int sms;                   /* multiprocessors, for sizing splits */
    size_t smem_optin;         /* largest dynamic shared memory a block may ask for */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;             /* explicit workspace, so cuBLAS calls can be recorded in graphs */
    void *scratch[4];          /* grow-only device buffers, see SCR_* */
    size_t scratch_cap[4];
    attn_plan plan;
    int force_attn, force_gemm;
    int gemv_loads, decode_attn;   /* cuda_set_variants; 0: the default */
    char err[256];
};

enum { SCR_GEMM_X = 0, SCR_ATTN = 1, SCR_TILES = 2, SCR_MISC = 3 };

/* The calling thread's context, set up on first use; NULL (error recorded)
 * when no device can be used. */
cuda_ctx *cx(void);
/* Records msg as the thread's first error unless it has one. */
void cx_record(const char *what, const char *msg);
/* Records the first error of the thread; returns 0 when ok. */
int cx_ok(cudaError_t rc, const char *what);
int cx_blas_ok(cublasStatus_t rc, const char *what);
/* Checks the launch just made. */
#define CX_LAUNCHED(what) cx_ok(cudaGetLastError(), what)
/* A scratch buffer of at least `bytes`; NULL (error recorded) when it cannot grow. */
void *cx_scratch(cuda_ctx *c, int which, size_t bytes);

/* Eight bf16 (one 16-byte load) to floats; element 0 is the low half of word 0. */
__device__ __forceinline__ void unpack8(uint4 v, float f[8])
{
    f[0] = __uint_as_float(v.x << 16);
    f[1] = __uint_as_float(v.x & 0xffff0000u);
    f[2] = __uint_as_float(v.y << 16);
    f[3] = __uint_as_float(v.y & 0xffff0000u);
    f[4] = __uint_as_float(v.z << 16);
    f[5] = __uint_as_float(v.z & 0xffff0000u);
    f[6] = __uint_as_float(v.w << 16);
    f[7] = __uint_as_float(v.w & 0xffff0000u);
}

/* The sequence a row belongs to: the last i < n with row0[i] <= row. */
__device__ __forceinline__ uint32_t seq_of_row(const uint32_t *row0, uint32_t n, uint32_t row)
{
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (row0[mid] <= row) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* 1 / sqrt(mean(x^2) + eps) of one row of dim floats, reduced over the
 * block (every thread of it calls this, and every one gets the result):
 * RMSNorm's scale, shared by the layer norms and the LM head's final norm. */
__device__ __forceinline__ float rms_inv(const float *__restrict__ x, uint32_t dim, float eps)
{
    __shared__ float part[32];
    float ss = 0.f;
    for (uint32_t i = threadIdx.x; i < dim; i += blockDim.x) ss += x[i] * x[i];
    ss = warp_sum(ss);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.f;
        v = warp_sum(v);
        if (threadIdx.x == 0) part[0] = v;
    }
    __syncthreads();
    return 1.0f / sqrtf(part[0] / (float)dim + eps);
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Entries of the dispatch table, one file each. */
void cu_gemm(const float *x, const float *w, const float *bias, float *y, uint32_t m, uint32_t n, uint32_t k,
             int accumulate);
void cu_gemm_group(const float *x, uint32_t m, uint32_t k, uint32_t n_prod, const kern_gemm_out *outs);
void cu_lm_head(const float *h, const uint32_t *rows, uint32_t n_rows, const float *norm_w, float eps,
                const float *w, uint32_t vocab, uint32_t dim, float *tmp, float *logits);
void cu_embedding(const float *table, const int32_t *ids, uint32_t n, uint32_t dim, float *out);
void cu_rmsnorm(const float *x, const float *w, float eps, uint32_t rows, uint32_t dim, float *out);
void cu_rope_angles(const uint32_t *pos, const float *inv_freq, uint32_t rows, uint32_t half, float *cos,
                    float *sin);
void cu_rope(float *x, const float *cos, const float *sin, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
             uint32_t row_stride);
void cu_silu_mul(const float *gate, const float *up, float *out, size_t n);
void cu_kv_write(const float *k, const float *v, const kern_attn_batch *b, const kern_attn_shape *s,
                 float *k_pool, float *v_pool);
void cu_attention(const float *q, const float *k_pool, const float *v_pool, const kern_attn_batch *b,
                  const kern_attn_shape *s, float *out, float *scratch);
void cu_plan(const kern_attn_batch *b, const uint32_t *h_row0, const uint32_t *h_start, const kern_attn_shape *s);
const char *cu_check_shape(const kern_attn_shape *s);
/* Sets the prefill kernel's shared-memory limit (once per thread context). */
void cu_attention_init(cuda_ctx *c);

#endif
