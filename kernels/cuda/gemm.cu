/* gemm.cu — every linear layer and the LM head: y = x W^T (+ bias) (+ y),
 * x and y f32, W bf16 [n][k].
 *
 * Two paths, because the two regimes are bound by different things:
 *   - a few rows (decode at small batch): the product only streams W once
 *     from memory, so it is a GEMV whose speed is the memory's. Our kernel
 *     reads W in 16-byte loads straight from its bf16 storage (one warp per
 *     output column, four loads in flight per lane), keeps x in f32, and
 *     adds bias and residual in the same pass: no conversion of x, no
 *     second launch. cuBLAS's GEMM at m = 1 has no such fused path.
 *   - more rows (prefill, large decode batches): compute bound, so cuBLAS
 *     (its Lt kernels underneath) with bf16 operands and f32 accumulate and
 *     output: x is rounded to bf16 into scratch first (one cheap pass; the
 *     product is O(k) times more work), bias is written into y first and
 *     the product accumulates onto it with beta = 1, as on the CPU.
 * Shapes the GEMV cannot take (k not a multiple of 8) use cuBLAS at any m.
 * gemm_group takes the products of one x together (Q, K and V; gate and
 * up): one GEMV launch over all their columns, or one bf16 copy of x for
 * all their cuBLAS calls. */
#include "kernels/cuda/internal.h"

#define GEMV_MAX_ROWS 4
#define GEMV_WARPS 4
#define GEMV_UNROLL 4   /* 16-byte loads in flight per lane by default (cuda_set_variants: 8, 16) */

/* Up to KERN_GEMM_GROUP products of the same x, their columns numbered one
 * after another: one launch covers Q, K and V (or gate and up), so the small
 * K and V products no longer run as grids too small to keep memory busy. */
struct gemv_set {
    const bf16 *w[KERN_GEMM_GROUP];
    const float *bias[KERN_GEMM_GROUP];
    float *y[KERN_GEMM_GROUP];
    uint32_t n[KERN_GEMM_GROUP];
    uint32_t count;
};

template <int M, int U>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_bf16(const float *__restrict__ x, gemv_set set, uint32_t k, int accumulate)
{
    uint32_t col = blockIdx.x * GEMV_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    /* Which product the warp's column belongs to (warp-uniform). Constant
     * indices only, so the set stays in parameter space (a dynamic index
     * would copy it to local memory first). */
    uint32_t n = 0;
    const bf16 *w = nullptr;
    const float *bias = nullptr;
    float *y = nullptr;
#pragma unroll
    for (int i = 0; i < KERN_GEMM_GROUP; i++)
        if (!w && i < set.count) {
            if (col < set.n[i]) w = set.w[i], bias = set.bias[i], y = set.y[i], n = set.n[i];
            else col -= set.n[i];
        }
    if (!w) return;   /* whole warps leave together */
    const uint4 *wr = reinterpret_cast<const uint4 *>(w + (size_t)col * k);
    uint32_t k8 = k / 8;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; m++) acc[m] = 0.f;
    for (uint32_t i = lane; i < k8; i += 32 * U) {
        uint4 wv[U];
        /* All loads first: U independent 16-byte reads in flight. */
#pragma unroll
        for (int u = 0; u < U; u++) {
            uint32_t j = i + u * 32;
            wv[u] = j < k8 ? __ldcs(wr + j) : make_uint4(0, 0, 0, 0);   /* W is read once: stream it */
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            uint32_t j = i + u * 32;
            if (j >= k8) break;
            float wf[8];
            unpack8(wv[u], wf);
#pragma unroll
            for (int m = 0; m < M; m++) {
                const float4 *xp = reinterpret_cast<const float4 *>(x + (size_t)m * k) + 2 * j;
                float4 a = __ldg(xp), b = __ldg(xp + 1);
                acc[m] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x + wf[5] * b.y +
                          wf[6] * b.z + wf[7] * b.w;
            }
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++) acc[m] = warp_sum(acc[m]);
    if (lane == 0) {
        float b = bias ? bias[col] : 0.f;
#pragma unroll
        for (int m = 0; m < M; m++) {
            float *o = y + (size_t)m * n + col;
            *o = (accumulate ? *o : 0.f) + acc[m] + b;
        }
    }
}

__global__ void to_bf16(const float *__restrict__ x, bf16 *__restrict__ out, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(x[i]);
}

/* y[i][j] = bias[j] (+ y[i][j]); bias NULL: y = 0. */
__global__ void set_rows(float *__restrict__ y, const float *__restrict__ bias, uint32_t m, uint32_t n,
                         int accumulate)
{
    size_t total = (size_t)m * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float b = bias ? bias[i % n] : 0.f;
        y[i] = accumulate ? y[i] + b : b;
    }
}

static unsigned grid_for(size_t n, unsigned block)
{
    size_t g = (n + block - 1) / block;
    return (unsigned)(g < 65535 ? (g ? g : 1) : 65535);
}

template <int U>
static void gemv_rows(cuda_ctx *c, const float *x, const gemv_set &set, uint32_t m, uint32_t k, int acc, dim3 grid,
                      dim3 block)
{
    switch (m) {
    case 1: gemv_bf16<1, U><<<grid, block, 0, c->stream>>>(x, set, k, acc); break;
    case 2: gemv_bf16<2, U><<<grid, block, 0, c->stream>>>(x, set, k, acc); break;
    case 3: gemv_bf16<3, U><<<grid, block, 0, c->stream>>>(x, set, k, acc); break;
    default: gemv_bf16<4, U><<<grid, block, 0, c->stream>>>(x, set, k, acc); break;
    }
}

static void gemv(cuda_ctx *c, const float *x, const gemv_set &set, uint32_t m, uint32_t k, int acc)
{
    uint32_t cols = 0;
    for (uint32_t i = 0; i < set.count; i++) cols += set.n[i];
    dim3 grid((cols + GEMV_WARPS - 1) / GEMV_WARPS), block(GEMV_WARPS * 32);
    switch (c->gemv_loads) {
    case 8: gemv_rows<8>(c, x, set, m, k, acc, grid, block); break;
    case 16: gemv_rows<16>(c, x, set, m, k, acc, grid, block); break;
    default: gemv_rows<GEMV_UNROLL>(c, x, set, m, k, acc, grid, block); break;
    }
    CX_LAUNCHED("gemv");
}

/* Whether m rows by k go through our GEMV (else cuBLAS). */
static int use_gemv(const cuda_ctx *c, uint32_t m, uint32_t k)
{
    if (c->force_gemm == CUDA_GEMM_CUBLAS || m > GEMV_MAX_ROWS || k % 8) return 0;
    return 1;
}

/* y = bias (+ y), or y = 0: an empty sum. */
static void empty_sum(cuda_ctx *c, const float *bias, float *y, uint32_t m, uint32_t n, int accumulate)
{
    if (bias || !accumulate) {
        set_rows<<<grid_for((size_t)m * n, 256), 256, 0, c->stream>>>(y, bias, m, n, accumulate);
        CX_LAUNCHED("set_rows");
    }
}

/* x rounded to bf16 into scratch, for cuBLAS; NULL (error recorded) when it cannot grow. */
static const bf16 *x_bf16(cuda_ctx *c, const float *x, uint32_t m, uint32_t k)
{
    bf16 *xb = (bf16 *)cx_scratch(c, SCR_GEMM_X, (size_t)m * k * sizeof(bf16));
    if (!xb) return NULL;
    to_bf16<<<grid_for((size_t)m * k, 256), 256, 0, c->stream>>>(x, xb, (size_t)m * k);
    CX_LAUNCHED("to_bf16");
    return xb;
}

/* y = xb W^T (+ bias) (+ y) through cuBLAS, xb already bf16. */
static void blas_product(cuda_ctx *c, const bf16 *xb, const bf16 *w, const float *bias, float *y, uint32_t m,
                         uint32_t n, uint32_t k, int accumulate)
{
    float beta = accumulate ? 1.f : 0.f, alpha = 1.f;
    if (bias) {
        set_rows<<<grid_for((size_t)m * n, 256), 256, 0, c->stream>>>(y, bias, m, n, accumulate);
        CX_LAUNCHED("set_rows");
        beta = 1.f;
    }
    /* Column-major view: y^T [n][m] = W [k][n]^T x^T [k][m]. */
    cx_blas_ok(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, w, CUDA_R_16BF, (int)k,
                            xb, CUDA_R_16BF, (int)k, &beta, y, CUDA_R_32F, (int)n, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

void cu_gemm(const float *x, const float *wf, const float *bias, float *y, uint32_t m, uint32_t n, uint32_t k,
             int accumulate)
{
    cuda_ctx *c = cx();
    if (!c || !m || !n) return;
    const bf16 *w = reinterpret_cast<const bf16 *>(wf);
    if (!k) return empty_sum(c, bias, y, m, n, accumulate);
    if (use_gemv(c, m, k)) {
        gemv_set set = {{w}, {bias}, {y}, {n}, 1};
        gemv(c, x, set, m, k, accumulate);
        return;
    }
    const bf16 *xb = x_bf16(c, x, m, k);
    if (xb) blas_product(c, xb, w, bias, y, m, n, k, accumulate);
}

/* Q, K and V (or gate and up) of one x: one GEMV launch for them all, or x
 * converted to bf16 once for their cuBLAS products. */
void cu_gemm_group(const float *x, uint32_t m, uint32_t k, uint32_t n_prod, const kern_gemm_out *outs)
{
    cuda_ctx *c = cx();
    if (!c || !m || !n_prod) return;
    if (n_prod > KERN_GEMM_GROUP) {
        cx_record("gemm_group", "more products than a group holds");
        return;
    }
    if (!k) {
        for (uint32_t i = 0; i < n_prod; i++) empty_sum(c, outs[i].bias, outs[i].y, m, outs[i].n, 0);
        return;
    }
    if (use_gemv(c, m, k)) {
        gemv_set set = {};
        for (uint32_t i = 0; i < n_prod; i++) {
            set.w[i] = reinterpret_cast<const bf16 *>(outs[i].w);
            set.bias[i] = outs[i].bias;
            set.y[i] = outs[i].y;
            set.n[i] = outs[i].n;
        }
        set.count = n_prod;
        gemv(c, x, set, m, k, 0);
        return;
    }
    const bf16 *xb = x_bf16(c, x, m, k);
    for (uint32_t i = 0; xb && i < n_prod; i++)
        if (outs[i].n) blas_product(c, xb, reinterpret_cast<const bf16 *>(outs[i].w), outs[i].bias, outs[i].y, m,
                                    outs[i].n, k, 0);
}

/* tmp[i] = rmsnorm(h[rows[i]]) * norm_w: the final norm of the rows that want logits. */
__global__ void gather_norm(const float *__restrict__ h, const uint32_t *__restrict__ rows,
                            const float *__restrict__ nw, float eps, uint32_t dim, float *__restrict__ tmp)
{
    const float *x = h + (size_t)rows[blockIdx.x] * dim;
    float *o = tmp + (size_t)blockIdx.x * dim;
    float inv = rms_inv(x, dim, eps);
    for (uint32_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = x[i] * inv * nw[i];
}

void cu_lm_head(const float *h, const uint32_t *rows, uint32_t n_rows, const float *norm_w, float eps,
                const float *w, uint32_t vocab, uint32_t dim, float *tmp, float *logits)
{
    cuda_ctx *c = cx();
    if (!c || !n_rows) return;
    gather_norm<<<n_rows, 256, 0, c->stream>>>(h, rows, norm_w, eps, dim, tmp);
    CX_LAUNCHED("gather_norm");
    cu_gemm(tmp, w, NULL, logits, n_rows, vocab, dim, 0);
}
