/* kernels.h — the compute kernels of the forward pass, behind one dispatch table.
 *
 * The forward pass (engine/model/forward.c) calls only the entries of a
 * kern_table, so a backend is one filled-in table: kernels/cpu (OpenBLAS
 * sgemm, own loops for the rest) and kernels/cuda (cuBLAS GEMMs, own CUDA
 * kernels; kernels/cuda/emu runs them on the CPU for tests) fill the same
 * table. Pointers handed to the compute entries are backend memory,
 * from the table's `alloc`; the CPU backend's memory is host memory
 * (host_memory = 1), so callers skip copy_in/copy_out there.
 *
 * Conventions, shared by every backend:
 *   - Matrices are row-major f32. A linear layer's weight is [out][in]
 *     (Hugging Face's layout), so a layer computes y = x W^T (+ bias).
 *   - A batch is a stack of rows, one per new token, sequence after sequence.
 *   - KV cache: per layer one K pool and one V pool, each
 *         pool[page][slot][kv_head][head_dim]      (page_size slots a page)
 *     The token at position p of a sequence lives in page pages[p / page_size],
 *     slot p % page_size. Page ids belong to the scheduler core; the memory
 *     belongs to the runner.
 *   - Descriptions of the batch's sequences are flat arrays (offsets into one
 *     page-id array), so they copy to a device in one transfer each.
 *   - Storage types: a backend keeps its weight matrices (the linear layers,
 *     the embedding, the LM head) in `weight_dtype` and its KV pools in
 *     `kv_dtype`. The pointers stay typed float *; where the type is BF16 they
 *     point at bf16 storage, which only that backend's kernels read. Norm
 *     weights, biases, activations and logits are f32 on every backend.
 *   - Tensor parallel (kern_comm): each rank holds a slice of the heads and
 *     of the MLP's inner width; the partial sums of the O and down
 *     projections are added across ranks by `all_reduce`.
 * Kernels never fail: the runner validates every id, position and page before
 * calling them. */
#ifndef RH_KERNELS_H
#define RH_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "util/rng.h"

/* The sequences of a batch as attention sees them. */
typedef struct kern_attn_batch {
    uint32_t n_seqs;
    const uint32_t *row0;      /* [n_seqs + 1]: first row of each sequence's new tokens; row0[n_seqs] = rows */
    const uint32_t *start;     /* [n_seqs]: position of each sequence's first new token (tokens already cached) */
    const uint32_t *pt0;       /* [n_seqs + 1]: each sequence's first entry in page_ids */
    const uint32_t *page_ids;  /* the page tables, concatenated */
} kern_attn_batch;

typedef struct kern_attn_shape {
    uint32_t n_heads, n_kv_heads, head_dim, page_size;
    uint32_t window;           /* sliding window in tokens (Mistral); 0: attend to the whole context */
    float scale;               /* softmax scale, 1/sqrt(head_dim) */
} kern_attn_shape;

/* Sampling parameters of one request. temperature 0 is greedy (argmax, the
 * lowest id on ties); top_k 0 and top_p 1 switch those filters off. */
typedef struct kern_sampling {
    float temperature;
    float top_p;
    uint32_t top_k;
} kern_sampling;

/* Scratch for `sample`: one entry per vocabulary id. */
typedef struct kern_cand {
    float v;
    int32_t id;
} kern_cand;

/* The sampler's arithmetic, shared by every sampler and by speculative
 * verification, which must reproduce the sampler's distribution to the bit:
 * the first index of the largest value, and the softmax at a temperature
 * (each candidate's value becomes exp((v - max) / T) in float; the sum comes
 * back in double). */
static inline uint32_t kern_argmax(const float *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static inline double kern_softmax_at(kern_cand *c, uint32_t n, float temperature)
{
    float mx = -INFINITY;
    for (uint32_t i = 0; i < n; i++)
        if (c[i].v > mx) mx = c[i].v;
    double total = 0;
    for (uint32_t i = 0; i < n; i++) {
        c[i].v = expf((c[i].v - mx) / temperature);
        total += c[i].v;
    }
    return total;
}

/* Storage type of weight matrices and KV pools. */
typedef enum kern_dtype { KERN_F32 = 0, KERN_BF16 = 1 } kern_dtype;

static inline size_t kern_dtype_size(kern_dtype t)
{
    return t == KERN_BF16 ? 2 : 4;
}

/* A tensor-parallel group as the forward pass and the runner see it. Every
 * rank calls the collectives in the same order; buffers are backend memory. */
typedef struct kern_comm {
    uint32_t rank, size;
    void *ctx;
    /* x[0..n) becomes the sum over ranks of x[0..n), in place. */
    void (*all_reduce)(void *ctx, float *x, size_t n);
    /* rank 0's buf[0..bytes) is copied into every rank's buf. */
    void (*broadcast)(void *ctx, void *buf, size_t bytes);
} kern_comm;

/* One product of a gemm_group: W [n][k], bias [n] or NULL, y [m][n]. */
#define KERN_GEMM_GROUP 3
typedef struct kern_gemm_out {
    const float *w;
    const float *bias;
    float *y;
    uint32_t n;
} kern_gemm_out;

typedef struct kern_table {
    const char *name;
    int host_memory;           /* backend pointers are host pointers */
    kern_dtype weight_dtype;   /* weight matrices, embedding and LM head */
    kern_dtype kv_dtype;       /* K and V pools */

    /* Bytes of backend memory still free; NULL: host memory (rh_mem_available). */
    unsigned long long (*mem_available)(void);
    /* NULL when the backend's attention runs this shape, else why not;
     * a NULL entry runs every shape. */
    const char *(*check_shape)(const kern_attn_shape *s);
    /* Optional: called once per batch, before its kv_write and attention
     * calls (forward_run does), with host copies of the batch's row0 and
     * start, so a backend whose memory is not the host's sizes its launches
     * without reading them back. Without it such a backend reads them back,
     * which is correct but waits for the device. */
    void (*plan)(const kern_attn_batch *b, const uint32_t *h_row0, const uint32_t *h_start,
                 const kern_attn_shape *s);

    void *(*alloc)(size_t bytes);                       /* zero-filled; NULL when out of memory */
    void (*free)(void *p);
    void (*copy_in)(void *dst, const void *src, size_t bytes);    /* host -> backend */
    void (*copy_out)(void *dst, const void *src, size_t bytes);   /* backend -> host */

    /* y[m][n] = x[m][k] W[n][k]^T + bias[n]  (bias may be NULL);
     * accumulate: y += instead of y = (fuses the residual add). */
    void (*gemm)(const float *x, const float *w, const float *bias, float *y,
                 uint32_t m, uint32_t n, uint32_t k, int accumulate);
    /* Optional: products of one x with up to KERN_GEMM_GROUP matrices in one
     * call, each as gemm without accumulate (y_i = x W_i^T + bias_i): Q, K and
     * V, or gate and up. NULL: the forward pass calls gemm for each. A GPU
     * covers small matrices in one launch and converts x once. */
    void (*gemm_group)(const float *x, uint32_t m, uint32_t k, uint32_t n_prod, const struct kern_gemm_out *outs);
    /* out[i] = table[ids[i]], rows of dim. */
    void (*embedding)(const float *table, const int32_t *ids, uint32_t n, uint32_t dim, float *out);
    /* out = x / sqrt(mean(x^2) + eps) * w, row by row. */
    void (*rmsnorm)(const float *x, const float *w, float eps, uint32_t rows, uint32_t dim, float *out);
    /* cos/sin[r][i] of angle pos[r] * inv_freq[i], i < half, once per batch. */
    void (*rope_angles)(const uint32_t *pos, const float *inv_freq, uint32_t rows, uint32_t half,
                        float *cos, float *sin);
    /* Rotates each head of each row in place, pairing element i with i + head_dim/2
     * (the rotate-half convention of Llama checkpoints). row_stride in floats. */
    void (*rope)(float *x, const float *cos, const float *sin, uint32_t rows, uint32_t n_heads,
                 uint32_t head_dim, uint32_t row_stride);
    /* out = silu(gate) * up, n elements. */
    void (*silu_mul)(const float *gate, const float *up, float *out, size_t n);
    /* Stores each new token's K and V rows ([rows][n_kv_heads * head_dim]) into its page slot. */
    void (*kv_write)(const float *k, const float *v, const kern_attn_batch *b, const kern_attn_shape *s,
                     float *k_pool, float *v_pool);
    /* out[row][head] = softmax(q K^T * scale) V over positions 0..pos(row) of the row's
     * sequence (the last `window` of them when set), K and V read through the page table.
     * q and out are [rows][n_heads * head_dim]; scratch holds the longest context. */
    void (*attention)(const float *q, const float *k_pool, const float *v_pool, const kern_attn_batch *b,
                      const kern_attn_shape *s, float *out, float *scratch);
    /* logits[i] = rmsnorm(h[rows[i]], norm_w) W^T: the final norm and the LM head, for
     * only the rows that need logits. tmp holds n_rows * dim floats. */
    void (*lm_head)(const float *h, const uint32_t *rows, uint32_t n_rows, const float *norm_w, float eps,
                    const float *w, uint32_t vocab, uint32_t dim, float *tmp, float *logits);
    /* Draws one token id from a row of host logits. rng is the request's own
     * stream (kern_rng_init(seed)); greedy does not advance it. */
    int32_t (*sample)(const float *logits, uint32_t vocab, const kern_sampling *p, uint64_t *rng,
                      kern_cand *scratch);

    /* Optional (NULL where the backend has none): record the kernels one
     * forward pass launches, then replay them as one unit. Replays read the
     * same buffers, whose contents may change between replays; a recorded
     * attention serves every batch of the same rows whose longest context
     * has the same kern_ctx_bucket, because a backend that records graphs
     * sizes its attention launches from that bucket alone. */
    int (*graph_begin)(void);
    void *(*graph_end)(void);                  /* NULL when recording failed */
    int (*graph_launch)(void *graph);
    void (*graph_free)(void *graph);
} kern_table;

/* Contexts are bucketed to the next power of two, at least 256 tokens. */
static inline uint32_t kern_ctx_bucket(uint32_t ctx)
{
    uint32_t b = 256;
    while (b < ctx && b < (1u << 31)) b <<= 1;
    return b;
}

/* A request's random stream: the splitmix64 state (util/rng.h) for a seed;
 * rh_splitmix_unit draws from it. Any seed (0 included) gives a good stream. */
static inline uint64_t kern_rng_init(uint64_t seed)
{
    return seed ^ 0x6a09e667f3bcc909ull;
}

/* The CPU backend (kernels/cpu). */
const kern_table *kern_cpu(void);
/* Threads the CPU backend's GEMMs use (OpenBLAS; OPENBLAS_NUM_THREADS sets it). */
int kern_cpu_threads(void);

/* The CUDA backend (kernels/cuda): bf16 weights and KV, cuBLAS GEMMs, own
 * attention and row kernels, sampling on host logits. NULL, with *why set to
 * the reason, when this build has no CUDA or the machine has no usable GPU.
 * Kernels run on the calling thread's device (cuda_use_device) and stream. */
const kern_table *kern_cuda(const char **why);

#endif
