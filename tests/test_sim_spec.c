/* test_sim_spec.c — speculative decoding priced as it runs: a chain
 * verifies steps + 1 tokens as SGLang sets it (so steps 2 and 3 differ),
 * a model's drafts stop at its depth, an EAGLE tree's accepted length
 * against its closed form, and the speed-up of speculation on the dense and
 * the MoE presets: at least 1.5 at concurrency 1, below 1 at high
 * concurrency under SGLang's defaults (48 running requests when it
 * speculates). */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

static int init(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

static void fixed_trace(tr_trace *t, uint32_t n, uint32_t in, uint32_t out)
{
    tr_trace_init(t);
    rh_err e;
    for (uint32_t i = 0; i < n; i++) {
        tr_request r = {.id = i, .arrival = 0, .input_len = in, .output_len = out};
        CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(t, &r, &e), 0);
    }
}

static cost_model *model(const char *text)
{
    rh_err e = {{0}};
    cost_model *m = cost_parse(text, "spec.json", &e);
    if (!m) printf("\n  %s\n", e.msg);
    return m;
}

static void set(sim_config *c, const char *k, const char *v)
{
    rh_err e = {{0}};
    if (sim_config_set(c, k, v, &e) != 1) printf("\n  %s=%s: %s\n", k, v, e.msg);
}

static double run(const sim_config *c, const tr_trace *t, const cost_model *m, metrics_summary *out)
{
    sim_result r;
    rh_err e = {{0}};
    if (sim_run(c, t, m, &r, &e) < 0) {
        printf("\n  sim_run: %s\n", e.msg);
        CU_FAIL("sim_run");
        return NAN;
    }
    if (out) *out = r.summary;
    double tput = r.summary.output_throughput;
    sim_result_free(&r);
    return tput;
}

static const char *LIN = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5, "
                         "\"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}";

/* With certain acceptance a chain of steps drafts commits steps + 1 tokens
 * a verify, whatever --speculative-num-draft-tokens says. */
static void test_steps_make_the_chain(void)
{
    tr_trace t;
    fixed_trace(&t, 8, 100, 97);
    cost_model *m = model(LIN);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    for (uint32_t steps = 2; steps <= 3; steps++) {
        sim_config c;
        sim_config_default(&c);
        set(&c, "speculative-algorithm", "EAGLE");
        char v[8];
        snprintf(v, sizeof v, "%u", steps);
        set(&c, "speculative-num-steps", v);
        set(&c, "speculative-num-draft-tokens", "4");
        set(&c, "speculative-accept-rate", "1");
        sim_result r;
        rh_err e;
        CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &r, &e), 0);
        /* 96 tokens after the first: 96 / (steps + 1) verifies */
        CU_ASSERT_DOUBLE_EQUAL(r.summary.mean_accepted_len, steps + 1, 1e-9);
        CU_ASSERT((steps == 2) == (r.spec_note[0] != 0));
        /* and it is priced as the chain it is: the same run as with steps + 1 */
        snprintf(v, sizeof v, "%u", steps + 1);
        set(&c, "speculative-num-draft-tokens", v);
        sim_result same;
        CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &same, &e), 0);
        CU_ASSERT_DOUBLE_EQUAL(same.summary.duration, r.summary.duration, 0);
        CU_ASSERT_EQUAL(same.spec_note[0], 0);
        sim_result_free(&same);
        sim_result_free(&r);
    }
    cost_free(m);
    tr_trace_free(&t);
}

/* An accepted-length histogram reaching past a tree's depth stops at it;
 * n-gram proposals have no depth. */
static void test_depth_bounds_the_histogram(void)
{
    tr_trace t, u;
    fixed_trace(&t, 8, 100, 1 + 3 * 67);    /* whole verifies of 3 tokens after the first */
    fixed_trace(&u, 8, 100, 1 + 6 * 33);    /* ... of 6 */
    cost_model *m = model(LIN);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    sim_config c;
    sim_config_default(&c);
    set(&c, "speculative-algorithm", "EAGLE");            /* a tree of 4 nodes, 2 deep */
    set(&c, "speculative-num-steps", "2");
    set(&c, "speculative-eagle-topk", "2");
    set(&c, "speculative-num-draft-tokens", "5");
    set(&c, "speculative-accept-hist", "0,0,0,0,0,1");   /* always 5 accepted */
    metrics_summary s;
    run(&c, &t, m, &s);
    CU_ASSERT_DOUBLE_EQUAL(s.mean_accepted_len, 3, 1e-9);
    sim_config_default(&c);
    set(&c, "speculative-algorithm", "NGRAM");
    set(&c, "speculative-num-steps", "5");
    set(&c, "speculative-accept-hist", "0,0,0,0,0,1");
    run(&c, &u, m, &s);
    CU_ASSERT_DOUBLE_EQUAL(s.mean_accepted_len, 6, 1e-9);
    cost_free(m);
    tr_trace_free(&t);
    tr_trace_free(&u);
}

/* A tree 3 deep and 4 wide holding 7 nodes: 4 at depth 1, 3 at depth 2.
 * Accepted length 1 + p1 + p1·p2, p1 = 1 − 0.4⁴, p2 = 1 − 0.4^(3/4); a
 * chain of 3 at the same rate: 1 + 0.6 + 0.36 + 0.216. */
static void test_tree_closed_form(void)
{
    tr_trace t;
    fixed_trace(&t, 64, 100, 400);
    cost_model *m = model(LIN);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    sim_config c;
    sim_config_default(&c);
    set(&c, "speculative-algorithm", "EAGLE");
    set(&c, "speculative-num-steps", "3");
    set(&c, "speculative-accept-rate", "0.6");
    metrics_summary chain, tree;
    run(&c, &t, m, &chain);
    set(&c, "speculative-eagle-topk", "4");
    set(&c, "speculative-num-draft-tokens", "8");
    run(&c, &t, m, &tree);
    double p1 = 1 - pow(0.4, 4), p2 = 1 - pow(0.4, 0.75);
    printf("\n  chain %.3f (closed form 2.176), tree %.3f (closed form %.3f)", chain.mean_accepted_len,
           tree.mean_accepted_len, 1 + p1 + p1 * p2);
    CU_ASSERT(fabs(chain.mean_accepted_len / 2.176 - 1) < 0.02);
    CU_ASSERT(fabs(tree.mean_accepted_len / (1 + p1 + p1 * p2) - 1) < 0.02);
    /* a tree needs its node count, and no more nodes than it can hold */
    sim_config_default(&c);
    set(&c, "speculative-algorithm", "EAGLE");
    set(&c, "speculative-num-steps", "2");
    set(&c, "speculative-eagle-topk", "2");
    sim_result r;
    rh_err e;
    CU_ASSERT_EQUAL(sim_run(&c, &t, m, &r, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "needs --speculative-num-draft-tokens"));
    set(&c, "speculative-num-draft-tokens", "6");
    CU_ASSERT_EQUAL(sim_run(&c, &t, m, &r, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "holds at most 4 drafts"));
    cost_free(m);
    tr_trace_free(&t);
}

/* Output throughput with EAGLE (3 steps, acceptance 0.68: DeepSeek's MTP
 * accepts 2.44 a verify, SGLang's MTP post) over without, closed loop at
 * concurrency c, 256 tokens in and 512 out. */
static double speedup(const cost_model *m, uint32_t c, const char *max_running, double *spec_tput)
{
    tr_trace t;
    fixed_trace(&t, c * 2 < 8 ? 8 : c * 2, 256, 512);
    sim_config base;
    sim_config_default(&base);
    char v[16];
    snprintf(v, sizeof v, "%u", c);
    set(&base, "max-concurrency", v);
    if (max_running) set(&base, "max-running-requests", max_running);
    sim_config spec = base;
    set(&spec, "speculative-algorithm", "EAGLE");
    set(&spec, "speculative-num-steps", "3");
    set(&spec, "speculative-accept-rate", "0.68");
    double a = run(&base, &t, m, NULL), b = run(&spec, &t, m, NULL);
    tr_trace_free(&t);
    if (spec_tput) *spec_tput = b;
    return b / a;
}

static void test_speedup_falls_with_concurrency(void)
{
    static const char *const models[][2] = {
        {"llama-3-70b on 8 H100", "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-70b\", "
                                  "\"gpu\": \"h100-sxm\", \"tp\": 8}"},
        {"deepseek-r1 on 8 H200", "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-r1\", "
                                  "\"gpu\": \"h200\", \"tp\": 8, \"dtype\": \"fp8\"}"},
    };
    static const uint32_t conc[] = {1, 16, 64, 128, 256};
    for (int i = 0; i < 2; i++) {
        cost_model *m = model(models[i][1]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        printf("\n  %s, speed-up at concurrency", models[i][0]);
        double s[5];
        for (int k = 0; k < 5; k++) {
            s[k] = speedup(m, conc[k], NULL, NULL);
            printf(" %u: %.2f", conc[k], s[k]);
        }
        CU_ASSERT(s[0] >= 1.5);
        CU_ASSERT(s[4] < 1);
        /* the physics alone, every request running: still falling */
        double wide = speedup(m, 256, "256", NULL);
        printf("; with --max-running-requests 256 at 256: %.2f", wide);
        CU_ASSERT(wide < s[0]);
        cost_free(m);
    }
    printf("\n  ");
}

/* vLLM's --speculative-config sets what our flags set: the two configs
 * compared whole, for a head that drafts by forward passes and for ngram. */
static void test_vllm_speculative_config_in_sim(void)
{
    static const char *const cases[][3] = {
        {"{\"method\": \"eagle\", \"model\": \"h\", \"num_speculative_tokens\": 3}", "EAGLE", "3"},
        {"{\"method\": \"ngram\", \"num_speculative_tokens\": 5, \"prompt_lookup_max\": 4}", "NGRAM", "5"},
        {"{\"model\": \"small\", \"num_speculative_tokens\": 2}", "STANDALONE", "2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sim_config a, b;
        sim_config_default(&a);
        sim_config_default(&b);
        rh_err e;
        CU_ASSERT_EQUAL(sim_config_set(&a, "speculative-config", cases[i][0], &e), 1);
        CU_ASSERT_EQUAL(sim_config_set(&b, "speculative-algorithm", cases[i][1], &e), 1);
        CU_ASSERT_EQUAL(sim_config_set(&b, "speculative-num-steps", cases[i][2], &e), 1);
        CU_ASSERT_EQUAL(memcmp(&a, &b, sizeof a), 0);
    }
    sim_config c;
    sim_config_default(&c);
    rh_err e;
    CU_ASSERT_EQUAL(sim_config_set(&c, "speculative-config", "{\"method\": \"medusa\"}", &e), -1);
    CU_ASSERT(strstr(e.msg, "--speculative-config") != NULL);
    CU_ASSERT_EQUAL(sim_config_takes_value("speculative-config"), 1);
}

void register_test_sim_spec(void)
{
    CU_pSuite s = CU_add_suite("sim_spec", init, NULL);
    CU_add_test(s, "a chain verifies steps + 1 tokens, as SGLang sets it", test_steps_make_the_chain);
    CU_add_test(s, "a model's drafts stop at its depth", test_depth_bounds_the_histogram);
    CU_add_test(s, "an EAGLE tree's accepted length, closed form", test_tree_closed_form);
    CU_add_test(s, "speed-up >= 1.5 at concurrency 1, below 1 at high concurrency", test_speedup_falls_with_concurrency);
    CU_add_test(s, "vLLM's --speculative-config sets what our flags set", test_vllm_speculative_config_in_sim);
}
