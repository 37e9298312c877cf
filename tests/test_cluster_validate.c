/* test_cluster_validate.c — a cluster validated end to end: four emulated
 * servers (`serve --backend sim` on a roofline) behind `rehearse router`
 * (round-robin), loaded by `rehearse bench` with a slice of the Azure conv
 * trace; `validate --measured` on the router's recording with the same
 * cluster (`--replicas 4 --router round-robin`) must predict TPOT and ITL
 * medians within 10%, E2E latency within 15%, TTFT within 30% and the throughput within
 * 5% (looser under the sanitizers), and the same recording
 * simulated as one server must miss by far more (the cluster knobs reach the
 * simulation: a knob given before another once lost its name). Skips with a
 * line without the shared traces. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static double metric(json_t *table, const char *name, int col)
{
    json_t *rows = json_object_get(table, "rows");
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) if (!strcmp(json_string_value(json_array_get(r, 0)), name))
        return json_real_value(json_array_get(r, col)) + (double)json_integer_value(json_array_get(r, col));
    return NAN;
}

/* validate --measured with `knobs`; the table of metrics (measured, simulated, error %), or NULL. */
static json_t *validate(const char *run, const char *cost, const char *knobs, const char *dir)
{
    char cmd[3000], out[512], json[600];
    snprintf(json, sizeof json, "%s.json", dir);
    snprintf(cmd, sizeof cmd, "%s validate --measured %s --cost %s %s -o %s --json > %s", tu_bin(), run, cost, knobs,
             dir, json);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n  validate: %s", out);
    CU_ASSERT_EQUAL(rc, 0);
    json_t *o = json_load_file(json, 0, NULL);
    json_t *t = json_incref(json_object_get(o, "table"));
    json_decref(o);
    return t;
}

static void test_four_workers_behind_the_router(void)
{
    char azure[1024];
    if (!tu_shared_file("AzureLLMInferenceTrace_conv.csv", azure, sizeof azure)) return;
    char cost[256], slice[256], routed[256], dir[256], cmd[4096], out[8192];
    tu_tmp_path("cluster_cost.json", cost, sizeof cost);
    tu_tmp_path("cluster_slice.rhtr", slice, sizeof slice);
    tu_tmp_path("cluster_routed.rhtr", routed, sizeof routed);
    const char *text = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\", "
                       "\"overheads\": {\"step_s\": 0.004}}\n";
    CU_ASSERT_FATAL(tu_write_file(cost, text, strlen(text)) == 0);
    snprintf(cmd, sizeof cmd, "%s trace slice %s -o %s --from 600 --to 620 --max-total-len 8000", tu_bin(), azure, slice);
    CU_ASSERT_FATAL(tu_run(cmd, out, sizeof out) == 0);

    tu_server w[4], r;
    char *urls[4 * 2 + 8];
    int n = 0;
    for (int i = 0; i < 4; i++) {
        char seed[16];
        snprintf(seed, sizeof seed, "%d", 11 + i);
        char *args[] = {"--backend", "sim", "--model", "llama-3-8b", "--cost", cost, "--seed", seed, "--port", "0", NULL};
        CU_ASSERT_FATAL(tu_server_start(&w[i], "cluster-w", args) == 0);
        urls[n++] = "--worker";
        urls[n++] = w[i].url;
    }
    urls[n++] = "--policy";
    urls[n++] = "round-robin";
    urls[n++] = "--port";
    urls[n++] = "0";
    urls[n++] = "--record-trace";
    urls[n++] = routed;
    urls[n] = NULL;
    CU_ASSERT_FATAL(tu_command_start(&r, "cluster-router", "router", urls) == 0);
    snprintf(cmd, sizeof cmd, "%s bench --base-url %s --dataset trace %s --rate-scale 8", tu_bin(), r.url, slice);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc || !strstr(out, "Failed requests:                         0")) printf("\n  bench: %s", out);
    CU_ASSERT_EQUAL(rc, 0);
    tu_server_stop(&r);
    for (int i = 0; i < 4; i++) tu_server_stop(&w[i]);

    json_t *cl = validate(routed, cost, "--replicas 4 --router round-robin", tu_tmp_path("cluster_v4", dir, sizeof dir));
    json_t *one = validate(routed, cost, "--router round-robin --replicas 1", tu_tmp_path("cluster_v1", dir, sizeof dir));
    CU_ASSERT_FATAL(cl && one);
    const char *names[] = {"median_ttft_ms", "median_tpot_ms", "median_itl_ms", "median_e2el_ms", "p90_ttft_ms",
                           "p90_e2el_ms", "request_throughput"};
    printf("\n  4 workers behind the router, simulated as 4 replicas (and as one):");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        double err = metric(cl, names[i], 3), err1 = metric(one, names[i], 3);
        printf(" %s %+.1f%% (%+.0f%%)", names[i], err, err1);
        /* TTFT is the hand-offs' metric: bench -> router -> worker's HTTP
         * thread -> engine loop -> delivery -> router, each a thread wake-up
         * that six processes on two cores delay by a few ms. On a 40 ms
         * median that moved the error from -1.3% to -19.1% over six runs of
         * one build (TPOT within 4.3%, E2E median within 9.4% on the same
         * runs), so TTFT gets 30% and E2E 15%; a lost cluster knob costs
         * TTFT +280% to +530% and E2E +70% to +90%. */
        bool ttft = strstr(names[i], "ttft") != NULL;
        double bound = i == 6 ? 5 : ttft ? 30 : i == 3 ? 15 : i < 4 ? 10 : 20;
#if defined(__SANITIZE_ADDRESS__)
        /* The instrumented router and servers add their own CPU time to every
         * latency (TTFT median -29.2% in one CI run): looser there, still far
         * inside what a lost knob costs. */
        bound *= ttft ? 2 : 3;
#endif
        CU_ASSERT(fabs(err) < bound);
    }
    CU_ASSERT(fabs(metric(one, "median_ttft_ms", 3)) > 100);   /* one server cannot keep up with four's load */
    printf(" ");
    json_decref(cl);
    json_decref(one);
}

void register_test_cluster_validate(void)
{
    CU_pSuite s = CU_add_suite("cluster_validate", NULL, NULL);
    CU_add_test(s, "4 emulated servers behind rehearse router: validate --measured --replicas 4", test_four_workers_behind_the_router);
}
