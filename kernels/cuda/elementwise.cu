/* elementwise.cu — the row kernels: embedding lookup (bf16 table to f32
 * rows), RMSNorm, RoPE angles and rotation, SiLU·mul, and the KV write that
 * rounds a batch's new K and V rows to bf16 into their page slots. Each is
 * one pass over its data; a block per row where a row needs a reduction or
 * a lookup, a grid-stride loop otherwise. Also the device-side random fill
 * the benchmarks seed their weights with. */
#include "kernels/cuda/internal.h"

static unsigned grid_for(size_t n, unsigned block)
{
    size_t g = (n + block - 1) / block;
    return (unsigned)(g < 65535 ? (g ? g : 1) : 65535);
}

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void embedding_k(const bf16 *__restrict__ table, const int32_t *__restrict__ ids, uint32_t dim,
                            float *__restrict__ out)
{
    const bf16 *row = table + (size_t)ids[blockIdx.x] * dim;
    float *o = out + (size_t)blockIdx.x * dim;
    for (uint32_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = __bfloat162float(row[i]);
}

void cu_embedding(const float *table, const int32_t *ids, uint32_t n, uint32_t dim, float *out)
{
    cuda_ctx *c = cx();
    if (!c || !n) return;
    embedding_k<<<n, 256, 0, c->stream>>>(reinterpret_cast<const bf16 *>(table), ids, dim, out);
    CX_LAUNCHED("embedding");
}

__global__ void rmsnorm_k(const float *__restrict__ x, const float *__restrict__ w, float eps, uint32_t dim,
                          float *__restrict__ out)
{
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *o = out + (size_t)blockIdx.x * dim;
    float inv = rms_inv(xr, dim, eps);
    for (uint32_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = xr[i] * inv * w[i];
}

void cu_rmsnorm(const float *x, const float *w, float eps, uint32_t rows, uint32_t dim, float *out)
{
    cuda_ctx *c = cx();
    if (!c || !rows) return;
    rmsnorm_k<<<rows, 256, 0, c->stream>>>(x, w, eps, dim, out);
    CX_LAUNCHED("rmsnorm");
}

__global__ void rope_angles_k(const uint32_t *__restrict__ pos, const float *__restrict__ inv_freq, uint32_t rows,
                              uint32_t half, float *__restrict__ cs, float *__restrict__ sn)
{
    GRID_STRIDE(i, (size_t)rows * half)
    {
        /* The angle in f32 as the CPU forms it; the precise sincosf, not the
         * fast intrinsic, which loses digits at positions in the thousands. */
        float a = (float)pos[i / half] * inv_freq[i % half];
        sincosf(a, &sn[i], &cs[i]);
    }
}

void cu_rope_angles(const uint32_t *pos, const float *inv_freq, uint32_t rows, uint32_t half, float *cos,
                    float *sin)
{
    cuda_ctx *c = cx();
    if (!c || !rows || !half) return;
    rope_angles_k<<<grid_for((size_t)rows * half, 256), 256, 0, c->stream>>>(pos, inv_freq, rows, half, cos, sin);
    CX_LAUNCHED("rope_angles");
}

__global__ void rope_k(float *__restrict__ x, const float *__restrict__ cs, const float *__restrict__ sn,
                       uint32_t rows, uint32_t n_heads, uint32_t half, uint32_t row_stride)
{
    GRID_STRIDE(e, (size_t)rows * n_heads * half)
    {
        uint32_t i = (uint32_t)(e % half);
        size_t rh = e / half;
        uint32_t h = (uint32_t)(rh % n_heads), r = (uint32_t)(rh / n_heads);
        float *v = x + (size_t)r * row_stride + (size_t)h * 2 * half;
        float c = cs[(size_t)r * half + i], s = sn[(size_t)r * half + i];
        float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

void cu_rope(float *x, const float *cos, const float *sin, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
             uint32_t row_stride)
{
    cuda_ctx *c = cx();
    size_t n = (size_t)rows * n_heads * (head_dim / 2);
    if (!c || !n) return;
    rope_k<<<grid_for(n, 256), 256, 0, c->stream>>>(x, cos, sin, rows, n_heads, head_dim / 2, row_stride);
    CX_LAUNCHED("rope");
}

__global__ void silu_mul_k(const float *__restrict__ g, const float *__restrict__ u, float *out, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float v = g[i];
        out[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

void cu_silu_mul(const float *gate, const float *up, float *out, size_t n)
{
    cuda_ctx *c = cx();
    if (!c || !n) return;
    silu_mul_k<<<grid_for(n, 256), 256, 0, c->stream>>>(gate, up, out, n);
    CX_LAUNCHED("silu_mul");
}

/* One block per new row: its sequence by binary search, then its slot. */
__global__ void kv_write_k(const float *__restrict__ k, const float *__restrict__ v, const uint32_t *__restrict__ row0,
                           const uint32_t *__restrict__ start, const uint32_t *__restrict__ pt0,
                           const uint32_t *__restrict__ pages, uint32_t n_seqs, uint32_t page_size, uint32_t width,
                           bf16 *__restrict__ kp, bf16 *__restrict__ vp)
{
    uint32_t r = blockIdx.x, q = seq_of_row(row0, n_seqs, r);
    uint32_t pos = start[q] + (r - row0[q]);
    size_t at = ((size_t)pages[pt0[q] + pos / page_size] * page_size + pos % page_size) * width;
    for (uint32_t i = threadIdx.x; i < width; i += blockDim.x) {
        kp[at + i] = __float2bfloat16(k[(size_t)r * width + i]);
        vp[at + i] = __float2bfloat16(v[(size_t)r * width + i]);
    }
}

void cu_kv_write(const float *k, const float *v, const kern_attn_batch *b, const kern_attn_shape *s, float *k_pool,
                 float *v_pool)
{
    cuda_ctx *c = cx();
    if (!c || !b->n_seqs) return;
    uint32_t rows = c->plan.row0 == b->row0 && c->plan.n_seqs == b->n_seqs ? c->plan.rows : 0;
    if (!rows) {   /* no plan for this batch: read the row count back (slow, never in a graph) */
        cx_ok(cudaMemcpyAsync(&rows, b->row0 + b->n_seqs, sizeof rows, cudaMemcpyDeviceToHost, c->stream),
              "kv_write row count");
        cx_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    }
    if (!rows) return;
    kv_write_k<<<rows, 128, 0, c->stream>>>(k, v, b->row0, b->start, b->pt0, b->page_ids, b->n_seqs, s->page_size,
                                            s->n_kv_heads * s->head_dim, reinterpret_cast<bf16 *>(k_pool),
                                            reinterpret_cast<bf16 *>(v_pool));
    CX_LAUNCHED("kv_write");
}

__global__ void fill_k(void *dst, size_t n, int bf, uint64_t seed, float lo, float hi)
{
    GRID_STRIDE(i, n)
    {
        /* splitmix64 of (seed, i): element i's value depends on nothing else. */
        uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        float u = lo + (hi - lo) * (float)((double)(z >> 40) * (1.0 / 16777216.0));
        if (bf) reinterpret_cast<bf16 *>(dst)[i] = __float2bfloat16(u);
        else reinterpret_cast<float *>(dst)[i] = u;
    }
}

extern "C" void cuda_fill_uniform(void *dst, size_t n, kern_dtype dt, uint64_t seed, float lo, float hi)
{
    cuda_ctx *c = cx();
    if (!c || !n) return;
    fill_k<<<grid_for(n, 256), 256, 0, c->stream>>>(dst, n, dt == KERN_BF16, seed, lo, hi);
    CX_LAUNCHED("fill_uniform");
}
