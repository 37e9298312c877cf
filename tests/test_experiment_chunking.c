/* test_experiment_chunking.c — scripts/experiments/ttft_vs_prompt_length.lua
 * says what chunking changes: with a linear cost model whose step has a
 * large fixed cost, TTFT past the chunk size grows several times as fast as
 * unchunked (every chunk pays the fixed cost again: (b + a/chunk)/b); with
 * a negligible one, as fast; and the running requests' longest stall is one
 * chunk step with chunking, the whole prompt without. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static json_t *run_experiment(const char *name, double base_s)
{
    char cost[256], dir[256], cmd[1024], out[8192];
    tu_tmp_path(name, cost, sizeof cost);
    tu_tmp_path("chunking-out", dir, sizeof dir);
    char text[512];
    snprintf(text, sizeof text, "{\"kind\": \"linear\", \"version\": 1, \"base_s\": %g, \"per_prefill_token_s\": 1e-5,"
             " \"per_decode_seq_s\": 1e-5, \"per_context_token_s\": 0, \"per_attention_s\": 0}", base_s);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(cost, text, strlen(text)), 0);
    snprintf(cmd, sizeof cmd, "%s run scripts/experiments/ttft_vs_prompt_length.lua cost=%s out=%s max_len=32768 "
             "background=8", tu_bin(), cost, dir);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc != 0) printf("\n  %s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    char path[300];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    CU_ASSERT_PTR_NOT_NULL(o);
    return o;
}

static double knee_field(json_t *o, const char *chunk, const char *field)
{
    json_t *v = json_object_get(json_object_get(json_object_get(o, "knees"), chunk), field);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void test_fixed_cost_turns_the_curve(void)
{
    json_t *heavy = run_experiment("chunk-heavy.json", 0.05), *light = run_experiment("chunk-light.json", 1e-5);
    if (!heavy || !light) return;
    /* 50 ms a step against 10 us a token: past a 2,048-token chunk (2,040
     * of the prompt, 8 decodes riding along) (1e-5 + 0.05/2040)/1e-5 = 3.4x */
    double h = knee_field(heavy, "2048", "slope_past_chunk_over_unchunked");
    double l = knee_field(light, "2048", "slope_past_chunk_over_unchunked");
    printf("\n  past a 2048 chunk: %.2fx with a 50 ms step, %.3fx with a 10 us one", h, l);
    CU_ASSERT(h > 2.8 && h < 4);
    CU_ASSERT(fabs(l - 1) < 0.05);
    /* the decode stall: one chunk step chunked (50 ms + 2,040 prompt tokens
     * + 8 decodes), the whole 32k prompt's step unchunked */
    double stall_chunked = knee_field(heavy, "2048", "decode_max_itl_ms");
    double stall_off = knee_field(heavy, "off", "decode_max_itl_ms");
    printf("; decode stall %.1f ms chunked, %.1f ms unchunked", stall_chunked, stall_off);
    CU_ASSERT(fabs(stall_chunked / (1e3 * (0.05 + 2040e-5 + 8e-5)) - 1) < 0.02);
    CU_ASSERT(fabs(stall_off / (1e3 * (0.05 + 32768e-5 + 8e-5)) - 1) < 0.02);
    CU_ASSERT_EQUAL(knee_field(heavy, "2048", "chunk_steps"), ceil(32768.0 / 2040));
    json_decref(heavy);
    json_decref(light);
}

void register_test_experiment_chunking(void)
{
    CU_pSuite s = CU_add_suite("experiment_chunking", NULL, NULL);
    CU_add_test(s, "the TTFT curve turns at the chunk size by the step's fixed cost", test_fixed_cost_turns_the_curve);
}
