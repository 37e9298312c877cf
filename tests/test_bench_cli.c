/* test_bench_cli.c — `rehearse bench` end to end against the mock server in
 * this process: the table, the JSON (vLLM's fields plus the run's settings)
 * and the recorded trace agree with each other; bad flags, dead servers and
 * runs where everything failed exit 1 with a message that says why. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/bench_mock.h"
#include "traces/import/import.h"
#include "traces/metrics/metrics.h"
#include "testutil.h"

static char out[16384];

static int bench(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "REHEARSE_PROGRESS=0 %s bench %s", tu_bin(), args);
    return tu_run(cmd, out, sizeof out);
}

static void test_run_json_and_trace_agree(void)
{
    bench_mock_opts mo = {.first_token_s = 0.010, .itl_s = 0.002, .vocab_size = 32000};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char json[256], trace[256], args[2048];
    tu_tmp_path("bench_cli.json", json, sizeof json);
    tu_tmp_path("bench_cli.rhtr", trace, sizeof trace);
    snprintf(args, sizeof args,
             "--base-url %s/ --num-prompts 8 --random-input-len 32 --random-output-len 5 --max-concurrency 3 "
             "--request-rate 200 --seed 3 --slo-ttft 1000 --result-json %s --record-trace %s --save-detailed",
             bench_mock_url(m), json, trace);
    int rc = bench(args);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc) printf("\n%s\n", out);
    CU_ASSERT(strstr(out, "Serving Benchmark Result") != NULL);
    CU_ASSERT(strstr(out, "model mock-model") != NULL);                 /* found through /v1/models */
    CU_ASSERT(strstr(out, "Successful requests:                     8 ") != NULL);
    CU_ASSERT(strstr(out, "Failed requests:                         0 ") != NULL);   /* always, as vLLM prints it */
    CU_ASSERT(strstr(out, "Total generated tokens:                  40 ") != NULL);
    CU_ASSERT(strstr(out, "Initial test run completed.") != NULL);
    CU_ASSERT(strstr(out, "Maximum request concurrency: 3") != NULL);

    json_error_t je;
    json_t *j = json_load_file(json, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "completed")), 8);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "total_input_tokens")), 8 * 32);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "total_output_tokens")), 40);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "num_prompts")), 8);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "max_concurrency")), 3);
    CU_ASSERT(json_integer_value(json_object_get(j, "max_inflight")) <= 3);
    CU_ASSERT_EQUAL(json_real_value(json_object_get(j, "request_rate")), 200);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "model_id")), "mock-model");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "backend")), "openai");
    /* the mock has no /metrics: no server-side figures, rather than zeros */
    CU_ASSERT(!json_object_get(j, "steps") && !json_object_get(j, "retractions") && !json_object_get(j, "busy_time"));
    CU_ASSERT_EQUAL(json_real_value(json_object_get(j, "slo_ttft_ms")), 1000);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "good_requests")), 8);
    json_t *ttfts = json_object_get(j, "ttfts"), *itls = json_object_get(j, "itls");
    CU_ASSERT_EQUAL_FATAL(json_array_size(ttfts), 8);
    CU_ASSERT_EQUAL(json_array_size(json_array_get(itls, 0)), 4);
    double mean = 0;
    for (size_t i = 0; i < 8; i++) mean += json_real_value(json_array_get(ttfts, i)) * 1e3 / 8;
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "mean_ttft_ms")), mean, 1e-9);
    CU_ASSERT(json_real_value(json_object_get(j, "mean_ttft_ms")) >= 10);

    /* The trace, summarized on its own, gives the JSON's numbers. */
    tr_trace t;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(trace, &t, &e), 0);
    CU_ASSERT_EQUAL(t.n_requests, 8);
    CU_ASSERT_EQUAL(t.header.block_size, 16);
    CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "max_concurrency"), "3");
    metrics_slo slo = {.ttft_ms = 1000};
    metrics *mt = metrics_new(&slo);
    for (size_t i = 0; i < t.n_requests; i++) {
        CU_ASSERT_EQUAL(t.requests[i].n_hashes, 2);
        CU_ASSERT_EQUAL(t.requests[i].n_times, 5);
        metrics_add_request(mt, &t.requests[i]);
    }
    metrics_summary s;
    metrics_summarize(mt, &s);
    const struct { const char *field; double v; } same[] = {
        {"mean_ttft_ms", s.ttft_ms.mean},   {"p99_tpot_ms", s.tpot_ms.p99},   {"median_itl_ms", s.itl_ms.median},
        {"max_e2el_ms", s.e2el_ms.max},     {"duration", s.duration},         {"request_goodput", s.request_goodput},
        {"output_throughput", s.output_throughput},
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        double v = json_real_value(json_object_get(j, same[i].field));
        CU_ASSERT_DOUBLE_EQUAL(v, same[i].v, 1e-9 * (1 + v));
        if (v == 0) printf("\n  %s is 0\n", same[i].field);
    }
    metrics_free(mt);
    tr_trace_free(&t);
    json_decref(j);
    bench_mock_stop(m);
}

/* Goodput counts only the requests within every SLO. Output lengths spread
 * over 2..8 tokens 100 ms apart, so E2E runs from 110 to 710 ms, and an
 * E2E bound of 450 ms splits the requests whatever the machine's load: the
 * mock sends each token at its deadline, never before, so a request of 6
 * tokens or more (510 ms at the least) is always outside it, and one of 2
 * (110 ms) is inside unless the load delays it by 340 ms. The count in the
 * JSON equals the count made by hand from the recorded trace, and is
 * neither none nor all (else the SLO was not what decided). */
static void test_goodput_counts_every_slo(void)
{
    bench_mock_opts mo = {.first_token_s = 0.010, .itl_s = 0.100, .vocab_size = 32000};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char json[256], trace[256], args[2048];
    tu_tmp_path("bench_goodput.json", json, sizeof json);
    tu_tmp_path("bench_goodput.rhtr", trace, sizeof trace);
    snprintf(args, sizeof args,
             "--base-url %s --num-prompts 12 --random-input-len 16 --random-output-len 5 --random-range-ratio 0.6 "
             "--max-concurrency 12 --seed 5 --slo-ttft 1000 --slo-e2e 450 --result-json %s --record-trace %s",
             bench_mock_url(m), json, trace);
    int rc = bench(args);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc) printf("\n%s\n", out);
    json_error_t je;
    json_t *j = json_load_file(json, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    tr_trace t;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(trace, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_requests, 12);
    long good = 0, shortest = 0, longer = 0;
    for (size_t i = 0; i < t.n_requests; i++) {
        const tr_request *q = &t.requests[i];
        good += q->ttft * 1e3 <= 1000 && q->e2e * 1e3 <= 450;
        shortest += q->output_len == 2;
        longer += q->output_len >= 6;
    }
    printf("(%ld of 12 within the SLOs) ", good);
    CU_ASSERT(shortest > 0 && longer > 0);   /* the seed's lengths: some on either side */
    CU_ASSERT(good > 0 && good < 12);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "good_requests")), good);
    double duration = json_real_value(json_object_get(j, "duration"));
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "request_goodput")), good / duration, 1e-9);
    CU_ASSERT(json_real_value(json_object_get(j, "request_goodput")) <
              json_real_value(json_object_get(j, "request_throughput")));
    tr_trace_free(&t);
    json_decref(j);
    bench_mock_stop(m);
}

/* A trace as the dataset: its arrivals (scaled) and lengths come through. */
static void test_trace_dataset_from_cli(void)
{
    char in[256], rec[256], args[2048];
    tu_tmp_path("bench_cli_in.rhtr", in, sizeof in);
    tu_tmp_path("bench_cli_rec.rhtr", rec, sizeof rec);
    tr_header h;
    tr_header_init(&h);
    rh_err e;
    tr_writer *w = tr_writer_open(in, &h, 0, &e);
    tr_header_free(&h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    for (int i = 0; i < 6; i++) {
        tr_request r;
        memset(&r, 0, sizeof r);
        r.id = (uint64_t)i;
        r.arrival = 100.0 + 0.2 * i;         /* every 200 ms; scaled by 4: every 50 ms */
        r.input_len = 10 + (uint32_t)i;
        r.output_len = 2 + (uint32_t)i % 3;
        CU_ASSERT_EQUAL_FATAL(tr_write_request(w, &r, &e), 0);
    }
    CU_ASSERT_EQUAL_FATAL(tr_writer_close(w, &e), 0);
    bench_mock_opts mo = {.first_token_s = 0.002, .itl_s = 0.001, .vocab_size = 32000};
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    snprintf(args, sizeof args, "--base-url %s --model mock-model --dataset-name trace --dataset-path %s "
             "--rate-scale 4 --record-trace %s", bench_mock_url(m), in, rec);
    int rc = bench(args);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc) printf("\n%s\n", out);
    CU_ASSERT(strstr(out, "Traffic: the trace's arrivals, time-scaled") != NULL);
    tr_trace t;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(rec, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_requests, 6);
    CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "request_rate"), "trace");
    for (size_t i = 0; i < 6; i++) {
        const tr_request *q = &t.requests[i];
        CU_ASSERT_EQUAL(q->id, i);
        CU_ASSERT(q->arrival >= 0.05 * (double)i && q->arrival < 0.05 * (double)i + 0.25);
        CU_ASSERT_EQUAL(q->input_len, 10 + i);
        CU_ASSERT_EQUAL(q->output_len, 2 + i % 3);
        CU_ASSERT_EQUAL(q->finish, TR_FINISH_LENGTH);
    }
    tr_trace_free(&t);
    bench_mock_stop(m);
}

/* Each bad invocation exits 1 with one message that names the problem. */
static void test_bad_flags(void)
{
    const struct { const char *args, *says; } cases[] = {
        {"--no-such-flag 1", "unknown flag --no-such-flag"},
        {"--request-rate 0", "--request-rate: '0' must be above 0"},
        {"--request-rate fast", "--request-rate: 'fast' is not a number"},
        {"--burstiness -1", "--burstiness"},
        {"--max-concurrency 0", "--max-concurrency must be at least 1"},
        {"--num-prompts 0", "--num-prompts"},
        {"--dataset sonnet", "--dataset: 'sonnet' is not random, shared-prefix, trace, sharegpt, custom"},
        {"--dataset sharegpt", "--dataset sharegpt needs a file"},
        {"--sharegpt-output-len 5", "--sharegpt-output-len is for --dataset sharegpt"},
        {"--dataset trace", "--dataset trace needs a file"},
        {"--dataset trace build/tmp/definitely-absent.rhtr", "definitely-absent.rhtr"},
        {"--rate-scale 2", "--rate-scale applies to --dataset trace"},
        {"--random-range-ratio 1.5", "--random-range-ratio must be in [0, 1)"},
        {"--random-input-len 0", "--random-input-len: 0 is outside"},
        {"--random-output-len 99999999999", "--random-output-len"},
        {"--endpoint v1/completions", "--endpoint: 'v1/completions' must be a path"},
        {"--base-url localhost:8000", "--base-url: 'localhost:8000' must start with http://"},
        {"--port 70000", "--port: 70000 is not a TCP port"},
        {"--vocab-size 1", "--vocab-size"},
        {"--disable-stream=1", "--disable-stream takes no value"},
        {"--seed", "flag --seed needs a value"},
        {"stray", "unexpected argument 'stray'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = bench(cases[i].args);
        CU_ASSERT_EQUAL(rc, 1);
        int ok = strstr(out, "rehearse bench: ") && strstr(out, cases[i].says);
        CU_ASSERT(ok);
        if (rc != 1 || !ok) printf("\n  '%s' gave %d: %s\n", cases[i].args, rc, out);
    }
    CU_ASSERT_EQUAL(bench("--help"), 0);
    CU_ASSERT(strstr(out, "--max-concurrency") && strstr(out, "--record-trace"));
}

static void test_dead_server_and_failed_runs(void)
{
    /* Nothing listens on port 1. */
    CU_ASSERT_EQUAL(bench("--base-url http://127.0.0.1:1 --num-prompts 2"), 1);
    CU_ASSERT(strstr(out, "cannot reach the server at http://127.0.0.1:1") != NULL);
    CU_ASSERT(strstr(out, "Serving Benchmark Result") == NULL);

    /* A broken setup fails in the initial test request, with the server's
     * message, before any run (vLLM's client does the same). */
    bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.001, .max_prompt = 10, .vocab_size = 32000};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char args[1024], json[256];
    tu_tmp_path("bench_failed.json", json, sizeof json);
    remove(json);
    snprintf(args, sizeof args, "--base-url %s --num-prompts 3 --random-input-len 20 --random-output-len 2 "
             "--result-json %s", bench_mock_url(m), json);
    CU_ASSERT_EQUAL(bench(args), 1);
    CU_ASSERT(strstr(out, "the initial test request failed: HTTP 400: prompt of 20 tokens is longer than the "
                          "context (10)") != NULL);
    CU_ASSERT(strstr(out, "Serving Benchmark Result") == NULL);
    CU_ASSERT(!tu_file_exists(json));
    bench_mock_stop(m);

    /* Every measured request fails (the test request passed): the table
     * still prints, the first error is shown, the result is written, and
     * the exit status says the run produced nothing. */
    bench_mock_opts mf = {.first_token_s = 0.001, .itl_s = 0.001, .fail_from = 2, .vocab_size = 32000};
    m = bench_mock_start(&mf, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    snprintf(args, sizeof args, "--base-url %s --num-prompts 3 --random-input-len 20 --random-output-len 2 "
             "--result-json %s", bench_mock_url(m), json);
    CU_ASSERT_EQUAL(bench(args), 1);
    CU_ASSERT(strstr(out, "Failed requests:                         3 ") != NULL);
    CU_ASSERT(strstr(out, "3 requests failed; the first: HTTP 500: mock failure on request") != NULL);
    CU_ASSERT(strstr(out, "no request completed against") != NULL);
    CU_ASSERT(tu_file_exists(json));        /* the result is still written: it says what failed */

    /* --verbose: one line per failure (a fresh mock: its count starts again). */
    bench_mock_stop(m);
    m = bench_mock_start(&mf, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    snprintf(args, sizeof args, "--base-url %s --num-prompts 2 --random-input-len 20 --random-output-len 2 --verbose",
             bench_mock_url(m));
    CU_ASSERT_EQUAL(bench(args), 1);
    CU_ASSERT(strstr(out, "request 0 failed: HTTP 500") && strstr(out, "request 1 failed: HTTP 500"));
    bench_mock_stop(m);
    m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    /* Only /v1/chat/completions and /v1/completions exist on the mock. */
    snprintf(args, sizeof args, "--base-url %s --num-prompts 1 --random-input-len 2 --endpoint /v2/generate",
             bench_mock_url(m));
    CU_ASSERT_EQUAL(bench(args), 1);
    CU_ASSERT(strstr(out, "HTTP 404: no such route") != NULL);
    bench_mock_stop(m);
}

/* The flags vLLM's and SGLang's users type, each checked against what the
 * mock saw or against another flag that means the same. */
static void test_their_flags(void)
{
    rh_err e;
    char args[2048], a[256], b[256];
    /* No vocabulary size from the server and token-id prompts: refused,
     * naming the flag; given, it runs. */
    bench_mock_opts plain = {.first_token_s = 0.001, .itl_s = 0.001};
    bench_mock *m = bench_mock_start(&plain, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    snprintf(args, sizeof args, "--base-url %s --num-prompts 2 --random-input-len 8 --random-output-len 2",
             bench_mock_url(m));
    CU_ASSERT_EQUAL(bench(args), 1);
    CU_ASSERT(strstr(out, "does not say its vocabulary size") && strstr(out, "--vocab-size"));
    snprintf(args, sizeof args, "--base-url %s --num-prompts 2 --random-input-len 8 --random-output-len 2 "
             "--vocab-size 500 --num-warmups 3 --extra-body '{\"max_tokens\": 3, \"top_k\": 1}'", bench_mock_url(m));
    CU_ASSERT_EQUAL(bench(args), 0);
    const bench_mock_request *q;
    size_t n = bench_mock_requests(m, &q);
    CU_ASSERT_EQUAL(n, 1 + 3 + 2);   /* the test request, the warmups, the run */
    for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(q[i].max_tokens, 3);   /* --extra-body wins */
    bench_mock_stop(m);

    /* --header carries what --api-key would. */
    bench_mock_opts keyed = {.first_token_s = 0.001, .itl_s = 0.001, .vocab_size = 1000, .api_key = "k9"};
    m = bench_mock_start(&keyed, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    snprintf(args, sizeof args, "--base-url %s --num-prompts 2 --random-input-len 8 --random-output-len 2",
             bench_mock_url(m));
    CU_ASSERT_EQUAL(bench(args), 1);
    CU_ASSERT(strstr(out, "initial test request failed: HTTP 401") != NULL);
    snprintf(args, sizeof args, "--base-url %s --num-prompts 2 --random-input-len 8 --random-output-len 2 "
             "--header 'Authorization=Bearer k9'", bench_mock_url(m));
    CU_ASSERT_EQUAL(bench(args), 0);
    bench_mock_stop(m);

    /* --goodput sets what --slo-* set (each key its SLO), and the count is
     * the hand count of its own recorded requests within them (two runs'
     * latencies differ, so the count is compared within one run); the
     * selected percentiles are the keys. */
    bench_mock_opts mo = {.first_token_s = 0.010, .itl_s = 0.010, .vocab_size = 32000};
    m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char rec[256];
    tu_tmp_path("bench_goodput_a.json", a, sizeof a);
    tu_tmp_path("bench_goodput_b.json", b, sizeof b);
    tu_tmp_path("bench_goodput_a.rhtr", rec, sizeof rec);
    const char *common = "--num-prompts 12 --random-input-len 16 --random-output-len 5 --random-range-ratio 0.6 "
                         "--max-concurrency 4 --seed 5";
    snprintf(args, sizeof args, "--base-url %s %s --goodput ttft:1000 tpot:900 e2el:45 --percentile-metrics ttft,e2el "
             "--metric-percentiles 50,90 --result-json %s --record-trace %s", bench_mock_url(m), common, a, rec);
    CU_ASSERT_EQUAL(bench(args), 0);
    CU_ASSERT(strstr(out, "P90 E2EL (ms):") && strstr(out, "P50 TTFT (ms):") && !strstr(out, "TPOT"));
    CU_ASSERT(strstr(out, "Peak output token throughput (tok/s):") && strstr(out, "Peak concurrent requests:"));
    snprintf(args, sizeof args, "--base-url %s %s --result-json %s", bench_mock_url(m), common, b);
    CU_ASSERT_EQUAL(bench(args), 0);
    json_t *ja = json_load_file(a, 0, NULL), *jb = json_load_file(b, 0, NULL);
    CU_ASSERT_FATAL(ja && jb);
    CU_ASSERT_EQUAL(json_real_value(json_object_get(ja, "slo_ttft_ms")), 1000);
    CU_ASSERT_EQUAL(json_real_value(json_object_get(ja, "slo_tpot_ms")), 900);
    CU_ASSERT_EQUAL(json_real_value(json_object_get(ja, "slo_e2el_ms")), 45);
    tr_trace t;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(rec, &t, &e), 0);
    json_int_t good = 0;
    for (size_t i = 0; i < t.n_requests; i++) {
        const tr_request *q = &t.requests[i];
        double tpot = q->output_len > 1 ? (q->e2e - q->ttft) / (q->output_len - 1) : 0;
        good += q->ttft * 1e3 <= 1000 && tpot * 1e3 <= 900 && q->e2e * 1e3 <= 45;
    }
    tr_trace_free(&t);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(ja, "good_requests")), good);
    CU_ASSERT(json_is_null(json_object_get(jb, "request_goodput")));   /* no SLOs: null, as vLLM writes it */
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(ja, "p50_ttft_ms")),
                           json_real_value(json_object_get(ja, "median_ttft_ms")), 1e-9);
    CU_ASSERT(json_object_get(ja, "p90_e2el_ms") && json_object_get(ja, "p50_e2el_ms"));
    CU_ASSERT(json_object_get(jb, "p99_itl_ms") && !json_object_get(jb, "p50_ttft_ms"));   /* vLLM's defaults: 99 */
    json_int_t peak = json_integer_value(json_object_get(ja, "max_concurrent_requests"));
    CU_ASSERT(peak >= 1 && peak <= 4);   /* in flight at once: never above --max-concurrency */
    double tps = json_real_value(json_object_get(ja, "max_output_tokens_per_s"));
    CU_ASSERT(tps > 0 && tps <= json_integer_value(json_object_get(ja, "total_output_tokens")));
    json_decref(ja);
    json_decref(jb);

    /* SGLang's --random-range-ratio under --backend sglang-oai: [L*R, L];
     * vLLM's under --backend vllm: [L(1-R), L(1+R)]. */
    for (int k = 0; k < 2; k++) {
        char rec[256];
        tu_tmp_path(k ? "bench_rr_vllm.rhtr" : "bench_rr_sglang.rhtr", rec, sizeof rec);
        snprintf(args, sizeof args, "--base-url %s --backend %s --num-prompts 40 --random-input-len 100 "
                 "--random-output-len 2 --random-range-ratio 0.5 --record-trace %s", bench_mock_url(m),
                 k ? "vllm" : "sglang-oai", rec);
        CU_ASSERT_EQUAL(bench(args), 0);
        if (!k) {
            CU_ASSERT(strstr(out, "Backend:                                 sglang-oai") != NULL);
            CU_ASSERT(strstr(out, "Concurrency:") && strstr(out, "P95 ITL (ms):"));
        }
        tr_trace t;
        CU_ASSERT_EQUAL_FATAL(tr_trace_load(rec, &t, &e), 0);
        uint32_t lo = UINT32_MAX, hi = 0;
        for (size_t i = 0; i < t.n_requests; i++) {
            if (t.requests[i].input_len < lo) lo = t.requests[i].input_len;
            if (t.requests[i].input_len > hi) hi = t.requests[i].input_len;
        }
        bool in_range = k ? lo >= 50 && hi <= 150 && hi > 100 : lo >= 50 && hi <= 100 && lo < 75;
        if (!in_range) printf("\n  range ratio under %s: lengths %u..%u\n", k ? "vllm" : "sglang-oai", lo, hi);
        CU_ASSERT(in_range);
        tr_trace_free(&t);
    }
    bench_mock_stop(m);

    const struct { const char *args, *says; } bad[] = {
        {"--backend tgi", "--backend: 'tgi' is not"},
        {"--goodput ttft", "--goodput: 'ttft' must be KEY:MS"},
        {"--goodput itl:5", "--goodput: 'itl' is not ttft, tpot or e2el"},
        {"--goodput", "--goodput needs at least one KEY:MS"},
        {"--header novalue", "--header: 'novalue' must be NAME=VALUE"},
        {"--extra-body '[1]'", "--extra-body: '[1]' is not a JSON object"},
        {"--percentile-metrics ttft,foo", "--percentile-metrics: 'foo' is not one of"},
        {"--metric-percentiles 50,100", "--metric-percentiles: '100' is not a percentile"},
        {"--backend sglang --random-range-ratio 2", "must be in [0, 1] under --backend sglang"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "--base-url http://127.0.0.1:1 %s", bad[i].args);
        int rc = bench(args);
        int ok = rc == 1 && strstr(out, bad[i].says);
        if (!ok) printf("\n  '%s' gave %d: %s\n", bad[i].args, rc, out);
        CU_ASSERT(ok);
    }
}

void register_test_bench_cli(void)
{
    CU_pSuite s = CU_add_suite("bench_cli", NULL, NULL);
    CU_add_test(s, "run, JSON and trace agree", test_run_json_and_trace_agree);
    CU_add_test(s, "goodput counts only requests within every SLO", test_goodput_counts_every_slo);
    CU_add_test(s, "trace dataset from the command line", test_trace_dataset_from_cli);
    CU_add_test(s, "bad flags", test_bad_flags);
    CU_add_test(s, "dead server and failed runs", test_dead_server_and_failed_runs);
    CU_add_test(s, "vLLM's and SGLang's flags: vocabulary, warmups, extra body, headers, goodput, percentiles, "
                   "range ratio", test_their_flags);
}
