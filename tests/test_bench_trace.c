/* test_bench_trace.c — traces in and out of the load generator: a trace
 * dataset keeps arrivals, lengths, hashes and sessions; its block hashes
 * become real shared prefixes on a server (the mock's perfect prefix cache
 * hits exactly where the hashes say); the client-side trace reads back with
 * the values measured, and summarizes to the same metrics. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "client/bench.h"
#include "client/bench_json.h"
#include "client/bench_mock.h"
#include "testutil.h"
#include "traces/import/import.h"

typedef struct spec {
    double arrival;
    uint32_t in, out;
    uint64_t session;
    uint32_t turn;
    uint32_t n_hashes;
    uint64_t hashes[6];
} spec;

/* Block size 16; written out of arrival order on purpose. */
static const spec specs[] = {
    {10.00, 40, 3, 0, 0, 2, {1, 2}},
    {10.20, 64, 4, 7, 0, 4, {1, 2, 3, 4}},
    {10.10, 33, 2, 0, 0, 3, {1, 5, 6}},
    {10.40, 80, 3, 7, 1, 5, {1, 2, 3, 4, 9}},
    {10.30, 0, 0, 0, 0, 0, {0}},
    {10.50, 48, 2, 0, 0, 3, {8, 2, 3}},
};
#define N_SPECS (sizeof specs / sizeof specs[0])

static void write_specs(const char *path, const char *arrival_mode)
{
    tr_header h;
    tr_header_init(&h);
    h.block_size = 16;
    if (arrival_mode) {
        tr_header_set(&h, "arrival", arrival_mode);
        tr_header_set(&h, "clients", "2");
    }
    rh_err e;
    tr_writer *w = tr_writer_open(path, &h, 0, &e);
    tr_header_free(&h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    for (size_t i = 0; i < N_SPECS; i++) {
        tr_request r;
        memset(&r, 0, sizeof r);
        r.id = 100 + i;
        r.arrival = arrival_mode ? 0 : specs[i].arrival;
        r.input_len = specs[i].in;
        r.output_len = specs[i].out;
        r.session_id = specs[i].session;
        r.turn = specs[i].turn;
        r.n_hashes = specs[i].n_hashes;
        r.hashes = specs[i].hashes;
        CU_ASSERT_EQUAL_FATAL(tr_write_request(w, &r, &e), 0);
    }
    CU_ASSERT_EQUAL_FATAL(tr_writer_close(w, &e), 0);
}

/* Arrival order of specs: 0, 2, 1, 4, 3, 5. */
static const size_t order[] = {0, 2, 1, 4, 3, 5};

static void test_trace_dataset(void)
{
    char path[256];
    tu_tmp_path("bench_ds.rhtr", path, sizeof path);
    write_specs(path, NULL);
    bench_dataset d;
    rh_err e;
    bench_trace_opts o = {.rate_scale = 2};
    CU_ASSERT_EQUAL_FATAL(bench_dataset_trace(&d, path, &o, &e), 0);
    CU_ASSERT_EQUAL_FATAL(d.n, N_SPECS);
    CU_ASSERT_EQUAL(d.gen_block_size, 16);
    CU_ASSERT_EQUAL(d.trace_block_size, 16);
    CU_ASSERT(d.hashes_from_source);
    CU_ASSERT_EQUAL(d.closed_loop_clients, 0);
    for (size_t k = 0; k < d.n; k++) {
        const spec *s = &specs[order[k]];
        const bench_item *it = &d.items[k];
        CU_ASSERT_EQUAL(it->id, 100 + order[k]);
        CU_ASSERT_DOUBLE_EQUAL(it->arrival, (s->arrival - 10.0) / 2, 1e-12);
        CU_ASSERT_EQUAL(it->input_len, s->in ? s->in : 1);       /* empty prompts are sent with one token */
        CU_ASSERT_EQUAL(it->output_len, s->out ? s->out : 1);
        CU_ASSERT_EQUAL(it->n_hashes, s->n_hashes);
        CU_ASSERT_EQUAL(memcmp(it->hashes, s->hashes, s->n_hashes * sizeof *it->hashes), 0);
        CU_ASSERT_EQUAL(it->session_id, s->session);
    }
    CU_ASSERT_EQUAL(d.items[4].after, 2);       /* session 7: turn 1 (spec 3) after turn 0 (spec 1) */
    CU_ASSERT_EQUAL(d.items[2].after, -1);
    bench_dataset_free(&d);
    o.num_prompts = 3;
    o.rate_scale = 1;
    CU_ASSERT_EQUAL_FATAL(bench_dataset_trace(&d, path, &o, &e), 0);
    CU_ASSERT_EQUAL(d.n, 3);
    CU_ASSERT_DOUBLE_EQUAL(d.items[2].arrival, 0.2, 1e-12);
    bench_dataset_free(&d);

    CU_ASSERT_EQUAL(bench_dataset_trace(&d, "build/tmp/no-such.rhtr", &o, &e), -1);
    CU_ASSERT(strstr(e.msg, "no-such.rhtr") != NULL);
    o.rate_scale = 0;
    CU_ASSERT_EQUAL(bench_dataset_trace(&d, path, &o, &e), -1);
    CU_ASSERT(strstr(e.msg, "--rate-scale") != NULL);
}

/* Tokens the mock should find cached: the leading full blocks whose hash
 * chain some earlier prompt already had — computed from the hashes alone. */
static uint32_t expected_cached(size_t k)
{
    const spec *s = &specs[order[k]];
    uint32_t full = s->in / 16 < s->n_hashes ? s->in / 16 : s->n_hashes, hit = 0;
    for (uint32_t b = 0; b < full; b++) {
        int seen = 0;
        for (size_t j = 0; j < k && !seen; j++) {
            const spec *t = &specs[order[j]];
            uint32_t tfull = t->in / 16 < t->n_hashes ? t->in / 16 : t->n_hashes;
            if (tfull > b && !memcmp(t->hashes, s->hashes, (b + 1) * sizeof *s->hashes)) seen = 1;
        }
        if (!seen) break;
        hit++;
    }
    return hit * 16;
}

static void test_trace_replay_shares_prefixes_and_records(void)
{
    char path[256], out[256];
    tu_tmp_path("bench_replay.rhtr", path, sizeof path);
    tu_tmp_path("bench_client.rhtr", out, sizeof out);
    write_specs(path, NULL);
    bench_mock_opts mo = {.first_token_s = 0.002, .itl_s = 0.001, .cache_block = 16, .fail_every = 6};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    bench_dataset d;
    bench_trace_opts o = {.rate_scale = 2};         /* 50 ms apart: one at a time on the server */
    CU_ASSERT_EQUAL_FATAL(bench_dataset_trace(&d, path, &o, &e), 0);
    bench_config c = {.base_url = bench_mock_url(m), .endpoint = "/v1/completions", .model = "mock-model",
                      .stream = 1};
    bench_result *r = calloc(d.n, sizeof *r);
    bench_run_info info;
    CU_ASSERT_EQUAL_FATAL(bench_run(&c, &d, r, &info, &e), 0);
    uint64_t cached = 0;
    for (size_t k = 0; k < d.n; k++) {
        CU_ASSERT(r[k].send >= d.items[k].arrival);
        if (k == 5) {                               /* the mock fails every sixth */
            CU_ASSERT_PTR_NOT_NULL(r[k].error);
            continue;
        }
        CU_ASSERT_PTR_NULL_FATAL(r[k].error);
        CU_ASSERT_EQUAL(r[k].cached_tokens, expected_cached(k));
        cached += r[k].cached_tokens;
    }
    /* By hand: spec 2 shares block [1]; spec 1 shares [1,2] with spec 0; spec 3
     * shares [1,2,3,4] with spec 1; spec 4 has no hashes; spec 5 failed. */
    CU_ASSERT_EQUAL(cached, 16 + 32 + 64);
    /* The client-side trace reads back with the measured values. */
    tr_header h;
    tr_header_init(&h);
    bench_json_settings js = {.dataset = "trace", .request_rate = NAN, .burstiness = 1, .rate_scale = 2,
                              .backend = "openai"};
    CU_ASSERT_EQUAL_FATAL(bench_trace_header(&h, &c, &d, &js, &e), 0);
    CU_ASSERT_EQUAL_FATAL(bench_write_trace(out, &d, r, &h, &e), 0);
    tr_header_free(&h);
    tr_trace t;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(out, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_requests, d.n);
    CU_ASSERT_EQUAL(t.header.block_size, 16);
    CU_ASSERT_STRING_EQUAL(t.header.model, "mock-model");
    CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "source"), "rehearse bench");
    CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "request_rate"), "trace");
    CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "base_url"), bench_mock_url(m));
    metrics *mt = metrics_new(NULL);
    for (size_t k = 0; k < d.n; k++) {
        const tr_request *q = &t.requests[k];           /* in send order, which is arrival order here */
        double times[8];
        tr_request want;
        bench_result_request(&d, k, &r[k], &want, times);
        CU_ASSERT_EQUAL(q->id, want.id);
        CU_ASSERT_EQUAL(q->arrival, want.arrival);
        CU_ASSERT_EQUAL(q->ttft, want.ttft);
        CU_ASSERT_EQUAL(q->e2e, want.e2e);
        CU_ASSERT_EQUAL(q->input_len, want.input_len);
        CU_ASSERT_EQUAL(q->output_len, want.output_len);
        CU_ASSERT_EQUAL(q->cached_tokens, want.cached_tokens);
        CU_ASSERT_EQUAL(q->finish, k == 5 ? TR_FINISH_ERROR : TR_FINISH_LENGTH);
        CU_ASSERT(q->flags & TR_REQ_MEASURED);
        CU_ASSERT_EQUAL(q->session_id, specs[order[k]].session);
        CU_ASSERT_EQUAL(q->turn, specs[order[k]].turn);
        CU_ASSERT_EQUAL_FATAL(q->n_times, want.n_times);
        if (q->n_times) CU_ASSERT_EQUAL(memcmp(q->token_times, want.token_times, q->n_times * sizeof(double)), 0);
        CU_ASSERT_EQUAL(q->n_hashes, specs[order[k]].n_hashes);
        if (q->n_hashes)
            CU_ASSERT_EQUAL(memcmp(q->hashes, specs[order[k]].hashes, q->n_hashes * sizeof(uint64_t)), 0);
        metrics_add_request(mt, q);
    }
    /* The file summarizes to what the run printed. */
    metrics_summary from_file, from_run;
    metrics_summarize(mt, &from_file);
    CU_ASSERT_EQUAL_FATAL(bench_summarize(&d, r, NULL, &from_run, &e), 0);
    CU_ASSERT_EQUAL(from_file.completed, 5);
    CU_ASSERT_EQUAL(from_file.failed, 1);
    CU_ASSERT_EQUAL(from_file.completed, from_run.completed);
    CU_ASSERT_EQUAL(from_file.total_output_tokens, from_run.total_output_tokens);
    CU_ASSERT_EQUAL(from_file.cached_tokens, 112);
    CU_ASSERT_EQUAL(from_file.ttft_ms.mean, from_run.ttft_ms.mean);
    CU_ASSERT_EQUAL(from_file.tpot_ms.p99, from_run.tpot_ms.p99);
    CU_ASSERT_EQUAL(from_file.itl_ms.median, from_run.itl_ms.median);
    CU_ASSERT_EQUAL(from_file.e2el_ms.max, from_run.e2el_ms.max);
    CU_ASSERT_EQUAL(from_file.duration, from_run.duration);
    metrics_free(mt);
    tr_trace_free(&t);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    bench_mock_stop(m);
}

/* A closed-loop trace: its clients cap the concurrency, a session's turns go
 * one after another, and waiting requests keep file order. */
static void test_closed_loop_trace(void)
{
    char path[256];
    tu_tmp_path("bench_closed.rhtr", path, sizeof path);
    write_specs(path, "closed-loop");
    bench_dataset d;
    rh_err e;
    bench_trace_opts o = {.rate_scale = 1};
    CU_ASSERT_EQUAL_FATAL(bench_dataset_trace(&d, path, &o, &e), 0);
    CU_ASSERT_EQUAL(d.closed_loop_clients, 2);
    for (size_t k = 0; k < d.n; k++) CU_ASSERT_EQUAL(d.items[k].id, 100 + k);   /* ties keep file order */
    bench_mock_opts mo = {.first_token_s = 0.010, .itl_s = 0.002};
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    bench_config c = {.base_url = bench_mock_url(m), .endpoint = "/v1/completions", .model = "mock-model",
                      .stream = 1, .max_concurrency = d.closed_loop_clients};
    bench_result *r = calloc(d.n, sizeof *r);
    bench_run_info info;
    CU_ASSERT_EQUAL_FATAL(bench_run(&c, &d, r, &info, &e), 0);
    CU_ASSERT_EQUAL(bench_mock_max_concurrent(m), 2);
    for (size_t k = 0; k < d.n; k++) CU_ASSERT_PTR_NULL(r[k].error);
    CU_ASSERT(r[3].send >= r[1].send + r[1].e2e);   /* session 7, turn 1 after turn 0 */
    /* Everything but the blocked turn goes out in file order. */
    CU_ASSERT(r[0].send <= r[1].send && r[1].send <= r[2].send && r[2].send <= r[4].send &&
              r[4].send <= r[5].send);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    bench_mock_stop(m);
}

/* Generated prompts are recorded with content hashes of their real ids, so
 * the simulator sees the sharing the server saw. */
static void test_generated_prompts_record_content_hashes(void)
{
    char out[256];
    tu_tmp_path("bench_gsp.rhtr", out, sizeof out);
    bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.001};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    bench_shared_prefix_opts so = {.num_groups = 2, .prompts_per_group = 3, .system_prompt_len = 64,
                                   .question_len = 20, .output_len = 2, .seed = 4};
    bench_dataset d;
    CU_ASSERT_EQUAL_FATAL(bench_dataset_shared_prefix(&d, &so, 16, &e), 0);
    bench_config c = {.base_url = bench_mock_url(m), .endpoint = "/v1/completions", .model = "mock-model",
                      .stream = 1};
    bench_result *r = calloc(d.n, sizeof *r);
    bench_run_info info;
    CU_ASSERT_EQUAL_FATAL(bench_run(&c, &d, r, &info, &e), 0);
    tr_header h;
    tr_header_init(&h);
    CU_ASSERT_EQUAL_FATAL(bench_write_trace(out, &d, r, &h, &e), 0);
    tr_header_free(&h);
    tr_trace t;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(out, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_requests, 6);
    CU_ASSERT_EQUAL(t.header.block_size, 16);
    for (size_t i = 0; i < t.n_requests; i++) {
        CU_ASSERT_EQUAL_FATAL(t.requests[i].n_hashes, 84 / 16);
        for (size_t j = i + 1; j < t.n_requests; j++) {
            size_t gi = (size_t)(d.items[t.requests[i].id].hashes - d.hash_pool);
            size_t gj = (size_t)(d.items[t.requests[j].id].hashes - d.hash_pool);
            uint32_t shared = 0;
            while (shared < 5 && t.requests[i].hashes[shared] == t.requests[j].hashes[shared]) shared++;
            CU_ASSERT_EQUAL(shared, gi == gj ? 4 : 0);
        }
    }
    tr_trace_free(&t);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    bench_mock_stop(m);
}

void register_test_bench_trace(void)
{
    CU_pSuite s = CU_add_suite("bench_trace", NULL, NULL);
    CU_add_test(s, "trace dataset", test_trace_dataset);
    CU_add_test(s, "trace replay shares prefixes and records", test_trace_replay_shares_prefixes_and_records);
    CU_add_test(s, "closed-loop trace", test_closed_loop_trace);
    CU_add_test(s, "generated prompts record content hashes", test_generated_prompts_record_content_hashes);
}
