/* overhead.c — the CPU time of a step outside the kernels, over the number
 * of sequences in the batch.
 *
 * batch_prep: runner_forward validates the batch, flattens it into the
 * arrays the kernels take and grows its buffers. That code is measured where
 * it runs: the runner is given a copy of the backend's table whose every
 * kernel entry is timed (and synced), and a sample is the forward pass's wall
 * time minus its kernels' time. The batch is decodes at a short context, so
 * the kernels are cheap and the difference is not lost in their noise.
 *
 * schedule: the scheduler core's core_schedule for a step whose batch is
 * that many running decodes, with SGLang's default knobs. The engine's step
 * duration runs from core_schedule's start to core_complete's call, so
 * core_complete (timed by nothing, run after each sample step) falls between
 * steps. Each sample runs `iters` steps of one core; a core nearing its
 * requests' output length is replaced (untimed) before the sample. */
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"
#include "engine/model/runner.h"
#include "sim/calibrate/internal.h"

/* ---- batch preparation ---------------------------------------------------- */

/* The timed table's state. The runner is driven by one thread, and one
 * calibration runs at a time, so the wrapper keeps it in one place. */
static struct {
    const kern_table *inner;
    const calib_ctx *x;
    double kernel_s;
} timed;

#define TIMED(call)                                                                                                   \
    do {                                                                                                              \
        double t0_ = calib_now(timed.x);                                                                              \
        call;                                                                                                         \
        calib_sync(timed.x);                                                                                          \
        timed.kernel_s += calib_now(timed.x) - t0_;                                                                   \
    } while (0)

static void t_gemm(const float *x, const float *w, const float *bias, float *y, uint32_t m, uint32_t n, uint32_t k,
                   int acc)
{
    TIMED(timed.inner->gemm(x, w, bias, y, m, n, k, acc));
}
static void t_gemm_group(const float *x, uint32_t m, uint32_t k, uint32_t n_prod, const kern_gemm_out *outs)
{
    TIMED(timed.inner->gemm_group(x, m, k, n_prod, outs));
}
static void t_embedding(const float *t, const int32_t *ids, uint32_t n, uint32_t dim, float *out)
{
    TIMED(timed.inner->embedding(t, ids, n, dim, out));
}
static void t_rmsnorm(const float *x, const float *w, float eps, uint32_t rows, uint32_t dim, float *out)
{
    TIMED(timed.inner->rmsnorm(x, w, eps, rows, dim, out));
}
static void t_rope_angles(const uint32_t *pos, const float *f, uint32_t rows, uint32_t half, float *c, float *s)
{
    TIMED(timed.inner->rope_angles(pos, f, rows, half, c, s));
}
static void t_rope(float *x, const float *c, const float *s, uint32_t rows, uint32_t nh, uint32_t hd, uint32_t st)
{
    TIMED(timed.inner->rope(x, c, s, rows, nh, hd, st));
}
static void t_silu_mul(const float *g, const float *u, float *out, size_t n)
{
    TIMED(timed.inner->silu_mul(g, u, out, n));
}
static void t_kv_write(const float *k, const float *v, const kern_attn_batch *b, const kern_attn_shape *s, float *kp,
                       float *vp)
{
    TIMED(timed.inner->kv_write(k, v, b, s, kp, vp));
}
static void t_attention(const float *q, const float *kp, const float *vp, const kern_attn_batch *b,
                        const kern_attn_shape *s, float *out, float *scratch)
{
    TIMED(timed.inner->attention(q, kp, vp, b, s, out, scratch));
}
static void t_lm_head(const float *h, const uint32_t *rows, uint32_t n, const float *nw, float eps, const float *w,
                      uint32_t vocab, uint32_t dim, float *tmp, float *logits)
{
    TIMED(timed.inner->lm_head(h, rows, n, nw, eps, w, vocab, dim, tmp, logits));
}

typedef struct prep_bench {
    calib_ctx *x;
    const calib_grid *g;
    runner *r;
    runner_seq *seqs;
    uint32_t n;
    int failed;
    rh_err err;
} prep_bench;

static double prep_sample(void *p, uint32_t iters, double *spent)
{
    prep_bench *b = p;
    double outside = 0;
    *spent = 0;
    for (uint32_t i = 0; i < iters && !b->failed; i++) {
        const float *logits;
        timed.kernel_s = 0;
        double t0 = calib_now(b->x);
        if (runner_forward(b->r, b->seqs, b->n, &logits, &b->err) < 0) b->failed = 1;
        double wall = calib_now(b->x) - t0;
        *spent += wall;
        outside += wall > timed.kernel_s ? wall - timed.kernel_s : 0;
    }
    return outside;
}

static int prep_set(void *p, uint32_t i)
{
    prep_bench *b = p;
    b->n = (uint32_t)b->g->ax0[i];
    return b->failed ? -1 : 0;
}

int calib_bench_batch_prep(calib_ctx *x, calib_grid *g, rh_err *e)
{
    const uint32_t ctx_tokens = 15;   /* one page each at the default page size; cheap attention */
    uint32_t B = (uint32_t)g->ax0[g->n0 - 1], ps = x->s.page_size;
    uint32_t pages_per = (ctx_tokens + 1 + ps - 1) / ps;
    model_config c = *x->c;
    if (model_check_memory(&c, 0, NULL) < 0) {
        /* The runner's own work does not depend on the depth: one layer
         * shows it as well and fits. */
        c.n_layers = 1;
        calib_note(x, "batch_prep: measured on a one-layer copy of %s (the whole model does not fit in memory)",
                   c.name);
    }
    kern_table T = *x->b->K;
    T.gemm = t_gemm, T.gemm_group = T.gemm_group ? t_gemm_group : NULL, T.embedding = t_embedding, T.rmsnorm = t_rmsnorm, T.rope_angles = t_rope_angles;
    T.rope = t_rope, T.silu_mul = t_silu_mul, T.kv_write = t_kv_write, T.attention = t_attention;
    T.lm_head = t_lm_head;
    /* Every kernel call must pass through the wrapper: no recorded graphs. */
    T.graph_begin = NULL, T.graph_end = NULL, T.graph_launch = NULL, T.graph_free = NULL;
    timed.inner = x->b->K;
    timed.x = x;

    prep_bench b = {.x = x, .g = g};
    model *m = model_new_dummy(&c, x->o->seed, 0, e);
    runner_config rc = {ps, B * pages_per, 0, &T};
    b.r = m ? runner_new(m, &rc, e) : NULL;
    b.seqs = calloc(B, sizeof *b.seqs);
    uint32_t *pages = malloc((size_t)B * pages_per * sizeof *pages);
    int32_t *tokens = malloc(sizeof *tokens);
    int rc_ = 0;
    if (!b.r) {
        rc_ = -1;
        goto done;
    }
    if (!b.seqs || !pages || !tokens) {
        rc_ = rh_fail(e, "calibrate: out of memory for the batch_prep bench");
        goto done;
    }
    tokens[0] = 1;
    for (uint32_t i = 0; i < B * pages_per; i++) pages[i] = i;
    for (uint32_t i = 0; i < B; i++)
        b.seqs[i] = (runner_seq){tokens, 1, ctx_tokens, pages + (size_t)i * pages_per, pages_per, 1, NULL};
    rc_ = calib_grid_measure(x, g, prep_set, prep_sample, &b, e);
    if (b.failed) rc_ = rh_fail(e, "calibrate: batch_prep: %s", b.err.msg);
done:
    free(b.seqs);
    free(pages);
    free(tokens);
    runner_free(b.r);
    model_free(m);
    return rc_;
}

/* ---- the scheduler core ------------------------------------------------ */

#define SCHED_PROMPT 16
#define SCHED_OUTPUT 8192

typedef struct sched_bench {
    calib_ctx *x;
    const calib_grid *g;
    core *c;
    uint32_t n;
    uint32_t steps_left;   /* decode steps before the requests finish */
    double now;
    int failed;
    rh_err err;
} sched_bench;

/* A core with n requests, stepped until all of them decode in one batch. */
static int sched_reset(sched_bench *s)
{
    core_free(s->c);
    s->c = NULL;
    core_config cfg;
    core_config_default(&cfg);
    cfg.page_size = s->x->s.page_size;
    cfg.max_running_requests = s->n > cfg.max_running_requests ? s->n : cfg.max_running_requests;
    uint64_t per = (SCHED_PROMPT + SCHED_OUTPUT + cfg.page_size - 1) / cfg.page_size;
    cfg.total_pages = (uint64_t)s->n * per + 64;
    if (!(s->c = core_new(&cfg, NULL, &s->err))) return -1;
    for (uint32_t i = 0; i < s->n; i++) {
        core_req_desc d = {.id = i + 1, .prompt_len = SCHED_PROMPT, .max_new_tokens = SCHED_OUTPUT};
        if (!core_add(s->c, &d, s->now, &s->err)) return -1;
    }
    for (int step = 0; step < 64; step++) {
        core_batch b;
        core_schedule(s->c, s->now, &b);
        int all = b.decode_seqs == s->n;
        if (core_complete(s->c, &b, NULL, s->now, &s->err) < 0) return -1;
        s->now += 1e-3;
        if (all) {
            /* The first decode step committed one token; the prompt's last
             * chunk committed the first. */
            s->steps_left = SCHED_OUTPUT - 2;
            return 0;
        }
    }
    return rh_fail(&s->err, "%u requests never decoded together", s->n);
}

static double sched_sample(void *p, uint32_t iters, double *spent)
{
    sched_bench *s = p;
    double t = 0;
    for (uint32_t done = 0; done < iters && !s->failed;) {
        if (s->steps_left < 2 && sched_reset(s) < 0) {
            s->failed = 1;
            break;
        }
        uint32_t k = iters - done < s->steps_left - 1 ? iters - done : s->steps_left - 1;
        for (uint32_t i = 0; i < k; i++) {
            core_batch b;
            double t0 = calib_now(s->x);
            core_schedule(s->c, s->now, &b);
            t += calib_now(s->x) - t0;
            if (core_complete(s->c, &b, NULL, s->now, &s->err) < 0) s->failed = 1;
            s->now += 1e-3;
        }
        s->steps_left -= k;
        done += k;
    }
    return *spent = t;
}

/* A fresh core for each point's turn (the points are sampled in rounds). */
static int sched_set(void *p, uint32_t i)
{
    sched_bench *s = p;
    s->n = (uint32_t)s->g->ax0[i];
    if (s->failed || sched_reset(s) < 0) {
        s->failed = 1;
        return -1;
    }
    return 0;
}

int calib_bench_schedule(calib_ctx *x, calib_grid *g, rh_err *e)
{
    sched_bench s = {.x = x, .g = g};
    int rc = calib_grid_measure(x, g, sched_set, sched_sample, &s, e);
    if (s.failed) rc = rh_fail(e, "calibrate: schedule bench: %s", s.err.msg);
    core_free(s.c);
    return rc;
}
