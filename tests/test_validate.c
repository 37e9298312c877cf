/* test_validate.c — `rehearse validate` end to end on the CPU engine: a trace
 * with a request longer than the model's context, which the engine refuses
 * (and records as failed), runs through both sides with the same requests
 * served; with --tp-size 2 the engine runs as two tensor-parallel ranks. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
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

void register_test_validate(void)
{
    CU_pSuite s = CU_add_suite("validate", NULL, NULL);
    CU_add_test(s, "requests the engine refuses are left out of the simulation; --tp-size 2",
                test_refused_requests_left_out_of_the_simulation);
}
