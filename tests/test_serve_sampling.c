/* test_serve_sampling.c — the request parameters that shape sampling, each
 * checked against a second computation of the same thing: logit rules by
 * hand on a row; logprob_top against a full sort; over real HTTP, greedy
 * logprobs are the top alternative, a prompt scored with echo equals the
 * logprobs its decode reported (one-shot and chunked prefill), a -100 bias
 * on the greedy token gives the runner-up, penalties choose what the raw
 * logprobs minus the penalty say, min_p = 1 equals greedy, min_tokens holds
 * EOS and stop strings back, n choices (choice 0 is the n = 1 answer),
 * streamed logprobs equal the whole response's, GET /v1/models/{id}, and a
 * priced forward refuses what it cannot honour. */
#include <math.h>

#include "engine/model/logits.h"
#include "test_serve_util.h"
#include "testutil.h"

static ts_shared shared;

static server *the_server(void)
{
    return ts_shared_server(&shared, NULL);
}

static const model *the_model(void)
{
    the_server();
    return shared.m;
}


/* ---- pure ---- */
static void test_rules_by_hand(void)
{
    float row[8] = {2, -1, 0.5f, 3, -2, 1, 0, 4};
    uint32_t counts[8] = {0};
    int32_t prompt[] = {0, 1}, out[] = {3, 3, 5}, stops[] = {7};
    int32_t bias_ids[] = {2};
    float bias[] = {1.5f};
    logit_rules r = {.bias_ids = bias_ids, .bias = bias, .n_bias = 1, .min_tokens = 4, .presence = 0.25f,
                     .frequency = 0.5f, .repetition = 2};
    logit_context x = {prompt, 2, out, 3, stops, 1, 1};
    logit_rules_apply(&r, &x, row, 8, counts);
    CU_ASSERT(isinf(row[7]) && row[7] < 0);                       /* 3 outputs < min_tokens 4: EOS masked */
    CU_ASSERT_DOUBLE_EQUAL(row[2], 2.0, 1e-6);                     /* bias */
    CU_ASSERT_DOUBLE_EQUAL(row[0], 1.0, 1e-6);                     /* repetition: positive divided */
    CU_ASSERT_DOUBLE_EQUAL(row[1], -2.0, 1e-6);                    /* negative multiplied */
    CU_ASSERT_DOUBLE_EQUAL(row[3], 3.0 / 2 - 2 * 0.5 - 0.25, 1e-6); /* repetition once, then count 2 */
    CU_ASSERT_DOUBLE_EQUAL(row[5], 1.0 / 2 - 0.5 - 0.25, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(row[4], -2.0, 1e-6);                    /* untouched */
    for (int i = 0; i < 8; i++) CU_ASSERT_EQUAL(counts[i], 0);     /* scratch left clean */
    /* Four outputs: EOS free again; min_p 0.5 at temperature 1 keeps ids
     * within log(2) of the best. */
    float row2[4] = {1, 0.5f, 0.2f, 1.1f};
    int32_t out4[] = {0, 0, 0, 0};
    logit_rules m = {.min_tokens = 4, .min_p = 0.5f, .repetition = 1};
    logit_context x2 = {NULL, 0, out4, 4, stops, 1, 1};
    int32_t stop3[] = {3};
    x2.stops = stop3;
    logit_rules_apply(&m, &x2, row2, 4, counts);
    CU_ASSERT(row2[0] == 1 && row2[1] == 0.5f && row2[3] == 1.1f);
    CU_ASSERT(isinf(row2[2]));
    CU_ASSERT(!logit_rules_active(&(logit_rules){.repetition = 1}));
    CU_ASSERT(!logit_rules_active(&(logit_rules){0}));
}

static void test_logprob_top_against_sort(void)
{
    enum { V = 300, K = 7 };
    float row[V];
    uint64_t rng = 11;
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < V; i++) row[i] = (float)(rh_splitmix_unit(&rng) * 10 - 5);
        row[17] = row[40];   /* a tie: the lower id first */
        logprob_entry top[K];
        float lp = logprob_top(row, V, 123, K, top);
        double sum = 0, best = -1e30;
        for (int i = 0; i < V; i++) best = fmax(best, row[i]);
        for (int i = 0; i < V; i++) sum += exp(row[i] - best);
        CU_ASSERT_DOUBLE_EQUAL(lp, row[123] - best - log(sum), 1e-4);
        /* the K best by (value desc, id asc), found by selection */
        bool used[V] = {false};
        for (int k = 0; k < K; k++) {
            int b = -1;
            for (int i = 0; i < V; i++)
                if (!used[i] && (b < 0 || row[i] > row[b])) b = i;
            used[b] = true;
            CU_ASSERT_EQUAL(top[k].id, b);
            CU_ASSERT_DOUBLE_EQUAL(top[k].logprob, row[b] - best - log(sum), 1e-4);
        }
    }
}

/* ---- over HTTP ---- */
static ts_resp post(const char *path, json_t *body)
{
    char *b = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    ts_resp r = ts_post(the_server(), path, b);
    if (r.status != 200) printf("\n    %s: HTTP %ld %s\n", b, r.status, r.body);
    free(b);
    CU_ASSERT_EQUAL(r.status, 200);
    return r;
}

static json_t *choice(const ts_resp *r, size_t i)
{
    return json_array_get(json_object_get(r->json, "choices"), i);
}

static int32_t id_at(json_t *ch, size_t i)
{
    return (int32_t)json_integer_value(json_array_get(json_object_get(ch, "token_ids"), i));
}

static json_t *ids_of(const int32_t *p, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(p[i]));
    return a;
}

/* "token_id:N" (return_tokens_as_token_ids) as N. */
static int32_t named_id(json_t *s)
{
    const char *t = json_string_value(s);
    return t && !strncmp(t, "token_id:", 9) ? (int32_t)atoi(t + 9) : -1;
}

static void test_models_by_id(void)
{
    ts_resp r = ts_request(the_server(), "GET", "/v1/models/tiny-llama", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r.json, "id")), "tiny-llama");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r.json, "object")), "model");
    ts_resp_free(&r);
    r = ts_request(the_server(), "GET", "/v1/models/llama-3-8b", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 404);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")),
                           "model_not_found");
    ts_resp_free(&r);
}

/* Greedy: every chosen token is its own top alternative; the prompt scored
 * with echo gives the logprobs the decode reported for the same tokens. */
static void check_echo_scores(server *s, const int32_t *prompt, uint32_t n, const int32_t *gen, const double *gen_lp,
                              uint32_t n_gen)
{
    int32_t all[128];
    memcpy(all, prompt, n * sizeof *all);
    memcpy(all + n, gen, n_gen * sizeof *all);
    json_t *b = json_pack("{s:o,s:i,s:i,s:i,s:b}", "prompt", ids_of(all, n + n_gen), "max_tokens", 1, "temperature", 0,
                          "logprobs", 1, "echo", 1);
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    ts_resp r = ts_post(s, "/v1/completions", body);
    free(body);
    CU_ASSERT_EQUAL_FATAL(r.status, 200);
    json_t *lp = json_object_get(json_object_get(choice(&r, 0), "logprobs"), "token_logprobs");
    CU_ASSERT_EQUAL_FATAL(json_array_size(lp), n + n_gen + 1);
    CU_ASSERT(json_is_null(json_array_get(lp, 0)));   /* nothing precedes the first id */
    for (uint32_t i = 0; i < n_gen; i++) {
        double got = json_number_value(json_array_get(lp, n + i));
        if (fabs(got - gen_lp[i]) > 2e-3) printf("\n    position %u: prompt score %g, decode %g\n", n + i, got, gen_lp[i]);
        CU_ASSERT_DOUBLE_EQUAL(got, gen_lp[i], 2e-3);
    }
    ts_resp_free(&r);
}

static void test_logprobs_and_echo(void)
{
    enum { N = 40, G = 6 };
    int32_t prompt[N];
    eh_random_prompt(5, 512, prompt, N);
    ts_resp r = post("/v1/completions",
                     json_pack("{s:o,s:i,s:i,s:i,s:b,s:b}", "prompt", ids_of(prompt, N), "max_tokens", G, "temperature", 0,
                               "logprobs", 3, "return_token_ids", 1, "ignore_eos", 1));
    json_t *ch = choice(&r, 0), *lp = json_object_get(ch, "logprobs");
    json_t *tl = json_object_get(lp, "token_logprobs"), *tops = json_object_get(lp, "top_logprobs");
    CU_ASSERT_EQUAL_FATAL(json_array_size(tl), G);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(lp, "text_offset")), G);
    int32_t gen[G];
    double gen_lp[G];
    for (int i = 0; i < G; i++) {
        gen[i] = id_at(ch, i);
        gen_lp[i] = json_number_value(json_array_get(tl, i));
        /* greedy: nothing in the top alternatives beats the chosen one */
        const char *k;
        json_t *v;
        double best = -1e30;
        json_object_foreach(json_array_get(tops, i), k, v) best = fmax(best, json_number_value(v));
        CU_ASSERT_DOUBLE_EQUAL(best, gen_lp[i], 1e-6);
        CU_ASSERT(gen_lp[i] < 0);
    }
    ts_resp_free(&r);
    check_echo_scores(the_server(), prompt, N, gen, gen_lp, G);
    /* The same scores when the prompt is prefilled in chunks of 16. */
    server_config c = ts_config(the_model());
    c.engine.core.chunked_prefill_size = 16;
    c.engine.core.max_prefill_tokens = 16;
    server *chunked = ts_start(&c);
    check_echo_scores(chunked, prompt, N, gen, gen_lp, G);
    ts_stop(chunked);
    /* Echo without logprobs: the prompt's text opens the completion's. */
    r = post("/v1/completions", json_pack("{s:s,s:i,s:i,s:b}", "prompt", "Hello", "max_tokens", 2, "temperature", 0,
                                          "echo", 1));
    CU_ASSERT(!strncmp(json_string_value(json_object_get(choice(&r, 0), "text")), "Hello", 5));
    CU_ASSERT(json_is_null(json_object_get(choice(&r, 0), "logprobs")));
    ts_resp_free(&r);
}

/* Chat logprobs with ids as names: -100 on the greedy first token gives the
 * runner-up, whose raw logprob is the second alternative's. */
/* Completions with "logprobs": 0 (vLLM's and OpenAI's): no alternatives,
 * but every sampled token's own logprob, in token_logprobs and as the one
 * entry of its top_logprobs object; the same numbers logprobs 1 gives for
 * the same greedy tokens. */
static void test_logprobs_zero(void)
{
    enum { N = 24, G = 5 };
    int32_t prompt[N];
    eh_random_prompt(9, 512, prompt, N);
    double want[G];
    int32_t want_ids[G];
    for (int top = 1; top >= 0; top--) {
        ts_resp r = post("/v1/completions",
                         json_pack("{s:o,s:i,s:i,s:i,s:b,s:b}", "prompt", ids_of(prompt, N), "max_tokens", G, "temperature",
                                   0, "logprobs", top, "return_token_ids", 1, "ignore_eos", 1));
        json_t *ch = choice(&r, 0), *lp = json_object_get(ch, "logprobs");
        CU_ASSERT_FATAL(json_is_object(lp));
        json_t *tl = json_object_get(lp, "token_logprobs"), *tops = json_object_get(lp, "top_logprobs");
        json_t *toks = json_object_get(lp, "tokens");
        CU_ASSERT_EQUAL_FATAL(json_array_size(tl), G);
        CU_ASSERT_EQUAL_FATAL(json_array_size(tops), G);
        CU_ASSERT_EQUAL_FATAL(json_array_size(toks), G);
        for (int i = 0; i < G; i++) {
            json_t *v = json_array_get(tl, i), *alts = json_array_get(tops, i);
            CU_ASSERT_FATAL(json_is_number(v));
            double x = json_number_value(v);
            CU_ASSERT(x <= 0 && x > -100);
            CU_ASSERT_FATAL(json_is_object(alts));
            if (top == 1) {
                want[i] = x;
                want_ids[i] = id_at(ch, i);
                continue;
            }
            CU_ASSERT_EQUAL(id_at(ch, i), want_ids[i]);
            /* float32 sums in another order (the second request's prompt
             * comes from the prefix cache): a few parts in a million */
            if (fabs(x - want[i]) > 1e-4) printf("\n    token %d: %.9g against %.9g", i, x, want[i]);
            CU_ASSERT_DOUBLE_EQUAL(x, want[i], 1e-4);
            /* the sampled token alone, under its own name */
            CU_ASSERT_EQUAL(json_object_size(alts), 1);
            json_t *own = json_object_get(alts, json_string_value(json_array_get(toks, i)));
            CU_ASSERT(json_is_number(own) && json_number_value(own) == x);
        }
        ts_resp_free(&r);
    }
}

static void test_bias_gives_runner_up(void)
{
    json_t *msgs = json_pack("[{s:s,s:s}]", "role", "user", "content", "pick a token");
    ts_resp a = post("/v1/chat/completions",
                     json_pack("{s:O,s:i,s:i,s:b,s:i,s:b}", "messages", msgs, "max_tokens", 1, "temperature", 0, "logprobs",
                               1, "top_logprobs", 2, "return_tokens_as_token_ids", 1));
    json_t *e0 = json_array_get(json_object_get(json_object_get(choice(&a, 0), "logprobs"), "content"), 0);
    json_t *alts = json_object_get(e0, "top_logprobs");
    int32_t g = named_id(json_object_get(e0, "token"));
    int32_t second = named_id(json_object_get(json_array_get(alts, 1), "token"));
    double second_lp = json_number_value(json_object_get(json_array_get(alts, 1), "logprob"));
    CU_ASSERT_FATAL(g >= 0 && second >= 0 && g != second);
    CU_ASSERT_EQUAL(named_id(json_object_get(json_array_get(alts, 0), "token")), g);
    char key[16];
    snprintf(key, sizeof key, "%d", g);
    ts_resp b = post("/v1/chat/completions",
                     json_pack("{s:O,s:i,s:i,s:b,s:b,s:{s:i}}", "messages", msgs, "max_tokens", 1, "temperature", 0,
                               "logprobs", 1, "return_tokens_as_token_ids", 1, "logit_bias", key, -100));
    json_t *f0 = json_array_get(json_object_get(json_object_get(choice(&b, 0), "logprobs"), "content"), 0);
    CU_ASSERT_EQUAL(named_id(json_object_get(f0, "token")), second);
    /* logprobs are the model's raw ones, before the bias */
    double got = json_number_value(json_object_get(f0, "logprob"));
    /* 1e-4: the second request's prompt comes from the prefix cache, so its
     * last position is computed in another batch shape */
    if (fabs(got - second_lp) > 1e-4) printf("\n    runner-up %d: %.9g, as the second alternative %.9g\n", second, got, second_lp);
    CU_ASSERT_DOUBLE_EQUAL(got, second_lp, 1e-4);
    ts_resp_free(&a);
    ts_resp_free(&b);
    json_decref(msgs);
}

/* Greedy with frequency and presence penalties: each chosen id is the best
 * of the raw top-20 after subtracting count * frequency + presence. */
static void test_penalties_by_hand(void)
{
    const double F = 1.5, P = 0.7;
    enum { G = 14 };
    int32_t prompt[6];
    eh_random_prompt(9, 512, prompt, 6);
    ts_resp r = post("/v1/completions",
                     json_pack("{s:o,s:i,s:i,s:f,s:f,s:i,s:b,s:b,s:b}", "prompt", ids_of(prompt, 6), "max_tokens", G,
                               "temperature", 0, "frequency_penalty", F, "presence_penalty", P, "logprobs", 20,
                               "return_tokens_as_token_ids", 1, "ignore_eos", 1, "return_token_ids", 1));
    json_t *ch = choice(&r, 0), *lp = json_object_get(ch, "logprobs");
    json_t *tops = json_object_get(lp, "top_logprobs");
    CU_ASSERT_EQUAL_FATAL(json_array_size(tops), G);
    uint32_t count[512] = {0};
    int repeats = 0;
    for (int i = 0; i < G; i++) {
        int32_t chosen = id_at(ch, i);
        int32_t best = -1;
        double best_v = -1e30;
        const char *k;
        json_t *v;
        json_object_foreach(json_array_get(tops, i), k, v)
        {
            int32_t id = (int32_t)atoi(k + 9);
            double s = json_number_value(v) - (count[id] ? count[id] * F + P : 0);
            if (s > best_v || (s == best_v && id < best)) {
                best_v = s;
                best = id;
            }
        }
        if (best != chosen) printf("\n    step %d: chose %d, the penalised top-20 says %d\n", i, chosen, best);
        CU_ASSERT_EQUAL(chosen, best);
        if (count[chosen]) repeats++;
        count[chosen]++;
    }
    ts_resp_free(&r);
    /* Without penalties this prompt repeats itself (so the test has teeth). */
    r = post("/v1/completions", json_pack("{s:o,s:i,s:i,s:b,s:b}", "prompt", ids_of(prompt, 6), "max_tokens", G,
                                          "temperature", 0, "ignore_eos", 1, "return_token_ids", 1));
    uint32_t plain[512] = {0};
    int plain_repeats = 0;
    for (int i = 0; i < G; i++) plain_repeats += plain[id_at(choice(&r, 0), i)]++ > 0;
    CU_ASSERT(plain_repeats > repeats);
    ts_resp_free(&r);
}

static json_t *token_ids(const ts_resp *r, size_t i)
{
    return json_object_get(choice(r, i), "token_ids");
}

static void test_min_p_min_tokens_and_n(void)
{
    int32_t prompt[5];
    eh_random_prompt(21, 512, prompt, 5);
    /* min_p = 1 leaves only the most likely id: sampling is greedy. */
    ts_resp g = post("/v1/completions", json_pack("{s:o,s:i,s:i,s:b,s:b}", "prompt", ids_of(prompt, 5), "max_tokens", 8,
                                                  "temperature", 0, "ignore_eos", 1, "return_token_ids", 1));
    ts_resp m = post("/v1/completions",
                     json_pack("{s:o,s:i,s:i,s:f,s:i,s:b,s:b}", "prompt", ids_of(prompt, 5), "max_tokens", 8, "temperature",
                               1, "min_p", 1.0, "seed", 3, "ignore_eos", 1, "return_token_ids", 1));
    CU_ASSERT(json_equal(token_ids(&g, 0), token_ids(&m, 0)));
    ts_resp_free(&m);

    /* EOS (257) pushed to the top: it ends the output at once, unless
     * min_tokens holds it back for 5 tokens. */
    ts_resp e = post("/v1/completions", json_pack("{s:o,s:i,s:i,s:b,s:{s:i}}", "prompt", ids_of(prompt, 5), "max_tokens",
                                                  20, "temperature", 0, "return_token_ids", 1, "logit_bias", "257", 100));
    CU_ASSERT_EQUAL(json_array_size(token_ids(&e, 0)), 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(choice(&e, 0), "finish_reason")), "stop");
    ts_resp_free(&e);
    e = post("/v1/completions", json_pack("{s:o,s:i,s:i,s:i,s:b,s:{s:i}}", "prompt", ids_of(prompt, 5), "max_tokens", 20,
                                          "min_tokens", 5, "temperature", 0, "return_token_ids", 1, "logit_bias", "257",
                                          100));
    json_t *ids = token_ids(&e, 0);
    CU_ASSERT_EQUAL(json_array_size(ids), 6);
    for (size_t i = 0; i < 5; i++) CU_ASSERT(json_integer_value(json_array_get(ids, i)) != 257);
    CU_ASSERT_EQUAL(json_integer_value(json_array_get(ids, 5)), 257);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(choice(&e, 0), "finish_reason")), "stop");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(e.json, "usage"), "completion_tokens")), 6);
    ts_resp_free(&e);

    /* A stop string is not looked for before min_tokens: 'A' pushed to the
     * top and "A" a stop string gives "AA" with min_tokens 3, else "". */
    for (int k = 0; k < 2; k++) {
        json_t *body = json_pack("{s:o,s:i,s:i,s:s,s:{s:i}}", "prompt", ids_of(prompt, 5), "max_tokens", 10,
                                 "temperature", 0, "stop", "A", "logit_bias", "65", 100);
        if (k) json_object_set_new(body, "min_tokens", json_integer(3));
        e = post("/v1/completions", body);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(choice(&e, 0), "text")), k ? "AA" : "");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(choice(&e, 0), "finish_reason")), "stop");
        ts_resp_free(&e);
    }

    /* n = 3: choice 0 is the n = 1 answer for the seed, the others differ;
     * the prompt counts once. */
    ts_resp one = post("/v1/completions", json_pack("{s:o,s:i,s:i,s:i,s:b,s:b}", "prompt", ids_of(prompt, 5),
                                                    "max_tokens", 8, "temperature", 1, "seed", 7, "ignore_eos", 1,
                                                    "return_token_ids", 1));
    ts_resp three = post("/v1/completions", json_pack("{s:o,s:i,s:i,s:i,s:i,s:b,s:b}", "prompt", ids_of(prompt, 5),
                                                      "max_tokens", 8, "temperature", 1, "seed", 7, "n", 3, "ignore_eos",
                                                      1, "return_token_ids", 1));
    CU_ASSERT_EQUAL_FATAL(json_array_size(json_object_get(three.json, "choices")), 3);
    CU_ASSERT(json_equal(token_ids(&one, 0), token_ids(&three, 0)));
    CU_ASSERT(!json_equal(token_ids(&three, 0), token_ids(&three, 1)));
    CU_ASSERT(!json_equal(token_ids(&three, 1), token_ids(&three, 2)));
    for (size_t i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(choice(&three, i), "index")), (json_int_t)i);
    json_t *u = json_object_get(three.json, "usage");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(u, "prompt_tokens")), 5);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(u, "completion_tokens")), 24);
    ts_resp_free(&one);
    ts_resp_free(&three);
    ts_resp_free(&g);
}

/* Streamed logprobs, chunk after chunk, are the whole response's. */
static void test_streamed_logprobs(void)
{
    int32_t prompt[4];
    eh_random_prompt(33, 512, prompt, 4);
    json_t *b = json_pack("{s:o,s:i,s:i,s:i,s:b,s:b}", "prompt", ids_of(prompt, 4), "max_tokens", 7, "temperature", 0,
                          "logprobs", 2, "echo", 1, "ignore_eos", 1);
    ts_resp whole = post("/v1/completions", json_deep_copy(b));
    json_object_set_new(b, "stream", json_true());
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    ts_stream st = ts_stream_at(server_url(the_server()), "/v1/completions", body, 0, NULL);
    free(body);
    json_t *all = json_array(), *offsets = json_array();
    size_t i;
    json_t *ev;
    json_array_foreach(st.events, i, ev)
    {
        json_t *lp = json_object_get(json_array_get(json_object_get(ev, "choices"), 0), "logprobs");
        json_array_extend(all, json_object_get(lp, "token_logprobs"));
        json_array_extend(offsets, json_object_get(lp, "text_offset"));
    }
    json_t *wl = json_object_get(json_object_get(choice(&whole, 0), "logprobs"), "token_logprobs");
    CU_ASSERT_EQUAL(json_array_size(all), 4 + 7);
    CU_ASSERT(json_equal(all, wl));
    CU_ASSERT(json_equal(offsets, json_object_get(json_object_get(choice(&whole, 0), "logprobs"), "text_offset")));
    json_decref(all);
    json_decref(offsets);
    json_decref(st.events);
    ts_resp_free(&whole);
}

/* With n-gram drafts the rules see each draft as an output before the row
 * after it: the same tokens and logprobs as without speculation. */
static void test_rules_under_speculation(void)
{
    server_config c = ts_config(the_model());
    c.engine.spec.algorithm = SPEC_NGRAM;
    c.engine.core.spec_steps = 3;
    server *spec = ts_start(&c);
    int32_t prompt[48];
    for (uint32_t i = 0; i < 48; i++) prompt[i] = (int32_t)(7 + 13 * (i % 6));
    for (int k = 0; k < 2; k++) {
        json_t *b = json_pack("{s:o,s:i,s:i,s:i,s:f,s:f,s:i,s:{s:i},s:i,s:b,s:b}", "prompt", ids_of(prompt, 48),
                              "max_tokens", 24, "temperature", k ? 1 : 0, "seed", 4, "frequency_penalty", 0.2,
                              "repetition_penalty", 1.1, "min_tokens", 4, "logit_bias", "20", 3, "logprobs", 2,
                              "return_token_ids", 1, "ignore_eos", 1);
        char *body = json_dumps(b, JSON_COMPACT);
        json_decref(b);
        ts_resp plain = ts_post(the_server(), "/v1/completions", body);
        ts_resp drafted = ts_post(spec, "/v1/completions", body);
        free(body);
        CU_ASSERT(plain.status == 200 && drafted.status == 200);
        CU_ASSERT(json_equal(token_ids(&plain, 0), token_ids(&drafted, 0)));
        json_t *a = json_object_get(json_object_get(choice(&plain, 0), "logprobs"), "token_logprobs");
        json_t *d = json_object_get(json_object_get(choice(&drafted, 0), "logprobs"), "token_logprobs");
        CU_ASSERT_EQUAL_FATAL(json_array_size(a), json_array_size(d));
        for (size_t i = 0; i < json_array_size(a); i++)
            CU_ASSERT_DOUBLE_EQUAL(json_number_value(json_array_get(a, i)), json_number_value(json_array_get(d, i)), 1e-3);
        ts_resp_free(&plain);
        ts_resp_free(&drafted);
    }
    ts_resp m = ts_request(spec, "GET", "/metrics", NULL, NULL);
    const char *acc = strstr(m.body, "vllm:spec_decode_num_accepted_tokens_total{");
    double accepted = 0;
    if (acc) sscanf(strchr(acc, '}') + 1, " %lf", &accepted);
    CU_ASSERT(accepted > 0);   /* drafts were taken, so the rows after them were checked */
    ts_resp_free(&m);
    ts_stop(spec);
}

/* A priced forward makes its tokens up: logprobs and logit rules are
 * refused by name; min_tokens still holds. */
static double price_1ms(void *ctx, const core_batch *b)
{
    (void)ctx;
    (void)b;
    return 1e-3;
}

static void test_priced_forward_refuses(void)
{
    engine_pricer p = {.price = price_1ms, .hardware = "sim: test"};
    server_config c = ts_config(the_model());
    c.engine.pricer = &p;
    server *s = ts_start(&c);
    ts_resp r = ts_post(s, "/v1/completions", "{\"prompt\":[5,6],\"max_tokens\":3,\"logprobs\":1}");
    CU_ASSERT_EQUAL(r.status, 400);
    CU_ASSERT(strstr(r.body, "logprobs") != NULL);
    ts_resp_free(&r);
    r = ts_post(s, "/v1/completions", "{\"prompt\":[5,6],\"max_tokens\":3,\"presence_penalty\":1}");
    CU_ASSERT_EQUAL(r.status, 400);
    ts_resp_free(&r);
    r = ts_post(s, "/v1/completions", "{\"prompt\":[5,6],\"max_tokens\":3,\"min_tokens\":3}");
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(r.json, "usage"), "completion_tokens")), 3);
    ts_resp_free(&r);
    ts_stop(s);
}

static int cleanup(void)
{
    return ts_shared_stop(&shared);
}

void register_test_serve_sampling(void)
{
    CU_pSuite s = CU_add_suite("serve_sampling", NULL, cleanup);
    CU_add_test(s, "logit rules on a row, by hand", test_rules_by_hand);
    CU_add_test(s, "logprob_top against a full selection", test_logprob_top_against_sort);
    CU_add_test(s, "GET /v1/models/{id}: the served model, else 404", test_models_by_id);
    CU_add_test(s, "greedy logprobs; echo scores the prompt as the decode did, chunked or not", test_logprobs_and_echo);
    CU_add_test(s, "completions with logprobs 0: each sampled token's own logprob, as logprobs 1 gives it", test_logprobs_zero);
    CU_add_test(s, "logit_bias -100 on the greedy token gives the runner-up", test_bias_gives_runner_up);
    CU_add_test(s, "frequency and presence penalties choose what the raw logprobs say", test_penalties_by_hand);
    CU_add_test(s, "min_p 1 is greedy; min_tokens holds EOS back; n choices", test_min_p_min_tokens_and_n);
    CU_add_test(s, "streamed logprobs and offsets equal the whole response's", test_streamed_logprobs);
    CU_add_test(s, "logit rules and logprobs under n-gram speculation equal plain decoding", test_rules_under_speculation);
    CU_add_test(s, "a priced forward refuses logprobs and logit rules by name", test_priced_forward_refuses);
}
