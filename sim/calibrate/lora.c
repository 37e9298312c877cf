/* lora.c — LoRA's kernels timed as the forward pass runs them
 * (engine/model/forward.c): for each of a layer's seven modules, per
 * segment of rows under one adapter, the shrink GEMM x·Aᵀ into a rank-wide
 * buffer and the expand GEMM accumulating u·Bᵀ into the module's output.
 * A grid point is (tokens, adapters): the tokens split evenly into that many
 * segments, each reading its own adapter's weights; the weights of several
 * layers are cycled through, as the forward reads a new layer's each time,
 * so caches hold what they would. Loading is runner_lora_load's work: the
 * adapter's A and B of every layer copied into the backend's memory. */
#include <stdlib.h>
#include <string.h>

#include "sim/calibrate/internal.h"

#define LORA_WEIGHT_BUDGET (256ull << 20)
#define LORA_MODULES 7

typedef struct lora_bench {
    calib_ctx *x;
    const calib_grid *g;
    uint32_t rank, copies, next, tokens, adapters, max_adapters;
    uint32_t in[LORA_MODULES], out[LORA_MODULES];
    float *xin, *u, *y;             /* [max tokens][widest], [max tokens][rank], [max tokens][widest] */
    float **a, **b;                 /* [copy][adapter][module] */
} lora_bench;

static void module_dims(const calib_shape *s, uint32_t *in, uint32_t *out)
{
    const uint32_t i[LORA_MODULES] = {s->d, s->d, s->d, s->qd, s->d, s->d, s->f};
    const uint32_t o[LORA_MODULES] = {s->qd, s->kvd, s->kvd, s->d, s->f, s->f, s->d};
    memcpy(in, i, sizeof i);
    memcpy(out, o, sizeof o);
}

static int lora_set(void *p, uint32_t i)
{
    lora_bench *b = p;
    b->tokens = (uint32_t)b->g->ax0[i / b->g->n1];
    b->adapters = (uint32_t)b->g->ax1[i % b->g->n1];
    if (b->adapters > b->tokens) b->adapters = b->tokens;   /* a segment holds at least one row */
    return 0;
}

static void lora_call(lora_bench *b)
{
    const kern_table *K = b->x->b->K;
    for (uint32_t m = 0; m < LORA_MODULES; m++) {
        uint32_t row = 0;
        for (uint32_t a = 0; a < b->adapters; a++) {
            uint32_t rows = b->tokens / b->adapters + (a < b->tokens % b->adapters);
            size_t at = ((size_t)b->next * b->max_adapters + a) * LORA_MODULES + m;
            K->gemm(b->xin + (size_t)row * b->in[m], b->a[at], NULL, b->u, rows, b->rank, b->in[m], 0);
            K->gemm(b->u, b->b[at], NULL, b->y + (size_t)row * b->out[m], rows, b->out[m], b->rank, 1);
            row += rows;
        }
    }
    b->next = (b->next + 1) % b->copies;
}

static double lora_sample(void *p, uint32_t iters, double *spent)
{
    lora_bench *b = p;
    for (uint32_t i = 0; iters > 1 && i < b->copies && i < iters; i++) lora_call(b);
    double t0 = calib_now(b->x);
    for (uint32_t i = 0; i < iters; i++) lora_call(b);
    calib_sync(b->x);
    *spent = calib_now(b->x) - t0;
    return *spent;
}

static void free_weights(calib_ctx *x, lora_bench *b)
{
    size_t n = (size_t)b->copies * b->max_adapters * LORA_MODULES;
    for (size_t i = 0; b->a && i < n; i++) calib_free(x, b->a[i]);
    for (size_t i = 0; b->b && i < n; i++) calib_free(x, b->b[i]);
    free(b->a);
    free(b->b);
}

int calib_bench_lora(calib_ctx *x, calib_grid *g, rh_err *e)
{
    const calib_shape *s = &x->s;
    lora_bench b = {.x = x, .g = g, .rank = x->o->lora_rank, .max_adapters = (uint32_t)g->ax1[g->n1 - 1]};
    module_dims(s, b.in, b.out);
    uint32_t widest = 0;
    uint64_t per_adapter = 0;
    for (int m = 0; m < LORA_MODULES; m++) {
        if (b.in[m] > widest) widest = b.in[m];
        if (b.out[m] > widest) widest = b.out[m];
        per_adapter += (uint64_t)b.rank * (b.in[m] + b.out[m]) * kern_dtype_size(x->b->K->weight_dtype);
    }
    uint64_t cap = LORA_WEIGHT_BUDGET / (per_adapter * b.max_adapters);
    b.copies = (uint32_t)(cap < s->layers ? cap : s->layers);
    if (b.copies < 1) b.copies = 1;
    uint32_t tmax = (uint32_t)g->ax0[g->n0 - 1];
    size_t n = (size_t)b.copies * b.max_adapters * LORA_MODULES;
    b.a = calloc(n, sizeof *b.a);
    b.b = calloc(n, sizeof *b.b);
    b.xin = calib_random(x, (size_t)tmax * widest, 1.0f);
    b.u = calib_random(x, (size_t)tmax * b.rank, 1.0f);
    b.y = calib_random(x, (size_t)tmax * widest, 1.0f);
    int rc = 0;
    if (!b.a || !b.b || !b.xin || !b.u || !b.y) {
        rc = rh_fail(e, "calibrate: lora: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t m = (uint32_t)(i % LORA_MODULES);
        b.a[i] = calib_random_as(x, (size_t)b.rank * b.in[m], 0.05f, x->b->K->weight_dtype);
        b.b[i] = calib_random_as(x, (size_t)b.out[m] * b.rank, 0.05f, x->b->K->weight_dtype);
        if (!b.a[i] || !b.b[i]) {
            rc = rh_fail(e, "calibrate: lora: out of memory");
            goto done;
        }
    }
    rc = calib_grid_measure(x, g, lora_set, lora_sample, &b, e);
done:
    free_weights(x, &b);
    calib_free(x, b.xin);
    calib_free(x, b.u);
    calib_free(x, b.y);
    return rc;
}

/* Loading n adapters: every layer's A and B of the seven modules allocated
 * in the backend and copied in from host memory, then freed (as an adapter
 * leaves its slot). */
typedef struct load_bench {
    calib_ctx *x;
    const calib_grid *g;
    uint32_t n, layers, rank;
    uint32_t in[LORA_MODULES], out[LORA_MODULES];
    float *host;                    /* the largest matrix, host memory */
} load_bench;

static int load_set(void *p, uint32_t i)
{
    load_bench *b = p;
    b->n = (uint32_t)b->g->ax0[i];
    return 0;
}

static double load_sample(void *p, uint32_t iters, double *spent)
{
    load_bench *b = p;
    const kern_table *K = b->x->b->K;
    size_t wsz = kern_dtype_size(K->weight_dtype);
    double t0 = calib_now(b->x);
    for (uint32_t it = 0; it < iters; it++)
        for (uint32_t a = 0; a < b->n; a++)
            for (uint32_t l = 0; l < b->layers; l++)
                for (int m = 0; m < LORA_MODULES; m++)
                    for (int k = 0; k < 2; k++) {
                        size_t bytes = (size_t)b->rank * (k ? b->out[m] : b->in[m]) * wsz;
                        void *d = K->alloc(bytes);
                        if (!d) continue;
                        K->copy_in(d, b->host, bytes);
                        K->free(d);
                    }
    calib_sync(b->x);
    *spent = calib_now(b->x) - t0;
    return *spent;
}

int calib_bench_lora_load(calib_ctx *x, calib_grid *g, rh_err *e)
{
    load_bench b = {.x = x, .g = g, .layers = x->s.layers, .rank = x->o->lora_rank};
    module_dims(&x->s, b.in, b.out);
    uint32_t widest = 0;
    for (int m = 0; m < LORA_MODULES; m++) {
        if (b.in[m] > widest) widest = b.in[m];
        if (b.out[m] > widest) widest = b.out[m];
    }
    b.host = calloc((size_t)widest * b.rank, sizeof(float));
    if (!b.host) return rh_fail(e, "calibrate: lora_load: out of memory");
    int rc = calib_grid_measure(x, g, load_set, load_sample, &b, e);
    free(b.host);
    return rc;
}
