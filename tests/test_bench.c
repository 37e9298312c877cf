/* test_bench.c — the load generator against a scripted streaming server in
 * this process (client/bench_mock.h): measured TTFT, ITL, TPOT and E2E
 * match the server's own schedule and its own log of when each chunk left;
 * counts and usage are right; rate, concurrency and session order hold;
 * HTTP errors, error events, malformed streams and dead servers are reported.
 * Both sides read the same monotonic clock, so the comparisons are direct. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "client/bench.h"
#include "client/bench_mock.h"

/* Loopback: a chunk reaches the client ~0.1 ms after it leaves the server.
 * Medians are held to TOL; single values, which a busy two-core machine may
 * delay now and then, only to SLACK, so the suite never flakes. */
#define TOL 0.005
#define SLACK 0.25

static bench_config config_for(const bench_mock *m, bench_api api)
{
    bench_config c;
    memset(&c, 0, sizeof c);
    c.base_url = bench_mock_url(m);
    c.api = api;
    c.endpoint = api == BENCH_API_CHAT ? "/v1/chat/completions" : "/v1/completions";
    c.model = "mock-model";
    c.stream = 1;
    return c;
}

static bench_dataset random_set(size_t n, uint32_t in, uint32_t out, uint64_t seed)
{
    bench_dataset d;
    bench_random_opts o = {.num_prompts = n, .input_len = in, .output_len = out, .seed = seed};
    rh_err e;
    CU_ASSERT_FATAL(bench_dataset_random(&d, &o, 16, &e) == 0);
    return d;
}

/* Runs d against the mock; results owned by the caller. */
static bench_result *run_set(const bench_config *c, const bench_dataset *d, bench_run_info *info)
{
    bench_result *r = calloc(d->n, sizeof *r);
    rh_err e;
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_FATAL(bench_run(c, d, r, info, &e) == 0);
    return r;
}

/* The mock's log entry for item i, found by the hash of the prompt ids. */
static const bench_mock_request *mock_entry(bench_mock *m, const bench_dataset *d, size_t i)
{
    int32_t *ids = malloc(d->items[i].input_len * sizeof *ids);
    bench_item_tokens(d, i, ids);
    uint64_t h = bench_mock_prompt_hash(ids, d->items[i].input_len);
    free(ids);
    const bench_mock_request *log;
    size_t n = bench_mock_requests(m, &log);
    for (size_t k = 0; k < n; k++)
        if (log[k].prompt_hash == h) return &log[k];
    return NULL;
}

static double median_of(double *x, size_t n)
{
    rh_summary s;
    rh_summarize(x, n, &s);
    return s.median;
}

/* Exact where causality makes it exact (nothing arrives before the server
 * sent it; the server never sends early), and within a loopback tolerance on
 * the median where a busy machine may delay one chunk now and then. */
static void test_timing_matches_schedule(void)
{
    bench_mock_opts mo = {.first_token_s = 0.050, .itl_s = 0.010};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_FATAL(m != NULL);
    bench_dataset d = random_set(6, 64, 8, 1);
    bench_config c = config_for(m, BENCH_API_COMPLETIONS);
    bench_run_info info;
    bench_result *r = run_set(&c, &d, &info);
    double tpot_sum = 0, ttft_sum = 0, delivery[48], gaps[42], ttft_vs_server[6], e2e_vs_server[6];
    size_t nd = 0, ng = 0;
    for (size_t i = 0; i < d.n; i++) {
        CU_ASSERT_PTR_NULL_FATAL(r[i].error);
        CU_ASSERT_EQUAL_FATAL(r[i].n_chunks, 8);
        CU_ASSERT_EQUAL(r[i].output_len, 8);
        CU_ASSERT_EQUAL(r[i].input_len, 64);
        CU_ASSERT_EQUAL(r[i].finish, TR_FINISH_LENGTH);
        CU_ASSERT(r[i].ttft >= 0.050);
        CU_ASSERT(r[i].e2e >= 0.120);
        CU_ASSERT_EQUAL(r[i].ttft, r[i].chunk_times[0]);
        for (uint32_t k = 1; k < 8; k++) gaps[ng++] = r[i].chunk_times[k] - r[i].chunk_times[k - 1];
        tpot_sum += (r[i].e2e - r[i].ttft) / 7.0;
        ttft_sum += r[i].ttft;
        /* Against the server's own log, on the same clock. */
        const bench_mock_request *l = mock_entry(m, &d, i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(l);
        CU_ASSERT_EQUAL_FATAL(l->n_chunks, 8);
        CU_ASSERT_EQUAL(l->prompt_len, 64);
        CU_ASSERT_EQUAL(l->max_tokens, 8);
        double send = info.t0 + r[i].send;
        CU_ASSERT(l->received >= send && l->received < send + 0.25);
        for (uint32_t k = 0; k < 8; k++) {
            double got = send + r[i].chunk_times[k];
            CU_ASSERT(l->chunk_sent[k] >= l->received + 0.050 + 0.010 * k);
            CU_ASSERT(got >= l->chunk_sent[k]);
            CU_ASSERT(got < l->chunk_sent[k] + 0.25);
            delivery[nd++] = got - l->chunk_sent[k];
        }
        /* TTFT = what the server's schedule says, plus the trip there and back */
        ttft_vs_server[i] = r[i].ttft - (l->received - send) - 0.050;
        e2e_vs_server[i] = r[i].e2e - (l->received - send) - 0.120;
    }
    CU_ASSERT(median_of(delivery, nd) < 0.003);
    CU_ASSERT(median_of(ttft_vs_server, 6) < 0.005);
    CU_ASSERT_DOUBLE_EQUAL(median_of(gaps, ng), 0.010, 0.002);
    /* The summary (traces/metrics) agrees with a direct computation. */
    metrics_summary s;
    CU_ASSERT_FATAL(bench_summarize(&d, r, NULL, &s, &e) == 0);
    CU_ASSERT_EQUAL(s.completed, 6);
    CU_ASSERT_EQUAL(s.failed, 0);
    CU_ASSERT_EQUAL(s.total_output_tokens, 48);
    CU_ASSERT_EQUAL(s.total_input_tokens, 6 * 64);
    CU_ASSERT_DOUBLE_EQUAL(s.tpot_ms.mean, 1e3 * tpot_sum / 6, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s.ttft_ms.mean, 1e3 * ttft_sum / 6, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s.itl_ms.median, 1e3 * median_of(gaps, ng), 1e-9);
    CU_ASSERT_EQUAL(s.itl_ms.n, 6 * 7);
    CU_ASSERT(s.ttft_ms.median >= 50 && s.ttft_ms.median < 50 + 1e3 * SLACK);
    CU_ASSERT_DOUBLE_EQUAL(s.tpot_ms.median, 10, 2);
    CU_ASSERT(median_of(e2e_vs_server, 6) < TOL);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    bench_mock_stop(m);
}

/* At most C requests in flight, seen from both ends; with more requests than
 * slots and all arriving at once, the cap is reached exactly. */
static void test_concurrency_cap(void)
{
    bench_mock_opts mo = {.first_token_s = 0.020, .itl_s = 0.005};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_FATAL(m != NULL);
    bench_dataset d = random_set(10, 32, 4, 2);
    bench_config c = config_for(m, BENCH_API_COMPLETIONS);
    c.max_concurrency = 3;
    bench_run_info info;
    bench_result *r = run_set(&c, &d, &info);
    CU_ASSERT_EQUAL(info.max_inflight, 3);
    CU_ASSERT_EQUAL(bench_mock_max_concurrent(m), 3);
    /* From the results alone: no send sees three others still open. */
    for (size_t i = 0; i < d.n; i++) {
        CU_ASSERT_PTR_NULL(r[i].error);
        int open = 0;
        for (size_t j = 0; j < d.n; j++)
            if (j != i && r[j].send <= r[i].send && r[j].send + r[j].e2e > r[i].send) open++;
        CU_ASSERT(open <= 2);
    }
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    bench_mock_stop(m);
}

/* Requests leave at their planned arrivals (the wait is rounded up to the
 * next ms), never before. */
static void test_request_rate_schedule(void)
{
    bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.001};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_FATAL(m != NULL);
    bench_dataset d = random_set(20, 16, 2, 3);
    bench_dataset_set_rate(&d, 50, 1, 7);
    CU_ASSERT_EQUAL(d.items[0].arrival, 0);
    CU_ASSERT(d.items[19].arrival > 0.1);          /* ~0.38 s for 19 gaps of 20 ms */
    bench_config c = config_for(m, BENCH_API_COMPLETIONS);
    bench_run_info info;
    bench_result *r = run_set(&c, &d, &info);
    double late[20];
    for (size_t i = 0; i < d.n; i++) {
        CU_ASSERT_PTR_NULL(r[i].error);
        CU_ASSERT(r[i].send >= d.items[i].arrival);
        CU_ASSERT(r[i].send < d.items[i].arrival + 0.25);
        late[i] = r[i].send - d.items[i].arrival;
    }
    CU_ASSERT(median_of(late, 20) < 0.003);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    bench_mock_stop(m);
}

/* The gamma schedule: mean gap 1/rate, squared coefficient of variation
 * 1/burstiness (a gamma of shape b has CV^2 = 1/b). */
static void test_arrival_statistics(void)
{
    const double shapes[] = {0.25, 1, 4};
    for (int k = 0; k < 3; k++) {
        bench_dataset d = random_set(40001, 1, 1, 4);
        bench_dataset_set_rate(&d, 10, shapes[k], 11 + k);
        double sum = 0, sq = 0;
        size_t n = d.n - 1, negative = 0;
        for (size_t i = 1; i < d.n; i++) {
            double g = d.items[i].arrival - d.items[i - 1].arrival;
            negative += g < 0;
            sum += g;
            sq += g * g;
        }
        CU_ASSERT_EQUAL(negative, 0);
        double mean = sum / (double)n, var = sq / (double)n - mean * mean;
        CU_ASSERT_DOUBLE_EQUAL(mean, 0.1, 0.1 * 0.04);
        CU_ASSERT_DOUBLE_EQUAL(var / (mean * mean), 1 / shapes[k], 0.08 / shapes[k]);
        bench_dataset_free(&d);
    }
    /* inf: everything at once. */
    bench_dataset d = random_set(5, 1, 1, 4);
    bench_dataset_set_rate(&d, INFINITY, 1, 1);
    for (size_t i = 0; i < d.n; i++) CU_ASSERT_EQUAL(d.items[i].arrival, 0);
    bench_dataset_free(&d);
}

/* Usage is the truth for output tokens; chunks count when it is absent. */
static void test_usage_and_multi_token_chunks(void)
{
    for (int no_usage = 0; no_usage <= 1; no_usage++) {
        bench_mock_opts mo = {.first_token_s = 0.010, .itl_s = 0.004, .tokens_per_chunk = 3, .no_usage = no_usage};
        rh_err e;
        bench_mock *m = bench_mock_start(&mo, &e);
        CU_ASSERT_FATAL(m != NULL);
        bench_dataset d = random_set(3, 20, 7, 5);
        bench_config c = config_for(m, BENCH_API_COMPLETIONS);
        bench_run_info info;
        bench_result *r = run_set(&c, &d, &info);
        for (size_t i = 0; i < d.n; i++) {
            CU_ASSERT_PTR_NULL(r[i].error);
            CU_ASSERT_EQUAL(r[i].n_chunks, 3);                     /* 3 + 3 + 1 tokens */
            CU_ASSERT_EQUAL(r[i].output_len, no_usage ? 3 : 7);
            /* the first chunk leaves when its third token is due */
            CU_ASSERT(r[i].ttft >= 0.018 && r[i].ttft < 0.018 + SLACK);
            /* as a trace record, token times keep TTFT and the end */
            double times[8];
            tr_request q;
            bench_result_request(&d, i, &r[i], &q, times);
            CU_ASSERT_EQUAL(q.n_times, q.output_len);
            CU_ASSERT_EQUAL(q.token_times[0], r[i].ttft);
            CU_ASSERT_EQUAL(q.token_times[q.n_times - 1], r[i].chunk_times[2]);
        }
        metrics_summary s;
        CU_ASSERT_FATAL(bench_summarize(&d, r, NULL, &s, &e) == 0);
        CU_ASSERT_EQUAL(s.total_output_tokens, no_usage ? 9 : 21);
        CU_ASSERT_EQUAL(s.itl_ms.n, 3 * 2);                      /* gaps between chunks */
        bench_results_free(r, d.n);
        bench_dataset_free(&d);
        bench_mock_stop(m);
    }
}

/* Chat sends text; the mock counts one word per token. Non-streamed answers
 * have TTFT = E2E. */
static void test_chat_and_no_stream(void)
{
    bench_mock_opts mo = {.first_token_s = 0.020, .itl_s = 0.005};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_FATAL(m != NULL);
    for (int variant = 0; variant < 3; variant++) {
        bench_dataset d = random_set(3, 40, 5, 6);
        bench_config c = config_for(m, variant == 1 ? BENCH_API_COMPLETIONS : BENCH_API_CHAT);
        c.stream = variant == 0;
        bench_run_info info;
        bench_result *r = run_set(&c, &d, &info);
        for (size_t i = 0; i < d.n; i++) {
            CU_ASSERT_PTR_NULL(r[i].error);
            if (r[i].error) printf("\n  variant %d: %s\n", variant, r[i].error);
            CU_ASSERT_EQUAL(r[i].input_len, 40);
            CU_ASSERT_EQUAL(r[i].output_len, 5);
            if (c.stream) {
                CU_ASSERT_EQUAL(r[i].n_chunks, 5);
                CU_ASSERT(r[i].ttft >= 0.020 && r[i].ttft < 0.020 + SLACK);
            } else {
                CU_ASSERT_EQUAL(r[i].ttft, r[i].e2e);
                CU_ASSERT(r[i].e2e >= 0.040 && r[i].e2e < 0.040 + SLACK);
            }
        }
        bench_results_free(r, d.n);
        bench_dataset_free(&d);
    }
    bench_mock_stop(m);
}

static char *run_with_log(const bench_config *c0, const bench_dataset *d, bench_result **r)
{
    char *text = NULL;
    size_t n = 0;
    FILE *log = open_memstream(&text, &n);
    bench_config c = *c0;
    c.log = log;
    bench_run_info info;
    *r = run_set(&c, d, &info);
    fclose(log);
    return text;
}

/* HTTP errors fail their requests, keep the server's message, and count as
 * failed in the summary; the others complete. */
static void test_http_errors(void)
{
    bench_mock_opts mo = {.first_token_s = 0.002, .itl_s = 0.001, .fail_every = 3};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_FATAL(m != NULL);
    bench_dataset d = random_set(9, 16, 3, 7);
    bench_config c = config_for(m, BENCH_API_COMPLETIONS);
    c.max_concurrency = 1;          /* the mock's count follows the send order */
    bench_result *r;
    char *log = run_with_log(&c, &d, &r);
    for (size_t i = 0; i < d.n; i++) {
        if (i % 3 == 2) {
            CU_ASSERT_PTR_NOT_NULL_FATAL(r[i].error);
            CU_ASSERT(strstr(r[i].error, "HTTP 500") && strstr(r[i].error, "mock failure on request"));
            CU_ASSERT_EQUAL(r[i].http_status, 500);
            CU_ASSERT_EQUAL(r[i].finish, TR_FINISH_ERROR);
        } else {
            CU_ASSERT_PTR_NULL(r[i].error);
        }
    }
    CU_ASSERT(strstr(log, "request 2 failed: HTTP 500: mock failure on request 3") != NULL);
    metrics_summary s;
    CU_ASSERT_FATAL(bench_summarize(&d, r, NULL, &s, &e) == 0);
    CU_ASSERT_EQUAL(s.completed, 6);
    CU_ASSERT_EQUAL(s.failed, 3);
    CU_ASSERT_EQUAL(s.total_output_tokens, 18);
    free(log);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    bench_mock_stop(m);

    /* A prompt over the server's context: 400 with its OpenAI error message. */
    bench_mock_opts small = {.first_token_s = 0.001, .itl_s = 0.001, .max_prompt = 100};
    m = bench_mock_start(&small, &e);
    CU_ASSERT_FATAL(m != NULL);
    d = random_set(2, 200, 2, 8);
    c = config_for(m, BENCH_API_COMPLETIONS);
    bench_run_info info;
    r = run_set(&c, &d, &info);
    for (size_t i = 0; i < d.n; i++) {
        CU_ASSERT_PTR_NOT_NULL_FATAL(r[i].error);
        CU_ASSERT_STRING_EQUAL(r[i].error, "HTTP 400: prompt of 200 tokens is longer than the context (100)");
    }
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    bench_mock_stop(m);
}

/* A broken stream or an error event mid-stream fails the request with a
 * message that says which. */
static void test_bad_streams(void)
{
    for (int kind = 0; kind < 2; kind++) {
        bench_mock_opts mo = {.first_token_s = 0.002, .itl_s = 0.001};
        if (kind == 0) mo.malformed_after = 2;
        else mo.error_after = 2;
        rh_err e;
        bench_mock *m = bench_mock_start(&mo, &e);
        CU_ASSERT_FATAL(m != NULL);
        bench_dataset d = random_set(3, 16, 5, 9);
        bench_config c = config_for(m, BENCH_API_COMPLETIONS);
        bench_run_info info;
        bench_result *r = run_set(&c, &d, &info);
        for (size_t i = 0; i < d.n; i++) {
            CU_ASSERT_PTR_NOT_NULL_FATAL(r[i].error);
            CU_ASSERT(strstr(r[i].error, kind == 0 ? "malformed event" : "error event: mock error event") != NULL);
            CU_ASSERT_EQUAL(r[i].n_chunks, 2);
        }
        metrics_summary s;
        CU_ASSERT_FATAL(bench_summarize(&d, r, NULL, &s, &e) == 0);
        CU_ASSERT_EQUAL(s.completed, 0);
        CU_ASSERT_EQUAL(s.failed, 3);
        bench_results_free(r, d.n);
        bench_dataset_free(&d);
        bench_mock_stop(m);
    }
}

/* The key goes out as a bearer token; a wrong one is the server's 401. */
static void test_api_key(void)
{
    bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.001, .api_key = "sk-test"};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_FATAL(m != NULL);
    bench_dataset d = random_set(2, 8, 2, 15);
    bench_config c = config_for(m, BENCH_API_COMPLETIONS);
    const char *keys[] = {"sk-test", "sk-wrong", NULL};
    for (int k = 0; k < 3; k++) {
        c.api_key = keys[k];
        bench_run_info info;
        bench_result *r = run_set(&c, &d, &info);
        for (size_t i = 0; i < d.n; i++) {
            if (k == 0) {
                CU_ASSERT_PTR_NULL(r[i].error);
            } else {
                CU_ASSERT(r[i].error && !strcmp(r[i].error, "HTTP 401: invalid api key"));
            }
        }
        bench_results_free(r, d.n);
    }
    bench_dataset_free(&d);
    bench_mock_stop(m);
}

/* A port that was just closed: nothing listens there. */
static uint16_t dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

static void test_unreachable_server(void)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u", (unsigned)dead_port());
    bench_config c;
    memset(&c, 0, sizeof c);
    c.base_url = url;
    c.endpoint = "/v1/completions";
    c.model = "m";
    c.stream = 1;
    rh_err e;
    char *model = NULL;
    CU_ASSERT_EQUAL(bench_probe(&c, &model, &e), -1);
    CU_ASSERT(strstr(e.msg, "cannot reach the server at") && strstr(e.msg, url));
    CU_ASSERT_PTR_NULL(model);
    bench_dataset d = random_set(2, 8, 2, 10);
    bench_run_info info;
    bench_result *r = run_set(&c, &d, &info);
    for (size_t i = 0; i < d.n; i++) {
        CU_ASSERT_PTR_NOT_NULL_FATAL(r[i].error);
        CU_ASSERT(strstr(r[i].error, "onnect") != NULL);      /* curl: "Couldn't connect to server" */
        CU_ASSERT_EQUAL(r[i].http_status, 0);
    }
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
}

static void test_probe_finds_model(void)
{
    bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.001};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_FATAL(m != NULL);
    bench_config c = config_for(m, BENCH_API_COMPLETIONS);
    char *model = NULL;
    CU_ASSERT_EQUAL_FATAL(bench_probe(&c, &model, &e), 0);
    CU_ASSERT_STRING_EQUAL(model, "mock-model");
    free(model);
    bench_mock_stop(m);
}

/* The shared-prefix dataset shares real tokens: a server with a perfect
 * prefix cache hits exactly the system prompts after each group's first. */
static void test_shared_prefix_is_real(void)
{
    bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.001, .cache_block = 16};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_FATAL(m != NULL);
    bench_shared_prefix_opts so = {.num_groups = 3, .prompts_per_group = 4, .system_prompt_len = 64,
                                   .question_len = 24, .output_len = 2, .seed = 1};
    bench_dataset d;
    CU_ASSERT_FATAL(bench_dataset_shared_prefix(&d, &so, 16, &e) == 0);
    CU_ASSERT_EQUAL(d.n, 12);
    bench_config c = config_for(m, BENCH_API_COMPLETIONS);
    c.max_concurrency = 1;
    bench_run_info info;
    bench_result *r = run_set(&c, &d, &info);
    int seen[3] = {0};
    uint64_t expect = 0;
    for (size_t i = 0; i < d.n; i++) {
        CU_ASSERT_PTR_NULL(r[i].error);
        CU_ASSERT(r[i].has_cached);
        size_t g = (size_t)(d.items[i].hashes - d.hash_pool);
        CU_ASSERT_EQUAL(r[i].cached_tokens, seen[g] ? 64 : 0);
        expect += seen[g] ? 64 : 0;
        seen[g] = 1;
    }
    metrics_summary s;
    CU_ASSERT_FATAL(bench_summarize(&d, r, NULL, &s, &e) == 0);
    CU_ASSERT_EQUAL(s.cached_tokens, expect);
    CU_ASSERT_EQUAL(expect, 9 * 64);
    CU_ASSERT_DOUBLE_EQUAL(s.cache_hit_rate, (double)expect / (12.0 * 88), 1e-12);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);

    /* Random prompts share nothing. */
    d = random_set(6, 64, 2, 12);
    r = run_set(&c, &d, &info);
    for (size_t i = 0; i < d.n; i++) CU_ASSERT_EQUAL(r[i].cached_tokens, 0);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    bench_mock_stop(m);
}

/* A session's next turn waits for the previous turn's answer, even when it
 * is due earlier. */
static void test_session_order(void)
{
    bench_mock_opts mo = {.first_token_s = 0.030, .itl_s = 0.002};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_FATAL(m != NULL);
    bench_dataset d = random_set(4, 16, 3, 13);
    /* 0 -> 2 is one session; 1 and 3 are free. All due at once. */
    d.items[0].session_id = d.items[2].session_id = 5;
    d.items[2].turn = 1;
    d.items[2].after = 0;
    bench_config c = config_for(m, BENCH_API_COMPLETIONS);
    bench_run_info info;
    bench_result *r = run_set(&c, &d, &info);
    for (size_t i = 0; i < d.n; i++) CU_ASSERT_PTR_NULL(r[i].error);
    CU_ASSERT(r[2].send >= r[0].send + r[0].e2e);
    CU_ASSERT(r[3].send < r[0].send + r[0].e2e);
    CU_ASSERT(r[1].send < 0.005 && r[3].send < 0.005);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    bench_mock_stop(m);
}

static void *stop_later(void *arg)
{
    (void)arg;
    usleep(150 * 1000);
    bench_stop();
    return NULL;
}

/* Stopping aborts what is in flight and leaves the rest unsent. */
static void test_stop_aborts(void)
{
    bench_mock_opts mo = {.first_token_s = 0.010, .itl_s = 0.050};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_FATAL(m != NULL);
    bench_dataset d = random_set(6, 16, 20, 14);     /* 1 s each */
    bench_config c = config_for(m, BENCH_API_COMPLETIONS);
    c.max_concurrency = 2;
    pthread_t t;
    pthread_create(&t, NULL, stop_later, NULL);
    bench_run_info info;
    bench_result *r = run_set(&c, &d, &info);
    pthread_join(t, NULL);
    CU_ASSERT(info.interrupted);
    for (size_t i = 0; i < d.n; i++) {
        CU_ASSERT_EQUAL(r[i].sent, i < 2);
        if (i < 2) CU_ASSERT_EQUAL(r[i].finish, TR_FINISH_ABORT);
    }
    metrics_summary s;
    CU_ASSERT_FATAL(bench_summarize(&d, r, NULL, &s, &e) == 0);
    CU_ASSERT_EQUAL(s.failed, 2);
    CU_ASSERT_EQUAL(s.completed, 0);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    bench_mock_stop(m);
}

void register_test_bench(void)
{
    CU_pSuite s = CU_add_suite("bench", NULL, NULL);
    CU_add_test(s, "timing matches the server's schedule and log", test_timing_matches_schedule);
    CU_add_test(s, "concurrency cap", test_concurrency_cap);
    CU_add_test(s, "request rate schedule", test_request_rate_schedule);
    CU_add_test(s, "arrival statistics", test_arrival_statistics);
    CU_add_test(s, "usage and multi-token chunks", test_usage_and_multi_token_chunks);
    CU_add_test(s, "chat and non-streamed", test_chat_and_no_stream);
    CU_add_test(s, "HTTP errors", test_http_errors);
    CU_add_test(s, "malformed stream and error event", test_bad_streams);
    CU_add_test(s, "unreachable server", test_unreachable_server);
    CU_add_test(s, "api key", test_api_key);
    CU_add_test(s, "probe finds the model", test_probe_finds_model);
    CU_add_test(s, "shared prefix is real on the server", test_shared_prefix_is_real);
    CU_add_test(s, "session order", test_session_order);
    CU_add_test(s, "stop aborts in-flight requests", test_stop_aborts);
}
