/* test_model.c — the forward pass, each result checked against a second way
 * of computing it: chunked prefill against one-shot prefill, a reused prefix
 * against recomputing it, a mixed batch against each request alone, shuffled
 * page tables against contiguous ones, two greedy runs against each other.
 * Also: bad input (ids, positions, pages) and models that do not fit fail
 * with a message instead of crashing. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/generate.h"

#define REL_TOL 1e-4

static uint64_t rng = 777;

static uint32_t urand(uint32_t n)
{
    return (uint32_t)(rh_splitmix_unit(&rng) * n);
}

/* tiny-llama, or (variant 1) the same size with every optional feature on:
 * untied LM head, QKV/O/MLP biases, llama3 RoPE scaling with a small original
 * context so all three frequency bands occur, and a sliding window shorter
 * than the test prompts. */
static model *tiny_model(int variant)
{
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    if (variant == 1) {
        snprintf(c.name, sizeof c.name, "tiny-every-feature");
        c.tie_embeddings = false;
        c.qkv_bias = c.o_bias = c.mlp_bias = true;
        c.rope_type = MODEL_ROPE_LLAMA3;
        c.rope_factor = 8;
        c.rope_low_freq_factor = 1;
        c.rope_high_freq_factor = 4;
        c.rope_original_max_position = 64;
        c.sliding_window = 24;
        c.max_position = 256;
    }
    model *m = model_new_dummy(&c, 42, 0, &e);
    if (!m) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(m != NULL);
    return m;
}

static runner *new_runner(const model *m, uint32_t page_size, uint32_t pages)
{
    runner_config rc = {page_size, pages, 0, NULL};
    rh_err e;
    runner *r = runner_new(m, &rc, &e);
    if (!r) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(r != NULL);
    return r;
}

/* Runs one sequence step and returns a copy of its logits (n_logits rows). */
static float *step(runner *r, const int32_t *tok, uint32_t n, uint32_t start, const uint32_t *pages, uint32_t np,
                   uint32_t n_logits)
{
    runner_seq s = {tok, n, start, pages, np, n_logits, NULL};
    const float *lg;
    rh_err e;
    int rc = runner_forward(r, &s, 1, &lg, &e);
    if (rc) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(rc == 0);
    size_t bytes = (size_t)n_logits * runner_model(r)->vocab_size * sizeof(float);
    float *copy = malloc(bytes ? bytes : 1);
    memcpy(copy, lg, bytes);
    return copy;
}

/* Worst over rows of max|a - b| / max|b|. */
static double rows_rel_err(const float *a, const float *b, uint32_t rows, uint32_t vocab)
{
    double worst = 0;
    for (uint32_t r = 0; r < rows; r++) {
        double num = 0, den = 0;
        for (uint32_t i = 0; i < vocab; i++) {
            size_t k = (size_t)r * vocab + i;
            if (!isfinite(a[k]) || !isfinite(b[k])) return INFINITY;
            double d = fabs((double)a[k] - b[k]);
            if (d > num) num = d;
            if (fabs(b[k]) > den) den = fabs(b[k]);
        }
        if (num / den > worst) worst = num / den;
    }
    return worst;
}

static void random_tokens(int32_t *t, uint32_t n, uint32_t vocab)
{
    for (uint32_t i = 0; i < n; i++) t[i] = (int32_t)urand(vocab);
}

static void shuffled_pages(uint32_t *p, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) p[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = urand(i + 1), t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

/* ---- chunked prefill -------------------------------------------------- */

static void check_chunked(int variant)
{
    enum { N = 61, PS = 8, PAGES = 16 };
    model *m = tiny_model(variant);
    uint32_t V = m->cfg.vocab_size;
    runner *r = new_runner(m, PS, PAGES);
    int32_t tok[N];
    random_tokens(tok, N, V);
    uint32_t ident[PAGES], shuf[PAGES];
    for (uint32_t i = 0; i < PAGES; i++) ident[i] = i;
    shuffled_pages(shuf, PAGES);

    float *once = step(r, tok, N, 0, ident, PAGES, N);   /* logits of every position */
    const uint32_t chunks[] = {1, 2, 3, 7, 8, 16, 60};
    float *got = malloc((size_t)N * V * sizeof(float));
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
        uint32_t c = chunks[ci];
        for (uint32_t at = 0; at < N; at += c) {
            uint32_t n = N - at < c ? N - at : c;
            float *lg = step(r, tok + at, n, at, shuf, PAGES, n);
            memcpy(got + (size_t)at * V, lg, (size_t)n * V * sizeof(float));
            free(lg);
        }
        double err = rows_rel_err(got, once, N, V);
        if (err > REL_TOL) printf("\n  variant %d chunk %u: rel err %g\n", variant, c, err);
        CU_ASSERT(err <= REL_TOL);
    }
    free(got);
    free(once);
    runner_free(r);
    model_free(m);
}

static void test_chunked_prefill_equals_one_shot(void)
{
    check_chunked(0);
    check_chunked(1);
}

/* Paging is only addressing: the same sequence through shuffled pages gives
 * bit-identical logits to contiguous pages. */
static void test_page_table_is_only_addressing(void)
{
    enum { N = 45, PS = 4, PAGES = 16 };
    model *m = tiny_model(0);
    uint32_t V = m->cfg.vocab_size;
    runner *r = new_runner(m, PS, PAGES);
    int32_t tok[N];
    random_tokens(tok, N, V);
    uint32_t ident[PAGES], shuf[PAGES];
    for (uint32_t i = 0; i < PAGES; i++) ident[i] = i;
    shuffled_pages(shuf, PAGES);
    float *a = step(r, tok, N, 0, ident, PAGES, N);
    float *b = step(r, tok, N, 0, shuf, PAGES, N);
    CU_ASSERT(memcmp(a, b, (size_t)N * V * sizeof(float)) == 0);
    free(a);
    free(b);
    runner_free(r);
    model_free(m);
}

/* ---- prefix reuse ----------------------------------------------------- */

/* Request B shares A's first 32 tokens. B reads A's pages for them and
 * computes only its suffix; the logits must equal B computed from scratch. */
static void test_prefix_reuse_equals_recompute(void)
{
    enum { PS = 8, PREFIX = 32, NA = 50, NB = 47, PAGES = 32 };
    for (int variant = 0; variant < 2; variant++) {
        model *m = tiny_model(variant);
        uint32_t V = m->cfg.vocab_size;
        runner *r = new_runner(m, PS, PAGES);
        int32_t a[NA], b[NB];
        random_tokens(a, NA, V);
        memcpy(b, a, PREFIX * sizeof *b);
        random_tokens(b + PREFIX, NB - PREFIX, V);

        uint32_t pa[7] = {3, 9, 1, 14, 5, 6, 7};            /* A's pages */
        uint32_t pb[6] = {3, 9, 1, 14, 20, 22};             /* B: A's 4 prefix pages, then its own */
        uint32_t fresh[6] = {25, 26, 27, 28, 29, 30};       /* B alone */
        free(step(r, a, NA, 0, pa, 7, 0));
        float *reused = step(r, b + PREFIX, NB - PREFIX, PREFIX, pb, 6, NB - PREFIX);
        float *full = step(r, b, NB, 0, fresh, 6, NB - PREFIX);
        double err = rows_rel_err(reused, full, NB - PREFIX, V);
        if (err > REL_TOL) printf("\n  prefix reuse variant %d: rel err %g\n", variant, err);
        CU_ASSERT(err <= REL_TOL);
        /* And A's pages were only read: A's own last logits are unchanged. */
        float *a1 = step(r, a + NA - 1, 1, NA - 1, pa, 7, 1);
        float *a2 = step(r, a, NA, 0, (uint32_t[]){10, 11, 12, 13, 15, 16, 17}, 7, 1);
        CU_ASSERT(rows_rel_err(a1, a2, 1, V) <= REL_TOL);
        free(a1);
        free(a2);
        free(reused);
        free(full);
        runner_free(r);
        model_free(m);
    }
}

/* ---- mixed batch ------------------------------------------------------ */

/* Four requests in one step — a fresh prompt, the second chunk of a prompt,
 * two decodes — each get the logits they get when run alone. */
static void test_mixed_batch_equals_alone(void)
{
    enum { PS = 4, PAGES = 40 };
    model *m = tiny_model(1);
    uint32_t V = m->cfg.vocab_size;
    runner *alone = new_runner(m, PS, PAGES), *mixed = new_runner(m, PS, PAGES);

    int32_t fresh[12], chunked[26], dec1[21], dec2[6];
    random_tokens(fresh, 12, V);
    random_tokens(chunked, 26, V);
    random_tokens(dec1, 21, V);
    random_tokens(dec2, 6, V);
    uint32_t pf[3] = {0, 1, 2}, pc[7] = {3, 4, 5, 6, 7, 8, 9};
    uint32_t pd1[6] = {10, 11, 12, 13, 14, 15}, pd2[2] = {16, 17};

    /* History: the earlier chunk and the decodes' contexts, in both runners. */
    runner *both[2] = {alone, mixed};
    for (int i = 0; i < 2; i++) {
        free(step(both[i], chunked, 16, 0, pc, 7, 0));
        free(step(both[i], dec1, 20, 0, pd1, 6, 0));
        free(step(both[i], dec2, 5, 0, pd2, 2, 0));
    }
    float *want[4] = {
        step(alone, fresh, 12, 0, pf, 3, 12),
        step(alone, chunked + 16, 10, 16, pc, 7, 2),
        step(alone, dec1 + 20, 1, 20, pd1, 6, 1),
        step(alone, dec2 + 5, 1, 5, pd2, 2, 1),
    };
    runner_seq seqs[4] = {
        {dec1 + 20, 1, 20, pd1, 6, 1, NULL},
        {fresh, 12, 0, pf, 3, 12, NULL},
        {dec2 + 5, 1, 5, pd2, 2, 1, NULL},
        {chunked + 16, 10, 16, pc, 7, 2, NULL},
    };
    const int order[4] = {2, 0, 3, 1};   /* seqs[i] is want[order[i]] */
    const float *lg;
    rh_err e;
    CU_ASSERT_FATAL(runner_forward(mixed, seqs, 4, &lg, &e) == 0);
    size_t row = 0;
    for (int i = 0; i < 4; i++) {
        double err = rows_rel_err(lg + row * V, want[order[i]], seqs[i].n_logits, V);
        if (err > REL_TOL) printf("\n  mixed batch seq %d: rel err %g\n", i, err);
        CU_ASSERT(err <= REL_TOL);
        row += seqs[i].n_logits;
    }
    for (int i = 0; i < 4; i++) free(want[i]);
    runner_free(alone);
    runner_free(mixed);
    model_free(m);
}

/* ---- generation ------------------------------------------------------- */

static void test_greedy_deterministic_and_varied(void)
{
    enum { NP = 20, NOUT = 64 };
    model *m = tiny_model(0);
    int32_t prompt[NP], a[NOUT], b[NOUT], c[NOUT];
    random_tokens(prompt, NP, m->cfg.vocab_size);
    gen_params p = {{0, 1, 0}, 0, 0, NOUT, -1, NULL};
    rh_err e;
    runner *r1 = new_runner(m, 16, 8), *r2 = new_runner(m, 16, 8);
    CU_ASSERT_EQUAL(gen_run(r1, prompt, NP, &p, a, &e), NOUT);
    p.chunk = 7;   /* another prefill schedule, another runner: the same tokens */
    CU_ASSERT_EQUAL(gen_run(r2, prompt, NP, &p, b, &e), NOUT);
    CU_ASSERT(memcmp(a, b, sizeof a) == 0);
    /* Dummy weights must not collapse into repeating one token. */
    int distinct = 0;
    for (int i = 0; i < NOUT; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= a[j] == a[i];
        distinct += !seen;
    }
    CU_ASSERT(distinct >= 16);

    /* Seeded sampling: the same seed replays, another seed differs. */
    gen_params s = {{0.9f, 0.95f, 50}, 1234, 0, NOUT, -1, NULL};
    CU_ASSERT_EQUAL(gen_run(r1, prompt, NP, &s, a, &e), NOUT);
    CU_ASSERT_EQUAL(gen_run(r2, prompt, NP, &s, b, &e), NOUT);
    CU_ASSERT(memcmp(a, b, sizeof a) == 0);
    s.seed = 1235;
    CU_ASSERT_EQUAL(gen_run(r1, prompt, NP, &s, c, &e), NOUT);
    CU_ASSERT(memcmp(a, c, sizeof a) != 0);
    runner_free(r1);
    runner_free(r2);
    model_free(m);
}

/* Dummy weights keep activations finite and O(1) even 96 layers deep. */
static void test_deep_model_stays_finite(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    c.n_layers = 96;
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    model *m = model_new_dummy(&c, 3, 0, &e);
    CU_ASSERT_FATAL(m != NULL);
    runner *r = new_runner(m, 16, 4);
    int32_t tok[40];
    random_tokens(tok, 40, c.vocab_size);
    uint32_t pages[4] = {0, 1, 2, 3};
    float *lg = step(r, tok, 40, 0, pages, 4, 40);
    double ss = 0;
    int finite = 1;
    for (size_t i = 0; i < (size_t)40 * c.vocab_size; i++) {
        finite &= isfinite(lg[i]);
        ss += (double)lg[i] * lg[i];
    }
    double rms = sqrt(ss / (40.0 * c.vocab_size));
    CU_ASSERT(finite);
    CU_ASSERT(rms > 0.1 && rms < 10);
    free(lg);
    runner_free(r);
    model_free(m);
}

/* ---- bad input -------------------------------------------------------- */

static void expect_error(runner *r, runner_seq s, const char *needle)
{
    const float *lg = (const float *)&s;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL(runner_forward(r, &s, 1, &lg, &e), -1);
    CU_ASSERT_PTR_NULL(lg);
    if (!strstr(e.msg, needle)) printf("\n  expected '%s' in: %s\n", needle, e.msg);
    CU_ASSERT(strstr(e.msg, needle) != NULL);
}

static void test_bad_input_is_an_error(void)
{
    model *m = tiny_model(0);
    runner *r = new_runner(m, 16, 4);
    uint32_t pages[4] = {0, 1, 2, 3}, bad_pages[4] = {0, 4, 1, 2};
    int32_t ok[3] = {1, 2, 3}, big[3] = {1, 512, 3}, neg[3] = {1, -1, 3};
    expect_error(r, (runner_seq){big, 3, 0, pages, 4, 1, NULL}, "id 512 is outside the vocabulary");
    expect_error(r, (runner_seq){neg, 3, 0, pages, 4, 1, NULL}, "id -1 is outside the vocabulary");
    expect_error(r, (runner_seq){ok, 3, 2046, pages, 4, 1, NULL}, "context length 2048");
    expect_error(r, (runner_seq){ok, 3, UINT32_MAX - 1, pages, 4, 1, NULL}, "context length");
    expect_error(r, (runner_seq){ok, 3, 20, bad_pages, 4, 1, NULL}, "page 4 is outside the pool");
    expect_error(r, (runner_seq){ok, 3, 30, pages, 2, 1, NULL}, "page table has 2 pages");
    expect_error(r, (runner_seq){ok, 3, 0, NULL, 0, 1, NULL}, "page table");
    expect_error(r, (runner_seq){ok, 3, 0, pages, 4, 4, NULL}, "asks for 4 logits");
    expect_error(r, (runner_seq){ok, 0, 0, pages, 4, 0, NULL}, "no new tokens");
    expect_error(r, (runner_seq){NULL, 3, 0, pages, 4, 0, NULL}, "token ids are missing");
    /* A batch with one bad sequence fails whole, naming that sequence. */
    runner_seq two[2] = {{ok, 3, 0, pages, 4, 1, NULL}, {big, 3, 0, pages, 4, 1, NULL}};
    const float *lg;
    rh_err e;
    CU_ASSERT_EQUAL(runner_forward(r, two, 2, &lg, &e), -1);
    CU_ASSERT(strstr(e.msg, "sequence 1") != NULL);
    runner_free(r);
    model_free(m);
}

static void test_model_larger_than_memory(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("llama-3-70b", &c, &e) == 0);
    CU_ASSERT_PTR_NULL(model_new_dummy(&c, 0, 0, &e));
    CU_ASSERT(strstr(e.msg, "llama-3-70b") && strstr(e.msg, "282.2 GB"));
    /* Under an explicit limit, even tiny-llama's 13 MB is too much. */
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    CU_ASSERT_PTR_NULL(model_new_dummy(&c, 0, 1000000, &e));
    CU_ASSERT(strstr(e.msg, "1.0 MB of memory is allowed") != NULL);
    /* And a KV pool past the limit is refused before it is allocated. */
    model *m = model_new_dummy(&c, 0, 0, &e);
    CU_ASSERT_FATAL(m != NULL);
    runner_config rc = {16, 1u << 30, 1u << 30, NULL};
    CU_ASSERT_PTR_NULL(runner_new(m, &rc, &e));
    CU_ASSERT(strstr(e.msg, "KV pool") != NULL);
    model_free(m);
}

void register_test_model(void)
{
    CU_pSuite s = CU_add_suite("model", NULL, NULL);
    CU_add_test(s, "chunked prefill equals one-shot prefill", test_chunked_prefill_equals_one_shot);
    CU_add_test(s, "page tables are only addressing", test_page_table_is_only_addressing);
    CU_add_test(s, "a reused prefix equals recomputing it", test_prefix_reuse_equals_recompute);
    CU_add_test(s, "a mixed batch equals each request alone", test_mixed_batch_equals_alone);
    CU_add_test(s, "greedy decoding is deterministic and varied; seeds replay", test_greedy_deterministic_and_varied);
    CU_add_test(s, "a 96-layer dummy model stays finite", test_deep_model_stays_finite);
    CU_add_test(s, "bad ids, positions and pages are errors", test_bad_input_is_an_error);
    CU_add_test(s, "a model larger than memory fails before allocating", test_model_larger_than_memory);
}
