/* test_cost_efficiency.c — `rehearse cost efficiency`: a roofline whose
 * efficiency factors come from a table prices each operator on the probe
 * batches as the table measured it (the roofline recomputed with the
 * written factors against the table's own sums); bad pairings are refused. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost_efficiency.h"
#include "testutil.h"

static void test_factors_reproduce_the_table(void)
{
    char table[256], model[256], gpu[256], roof[256], out[256], cmd[2048], text[8192];
    tu_tmp_path("eff-table.json", table, sizeof table);
    tu_tmp_path("eff-model.json", model, sizeof model);
    tu_tmp_path("eff-gpu.json", gpu, sizeof gpu);
    tu_tmp_path("eff-roof.json", roof, sizeof roof);
    tu_tmp_path("eff-out.json", out, sizeof out);
    snprintf(cmd, sizeof cmd, "%s calibrate --model tiny-llama --quick -o %s 2>&1", tu_bin(), table);
    int rc = tu_run(cmd, text, sizeof text);
    if (rc) printf("\n    %s", text);
    CU_ASSERT_FATAL(rc == 0);
    /* tiny-llama's shape as a roofline model preset, on a made-up accelerator
     * about as fast as this CPU, so most factors fall inside (0, 1) rather
     * than at the bounds a file allows. */
    const char *md = "{\"name\": \"tiny-llama\", \"hidden_size\": 256, \"num_hidden_layers\": 4, "
                     "\"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"head_dim\": 32, "
                     "\"intermediate_size\": 768, \"vocab_size\": 512, \"tie_word_embeddings\": true}";
    CU_ASSERT_FATAL(tu_write_file(model, md, strlen(md)) == 0);
    const char *gp = "{\"name\": \"slow\", \"memory_GB\": 24, \"hbm_GBps\": 50, \"bf16_tflops\": 0.5, "
                     "\"fp8_tflops\": 0, \"nvlink_GBps\": 10, \"ib_GBps\": 1, \"gpus_per_node\": 1}";
    CU_ASSERT_FATAL(tu_write_file(gpu, gp, strlen(gp)) == 0);
    /* Preset paths in a cost file are relative to the cost file. */
    const char *model_base = strrchr(model, '/') + 1, *gpu_base = strrchr(gpu, '/') + 1;
    char rf[1024];
    int n = snprintf(rf, sizeof rf,
                     "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"%s\", \"gpu\": \"%s\", "
                     "\"efficiency\": {\"default\": 0.5}}", model_base, gpu_base);
    CU_ASSERT_FATAL(tu_write_file(roof, rf, (size_t)n) == 0);

    snprintf(cmd, sizeof cmd, "%s cost efficiency %s --roofline %s -o %s --json 2>&1", tu_bin(), table, roof, out);
    rc = tu_run(cmd, text, sizeof text);
    if (rc) printf("\n    %s", text);
    CU_ASSERT_FATAL(rc == 0);
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    CU_ASSERT_FATAL(j != NULL);
    json_t *eff = json_object_get(j, "efficiency");
    CU_ASSERT(json_object_size(eff) >= 7);   /* embed, norm, qkv, both attentions, o, mlp, lm_head */
    CU_ASSERT_PTR_NULL(json_object_get(eff, "default"));   /* the old factors are gone */
    const char *k;
    json_t *v;
    json_object_foreach(eff, k, v) CU_ASSERT(json_real_value(v) >= COST_EFF_MIN && json_real_value(v) <= 1);

    /* The written roofline, measured again as if it were pure: each
     * operator's time over the probes now equals the table's. */
    rh_err e;
    cost_model *t = cost_load(table, &e), *calibrated = t ? cost_load(out, &e) : NULL;
    cost_eff_row rows[RL_N_OPS];
    if (!t || !calibrated || cost_efficiency_measure(t, 256, calibrated, rows, &e) < 0) {
        printf("\n    %s\n", e.msg);
        CU_FAIL("the written roofline prices the probes");
        cost_free(t);
        cost_free(calibrated);
        json_decref(j);
        return;
    }
    int compared = 0;
    for (int op = 0; op < RL_N_OPS; op++) {
        if (!(rows[op].measured_s > 0)) continue;
        /* A factor held at a bound (faster than the roofline, or slower than
         * any factor can say) cannot reproduce the measurement. */
        double f = json_real_value(json_object_get(eff, rl_op_name(op)));
        if (f >= 1 || f <= COST_EFF_MIN) continue;
        double rel = fabs(rows[op].roofline_s - rows[op].measured_s) / rows[op].measured_s;
        if (!(rel < 1e-4))
            printf("\n    %s: roofline %g s, measured %g s\n", rl_op_name(op), rows[op].roofline_s, rows[op].measured_s);
        CU_ASSERT(rel < 1e-4);
        compared++;
    }
    if (compared < 5) printf("\n    only %d operators inside the bounds\n", compared);
    CU_ASSERT(compared >= 5);
    json_decref(j);

    /* Another model's roofline is refused, naming both shapes; nothing is written. */
    char other[256];
    tu_tmp_path("eff-other.json", other, sizeof other);
    const char *o8 = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h200\"}";
    CU_ASSERT_FATAL(tu_write_file(other, o8, strlen(o8)) == 0);
    remove(out);
    snprintf(cmd, sizeof cmd, "%s cost efficiency %s --roofline %s -o %s 2>&1", tu_bin(), table, other, out);
    rc = tu_run(cmd, text, sizeof text);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "has 32 of 4096"));
    CU_ASSERT(!tu_file_exists(out));
    /* A roofline where the table should be, and a missing -o. */
    snprintf(cmd, sizeof cmd, "%s cost efficiency %s --roofline %s -o %s 2>&1", tu_bin(), roof, roof, out);
    CU_ASSERT_EQUAL(tu_run(cmd, text, sizeof text), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "not a table cost model"));
    snprintf(cmd, sizeof cmd, "%s cost efficiency %s --roofline %s 2>&1", tu_bin(), table, roof);
    CU_ASSERT_EQUAL(tu_run(cmd, text, sizeof text), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "usage: rehearse cost efficiency"));

    cost_free(t);
    cost_free(calibrated);
    remove(table);
    remove(model);
    remove(gpu);
    remove(roof);
    remove(other);
    remove(out);
}

/* In this process, GPU presets come from the source tree. */
static int init_presets(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

void register_test_cost_efficiency(void)
{
    CU_pSuite s = CU_add_suite("cost_efficiency", init_presets, NULL);
    CU_add_test(s, "a roofline with factors from a table prices its operators as measured",
                test_factors_reproduce_the_table);
}
