/* test_calibrate.c — the calibration: its stopping rule on scripted samples,
 * a whole calibration on a backend whose kernels cost a known formula on a
 * virtual clock (the table it writes must predict that formula's step time
 * exactly, all-reduces included), a quick real calibration of tiny-llama, and
 * the `rehearse calibrate` front. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim/calibrate/calibrate.h"
#include "kernels/cpu/cpu.h"
#include "sim/cost/cost.h"
#include "sim/cost/cost_table.h"
#include "testutil.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define REL_EQ(a, b, tol) CU_ASSERT(fabs((a) - (b)) <= (tol) * fmax(fabs(a), fabs(b)) + 1e-15)

/* ---- the stopping rule ----------------------------------------------------- */

typedef struct script {
    const double *per_run;   /* seconds per run of each successive sample (the first is the warm-up) */
    int n, at;
} script;

static double scripted(void *p, uint32_t iters, double *spent)
{
    script *s = p;
    double v = s->per_run[s->at < s->n ? s->at : s->n - 1] * iters;
    s->at++;
    return *spent = v;
}

static void test_stopping_rule(void)
{
    calib_rule r = {.min_samples = 5, .max_samples = 12, .tolerance = 0.05, .sample_s = 1e-3, .point_budget_s = 100};
    calib_point p;
    /* steady at 10 us: 1e-3 / 1e-5 = 100 runs a sample, 5 samples, median exact */
    const double steady[] = {1e-5, 1e-5, 1e-5, 1.01e-5, 0.99e-5, 1e-5};
    script s = {steady, 6, 0};
    calib_measure(&r, scripted, &s, &p);
    CU_ASSERT_EQUAL(p.iters, 100);
    CU_ASSERT_EQUAL(p.samples, 5);
    CU_ASSERT(p.converged);
    REL_EQ(p.seconds, 1e-5, 1e-12);
    CU_ASSERT(p.spread <= 0.05);
    /* an outlier among the first five keeps sampling until the IQR settles */
    const double outlier[] = {2e-3, 2e-3, 9e-3, 2e-3, 2.5e-3, 2e-3, 2e-3, 2e-3, 2e-3, 2e-3};
    script o = {outlier, 10, 0};
    calib_measure(&r, scripted, &o, &p);
    CU_ASSERT_EQUAL(p.iters, 1);
    CU_ASSERT(p.converged);
    CU_ASSERT(p.samples > 5);
    REL_EQ(p.seconds, 2e-3, 1e-12);
    /* alternating 1 and 3 never agree: stops at max_samples, keeps the median */
    const double noisy[] = {1, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3};
    script nz = {noisy, 13, 0};
    calib_measure(&r, scripted, &nz, &p);
    CU_ASSERT_FALSE(p.converged);
    CU_ASSERT_EQUAL(p.samples, 12);
    CU_ASSERT_EQUAL(p.seconds, 2);   /* six of each: numpy's median of 1s and 3s */
    /* ...or at the point budget */
    r.point_budget_s = 6;
    nz.at = 0;
    calib_measure(&r, scripted, &nz, &p);
    CU_ASSERT_FALSE(p.converged);
    CU_ASSERT_EQUAL(p.samples, 5);   /* 1+3+1+3+1 = 9 s spent after the fifth */
}

/* Four points whose runs cost 1..4 ms; the 5th to 8th samples taken (in
 * time) are slowed 10x by a burst of load. Sampled in rounds, the burst
 * costs each point one sample, which its median discards. */
typedef struct burst {
    uint32_t point, taken;
    uint32_t order[64];
} burst;

static int burst_set(void *p, uint32_t i)
{
    ((burst *)p)->point = i;
    return 0;
}

static double burst_sample(void *p, uint32_t iters, double *spent)
{
    burst *b = p;
    double per = 1e-3 * (b->point + 1);
    if (b->taken >= 4) {   /* the four warm-up runs come first */
        uint32_t k = b->taken - 4;
        if (k < 64) b->order[k] = b->point;
        if (k >= 4 && k < 8) per *= 10;
    }
    b->taken++;
    return *spent = per * iters;
}

static void test_rounds_absorb_bursts(void)
{
    calib_rule r = {.min_samples = 5, .max_samples = 9, .tolerance = 0.05, .sample_s = 0, .point_budget_s = 100};
    burst b = {0};
    calib_point p[4];
    CU_ASSERT_EQUAL_FATAL(calib_measure_points(&r, 4, burst_set, burst_sample, &b, p, NULL, NULL), 0);
    for (uint32_t i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(p[i].seconds, 1e-3 * (i + 1));
        CU_ASSERT(p[i].converged);
        CU_ASSERT_EQUAL(p[i].samples, 5);
    }
    /* one sample of every point, then the next round */
    for (uint32_t k = 0; k < 20; k++) CU_ASSERT_EQUAL(b.order[k], k % 4);
}

/* ---- a backend with known costs ---------------------------------------- */

static double vclock;
static double fake_clock(void *ctx)
{
    (void)ctx;
    return vclock;
}

static double causal_pairs(double n, double c)
{
    return n * c + n * (n + 1) / 2;
}

static void f_gemm(const float *x, const float *w, const float *b, float *y, uint32_t m, uint32_t n, uint32_t k, int a)
{
    (void)x, (void)w, (void)b, (void)y, (void)a;
    vclock += 1e-6 + 1e-12 * m * n * k;
}
static void f_embedding(const float *t, const int32_t *ids, uint32_t n, uint32_t dim, float *out)
{
    (void)t, (void)ids, (void)dim, (void)out;
    vclock += 1e-7 + 1e-9 * n;
}
static void f_rmsnorm(const float *x, const float *w, float eps, uint32_t rows, uint32_t dim, float *out)
{
    (void)x, (void)w, (void)eps, (void)out;
    vclock += 2e-7 + 1e-11 * rows * dim;
}
static void f_rope_angles(const uint32_t *pos, const float *f, uint32_t rows, uint32_t half, float *c, float *s)
{
    (void)pos, (void)f, (void)half, (void)c, (void)s;
    vclock += 3e-7 + 1e-9 * rows;
}
static void f_rope(float *x, const float *c, const float *s, uint32_t rows, uint32_t nh, uint32_t hd, uint32_t st)
{
    (void)x, (void)c, (void)s, (void)hd, (void)st;
    vclock += 1e-7 + 1e-10 * rows * nh;
}
static void f_silu_mul(const float *g, const float *u, float *out, size_t n)
{
    (void)g, (void)u, (void)out;
    vclock += 1e-7 + 1e-11 * (double)n;
}
static void f_kv_write(const float *k, const float *v, const kern_attn_batch *b, const kern_attn_shape *s, float *kp,
                       float *vp)
{
    (void)k, (void)v, (void)s, (void)kp, (void)vp;
    vclock += 1e-7 + 1e-9 * b->row0[b->n_seqs];
}
/* Per sequence a launch-like constant, then every (query, key) pair per head. */
static void f_attention(const float *q, const float *kp, const float *vp, const kern_attn_batch *b,
                        const kern_attn_shape *s, float *out, float *scratch)
{
    (void)q, (void)kp, (void)vp, (void)out, (void)scratch;
    for (uint32_t i = 0; i < b->n_seqs; i++) {
        double n = b->row0[i + 1] - b->row0[i];
        vclock += 5e-7 + 1e-10 * s->n_heads * causal_pairs(n, b->start[i]);
    }
}
static void f_lm_head(const float *h, const uint32_t *rows, uint32_t n, const float *nw, float eps, const float *w,
                      uint32_t vocab, uint32_t dim, float *tmp, float *logits)
{
    (void)h, (void)rows, (void)nw, (void)eps, (void)w, (void)tmp, (void)logits;
    vclock += 1e-6 + 1e-12 * n * vocab * dim;
}
static int32_t f_sample(const float *logits, uint32_t vocab, const kern_sampling *p, uint64_t *rng, kern_cand *c)
{
    (void)logits, (void)vocab, (void)p, (void)rng, (void)c;
    vclock += 2e-6;
    return 0;
}
static int f_allreduce(void *ctx, uint32_t tp, const uint64_t *bytes, size_t n, double *seconds, rh_err *e)
{
    (void)ctx;
    if (tp > 4) return rh_fail(e, "all-reduce over %u GPUs: 4 found", tp);
    for (size_t i = 0; i < n; i++) seconds[i] = 5e-6 * tp + 1e-10 * (double)bytes[i];
    return 0;
}

static kern_table fake_table;

static void fake_backend(calib_backend *b, int with_allreduce)
{
    fake_table = *kern_cpu();
    fake_table.name = "fake";
    fake_table.gemm = f_gemm, fake_table.embedding = f_embedding, fake_table.rmsnorm = f_rmsnorm;
    fake_table.rope_angles = f_rope_angles, fake_table.rope = f_rope, fake_table.silu_mul = f_silu_mul;
    fake_table.kv_write = f_kv_write, fake_table.attention = f_attention, fake_table.lm_head = f_lm_head;
    fake_table.sample = f_sample;
    memset(b, 0, sizeof *b);
    b->name = "fake";
    b->K = &fake_table;
    b->clock = fake_clock;
    b->threads = 1;
    b->activation_bytes = 4;
    if (with_allreduce) b->allreduce = f_allreduce;
}

/* The same step, by the formulas above, kernel call by kernel call as
 * engine/model/forward.c makes them (per-rank shapes under tp). */
typedef struct chunk {
    double n, c;
} chunk;

static double formula_step(const model_config *c, uint32_t tp, const chunk *pf, int np, const double *dctx, int nd)
{
    double d = c->hidden_size, f = c->intermediate_size / tp, hd = c->head_dim, V = c->vocab_size;
    double H = c->n_heads / tp, KV = c->n_kv_heads >= tp ? c->n_kv_heads / tp : 1, qd = H * hd, kvd = KV * hd;
    double T = nd;
    for (int i = 0; i < np; i++) T += pf[i].n;
    double gemm = 0;
    const double shapes[7][2] = {{qd, d}, {kvd, d}, {kvd, d}, {d, qd}, {f, d}, {f, d}, {d, f}};
    for (int i = 0; i < 7; i++) gemm += 1e-6 + 1e-12 * T * shapes[i][0] * shapes[i][1];
    double attn = 0;
    for (int i = 0; i < np; i++) attn += 5e-7 + 1e-10 * H * causal_pairs(pf[i].n, pf[i].c);
    for (int i = 0; i < nd; i++) attn += 5e-7 + 1e-10 * H * (dctx[i] + 1);
    double layer = gemm + attn + 2 * (2e-7 + 1e-11 * T * d) + (1e-7 + 1e-10 * T * H) + (1e-7 + 1e-10 * T * KV) +
                   (1e-7 + 1e-9 * T) + (1e-7 + 1e-11 * T * f);
    if (tp > 1) layer += 2 * (5e-6 * tp + 1e-10 * T * d * 4);
    double rows = np + nd;
    return c->n_layers * layer + (1e-7 + 1e-9 * T) + (3e-7 + 1e-9 * T) + (1e-6 + 1e-12 * rows * V * d) + 2e-6 * rows;
}

/* The fake kernels' time per call of operator `op` at grid point (x, y),
 * in seconds, from the formulas above with tiny-llama's shapes. */
static double fake_op_time(const model_config *c, int op, double x, double y)
{
    double d = c->hidden_size, f = c->intermediate_size, hd = c->head_dim, V = c->vocab_size;
    double H = c->n_heads, KV = c->n_kv_heads, qd = H * hd, kvd = KV * hd;
    switch (op) {
    case CT_EMBEDDING: return 1e-7 + 1e-9 * x;
    case CT_ROPE_ANGLES: return 3e-7 + 1e-9 * x;
    case CT_RMSNORM: return 2e-7 + 1e-11 * x * d;
    case CT_Q_PROJ: return 1e-6 + 1e-12 * x * qd * d;
    case CT_KV_PROJ: return 1e-6 + 1e-12 * x * kvd * d;
    case CT_ROPE: return (1e-7 + 1e-10 * x * H) + (1e-7 + 1e-10 * x * KV);   /* Q and K in one measurement */
    case CT_KV_WRITE: return 1e-7 + 1e-9 * x;
    case CT_PREFILL_ATTN: return 5e-7 + 1e-10 * H * causal_pairs(x, y);
    case CT_DECODE_ATTN: return 5e-7 * x + 1e-10 * H * (y + x);             /* x decodes, y summed context */
    case CT_O_PROJ: return 1e-6 + 1e-12 * x * d * qd;
    case CT_GATE_UP_PROJ: return 1e-6 + 1e-12 * x * f * d;
    case CT_SILU_MUL: return 1e-7 + 1e-11 * x * f;
    case CT_DOWN_PROJ: return 1e-6 + 1e-12 * x * d * f;
    case CT_LM_HEAD: return 1e-6 + 1e-12 * x * V * d;
    case CT_SAMPLE: return 2e-6 * x;
    default: return NAN;
    }
}

/* LoRA at rank FAKE_LORA_RANK over one layer, T tokens in k segments (k <=
 * T): per module a shrink (T x in -> r) and an expand (r -> out) a segment,
 * each GEMM 1 us + 1 ps per multiply-add, as f_gemm charges. */
#define FAKE_LORA_RANK 4
static double lora_layer_formula(const model_config *c, double T, double k)
{
    double d = c->hidden_size, f = c->intermediate_size, qd = (double)c->n_heads * c->head_dim;
    double kvd = (double)c->n_kv_heads * c->head_dim, r = FAKE_LORA_RANK;
    if (k > T) k = T;
    const double io[7][2] = {{d, qd}, {d, kvd}, {d, kvd}, {qd, d}, {d, f}, {d, f}, {f, d}};
    double t = 0;
    for (int m = 0; m < 7; m++) t += 2 * k * 1e-6 + 1e-12 * T * r * (io[m][0] + io[m][1]);
    return t;
}

/* Every grid point of every kernel operator holds the fake's known time per
 * call, in seconds: a unit slip or a wrong call count anywhere between the
 * clock and the file shows here, point by point. */
static void check_known_times(const model_config *c, json_t *t)
{
    json_t *ops = json_object_get(t, "operators");
    int points = 0;
    for (int op = 0; op < CT_N_OPS; op++) {
        if (op == CT_ALLREDUCE || op == CT_BATCH_PREP || op == CT_SCHEDULE) continue;
        const cost_table_op_info *info = &cost_table_ops[op];
        json_t *g = json_object_get(ops, info->name);
        if (op >= CT_LORA && !g) continue;   /* measured only with --lora-rank */
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        json_t *xs = json_object_get(g, info->axes[0]), *sec = json_object_get(g, "seconds");
        json_t *ys = info->dims == 2 ? json_object_get(g, info->axes[1]) : NULL;
        for (size_t i = 0; i < json_array_size(xs); i++) {
            double x = json_number_value(json_array_get(xs, i));
            size_t ny = ys ? json_array_size(ys) : 1;
            for (size_t j = 0; j < ny; j++) {
                double y = ys ? json_number_value(json_array_get(ys, j)) : 0;
                json_t *v = ys ? json_array_get(json_array_get(sec, i), j) : json_array_get(sec, i);
                double got = json_number_value(v), want = fake_op_time(c, op, x, y);
                if (op == CT_STEP_PREFILL) {   /* a whole forward: the formula's step, less its sampling */
                    chunk one = {x, y};
                    want = formula_step(c, 1, &one, 1, NULL, 0) - 2e-6;
                } else if (op == CT_STEP_DECODE) {
                    double ctx[64];
                    for (int k = 0; k < (int)x && k < 64; k++) ctx[k] = y;
                    want = formula_step(c, 1, NULL, 0, ctx, (int)x) - 2e-6 * x;
                } else if (op == CT_LORA) {
                    want = lora_layer_formula(c, x, y);
                } else if (op == CT_LORA_LOAD || op == CT_KV_COPY) {
                    want = 0;   /* the fake clock runs in kernels only; a copy into memory costs it nothing */
                }
                int ok = fabs(got - want) <= 1e-9 * want;
                if (!ok) printf("\n  %s at (%g, %g): %.9g s, the kernels cost %.9g s\n", info->name, x, y, got, want);
                CU_ASSERT(ok);
                points++;
            }
        }
    }
    CU_ASSERT(points > 40);
}

static cost_model *calibrate_fake(const model_config *c, uint32_t tp, int with_allreduce, json_t **table_out)
{
    calib_backend b;
    fake_backend(&b, with_allreduce);
    calib_opts o;
    calib_opts_default(&o);
    o.quick = true;
    calib_rule_quick(&o.rule);
    o.progress = false;
    o.skip_schedule = true;
    o.whole_steps = true;
    o.tp = tp;
    o.lora_rank = FAKE_LORA_RANK;
    calib_report r;
    rh_err e;
    json_t *t = calib_run(&b, c, &o, &r, &e);
    if (!t) {
        printf("\n  %s\n", e.msg);
        return NULL;
    }
    CU_ASSERT_EQUAL(r.unconverged, 0);   /* a virtual clock never disagrees with itself */
    char *text = json_dumps(t, JSON_REAL_PRECISION(17));
    cost_model *m = cost_parse(text, "fake.json", &e);
    free(text);
    if (!m) printf("\n  %s\n", e.msg);
    if (table_out) *table_out = t;
    else json_decref(t);
    return m;
}

static void test_known_costs_round_trip(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(model_preset("tiny-llama", &c, &e), 0);
    json_t *t = NULL;
    cost_model *m = calibrate_fake(&c, 1, 0, &t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(t, "backend")), "fake");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(t, "model"), "num_hidden_layers")), 4);
    /* the runner's time outside its kernels is all kernel time here: zero */
    json_t *prep = json_object_get(json_object_get(json_object_get(t, "operators"), "batch_prep"), "seconds");
    CU_ASSERT(json_array_size(prep) >= 2);
    for (size_t i = 0; i < json_array_size(prep); i++) CU_ASSERT_EQUAL(json_number_value(json_array_get(prep, i)), 0);
    CU_ASSERT_PTR_NULL(json_object_get(json_object_get(t, "operators"), "allreduce"));
    check_known_times(&c, t);
    json_decref(t);

    /* a mixed step inside and beyond the quick grids */
    chunk pf[] = {{100, 30}, {20, 0}};
    double dctx[] = {500, 1200, 40, 3000, 70};
    cost_seq s[7] = {{100, 30, true}, {20, 0, true}};
    for (int i = 0; i < 5; i++) s[2 + i] = (cost_seq){1, (uint32_t)dctx[i], false};
    cost_batch b = {.seqs = s, .n = 7};
    cost_batch_summarize(&b);
    REL_EQ(cost_step_time(m, &b), formula_step(&c, 1, pf, 2, dctx, 5), 1e-9);
    /* one long prompt, past the new-token and context grids */
    chunk big[] = {{1500, 600}};
    cost_seq sb = {1500, 600, true};
    cost_batch bb = {.seqs = &sb, .n = 1};
    cost_batch_summarize(&bb);
    REL_EQ(cost_step_time(m, &bb), formula_step(&c, 1, big, 1, NULL, 0), 1e-9);
    /* a decode batch past the sequence grid */
    double many[40];
    cost_seq sd[40];
    for (int i = 0; i < 40; i++) {
        many[i] = 100 + 37 * i;
        sd[i] = (cost_seq){1, (uint32_t)many[i], false};
    }
    cost_batch bd = {.seqs = sd, .n = 40};
    cost_batch_summarize(&bd);
    REL_EQ(cost_step_time(m, &bd), formula_step(&c, 1, NULL, 0, many, 40), 1e-9);
    cost_free(m);
}

/* The whole-step grids steer the price: a table whose step_decode grid says
 * decodes take 1.5 times the kernels' sum prices a decode batch at 1.5 times
 * its forward (sampling, outside the forward, unscaled), leaves a prefill
 * as its kernels sum, and puts a mixed batch in between. */
static void test_whole_steps_scale_the_kernels(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(model_preset("tiny-llama", &c, &e), 0);
    json_t *t = NULL;
    cost_model *plain = calibrate_fake(&c, 1, 0, &t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
    json_t *sec = json_object_get(json_object_get(json_object_get(t, "operators"), "step_decode"), "seconds");
    CU_ASSERT_FATAL(json_array_size(sec) >= 2);
    size_t i, j;
    json_t *row, *v;
    json_array_foreach(sec, i, row) json_array_foreach(row, j, v) json_real_set(v, 1.5 * json_number_value(v));
    char *text = json_dumps(t, JSON_REAL_PRECISION(17));
    cost_model *m = cost_parse(text, "scaled.json", &e);
    free(text);
    json_decref(t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    double ctx[4] = {64, 64, 64, 64};
    cost_seq sd[4];
    for (int k = 0; k < 4; k++) sd[k] = (cost_seq){1, 64, false};
    cost_batch bd = {.seqs = sd, .n = 4};
    cost_batch_summarize(&bd);
    double sample = 2e-6 * 4, fwd = formula_step(&c, 1, NULL, 0, ctx, 4) - sample;
    REL_EQ(cost_step_time(plain, &bd), fwd + sample, 1e-9);
    REL_EQ(cost_step_time(m, &bd), 1.5 * fwd + sample, 1e-9);
    cost_seq sp = {64, 16, true};
    cost_batch bp = {.seqs = &sp, .n = 1};
    cost_batch_summarize(&bp);
    REL_EQ(cost_step_time(m, &bp), cost_step_time(plain, &bp), 1e-12);
    cost_seq sm[5] = {{64, 16, true}};
    for (int k = 0; k < 4; k++) sm[1 + k] = sd[k];
    cost_batch bm = {.seqs = sm, .n = 5};
    cost_batch_summarize(&bm);
    double lo = cost_step_time(plain, &bm), hi = cost_step_time(m, &bm);
    CU_ASSERT(hi > lo * 1.01 && hi < lo * 1.5);
    cost_free(plain);
    cost_free(m);
}

static void test_tensor_parallel(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(model_preset("tiny-llama", &c, &e), 0);
    /* with the backend's all-reduce hook: split shapes and two all-reduces a layer */
    cost_model *m = calibrate_fake(&c, 2, 1, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    chunk pf[] = {{64, 16}};
    double dctx[] = {300, 900};
    cost_seq s[] = {{64, 16, true}, {1, 300, false}, {1, 900, false}};
    cost_batch b = {.seqs = s, .n = 3};
    cost_batch_summarize(&b);
    REL_EQ(cost_step_time(m, &b), formula_step(&c, 2, pf, 1, dctx, 2), 1e-9);
    CU_ASSERT_EQUAL(cost_check_tp(m, 2, &e), 0);
    CU_ASSERT_EQUAL(cost_check_tp(m, 1, &e), -1);
    cost_free(m);

    /* without one: the all-reduce is skipped, and the report says why */
    calib_backend cpu;
    CU_ASSERT_EQUAL_FATAL(calib_backend_find("cpu", &cpu, &e), 0);
    CU_ASSERT_PTR_NULL(cpu.allreduce);
    calib_backend fb;
    fake_backend(&fb, 0);
    calib_opts o;
    calib_opts_default(&o);
    o.quick = true, o.progress = false, o.skip_schedule = true, o.tp = 2;
    calib_rule_quick(&o.rule);
    calib_report r;
    json_t *t = calib_run(&fb, &c, &o, &r, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(t, "tp")), 2);
    CU_ASSERT_PTR_NULL(json_object_get(json_object_get(t, "operators"), "allreduce"));
    int noted = 0;
    for (uint32_t i = 0; i < r.n_notes; i++) noted |= strstr(r.notes[i], "allreduce: skipped") != NULL;
    CU_ASSERT(noted);
    json_decref(t);

    /* a size that does not split the heads is refused before measuring */
    o.tp = 3;
    CU_ASSERT_PTR_NULL(calib_run(&fb, &c, &o, &r, &e));
    CU_ASSERT(strstr(e.msg, "--tp 3") && strstr(e.msg, "8 attention heads"));
    o.tp = 8;   /* 4 KV heads over 8 ranks: each keeps a copy; the MLP splits */
    t = calib_run(&fb, &c, &o, &r, &e);
    CU_ASSERT_PTR_NOT_NULL(t);
    json_decref(t);
    /* a hook that cannot run this many ranks: skipped, with its reason */
    calib_backend hb;
    fake_backend(&hb, 1);
    t = calib_run(&hb, &c, &o, &r, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_PTR_NULL(json_object_get(json_object_get(t, "operators"), "allreduce"));
    noted = 0;
    for (uint32_t i = 0; i < r.n_notes; i++) noted |= strstr(r.notes[i], "8 GPUs: 4 found") != NULL;
    CU_ASSERT(noted);
    json_decref(t);
}

/* The real kernels, coarse grids: a loadable table with every operator. */
static void test_quick_cpu_calibration(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(model_preset("tiny-llama", &c, &e), 0);
    calib_backend b;
    CU_ASSERT_EQUAL_FATAL(calib_backend_find("cpu", &b, &e), 0);
    CU_ASSERT(b.threads >= 1);
    calib_opts o;
    calib_opts_default(&o);
    o.quick = true, o.progress = false;
    calib_rule_quick(&o.rule);
    calib_report r;
    json_t *t = calib_run(&b, &c, &o, &r, &e);
    if (!t) printf("\n  %s\n", e.msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    char path[256];
    tu_tmp_path("quick.json", path, sizeof path);
    CU_ASSERT_EQUAL_FATAL(calib_save(t, path, &e), 0);
    json_t *ops = json_object_get(t, "operators");
    uint32_t points = 0;
    for (int op = 0; op < CT_N_OPS; op++) {
        json_t *g = json_object_get(ops, cost_table_ops[op].name);
        if (op == CT_ALLREDUCE || op == CT_STEP_PREFILL || op == CT_STEP_DECODE || op == CT_LORA || op == CT_LORA_LOAD) {
            /* tp 1; no --whole-steps, no --lora-rank */
            CU_ASSERT_PTR_NULL(g);
            continue;
        }
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        json_t *sec = json_object_get(g, "seconds");
        for (size_t i = 0; i < json_array_size(sec); i++) {
            json_t *v = json_array_get(sec, i);
            size_t n = json_is_array(v) ? json_array_size(v) : 1;
            for (size_t j = 0; j < n; j++) {
                double x = json_number_value(json_is_array(v) ? json_array_get(v, j) : v);
                /* every kernel takes some time; the overheads may measure 0 */
                if (op == CT_BATCH_PREP || op == CT_SCHEDULE) {
                    CU_ASSERT(x >= 0);
                } else {
                    CU_ASSERT(x > 0);
                }
                points++;
            }
        }
    }
    CU_ASSERT_EQUAL(points, r.points);
    /* The seconds are seconds: q_proj at 256 tokens against the same GEMM
     * timed here with the monotonic clock (the fastest of 30: load only ever
     * slows a run down). A loaded machine slows the calibration's own runs
     * too, by ten times when other jobs share the cores, so a factor of 50
     * either way passes; a slip of units (1000 at least) does not. */
    uint32_t m_rows = 256, n = c.n_heads * c.head_dim, k = c.hidden_size;
    float *x = calloc((size_t)m_rows * k, sizeof *x), *w = calloc((size_t)n * k, sizeof *w);
    float *y = calloc((size_t)m_rows * n, sizeof *y);
    CU_ASSERT_FATAL(x && w && y);
    double times[30];
    kern_cpu()->gemm(x, w, NULL, y, m_rows, n, k, 0);   /* warm-up */
    for (int i = 0; i < 30; i++) {
        struct timespec a, z;
        clock_gettime(CLOCK_MONOTONIC, &a);
        kern_cpu()->gemm(x, w, NULL, y, m_rows, n, k, 0);
        clock_gettime(CLOCK_MONOTONIC, &z);
        times[i] = (double)(z.tv_sec - a.tv_sec) + 1e-9 * (double)(z.tv_nsec - a.tv_nsec);
    }
    qsort(times, 30, sizeof times[0], cmp_double);
    free(x), free(w), free(y);
    json_t *q = json_object_get(ops, "q_proj"), *qt = json_object_get(q, "tokens");
    double table = -1;
    for (size_t i = 0; i < json_array_size(qt); i++)
        if (json_number_value(json_array_get(qt, i)) == m_rows) table = json_number_value(json_array_get(json_object_get(q, "seconds"), i));
    printf("(q_proj at 256 tokens: table %.3g s, timed here %.3g s) ", table, times[0]);
    CU_ASSERT(table > times[0] / 50 && table < times[0] * 50);
    json_decref(t);
    cost_model *m = cost_load(path, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(cost_table_layers(m), c.n_layers);
    cost_seq s[] = {{40, 0, true}, {1, 300, false}};
    cost_batch bt = {.seqs = s, .n = 2};
    cost_batch_summarize(&bt);
    double t_step = cost_step_time(m, &bt);
    CU_ASSERT(isfinite(t_step) && t_step > 0);
    cost_free(m);
    remove(path);
}

static void test_cli(void)
{
    char path[256], cmd[1024], out[8192];
    tu_tmp_path("cli.json", path, sizeof path);
    snprintf(cmd, sizeof cmd, "%s calibrate --model tiny-llama --quick -o %s", tu_bin(), path);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n  %s\n", out);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(strstr(out, "calibrated tiny-llama on cpu") && strstr(out, "predicted step times"));
    snprintf(cmd, sizeof cmd, "%s cost show %s --batch prefill=100,decode=4@200", tu_bin(), path);
    rc = tu_run(cmd, out, sizeof out);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(strstr(out, "kind table") && strstr(out, "decode_attention") && strstr(out, "gate_up_proj"));
    remove(path);

    struct {
        const char *args, *needle;
    } bad[] = {
        {"calibrate --backend cuda --model tiny-llama -o %s", "cuda"},
        {"calibrate --backend tpu --model tiny-llama -o %s", "unknown backend 'tpu'"},
        {"calibrate --model tiny-lama -o %s", "tiny-llama"},
        {"calibrate --model tiny-llama", "-o COST is required"},
        {"calibrate -o %s", "--model MODEL is required"},
        {"calibrate --model tiny-llama --tp 3 -o %s", "--tp 3"},
        {"calibrate --model tiny-llama --max-seqs 1 -o %s", "--max-seqs"},
        {"calibrate --model tiny-llama --top-p 2 -o %s", "top_p"},
        {"calibrate --model tiny-llama --wobble -o %s", "unknown flag --wobble"},
        {"calibrate --model tiny-llama --quick -o build/tmp/no/such/dir/x.json", "cannot write"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, bad[i].args, path);
        snprintf(cmd, sizeof cmd, "%s %s", tu_bin(), args);
        rc = tu_run(cmd, out, sizeof out);
        CU_ASSERT_EQUAL(rc, 1);
        int ok = strstr(out, bad[i].needle) != NULL;
        if (!ok) printf("\n  %s -> %s\n", cmd, out);
        CU_ASSERT(ok);
        CU_ASSERT(!tu_file_exists(path));
    }
    snprintf(cmd, sizeof cmd, "%s calibrate --help", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "--backend") && strstr(out, "tiny-llama"));
}

/* A step's LoRA price from the fake's table: the step without LoRA plus
 * every layer's shrink and expand at the tokens and adapters (interpolated
 * between grid points, where the fake's time is linear), twice that at
 * twice the rank; a table without the grid refuses the rank. */
static void test_lora_priced(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(model_preset("tiny-llama", &c, &e), 0);
    cost_model *m = calibrate_fake(&c, 1, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_seq s[64];
    for (int i = 0; i < 64; i++) s[i] = (cost_seq){1, 100, false};
    cost_serving sv;
    cost_serving_default(m, 1, &sv);
    CU_ASSERT_EQUAL(cost_serving_check(m, 1, &sv, &e), 0);
    cost_batch b = {.seqs = s, .n = 64, .serving = &sv};
    cost_batch_summarize(&b);
    double base = cost_step_time(m, &b);
    sv.lora_rank = FAKE_LORA_RANK;
    CU_ASSERT_EQUAL(cost_serving_check(m, 1, &sv, &e), 0);
    b.lora_tokens = 64, b.lora_adapters = 2;
    double with = cost_step_time(m, &b), want = c.n_layers * lora_layer_formula(&c, 64, 2);
    CU_ASSERT(fabs(with - base - want) <= 1e-9 * want);
    sv.lora_rank = 2 * FAKE_LORA_RANK;
    CU_ASSERT(fabs(cost_step_time(m, &b) - base - 2 * want) <= 1e-9 * want);
    cost_free(m);

    json_t *t = NULL;
    m = calibrate_fake(&c, 1, 0, &t);
    json_object_del(json_object_get(t, "operators"), "lora");
    json_object_del(json_object_get(t, "operators"), "lora_load");
    json_object_del(t, "lora_rank");
    char *text = json_dumps(t, JSON_REAL_PRECISION(17));
    cost_model *plain = cost_parse(text, "plain.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
    CU_ASSERT_EQUAL(cost_serving_check(plain, 1, &sv, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--lora-rank"));
    json_object_set_new(json_object_get(t, "operators"), "lora", json_object());
    free(text);
    text = json_dumps(t, JSON_REAL_PRECISION(17));
    cost_model *bad = cost_parse(text, "bad.json", &e);
    CU_ASSERT_PTR_NULL(bad);
    cost_free(bad);
    free(text);
    cost_free(plain);
    cost_free(m);
    json_decref(t);
}

void register_test_calibrate(void)
{
    CU_pSuite s = CU_add_suite("calibrate", NULL, NULL);
    CU_add_test(s, "stopping rule on scripted samples", test_stopping_rule);
    CU_add_test(s, "sampling in rounds absorbs a burst of load", test_rounds_absorb_bursts);
    CU_add_test(s, "known kernel costs come back as step times", test_known_costs_round_trip);
    CU_add_test(s, "whole-step grids scale a step's kernel sum", test_whole_steps_scale_the_kernels);
    CU_add_test(s, "LoRA's kernels measured and priced: every layer, in proportion to the rank", test_lora_priced);
    CU_add_test(s, "tensor parallel: split shapes, all-reduce hook", test_tensor_parallel);
    CU_add_test(s, "quick calibration of tiny-llama on the CPU", test_quick_cpu_calibration);
    CU_add_test(s, "rehearse calibrate front", test_cli);
}
