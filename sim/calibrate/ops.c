/* ops.c — the kernel benches but attention's (attention.c): each runs one
 * kern_table entry on the shapes the forward pass gives it, over its grid;
 * and what every bench shares (clock, memory, the grid walk).
 *
 * Caches. In a forward pass a layer's weights were last touched one whole
 * step ago, with every other layer's weights streamed in between, so a GEMM
 * meets them in the last-level cache (a small model) or in memory (a large
 * one), never in L1/L2. A bench that reused one weight matrix would be
 * faster than the engine; so a GEMM bench cycles through as many copies of
 * its matrix as the model's layer weights fill (within a memory budget), and
 * each call reads a copy the previous calls have pushed out of the inner
 * caches (attention.c does the same with KV pages). Activations, which the
 * forward pass has just written, stay hot as they are there.
 *
 * Points are sampled in rounds (measure.h), so the point sampled before this
 * one has left the caches in its own state. A sample of a cheap kernel (one
 * that runs many times per sample) therefore first runs it untimed once round
 * its rotation, to the steady state it then measures; an expensive one (one
 * run per sample) is long enough that where it starts hardly counts. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/calibrate/internal.h"
#include "sim/cost/cost_table.h"
#include "util/half.h"

#define WEIGHT_BUDGET (512ull << 20)

double calib_now(const calib_ctx *x)
{
    return x->b->clock ? x->b->clock(x->b->ctx) : rh_now();
}

void calib_sync(const calib_ctx *x)
{
    if (x->b->sync) x->b->sync(x->b->ctx);
}

static void point_done(void *arg)
{
    calib_ctx *x = arg;
    rh_progress_update(&x->bar, ++x->done);
}

int calib_grid_measure(calib_ctx *x, calib_grid *g, calib_set_fn set, calib_sample_fn fn, void *state, rh_err *e)
{
    uint32_t n = g->n0 * g->n1;
    calib_point *p = calloc(n, sizeof *p);
    if (!p) return rh_fail(e, "calibrate: out of memory");
    if (calib_measure_points(&x->o->rule, n, set, fn, state, p, point_done, x) < 0) {
        free(p);
        return rh_fail(e, "calibrate: a grid point could not be set up (out of memory)");
    }
    for (uint32_t i = 0; i < n; i++) {
        g->seconds[i] = p[i].seconds;
        g->spread[i] = p[i].spread;
        x->r->points++;
        if (!p[i].converged) x->r->unconverged++;
    }
    free(p);
    return 0;
}

void calib_note(calib_ctx *x, const char *fmt, ...)
{
    if (x->r->n_notes >= sizeof x->r->notes / sizeof x->r->notes[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->r->notes[x->r->n_notes++], sizeof x->r->notes[0], fmt, ap);
    va_end(ap);
}

static float next_uniform(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((*s >> 40) * (1.0 / 16777216.0));
}

static void fill_random(uint64_t *rng, float *h, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) h[i] = (2 * next_uniform(rng) - 1) * scale;
}

float *calib_random_as(calib_ctx *x, size_t n, float scale, kern_dtype dt)
{
    if (dt != KERN_BF16) return calib_random(x, n, scale);
    float *h = malloc((n ? n : 1) * sizeof *h);
    uint16_t *b = (uint16_t *)h;
    float *d = x->b->K->alloc((n ? n : 1) * sizeof(uint16_t));
    if (h && d) {
        fill_random(&x->rng, h, n, scale);
        for (size_t i = 0; i < n; i++) b[i] = rh_f32_to_bf16(h[i]);   /* in place: b[i] is behind h[i] */
        x->b->K->copy_in(d, b, n * sizeof *b);
    } else if (d) {
        x->b->K->free(d);
        d = NULL;
    }
    free(h);
    return d;
}

kern_attn_shape calib_attn_shape(const calib_shape *s)
{
    return (kern_attn_shape){s->n_heads, s->n_kv, s->hd, s->page_size, s->window, s->scale};
}

void calib_plan(calib_ctx *x, const kern_attn_batch *b, const uint32_t *h_row0, const uint32_t *h_start)
{
    kern_attn_shape sh = calib_attn_shape(&x->s);
    if (x->b->K->plan) x->b->K->plan(b, h_row0, h_start, &sh);
}

float *calib_random(calib_ctx *x, size_t n, float scale)
{
    float *h = malloc((n ? n : 1) * sizeof *h), *d = x->b->K->alloc((n ? n : 1) * sizeof *d);
    if (h && d) {
        fill_random(&x->rng, h, n, scale);
        x->b->K->copy_in(d, h, n * sizeof *h);
    } else if (d) {
        x->b->K->free(d);
        d = NULL;
    }
    free(h);
    return d;
}

void *calib_upload(calib_ctx *x, const void *host, size_t bytes)
{
    void *d = x->b->K->alloc(bytes ? bytes : 1);
    if (d && bytes) x->b->K->copy_in(d, host, bytes);
    return d;
}

void calib_free(calib_ctx *x, void *p)
{
    if (p) x->b->K->free(p);
}

static int oom(rh_err *e, const char *what)
{
    return rh_fail(e, "calibrate: out of memory for the %s bench", what);
}

/* ---- GEMMs ---------------------------------------------------------------- */

/* A projection as the forward pass runs it: alone (O, down), or, where the
 * backend groups products of one input (kern_table.gemm_group), inside its
 * group (Q with K and V, gate with up). A grouped op is timed as the whole
 * group's call and given its share by width (q: qd / (qd + 2 kvd)), so the
 * table's ops of a layer sum to what the forward pass spends. */
typedef struct gemm_bench {
    calib_ctx *x;
    const calib_grid *g;
    float *in;
    float *out[KERN_GEMM_GROUP], *bias[KERN_GEMM_GROUP];
    float **w;                          /* copies x products, copy-major */
    uint32_t copies, next, m, n[KERN_GEMM_GROUP], n_prod, k;
    int acc;
    double share;                       /* of the timed call that is this op */
} gemm_bench;

static int gemm_set(void *p, uint32_t i)
{
    gemm_bench *b = p;
    b->m = (uint32_t)b->g->ax0[i];
    return 0;
}

static void gemm_call(gemm_bench *g)
{
    const kern_table *K = g->x->b->K;
    float **w = g->w + (size_t)g->next * g->n_prod;
    if (g->n_prod == 1) {
        K->gemm(g->in, w[0], g->bias[0], g->out[0], g->m, g->n[0], g->k, g->acc);
    } else {
        kern_gemm_out o[KERN_GEMM_GROUP];
        for (uint32_t p = 0; p < g->n_prod; p++) o[p] = (kern_gemm_out){w[p], g->bias[p], g->out[p], g->n[p]};
        K->gemm_group(g->in, g->m, g->k, g->n_prod, o);
    }
    g->next = (g->next + 1) % g->copies;
}

static double gemm_sample(void *p, uint32_t iters, double *spent)
{
    gemm_bench *g = p;
    for (uint32_t i = 0; iters > 1 && i < g->copies && i < iters; i++) gemm_call(g);
    double t0 = calib_now(g->x);
    for (uint32_t i = 0; i < iters; i++) gemm_call(g);
    calib_sync(g->x);
    *spent = calib_now(g->x) - t0;
    return *spent * g->share;
}

uint64_t calib_layer_weight_bytes(const calib_shape *s)
{
    uint64_t per = (uint64_t)s->qd * s->d * 2 + (uint64_t)s->kvd * s->d * 2 + (uint64_t)s->f * s->d * 3;
    return per * s->layers * sizeof(float);
}

int calib_bench_gemm(calib_ctx *x, int op, calib_grid *g, rh_err *e)
{
    const calib_shape *s = &x->s;
    const kern_table *K = x->b->K;
    gemm_bench b = {.x = x, .g = g, .n_prod = 1, .share = 1.0};
    bool bias = false;
    switch (op) {
    case CT_Q_PROJ: b.n[0] = s->qd, b.k = s->d, bias = s->qkv_bias; break;
    case CT_KV_PROJ: b.n[0] = s->kvd, b.k = s->d, bias = s->qkv_bias; break;
    case CT_O_PROJ: b.n[0] = s->d, b.k = s->qd, bias = s->o_bias, b.acc = 1; break;
    case CT_GATE_UP_PROJ: b.n[0] = s->f, b.k = s->d, bias = s->mlp_bias; break;
    default: b.n[0] = s->d, b.k = s->f, bias = s->mlp_bias, b.acc = 1; break;
    }
    if (K->gemm_group && (op == CT_Q_PROJ || op == CT_KV_PROJ)) {
        b.n_prod = 3, b.n[0] = s->qd, b.n[1] = b.n[2] = s->kvd;
        b.share = (double)(op == CT_Q_PROJ ? s->qd : s->kvd) / (s->qd + 2.0 * s->kvd);
    } else if (K->gemm_group && op == CT_GATE_UP_PROJ) {
        b.n_prod = 2, b.n[1] = s->f, b.share = 0.5;
    }
    kern_dtype wdt = K->weight_dtype;
    uint64_t wbytes = 0, nmax = 0;
    for (uint32_t p = 0; p < b.n_prod; p++) {
        wbytes += (uint64_t)b.n[p] * b.k * kern_dtype_size(wdt);
        if (b.n[p] > nmax) nmax = b.n[p];
    }
    uint64_t want = calib_layer_weight_bytes(s) / wbytes, cap = WEIGHT_BUDGET / wbytes;
    if (want < s->layers) want = s->layers;
    b.copies = (uint32_t)(want < cap ? want : cap);
    if (b.copies < 1) b.copies = 1;
    uint32_t mmax = (uint32_t)g->ax0[g->n0 - 1];
    const char *name = cost_table_ops[op].name;
    int rc = 0;
    float *host = malloc((size_t)nmax * b.k * sizeof *host);
    b.w = calloc((size_t)b.copies * b.n_prod, sizeof *b.w);
    b.in = calib_random(x, (size_t)mmax * b.k, 1.0f);
    if (!host || !b.w || !b.in) {
        rc = oom(e, name);
        goto done;
    }
    for (uint32_t p = 0; p < b.n_prod; p++) {
        b.out[p] = calib_random(x, (size_t)mmax * b.n[p], 1.0f);
        b.bias[p] = bias ? calib_random(x, b.n[p], 0.1f) : NULL;
        if (!b.out[p] || (bias && !b.bias[p])) {
            rc = oom(e, name);
            goto done;
        }
    }
    for (uint32_t p = 0; p < b.n_prod; p++) {
        size_t n = (size_t)b.n[p] * b.k;
        fill_random(&x->rng, host, n, 1.0f / sqrtf((float)b.k));
        if (wdt == KERN_BF16) {
            uint16_t *h16 = (uint16_t *)host;
            for (size_t i = 0; i < n; i++) h16[i] = rh_f32_to_bf16(host[i]);
        }
        for (uint32_t i = 0; i < b.copies; i++)
            if (!(b.w[(size_t)i * b.n_prod + p] = calib_upload(x, host, n * kern_dtype_size(wdt)))) {
                rc = oom(e, name);
                goto done;
            }
    }
    rc = calib_grid_measure(x, g, gemm_set, gemm_sample, &b, e);
done:
    for (size_t i = 0; b.w && i < (size_t)b.copies * b.n_prod; i++) calib_free(x, b.w[i]);
    free(b.w);
    free(host);
    calib_free(x, b.in);
    for (uint32_t p = 0; p < b.n_prod; p++) {
        calib_free(x, b.out[p]);
        calib_free(x, b.bias[p]);
    }
    return rc;
}

/* ---- per-row kernels -------------------------------------------------- */

typedef struct rows_bench {
    calib_ctx *x;
    const calib_grid *g;
    int op;
    uint32_t rows;
    float *a, *b, *c, *d, *w;           /* meaning by op, see rows_sample */
    int32_t *ids;
    uint32_t *pos, *row0, *start, *pt0, *pages;
} rows_bench;

static void rows_run(rows_bench *r)
{
    const calib_shape *s = &r->x->s;
    const kern_table *K = r->x->b->K;
    uint32_t T = r->rows, half = s->hd / 2;
    kern_attn_shape sh = calib_attn_shape(s);
    kern_attn_batch ab = {1, r->row0, r->start, r->pt0, r->pages};
    switch (r->op) {
    case CT_EMBEDDING: K->embedding(r->a, r->ids, T, s->d, r->b); break;
    case CT_ROPE_ANGLES: K->rope_angles(r->pos, r->w, T, half, r->a, r->b); break;
    case CT_RMSNORM: K->rmsnorm(r->a, r->w, s->eps, T, s->d, r->b); break;
    case CT_ROPE:
        K->rope(r->a, r->c, r->d, T, s->n_heads, s->hd, s->qd);
        K->rope(r->b, r->c, r->d, T, s->n_kv, s->hd, s->kvd);
        break;
    case CT_KV_WRITE: K->kv_write(r->a, r->b, &ab, &sh, r->c, r->d); break;
    default: K->silu_mul(r->a, r->b, r->c, (size_t)T * s->f); break;
    }
}

static double rows_sample(void *p, uint32_t iters, double *spent)
{
    rows_bench *r = p;
    if (iters > 1) rows_run(r);
    double t0 = calib_now(r->x);
    for (uint32_t i = 0; i < iters; i++) rows_run(r);
    calib_sync(r->x);
    return *spent = calib_now(r->x) - t0;
}

/* kv_write's batch descriptor: one sequence of `rows` new tokens at position
 * 0 over consecutive pages. Uploaded per point (it holds the row count). */
static int kv_batch(rows_bench *r, uint32_t rows)
{
    calib_ctx *x = r->x;
    uint32_t np = (rows + x->s.page_size - 1) / x->s.page_size;
    uint32_t row0[2] = {0, rows}, start[1] = {0}, pt0[2] = {0, np};
    calib_free(x, r->row0);
    calib_free(x, r->start);
    calib_free(x, r->pt0);
    r->row0 = calib_upload(x, row0, sizeof row0);
    r->start = calib_upload(x, start, sizeof start);
    r->pt0 = calib_upload(x, pt0, sizeof pt0);
    if (!r->row0 || !r->start || !r->pt0) return -1;
    kern_attn_batch ab = {1, r->row0, r->start, r->pt0, r->pages};
    calib_plan(x, &ab, row0, start);
    return 0;
}

static int rows_set(void *p, uint32_t i)
{
    rows_bench *r = p;
    r->rows = (uint32_t)r->g->ax0[i];
    return r->op == CT_KV_WRITE ? kv_batch(r, r->rows) : 0;
}

int calib_bench_rows(calib_ctx *x, int op, calib_grid *g, rh_err *e)
{
    const calib_shape *s = &x->s;
    rows_bench r = {.x = x, .g = g, .op = op};
    uint32_t T = (uint32_t)g->ax0[g->n0 - 1], half = s->hd / 2;
    size_t Td = (size_t)T * s->d;
    const char *name = cost_table_ops[op].name;
    int rc = 0, ok = 1;
    switch (op) {
    case CT_EMBEDDING: {
        r.a = calib_random_as(x, (size_t)s->vocab * s->d, 1.0f, x->b->K->weight_dtype);
        r.b = calib_random(x, Td, 1.0f);
        int32_t *ids = malloc((size_t)T * sizeof *ids);
        if (ids)
            for (uint32_t i = 0; i < T; i++) ids[i] = (int32_t)(next_uniform(&x->rng) * s->vocab) % (int32_t)s->vocab;
        r.ids = ids ? calib_upload(x, ids, (size_t)T * sizeof *ids) : NULL;
        free(ids);
        ok = r.a && r.b && r.ids;
        break;
    }
    case CT_ROPE_ANGLES: {
        uint32_t *pos = malloc((size_t)T * sizeof *pos);
        if (pos)
            for (uint32_t i = 0; i < T; i++) pos[i] = i;
        r.pos = pos ? calib_upload(x, pos, (size_t)T * sizeof *pos) : NULL;
        free(pos);
        r.w = calib_random(x, half, 1.0f);
        r.a = calib_random(x, (size_t)T * half, 1.0f);
        r.b = calib_random(x, (size_t)T * half, 1.0f);
        ok = r.pos && r.w && r.a && r.b;
        break;
    }
    case CT_RMSNORM:
        r.a = calib_random(x, Td, 1.0f);
        r.b = calib_random(x, Td, 1.0f);
        r.w = calib_random(x, s->d, 1.0f);
        ok = r.a && r.b && r.w;
        break;
    case CT_ROPE: {
        r.a = calib_random(x, (size_t)T * s->qd, 1.0f);
        r.b = calib_random(x, (size_t)T * s->kvd, 1.0f);
        /* cos and sin of real angles keep the rotated rows bounded. */
        float *c = malloc((size_t)T * half * sizeof *c), *sn = malloc((size_t)T * half * sizeof *sn);
        if (c && sn)
            for (size_t i = 0; i < (size_t)T * half; i++) {
                c[i] = cosf((float)i * 0.01f);
                sn[i] = sinf((float)i * 0.01f);
            }
        r.c = c && sn ? calib_upload(x, c, (size_t)T * half * sizeof *c) : NULL;
        r.d = c && sn ? calib_upload(x, sn, (size_t)T * half * sizeof *sn) : NULL;
        free(c);
        free(sn);
        ok = r.a && r.b && r.c && r.d;
        break;
    }
    case CT_KV_WRITE: {
        uint32_t np = (T + s->page_size - 1) / s->page_size;
        size_t pool = (size_t)np * s->page_size * s->kvd;
        r.a = calib_random(x, (size_t)T * s->kvd, 1.0f);
        r.b = calib_random(x, (size_t)T * s->kvd, 1.0f);
        r.c = calib_random_as(x, pool, 1.0f, x->b->K->kv_dtype);
        r.d = calib_random_as(x, pool, 1.0f, x->b->K->kv_dtype);
        uint32_t *pages = malloc((size_t)np * sizeof *pages);
        if (pages)
            for (uint32_t i = 0; i < np; i++) pages[i] = i;
        r.pages = pages ? calib_upload(x, pages, (size_t)np * sizeof *pages) : NULL;
        free(pages);
        ok = r.a && r.b && r.c && r.d && r.pages;
        break;
    }
    default:   /* silu_mul: out is its own buffer so repeated runs see the same inputs */
        r.a = calib_random(x, (size_t)T * s->f, 1.0f);
        r.b = calib_random(x, (size_t)T * s->f, 1.0f);
        r.c = calib_random(x, (size_t)T * s->f, 1.0f);
        ok = r.a && r.b && r.c;
        break;
    }
    if (!ok) {
        rc = oom(e, name);
        goto done;
    }
    if (calib_grid_measure(x, g, rows_set, rows_sample, &r, e) < 0) rc = oom(e, name);
done:
    calib_free(x, r.a), calib_free(x, r.b), calib_free(x, r.c), calib_free(x, r.d), calib_free(x, r.w);
    calib_free(x, r.ids), calib_free(x, r.pos), calib_free(x, r.row0), calib_free(x, r.start), calib_free(x, r.pt0), calib_free(x, r.pages);
    return rc;
}

/* ---- LM head and sampling ---------------------------------------------------- */

typedef struct head_bench {
    calib_ctx *x;
    const calib_grid *g;
    uint32_t rows;
    float *h, *norm, *w, *tmp, *logits, *host_logits;
    uint32_t *row_ids;
    kern_cand *cand;
    uint64_t rng;
} head_bench;

static double head_sample(void *p, uint32_t iters, double *spent)
{
    head_bench *h = p;
    const calib_shape *s = &h->x->s;
    if (iters > 1)
        h->x->b->K->lm_head(h->h, h->row_ids, h->rows, h->norm, s->eps, h->w, s->vocab, s->d, h->tmp, h->logits);
    double t0 = calib_now(h->x);
    for (uint32_t i = 0; i < iters; i++)
        h->x->b->K->lm_head(h->h, h->row_ids, h->rows, h->norm, s->eps, h->w, s->vocab, s->d, h->tmp, h->logits);
    calib_sync(h->x);
    return *spent = calib_now(h->x) - t0;
}

static int head_set(void *p, uint32_t i)
{
    head_bench *h = p;
    h->rows = (uint32_t)h->g->ax0[i];
    return 0;
}

int calib_bench_lm_head(calib_ctx *x, calib_grid *g, rh_err *e)
{
    const calib_shape *s = &x->s;
    head_bench h = {.x = x, .g = g};
    uint32_t R = (uint32_t)g->ax0[g->n0 - 1];
    uint32_t *ids = malloc((size_t)R * sizeof *ids);
    if (ids)
        for (uint32_t i = 0; i < R; i++) ids[i] = i;
    h.row_ids = ids ? calib_upload(x, ids, (size_t)R * sizeof *ids) : NULL;
    free(ids);
    h.h = calib_random(x, (size_t)R * s->d, 1.0f);
    h.norm = calib_random(x, s->d, 1.0f);
    h.w = calib_random_as(x, (size_t)s->vocab * s->d, 1.0f / sqrtf((float)s->d), x->b->K->weight_dtype);
    h.tmp = calib_random(x, (size_t)R * s->d, 1.0f);
    h.logits = calib_random(x, (size_t)R * s->vocab, 1.0f);
    int rc = 0;
    if (!h.row_ids || !h.h || !h.norm || !h.w || !h.tmp || !h.logits) rc = oom(e, "lm_head");
    if (rc == 0) rc = calib_grid_measure(x, g, head_set, head_sample, &h, e);
    calib_free(x, h.row_ids), calib_free(x, h.h), calib_free(x, h.norm), calib_free(x, h.w), calib_free(x, h.tmp), calib_free(x, h.logits);
    return rc;
}

static double sample_sample(void *p, uint32_t iters, double *spent)
{
    head_bench *h = p;
    const calib_shape *s = &h->x->s;
    double t0 = calib_now(h->x);
    for (uint32_t i = 0; i < iters; i++)
        for (uint32_t r = 0; r < h->rows; r++)
            h->x->b->K->sample(h->host_logits + (size_t)r * s->vocab, s->vocab, &h->x->o->sampling, &h->rng, h->cand);
    return *spent = calib_now(h->x) - t0;
}

/* Sampling reads host logits (what the runner returns), one row per request. */
int calib_bench_sample(calib_ctx *x, calib_grid *g, rh_err *e)
{
    const calib_shape *s = &x->s;
    head_bench h = {.x = x, .g = g, .rng = kern_rng_init(x->o->seed)};
    uint32_t R = (uint32_t)g->ax0[g->n0 - 1];
    h.host_logits = malloc((size_t)R * s->vocab * sizeof *h.host_logits);
    h.cand = malloc((size_t)s->vocab * sizeof *h.cand);
    int rc = 0;
    if (!h.host_logits || !h.cand) {
        rc = oom(e, "sample");
    } else {
        /* Logits of a trained model's spread: a few units. */
        fill_random(&x->rng, h.host_logits, (size_t)R * s->vocab, 8.0f);
        rc = calib_grid_measure(x, g, head_set, sample_sample, &h, e);
    }
    free(h.host_logits);
    free(h.cand);
    return rc;
}

/* ---- all-reduce ------------------------------------------------------- */

int calib_bench_allreduce(calib_ctx *x, calib_grid *g, rh_err *e)
{
    (void)e;
    uint64_t bytes[64] = {0};
    uint32_t n = g->n0 < 64 ? g->n0 : 64;
    for (uint32_t i = 0; i < n; i++) bytes[i] = (uint64_t)g->ax0[i];
    rh_err why;
    if (x->b->allreduce(x->b->ctx, x->o->tp, bytes, n, g->seconds, &why) < 0) {
        calib_note(x, "allreduce: skipped: %s, so this table prices tensor parallel without communication", why.msg);
        return 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        g->spread[i] = 0;   /* the backend's own median; its spread is not reported */
        x->r->points++;
        rh_progress_update(&x->bar, ++x->done);
    }
    return 0;
}
