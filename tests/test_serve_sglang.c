/* test_serve_sglang.c — SGLang's native surface over real HTTP, each answer
 * checked against a second computation: /generate equals /v1/completions
 * for the same ids (one prompt and a batch), its stream's whole-text-so-far
 * events add up to the non-streamed text, the body sglang.bench_serving
 * sends is served, refusals name the /generate field, /get_server_info and
 * /get_model_info report the configuration, /flush_cache empties the prefix
 * cache (and refuses while a request runs), and the sglang: and new vllm:
 * metrics agree with each other and with a hand count. */
#include <pthread.h>
#include <unistd.h>

#include "test_serve_util.h"
#include "testutil.h"
#include "util/version.h"

static ts_shared shared;

static void chunk_512(server_config *c)
{
    c->engine.core.chunked_prefill_size = 512;
}

static server *the_server(void)
{
    return ts_shared_server(&shared, chunk_512);
}

static ts_resp post(const char *path, json_t *body, long want)
{
    char *b = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    ts_resp r = ts_post(the_server(), path, b);
    if (r.status != want) printf("\n    %s %s: HTTP %ld %s\n", path, b, r.status, r.body);
    free(b);
    CU_ASSERT_EQUAL(r.status, want);
    return r;
}

static json_t *ids_of(const int32_t *p, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(p[i]));
    return a;
}

static json_t *meta(json_t *o, const char *k)
{
    return json_object_get(json_object_get(o, "meta_info"), k);
}

static void test_generate_equals_completions(void)
{
    int32_t a[7], b[12];
    eh_random_prompt(3, 512, a, 7);
    eh_random_prompt(4, 512, b, 12);
    ts_resp g = post("/generate",
                     json_pack("{s:o,s:{s:i,s:f,s:b}}", "input_ids", ids_of(a, 7), "sampling_params", "max_new_tokens",
                               10, "temperature", 0.0, "ignore_eos", 1),
                     200);
    ts_resp c = post("/v1/completions",
                     json_pack("{s:o,s:i,s:i,s:b,s:b}", "prompt", ids_of(a, 7), "max_tokens", 10, "temperature", 0,
                               "ignore_eos", 1, "return_token_ids", 1),
                     200);
    json_t *cc = json_array_get(json_object_get(c.json, "choices"), 0);
    CU_ASSERT(json_equal(json_object_get(g.json, "output_ids"), json_object_get(cc, "token_ids")));
    CU_ASSERT(json_equal(json_object_get(g.json, "text"), json_object_get(cc, "text")));
    CU_ASSERT_EQUAL(json_integer_value(meta(g.json, "prompt_tokens")), 7);
    CU_ASSERT_EQUAL(json_integer_value(meta(g.json, "completion_tokens")), 10);
    json_t *fr = meta(g.json, "finish_reason");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(fr, "type")), "length");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(fr, "length")), 10);
    CU_ASSERT(meta(g.json, "e2e_latency") && json_number_value(meta(g.json, "e2e_latency")) > 0);

    /* A batch: an array, each as if alone. */
    json_t *batch = json_array();
    json_array_append_new(batch, ids_of(a, 7));
    json_array_append_new(batch, ids_of(b, 12));
    ts_resp gb = post("/generate",
                      json_pack("{s:o,s:{s:i,s:f,s:b}}", "input_ids", batch, "sampling_params", "max_new_tokens", 10,
                                "temperature", 0.0, "ignore_eos", 1),
                      200);
    CU_ASSERT_FATAL(json_is_array(gb.json) && json_array_size(gb.json) == 2);
    CU_ASSERT(json_equal(json_object_get(json_array_get(gb.json, 0), "output_ids"), json_object_get(g.json, "output_ids")));
    CU_ASSERT_EQUAL(json_integer_value(meta(json_array_get(gb.json, 1), "prompt_tokens")), 12);
    ts_resp_free(&g);
    ts_resp_free(&c);
    ts_resp_free(&gb);

    /* Text in, and EOS pushed to the top: a stop that names the id. */
    ts_resp e = post("/generate",
                     json_pack("{s:s,s:{s:i,s:{s:i}}}", "text", "Hello", "sampling_params", "max_new_tokens", 10,
                               "logit_bias", "257", 100),
                     200);
    fr = meta(e.json, "finish_reason");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(fr, "type")), "stop");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(fr, "matched")), 257);
    CU_ASSERT_EQUAL(json_integer_value(meta(e.json, "prompt_tokens")), 6);   /* BOS + "Hello" */
    ts_resp_free(&e);
}

/* The body sglang.bench_serving --backend sglang sends, streamed: each
 * event holds the whole text so far; the last equals the whole response. */
static void test_generate_stream(void)
{
    const char *body = "{\"text\": \"Once upon a time\", \"sampling_params\": {\"temperature\": 0.0, "
                       "\"max_new_tokens\": 12, \"ignore_eos\": true}, \"stream\": true, \"return_logprob\": false, "
                       "\"logprob_start_len\": -1, \"stream_options\": {\"include_usage\": true}}";
    ts_stream st = ts_stream_at(server_url(the_server()), "/generate", body, 0, NULL);
    CU_ASSERT_EQUAL(st.status, 200);
    CU_ASSERT(st.done);
    CU_ASSERT_EQUAL(st.bad, 0);
    size_t n = json_array_size(st.events), i;
    CU_ASSERT_FATAL(n >= 2);
    const char *prev = "";
    json_int_t prev_tokens = 0;
    json_t *ev;
    json_array_foreach(st.events, i, ev)
    {
        const char *t = json_string_value(json_object_get(ev, "text"));
        CU_ASSERT_FATAL(t != NULL);
        CU_ASSERT(!strncmp(t, prev, strlen(prev)));   /* grows, never rewrites */
        json_int_t k = json_integer_value(meta(ev, "completion_tokens"));
        CU_ASSERT(k > prev_tokens);
        CU_ASSERT(i + 1 == n ? !json_is_null(meta(ev, "finish_reason")) : json_is_null(meta(ev, "finish_reason")));
        prev = t;
        prev_tokens = k;
    }
    CU_ASSERT_EQUAL(prev_tokens, 12);
    json_t *whole_body = json_loads(body, 0, NULL);
    json_object_set_new(whole_body, "stream", json_false());
    ts_resp w = post("/generate", whole_body, 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(w.json, "text")), prev);
    ts_resp_free(&w);
    json_decref(st.events);
}

/* --stream-interval 4: the first token at once, then runs of four, the
 * rest at the end (13 tokens: events of 1, 5, 9, 13), the same text as
 * one token at a time. */
static void test_stream_interval(void)
{
    const char *body = "{\"text\": \"Once\", \"sampling_params\": {\"temperature\": 0.0, \"max_new_tokens\": 13, "
                       "\"ignore_eos\": true}, \"stream\": true}";
    the_server();   /* the shared one loads the model this one serves too */
    server_config c = ts_config(shared.m);
    c.stream_interval = 4;
    server *s = ts_start(&c);
    ts_stream st = ts_stream_at(server_url(s), "/generate", body, 0, NULL);
    CU_ASSERT_EQUAL(st.status, 200);
    size_t i;
    json_t *ev;
    json_int_t want[] = {1, 5, 9, 13};
    CU_ASSERT_EQUAL(json_array_size(st.events), 4);
    json_array_foreach(st.events, i, ev)
    {
        if (i < 4) CU_ASSERT_EQUAL(json_integer_value(meta(ev, "completion_tokens")), want[i]);
    }
    const char *last = json_string_value(json_object_get(json_array_get(st.events, json_array_size(st.events) - 1), "text"));
    ts_stream one = ts_stream_at(server_url(the_server()), "/generate", body, 0, NULL);
    CU_ASSERT_EQUAL(json_array_size(one.events), 13);
    CU_ASSERT_STRING_EQUAL(last, json_string_value(json_object_get(json_array_get(one.events, 12), "text")));
    json_decref(one.events);
    json_decref(st.events);
    ts_stop(s);
}

static void expect_refusal(const char *body, const char *param)
{
    ts_resp r = ts_post(the_server(), "/generate", body);
    json_t *p = json_object_get(json_object_get(r.json, "error"), "param");
    int ok = r.status == 400 && json_is_string(p) && !strcmp(json_string_value(p), param) &&
             strstr(json_string_value(json_object_get(json_object_get(r.json, "error"), "message")), param);
    if (!ok) printf("\n    %s: HTTP %ld %s (wanted 400 naming %s)\n", body, r.status, r.body, param);
    CU_ASSERT(ok);
    ts_resp_free(&r);
}

static void test_generate_refusals(void)
{
    expect_refusal("{\"text\": \"a\", \"sampling_params\": {\"max_new_tokens\": 0}}", "sampling_params.max_new_tokens");
    expect_refusal("{\"text\": \"a\", \"sampling_params\": {\"max_new_tokens\": 4, \"min_new_tokens\": 9}}",
                   "sampling_params.min_new_tokens");
    expect_refusal("{\"text\": \"a\", \"sampling_params\": {\"regex\": \"b+\"}}", "sampling_params.regex");
    expect_refusal("{\"text\": \"a\", \"return_logprob\": true}", "return_logprob");
    expect_refusal("{\"text\": \"a\", \"input_ids\": [1]}", "text");
    expect_refusal("{\"sampling_params\": {}}", "text");
    /* text under input_ids is not tokenized as a prompt */
    expect_refusal("{\"input_ids\": [\"text\"]}", "input_ids");
    expect_refusal("{\"input_ids\": \"text\"}", "input_ids");
    expect_refusal("{\"input_ids\": [[1, 2], \"text\"]}", "input_ids");
    expect_refusal("{\"input_ids\": [1, [2]]}", "input_ids");
    expect_refusal("{\"text\": \"a\", \"sampling_params\": {\"temperature\": -1}}", "temperature");
}

static double metric(const char *body, const char *name)
{
    char key[160];
    snprintf(key, sizeof key, "\n%s{", name);
    const char *at = strstr(body, key);
    if (!at) return -1;
    at = strchr(at + 1, '}');
    return at ? strtod(at + 1, NULL) : -1;
}

typedef struct long_run {
    const char *url;
} long_run;

static void *run_long(void *arg)
{
    long_run *l = arg;
    ts_resp r = ts_request_at(l->url, "POST", "/v1/completions",
                              "{\"prompt\": [5, 6, 7], \"max_tokens\": 1500, \"ignore_eos\": true}", NULL);
    ts_resp_free(&r);
    return NULL;
}

static void test_info_flush_and_metrics(void)
{
    ts_resp si = ts_request(the_server(), "GET", "/get_server_info", NULL, NULL);
    CU_ASSERT_EQUAL(si.status, 200);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(si.json, "chunked_prefill_size")), 512);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(si.json, "max_total_num_tokens")), TS_POOL_TOKENS);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(si.json, "model_path")), "tiny-llama");
    json_t *state = json_array_get(json_object_get(si.json, "internal_states"), 0);
    CU_ASSERT_DOUBLE_EQUAL(json_number_value(json_object_get(state, "avg_spec_accept_length")), 1.0, 1e-9);
    ts_resp_free(&si);
    ts_resp mi = ts_request(the_server(), "GET", "/get_model_info", NULL, NULL);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(mi.json, "model_path")), "tiny-llama");
    CU_ASSERT(json_is_true(json_object_get(mi.json, "is_generation")));
    ts_resp_free(&mi);

    /* A prompt of 40 ids: served twice it hits the cache (two pages);
     * flushed, it does not. */
    int32_t p[40];
    eh_random_prompt(77, 512, p, 40);
    json_t *body = json_pack("{s:o,s:{s:i}}", "input_ids", ids_of(p, 40), "sampling_params", "max_new_tokens", 2);
    ts_resp r = post("/generate", json_deep_copy(body), 200);
    ts_resp_free(&r);
    r = post("/generate", json_deep_copy(body), 200);
    CU_ASSERT_EQUAL(json_integer_value(meta(r.json, "cached_tokens")), 32);
    ts_resp_free(&r);
    r = ts_request(the_server(), "POST", "/flush_cache", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 200);
    ts_resp_free(&r);
    r = post("/generate", json_deep_copy(body), 200);
    CU_ASSERT_EQUAL(json_integer_value(meta(r.json, "cached_tokens")), 0);
    ts_resp_free(&r);
    json_decref(body);

    /* While a request runs the cache stays (SGLang's rule): 400. */
    long_run l = {server_url(the_server())};
    pthread_t t;
    pthread_create(&t, NULL, run_long, &l);
    int refused = 0;
    for (int k = 0; k < 200 && !refused; k++) {
        usleep(10000);
        ts_resp m = ts_request(the_server(), "GET", "/metrics", NULL, NULL);
        bool running = metric(m.body, "sglang:num_running_reqs") >= 1;
        ts_resp_free(&m);
        if (!running) continue;
        ts_resp f = ts_request(the_server(), "GET", "/flush_cache", NULL, NULL);
        refused = f.status == 400;
        ts_resp_free(&f);
    }
    CU_ASSERT(refused);
    pthread_join(t, NULL);

    /* The two projects' names for the same counts agree; the per-step
     * tokens add up to what the requests computed. */
    ts_resp m = ts_request(the_server(), "GET", "/metrics", NULL, NULL);
    const char *b = m.body;
    CU_ASSERT_DOUBLE_EQUAL(metric(b, "sglang:prompt_tokens_total"), metric(b, "vllm:prompt_tokens_total"), 0);
    CU_ASSERT_DOUBLE_EQUAL(metric(b, "sglang:generation_tokens_total"), metric(b, "vllm:generation_tokens_total"), 0);
    CU_ASSERT_DOUBLE_EQUAL(metric(b, "sglang:time_to_first_token_seconds_count"),
                           metric(b, "vllm:time_to_first_token_seconds_count"), 0);
    CU_ASSERT_DOUBLE_EQUAL(metric(b, "vllm:request_generation_tokens_sum"), metric(b, "vllm:generation_tokens_total"), 0);
    CU_ASSERT_DOUBLE_EQUAL(metric(b, "vllm:request_prompt_tokens_sum"), metric(b, "vllm:prompt_tokens_total"), 0);
    double requests = metric(b, "sglang:num_requests_total"), cached = metric(b, "sglang:cached_tokens_total");
    CU_ASSERT(requests >= 10);
    /* each request computed its uncached prompt once and each output but
     * the last once more (a decode feeds the newest token back) */
    double computed = metric(b, "vllm:prompt_tokens_total") - cached + metric(b, "vllm:generation_tokens_total") - requests;
    CU_ASSERT_DOUBLE_EQUAL(metric(b, "vllm:iteration_tokens_total_sum"), computed, 0);
    CU_ASSERT(metric(b, "sglang:gen_throughput") > 0);
    CU_ASSERT(strstr(b, "vllm:cache_config_info{block_size=\"16\"") != NULL);
    double prefill = metric(b, "vllm:request_prefill_time_seconds_sum"), decode = metric(b, "vllm:request_decode_time_seconds_sum");
    CU_ASSERT_DOUBLE_EQUAL(metric(b, "vllm:request_inference_time_seconds_sum"), prefill + decode, 1e-6);
    ts_resp_free(&m);
}

/* A host KV tier (--enable-hierarchical-cache) behind a 12-page pool: a
 * prompt pushed off the GPU by two others comes back from host memory.
 * meta_info splits the cached tokens as SGLang's cached_tokens_details,
 * /metrics counts them under cache_source="host", and the output is the
 * one the prompt gets on a server that recomputes it. */
static void test_host_tier(void)
{
    the_server();
    server_config c = ts_config(shared.m);
    c.engine.core.max_total_tokens = 12 * 16;
    c.engine.core.enable_hierarchical_cache = true;
    c.engine.core.hicache_ratio = 4;
    server *s = ts_start(&c);
    int32_t a[100], o[2][100], b[120];
    eh_random_prompt(31, 512, a, 100);
    eh_random_prompt(32, 512, o[0], 100);
    eh_random_prompt(33, 512, o[1], 100);
    memcpy(b, a, 96 * sizeof *b);
    eh_random_prompt(34, 512, b + 96, 24);
    const int32_t *prompts[] = {a, o[0], o[1], b};
    size_t lens[] = {100, 100, 100, 120};
    json_t *last = NULL;
    for (int i = 0; i < 4; i++) {
        json_t *body = json_pack("{s:o,s:{s:i,s:f}}", "input_ids", ids_of(prompts[i], lens[i]), "sampling_params",
                                 "max_new_tokens", 6, "temperature", 0.0);
        char *t = json_dumps(body, JSON_COMPACT);
        ts_resp r = ts_post(s, "/generate", t);
        CU_ASSERT_EQUAL(r.status, 200);
        json_t *d = meta(r.json, "cached_tokens_details");
        CU_ASSERT(json_is_object(d));
        if (i == 3) {
            CU_ASSERT_EQUAL(json_integer_value(meta(r.json, "cached_tokens")), 96);
            CU_ASSERT_EQUAL(json_integer_value(json_object_get(d, "host")), 96);
            CU_ASSERT_EQUAL(json_integer_value(json_object_get(d, "device")), 0);
            last = json_incref(json_object_get(r.json, "output_ids"));
            /* the same prompt recomputed, on the shared server without the tier */
            ts_resp w = ts_post(the_server(), "/generate", t);
            CU_ASSERT(json_equal(last, json_object_get(w.json, "output_ids")));
            CU_ASSERT_PTR_NULL(meta(w.json, "cached_tokens_details"));
            ts_resp_free(&w);
        }
        free(t);
        json_decref(body);
        ts_resp_free(&r);
    }
    json_decref(last);
    ts_resp m = ts_request(s, "GET", "/metrics", NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.body, "sglang:cached_tokens_total{cache_source=\"host\",model_name=\"tiny-llama\"} 96\n"));
    CU_ASSERT(metric(m.body, "sglang:load_back_tokens_total") == 96);
    CU_ASSERT(metric(m.body, "sglang:hicache_host_total_tokens") == 4 * 12 * 16);
    CU_ASSERT(metric(m.body, "sglang:hicache_host_used_tokens") > 0);
    CU_ASSERT(metric(m.body, "sglang:evicted_tokens_total") >= 96);
    ts_resp_free(&m);
    ts_stop(s);
}

typedef struct generate_run {
    const char *url, *body;
    ts_resp r;
} generate_run;

static void *run_generate(void *arg)
{
    generate_run *g = arg;
    g->r = ts_request_at(g->url, "POST", "/generate", g->body, NULL);
    return NULL;
}

/* The endpoints tools call, each against a second computation: /tokenize
 * counts what a completion of the same text counts, /detokenize gives the
 * text back, /abort_request ends the request its rid names (and only it),
 * /health_generate generates one token through the queue, /version says the
 * release. */
static void test_tool_endpoints(void)
{
    ts_resp v = ts_request(the_server(), "GET", "/version", NULL, NULL);
    CU_ASSERT_EQUAL(v.status, 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v.json, "version")), REHEARSE_VERSION);
    ts_resp_free(&v);

    const char *text = "the cat sat on the mat";
    ts_resp t = post("/tokenize", json_pack("{s:s}", "prompt", text), 200);
    ts_resp c = post("/v1/completions", json_pack("{s:s,s:i}", "prompt", text, "max_tokens", 1), 200);
    json_int_t count = json_integer_value(json_object_get(t.json, "count"));
    CU_ASSERT_EQUAL(count, json_integer_value(json_object_get(json_object_get(c.json, "usage"), "prompt_tokens")));
    CU_ASSERT_EQUAL((size_t)count, json_array_size(json_object_get(t.json, "tokens")));
    ts_resp m = ts_request(the_server(), "GET", "/v1/models", NULL, NULL);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(t.json, "max_model_len")),
                    json_integer_value(json_object_get(json_array_get(json_object_get(m.json, "data"), 0), "max_model_len")));
    ts_resp_free(&m);
    ts_resp_free(&c);
    ts_resp_free(&t);
    t = post("/tokenize", json_pack("{s:s,s:b}", "prompt", text, "add_special_tokens", 0), 200);
    ts_resp d = post("/detokenize", json_pack("{s:O}", "tokens", json_object_get(t.json, "tokens")), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(d.json, "prompt")), text);
    ts_resp_free(&d);
    ts_resp_free(&t);
    t = post("/detokenize", json_pack("{s:[i]}", "tokens", 1 << 30), 400);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(t.json, "error"), "param")), "tokens");
    ts_resp_free(&t);

    /* two long requests; the abort names one */
    generate_run a = {.url = server_url(the_server()),
                      .body = "{\"text\": \"a\", \"rid\": \"long-a\", \"sampling_params\": {\"max_new_tokens\": 1500, "
                      "\"ignore_eos\": true}}"};
    generate_run b = {.url = server_url(the_server()),
                      .body = "{\"text\": \"b\", \"rid\": \"long-b\", \"sampling_params\": {\"max_new_tokens\": 60, "
                      "\"ignore_eos\": true}}"};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, run_generate, &a);
    pthread_create(&tb, NULL, run_generate, &b);
    json_int_t aborted = 0;
    for (int k = 0; k < 500 && !aborted; k++) {   /* until long-a is in: the abort finds it */
        usleep(5000);
        ts_resp r = post("/abort_request", json_pack("{s:s}", "rid", "long-a"), 200);
        aborted = json_integer_value(json_object_get(r.json, "aborted"));
        ts_resp_free(&r);
    }
    CU_ASSERT_EQUAL(aborted, 1);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CU_ASSERT_EQUAL(a.r.status, 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(meta(a.r.json, "id")), "long-a");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(meta(a.r.json, "finish_reason"), "type")), "abort");
    CU_ASSERT(json_integer_value(meta(a.r.json, "completion_tokens")) < 1500);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(meta(b.r.json, "finish_reason"), "type")), "length");
    CU_ASSERT_EQUAL(json_integer_value(meta(b.r.json, "completion_tokens")), 60);
    ts_resp_free(&a.r);
    ts_resp_free(&b.r);
    ts_resp r = post("/abort_request", json_pack("{s:s}", "rid", "long-a"), 200);   /* gone: nothing to abort */
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(r.json, "aborted")), 0);
    ts_resp_free(&r);
    r = post("/abort_request", json_object(), 400);
    ts_resp_free(&r);

    ts_resp h = ts_request(the_server(), "GET", "/health_generate", NULL, NULL);
    CU_ASSERT_EQUAL(h.status, 200);
    CU_ASSERT_EQUAL(json_integer_value(meta(h.json, "completion_tokens")), 1);
    ts_resp_free(&h);
}

/* Every series a panel of one of the two projects' Grafana dashboards reads
 * (tests/fixtures/dashboards: the metric names each panel's PromQL names,
 * taken from the dashboards' JSON) has a sample with the model_name label
 * the dashboards filter on; under load, the counters, sums of counts and
 * +Inf buckets a rate() or histogram_quantile() reads have moved. */
static int dashboard_gaps(const char *file, const char *body, int *panels)
{
    FILE *f = fopen(file, "r");
    if (!f) {
        printf("\n    %s: cannot open", file);
        return 1;
    }
    char line[2048];
    int gaps = 0;
    while (fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        if (line[0] == '#' || !tab) continue;
        *tab = '\0';
        (*panels)++;
        for (char *name = strtok(tab + 1, " \n"); name; name = strtok(NULL, " \n")) {
            char key[256];
            size_t n = strlen(name);
            bool moves = (n > 6 && !strcmp(name + n - 6, "_total")) || (n > 6 && !strcmp(name + n - 6, "_count")) ||
                         (n > 7 && !strcmp(name + n - 7, "_bucket"));
            bool bucket = n > 7 && !strcmp(name + n - 7, "_bucket");
            snprintf(key, sizeof key, "\n%s{%s", name, bucket ? "le=\"+Inf\"," : "");
            const char *at = strstr(body, key);
            const char *eol = at ? strchr(at + 1, '\n') : NULL;
            const char *close = at ? strchr(at + 1, '}') : NULL;
            bool labelled = at && close && (!eol || close < eol) &&
                            memmem(at, (size_t)(close - at), "model_name=\"tiny-llama\"", 23) != NULL;
            double v = close ? strtod(close + 1, NULL) : -1;
            if (!at || !labelled || (moves && !(v > 0))) {
                printf("\n    %s, panel \"%s\": %s %s", file, line, name,
                       !at ? "has no sample" : !labelled ? "lacks model_name" : "did not move under load");
                gaps++;
            }
        }
    }
    fclose(f);
    return gaps;
}

static void test_dashboards_find_their_series(void)
{
    /* load: requests of n = 2 and one longer prompt, streamed and not */
    ts_resp r = post("/v1/completions", json_pack("{s:s,s:i,s:i}", "prompt", "dashboards under load", "max_tokens", 6,
                                                  "n", 2), 200);
    ts_resp_free(&r);
    r = post("/v1/completions", json_pack("{s:s,s:i,s:b}", "prompt", "a second prompt, a little longer than the first",
                                          "max_tokens", 9, "stream", 1), 200);
    ts_resp_free(&r);
    ts_resp m = ts_request(the_server(), "GET", "/metrics", NULL, NULL);
    CU_ASSERT_EQUAL_FATAL(m.status, 200);
    int sg = 0, vl = 0;
    CU_ASSERT_EQUAL(dashboard_gaps("tests/fixtures/dashboards/sglang.txt", m.body, &sg), 0);
    CU_ASSERT_EQUAL(dashboard_gaps("tests/fixtures/dashboards/vllm.txt", m.body, &vl), 0);
    CU_ASSERT_EQUAL(sg, 8);    /* every panel of each dashboard was read */
    CU_ASSERT_EQUAL(vl, 12);
    ts_resp_free(&m);
}

/* Keys every file must hold, by the client that writes them. */
static int missing_keys(json_t *o, const char *const *keys, const char *what)
{
    int missing = 0;
    for (size_t i = 0; keys[i]; i++)
        if (!json_object_get(o, keys[i])) {
            printf("\n    %s lacks '%s'", what, keys[i]);
            missing++;
        }
    return missing;
}

/* rehearse bench as SGLang's and vLLM's users run it, against this server:
 * no --vocab-size (the server says 512), SGLang's /generate client and
 * vLLM's completions client give the same token counts, and the files hold
 * the keys each project's own client writes. */
static void test_bench_as_they_run_it(void)
{
    char jsonl[256], js[256], cmd[2048], out[16384];
    tu_tmp_path("bench_sglang.jsonl", jsonl, sizeof jsonl);
    tu_tmp_path("bench_vllm.json", js, sizeof js);
    remove(jsonl);
    const char *url = server_url(the_server());
    snprintf(cmd, sizeof cmd, "REHEARSE_PROGRESS=0 %s bench --base-url %s --backend sglang --num-prompts 6 "
             "--random-input-len 32 --random-output-len 8 --random-range-ratio 1 --seed 0 --output-file %s "
             "--output-details", tu_bin(), url, jsonl);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT(strstr(out, "Backend:                                 sglang") != NULL);
    FILE *f = fopen(jsonl, "r");
    CU_ASSERT_FATAL(f != NULL);
    char line[65536];
    CU_ASSERT_FATAL(fgets(line, sizeof line, f) != NULL);
    fclose(f);
    json_t *sg = json_loads(line, 0, NULL);
    CU_ASSERT_FATAL(sg != NULL);
    static const char *const sglang_keys[] = {
        "backend", "dataset_name", "request_rate", "max_concurrency", "random_input_len", "random_output_len",
        "random_range_ratio", "duration", "completed", "total_input_tokens", "total_output_tokens",
        "request_throughput", "input_throughput", "output_throughput", "mean_e2e_latency_ms", "median_e2e_latency_ms",
        "std_e2e_latency_ms", "p99_e2e_latency_ms", "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
        "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
        "std_itl_ms", "p95_itl_ms", "p99_itl_ms", "concurrency", "max_output_tokens_per_s", "max_concurrent_requests",
        "input_lens", "output_lens", "ttfts", "itls", "errors", "generated_texts", "accept_length",
        "total_output_tokens_retokenized", NULL};
    CU_ASSERT_EQUAL(missing_keys(sg, sglang_keys, "the SGLang-style line"), 0);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(sg, "completed")), 6);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(sg, "total_output_tokens")), 6 * 8);

    snprintf(cmd, sizeof cmd, "REHEARSE_PROGRESS=0 %s bench --base-url %s --backend vllm --ignore-eos --num-prompts 6 "
             "--random-input-len 32 --random-output-len 8 --result-json %s --save-detailed", tu_bin(), url, js);
    rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    json_t *v = json_load_file(js, 0, NULL);
    CU_ASSERT_FATAL(v != NULL);
    static const char *const vllm_keys[] = {
        "date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness", "max_concurrency",
        "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
        "request_goodput", "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts",
        "itls", "start_times", "latencies", "queue_times", "generated_texts", "errors", "max_output_tokens_per_s", "max_concurrent_requests", "mean_ttft_ms",
        "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms",
        "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p99_itl_ms", NULL};
    CU_ASSERT_EQUAL(missing_keys(v, vllm_keys, "the vLLM-style file"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v, "backend")), "vllm");
    /* server-side figures from the server's /metrics, the rest left out */
    CU_ASSERT(json_integer_value(json_object_get(v, "steps")) >= 8);
    CU_ASSERT(json_real_value(json_object_get(v, "mean_tokens_per_step")) >= 1);
    CU_ASSERT(json_is_integer(json_object_get(v, "retractions")));
    CU_ASSERT(!json_object_get(v, "mean_batch_size") && !json_object_get(v, "mean_kv_use"));
    /* the same prompts and lengths through the two clients */
    CU_ASSERT(json_equal(json_object_get(v, "total_output_tokens"), json_object_get(sg, "total_output_tokens")));
    CU_ASSERT(json_equal(json_object_get(v, "input_lens"), json_object_get(sg, "input_lens")));
    CU_ASSERT(json_equal(json_object_get(v, "output_lens"), json_object_get(sg, "output_lens")));
    /* greedy both times: the same texts, whether /generate's whole-text
     * events or completions' pieces were put together */
    json_t *gt = json_object_get(sg, "generated_texts");
    CU_ASSERT(json_array_size(gt) == 6 && json_string_length(json_array_get(gt, 0)) > 0);
    CU_ASSERT(json_equal(json_object_get(v, "generated_texts"), gt));
    json_decref(v);
    json_decref(sg);
}

/* A ShareGPT file through vLLM's and SGLang's clients: text prompts (the
 * server counts them: BOS and one token per byte here), each asking for
 * its reply's length, and both clients see the same counts (one --seed for
 * both: SGLang's client's default is 1, vLLM's 0). */
static void test_bench_sharegpt(void)
{
    char js[256], cmd[2048], out[16384];
    const char *url = server_url(the_server());
    json_t *runs[2];
    for (int k = 0; k < 2; k++) {
        tu_tmp_path(k ? "bench_sharegpt_sg.json" : "bench_sharegpt_v.json", js, sizeof js);
        snprintf(cmd, sizeof cmd, "REHEARSE_PROGRESS=0 %s bench --base-url %s --backend %s --ignore-eos --dataset sharegpt "
                 "tests/fixtures/sharegpt/small.json --num-prompts 10 --seed 0 --result-json %s --save-detailed", tu_bin(), url,
                 k ? "sglang" : "vllm", js);
        int rc = tu_run(cmd, out, sizeof out);
        if (rc) printf("\n%s\n", out);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        CU_ASSERT_FATAL((runs[k] = json_load_file(js, 0, NULL)) != NULL);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(runs[k], "completed")), 5);
    }
    /* the replies' byte counts, in the order sent, and each prompt with its BOS */
    json_t *outs = json_object_get(runs[0], "output_lens"), *ins = json_object_get(runs[0], "input_lens");
    long total = 0;
    size_t i;
    json_t *v;
    json_array_foreach(outs, i, v) total += (long)json_integer_value(v);
    CU_ASSERT_EQUAL(total, 23 + 13 + 31 + 23 + 28);
    long prompts = 0;
    json_array_foreach(ins, i, v) prompts += (long)json_integer_value(v);
    CU_ASSERT_EQUAL(prompts, 18 + 13 + 19 + 17 + 14 + 5);
    CU_ASSERT(json_equal(outs, json_object_get(runs[1], "output_lens")));
    CU_ASSERT(json_equal(ins, json_object_get(runs[1], "input_lens")));
    CU_ASSERT(json_equal(json_object_get(runs[0], "generated_texts"), json_object_get(runs[1], "generated_texts")));
    json_decref(runs[0]);
    json_decref(runs[1]);
}

static int cleanup(void)
{
    return ts_shared_stop(&shared);
}

void register_test_serve_sglang(void)
{
    CU_pSuite s = CU_add_suite("serve_sglang", NULL, cleanup);
    CU_add_test(s, "/generate equals /v1/completions, one prompt and a batch; a stop names its id",
                test_generate_equals_completions);
    CU_add_test(s, "/generate streams the whole text so far, as bench_serving reads it", test_generate_stream);
    CU_add_test(s, "/generate refusals name the field as /generate spells it", test_generate_refusals);
    CU_add_test(s, "--stream-interval 4: the first token at once, then runs of four, the same text", test_stream_interval);
    CU_add_test(s, "server and model info, /flush_cache, sglang: and vllm: metrics agree", test_info_flush_and_metrics);
    CU_add_test(s, "a host KV tier: cached_tokens_details, cache_source=\"host\", the recomputed output", test_host_tier);
    CU_add_test(s, "rehearse bench --backend sglang and vllm: no vocab flag, their keys, equal counts",
                test_bench_as_they_run_it);
    CU_add_test(s, "rehearse bench --dataset sharegpt through both clients", test_bench_sharegpt);
    CU_add_test(s, "/version, /tokenize as completions count, /detokenize back, /abort_request by rid, "
                   "/health_generate", test_tool_endpoints);
    CU_add_test(s, "every panel of SGLang's and vLLM's Grafana dashboards finds its series under load",
                test_dashboards_find_their_series);
}
