/* test_serve_errors.c — every kind of bad input gets an OpenAI-style error
 * ({"error": {message, type, param, code}}) with the right HTTP status, over
 * real HTTP, and the server keeps serving afterwards: malformed JSON, wrong
 * types, unsupported values, prompts longer than the context or the pool,
 * ids outside the vocabulary, oversized bodies, unknown routes and models,
 * missing keys, a full queue, too many connections, a draining server.
 * Nothing refused before the engine shows up in the recording. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "test_serve_util.h"
#include "testutil.h"
#include "traces/import/import.h"

static model *tiny;

static const model *the_model(void)
{
    if (!tiny) tiny = eh_tiny_model();
    return tiny;
}

/* The answer is the error it should be: status, code and parameter. */
static void check_error(const char *what, const ts_resp *r, long status, const char *code, const char *param)
{
    json_t *err = json_object_get(r->json, "error");
    json_t *msg = json_object_get(err, "message"), *type = json_object_get(err, "type");
    json_t *c = json_object_get(err, "code"), *p = json_object_get(err, "param");
    int ok = r->status == status && json_is_string(msg) && json_string_length(msg) > 0 && json_is_string(type) &&
             json_is_string(c) && !strcmp(json_string_value(c), code) &&
             (param ? json_is_string(p) && !strcmp(json_string_value(p), param) : json_is_null(p));
    if (!ok) printf("\n    %s: HTTP %ld, %s (wanted %ld %s param %s)\n", what, r->status, r->body, status, code, param ? param : "null");
    CU_ASSERT(ok);
    if (!ok) return;
    const char *t = json_string_value(type);
    if (status == 400 || status == 413) CU_ASSERT_STRING_EQUAL(t, "invalid_request_error");
    if (status == 401) CU_ASSERT_STRING_EQUAL(t, "authentication_error");
    if (status == 429) CU_ASSERT_STRING_EQUAL(t, "rate_limit_error");
    if (status == 503) CU_ASSERT_STRING_EQUAL(t, "server_error");
}

static void expect(server *s, const char *path, const char *body, long status, const char *code, const char *param)
{
    ts_resp r = ts_post(s, path, body);
    check_error(body, &r, status, code, param);
    ts_resp_free(&r);
}

/* A prompt of n ids, as JSON. */
static char *long_prompt(uint32_t n, uint32_t max_tokens)
{
    char *b = malloc(64 + (size_t)n * 4);
    size_t k = (size_t)sprintf(b, "{\"prompt\":[");
    for (uint32_t i = 0; i < n; i++) k += (size_t)sprintf(b + k, "%s%u", i ? "," : "", i % 200);
    sprintf(b + k, "],\"max_tokens\":%u}", max_tokens);
    return b;
}

static void test_bad_bodies(void)
{
    char path[256];
    tu_tmp_path("serve-errors.rhtr", path, sizeof path);
    server_config c = ts_config(the_model());
    c.record_path = path;
    server *s = ts_start(&c);
    const char *C = "/v1/completions", *CH = "/v1/chat/completions";

    expect(s, C, "{\"prompt\": [1, 2,", 400, "invalid_json", NULL);
    expect(s, C, "", 400, "invalid_json", NULL);
    expect(s, C, "[1, 2, 3]", 400, "invalid_json", NULL);
    expect(s, C, "{\"prompt\": \"\xff\xfe\"}", 400, "invalid_json", NULL);   /* not UTF-8 */
    expect(s, C, "{\"max_tokens\": 4}", 400, "missing_required_parameter", "prompt");
    expect(s, C, "{\"prompt\": 5}", 400, "invalid_type", "prompt");
    expect(s, C, "{\"prompt\": []}", 400, "invalid_value", "prompt");
    expect(s, C, "{\"prompt\": [[]]}", 400, "invalid_value", "prompt");
    expect(s, C, "{\"prompt\": [1, \"a\"]}", 400, "invalid_type", "prompt");
    expect(s, C, "{\"prompt\": [1, 512]}", 400, "invalid_value", "prompt");
    expect(s, C, "{\"prompt\": [-1]}", 400, "invalid_value", "prompt");
    expect(s, C, "{\"prompt\": [3], \"max_tokens\": \"ten\"}", 400, "invalid_type", "max_tokens");
    expect(s, C, "{\"prompt\": [3], \"max_tokens\": -5}", 400, "invalid_value", "max_tokens");
    expect(s, C, "{\"prompt\": [3], \"max_tokens\": 0}", 400, "invalid_value", "max_tokens");
    expect(s, C, "{\"prompt\": [3], \"max_tokens\": 2.5}", 400, "invalid_type", "max_tokens");
    expect(s, C, "{\"prompt\": [3], \"temperature\": \"hot\"}", 400, "invalid_type", "temperature");
    expect(s, C, "{\"prompt\": [3], \"temperature\": -1}", 400, "invalid_value", "temperature");
    expect(s, C, "{\"prompt\": [3], \"top_p\": 0}", 400, "invalid_value", "top_p");
    expect(s, C, "{\"prompt\": [3], \"top_k\": -7}", 400, "invalid_value", "top_k");
    expect(s, C, "{\"prompt\": [3], \"seed\": \"x\"}", 400, "invalid_type", "seed");
    expect(s, C, "{\"prompt\": [3], \"stream\": \"yes\"}", 400, "invalid_type", "stream");
    expect(s, C, "{\"prompt\": [3], \"stream_options\": []}", 400, "invalid_type", "stream_options");
    expect(s, C, "{\"prompt\": [3], \"stop\": 5}", 400, "invalid_type", "stop");
    expect(s, C, "{\"prompt\": [3], \"stop\": [\"a\", {}]}", 400, "invalid_type", "stop");
    expect(s, C, "{\"prompt\": [3], \"stop_token_ids\": [9999]}", 400, "invalid_value", "stop_token_ids");
    expect(s, C, "{\"prompt\": [3], \"n\": 0}", 400, "invalid_value", "n");
    expect(s, C, "{\"prompt\": [3], \"n\": 65}", 400, "invalid_value", "n");
    expect(s, C, "{\"prompt\": [3], \"n\": 2, \"best_of\": 3}", 400, "unsupported_value", "best_of");
    expect(s, C, "{\"prompt\": [3], \"logprobs\": 21}", 400, "invalid_value", "logprobs");
    expect(s, C, "{\"prompt\": [3], \"top_logprobs\": 2}", 400, "unsupported_parameter", "top_logprobs");
    expect(s, C, "{\"prompt\": [3], \"presence_penalty\": 2.5}", 400, "invalid_value", "presence_penalty");
    expect(s, C, "{\"prompt\": [3], \"frequency_penalty\": -3}", 400, "invalid_value", "frequency_penalty");
    expect(s, C, "{\"prompt\": [3], \"repetition_penalty\": 0}", 400, "invalid_value", "repetition_penalty");
    expect(s, C, "{\"prompt\": [3], \"min_p\": 1.5}", 400, "invalid_value", "min_p");
    expect(s, C, "{\"prompt\": [3], \"max_tokens\": 4, \"min_tokens\": 5}", 400, "invalid_value", "min_tokens");
    expect(s, C, "{\"prompt\": [3], \"logit_bias\": {\"9999\": 1}}", 400, "invalid_value", "logit_bias");
    expect(s, C, "{\"prompt\": [3], \"logit_bias\": {\"x\": 1}}", 400, "invalid_value", "logit_bias");
    expect(s, C, "{\"prompt\": [3], \"logit_bias\": {\"5\": 101}}", 400, "invalid_value", "logit_bias");
    expect(s, C, "{\"prompt\": [3], \"logit_bias\": [1]}", 400, "invalid_type", "logit_bias");
    expect(s, C, "{\"prompt\": [3], \"suffix\": \"end\"}", 400, "unsupported_parameter", "suffix");
    expect(s, C, "{\"prompt\": [3], \"response_format\": {\"type\": \"json_object\"}}", 400, "unsupported_parameter",
           "response_format");
    expect(s, C, "{\"prompt\": [3], \"guided_regex\": \"a+\"}", 400, "unsupported_parameter", "guided_regex");
    expect(s, C, "{\"prompt\": [3], \"stream\": true, \"stream_options\": {\"continuous_usage_stats\": true}}", 400,
           "unsupported_parameter", "stream_options");
    expect(s, CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": [{\"type\": \"function\"}]}",
           400, "unsupported_parameter", "tools");
    expect(s, CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tool_choice\": \"required\"}", 400,
           "unsupported_parameter", "tool_choice");
    expect(s, CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"top_logprobs\": 2}", 400,
           "invalid_value", "top_logprobs");
    expect(s, CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"echo\": true}", 400,
           "unsupported_parameter", "echo");
    expect(s, C, "{\"prompt\": [3], \"model\": 7}", 400, "invalid_type", "model");
    expect(s, C, "{\"prompt\": [3], \"model\": \"gpt-4\"}", 404, "model_not_found", "model");
    expect(s, CH, "{\"messages\": \"hi\"}", 400, "invalid_type", "messages");
    expect(s, CH, "{\"messages\": []}", 400, "invalid_type", "messages");
    expect(s, CH, "{\"max_tokens\": 3}", 400, "missing_required_parameter", "messages");
    expect(s, CH, "{\"messages\": [{\"content\": \"no role\"}]}", 400, "invalid_type", "messages");
    expect(s, CH, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400, "invalid_type", "messages");
    expect(s, CH, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 400,
           "invalid_value", "messages");

    /* Longer than the context (2048): the prompt alone, or with max_tokens. */
    char *b = long_prompt(2048, 1);
    expect(s, C, b, 400, "context_length_exceeded", "prompt");
    free(b);
    b = long_prompt(2000, 100);
    expect(s, C, b, 400, "context_length_exceeded", "prompt");
    free(b);
    /* Without max_tokens the default shrinks to what is left. */
    b = long_prompt(2045, 0);
    strcpy(strstr(b, ",\"max_tokens\""), ",\"temperature\":0,\"ignore_eos\":true}");
    ts_resp r = ts_post(s, C, b);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(r.json, "usage"), "completion_tokens")), 3);
    ts_resp_free(&r);
    free(b);

    /* Unknown routes, wrong methods, an unknown model. */
    r = ts_request(s, "GET", "/v1/nothing", NULL, NULL);
    check_error("unknown route", &r, 404, "not_found", NULL);
    ts_resp_free(&r);
    r = ts_request(s, "GET", "/v1/completions", NULL, NULL);
    check_error("GET completions", &r, 405, "method_not_allowed", NULL);
    ts_resp_free(&r);
    r = ts_request(s, "DELETE", "/v1/models", NULL, NULL);
    check_error("DELETE models", &r, 405, "method_not_allowed", NULL);
    ts_resp_free(&r);

    /* Still healthy, still serving. */
    r = ts_request(s, "GET", "/health", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 200);
    ts_resp_free(&r);
    r = ts_post(s, C, "{\"prompt\":[1,2,3],\"max_tokens\":4,\"temperature\":0}");
    CU_ASSERT_EQUAL(r.status, 200);
    ts_resp_free(&r);
    core_stats st;
    server_core_stats(s, &st);
    CU_ASSERT_EQUAL(st.finished, 2);
    ts_stop(s);

    tr_trace t;
    rh_err e;
    CU_ASSERT_FATAL(tr_trace_load(path, &t, &e) == 0);
    CU_ASSERT_EQUAL(t.n_requests, 2);   /* the refusals never reached the engine */
    tr_trace_free(&t);
}

static void test_body_limits_and_pool(void)
{
    server_config c = ts_config(the_model());
    c.max_body_bytes = 4096;
    c.engine.core.max_total_tokens = 1024;   /* a pool smaller than the context */
    server *s = ts_start(&c);
    /* Content-Length says too much: refused before the body is read. */
    char *b = long_prompt(1500, 1);
    ts_resp r = ts_post(s, "/v1/completions", b);
    check_error("oversized body", &r, 413, "body_too_large", NULL);
    ts_resp_free(&r);
    /* Sent chunked, without a length: refused once it grows past the limit. */
    r = ts_request(s, "POST", "/v1/completions", b, "Transfer-Encoding: chunked");
    check_error("oversized chunked body", &r, 413, "body_too_large", NULL);
    ts_resp_free(&r);
    free(b);
    /* Fits the context, not the pool. */
    b = long_prompt(1000, 100);
    c.max_body_bytes = 1 << 20;
    ts_stop(s);
    s = ts_start(&c);
    r = ts_post(s, "/v1/completions", b);
    check_error("bigger than the pool", &r, 400, "context_length_exceeded", "prompt");
    ts_resp_free(&r);
    free(b);
    r = ts_post(s, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":2}");
    CU_ASSERT_EQUAL(r.status, 200);
    ts_resp_free(&r);
    ts_stop(s);

    /* A text that cannot fit the context whatever it encodes to is refused
     * by its bytes, before any encoding; one that might fit is encoded
     * first (and refused by its tokens). */
    c.max_body_bytes = 64 << 20;
    s = ts_start(&c);
    ts_resp m = ts_request(s, "GET", "/v1/models", NULL, NULL);
    json_t *d0 = json_array_get(json_object_get(m.json, "data"), 0);
    uint64_t context = (uint64_t)json_integer_value(json_object_get(d0, "max_model_len"));
    ts_resp_free(&m);
    CU_ASSERT_FATAL(context > 0);
    for (int k = 0; k < 2; k++) {
        size_t len = k == 0 ? (size_t)context * 64 : (size_t)context + 10;
        char *body = malloc(len + 64);
        int at = snprintf(body, 64, "{\"prompt\":\"");
        memset(body + at, 'a', len);
        snprintf(body + at + len, 64, "\",\"max_tokens\":1}");
        r = ts_post(s, "/v1/completions", body);
        check_error("a text too long", &r, 400, "context_length_exceeded", "prompt");
        CU_ASSERT_PTR_NOT_NULL(strstr(r.body, k == 0 ? "takes at least" : "alone takes"));
        ts_resp_free(&r);
        free(body);
    }
    ts_stop(s);
}

static void test_api_key(void)
{
    server_config c = ts_config(the_model());
    c.api_key = "sekrit";
    server *s = ts_start(&c);
    const char *body = "{\"prompt\":[1,2,3],\"max_tokens\":2}";
    ts_resp r = ts_request(s, "POST", "/v1/completions", body, NULL);
    check_error("no key", &r, 401, "invalid_api_key", NULL);
    ts_resp_free(&r);
    r = ts_request(s, "POST", "/v1/completions", body, "Authorization: Bearer sekrix");
    check_error("wrong key", &r, 401, "invalid_api_key", NULL);
    ts_resp_free(&r);
    r = ts_request(s, "GET", "/v1/models", NULL, "Authorization: Bearer sekri");
    check_error("short key", &r, 401, "invalid_api_key", NULL);
    ts_resp_free(&r);
    r = ts_request(s, "POST", "/v1/completions", body, "Authorization: Bearer sekrit");
    CU_ASSERT_EQUAL(r.status, 200);
    ts_resp_free(&r);
    r = ts_request(s, "GET", "/health", NULL, NULL);   /* outside /v1/: open, as in vLLM */
    CU_ASSERT_EQUAL(r.status, 200);
    ts_resp_free(&r);
    r = ts_request(s, "GET", "/metrics", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 200);
    ts_resp_free(&r);
    ts_stop(s);
}

/* ---- a full queue ---- */
typedef struct hold {
    server *s;
    const char *body;
    atomic_int hangup;
    long status;
    int events, done, error_event;
} hold;

static void *hold_stream(void *p)
{
    hold *h = p;
    ts_stream st = ts_stream_until(h->s, "/v1/completions", h->body, 0, &h->hangup);
    h->status = st.status;
    h->events = st.n_events;
    h->done = st.done;
    json_t *last = json_array_get(st.events, json_array_size(st.events) - 1);
    h->error_event = json_object_get(last, "error") != NULL;
    ts_stream_free(&st);
    return NULL;
}

static int one_running(const core_stats *st, void *ctx)
{
    (void)ctx;
    return st->running == 1;
}

static int one_running_one_waiting(const core_stats *st, void *ctx)
{
    (void)ctx;
    return st->running == 1 && st->waiting == 1;
}

static int idle(const core_stats *st, void *ctx)
{
    (void)ctx;
    return st->running == 0 && st->waiting == 0;
}

static void test_full_queue(void)
{
    server_config c = ts_config(the_model());
    c.max_queued_requests = 1;
    c.engine.core.max_running_requests = 1;
    server *s = ts_start(&c);
    const char *longer = "{\"prompt\":[1,2,3],\"max_tokens\":1900,\"ignore_eos\":true,\"stream\":true}";
    hold a = {.s = s, .body = longer}, b = {.s = s, .body = longer};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, hold_stream, &a);
    CU_ASSERT_FATAL(ts_wait_stats(s, one_running, NULL, 10));
    pthread_create(&tb, NULL, hold_stream, &b);
    /* One runs, one waits: the queue is full. */
    CU_ASSERT_FATAL(ts_wait_stats(s, one_running_one_waiting, NULL, 10));
    ts_resp r = ts_post(s, "/v1/completions", "{\"prompt\":[1],\"max_tokens\":1}");
    check_error("full queue", &r, 429, "too_many_requests", NULL);
    ts_resp_free(&r);
    r = ts_post(s, "/v1/completions", "{\"prompt\":[[1],[2]],\"max_tokens\":1}");
    check_error("full queue, two prompts", &r, 429, "too_many_requests", NULL);
    ts_resp_free(&r);
    /* Both clients give up; the waiting one is noticed while still queued. */
    atomic_store(&a.hangup, 1);
    atomic_store(&b.hangup, 1);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CU_ASSERT(ts_wait_stats(s, idle, NULL, 10));
    core_stats st;
    server_core_stats(s, &st);
    CU_ASSERT_EQUAL(st.aborted, 2);
    CU_ASSERT_EQUAL(st.pages_used, 0);
    /* Room again. */
    r = ts_post(s, "/v1/completions", "{\"prompt\":[1],\"max_tokens\":1}");
    CU_ASSERT_EQUAL(r.status, 200);
    ts_resp_free(&r);
    ts_stop(s);
}

/* ---- too many connections, and a draining server ---- */
static int connect_to(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Requests /health until it answers `status` (connections are counted
 * when libmicrohttpd accepts them, a moment after connect). */
static long health_until(server *s, long status)
{
    long got = 0;
    for (int i = 0; i < 200 && got != status; i++) {
        ts_resp r = ts_request(s, "GET", "/health", NULL, NULL);
        got = r.status;
        if (got == 503) check_error("too many connections", &r, 503, "too_many_connections", NULL);
        ts_resp_free(&r);
        if (got != status) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
    }
    return got;
}

static void test_connections_and_draining(void)
{
    server_config c = ts_config(the_model());
    c.max_connections = 2;
    c.max_connections_per_client = 10;   /* the total is what this test holds against */
    server *s = ts_start(&c);
    int a = connect_to(server_port(s)), b = connect_to(server_port(s));
    CU_ASSERT_FATAL(a >= 0 && b >= 0);
    CU_ASSERT_EQUAL(health_until(s, 503), 503);
    close(a);
    close(b);
    CU_ASSERT_EQUAL(health_until(s, 200), 200);

    server_drain(s);
    ts_resp r = ts_post(s, "/v1/completions", "{\"prompt\":[1],\"max_tokens\":1}");
    check_error("draining", &r, 503, "server_shutdown", NULL);
    ts_resp_free(&r);
    r = ts_request(s, "GET", "/health", NULL, NULL);
    check_error("health while draining", &r, 503, "server_shutdown", NULL);
    ts_resp_free(&r);
    ts_stop(s);
}

/* ---- shutdown with requests in flight ---- */
static void test_stop_with_requests_in_flight(void)
{
    char path[256];
    tu_tmp_path("serve-stop.rhtr", path, sizeof path);
    server_config c = ts_config(the_model());
    c.record_path = path;
    server *s = ts_start(&c);
    hold a = {.s = s, .body = "{\"prompt\":[1,2,3],\"max_tokens\":1900,\"ignore_eos\":true,\"stream\":true}"};
    pthread_t ta;
    pthread_create(&ta, NULL, hold_stream, &a);
    while (1) {
        core_stats st;
        server_core_stats(s, &st);
        if (st.running) break;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    ts_stop(s);   /* aborts it: the stream ends with an error event */
    pthread_join(ta, NULL);
    CU_ASSERT_EQUAL(a.status, 200);
    CU_ASSERT(a.events >= 2);
    CU_ASSERT(a.error_event);
    CU_ASSERT(a.done);
    tr_trace t;
    rh_err e;
    CU_ASSERT_FATAL(tr_trace_load(path, &t, &e) == 0);
    CU_ASSERT_EQUAL_FATAL(t.n_requests, 1);
    CU_ASSERT_EQUAL(t.requests[0].finish, TR_FINISH_ABORT);
    CU_ASSERT(t.requests[0].output_len < 1900);
    tr_trace_free(&t);
}

static int cleanup(void)
{
    model_free(tiny);
    tiny = NULL;
    return 0;
}

void register_test_serve_errors(void)
{
    CU_pSuite s = CU_add_suite("serve_errors", NULL, cleanup);
    CU_add_test(s, "malformed JSON, wrong types, bad values, long prompts, routes: 400/404/405", test_bad_bodies);
    CU_add_test(s, "oversized bodies (413) and prompts larger than the pool", test_body_limits_and_pool);
    CU_add_test(s, "API key: 401 without it on /v1/, open /health and /metrics", test_api_key);
    CU_add_test(s, "a full queue answers 429; queued clients that hang up are aborted", test_full_queue);
    CU_add_test(s, "too many connections and a draining server answer 503", test_connections_and_draining);
    CU_add_test(s, "stopping with a request in flight aborts it and records it", test_stop_with_requests_in_flight);
}
