/* test_cost.c — the cost-model interface and the linear kind: step times
 * computed by hand, speculative pricing, tensor-parallel coefficient sets,
 * save/load round trips and every kind of bad cost file. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost.h"
#include "util/rng.h"
#include "testutil.h"

static const cost_linear_coef K = {0.004, 2e-5, 1e-4, 1e-8, 1e-10};
#define COEFS_TEXT "\"base_s\": 0.004, \"per_prefill_token_s\": 2e-5, \"per_decode_seq_s\": 1e-4, " \
                   "\"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10"

#define REL_EQ(a, b) CU_ASSERT(fabs((a) - (b)) <= 1e-12 * fmax(fabs(a), fabs(b)) + 1e-18)

static void test_summarize_by_hand(void)
{
    cost_seq s[] = {{1000, 500, true}, {200, 0, true}, {1, 100, false}, {1, 2000, false}, {1, 900, false}};
    cost_batch b = {.seqs = s, .n = 5};
    cost_batch_summarize(&b);
    CU_ASSERT_EQUAL(b.prefill_tokens, 1200);
    CU_ASSERT_EQUAL(b.prefill_seqs, 2);
    CU_ASSERT_EQUAL(b.decode_seqs, 3);
    CU_ASSERT_EQUAL(b.decode_tokens, 3);
    CU_ASSERT_EQUAL(b.decode_context, 3000);
    CU_ASSERT_EQUAL(b.prefill_context, 500);
    CU_ASSERT_EQUAL(b.prefill_attn, 1000 * 1500 + 200 * 200);
    /* causal pairs: 1000·500 + 1000·1001/2 + 200·201/2 */
    CU_ASSERT_EQUAL(b.prefill_causal, 500000 + 500500 + 20100);
}

static void test_linear_closed_form(void)
{
    cost_model *m = cost_linear_new(&K);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_seq s[] = {{1000, 500, true}, {200, 0, true}, {1, 100, false}, {1, 2000, false}, {1, 900, false}};
    cost_batch b = {.seqs = s, .n = 5};
    cost_batch_summarize(&b);
    /* 0.004 + 2e-5·1200 + 1e-4·3 + 1e-8·3000 + 1e-10·1 540 000 */
    REL_EQ(cost_step_time(m, &b), 0.004 + 0.024 + 0.0003 + 0.00003 + 0.000154);
    REL_EQ(cost_step_time(m, &b), 0.028484);

    /* a lone decode, and the empty batch costs nothing */
    cost_seq d = {1, 4096, false};
    cost_batch b1 = {.seqs = &d, .n = 1};
    cost_batch_summarize(&b1);
    REL_EQ(cost_step_time(m, &b1), 0.004 + 1e-4 + 4096e-8);
    cost_batch empty = {0};
    CU_ASSERT_EQUAL(cost_step_time(m, &empty), 0);

    /* the breakdown adds up to the total */
    cost_term t[16];
    int n = cost_breakdown(m, &b, t, 16);
    CU_ASSERT_EQUAL(n, 5);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i].seconds;
    REL_EQ(sum, 0.028484);
    cost_free(m);
}

static void test_linear_speculative(void)
{
    cost_model *m = cost_linear_new(&K);
    CU_ASSERT_DOUBLE_EQUAL(m->draft_ratio, 0.1, 0);
    /* three decodes verifying 2 drafts each (1 + 2 tokens), drafted by two
     * one-token forward passes */
    cost_seq s[] = {{3, 100, false}, {3, 2000, false}, {3, 900, false}};
    cost_batch b = {.seqs = s, .n = 3, .draft_steps = 2, .draft_seqs = 3};
    cost_batch_summarize(&b);
    CU_ASSERT_EQUAL(b.decode_tokens, 9);
    /* verify: base + 6 draft slots as prompt tokens + 3 decodes + context 3000 */
    double verify = 0.004 + 6 * 2e-5 + 3 * 1e-4 + 3000 * 1e-8;
    /* drafting: 0.1 x a decode-only step of 3 seqs, at context 3000 then 3003 */
    double draft = 0.1 * (0.004 + 3e-4 + 3000e-8) + 0.1 * (0.004 + 3e-4 + 3003e-8);
    REL_EQ(cost_draft_time(m, &b), draft);
    REL_EQ(cost_step_time(m, &b), verify + draft);
    REL_EQ(cost_step_time(m, &b), 0.005316003);

    /* the features times the coefficients are the step time, draft terms included */
    double phi[5];
    cost_linear_features(&b, m->draft_ratio, phi);
    REL_EQ(K.base_s * phi[0] + K.per_prefill_token_s * phi[1] + K.per_decode_seq_s * phi[2] +
               K.per_context_token_s * phi[3] + K.per_attention_s * phi[4],
           cost_step_time(m, &b));

    /* a step record of the same batch prices the same */
    tr_step st = {0};
    st.decode_seqs = 3;
    st.decode_tokens = 9;
    st.decode_context = 3000;
    cost_batch fb;
    cost_batch_from_step(&fb, &st);
    CU_ASSERT_EQUAL(fb.draft_steps, 2);
    CU_ASSERT_EQUAL(fb.draft_seqs, 3);
    REL_EQ(cost_step_time(m, &fb), 0.005316003);
    cost_free(m);
}


/* Each overhead where it belongs: the step's CPU time once per step, a
 * launch per forward pass (the verify and each draft pass), and neither
 * inside the forward or the drafting; request and output-token costs
 * never in a step (the simulator charges them on the way in and out). */
static void test_overheads_where_they_occur(void)
{
    cost_model *plain = cost_linear_new(&K);
    rh_err e = {{0}};
    cost_model *m = cost_parse("{\"kind\": \"linear\", \"version\": 1, " COEFS_TEXT ", \"overheads\": "
                               "{\"step_s\": 0.0015, \"forward_s\": 0.0002, \"request_s\": 0.03, "
                               "\"output_token_s\": 0.0004}}",
                               "over.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_DOUBLE_EQUAL(m->over.request_s, 0.03, 0);
    CU_ASSERT_DOUBLE_EQUAL(m->over.output_token_s, 0.0004, 0);
    /* three decodes verifying 2 drafts each, drafted by two forward passes */
    cost_seq s[] = {{3, 100, false}, {3, 2000, false}, {3, 900, false}, {500, 0, true}};
    cost_batch b = {.seqs = s, .n = 4, .draft_steps = 2, .draft_seqs = 3};
    cost_batch_summarize(&b);
    CU_ASSERT_EQUAL(cost_forwards(&b), 3);
    REL_EQ(cost_step_time(m, &b) - cost_step_time(plain, &b), 0.0015 + 3 * 0.0002);
    REL_EQ(cost_draft_time(m, &b), cost_draft_time(plain, &b));
    cost_term t[16];
    int n = cost_breakdown(m, &b, t, 16);
    double sum = 0, cpu = 0, launches = 0;
    for (int i = 0; i < n; i++) {
        sum += t[i].seconds;
        if (!strcmp(t[i].name, "step cpu")) cpu = t[i].seconds;
        if (!strcmp(t[i].name, "launches")) launches = t[i].seconds;
    }
    REL_EQ(sum, cost_step_time(m, &b));
    REL_EQ(cpu, 0.0015);
    REL_EQ(launches, 3 * 0.0002);
    /* without drafts: one forward */
    cost_batch d = {.seqs = s, .n = 4};
    cost_batch_summarize(&d);
    CU_ASSERT_EQUAL(cost_forwards(&d), 1);
    REL_EQ(cost_step_time(m, &d) - cost_step_time(plain, &d), 0.0015 + 0.0002);
    cost_free(m);
    cost_free(plain);

    /* The roofline's step_overhead_s is the step's CPU time: charged once,
     * not again for each of DeepSeek's MTP draft passes. */
    const char *roof = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-v3\", "
                       "\"gpu\": \"h200\", \"tp\": 8, \"dtype\": \"fp8\"%s}";
    char text[512];
    snprintf(text, sizeof text, roof, "");
    cost_model *r0 = cost_parse(text, "roof.json", &e);
    snprintf(text, sizeof text, roof, ", \"step_overhead_s\": 0.002");
    cost_model *r1 = cost_parse(text, "roof.json", &e);
    snprintf(text, sizeof text, roof, ", \"overheads\": {\"step_s\": 0.002, \"forward_s\": 0.0001}");
    cost_model *r2 = cost_parse(text, "roof.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r2);
    cost_seq q[] = {{4, 3000, false}, {4, 1000, false}};
    cost_batch v = {.seqs = q, .n = 2, .draft_steps = 3, .draft_seqs = 2};
    cost_batch_summarize(&v);
    REL_EQ(cost_step_time(r1, &v) - cost_step_time(r0, &v), 0.002);
    REL_EQ(cost_step_time(r2, &v) - cost_step_time(r0, &v), 0.002 + 4 * 0.0001);
    cost_free(r0);
    cost_free(r1);
    cost_free(r2);
}

static const char *LIN_TP =
    "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5,"
    " \"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10,"
    " \"tp\": {\"2\": {\"base_s\": 0.003, \"per_prefill_token_s\": 1e-5, \"per_decode_seq_s\": 6e-5,"
    "  \"per_context_token_s\": 5e-9, \"per_attention_s\": 5e-11}}}";

static void test_linear_tp_map(void)
{
    rh_err e;
    cost_model *m = cost_parse(LIN_TP, "lin.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_seq s[] = {{1000, 0, true}, {1, 1000, false}};
    cost_batch b = {.seqs = s, .n = 2};
    cost_batch_summarize(&b);
    REL_EQ(cost_step_time(m, &b), 0.004 + 1000 * 2e-5 + 1e-4 + 1000e-8 + 1e6 * 1e-10);
    b.tp = 1;
    REL_EQ(cost_step_time(m, &b), 0.004 + 1000 * 2e-5 + 1e-4 + 1000e-8 + 1e6 * 1e-10);
    b.tp = 2;
    CU_ASSERT_EQUAL(cost_check_tp(m, 2, &e), 0);
    REL_EQ(cost_step_time(m, &b), 0.003 + 1000 * 1e-5 + 6e-5 + 1000 * 5e-9 + 1e6 * 5e-11);
    b.tp = 4;
    CU_ASSERT_EQUAL(cost_check_tp(m, 4, &e), -1);
    CU_ASSERT(strstr(e.msg, "lin.json") && strstr(e.msg, "'tp'") && strstr(e.msg, " 4 "));
    CU_ASSERT(isnan(cost_step_time(m, &b)));
    cost_free(m);

    /* tp_size says which size the top-level coefficients are for */
    m = cost_parse("{\"kind\": \"fit\", \"version\": 1, \"tp_size\": 8, \"base_s\": 0.01,"
                   " \"per_prefill_token_s\": 0, \"per_decode_seq_s\": 0, \"per_context_token_s\": 0,"
                   " \"per_attention_s\": 0}", "t8", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(cost_check_tp(m, 8, &e), 0);
    CU_ASSERT_EQUAL(cost_check_tp(m, 0, &e), 0);
    CU_ASSERT_EQUAL(cost_check_tp(m, 1, &e), -1);
    b.tp = 8;
    REL_EQ(cost_step_time(m, &b), 0.01);
    cost_free(m);
}

static void test_linear_save_load(void)
{
    char path[256];
    tu_tmp_path("lin-save.json", path, sizeof path);
    rh_err e;
    const cost_linear_coef c = {0.0031234567891, 1.7e-5, 9.25e-5, 3.3e-9, 1.1e-10};
    CU_ASSERT_EQUAL_FATAL(cost_linear_save(path, &c, 1, 0.25, NULL, &e), 0);
    cost_model *m = cost_load(path, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_STRING_EQUAL(m->path, path);
    CU_ASSERT_DOUBLE_EQUAL(m->draft_ratio, 0.25, 1e-15);
    cost_model *ref = cost_linear_new(&c);
    ref->draft_ratio = 0.25;
    cost_seq s[] = {{512, 1024, true}, {3, 700, false}, {3, 9000, false}};
    cost_batch b = {.seqs = s, .n = 3, .draft_steps = 2, .draft_seqs = 2};
    cost_batch_summarize(&b);
    double a = cost_step_time(m, &b), r = cost_step_time(ref, &b);
    CU_ASSERT(fabs(a - r) <= 1e-11 * r);
    cost_free(m);
    cost_free(ref);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CU_ASSERT(!tu_file_exists(tmp));
    remove(path);
}

/* One bad file: the load fails and the message names the label and needle. */
static void bad(const char *json, const char *needle)
{
    rh_err e = {""};
    cost_model *m = cost_parse(json, "bad.json", &e);
    CU_ASSERT_PTR_NULL(m);
    if (m) cost_free(m);
    int ok = strstr(e.msg, "bad.json") && strstr(e.msg, needle);
    if (!ok) printf("\n  message '%s' lacks '%s'\n", e.msg, needle);
    CU_ASSERT(ok);
}

#define COEFS "\"base_s\": 0.004, \"per_prefill_token_s\": 2e-5, \"per_decode_seq_s\": 1e-4, " \
              "\"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10"

static void test_bad_files(void)
{
    bad("{\"kind\": \"lineer\", \"version\": 1}", "'kind': unknown kind 'lineer'");
    bad("{\"version\": 1}", "'kind': missing");
    bad("{\"kind\": 7, \"version\": 1}", "'kind': must be a string");
    bad("{\"kind\": \"linear\", \"version\": 2, " COEFS "}", "'version': version 2");
    bad("{\"kind\": \"linear\", " COEFS "}", "'version': missing");
    bad("{\"kind\": \"linear\", \"version\": 1.5, " COEFS "}", "'version': must be an integer");
    bad("{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5,"
        " \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}", "'per_decode_seq_s': missing");
    bad("{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5,"
        " \"per_decode_seq_s\": 1e-4, \"per_context_token_s\": -1e-8, \"per_attention_s\": 1e-10}",
        "'per_context_token_s': -1e-08 is out of range");
    bad("{\"kind\": \"linear\", \"version\": 1, \"base_s\": \"fast\", \"per_prefill_token_s\": 2e-5,"
        " \"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}",
        "'base_s': must be a number, got a string");
    bad("{\"kind\": \"linear\", \"version\": 1, \"per_prefil_token_s\": 1, " COEFS "}",
        "'per_prefil_token_s': unknown field");
    bad("{\"kind\": \"linear\", \"version\": 1, " COEFS ", \"tp\": {\"two\": {" COEFS "}}}", "'tp.two'");
    bad("{\"kind\": \"linear\", \"version\": 1, " COEFS ", \"tp\": {\"2\": {\"base_s\": 1}}}",
        "'tp.2.per_prefill_token_s': missing");
    bad("{\"kind\": \"linear\", \"version\": 1, " COEFS ", \"tp\": {\"1\": {" COEFS "}}}", "given twice");
    bad("{\"kind\": \"linear\", \"version\": 1, " COEFS ", \"tp\": 2}", "'tp': must be an object");
    bad("{\"kind\": \"linear\", \"version\": 1, " COEFS ", \"draft_ratio\": -0.5}", "'draft_ratio'");
    bad("{\"kind\": \"linear\", \"version\": 1, " COEFS ", \"base_s\": 1}", "duplicate");
    bad("{\"kind\": \"linear\", \"version\": 1, " COEFS ", \"overheads\": {\"step\": 1}}", "'overheads.step': unknown field");
    bad("{\"kind\": \"linear\", \"version\": 1, " COEFS ", \"overheads\": {\"request_s\": -1}}",
        "'overheads.request_s'");
    bad("{\"kind\": \"linear\", \"version\": 1, " COEFS ", \"overheads\": 3}", "'overheads': must be an object");
    bad("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\", "
        "\"step_overhead_s\": 0.001, \"overheads\": {\"step_s\": 0.001}}", "given twice");
    bad("{\"kind\": \"linear\", \"version\": 1, " COEFS, "line 1");
    bad("[1, 2]", "JSON object");
    bad("", "line");

    rh_err e;
    CU_ASSERT_PTR_NULL(cost_load("build/tmp/no/such/cost.json", &e));
    CU_ASSERT(strstr(e.msg, "build/tmp/no/such/cost.json") != NULL);
}

/* The roofline cases name shipped presets. */
/* Prices through a memo equal the model's own, bit for bit: a batch that
 * differs from one just priced in any single aggregate is priced anew
 * (a key missing a field would hand back the first one's parts), and a
 * long stream of repeating and colliding shapes matches direct pricing.
 * A model that reads each sequence gets no memo. */
static int same_parts(const cost_parts *a, const cost_parts *b)
{
    return !memcmp(a, b, sizeof *a);
}

/* A kind that draws a new price at every call, as a noisy emulated server
 * does, and does not say its prices are the aggregates' */
static int drawn;
static double drawing_step(const cost_model *m, const cost_batch *b)
{
    (void)m, (void)b;
    return 0.01 * ++drawn;
}

static void test_memo_equals_model(void)
{
    rh_err e;
    cost_model *m = cost_parse("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\", "
                               "\"overheads\": {\"step_s\": 0.001, \"forward_s\": 0.0002}}",
                               "memo.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_serving sv;
    cost_serving_default(m, 1, &sv);
    cost_memo *memo = cost_memo_new(m, 1, &sv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(memo);
    cost_batch base = {.tp = 1, .serving = &sv, .prefill_tokens = 512, .prefill_seqs = 1, .decode_seqs = 8,
                       .decode_tokens = 16, .decode_context = 8000, .prefill_context = 100, .prefill_attn = 300000,
                       .prefill_causal = 200000, .draft_steps = 1, .draft_seqs = 8, .draft_width = 1};
    int bad = 0;
    for (int field = 0; field < 11; field++) {
        cost_batch a = base;
        if (field == 6) a.prefill_causal = 0;   /* the attended pairs only count when the causal ones are unknown */
        cost_batch b = a;
        switch (field) {
        case 0: b.prefill_tokens += 64; break;
        case 1: b.prefill_seqs += 1; break;
        case 2: b.decode_seqs += 1; break;
        case 3: b.decode_tokens += 8; break;
        case 4: b.decode_context += 4000; break;
        case 5: b.prefill_context += 4000; break;
        case 6: b.prefill_attn += 100000; break;
        case 7: b.prefill_causal += 100000; break;
        case 8: b.draft_steps += 1; break;
        case 9: b.draft_seqs -= 4; break;
        default: b.draft_width = 4; break;
        }
        cost_parts first, direct, memoised;
        cost_memo_parts(memo, m, &a, &first);
        double t_direct = cost_step_parts(m, &b, &direct), t_memo = cost_memo_parts(memo, m, &b, &memoised);
        if (!same_parts(&direct, &memoised) || t_direct != t_memo) {
            printf("\n  field %d: memo %.17g, model %.17g\n", field, t_memo, t_direct);
            bad++;
        }
        CU_ASSERT(!same_parts(&first, &direct));   /* each field matters to this model */
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* 300k batches from ~200k shapes, each field drawn apart (shapes that
     * share some fields and not others meet in one slot): hits, misses and
     * slots taken over */
    uint64_t seed = 11;
    for (int i = 0; i < 300000; i++) {
        uint64_t x = rh_splitmix_next(&seed);
        cost_batch b = {.tp = 1, .serving = &sv, .decode_seqs = 1 + x % 32, .decode_context = 1000 * (1 + (x >> 8) % 800)};
        b.decode_tokens = b.decode_seqs * (1 + (x >> 20) % 2);
        if ((x >> 24) % 4 == 0) b.prefill_tokens = 1024, b.prefill_seqs = 1, b.prefill_attn = 1024 * 1024;
        if ((x >> 28) % 4 == 0) b.draft_steps = 1 + (x >> 32) % 3, b.draft_seqs = b.decode_seqs, b.draft_width = 1 + (x >> 40) % 2;
        cost_parts direct, memoised;
        double t_direct = cost_step_parts(m, &b, &direct), t_memo = cost_memo_parts(memo, m, &b, &memoised);
        bad += !same_parts(&direct, &memoised) || t_direct != t_memo;
    }
    CU_ASSERT_EQUAL(bad, 0);
    cost_memo_free(memo);
    /* DeepSeek under data-parallel attention places each request: no memo */
    cost_model *ds = cost_parse("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-v3\", \"gpu\": \"h200\", "
                                "\"tp\": 8}",
                                "ds.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    cost_serving dsv;
    cost_serving_default(ds, 8, &dsv);
    CU_ASSERT(cost_prices_by_aggregates(ds, 8, &dsv));
    cost_memo *dm = cost_memo_new(ds, 8, &dsv);
    CU_ASSERT_PTR_NOT_NULL(dm);
    cost_memo_free(dm);
    dsv.dp = 8;
    CU_ASSERT(!cost_prices_by_aggregates(ds, 8, &dsv));
    CU_ASSERT_PTR_NULL(cost_memo_new(ds, 8, &dsv));
    CU_ASSERT(cost_prices_by_aggregates(m, 1, &sv));
    /* a model that does not say so is priced every time */
    static const cost_ops drawing_ops = {.kind = "drawing", .step_time = drawing_step};
    cost_model drawing = {.ops = &drawing_ops, .path = (char *)""};
    CU_ASSERT(!cost_prices_by_aggregates(&drawing, 1, &sv));
    cost_memo *dm2 = cost_memo_new(&drawing, 1, &sv);
    CU_ASSERT_PTR_NULL(dm2);
    cost_batch one = {.tp = 1, .serving = &sv, .decode_seqs = 1, .decode_tokens = 1, .decode_context = 100};
    cost_parts p1, p2;
    double t1 = cost_memo_parts(dm2, &drawing, &one, &p1), t2 = cost_memo_parts(dm2, &drawing, &one, &p2);
    CU_ASSERT(t1 != t2);
    cost_memo_free(dm2);
    cost_free(ds);
    cost_free(m);
}

static int init_presets(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

void register_test_cost(void)
{
    CU_pSuite s = CU_add_suite("cost", init_presets, NULL);
    CU_add_test(s, "batch aggregates by hand", test_summarize_by_hand);
    CU_add_test(s, "linear closed form by hand", test_linear_closed_form);
    CU_add_test(s, "linear prices verify and drafting", test_linear_speculative);
    CU_add_test(s, "linear coefficients per tp size", test_linear_tp_map);
    CU_add_test(s, "linear save and load round trip", test_linear_save_load);
    CU_add_test(s, "bad cost files name file and field", test_bad_files);
    CU_add_test(s, "overheads where they occur: per step, per forward pass", test_overheads_where_they_occur);
    CU_add_test(s, "a memo's prices equal the model's, bit for bit", test_memo_equals_model);
}
