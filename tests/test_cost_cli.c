/* test_cost_cli.c — `rehearse cost show|presets` through the binary, and the
 * --batch description parser. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/batch_spec.h"
#include "testutil.h"

static int init_presets(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

static void test_batch_parse(void)
{
    cost_seq s[300];
    cost_batch b;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(cost_batch_parse("prefill=1000@500,prefill=200,decode=3@1000", s, 300, &b, &e), 0);
    CU_ASSERT_EQUAL(b.n, 5);
    CU_ASSERT_EQUAL(b.prefill_tokens, 1200);
    CU_ASSERT_EQUAL(b.prefill_context, 500);
    CU_ASSERT_EQUAL(b.decode_seqs, 3);
    CU_ASSERT_EQUAL(b.decode_context, 3000);
    CU_ASSERT_EQUAL(b.draft_steps, 0);
    CU_ASSERT_EQUAL_FATAL(cost_batch_parse("decode=64@2000,spec=3", s, 300, &b, &e), 0);
    CU_ASSERT_EQUAL(b.decode_tokens, 256);
    CU_ASSERT_EQUAL(b.draft_steps, 3);
    CU_ASSERT_EQUAL(b.draft_seqs, 64);

    const char *bad[][2] = {{"prefill", "not KEY=VALUE"},       {"prefill=x", "not an integer"},
                            {"decode=0", "adds nothing"},        {"mixed=3", "unknown key"},
                            {"decode=400", "more than 300"},     {"spec=2", "no prefill or decode"},
                            {"decode=2,spec=3@4", "spec=K"},     {"prefill=2048@", "needs a number"},
                            {"prefill=99999999999", "above"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(cost_batch_parse(bad[i][0], s, 300, &b, &e), -1);
        int ok = strstr(e.msg, "--batch") && strstr(e.msg, bad[i][1]);
        if (!ok) printf("\n  '%s': %s\n", bad[i][0], e.msg);
        CU_ASSERT(ok);
    }
}

static void test_cost_show(void)
{
    char path[256], cmd[1024], out[16384];
    tu_tmp_path("show-linear.json", path, sizeof path);
    const char *lin = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5,"
                      " \"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, lin, strlen(lin)), 0);
    /* the closed form of test_cost.c, through the binary */
    snprintf(cmd, sizeof cmd, "%s cost show %s --batch prefill=1000@500,prefill=200,decode=3@1000", tu_bin(), path);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "28.4840 ms") != NULL);
    CU_ASSERT(strstr(out, "prefill attention") != NULL);

    snprintf(cmd, sizeof cmd, "%s cost show %s --json --batch decode=1@4096", tu_bin(), path);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    json_t *b0 = json_array_get(json_object_get(o, "batches"), 0);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(b0, "step_s")), 0.004 + 1e-4 + 4096e-8, 1e-12);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(b0, "terms")), 5);
    json_decref(o);

    /* a roofline with the default shapes, and one tp it cannot run */
    char rpath[256];
    tu_tmp_path("show-roofline.json", rpath, sizeof rpath);
    const char *rl = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-70b\", \"gpu\": \"h200\", \"tp\": 8}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(rpath, rl, strlen(rl)), 0);
    snprintf(cmd, sizeof cmd, "%s cost show %s", tu_bin(), rpath);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "llama-3-70b") && strstr(out, "allreduce") && strstr(out, "decode=256@2048"));
    snprintf(cmd, sizeof cmd, "%s cost show %s --tp 3", tu_bin(), rpath);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
    CU_ASSERT(strstr(out, "field 'tp'") != NULL);

    snprintf(cmd, sizeof cmd, "%s cost presets", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "deepseek-v3") && strstr(out, "l40s"));
    remove(path);
    remove(rpath);
}

static void test_cost_show_errors(void)
{
    char path[256], cmd[1024], out[4096];
    tu_tmp_path("show-bad.json", path, sizeof path);
    const char *bad = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-9b\", \"gpu\": \"h200\"}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, bad, strlen(bad)), 0);
    struct {
        const char *args, *needle;
    } cases[] = {
        {"cost show %s", "field 'model': no model preset 'llama-9b'"},
        {"cost show %s --frobnicate", "unknown flag --frobnicate"},
        {"cost show", "one COST file"},
        {"cost show build/tmp/absent.json", "absent.json: cannot open"},
        {"cost bogus", "unknown cost command"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, cases[i].args, path);
        snprintf(cmd, sizeof cmd, "%s %s", tu_bin(), args);
        CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
        int ok = strstr(out, cases[i].needle) != NULL;
        if (!ok) printf("\n  %s: %s\n", args, out);
        CU_ASSERT(ok);
    }
    snprintf(cmd, sizeof cmd, "%s cost show --help", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "usage: rehearse cost show") != NULL);
    remove(path);
}

void register_test_cost_cli(void)
{
    CU_pSuite s = CU_add_suite("cost_cli", init_presets, NULL);
    CU_add_test(s, "--batch descriptions", test_batch_parse);
    CU_add_test(s, "rehearse cost show and presets", test_cost_show);
    CU_add_test(s, "rehearse cost errors exit 1 with a message", test_cost_show_errors);
}
