/* test_bench_summary.c — a bench run's summary keys (client/bench_summary.h)
 * on a run made by hand: four requests that succeeded and one that failed,
 * every TTFT, TPOT, ITL and E2E known, so each mean, standard deviation and
 * percentile is worked out here. The deviation is the population one
 * (numpy's std, ddof = 0, which vLLM's benchmark reports); percentiles
 * interpolate as numpy's; a percentile that is not a whole number keeps its
 * decimals in its key (vLLM's p99.9_ttft_ms). */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "client/bench.h"
#include "client/bench_summary.h"

/* TTFT (ms)  100, 200, 300, 600 (the failed one counts in none)
 * TPOT (ms)  100, 200, 500 (the 1-token request has none)
 * ITL (ms)   100 x 4, 200 x 3, 400, 600
 * E2EL (ms)  500, 800, 300, 1600 */
static double c0[] = {0.1, 0.2, 0.3, 0.4, 0.5}, c1[] = {0.2, 0.4, 0.6, 0.8}, c2[] = {0.3}, c3[] = {0.6, 1.0, 1.6};
static char boom[] = "HTTP 500";

static void make_run(bench_dataset *d, bench_result *r)
{
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(bench_dataset_new(d, 5, 0, "by hand", &e), 0);
    memset(r, 0, 5 * sizeof *r);
    const struct {
        double send, ttft, e2e;
        uint32_t out, n;
        double *chunks;
    } x[4] = {{0, 0.1, 0.5, 5, 5, c0}, {0.5, 0.2, 0.8, 4, 4, c1}, {1, 0.3, 0.3, 1, 1, c2}, {1.5, 0.6, 1.6, 3, 3, c3}};
    for (int i = 0; i < 4; i++)
        r[i] = (bench_result){.send = x[i].send, .ttft = x[i].ttft, .e2e = x[i].e2e, .input_len = 10,
                              .output_len = x[i].out, .n_chunks = x[i].n, .chunk_times = x[i].chunks,
                              .finish = TR_FINISH_LENGTH, .http_status = 200, .sent = 1};
    r[4] = (bench_result){.send = 2, .input_len = 10, .http_status = 500, .error = boom, .sent = 1};
}

static double key(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_number(v)) printf("\n    no number under %s", k);
    return json_number_value(v);
}

static void test_std_is_the_population_one(void)
{
    bench_dataset d;
    bench_result r[5];
    make_run(&d, r);
    bench_selection sel;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(bench_selection_parse(&sel, "ttft,tpot,itl,e2el", "50,90", &e), 0);
    bench_peaks pk = {0};
    json_t *o = json_object();
    CU_ASSERT_EQUAL_FATAL(bench_summary_json(o, BENCH_STYLE_VLLM, &d, r, &sel, &pk), 0);
    /* TTFT: mean 300, squared deviations 40000 + 10000 + 0 + 90000 over 4
     * (over 3, the sample's, would be 216.0) */
    CU_ASSERT_DOUBLE_EQUAL(key(o, "mean_ttft_ms"), 300, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(key(o, "std_ttft_ms"), sqrt(35000), 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(key(o, "median_ttft_ms"), 250, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(key(o, "p90_ttft_ms"), 300 + 0.7 * 300, 1e-9);   /* index 0.9 x 3 = 2.7 */
    /* TPOT: mean 800/3, deviations -500/3, -200/3, 700/3 */
    CU_ASSERT_DOUBLE_EQUAL(key(o, "mean_tpot_ms"), 800.0 / 3, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(key(o, "std_tpot_ms"), sqrt(780000.0 / 27), 1e-9);
    /* ITL: nine gaps, mean 2000/9; squared deviations 4 (1100/9)^2 + 3 (200/9)^2 + (1600/9)^2 + (3400/9)^2 */
    double itl_var = (4 * 1100.0 * 1100 + 3 * 200.0 * 200 + 1600.0 * 1600 + 3400.0 * 3400) / 81 / 9;
    CU_ASSERT_DOUBLE_EQUAL(key(o, "mean_itl_ms"), 2000.0 / 9, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(key(o, "std_itl_ms"), sqrt(itl_var), 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(key(o, "median_itl_ms"), 200, 1e-9);
    /* E2EL: mean 800, deviations -300, 0, -500, 800 */
    CU_ASSERT_DOUBLE_EQUAL(key(o, "std_e2el_ms"), sqrt(980000.0 / 4), 1e-9);
    /* SGLang's names, the same deviations */
    json_t *g = json_object();
    CU_ASSERT_EQUAL_FATAL(bench_summary_json(g, BENCH_STYLE_SGLANG, &d, r, &sel, &pk), 0);
    CU_ASSERT_DOUBLE_EQUAL(key(g, "std_ttft_ms"), sqrt(35000), 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(key(g, "std_e2e_latency_ms"), sqrt(980000.0 / 4), 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(key(g, "max_itl_ms"), 600, 1e-9);
    json_decref(g);
    json_decref(o);
    bench_dataset_free(&d);
}

static void test_fractional_percentile_keys(void)
{
    bench_dataset d;
    bench_result r[5];
    make_run(&d, r);
    bench_selection sel;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(bench_selection_parse(&sel, "ttft,e2el", "99.9,95", &e), 0);
    bench_peaks pk = {0};
    json_t *o = json_object();
    CU_ASSERT_EQUAL_FATAL(bench_summary_json(o, BENCH_STYLE_VLLM, &d, r, &sel, &pk), 0);
    /* index 0.999 x 3 = 2.997: 300 + 0.997 x 300 */
    CU_ASSERT_DOUBLE_EQUAL(key(o, "p99.9_ttft_ms"), 599.1, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(key(o, "p99.9_e2el_ms"), 800 + 0.997 * 800, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(key(o, "p95_ttft_ms"), 300 + 0.85 * 300, 1e-9);
    CU_ASSERT_PTR_NULL(json_object_get(o, "p99_ttft_ms"));
    CU_ASSERT_PTR_NULL(json_object_get(o, "p100_ttft_ms"));
    CU_ASSERT_PTR_NULL(json_object_get(o, "p99_e2el_ms"));
    /* and the table's rows say the same */
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    metrics_summary s;
    memset(&s, 0, sizeof s);
    bench_table t = {.backend = "vllm", .request_rate = INFINITY};
    CU_ASSERT_EQUAL(bench_print_summary(f, BENCH_STYLE_VLLM, &s, &d, r, &sel, &pk, &t), 0);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "P99.9 TTFT (ms):                         599.10"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "P95 E2EL (ms):"));
    json_decref(o);
    bench_dataset_free(&d);
}

/* Sends at 0, 0.5, 1 and 1.5 s, ending at 0.5, 1.3, 1.3 and 3.1 s; the
 * failed one (at 2 s) counts in neither peak. In flight at one instant: at
 * most 2 (from 1 s to 1.3 s; the second request starts as the first ends,
 * which is no overlap). Counting requests active in each second would give
 * 3 for the second [1, 2), and under --max-concurrency C more than C. */
static void test_peak_concurrency_is_instantaneous(void)
{
    bench_dataset d;
    bench_result r[5];
    make_run(&d, r);
    bench_peaks pk;
    bench_peaks_of(&d, r, 3.1, &pk);
    CU_ASSERT_EQUAL(pk.concurrent, 2);
    /* tokens: 5 + 2 in [0, 1), 2 + 1 in [1, 2), 2 in [2, 3), 1 after */
    CU_ASSERT_DOUBLE_EQUAL(pk.output_tokens_per_s, 7, 1e-9);
    /* SGLang's: summed E2E (0.5 + 0.8 + 0.3 + 1.6) over the duration */
    CU_ASSERT_DOUBLE_EQUAL(pk.concurrency, 3.2 / 3.1, 1e-9);
    bench_dataset_free(&d);
}

void register_test_bench_summary(void)
{
    CU_pSuite s = CU_add_suite("bench_summary", NULL, NULL);
    CU_add_test(s, "std_*_ms is the population deviation (numpy's), by hand", test_std_is_the_population_one);
    CU_add_test(s, "--metric-percentiles 99.9: p99.9_ttft_ms, by hand", test_fractional_percentile_keys);
    CU_add_test(s, "peak concurrency: the most in flight at one instant (vLLM's sweep)",
                test_peak_concurrency_is_instantaneous);
}
