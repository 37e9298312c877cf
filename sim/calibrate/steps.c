/* steps.c — whole forward passes over a grid of step shapes (the table's
 * step_prefill and step_decode operators).
 *
 * Isolated kernels sum wrong: one operator after another finds the caches
 * as the previous one left them, and the runner lays a batch out between
 * them; timed alone, each starts warm or cold in a way the forward never
 * does. So the step classes a recording holds most are also timed whole:
 * runner_forward on the model's shapes (seeded weights: values do not
 * change the time) for one prefill chunk of n tokens after c cached ones,
 * and for s decodes at c tokens of context on average (spread from about 0
 * to 2c, as decode_attention is measured). Sampling and scheduling
 * run outside runner_forward and keep their own operators. The KV pages
 * hold whatever the pool was allocated with: attention reads them all the
 * same. Not under tensor parallel (the group's forward needs every rank). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/runner.h"
#include "sim/calibrate/internal.h"
#include "sim/cost/cost_table.h"

#define STEP_KV_BUDGET (1024.0 * 1024 * 1024)

typedef struct step_bench {
    calib_ctx *x;
    const calib_grid *g;
    int op;
    runner *r;
    runner_seq *seqs;
    uint32_t n;
    int32_t *tokens;
    uint32_t *pages;
    uint32_t span, rotations, shift;   /* pages a point reads; the disjoint page sets it rotates through */
    uint64_t pool_pages;
    int failed;
    rh_err err;
} step_bench;

/* Each forward reads its KV from the next of `rotations` disjoint page
 * sets: in the engine a step's pages were last read a step ago, with every
 * other page and weight read since, so a bench re-reading one set would
 * find it in cache and run faster than any recorded step. */
static void rotate(step_bench *b)
{
    b->shift = (b->shift + 1) % b->rotations;
    for (uint32_t i = 0; i < b->n; i++) {
        uint32_t per = b->span / b->n;
        b->seqs[i].pages = b->pages + (size_t)b->shift * b->span + (size_t)i * per;
    }
}

static double step_sample(void *p, uint32_t iters, double *spent)
{
    step_bench *b = p;
    double t = 0;
    for (uint32_t i = 0; i < iters && !b->failed; i++) {
        const float *logits;
        rotate(b);
        double t0 = calib_now(b->x);
        if (runner_forward(b->r, b->seqs, b->n, &logits, &b->err) < 0) b->failed = 1;
        calib_sync(b->x);
        t += calib_now(b->x) - t0;
    }
    *spent = t;
    return t;
}

/* Point k: the batch of its shape, each sequence on its own run of pages. */
static int step_set(void *p, uint32_t k)
{
    step_bench *b = p;
    const calib_grid *g = b->g;
    uint32_t x = (uint32_t)g->ax0[k / g->n1], ctx = (uint32_t)g->ax1[k % g->n1];
    uint32_t ps = b->x->s.page_size;
    uint32_t n_seqs = b->op == CT_STEP_PREFILL ? 1 : x, n_new = b->op == CT_STEP_PREFILL ? x : 1;
    /* Decode contexts spread from about 0 to twice the mean, as in a
     * running batch and in the decode_attention bench (whose sum the ratio
     * is taken against). */
    uint32_t per = ((b->op == CT_STEP_PREFILL ? ctx : 2 * ctx) + n_new + ps - 1) / ps;
    uint64_t sum = 0, want = (uint64_t)ctx * n_seqs;
    for (uint32_t i = 0; i < n_seqs; i++) {
        uint32_t start = b->op == CT_STEP_PREFILL ? ctx : (uint32_t)((uint64_t)ctx * (2 * i + 1) / n_seqs);
        sum += start;
        b->seqs[i] = (runner_seq){b->tokens, n_new, start, b->pages + (size_t)i * per, 0, 1, NULL};
    }
    for (uint32_t i = 0; sum < want; i = (i + 1) % n_seqs, sum++) b->seqs[i].start++;   /* the remainder */
    for (uint32_t i = 0; i < n_seqs; i++) b->seqs[i].n_pages = (b->seqs[i].start + n_new + ps - 1) / ps;
    b->span = per * n_seqs;
    b->rotations = b->span ? (uint32_t)(b->pool_pages / b->span) : 1;
    if (b->rotations < 1) b->rotations = 1;
    b->n = n_seqs;
    return b->failed ? -1 : 0;
}

int calib_bench_step(calib_ctx *x, int op, calib_grid *g, rh_err *e)
{
    if (x->o->tp > 1) {
        calib_note(x, "%s: not measured under tensor parallel (the table prices the kernels' sum)",
                   cost_table_ops[op].name);
        return 1;
    }
    model_config c = *x->c;
    if (model_check_memory(&c, 0, NULL) < 0) {
        calib_note(x, "%s: not measured: %s does not fit in memory", cost_table_ops[op].name, c.name);
        return 1;
    }
    /* The largest point's pages, and its tokens. */
    uint32_t ps = x->s.page_size, most_pages = 0, most_tokens = 1, most_seqs = 1;
    for (uint32_t i = 0; i < g->n0; i++)
        for (uint32_t j = 0; j < g->n1; j++) {
            uint32_t a = (uint32_t)g->ax0[i], ctx = (uint32_t)g->ax1[j];
            uint32_t seqs = op == CT_STEP_PREFILL ? 1 : a, n_new = op == CT_STEP_PREFILL ? a : 1;
            uint32_t pages = seqs * (((op == CT_STEP_PREFILL ? ctx : 2 * ctx) + n_new + ps - 1) / ps);
            if (pages > most_pages) most_pages = pages;
            if (n_new > most_tokens) most_tokens = n_new;
            if (seqs > most_seqs) most_seqs = seqs;
        }
    /* As many page sets as a gigabyte of KV holds, up to 16: enough that a
     * layer's pages leave the caches between two reads. */
    double page_bytes = (double)ps * x->s.kvd * kern_dtype_size(x->b->K->kv_dtype) * 2 * x->s.layers;
    uint64_t sets = (uint64_t)fmax(1, fmin(16, STEP_KV_BUDGET / (page_bytes * most_pages)));
    step_bench b = {.x = x, .g = g, .op = op, .pool_pages = sets * most_pages};
    model *m = model_new_dummy(&c, x->o->seed, 0, e);
    runner_config rc = {ps, (uint32_t)b.pool_pages, 0, x->b->K};
    b.r = m ? runner_new(m, &rc, e) : NULL;
    b.seqs = calloc(most_seqs, sizeof *b.seqs);
    b.pages = malloc((size_t)b.pool_pages * sizeof *b.pages);
    b.tokens = malloc((size_t)most_tokens * sizeof *b.tokens);
    int rc_ = 0;
    if (!b.r) {
        rc_ = -1;
    } else if (!b.seqs || !b.pages || !b.tokens) {
        rc_ = rh_fail(e, "calibrate: out of memory for the %s bench", cost_table_ops[op].name);
    } else {
        for (uint64_t i = 0; i < b.pool_pages; i++) b.pages[i] = (uint32_t)i;
        for (uint32_t i = 0; i < most_tokens; i++) b.tokens[i] = (int32_t)(1 + i % (c.vocab_size - 1));
        rc_ = calib_grid_measure(x, g, step_set, step_sample, &b, e);
        if (b.failed) rc_ = rh_fail(e, "calibrate: %s: %s", cost_table_ops[op].name, b.err.msg);
    }
    free(b.seqs);
    free(b.pages);
    free(b.tokens);
    runner_free(b.r);
    model_free(m);
    return rc_;
}
