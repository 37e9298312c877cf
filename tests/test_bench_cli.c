/* test_bench_cli.c — `rehearse bench` end to end against the mock server in
 * this process: the table, the JSON (vLLM's fields plus the run's settings)
 * and the recorded trace agree with each other; bad flags, dead servers and
 * runs where everything failed exit 1 with a message that says why. */
#include <CUnit/CUnit.h>
#include <jansson.h>
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
    bench_mock_opts mo = {.first_token_s = 0.010, .itl_s = 0.002};
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
    CU_ASSERT(strstr(out, "Successful requests:                                8") != NULL);
    CU_ASSERT(strstr(out, "Total generated tokens:                            40") != NULL);
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
 * over 2..8 tokens at 10 ms apart, so E2E runs from about 20 to 80 ms and
 * an E2E bound of 45 ms splits the requests; the count in the JSON equals
 * the count made by hand from the recorded trace, and is neither none nor
 * all (else the SLO was not what decided). */
static void test_goodput_counts_every_slo(void)
{
    bench_mock_opts mo = {.first_token_s = 0.010, .itl_s = 0.010};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char json[256], trace[256], args[2048];
    tu_tmp_path("bench_goodput.json", json, sizeof json);
    tu_tmp_path("bench_goodput.rhtr", trace, sizeof trace);
    snprintf(args, sizeof args,
             "--base-url %s --num-prompts 12 --random-input-len 16 --random-output-len 5 --random-range-ratio 0.6 "
             "--max-concurrency 12 --seed 5 --slo-ttft 1000 --slo-e2e 45 --result-json %s --record-trace %s",
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
    long good = 0;
    for (size_t i = 0; i < t.n_requests; i++)
        good += t.requests[i].ttft * 1e3 <= 1000 && t.requests[i].e2e * 1e3 <= 45;
    printf("(%ld of 12 within the SLOs) ", good);
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
    bench_mock_opts mo = {.first_token_s = 0.002, .itl_s = 0.001};
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
        {"--dataset sharegpt", "--dataset: 'sharegpt' is not random, shared-prefix or trace"},
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

    /* Every request fails: the table still prints, the first error is shown,
     * and the exit status says the run produced nothing. */
    bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.001, .max_prompt = 10};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char args[1024], json[256];
    tu_tmp_path("bench_failed.json", json, sizeof json);
    snprintf(args, sizeof args, "--base-url %s --num-prompts 3 --random-input-len 20 --random-output-len 2 "
             "--result-json %s", bench_mock_url(m), json);
    CU_ASSERT_EQUAL(bench(args), 1);
    CU_ASSERT(strstr(out, "Failed or aborted requests:                         3") != NULL);
    CU_ASSERT(strstr(out, "3 requests failed; the first: HTTP 400: prompt of 20 tokens is longer than the context (10)") != NULL);
    CU_ASSERT(strstr(out, "no request completed against") != NULL);
    CU_ASSERT(tu_file_exists(json));        /* the result is still written: it says what failed */

    /* --verbose: one line per failure. */
    snprintf(args, sizeof args, "--base-url %s --num-prompts 2 --random-input-len 20 --random-output-len 2 --verbose",
             bench_mock_url(m));
    CU_ASSERT_EQUAL(bench(args), 1);
    CU_ASSERT(strstr(out, "request 0 failed: HTTP 400") && strstr(out, "request 1 failed: HTTP 400"));
    /* Only /v1/chat/completions and /v1/completions exist on the mock. */
    snprintf(args, sizeof args, "--base-url %s --num-prompts 1 --random-input-len 2 --endpoint /v2/generate",
             bench_mock_url(m));
    CU_ASSERT_EQUAL(bench(args), 1);
    CU_ASSERT(strstr(out, "HTTP 404: no such route") != NULL);
    bench_mock_stop(m);
}

void register_test_bench_cli(void)
{
    CU_pSuite s = CU_add_suite("bench_cli", NULL, NULL);
    CU_add_test(s, "run, JSON and trace agree", test_run_json_and_trace_agree);
    CU_add_test(s, "goodput counts only requests within every SLO", test_goodput_counts_every_slo);
    CU_add_test(s, "trace dataset from the command line", test_trace_dataset_from_cli);
    CU_add_test(s, "bad flags", test_bad_flags);
    CU_add_test(s, "dead server and failed runs", test_dead_server_and_failed_runs);
}
