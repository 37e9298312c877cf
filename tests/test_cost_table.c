/* test_cost_table.c — the table cost kind: interpolation exact at grid points
 * and monotone between them, extrapolation along the trend, a step composed
 * exactly as the forward pass runs (computed by hand here), step-record
 * aggregates, and every kind of bad table file. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost.h"
#include "sim/cost/cost_fit.h"
#include "sim/cost/cost_table.h"
#include "testutil.h"

#define REL_EQ(a, b, tol) CU_ASSERT(fabs((a) - (b)) <= (tol) * fmax(fabs(a), fabs(b)) + 1e-18)

static const double TOKENS[] = {1, 2, 4, 8, 16, 64, 256, 1024};
static const double NEWT[] = {1, 4, 16, 64, 256}, PCTX[] = {0, 64, 256, 1024};
static const double SEQS[] = {1, 2, 8, 32, 128}, DCTX[] = {0, 1024, 8192, 65536};
static const double ROWS[] = {1, 4, 16, 64}, BYTES[] = {1024, 65536, 1048576};

typedef struct ax {
    const double *v;
    size_t n;
} ax;

static ax axis_of(int op, int k)
{
    if (op == CT_PREFILL_ATTN) return k ? (ax){PCTX, 4} : (ax){NEWT, 5};
    if (op == CT_DECODE_ATTN) return k ? (ax){DCTX, 4} : (ax){SEQS, 5};
    if (op == CT_LM_HEAD || op == CT_SAMPLE || op == CT_BATCH_PREP || op == CT_SCHEDULE) return (ax){ROWS, 4};
    if (op == CT_ALLREDUCE) return (ax){BYTES, 3};
    return (ax){TOKENS, 8};
}

static double pairs(double n, double c)
{
    return n * c + n * (n + 1) / 2;
}

/* Linear in each operator's natural coordinate, so interpolation and
 * extrapolation are both exact: a per-call constant plus a slope. */
static double lin_base(int op)
{
    return 1e-6 * (1 + op);
}

static double lin(int op, double x, double y)
{
    double s = 1e-9 * (3 + op);
    if (op == CT_PREFILL_ATTN) return lin_base(op) + s * pairs(x, y);
    if (op == CT_DECODE_ATTN) return lin_base(op) + 2e-7 * x + s * y;
    return lin_base(op) + s * x;
}

/* Bends, jumps and dips: for the interpolation properties. */
static double wiggly(int op, double x, double y)
{
    double v = 1e-6 * pow(x + 1, 0.7) * (1 + 0.3 * sin(x + op)) + 1e-7 * y * (1 + 0.2 * cos(x));
    return v;
}

typedef double (*op_fn)(int op, double x, double y);

static json_t *build(op_fn f, uint32_t layers, uint32_t tp, int allreduce)
{
    json_t *ops = json_object();
    for (int op = 0; op < CT_N_OPS; op++) {
        if (op == CT_ALLREDUCE && !allreduce) continue;
        if (op == CT_STEP_PREFILL || op == CT_STEP_DECODE || op >= CT_LORA) continue;   /* whole steps, LoRA: test_calibrate */
        const cost_table_op_info *info = &cost_table_ops[op];
        ax a0 = axis_of(op, 0), a1 = axis_of(op, 1);
        json_t *o = json_object(), *x0 = json_array(), *x1 = json_array(), *sec = json_array();
        for (size_t i = 0; i < a0.n; i++) json_array_append_new(x0, json_real(a0.v[i]));
        for (size_t i = 0; i < a1.n; i++) json_array_append_new(x1, json_real(a1.v[i]));
        for (size_t i = 0; i < a0.n; i++) {
            if (info->dims == 1) {
                json_array_append_new(sec, json_real(f(op, a0.v[i], 0)));
                continue;
            }
            json_t *row = json_array();
            for (size_t j = 0; j < a1.n; j++) json_array_append_new(row, json_real(f(op, a0.v[i], a1.v[j])));
            json_array_append_new(sec, row);
        }
        json_object_set_new(o, info->axes[0], x0);
        if (info->dims == 2) json_object_set_new(o, info->axes[1], x1);
        else json_decref(x1);
        json_object_set_new(o, "seconds", sec);
        json_object_set_new(ops, info->name, o);
    }
    return json_pack("{s:s, s:i, s:s, s:i, s:{s:s, s:i, s:i}, s:o}", "kind", "table", "version", 1, "backend", "cpu",
                     "tp", (json_int_t)tp, "model", "name", "test", "num_hidden_layers", (json_int_t)layers,
                     "hidden_size", 256, "operators", ops);
}

static cost_model *load_json(json_t *root, rh_err *e)
{
    char *text = json_dumps(root, JSON_REAL_PRECISION(17));
    cost_model *m = cost_parse(text, "t.json", e);
    free(text);
    return m;
}

static cost_model *load(op_fn f, uint32_t layers, uint32_t tp, int allreduce)
{
    json_t *root = build(f, layers, tp, allreduce);
    rh_err e;
    cost_model *m = load_json(root, &e);
    json_decref(root);
    if (!m) printf("\n  %s\n", e.msg);
    return m;
}

static void test_exact_at_grid_points(void)
{
    cost_model *m = load(wiggly, 4, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(cost_table_layers(m), 4);
    for (int op = 0; op < CT_N_OPS; op++) {
        if (op == CT_ALLREDUCE || op == CT_STEP_PREFILL || op == CT_STEP_DECODE || op >= CT_LORA) {
            CU_ASSERT_EQUAL(cost_table_op_time(m, op, 4096, 0), 0);   /* optional, absent */
            continue;
        }
        ax a0 = axis_of(op, 0), a1 = axis_of(op, 1);
        size_t n1 = cost_table_ops[op].dims == 2 ? a1.n : 1;
        for (size_t i = 0; i < a0.n; i++)
            for (size_t j = 0; j < n1; j++) {
                double y = n1 > 1 ? a1.v[j] : 0;
                REL_EQ(cost_table_op_time(m, op, a0.v[i], y), wiggly(op, a0.v[i], y), 1e-12);
            }
    }
    CU_ASSERT(isnan(cost_table_op_time(m, CT_N_OPS, 1, 0)));
    cost_free(m);
    /* a model of another kind is not a table */
    cost_linear_coef k = {1e-3, 0, 0, 0, 0};
    cost_model *l = cost_linear_new(&k);
    CU_ASSERT(isnan(cost_table_op_time(l, CT_Q_PROJ, 4, 0)));
    CU_ASSERT_EQUAL(cost_table_layers(l), 0);
    cost_free(l);
}

/* Between neighbours a value moves one way only, and stays within them. */
static void check_segment(const cost_model *m, int op, double x0, double x1, double y0, double y1, int along_y,
                          double fixed)
{
    const int K = 40;
    double prev = NAN, a = along_y ? cost_table_op_time(m, op, fixed, y0) : cost_table_op_time(m, op, x0, fixed);
    double b = along_y ? cost_table_op_time(m, op, fixed, y1) : cost_table_op_time(m, op, x1, fixed);
    int up = b >= a;
    for (int k = 0; k <= K; k++) {
        double f = (double)k / K;
        double v = along_y ? cost_table_op_time(m, op, fixed, y0 + f * (y1 - y0))
                           : cost_table_op_time(m, op, x0 + f * (x1 - x0), fixed);
        CU_ASSERT(v >= fmin(a, b) - 1e-18 && v <= fmax(a, b) + 1e-18);
        if (k) CU_ASSERT(up ? v >= prev - 1e-18 : v <= prev + 1e-18);
        prev = v;
    }
}

static void test_monotone_between_points(void)
{
    cost_model *m = load(wiggly, 2, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int saw_down = 0;
    for (int op = 0; op < CT_N_OPS; op++) {
        if (op == CT_ALLREDUCE || op == CT_STEP_PREFILL || op == CT_STEP_DECODE || op >= CT_LORA) continue;
        ax a0 = axis_of(op, 0), a1 = axis_of(op, 1);
        if (cost_table_ops[op].dims == 1) {
            for (size_t i = 0; i + 1 < a0.n; i++) {
                check_segment(m, op, a0.v[i], a0.v[i + 1], 0, 0, 0, 0);
                saw_down |= wiggly(op, a0.v[i + 1], 0) < wiggly(op, a0.v[i], 0);
            }
            continue;
        }
        /* along each axis on the other axis's grid lines and between them */
        for (size_t i = 0; i + 1 < a0.n; i++)
            for (size_t j = 0; j < a1.n; j++) {
                check_segment(m, op, a0.v[i], a0.v[i + 1], 0, 0, 0, a1.v[j]);
                if (j + 1 < a1.n) check_segment(m, op, a0.v[i], a0.v[i + 1], 0, 0, 0, (a1.v[j] + a1.v[j + 1]) / 2);
            }
        for (size_t j = 0; j + 1 < a1.n; j++)
            for (size_t i = 0; i < a0.n; i++) {
                check_segment(m, op, 0, 0, a1.v[j], a1.v[j + 1], 1, a0.v[i]);
                if (i + 1 < a0.n) check_segment(m, op, 0, 0, a1.v[j], a1.v[j + 1], 1, (a0.v[i] + a0.v[i + 1]) / 2);
            }
        /* inside a cell: within its corners */
        for (size_t i = 0; i + 1 < a0.n; i++)
            for (size_t j = 0; j + 1 < a1.n; j++) {
                double lo = INFINITY, hi = 0;
                for (int c = 0; c < 4; c++) {
                    double v = wiggly(op, a0.v[i + (c & 1)], a1.v[j + (c >> 1)]);
                    lo = fmin(lo, v), hi = fmax(hi, v);
                }
                double v = cost_table_op_time(m, op, (a0.v[i] + 2 * a0.v[i + 1]) / 3, (2 * a1.v[j] + a1.v[j + 1]) / 3);
                CU_ASSERT(v >= lo - 1e-18 && v <= hi + 1e-18);
            }
    }
    CU_ASSERT(saw_down);   /* the data did dip somewhere, so "monotone" was tested both ways */
    cost_free(m);
}

static void test_extrapolates_along_trend(void)
{
    cost_model *m = load(lin, 2, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    /* linear data: past either end the line continues exactly */
    REL_EQ(cost_table_op_time(m, CT_GATE_UP_PROJ, 8192, 0), lin(CT_GATE_UP_PROJ, 8192, 0), 1e-9);
    REL_EQ(cost_table_op_time(m, CT_GATE_UP_PROJ, 0.5, 0), lin(CT_GATE_UP_PROJ, 0.5, 0), 1e-9);
    REL_EQ(cost_table_op_time(m, CT_LM_HEAD, 500, 0), lin(CT_LM_HEAD, 500, 0), 1e-9);
    /* prefill attention grows with the causal pairs: quadratic in new tokens */
    REL_EQ(cost_table_op_time(m, CT_PREFILL_ATTN, 2048, 0), lin(CT_PREFILL_ATTN, 2048, 0), 1e-9);
    REL_EQ(cost_table_op_time(m, CT_PREFILL_ATTN, 2048, 4000), lin(CT_PREFILL_ATTN, 2048, 4000), 1e-9);
    REL_EQ(cost_table_op_time(m, CT_PREFILL_ATTN, 100, 3000), lin(CT_PREFILL_ATTN, 100, 3000), 1e-9);
    REL_EQ(cost_table_op_time(m, CT_DECODE_ATTN, 512, 500000), lin(CT_DECODE_ATTN, 512, 500000), 1e-9);
    cost_free(m);

    /* a flat end (noise) still grows past the grid, never a constant */
    json_t *root = build(lin, 2, 1, 0);
    json_t *sec = json_object_get(json_object_get(json_object_get(root, "operators"), "q_proj"), "seconds");
    double last = json_number_value(json_array_get(sec, 7));
    json_array_set_new(sec, 5, json_real(last));
    json_array_set_new(sec, 6, json_real(last));
    rh_err e;
    m = load_json(root, &e);
    json_decref(root);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    double at2k = cost_table_op_time(m, CT_Q_PROJ, 2048, 0), at4k = cost_table_op_time(m, CT_Q_PROJ, 4096, 0);
    CU_ASSERT(at2k > last * 1.01);
    CU_ASSERT(at4k > at2k * 1.01);
    cost_free(m);
}

/* The forward pass of engine/model/forward.c, operator by operator. */
static double by_hand(uint32_t L, double T, double pn, double pc, uint32_t P, double B, double S, double rows)
{
    double layer = 2 * lin(CT_RMSNORM, T, 0) + lin(CT_Q_PROJ, T, 0) + 2 * lin(CT_KV_PROJ, T, 0) +
                   lin(CT_ROPE, T, 0) + lin(CT_KV_WRITE, T, 0) + lin(CT_O_PROJ, T, 0) +
                   2 * lin(CT_GATE_UP_PROJ, T, 0) + lin(CT_SILU_MUL, T, 0) + lin(CT_DOWN_PROJ, T, 0);
    if (P) layer += P * lin(CT_PREFILL_ATTN, pn, pc);
    if (B) layer += lin(CT_DECODE_ATTN, B, S);
    double seqs = P + B;
    return L * layer + lin(CT_EMBEDDING, T, 0) + lin(CT_ROPE_ANGLES, T, 0) + lin(CT_LM_HEAD, rows, 0) +
           lin(CT_SAMPLE, rows, 0) + lin(CT_BATCH_PREP, seqs, 0) + lin(CT_SCHEDULE, seqs, 0);
}

static void test_step_composition(void)
{
    cost_model *m = load(lin, 3, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    /* a chunk of 100 at context 300 and five decodes (summed context 3000) */
    cost_seq s[] = {{100, 300, true}, {1, 100, false}, {1, 400, false}, {1, 500, false}, {1, 1000, false},
                    {1, 1000, false}};
    cost_batch b = {.seqs = s, .n = 6};
    cost_batch_summarize(&b);
    REL_EQ(cost_step_time(m, &b), by_hand(3, 105, 100, 300, 1, 5, 3000, 6), 1e-12);
    /* past every grid: 1500 tokens at context 2000 beside 200 decodes over 300k */
    cost_seq big[201];
    big[0] = (cost_seq){1500, 2000, true};
    for (int i = 1; i <= 200; i++) big[i] = (cost_seq){1, 1500, false};
    cost_batch bb = {.seqs = big, .n = 201};
    cost_batch_summarize(&bb);
    REL_EQ(cost_step_time(m, &bb), by_hand(3, 1700, 1500, 2000, 1, 200, 300000, 201), 1e-9);
    /* breakdown terms add up to the step */
    cost_term t[32];
    int n = cost_breakdown(m, &b, t, 32);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i].seconds;
    CU_ASSERT_EQUAL(n, CT_N_OPS - 6);   /* every operator but the all-reduce (tp 1), the whole steps, LoRA's two and kv_copy */
    REL_EQ(sum, cost_step_time(m, &b), 1e-12);
    /* tensor parallel: only the table's own size */
    rh_err e;
    CU_ASSERT_EQUAL(cost_check_tp(m, 0, &e), 0);
    CU_ASSERT_EQUAL(cost_check_tp(m, 1, &e), 0);
    CU_ASSERT_EQUAL(cost_check_tp(m, 2, &e), -1);
    CU_ASSERT(strstr(e.msg, "t.json") && strstr(e.msg, "tensor-parallel size 1") && strstr(e.msg, "--tp 2"));
    b.tp = 2;
    CU_ASSERT(isnan(cost_step_time(m, &b)));
    cost_free(m);

    /* under tp 2 the two all-reduces per layer move T·hidden·4 bytes each */
    m = load(lin, 3, 2, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    b.tp = 0;
    double ar = 3 * 2 * lin(CT_ALLREDUCE, 105.0 * 256 * 4, 0);
    REL_EQ(cost_step_time(m, &b), by_hand(3, 105, 100, 300, 1, 5, 3000, 6) + ar, 1e-12);
    cost_free(m);
}

/* Several chunks, and what a step record keeps of them. */
static void test_chunks_and_records(void)
{
    cost_model *m = load(lin, 2, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    /* three fresh prompts: each chunk's pairs add up, priced as 3 equal chunks */
    cost_seq s[] = {{200, 0, true}, {50, 0, true}, {400, 0, true}};
    cost_batch b = {.seqs = s, .n = 3};
    cost_batch_summarize(&b);
    double all_pairs = pairs(200, 0) + pairs(50, 0) + pairs(400, 0);
    double n = 650.0 / 3, c = (all_pairs / 3 - n * (n + 1) / 2) / n;
    double want = by_hand(2, 650, n, c, 3, 0, 0, 3);
    REL_EQ(cost_step_time(m, &b), want, 1e-12);
    /* linear in pairs: the same as the chunks priced one by one */
    double one_by_one = 3 * lin_base(CT_PREFILL_ATTN) + 1e-9 * (3 + CT_PREFILL_ATTN) * all_pairs;
    REL_EQ(3 * lin(CT_PREFILL_ATTN, n, c), one_by_one, 1e-12);

    /* from a step record (no causal pairs): exact for chunks without context
     * and for one chunk */
    tr_step st = {.prefill_tokens = 650, .prefill_seqs = 3, .prefill_context = 0, .prefill_attn = b.prefill_attn};
    cost_batch rb;
    cost_batch_from_step(&rb, &st);
    REL_EQ(cost_step_time(m, &rb), cost_step_time(m, &b), 1e-12);
    cost_seq one[] = {{300, 1000, true}, {1, 50, false}};
    cost_batch b1 = {.seqs = one, .n = 2};
    cost_batch_summarize(&b1);
    tr_step st1 = {.prefill_tokens = 300, .prefill_seqs = 1, .prefill_context = 1000, .prefill_attn = b1.prefill_attn,
                   .decode_seqs = 1, .decode_tokens = 1, .decode_context = 50};
    cost_batch_from_step(&rb, &st1);
    REL_EQ(cost_step_time(m, &rb), cost_step_time(m, &b1), 1e-12);
    /* equal chunks with context */
    cost_seq eq[] = {{128, 512, true}, {128, 512, true}};
    cost_batch be = {.seqs = eq, .n = 2};
    cost_batch_summarize(&be);
    tr_step ste = {.prefill_tokens = 256, .prefill_seqs = 2, .prefill_context = 1024, .prefill_attn = be.prefill_attn};
    cost_batch_from_step(&rb, &ste);
    REL_EQ(cost_step_time(m, &rb), cost_step_time(m, &be), 1e-12);
    /* unequal chunks with context: bounded, never below the equal-chunk price */
    cost_seq un[] = {{512, 1536, true}, {100, 0, true}};
    cost_batch bu = {.seqs = un, .n = 2};
    cost_batch_summarize(&bu);
    tr_step stu = {.prefill_tokens = 612, .prefill_seqs = 2, .prefill_context = 1536, .prefill_attn = bu.prefill_attn};
    cost_batch_from_step(&rb, &stu);
    double rec = cost_step_time(m, &rb), exact = cost_step_time(m, &bu);
    CU_ASSERT(rec > 0 && fabs(rec - exact) / exact < 0.1);
    /* a decode verifying 3 drafts runs 4 query rows */
    cost_seq v[] = {{4, 1000, false}};
    cost_batch bv = {.seqs = v, .n = 1};
    cost_batch_summarize(&bv);
    cost_term t[32];
    int nt = cost_breakdown(m, &bv, t, 32);
    for (int i = 0; i < nt; i++)
        if (!strcmp(t[i].name, "decode_attention")) REL_EQ(t[i].seconds, 2 * 4 * lin(CT_DECODE_ATTN, 1, 1000), 1e-12);
    cost_free(m);
}

/* A table file with one thing wrong, and the message that must name it. */
static void expect_error(json_t *root, const char *needle1, const char *needle2)
{
    rh_err e;
    cost_model *m = load_json(root, &e);
    json_decref(root);
    CU_ASSERT_PTR_NULL(m);
    if (m) {
        cost_free(m);
        return;
    }
    int ok = strstr(e.msg, "t.json") && strstr(e.msg, needle1) && (!needle2 || strstr(e.msg, needle2));
    if (!ok) printf("\n  expected '%s' / '%s' in: %s\n", needle1, needle2 ? needle2 : "", e.msg);
    CU_ASSERT(ok);
}

static json_t *op_of(json_t *root, const char *name)
{
    return json_object_get(json_object_get(root, "operators"), name);
}

static void test_bad_files(void)
{
    json_t *r;
    r = build(lin, 2, 1, 0);
    json_object_set_new(r, "version", json_integer(2));
    expect_error(r, "'version'", "version 2 of kind 'table'");

    r = build(lin, 2, 1, 0);
    json_object_set_new(r, "kind", json_string("tabel"));
    expect_error(r, "'kind'", "unknown kind 'tabel'");

    r = build(lin, 2, 1, 0);
    json_array_set_new(json_array_get(json_object_get(op_of(r, "decode_attention"), "seconds"), 1), 2, json_null());
    expect_error(r, "'operators.decode_attention.seconds[1][2]'", "hole at seqs = 2, context = 8192");

    r = build(lin, 2, 1, 0);
    json_array_remove(json_object_get(op_of(r, "q_proj"), "seconds"), 3);
    expect_error(r, "'operators.q_proj.seconds'", "has 7 entries but axis 'tokens' has 8");

    r = build(lin, 2, 1, 0);
    json_array_remove(json_array_get(json_object_get(op_of(r, "prefill_attention"), "seconds"), 4), 0);
    expect_error(r, "'operators.prefill_attention.seconds[4]'", "axis 'context' has 4");

    r = build(lin, 2, 1, 0);
    json_array_set_new(json_object_get(op_of(r, "lm_head"), "rows"), 2, json_real(3));
    expect_error(r, "'operators.lm_head.rows[2]'", "strictly ascending");

    r = build(lin, 2, 1, 0);
    json_object_del(json_object_get(r, "operators"), "silu_mul");
    expect_error(r, "'operators.silu_mul'", "missing");

    r = build(lin, 2, 1, 0);
    json_object_set_new(json_object_get(r, "operators"), "qkv_proj", json_object());
    expect_error(r, "'operators.qkv_proj'", "unknown operator");

    r = build(lin, 2, 1, 0);
    json_object_del(json_object_get(r, "model"), "num_hidden_layers");
    expect_error(r, "'model.num_hidden_layers'", "missing");

    r = build(lin, 2, 1, 0);
    json_array_set_new(json_object_get(op_of(r, "sample"), "seconds"), 0, json_real(-1));
    expect_error(r, "'operators.sample.seconds[0]'", "out of range");

    r = build(lin, 2, 1, 0);
    json_object_set_new(op_of(r, "rope"), "tokns", json_array());
    expect_error(r, "'operators.rope.tokns'", "unknown field");

    r = build(lin, 2, 1, 0);
    json_object_set_new(op_of(r, "embedding"), "tokens", json_pack("[i]", 1));
    expect_error(r, "'operators.embedding.tokens'", "2 to");

    r = build(lin, 2, 1, 0);
    json_object_del(r, "backend");
    expect_error(r, "'backend'", "missing");

    /* through the file loader: the message names the file */
    char path[256];
    tu_tmp_path("hole.json", path, sizeof path);
    r = build(lin, 2, 1, 0);
    json_array_set_new(json_object_get(op_of(r, "kv_write"), "seconds"), 0, json_null());
    CU_ASSERT_EQUAL_FATAL(json_dump_file(r, path, 0), 0);
    json_decref(r);
    rh_err e;
    CU_ASSERT_PTR_NULL(cost_load(path, &e));
    CU_ASSERT(strstr(e.msg, path) && strstr(e.msg, "operators.kv_write.seconds[0]") && strstr(e.msg, "hole"));
    remove(path);
}

/* The host tier's copies: a table with kv_copy prices every token the
 * engine copies before a forward (loaded back, written back, backed up) on
 * that line; one without it refuses --enable-hierarchical-cache. */
static void test_kv_copy(void)
{
    rh_err e;
    json_t *root = build(lin, 4, 1, 0);
    cost_model *plain = load_json(root, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
    json_object_set_new(json_object_get(root, "operators"), "kv_copy",
                        json_pack("{s:[f,f], s:[f,f]}", "tokens", 16.0, 1024.0, "seconds", 2e-6, 2e-6 + 1008 * 1e-8));
    cost_model *m = load_json(root, &e);
    json_decref(root);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_seq s[1] = {{64, 100, true}};
    cost_batch b = {.seqs = s, .n = 1};
    cost_batch_summarize(&b);
    double base = cost_step_time(m, &b);
    REL_EQ(base, cost_step_time(plain, &b), 1e-12);
    b.load_tokens = 512, b.writeback_tokens = 16, b.backup_tokens = 240;
    REL_EQ(cost_step_time(m, &b) - base, 2e-6 + (768 - 16) * 1e-8, 1e-9);
    REL_EQ(cost_step_time(plain, &b), base, 1e-12);   /* it cannot say */
    cost_serving sv;
    cost_serving_default(m, 0, &sv);
    sv.hicache = true;
    CU_ASSERT_EQUAL(cost_serving_check(m, 0, &sv, &e), 0);
    CU_ASSERT_EQUAL(cost_serving_check(plain, 0, &sv, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "kv_copy"));
    cost_free(m);
    cost_free(plain);
}

void register_test_cost_table(void)
{
    CU_pSuite s = CU_add_suite("cost_table", NULL, NULL);
    CU_add_test(s, "exact at grid points", test_exact_at_grid_points);
    CU_add_test(s, "the host tier's copies priced by kv_copy; refused without it", test_kv_copy);
    CU_add_test(s, "monotone between grid points", test_monotone_between_points);
    CU_add_test(s, "extrapolation follows the trend", test_extrapolates_along_trend);
    CU_add_test(s, "a step composed as the forward pass runs", test_step_composition);
    CU_add_test(s, "chunks and step-record aggregates", test_chunks_and_records);
    CU_add_test(s, "bad table files name the file and field", test_bad_files);
}
