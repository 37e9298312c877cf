/* test_metrics.c — serving metrics: the weighted-run percentiles equal plain
 * percentiles of the expanded sample; a small run computed by hand. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "traces/metrics/metrics.h"
#include "traces/tools/stats.h"

static void test_weighted_equals_expanded(void)
{
    srand(7);
    static metrics_wsample w[6000];
    static double flat[6000 * 10];
    for (int trial = 0; trial < 52; trial++) {
        /* Short lists, and two long enough for the radix path. */
        size_t n = trial < 50 ? 1 + (size_t)(rand() % 40) : 5000 + (size_t)(rand() % 1000);
        size_t nf = 0;
        for (size_t i = 0; i < n; i++) {
            w[i].value = (double)(rand() % (trial < 50 ? 20 : 3000)) * 0.25;   /* duplicates on purpose */
            w[i].count = (uint64_t)(rand() % 10);          /* zeros too */
            for (uint64_t k = 0; k < w[i].count; k++) flat[nf++] = w[i].value;
        }
        rh_summary a, b;
        metrics_wsummarize(w, n, &a);
        rh_summarize(flat, nf, &b);
        CU_ASSERT_EQUAL(a.n, b.n);
        if (nf == 0) continue;
        CU_ASSERT_DOUBLE_EQUAL(a.mean, b.mean, 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(a.std, b.std, 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(a.median, b.median, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(a.p90, b.p90, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(a.p99, b.p99, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(a.min, b.min, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(a.max, b.max, 1e-12);
    }
}

static void test_hand_computed_run(void)
{
    metrics_slo slo = {.ttft_ms = 150, .tpot_ms = 0, .e2e_ms = 0};
    metrics *m = metrics_new(&slo);
    /* A: arrives 0, tokens at 0.1, 0.2, 0.3, 0.5 -> TTFT 100 ms, E2E 500, TPOT 400/3. */
    double ta[] = {0.1, 0.2, 0.3, 0.5};
    tr_request a = {.id = 1, .arrival = 0, .input_len = 100, .output_len = 4, .flags = TR_REQ_MEASURED,
                    .ttft = 0.1, .e2e = 0.5, .cached_tokens = 50, .finish = TR_FINISH_LENGTH,
                    .n_times = 4, .token_times = ta};
    /* B: arrives 1.0, first token at +0.2, then two tokens delivered together
     * (speculative accept) at +0.4: one ITL of 200 ms, not two. */
    double tb[] = {0.2, 0.4, 0.4};
    tr_request b = {.id = 2, .arrival = 1.0, .input_len = 300, .output_len = 3, .flags = TR_REQ_MEASURED,
                    .ttft = 0.2, .e2e = 0.4, .cached_tokens = 0, .finish = TR_FINISH_STOP,
                    .n_times = 3, .token_times = tb};
    /* C: aborted: counts as failed, in no latency. */
    tr_request c = {.id = 3, .arrival = 0.5, .input_len = 10, .output_len = 1, .flags = TR_REQ_MEASURED,
                    .ttft = 0.05, .e2e = 3.0, .finish = TR_FINISH_ABORT};
    CU_ASSERT_EQUAL(metrics_add_request(m, &a), 0);
    CU_ASSERT_EQUAL(metrics_add_request(m, &b), 0);
    CU_ASSERT_EQUAL(metrics_add_request(m, &c), 0);
    tr_step s1 = {.duration = 0.1, .prefill_seqs = 1, .decode_seqs = 3, .decode_tokens = 3,
                  .prefill_tokens = 100, .pages_used = 5, .pages_total = 10, .waiting = 2, .retractions = 1};
    tr_step s2 = {.duration = 0.3, .decode_seqs = 1, .decode_tokens = 3, .spec_proposed = 2, .spec_accepted = 1,
                  .pages_used = 10, .pages_total = 10};
    metrics_add_step(m, &s1);
    metrics_add_step(m, &s2);
    metrics_summary s;
    CU_ASSERT_EQUAL(metrics_summarize(m, &s), 0);
    CU_ASSERT_EQUAL(s.completed, 2);
    CU_ASSERT_EQUAL(s.failed, 1);
    /* duration: first arrival 0 -> last completion max(0.5, 1.4, 3.5) = 3.5 (the
     * aborted request's end still bounds the run). */
    CU_ASSERT_DOUBLE_EQUAL(s.duration, 3.5, 1e-12);
    CU_ASSERT_EQUAL(s.total_input_tokens, 400);
    CU_ASSERT_EQUAL(s.total_output_tokens, 7);
    CU_ASSERT_DOUBLE_EQUAL(s.request_throughput, 2 / 3.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.output_throughput, 7 / 3.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.ttft_ms.mean, 150, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s.ttft_ms.median, 150, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s.e2el_ms.mean, 450, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s.tpot_ms.mean, (400.0 / 3 + 100.0) / 2, 1e-9);
    /* ITLs: A gives 100, 100, 200; B gives 200 (the zero gap is not a delivery). */
    CU_ASSERT_EQUAL(s.itl_ms.n, 4);
    CU_ASSERT_DOUBLE_EQUAL(s.itl_ms.mean, 150, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s.itl_ms.median, 150, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s.itl_ms.max, 200, 1e-9);
    /* standard deviations, the population's (numpy's std, as vLLM reports
     * it): two TTFTs 50 either side of 150, four ITLs 50 either side */
    CU_ASSERT_DOUBLE_EQUAL(s.ttft_ms.std, 50, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s.e2el_ms.std, 50, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s.itl_ms.std, 50, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s.tpot_ms.std, (400.0 / 3 - 100.0) / 2, 1e-9);
    /* goodput: TTFT SLO 150 ms -> both A (100) and B (200)? B misses. */
    CU_ASSERT_EQUAL(s.good_requests, 1);
    CU_ASSERT_DOUBLE_EQUAL(s.request_goodput, 1 / 3.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.cache_hit_rate, 50.0 / 400, 1e-12);
    CU_ASSERT_EQUAL(s.retractions, 1);
    CU_ASSERT_EQUAL(s.steps, 2);
    CU_ASSERT_DOUBLE_EQUAL(s.mean_batch_size, 2.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.max_kv_use, 1.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.mean_kv_use, 0.75, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.spec_accept_rate, 0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.mean_accepted_len, 2.0, 1e-12);

    /* Each SLO counts, alone and together: A has TTFT 100, TPOT 133.3, E2E
     * 500 ms; B has 200, 100 and 400; C (aborted) is never good. */
    static const struct { metrics_slo slo; uint64_t good; } cases[] = {
        {{.tpot_ms = 120}, 1},                  /* A misses TPOT */
        {{.tpot_ms = 140}, 2},
        {{.e2e_ms = 450}, 1},                   /* A misses E2E */
        {{.e2e_ms = 400}, 1},                   /* B's 400 is within 400 */
        {{.e2e_ms = 399}, 0},
        {{.ttft_ms = 150, .tpot_ms = 120}, 0},  /* A misses TPOT, B misses TTFT */
        {{.ttft_ms = 250, .e2e_ms = 450}, 1},
        {{.ttft_ms = 250, .tpot_ms = 140, .e2e_ms = 600}, 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        metrics *g = metrics_new(&cases[k].slo);
        metrics_add_request(g, &a);
        metrics_add_request(g, &b);
        metrics_add_request(g, &c);
        metrics_summary gs;
        CU_ASSERT_EQUAL(metrics_summarize(g, &gs), 0);
        CU_ASSERT_EQUAL(gs.good_requests, cases[k].good);
        CU_ASSERT_DOUBLE_EQUAL(gs.request_goodput, (double)cases[k].good / 3.5, 1e-12);
        if (gs.good_requests != cases[k].good) printf("\n  goodput case %zu: %llu good\n", k, (unsigned long long)gs.good_requests);
        metrics_free(g);
    }

    json_t *j = metrics_to_json(&s);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "completed")), 2);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "mean_ttft_ms")), 150, 1e-9);
    CU_ASSERT_PTR_NOT_NULL(json_object_get(j, "p99_e2el_ms"));
    CU_ASSERT_PTR_NOT_NULL(json_object_get(j, "median_itl_ms"));
    CU_ASSERT_PTR_NOT_NULL(json_object_get(j, "std_tpot_ms"));
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "std_ttft_ms")), 50, 1e-9);
    json_decref(j);

    /* The table prints without trouble and names what it shows. */
    char buf[8192];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    metrics_print(f, &s, NULL);
    fclose(f);
    CU_ASSERT(strstr(buf, "Mean TTFT (ms):") != NULL);
    CU_ASSERT(strstr(buf, "Successful requests:") != NULL);
    metrics_free(m);
}

/* A trace's "failed" count (trace stats' first lines) is the serving
 * metrics' own: measured requests that ended in an error or an abort
 * (a router's "no healthy worker") count, as do those their source
 * marked failed. */
static void test_stats_count_failed_as_metrics_do(void)
{
    tr_request r[7] = {
        {.id = 1, .arrival = 0.0, .input_len = 4, .output_len = 3, .flags = TR_REQ_MEASURED, .finish = TR_FINISH_LENGTH,
         .ttft = 0.01, .e2e = 0.03},
        {.id = 2, .arrival = 0.1, .input_len = 4, .output_len = 3, .flags = TR_REQ_MEASURED, .finish = TR_FINISH_STOP,
         .ttft = 0.01, .e2e = 0.03},
        {.id = 3, .arrival = 0.2, .input_len = 2, .output_len = 3, .flags = TR_REQ_MEASURED, .finish = TR_FINISH_ERROR},
        {.id = 4, .arrival = 0.3, .input_len = 2, .output_len = 3, .flags = TR_REQ_MEASURED, .finish = TR_FINISH_ERROR},
        {.id = 5, .arrival = 0.4, .input_len = 2, .output_len = 3, .flags = TR_REQ_MEASURED, .finish = TR_FINISH_ABORT},
        {.id = 6, .arrival = 0.5, .input_len = 2, .output_len = 0, .flags = TR_REQ_FAILED},   /* BurstGPT's */
        {.id = 7, .arrival = 0.6, .input_len = 2, .output_len = 3},                           /* a workload */
    };
    tr_stats_acc *a = tr_stats_new();
    tr_sink sink = tr_stats_sink(a);
    rh_err e;
    tr_header h;
    memset(&h, 0, sizeof h);
    sink.header(sink.ctx, &h, &e);
    metrics *m = metrics_new(NULL);
    for (int i = 0; i < 7; i++) {
        tr_record rec = {.kind = TR_REQUEST};
        rec.req = r[i];
        CU_ASSERT_EQUAL(sink.record(sink.ctx, &rec, &e), 0);
        CU_ASSERT_EQUAL(metrics_add_request(m, &r[i]), 0);
    }
    tr_stats st;
    CU_ASSERT_EQUAL(tr_stats_finish(a, &st, &e), 0);
    metrics_summary ms;
    CU_ASSERT_EQUAL(metrics_summarize(m, &ms), 0);
    CU_ASSERT_EQUAL(st.failed, 4);
    CU_ASSERT_EQUAL(ms.failed, 3);   /* the measured ones; the unmeasured workload is not the metrics' */
    CU_ASSERT_EQUAL(ms.completed, 2);
    tr_stats_free(a);
    metrics_free(m);
}

void register_test_metrics(void)
{
    CU_pSuite s = CU_add_suite("metrics", NULL, NULL);
    CU_add_test(s, "weighted percentiles equal expanded", test_weighted_equals_expanded);
    CU_add_test(s, "hand-computed run", test_hand_computed_run);
    CU_add_test(s, "trace stats count failed requests as the metrics do", test_stats_count_failed_as_metrics_do);
}
