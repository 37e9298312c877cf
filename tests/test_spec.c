/* test_spec.c — speculative decoding's pure parts against second
 * computations: the rejection sampler's output distribution against the
 * target distribution (chi-square on a small vocabulary, fixed seed), with
 * the unverified drafts as a control the same test must reject;
 * spec_probs against the kernels' own sampler's frequencies; n-gram lookup
 * against hand-worked sequences; the histogram text and the knobs. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/speculative/hist.h"
#include "engine/speculative/spec.h"
#include "engine/speculative/verify.h"
#include "engine/speculative/vllm_config.h"

#define V 6

/* Pearson's statistic of counts against probabilities over the bins with
 * mass; a count in a bin without mass makes it infinite. */
static double chi_square(const uint64_t *count, const double *p, uint32_t n, uint64_t total, uint32_t *df)
{
    double x2 = 0;
    uint32_t bins = 0;
    *df = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (p[i] <= 0) {
            if (count[i]) return INFINITY;
            continue;
        }
        double want = p[i] * (double)total;
        x2 += ((double)count[i] - want) * ((double)count[i] - want) / want;
        bins++;
    }
    *df = bins ? bins - 1 : 0;
    return x2;
}

/* Upper 0.1% points of chi-square for 1..7 degrees of freedom. */
static double chi_critical(uint32_t df)
{
    static const double c[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};
    return df < sizeof c / sizeof c[0] ? c[df] : 1e300;
}

static void to_double(const float *f, double *d, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) d[i] = f[i];
}

/* One verify position: drafts drawn from q, verified against p. The
 * committed token must be distributed as p, while the drafts themselves
 * (distributed as q) must fail the same test. */
static void test_rejection_sampler_reproduces_target(void)
{
    /* Row 0 is verified; row 1 only feeds the bonus token. */
    const float p[2 * V] = {0.30f, 0.25f, 0.20f, 0.15f, 0.10f, 0.0f, 1, 1, 1, 1, 1, 1};
    const float q[V] = {0.05f, 0.10f, 0.15f, 0.20f, 0.25f, 0.25f};
    enum { N = 200000 };
    uint64_t rng = kern_rng_init(12345), got[V] = {0}, drafted[V] = {0}, accepted = 0;
    for (int t = 0; t < N; t++) {
        int32_t x = spec_draw(q, V, &rng), out[2];
        accepted += spec_verify(p, q, &x, 1, V, &rng, out);
        got[out[0]]++;
        drafted[x]++;
    }
    double pd[V];
    to_double(p, pd, V);
    uint32_t df;
    double x2 = chi_square(got, pd, V, N, &df);
    printf("\n    committed: chi2 %.2f (df %u, 0.1%% point %.2f)", x2, df, chi_critical(df));
    CU_ASSERT(x2 < chi_critical(df));
    CU_ASSERT_EQUAL(got[5], 0);                       /* p gives id 5 nothing */
    /* Control: accepting every draft commits q. Over the ids p allows, the
     * same statistic rejects it by far. */
    double control = chi_square(drafted, pd, V - 1, N - drafted[V - 1], &df);
    printf(", drafts themselves: chi2 %.0f", control);
    CU_ASSERT(control > 100 * chi_critical(df));
    /* Acceptance rate is sum min(p, q) = 0.05+0.10+0.15+0.15+0.10 = 0.55. */
    CU_ASSERT_DOUBLE_EQUAL((double)accepted / N, 0.55, 0.01);
}

/* k = 3 drafts against 4 different target rows: the first committed token
 * follows row 0; given one draft stood, the second follows row 1; given
 * three stood, the bonus token follows row 3. */
static void test_rejection_sampler_over_several_positions(void)
{
    float p[4][V] = {{0.30f, 0.25f, 0.20f, 0.15f, 0.10f, 0.0f},
                     {0.05f, 0.05f, 0.10f, 0.20f, 0.30f, 0.30f},
                     {0.50f, 0.10f, 0.10f, 0.10f, 0.10f, 0.10f},
                     {0.10f, 0.10f, 0.10f, 0.10f, 0.20f, 0.40f}};
    float q[3][V] = {{0.20f, 0.20f, 0.20f, 0.20f, 0.10f, 0.10f},
                     {0.10f, 0.10f, 0.20f, 0.20f, 0.20f, 0.20f},
                     {0.40f, 0.20f, 0.10f, 0.10f, 0.10f, 0.10f}};
    enum { N = 200000 };
    uint64_t rng = kern_rng_init(99), first[V] = {0}, second[V] = {0}, bonus[V] = {0};
    uint64_t n_second = 0, n_bonus = 0;
    for (int t = 0; t < N; t++) {
        int32_t x[3], out[4];
        for (int j = 0; j < 3; j++) x[j] = spec_draw(q[j], V, &rng);
        uint32_t a = spec_verify(&p[0][0], &q[0][0], x, 3, V, &rng, out);
        first[out[0]]++;
        if (a >= 1) {
            second[out[1]]++;
            n_second++;
        }
        if (a == 3) {
            bonus[out[3]]++;
            n_bonus++;
        }
    }
    double pd[V];
    uint32_t df;
    to_double(p[0], pd, V);
    double x0 = chi_square(first, pd, V, N, &df);
    CU_ASSERT(x0 < chi_critical(df));
    to_double(p[1], pd, V);
    double x1 = chi_square(second, pd, V, n_second, &df);
    CU_ASSERT(x1 < chi_critical(df));
    to_double(p[3], pd, V);
    double x3 = chi_square(bonus, pd, V, n_bonus, &df);
    CU_ASSERT(x3 < chi_critical(df));
    printf("\n    first %.2f, second %.2f (n %llu), bonus %.2f (n %llu)", x0, x1, (unsigned long long)n_second, x3,
           (unsigned long long)n_bonus);
    CU_ASSERT(n_bonus > 1000);
}

/* Certain drafts (q NULL, as n-gram lookup hands them over): a drafter that
 * always proposes id 1 still yields the target's distribution. */
static void test_rejection_sampler_point_mass(void)
{
    const float p[2 * V] = {0.30f, 0.25f, 0.20f, 0.15f, 0.10f, 0.0f, 1, 1, 1, 1, 1, 1};
    enum { N = 200000 };
    uint64_t rng = kern_rng_init(7), got[V] = {0}, accepted = 0;
    for (int t = 0; t < N; t++) {
        int32_t x = 1, out[2];
        accepted += spec_verify(p, NULL, &x, 1, V, &rng, out);
        got[out[0]]++;
    }
    double pd[V];
    to_double(p, pd, V);
    uint32_t df;
    double x2 = chi_square(got, pd, V, N, &df);
    CU_ASSERT(x2 < chi_critical(df));
    CU_ASSERT_DOUBLE_EQUAL((double)accepted / N, 0.25, 0.01);   /* accepted with probability p(1) */
    /* Greedy targets (a point mass on the argmax) accept exactly the argmax. */
    float g[2 * V] = {0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0};
    int32_t good = 2, bad = 4, out[2];
    CU_ASSERT_EQUAL(spec_verify(g, NULL, &good, 1, V, &rng, out), 1);
    CU_ASSERT_EQUAL(out[0], 2);
    CU_ASSERT_EQUAL(out[1], 3);
    CU_ASSERT_EQUAL(spec_verify(g, NULL, &bad, 1, V, &rng, out), 0);
    CU_ASSERT_EQUAL(out[0], 2);
}

/* spec_probs is the distribution the kernels' sampler draws from: its
 * frequencies over many draws match, under temperature, top-k and top-p,
 * and ids it gives no mass are never drawn. */
static void test_probs_match_the_sampler(void)
{
    enum { NV = 8, N = 100000 };
    const float logits[NV] = {1.0f, 2.5f, 0.2f, 2.5f, -1.0f, 1.7f, 0.9f, 3.0f};
    const kern_sampling cases[] = {{0.7f, 1.0f, 0}, {1.3f, 1.0f, 5}, {0.9f, 0.8f, 0}, {1.0f, 0.9f, 6}};
    const kern_table *K = kern_cpu();
    kern_cand scratch[NV];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float pf[NV];
        spec_probs(logits, NV, &cases[c], pf, scratch);
        double pd[NV], sum = 0;
        to_double(pf, pd, NV);
        for (int i = 0; i < NV; i++) sum += pd[i];
        CU_ASSERT_DOUBLE_EQUAL(sum, 1.0, 1e-5);
        uint64_t rng = kern_rng_init(1000 + c), got[NV] = {0};
        for (int t = 0; t < N; t++) got[K->sample(logits, NV, &cases[c], &rng, scratch)]++;
        uint32_t df;
        double x2 = chi_square(got, pd, NV, N, &df);
        if (!(x2 < chi_critical(df))) printf("\n    case %zu: chi2 %g (df %u)", c, x2, df);
        CU_ASSERT(x2 < chi_critical(df));
    }
    /* top_k 5 keeps ids 7, 1, 3, 5, 0 (1 and 3 tie; both kept). */
    float pf[NV];
    spec_probs(logits, NV, &cases[1], pf, scratch);
    CU_ASSERT(pf[2] == 0 && pf[4] == 0 && pf[6] == 0);
    CU_ASSERT(pf[0] > 0 && pf[1] > 0 && pf[3] > 0 && pf[5] > 0 && pf[7] > 0);
    /* Greedy: all mass on the argmax; ties go to the lowest id. */
    const float tie[4] = {0.5f, 2.0f, 2.0f, 1.0f};
    kern_sampling greedy = {0, 1, 0};
    float g[4];
    spec_probs(tie, 4, &greedy, g, scratch);
    CU_ASSERT(g[1] == 1.0f && g[0] == 0 && g[2] == 0 && g[3] == 0);
    CU_ASSERT(spec_is_greedy(&greedy));
    CU_ASSERT(spec_is_greedy(&(kern_sampling){1.0f, 1.0f, 1}));
    CU_ASSERT(!spec_is_greedy(&cases[0]));
}

static void test_ngram_lookup(void)
{
    int32_t out[8];
    /* "5 6 7 8 9 | ... 5 6 7" -> the 3-gram 5 6 7 matched, 8 9 follow. */
    const int32_t a[] = {5, 6, 7, 8, 9, 1, 2, 5, 6, 7};
    CU_ASSERT_EQUAL(spec_ngram_lookup(a, 10, 1, 12, 2, out), 2);
    CU_ASSERT(out[0] == 8 && out[1] == 9);
    /* The longest match wins over a more recent shorter one: "7" alone
     * occurs most recently at index 5 (then 3), but "6 7" at 0..1 (then 4). */
    const int32_t b[] = {6, 7, 4, 4, 1, 7, 3, 6, 7};
    CU_ASSERT_EQUAL(spec_ngram_lookup(b, 9, 1, 12, 1, out), 1);
    CU_ASSERT_EQUAL(out[0], 4);
    /* Among equally long matches, the most recent. */
    const int32_t c[] = {1, 2, 1, 3, 1};
    CU_ASSERT_EQUAL(spec_ngram_lookup(c, 5, 1, 12, 1, out), 1);
    CU_ASSERT_EQUAL(out[0], 3);
    /* A match near the end continues periodically: "4 5 4 5" proposes 4 5 4 5 4. */
    const int32_t d[] = {4, 5, 4, 5};
    CU_ASSERT_EQUAL(spec_ngram_lookup(d, 4, 1, 12, 5, out), 5);
    CU_ASSERT(out[0] == 4 && out[1] == 5 && out[2] == 4 && out[3] == 5 && out[4] == 4);
    /* No earlier occurrence of the last token: nothing; the min window is honoured. */
    const int32_t f[] = {1, 2, 3, 4};
    CU_ASSERT_EQUAL(spec_ngram_lookup(f, 4, 1, 12, 3, out), 0);
    CU_ASSERT_EQUAL(spec_ngram_lookup(c, 5, 2, 12, 1, out), 0);   /* only 1-grams match there */
    CU_ASSERT_EQUAL(spec_ngram_lookup(a, 10, 3, 3, 1, out), 1);
    CU_ASSERT_EQUAL(spec_ngram_lookup(a, 1, 1, 12, 3, out), 0);
    CU_ASSERT_EQUAL(spec_ngram_lookup(a, 10, 1, 12, 0, out), 0);
}

static void put(void *ctx, const char *name, const char *value)
{
    spec_config *c = ctx;
    rh_err e;
    CU_ASSERT_EQUAL(spec_config_set(c, name, value, &e), 1);
}

static void test_hist_text_and_knobs(void)
{
    uint64_t h[4] = {10, 0, 3, 12345678901ull};
    char buf[64], tiny[8];
    CU_ASSERT_EQUAL(spec_hist_format(h, 4, buf, sizeof buf), 0);
    CU_ASSERT_STRING_EQUAL(buf, "10,0,3,12345678901");
    CU_ASSERT_EQUAL(spec_hist_format(h, 4, tiny, sizeof tiny), -1);

    spec_config c, back;
    rh_err e;
    spec_config_default(&c);
    CU_ASSERT_EQUAL(spec_config_set(&c, "speculative-algorithm", "ngram", &e), 1);
    CU_ASSERT_EQUAL(c.algorithm, SPEC_NGRAM);
    CU_ASSERT_EQUAL(spec_config_set(&c, "speculative_ngram_max_match_window_size", "5", &e), 1);
    CU_ASSERT_EQUAL(c.ngram_max, 5);
    CU_ASSERT_EQUAL(spec_config_set(&c, "speculative-algorithm", "eagle9", &e), -1);
    CU_ASSERT(strstr(e.msg, "NGRAM or DRAFT") != NULL);
    CU_ASSERT_EQUAL(spec_config_set(&c, "speculative-draft-layers", "0", &e), -1);
    CU_ASSERT_EQUAL(spec_config_set(&c, "chunked-prefill-size", "5", &e), 0);
    CU_ASSERT(spec_config_is_knob("speculative-draft-model-path"));
    CU_ASSERT(!spec_config_is_knob("speculative-num-steps"));   /* a core knob */
    CU_ASSERT_EQUAL(spec_config_set(&c, "speculative-ngram-min-match-window-size", "6", &e), 1);
    CU_ASSERT_EQUAL(spec_config_validate(&c, &e), -1);           /* min above max */
    c.ngram_min = 2;
    CU_ASSERT_EQUAL(spec_config_validate(&c, &e), 0);
    c.draft_layers = 2;                                          /* a DRAFT knob under NGRAM */
    CU_ASSERT_EQUAL(spec_config_validate(&c, &e), -1);
    c.draft_layers = 0;
    /* foreach round-trips through set. */
    spec_config_default(&back);
    spec_config_foreach(&c, put, &back);
    CU_ASSERT_EQUAL(back.algorithm, SPEC_NGRAM);
    CU_ASSERT_EQUAL(back.ngram_min, 2);
    CU_ASSERT_EQUAL(back.ngram_max, 5);
    spec_config_default(&c);
    CU_ASSERT_EQUAL(spec_config_set(&c, "speculative-algorithm", "DRAFT", &e), 1);
    CU_ASSERT_EQUAL(spec_config_set(&c, "speculative-draft-layers", "3", &e), 1);
    CU_ASSERT_EQUAL(spec_config_set(&c, "speculative-draft-seed", "17", &e), 1);
    spec_config_default(&back);
    spec_config_foreach(&c, put, &back);
    CU_ASSERT(back.algorithm == SPEC_DRAFT && back.draft_layers == 3 && back.draft_seed == 17);
}

/* vLLM's --speculative-config read as our knobs: each method against the
 * flags that say the same (the configs compared whole), and each way the
 * JSON can be wrong named in the message. */
static void test_vllm_speculative_config(void)
{
    rh_err e;
    spec_vllm v;
    spec_config a, b;
    core_config ca, cb;
    /* ngram with its window */
    CU_ASSERT_EQUAL_FATAL(spec_vllm_parse("{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                                          "\"prompt_lookup_min\": 2, \"prompt_lookup_max\": 5}", &v, &e), 0);
    spec_config_default(&a), spec_config_default(&b);
    core_config_default(&ca), core_config_default(&cb);
    CU_ASSERT_EQUAL(spec_vllm_apply(&v, &a, &ca, &e), 0);
    CU_ASSERT_EQUAL(spec_config_set(&b, "speculative-algorithm", "NGRAM", &e), 1);
    CU_ASSERT_EQUAL(spec_config_set(&b, "speculative-ngram-min-match-window-size", "2", &e), 1);
    CU_ASSERT_EQUAL(spec_config_set(&b, "speculative-ngram-max-match-window-size", "5", &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&cb, "speculative-num-steps", "4", &e), 1);
    CU_ASSERT_EQUAL(memcmp(&a, &b, sizeof a), 0);
    CU_ASSERT_EQUAL(memcmp(&ca, &cb, sizeof ca), 0);
    CU_ASSERT(!v.drafts_by_model);
    /* a bare model is a draft model (vLLM's reading) */
    CU_ASSERT_EQUAL_FATAL(spec_vllm_parse("{\"model\": \"llama-100m\", \"num_speculative_tokens\": 3, "
                                          "\"draft_tensor_parallel_size\": 1}", &v, &e), 0);
    CU_ASSERT_STRING_EQUAL(v.method, "draft_model");
    spec_config_default(&a), spec_config_default(&b);
    core_config_default(&ca), core_config_default(&cb);
    CU_ASSERT_EQUAL(spec_vllm_apply(&v, &a, &ca, &e), 0);
    CU_ASSERT_EQUAL(spec_config_set(&b, "speculative-algorithm", "STANDALONE", &e), 1);
    CU_ASSERT_EQUAL(spec_config_set(&b, "speculative-draft-model-path", "llama-100m", &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&cb, "speculative-num-steps", "3", &e), 1);
    CU_ASSERT_EQUAL(a.algorithm, b.algorithm);
    CU_ASSERT_STRING_EQUAL(a.draft_model, b.draft_model);
    CU_ASSERT_EQUAL(memcmp(&ca, &cb, sizeof ca), 0);
    /* EAGLE parses (the simulator prices it); the engine refuses it by name */
    CU_ASSERT_EQUAL_FATAL(spec_vllm_parse("{\"method\": \"EAGLE3\", \"model\": \"x\", \"num_speculative_tokens\": 2}",
                                          &v, &e), 0);
    CU_ASSERT(v.drafts_by_model);
    CU_ASSERT_EQUAL(v.num_tokens, 2);
    CU_ASSERT_EQUAL(spec_vllm_apply(&v, &a, &ca, &e), -1);
    CU_ASSERT(strstr(e.msg, "eagle3") != NULL);
    static const char *const bad[][2] = {
        {"[1]", "not a JSON object"},
        {"{\"method\": \"ngram\"", "not a JSON object"},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 2, \"lookahead\": 1}", "\"lookahead\""},
        {"{\"method\": \"medusa\", \"num_speculative_tokens\": 2}", "medusa"},
        {"{\"method\": \"ngram\"}", "num_speculative_tokens"},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 0}", "num_speculative_tokens"},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": \"3\"}", "num_speculative_tokens"},
        {"{\"num_speculative_tokens\": 3}", "\"model\""},
        {"{\"method\": \"draft_model\", \"num_speculative_tokens\": 3}", "needs \"model\""},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"prompt_lookup_min\": 5, \"prompt_lookup_max\": 2}",
         "exceeds"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e.msg[0] = 0;
        CU_ASSERT_EQUAL(spec_vllm_parse(bad[i][0], &v, &e), -1);
        if (!strstr(e.msg, bad[i][1]) || !strstr(e.msg, "--speculative-config"))
            printf("\n  %s: got '%s', want '%s'\n", bad[i][0], e.msg, bad[i][1]);
        CU_ASSERT(strstr(e.msg, bad[i][1]) != NULL && strstr(e.msg, "--speculative-config") != NULL);
    }
}

void register_test_spec(void)
{
    CU_pSuite s = CU_add_suite("spec", NULL, NULL);
    CU_add_test(s, "rejection sampler reproduces the target (chi-square)", test_rejection_sampler_reproduces_target);
    CU_add_test(s, "rejection sampler over several positions", test_rejection_sampler_over_several_positions);
    CU_add_test(s, "rejection sampler with certain drafts", test_rejection_sampler_point_mass);
    CU_add_test(s, "target probabilities match the sampler", test_probs_match_the_sampler);
    CU_add_test(s, "n-gram lookup", test_ngram_lookup);
    CU_add_test(s, "histogram text and knobs", test_hist_text_and_knobs);
    CU_add_test(s, "vLLM's --speculative-config as our knobs", test_vllm_speculative_config);
}
