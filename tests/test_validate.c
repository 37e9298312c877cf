/* test_validate.c — `rehearse validate` end to end on the CPU engine: a trace
 * with a request longer than the model's context, which the engine refuses
 * (and records as failed), runs through both sides with the same requests
 * served; with --tp-size 2 the engine runs as two tensor-parallel ranks. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/sim.h"
#include "sim/validate/validate.h"
#include "testutil.h"
#include "traces/import/import.h"
#include "traces/trace.h"

static double row_value(json_t *v, const char *metric, int col)
{
    json_t *rows = json_object_get(json_object_get(v, "table"), "rows");
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *row = json_array_get(rows, i);
        const char *name = json_string_value(json_array_get(row, 0));
        if (name && !strcmp(name, metric)) return json_number_value(json_array_get(row, col));
    }
    return -1;
}

static void test_refused_requests_left_out_of_the_simulation(void)
{
    char trace[256], cost[256], dir[256], err[256], cmd[2048];
    tu_tmp_path("validate-refused.rhtr", trace, sizeof trace);
    tu_tmp_path("validate-refused-cost.json", cost, sizeof cost);
    tu_tmp_path("validate-refused", dir, sizeof dir);
    tu_tmp_path("validate-refused.err", err, sizeof err);
    tr_trace t;
    tr_trace_init(&t);
    rh_err e;
    /* Six that fit tiny-llama's 2048 positions, one (id 4) that cannot. */
    const uint32_t in[7] = {40, 90, 3000, 60, 120, 30, 75};
    for (uint32_t i = 0; i < 7; i++) {
        tr_request r = {.id = i + 1, .arrival = 0.01 * i, .input_len = in[i], .output_len = 6 + i};
        CU_ASSERT_FATAL(tr_trace_add_request(&t, &r, &e) == 0);
    }
    CU_ASSERT_FATAL(tr_trace_save(&t, trace, &e) == 0);
    tr_trace_free(&t);
    const char *linear = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.002, \"per_prefill_token_s\": 2e-5, "
                         "\"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10, "
                         "\"tp\": {\"2\": {\"base_s\": 0.003, \"per_prefill_token_s\": 1.1e-5, \"per_decode_seq_s\": 6e-5, "
                         "\"per_context_token_s\": 6e-9, \"per_attention_s\": 6e-11}}}";
    CU_ASSERT_FATAL(tu_write_file(cost, linear, strlen(linear)) == 0);

    for (int tp = 1; tp <= 2; tp++) {
        snprintf(cmd, sizeof cmd,
                 "%s validate %s --model tiny-llama --cost %s -o %s --max-total-tokens 8192 --tp-size %d --json 2>%s",
                 tu_bin(), trace, cost, dir, tp, err);
        static char out[1 << 16];
        int rc = tu_run(cmd, out, sizeof out);
        if (rc) {
            printf("\n    %s", out);
            tu_run((snprintf(cmd, sizeof cmd, "cat %s", err), cmd), out, sizeof out);
            printf("\n    %s", out);
        }
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        json_error_t je;
        json_t *v = json_loads(out, 0, &je);
        CU_ASSERT_FATAL(v != NULL);
        /* Both sides served the same six. */
        CU_ASSERT_DOUBLE_EQUAL(row_value(v, "completed", 1), 6, 0);
        CU_ASSERT_DOUBLE_EQUAL(row_value(v, "completed", 2), 6, 0);
        json_decref(v);
        char said[4096] = {0};
        FILE *f = fopen(err, "r");
        CU_ASSERT_FATAL(f != NULL);
        size_t n = fread(said, 1, sizeof said - 1, f);
        said[n] = 0;
        fclose(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(said, "refused 1 request"));
        CU_ASSERT_PTR_NOT_NULL(strstr(said, "the simulator gets the other 6"));
        /* The recording says how many ranks ran. */
        char rec[300];
        snprintf(rec, sizeof rec, "%s/recorded.rhtr", dir);
        tr_trace r;
        CU_ASSERT_FATAL(tr_trace_load(rec, &r, &e) == 0);
        const char *size = tr_header_get(&r.header, "tp-size");
        if (tp == 1) {
            CU_ASSERT_PTR_NULL(size);
        } else {
            CU_ASSERT(size && !strcmp(size, "2"));
        }
        tr_trace_free(&r);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s %s %s %s", trace, cost, dir, err);
    tu_run(cmd, NULL, 0);
}

static const validate_row *row_of(const validate_row rows[VALIDATE_N_METRICS], const char *metric)
{
    for (size_t i = 0; i < VALIDATE_N_METRICS; i++)
        if (!strcmp(rows[i].metric, metric)) return &rows[i];
    CU_FAIL("metric missing from the comparison");
    return &rows[0];
}

/* The error column is relative to the measurement and signed. A "measured"
 * run (the simulator with a linear cost, every request at t = 0, so the
 * batches do not depend on time) against a simulation whose cost prices
 * every step at exactly twice its recorded time: every latency and the
 * duration are +100%, every throughput -50%, counts 0%. */
static void test_error_column(void)
{
    tr_trace t;
    tr_trace_init(&t);
    rh_err e;
    for (uint32_t i = 0; i < 40; i++) {
        tr_request r = {.id = i + 1, .arrival = 0, .input_len = 100 + 37 * i, .output_len = 5 + i % 13};
        CU_ASSERT_FATAL(tr_trace_add_request(&t, &r, &e) == 0);
    }
    cost_linear_coef k = {0.004, 2e-5, 1e-4, 1e-8, 1e-10};
    cost_linear_coef k2 = {2 * k.base_s, 2 * k.per_prefill_token_s, 2 * k.per_decode_seq_s,
                           2 * k.per_context_token_s, 2 * k.per_attention_s};
    char measured[256], simulated[256];
    tu_tmp_path("validate-measured.rhtr", measured, sizeof measured);
    tu_tmp_path("validate-twice.rhtr", simulated, sizeof simulated);
    const cost_linear_coef *coef[2] = {&k, &k2};
    const char *out[2] = {measured, simulated};
    for (int i = 0; i < 2; i++) {
        cost_model *m = cost_linear_new(coef[i]);
        sim_config c;
        sim_config_default(&c);
        c.core.max_running_requests = 8;      /* several batches, some mixed */
        c.out_path = out[i];
        sim_result res;
        CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &res, &e), 0);
        sim_result_free(&res);
        cost_free(m);
    }
    validate_row rows[VALIDATE_N_METRICS];
    CU_ASSERT_EQUAL_FATAL(validate_compare(measured, simulated, rows, &e), 0);
    const char *twice[] = {"duration", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_itl_ms",
                           "mean_e2el_ms", "p90_e2el_ms", "busy_time"};
    for (size_t i = 0; i < sizeof twice / sizeof twice[0]; i++) {
        const validate_row *w = row_of(rows, twice[i]);
        CU_ASSERT(w->measured > 0);
        CU_ASSERT_DOUBLE_EQUAL(w->simulated, 2 * w->measured, 1e-9 * w->measured);
        CU_ASSERT_DOUBLE_EQUAL(w->error_pct, 100, 1e-6);
    }
    const char *half[] = {"request_throughput", "output_throughput", "total_token_throughput"};
    for (size_t i = 0; i < sizeof half / sizeof half[0]; i++) CU_ASSERT_DOUBLE_EQUAL(row_of(rows, half[i])->error_pct, -50, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(row_of(rows, "completed")->measured, 40, 0);
    CU_ASSERT_DOUBLE_EQUAL(row_of(rows, "completed")->error_pct, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(row_of(rows, "steps")->error_pct, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(validate_error_pct(4, 3), -25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(validate_error_pct(0, 0), 0, 0);
    CU_ASSERT(isnan(validate_error_pct(0, 1)));
    remove(measured);
    remove(simulated);
    tr_trace_free(&t);
}

/* A warm server re-benched: 0.996 of the prompt tokens hit its cache, none
 * in the simulation; the latencies compare different work and validate says
 * so. Rates within 0.1 of each other say nothing. */
static void test_cache_warning(void)
{
    validate_report r;
    memset(&r, 0, sizeof r);
    int at = -1;
    for (int i = 0; i < VALIDATE_N_METRICS; i++)
        if (!strcmp(validate_metrics[i], "cache_hit_rate")) at = i;
    CU_ASSERT_FATAL(at >= 0);
    r.rows[at] = (validate_row){"cache_hit_rate", 0.996, 0, NAN};
    char w[800];
    validate_cache_warning(&r, w, sizeof w);
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "0.996"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "/flush_cache"));
    r.rows[at] = (validate_row){"cache_hit_rate", 0.2, 0.6, 200};
    validate_cache_warning(&r, w, sizeof w);
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "the server did work"));
    r.rows[at] = (validate_row){"cache_hit_rate", 0.5, 0.45, -10};
    validate_cache_warning(&r, w, sizeof w);
    CU_ASSERT_STRING_EQUAL(w, "");
}

void register_test_validate(void)
{
    CU_pSuite s = CU_add_suite("validate", NULL, NULL);
    CU_add_test(s, "requests the engine refuses are left out of the simulation; --tp-size 2",
                test_refused_requests_left_out_of_the_simulation);
    CU_add_test(s, "the error column: twice the recorded step time is +100%", test_error_column);
    CU_add_test(s, "measured and simulated cache hit rates far apart: a warning that says why", test_cache_warning);
}
