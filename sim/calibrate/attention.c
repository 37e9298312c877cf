/* attention.c — the attention benches: one prefill chunk over (new tokens,
 * context), and decodes over (sequences, summed context).
 *
 * Caches. In a forward pass a layer's KV pages were last read one step ago,
 * with every other layer's pages and the weights read since; a bench that
 * re-read one batch's pages would find them in cache and run faster than the
 * engine. So a bench moves its batch through an arena as large as that
 * working set (within a memory budget): a different page range each call,
 * and a cheap point runs once round the arena before it is timed. */
#include <stdlib.h>

#include "sim/calibrate/internal.h"

#define KV_ARENA_BUDGET (1ull << 30)

typedef struct attn_bench {
    calib_ctx *x;
    const calib_grid *g;
    uint32_t *ones, *ctx;                   /* host scratch for a decode batch */
    float *q, *out, *k_pool, *v_pool, *scratch;
    kern_attn_batch ab;
    uint32_t *row0, *start, *pt0, *pages;   /* backend copies of ab's arrays */
    uint64_t arena;                         /* pages in the pools */
    uint32_t span, shifts, shift;           /* pages the batch reads; page ranges it rotates through */
} attn_bench;

static void attn_run(attn_bench *a)
{
    kern_attn_shape sh = calib_attn_shape(&a->x->s);
    a->ab.page_ids = a->pages + (size_t)a->shift * a->span;
    a->shift = (a->shift + 1) % a->shifts;
    a->x->b->K->attention(a->q, a->k_pool, a->v_pool, &a->ab, &sh, a->out, a->scratch);
}

static double attn_sample(void *p, uint32_t iters, double *spent)
{
    attn_bench *a = p;
    for (uint32_t i = 0; iters > 1 && i < a->shifts && i < iters; i++) attn_run(a);
    double t0 = calib_now(a->x);
    for (uint32_t i = 0; i < iters; i++) attn_run(a);
    calib_sync(a->x);
    return *spent = calib_now(a->x) - t0;
}

/* Uploads a batch of n sequences, sequence i with new[i] tokens at context
 * ctx[i], over consecutive pages. */
static int attn_batch(attn_bench *a, uint32_t n, const uint32_t *new_tokens, const uint32_t *ctx)
{
    calib_ctx *x = a->x;
    uint32_t ps = x->s.page_size;
    uint32_t *row0 = malloc((n + 1) * sizeof *row0), *pt0 = malloc((n + 1) * sizeof *pt0);
    int rc = -1;
    if (!row0 || !pt0) goto done;
    row0[0] = pt0[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        row0[i + 1] = row0[i] + new_tokens[i];
        pt0[i + 1] = pt0[i] + (ctx[i] + new_tokens[i] + ps - 1) / ps;
    }
    calib_free(x, a->row0), calib_free(x, a->start), calib_free(x, a->pt0);
    a->row0 = calib_upload(x, row0, (n + 1) * sizeof *row0);
    a->start = calib_upload(x, ctx, n * sizeof *ctx);
    a->pt0 = calib_upload(x, pt0, (n + 1) * sizeof *pt0);
    a->ab = (kern_attn_batch){n, a->row0, a->start, a->pt0, a->pages};
    if (a->row0 && a->start && a->pt0) calib_plan(x, &a->ab, row0, ctx);
    /* The forward pass's working set between two reads of these pages: every
     * layer's pages of this batch and the layer weights. */
    uint64_t page_bytes = (uint64_t)ps * x->s.kvd * kern_dtype_size(x->b->K->kv_dtype) * 2;
    uint64_t want = (uint64_t)pt0[n] * x->s.layers + calib_layer_weight_bytes(&x->s) / page_bytes;
    if (want > a->arena) want = a->arena;
    a->span = pt0[n] ? pt0[n] : 1;
    a->shifts = (uint32_t)(want / a->span);
    if (a->shifts < 1) a->shifts = 1;
    a->shift = 0;
    rc = a->row0 && a->start && a->pt0 ? 0 : -1;
done:
    free(row0);
    free(pt0);
    return rc;
}

/* Pools for a batch of up to `pages` pages, as large as the forward pass's
 * working set allows within the budget, filled with values; q and out for
 * `rows` rows, the identity page table, scratch for `ctx` positions. */
static int attn_alloc(attn_bench *a, uint64_t pages, uint32_t rows, uint64_t ctx)
{
    calib_ctx *x = a->x;
    uint64_t page_bytes = (uint64_t)x->s.page_size * x->s.kvd * kern_dtype_size(x->b->K->kv_dtype) * 2;
    uint64_t want = pages * x->s.layers + calib_layer_weight_bytes(&x->s) / page_bytes;
    uint64_t cap = KV_ARENA_BUDGET / page_bytes;
    if (want > cap) want = cap;
    if (want < pages) want = pages;
    a->arena = pages = want;
    size_t pool = (size_t)pages * x->s.page_size * x->s.kvd;
    a->k_pool = calib_random_as(x, pool, 1.0f, x->b->K->kv_dtype);
    a->v_pool = calib_random_as(x, pool, 1.0f, x->b->K->kv_dtype);
    a->q = calib_random(x, (size_t)rows * x->s.qd, 1.0f);
    a->out = calib_random(x, (size_t)rows * x->s.qd, 1.0f);
    a->scratch = calib_random(x, ctx + 1, 0.0f);
    uint32_t *ids = malloc((size_t)pages * sizeof *ids);
    if (ids)
        for (uint64_t i = 0; i < pages; i++) ids[i] = (uint32_t)i;
    a->pages = ids ? calib_upload(x, ids, (size_t)pages * sizeof *ids) : NULL;
    free(ids);
    return a->k_pool && a->v_pool && a->q && a->out && a->scratch && a->pages ? 0 : -1;
}

static void attn_free(attn_bench *a)
{
    calib_ctx *x = a->x;
    calib_free(x, a->q), calib_free(x, a->out), calib_free(x, a->k_pool), calib_free(x, a->v_pool), calib_free(x, a->scratch);
    calib_free(x, a->row0), calib_free(x, a->start), calib_free(x, a->pt0), calib_free(x, a->pages);
}

static int prefill_set(void *p, uint32_t k)
{
    attn_bench *a = p;
    uint32_t n = (uint32_t)a->g->ax0[k / a->g->n1], c = (uint32_t)a->g->ax1[k % a->g->n1];
    return attn_batch(a, 1, &n, &c);
}

int calib_bench_prefill_attention(calib_ctx *x, calib_grid *g, rh_err *e)
{
    attn_bench a = {.x = x, .g = g};
    uint32_t nmax = (uint32_t)g->ax0[g->n0 - 1], cmax = (uint32_t)g->ax1[g->n1 - 1];
    uint64_t pages = ((uint64_t)nmax + cmax + x->s.page_size - 1) / x->s.page_size;
    int rc = 0;
    if (attn_alloc(&a, pages, nmax, (uint64_t)nmax + cmax) < 0) {
        rc = rh_fail(e, "calibrate: out of memory for the prefill attention bench");
        goto done;
    }
    if (calib_grid_measure(x, g, prefill_set, attn_sample, &a, e) < 0) rc = rh_fail(e, "calibrate: out of memory for the prefill attention bench");
done:
    attn_free(&a);
    return rc;
}

/* B decodes whose contexts sum to S. A step record keeps only the sum, so
 * the bench picks the spread a running batch has — requests that started
 * at different times, contexts from about 0 to twice the mean — as a ramp
 * (S·(2q+1)/B² for the q-th, the rounding remainder one token each). Equal
 * contexts would be cheaper: a long context's K and V outgrow the core's own
 * cache, and attention reads them once per query head. */
static int decode_set(void *p, uint32_t k)
{
    attn_bench *a = p;
    uint32_t B = (uint32_t)a->g->ax0[k / a->g->n1];
    uint64_t S = (uint64_t)a->g->ax1[k % a->g->n1], sum = 0, b2 = (uint64_t)B * B;
    for (uint32_t q = 0; q < B; q++) sum += a->ctx[q] = (uint32_t)(S * (2 * q + 1) / b2);
    for (uint32_t q = 0; sum < S; q = (q + 1) % B, sum++) a->ctx[q]++;
    return attn_batch(a, B, a->ones, a->ctx);
}

int calib_bench_decode_attention(calib_ctx *x, calib_grid *g, rh_err *e)
{
    attn_bench a = {.x = x, .g = g};
    uint32_t bmax = (uint32_t)g->ax0[g->n0 - 1];
    uint64_t smax = (uint64_t)g->ax1[g->n1 - 1];
    /* Each sequence holds its context plus the new token: at most one
     * partly filled page each beyond the summed context. */
    uint64_t pages = smax / x->s.page_size + 2ull * bmax;
    a.ones = malloc((size_t)bmax * sizeof *a.ones);
    a.ctx = malloc((size_t)bmax * sizeof *a.ctx);
    int rc = 0;
    if (!a.ones || !a.ctx || attn_alloc(&a, pages, bmax, smax + 1) < 0) {
        rc = rh_fail(e, "calibrate: out of memory for the decode attention bench");
        goto done;
    }
    for (uint32_t i = 0; i < bmax; i++) a.ones[i] = 1;
    if (calib_grid_measure(x, g, decode_set, attn_sample, &a, e) < 0) rc = rh_fail(e, "calibrate: out of memory for the decode attention bench");
done:
    free(a.ones);
    free(a.ctx);
    attn_free(&a);
    return rc;
}
