/* attention.cu — attention over the paged bf16 KV cache, two kernels.
 *
 * Decode (every sequence brings a few new tokens): the work is reading the
 * context's K and V once, so the kernel is built to keep memory busy. One
 * block per (row, KV head, split of the context); the block's four warps
 * walk the split's keys, each group of head_dim/8 lanes holding one key
 * (16-byte loads, four keys per lane group in flight), and the query heads
 * that share the KV head (GQA) are scored together, so K and V are read once
 * per KV head, not once per query head. The block stages the page-table
 * entries of its keys in shared memory, 512 pages at a time, and issues
 * each round's K/V loads before computing the previous round (two register
 * stages), so no load waits on another and loads stay in flight while the
 * lanes compute (cuda_set_variants can turn the second stage off, for
 * benchmarks to hold the two against each other). Each lane group keeps an online softmax (running max, sum,
 * weighted V) in registers; the block merges its groups in shared memory. A long context is cut into splits so that even
 * one sequence fills the GPU; a second kernel merges the splits' partial
 * results. Split sizes come from kern_ctx_bucket of the longest context
 * alone, so a recorded graph stays valid while contexts grow within the
 * bucket: blocks past a row's context find nothing to do.
 *
 * Prefill (some sequence brings many tokens): flash-style tiles. One block
 * per (tile of up to 64/group rows of one sequence, KV head): the tile's
 * queries for every head of the group stay in shared memory while 32-key
 * tiles of K and V stream through; scores, the online softmax and the
 * weighted sum of V are done per key tile, causally masked per row (and by
 * the sliding window). K and V are read once per query tile instead of once
 * per row. The tile table (which tile belongs to which sequence) is built on
 * the device by a one-thread kernel, so no host array is copied.
 *
 * Both compute in f32 from bf16 K/V; both handle every batch (the choice is
 * speed only), which the tests use to compare them. */
#include <math.h>

#include "kernels/cuda/internal.h"

#define DEC_WARPS 4
#define DEC_UNROLL 4
#define MAX_GROUP 8
#define MAX_HEAD_DIM 256
#define DECODE_MAX_NEW 16      /* more new tokens in a sequence: the prefill kernel */
#define PRE_KT 32              /* keys per prefill tile: one per lane */
#define PRE_NQ 64              /* query vectors (rows x group heads) per prefill block */
#define MIN_SPLIT 256          /* fewest keys a split is given */
#define PT_CHUNK 512           /* page-table entries a decode block stages at a time */

const char *cu_check_shape(const kern_attn_shape *s)
{
    if (!s->n_kv_heads || s->n_heads % s->n_kv_heads) return "query heads must be a multiple of KV heads";
    if (s->n_heads / s->n_kv_heads > MAX_GROUP) return "more than 8 query heads share a KV head";
    if (s->head_dim % 8 || s->head_dim > MAX_HEAD_DIM) return "head_dim must be a multiple of 8 and at most 256";
    return NULL;
}

/* Lanes that hold one key: head_dim/8 rounded up to a power of two. */
__host__ __device__ static inline uint32_t lanes_per_key(uint32_t hd)
{
    uint32_t l = 1;
    while (l * 8 < hd) l *= 2;
    return l;
}

void cu_plan(const kern_attn_batch *b, const uint32_t *h_row0, const uint32_t *h_start, const kern_attn_shape *s)
{
    (void)s;
    cuda_ctx *c = cx();
    if (!c) return;
    attn_plan p = {b->row0, b->n_seqs, 0, 0, 0};
    if (!h_row0 || !h_start || !b->n_seqs) {
        c->plan = attn_plan{};
        return;
    }
    p.rows = h_row0[b->n_seqs];
    for (uint32_t i = 0; i < b->n_seqs; i++) {
        uint32_t n = h_row0[i + 1] - h_row0[i], end = h_start[i] + n;
        if (n > p.max_new) p.max_new = n;
        if (end > p.max_ctx) p.max_ctx = end;
    }
    c->plan = p;
}

/* The plan for this batch; read back from the device when the caller gave
 * none (correct but synchronous, so never inside a graph). */
static const attn_plan *plan_for(cuda_ctx *c, const kern_attn_batch *b)
{
    if (c->plan.row0 == b->row0 && c->plan.n_seqs == b->n_seqs && c->plan.rows) return &c->plan;
    uint32_t n = b->n_seqs;
    uint32_t *h = (uint32_t *)malloc((2 * (size_t)n + 1) * sizeof *h);
    if (!h) return NULL;
    cx_ok(cudaMemcpyAsync(h, b->row0, (n + 1) * sizeof *h, cudaMemcpyDeviceToHost, c->stream), "plan read-back");
    cx_ok(cudaMemcpyAsync(h + n + 1, b->start, n * sizeof *h, cudaMemcpyDeviceToHost, c->stream), "plan read-back");
    cx_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    cu_plan(b, h, h + n + 1, NULL);
    free(h);
    return c->plan.rows ? &c->plan : NULL;
}

/* ---- decode ------------------------------------------------------------- */

struct dec_args {
    const float *q;
    const bf16 *kp, *vp;
    const uint32_t *row0, *start, *pt0, *pages;
    uint32_t n_seqs, n_heads, n_kv, hd, page_size, window, split_len;
    float scale;
    float *out;        /* when one split */
    float *part;       /* [rows][heads][splits][hd + 2]: weighted V sum, then max and sum */
};

/* One round's K and V registers: key p = base + (u * DEC_WARPS + warp) *
 * kpw + ks for each u, its page from the staged entries pts (pages pg0 ..);
 * keys at or past end load nothing and are marked not ok. */
__device__ __forceinline__ void dec_load(const dec_args &a, const uint32_t *pts, uint32_t pg0, uint32_t base,
                                         uint32_t end, uint32_t warp, uint32_t kpw, uint32_t ks, bool dim_ok,
                                         uint32_t kvh, size_t slot, uint32_t cix, uint4 (&kr)[DEC_UNROLL],
                                         uint4 (&vr)[DEC_UNROLL], bool (&ok)[DEC_UNROLL])
{
#pragma unroll
    for (int u = 0; u < DEC_UNROLL; u++) {
        uint32_t p = base + (u * DEC_WARPS + warp) * kpw + ks;
        ok[u] = p < end;
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
        if (ok[u] && dim_ok) {
            size_t at = ((size_t)pts[p / a.page_size - pg0] * a.page_size + p % a.page_size) * slot +
                        (size_t)kvh * a.hd + cix * 8;
            kr[u] = __ldg(reinterpret_cast<const uint4 *>(a.kp + at));
            vr[u] = __ldg(reinterpret_cast<const uint4 *>(a.vp + at));
        }
    }
}

/* MG: the group size rounded up to 1, 2, 4 or 8, so the per-head register
 * arrays are sized at compile time and no larger than needed. */
template <int MG, bool PIPE>
__global__ void __launch_bounds__(DEC_WARPS * 32) attn_decode(dec_args a)
{
    extern __shared__ float sm[];
    const uint32_t kvh = blockIdx.x, split = blockIdx.y, nsplit = gridDim.y, row = blockIdx.z;
    const uint32_t G = a.n_heads / a.n_kv, hd = a.hd;
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t lpk = lanes_per_key(hd), kpw = 32 / lpk;
    const uint32_t ks = lane / lpk, cix = lane % lpk;
    const bool dim_ok = cix * 8 < hd;

    const uint32_t seq = seq_of_row(a.row0, a.n_seqs, row);
    const uint32_t pos = a.start[seq] + (row - a.row0[seq]);
    const uint32_t lo = (a.window && pos + 1 > a.window) ? pos + 1 - a.window : 0;
    const uint32_t k_begin = max(lo, split * a.split_len), k_end = min(pos + 1, (split + 1) * a.split_len);
    const uint32_t *pt = a.pages + a.pt0[seq];
    const size_t slot = (size_t)a.n_kv * hd;

    float qf[MG][8], m[MG], l[MG], acc[MG][8];
#pragma unroll
    for (int g = 0; g < MG; g++) {
        m[g] = -INFINITY;
        l[g] = 0.f;
#pragma unroll
        for (int d = 0; d < 8; d++) qf[g][d] = acc[g][d] = 0.f;
        if (g < G && dim_ok) {
            const float4 *qp =
                reinterpret_cast<const float4 *>(a.q + ((size_t)row * a.n_heads + kvh * G + g) * hd + cix * 8);
            float4 x = qp[0], y = qp[1];
            qf[g][0] = x.x * a.scale, qf[g][1] = x.y * a.scale, qf[g][2] = x.z * a.scale, qf[g][3] = x.w * a.scale;
            qf[g][4] = y.x * a.scale, qf[g][5] = y.y * a.scale, qf[g][6] = y.z * a.scale, qf[g][7] = y.w * a.scale;
        }
    }

    /* The split's keys go by in chunks of PT_CHUNK pages: the chunk's page
     * table entries are staged in shared memory once (one coalesced read),
     * so a key's address costs a shared-memory read instead of a global load
     * that the K/V load would wait on. Within a chunk, rounds are pipelined:
     * round i+1's K/V loads are issued before round i is computed, so the
     * memory system always has the next round in flight. Rounds are block-
     * uniform, so every lane runs the shuffles of every round and reaches
     * every __syncthreads. */
    __shared__ uint32_t pts[PT_CHUNK];
    const uint32_t per_round = DEC_WARPS * kpw * DEC_UNROLL, ps = a.page_size;
    uint4 kr[DEC_UNROLL], vr[DEC_UNROLL], kn[DEC_UNROLL], vn[DEC_UNROLL];
    bool ok[DEC_UNROLL], okn[DEC_UNROLL];
    for (uint32_t c_begin = k_begin; c_begin < k_end;) {
        const uint32_t pg0 = c_begin / ps;
        const uint32_t c_end = min(k_end, (pg0 + PT_CHUNK) * ps);
        const uint32_t n_pg = (c_end - 1) / ps - pg0 + 1;
        __syncthreads();   /* the previous chunk's entries are no longer read */
        for (uint32_t i = threadIdx.x; i < n_pg; i += blockDim.x) pts[i] = pt[pg0 + i];
        __syncthreads();
        if (PIPE) dec_load(a, pts, pg0, c_begin, c_end, warp, kpw, ks, dim_ok, kvh, slot, cix, kr, vr, ok);
        for (uint32_t base = c_begin; base < c_end; base += per_round) {
            if (PIPE) dec_load(a, pts, pg0, base + per_round, c_end, warp, kpw, ks, dim_ok, kvh, slot, cix, kn, vn, okn);
            else dec_load(a, pts, pg0, base, c_end, warp, kpw, ks, dim_ok, kvh, slot, cix, kr, vr, ok);
#pragma unroll
            for (int u = 0; u < DEC_UNROLL; u++) {
                float kf[8], sc[MG];
                unpack8(kr[u], kf);
#pragma unroll
                for (int g = 0; g < MG; g++) {
                    float s = 0.f;
#pragma unroll
                    for (int d = 0; d < 8; d++) s += qf[g][d] * kf[d];
                    sc[g] = s;
                }
                for (uint32_t o = lpk / 2; o > 0; o /= 2)
#pragma unroll
                    for (int g = 0; g < MG; g++) sc[g] += __shfl_xor_sync(0xffffffffu, sc[g], o);
                if (ok[u]) {
                    float vf[8];
                    unpack8(vr[u], vf);
#pragma unroll
                    for (int g = 0; g < MG; g++) {
                        if (g >= G) break;
                        float mn = fmaxf(m[g], sc[g]);
                        float corr = __expf(m[g] - mn), p = __expf(sc[g] - mn);
                        l[g] = l[g] * corr + p;
#pragma unroll
                        for (int d = 0; d < 8; d++) acc[g][d] = acc[g][d] * corr + p * vf[d];
                        m[g] = mn;
                    }
                }
            }
            if (PIPE)
#pragma unroll
                for (int u = 0; u < DEC_UNROLL; u++) {
                    kr[u] = kn[u];
                    vr[u] = vn[u];
                    ok[u] = okn[u];
                }
        }
        c_begin = c_end;
    }

    /* Merge the block's lane groups: group gid's state for head g at
     * sm[(gid * G + g) * (hd + 2)]: hd sums, then max, then sum. */
    const uint32_t groups = DEC_WARPS * kpw, gid = warp * kpw + ks, stride = hd + 2;
#pragma unroll
    for (int g = 0; g < MG; g++) {
        if (g >= G) break;
        float *st = sm + ((size_t)gid * G + g) * stride;
        if (dim_ok)
#pragma unroll
            for (int d = 0; d < 8; d++)
                if (cix * 8 + d < hd) st[cix * 8 + d] = acc[g][d];
        if (cix == 0) {
            st[hd] = m[g];
            st[hd + 1] = l[g];
        }
    }
    __syncthreads();
    for (uint32_t e = threadIdx.x; e < G * hd; e += blockDim.x) {
        uint32_t g = e / hd, d = e % hd;
        float M = -INFINITY;
        for (uint32_t i = 0; i < groups; i++) M = fmaxf(M, sm[((size_t)i * G + g) * stride + hd]);
        float L = 0.f, A = 0.f;
        if (M != -INFINITY)
            for (uint32_t i = 0; i < groups; i++) {
                const float *st = sm + ((size_t)i * G + g) * stride;
                float w = __expf(st[hd] - M);   /* an empty group: exp(-inf) = 0 */
                L += st[hd + 1] * w;
                A += st[d] * w;
            }
        size_t h = (size_t)row * a.n_heads + kvh * G + g;
        if (nsplit == 1) {
            a.out[h * hd + d] = A / L;
        } else {
            float *pp = a.part + (h * nsplit + split) * stride;
            pp[d] = A;
            if (d == 0) {
                pp[hd] = M;
                pp[hd + 1] = L;
            }
        }
    }
}

/* out[row][head] = the splits' partial results merged: one block per (row, head). */
__global__ void attn_merge(const float *__restrict__ part, uint32_t nsplit, uint32_t hd, float *__restrict__ out)
{
    size_t h = (size_t)blockIdx.x;   /* row * n_heads + head */
    const float *pp = part + h * nsplit * (hd + 2);
    float M = -INFINITY;
    for (uint32_t j = 0; j < nsplit; j++) M = fmaxf(M, pp[(size_t)j * (hd + 2) + hd]);
    for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float L = 0.f, A = 0.f;
        for (uint32_t j = 0; j < nsplit; j++) {
            const float *sp = pp + (size_t)j * (hd + 2);
            float w = __expf(sp[hd] - M);
            L += sp[hd + 1] * w;
            A += sp[d] * w;
        }
        out[h * hd + d] = A / L;
    }
}

template <bool PIPE> static void decode_launch(cuda_ctx *c, uint32_t G, dim3 grid, size_t smem, const dec_args &a)
{
    if (G <= 1) attn_decode<1, PIPE><<<grid, DEC_WARPS * 32, smem, c->stream>>>(a);
    else if (G <= 2) attn_decode<2, PIPE><<<grid, DEC_WARPS * 32, smem, c->stream>>>(a);
    else if (G <= 4) attn_decode<4, PIPE><<<grid, DEC_WARPS * 32, smem, c->stream>>>(a);
    else attn_decode<8, PIPE><<<grid, DEC_WARPS * 32, smem, c->stream>>>(a);
}

static void decode(cuda_ctx *c, const float *q, const bf16 *kp, const bf16 *vp, const kern_attn_batch *b,
                   const kern_attn_shape *s, const attn_plan *pl, float *out)
{
    uint32_t bucket = kern_ctx_bucket(pl->max_ctx);
    /* Enough splits for about four blocks per SM, each at least MIN_SPLIT
     * keys; powers of two so that split_len divides the bucket. */
    uint64_t blocks = (uint64_t)s->n_kv_heads * pl->rows, want = 4ull * c->sms;
    uint32_t nsplit = 1;
    while (blocks * nsplit * 2 <= want && bucket / (nsplit * 2) >= MIN_SPLIT) nsplit *= 2;
    dec_args a = {q,        kp,          vp,           b->row0,     b->start,
                  b->pt0,   b->page_ids, b->n_seqs,    s->n_heads,  s->n_kv_heads,
                  s->head_dim, s->page_size, s->window, bucket / nsplit, s->scale,
                  out,      NULL};
    uint32_t G = s->n_heads / s->n_kv_heads, lpk = lanes_per_key(s->head_dim);
    size_t smem = (size_t)DEC_WARPS * (32 / lpk) * G * (s->head_dim + 2) * sizeof(float);
    if (nsplit > 1) {
        size_t bytes = (size_t)pl->rows * s->n_heads * nsplit * (s->head_dim + 2) * sizeof(float);
        if (!(a.part = (float *)cx_scratch(c, SCR_ATTN, bytes))) return;
    }
    dim3 grid(s->n_kv_heads, nsplit, pl->rows);
    if (c->decode_attn == CUDA_DECODE_IN_TURN) decode_launch<false>(c, G, grid, smem, a);
    else decode_launch<true>(c, G, grid, smem, a);
    CX_LAUNCHED("attn_decode");
    if (nsplit > 1) {
        attn_merge<<<pl->rows * s->n_heads, 128, 0, c->stream>>>(a.part, nsplit, s->head_dim, out);
        CX_LAUNCHED("attn_merge");
    }
}

/* ---- prefill ------------------------------------------------------------ */

/* tile0[i]: the first tile of sequence i (tiles of qt rows), tile0[n] = all. */
__global__ void tile_table(const uint32_t *row0, uint32_t n, uint32_t qt, uint32_t *tile0)
{
    uint32_t t = 0;
    for (uint32_t i = 0; i < n; i++) {
        tile0[i] = t;
        t += (row0[i + 1] - row0[i] + qt - 1) / qt;
    }
    tile0[n] = t;
}

struct pre_args {
    const float *q;
    const bf16 *kp, *vp;
    const uint32_t *row0, *start, *pt0, *pages, *tile0;
    uint32_t n_seqs, n_heads, n_kv, hd, page_size, window, qt;
    float scale;
    float *out;
};

__global__ void __launch_bounds__(128) attn_prefill(pre_args a)
{
    extern __shared__ float sm[];
    const uint32_t G = a.n_heads / a.n_kv, hd = a.hd, hdp = hd + 1, nq = a.qt * G;
    const uint32_t kvh = blockIdx.y, tile = blockIdx.x;
    const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    if (tile >= a.tile0[a.n_seqs]) return;   /* the grid is a bound on the tiles */
    const uint32_t seq = seq_of_row(a.tile0, a.n_seqs, tile);
    const uint32_t r_begin = a.row0[seq] + (tile - a.tile0[seq]) * a.qt;
    const uint32_t nr = min(a.qt, a.row0[seq + 1] - r_begin);
    const uint32_t p_first = a.start[seq] + (r_begin - a.row0[seq]), p_last = p_first + nr - 1;
    const uint32_t kmin = (a.window && p_first + 1 > a.window) ? p_first + 1 - a.window : 0;
    const uint32_t *pt = a.pages + a.pt0[seq];
    const size_t slot = (size_t)a.n_kv * hd;

    /* Padded rows (hd + 1) keep the 32 lanes of a score on 32 banks. */
    float *Qs = sm;                        /* [nq][hdp], scaled */
    float *Ks = Qs + (size_t)nq * hdp;     /* [PRE_KT][hdp] */
    float *Vs = Ks + PRE_KT * hdp;         /* [PRE_KT][hd] */
    float *S = Vs + PRE_KT * hd;           /* [nq][PRE_KT + 1]: scores, then probabilities */
    float *Acc = S + (size_t)nq * (PRE_KT + 1);   /* [nq][hd] */
    float *Mx = Acc + (size_t)nq * hd, *Lx = Mx + nq, *Cr = Lx + nq;

    for (uint32_t e = tid; e < nq * hd; e += blockDim.x) {
        uint32_t qi = e / hd, d = e % hd, i = qi / G, g = qi % G;
        Qs[qi * hdp + d] =
            i < nr ? a.q[((size_t)(r_begin + i) * a.n_heads + kvh * G + g) * hd + d] * a.scale : 0.f;
        Acc[e] = 0.f;
    }
    for (uint32_t qi = tid; qi < nq; qi += blockDim.x) {
        Mx[qi] = -INFINITY;
        Lx[qi] = 0.f;
    }
    __syncthreads();

    for (uint32_t kt = kmin; kt <= p_last; kt += PRE_KT) {
        const uint32_t h8 = hd / 8;
        for (uint32_t e = tid; e < PRE_KT * h8; e += blockDim.x) {
            uint32_t j = e / h8, c8 = (e % h8) * 8, p = kt + j;
            float kf[8] = {0, 0, 0, 0, 0, 0, 0, 0}, vf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (p <= p_last) {
                size_t at = ((size_t)pt[p / a.page_size] * a.page_size + p % a.page_size) * slot + (size_t)kvh * hd + c8;
                unpack8(__ldg(reinterpret_cast<const uint4 *>(a.kp + at)), kf);
                unpack8(__ldg(reinterpret_cast<const uint4 *>(a.vp + at)), vf);
            }
#pragma unroll
            for (int d = 0; d < 8; d++) {
                Ks[j * hdp + c8 + d] = kf[d];
                Vs[j * hd + c8 + d] = vf[d];
            }
        }
        __syncthreads();

        /* Scores: lane = key, warps over query vectors. */
        for (uint32_t qi = warp; qi < nq; qi += blockDim.x / 32) {
            uint32_t i = qi / G, p = kt + lane, pos = p_first + i;
            uint32_t lo = (a.window && pos + 1 > a.window) ? pos + 1 - a.window : 0;
            bool valid = i < nr && p <= pos && p >= lo;
            float s = 0.f;
            if (valid) {
                const float *qv = Qs + qi * hdp, *kv = Ks + lane * hdp;
                for (uint32_t d = 0; d < hd; d++) s += qv[d] * kv[d];
            }
            S[qi * (PRE_KT + 1) + lane] = valid ? s : -INFINITY;
        }
        __syncthreads();

        /* Online softmax, a warp per query vector. */
        for (uint32_t qi = warp; qi < nq; qi += blockDim.x / 32) {
            float s = S[qi * (PRE_KT + 1) + lane];
            float mold = Mx[qi], mnew = fmaxf(mold, warp_max(s));
            float p = s == -INFINITY ? 0.f : __expf(s - mnew);
            float psum = warp_sum(p);
            S[qi * (PRE_KT + 1) + lane] = p;
            __syncwarp();
            if (lane == 0) {
                float corr = mold == -INFINITY ? 0.f : __expf(mold - mnew);
                Lx[qi] = Lx[qi] * corr + psum;
                Mx[qi] = mnew;
                Cr[qi] = corr;
            }
        }
        __syncthreads();

        for (uint32_t e = tid; e < nq * hd; e += blockDim.x) {
            uint32_t qi = e / hd, d = e % hd;
            const float *pr = S + qi * (PRE_KT + 1);
            float v = Acc[e] * Cr[qi];
#pragma unroll 8
            for (uint32_t j = 0; j < PRE_KT; j++) v += pr[j] * Vs[j * hd + d];
            Acc[e] = v;
        }
        __syncthreads();
    }

    for (uint32_t e = tid; e < nr * G * hd; e += blockDim.x) {
        uint32_t qi = e / hd, d = e % hd, i = qi / G, g = qi % G;
        a.out[((size_t)(r_begin + i) * a.n_heads + kvh * G + g) * hd + d] = Acc[e] / Lx[qi];
    }
}

static size_t prefill_smem(uint32_t nq, uint32_t hd)
{
    return ((size_t)nq * (hd + 1) + PRE_KT * (hd + 1) + PRE_KT * hd + (size_t)nq * (PRE_KT + 1) + (size_t)nq * hd +
            3 * (size_t)nq) *
           sizeof(float);
}

void cu_attention_init(cuda_ctx *c)
{
    /* The largest prefill block (64 query vectors of head_dim 256) needs
     * about 206 KB: more than the default 48 KB, within Hopper's 227 KB. */
    size_t need = prefill_smem(PRE_NQ, MAX_HEAD_DIM);
    size_t allow = need < c->smem_optin ? need : c->smem_optin;
    cx_ok(cudaFuncSetAttribute(attn_prefill, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)allow),
          "cudaFuncSetAttribute (prefill shared memory)");
}

static void prefill(cuda_ctx *c, const float *q, const bf16 *kp, const bf16 *vp, const kern_attn_batch *b,
                    const kern_attn_shape *s, const attn_plan *pl, float *out)
{
    uint32_t G = s->n_heads / s->n_kv_heads, qt = PRE_NQ / G;
    /* Tiles: at most one per row, so rows + n_seqs bounds the table. */
    uint32_t *tile0 = (uint32_t *)cx_scratch(c, SCR_TILES, ((size_t)b->n_seqs + 1) * sizeof(uint32_t));
    if (!tile0) return;
    tile_table<<<1, 1, 0, c->stream>>>(b->row0, b->n_seqs, qt, tile0);
    CX_LAUNCHED("tile_table");
    /* sum(ceil(new_i / qt)) <= ceil(rows / qt) + n_seqs: a bound the host
     * knows without the table; blocks past the table's end return at once. */
    uint32_t tiles = (pl->rows + qt - 1) / qt + b->n_seqs;
    pre_args a = {q, kp, vp, b->row0, b->start, b->pt0, b->page_ids, tile0, b->n_seqs, s->n_heads, s->n_kv_heads,
                  s->head_dim, s->page_size, s->window, qt, s->scale, out};
    size_t smem = prefill_smem(G * qt, s->head_dim);
    attn_prefill<<<dim3(tiles, s->n_kv_heads), 128, smem, c->stream>>>(a);
    CX_LAUNCHED("attn_prefill");
}

void cu_attention(const float *q, const float *k_pool, const float *v_pool, const kern_attn_batch *b,
                  const kern_attn_shape *s, float *out, float *scratch)
{
    (void)scratch;
    cuda_ctx *c = cx();
    if (!c || !b->n_seqs) return;
    const attn_plan *pl = plan_for(c, b);
    if (!pl) return;
    const bf16 *kp = reinterpret_cast<const bf16 *>(k_pool), *vp = reinterpret_cast<const bf16 *>(v_pool);
    int use_decode = c->force_attn == CUDA_ATTN_DECODE ||
                     (c->force_attn != CUDA_ATTN_PREFILL && pl->max_new <= DECODE_MAX_NEW);
    if (use_decode) decode(c, q, kp, vp, b, s, pl, out);
    else prefill(c, q, kp, vp, b, s, pl, out);
}
