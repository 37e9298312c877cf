/* test_cost_fit_cli.c — `rehearse fit` end to end: a recorded trace whose
 * step durations come from a known linear model gives those coefficients
 * back in the cost file it writes, with zero error per class; bad input
 * exits 1 with a message and writes nothing. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sim/cost/cost.h"
#include "testutil.h"
#include "traces/trace.h"

static const cost_linear_coef TRUTH = {0.0035, 1.9e-5, 8.5e-5, 1.2e-8, 7e-11};

/* A recorded-looking trace: 600 steps (prefill, decode, mixed in turn, some
 * decodes verifying 2 drafts), durations from TRUTH with drafting at 0.1. */
static int write_trace(const char *path, int with_steps)
{
    cost_model *m = cost_linear_new(&TRUTH);
    tr_header h;
    tr_header_init(&h);
    tr_header_set_model(&h, "test-model");
    rh_err e;
    tr_writer *w = tr_writer_open(path, &h, 0, &e);
    tr_header_free(&h);
    if (!w) {
        printf("\n  %s\n", e.msg);
        cost_free(m);
        return -1;
    }
    uint64_t x = 88172645463325252ULL;
    double t = 0;
    for (int i = 0; i < 600 && with_steps; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        tr_step s;
        memset(&s, 0, sizeof s);
        s.index = (uint64_t)i;
        int cls = i % 3;
        if (cls != 1) {
            uint64_t n = 64 + x % 4000, c = (x >> 20) % 3 ? (x >> 24) % 9000 : 0;
            s.prefill_tokens = (uint32_t)n;
            s.prefill_seqs = 1;
            s.prefill_context = c;
            s.prefill_attn = n * (c + n);
        }
        if (cls != 0) {
            s.decode_seqs = 1 + (uint32_t)((x >> 32) % 200);
            s.decode_tokens = s.decode_seqs * ((x >> 40) % 4 == 0 ? 3 : 1);
            s.decode_context = (uint64_t)s.decode_seqs * (100 + (x >> 44) % 5000);
        }
        cost_batch b;
        cost_batch_from_step(&b, &s);
        s.start = t;
        s.duration = cost_step_time(m, &b);
        t += s.duration;
        if (tr_write_step(w, &s, &e) < 0) {
            printf("\n  %s\n", e.msg);
            tr_writer_abort(w);
            cost_free(m);
            return -1;
        }
    }
    cost_free(m);
    return tr_writer_close(w, &e);
}

static void test_fit_cli_recovers(void)
{
    char trace[256], cost[256], cmd[1024], out[8192];
    tu_tmp_path("fit-rec.rhtr", trace, sizeof trace);
    tu_tmp_path("fit-out.json", cost, sizeof cost);
    CU_ASSERT_EQUAL_FATAL(write_trace(trace, 1), 0);
    snprintf(cmd, sizeof cmd, "%s fit %s -o %s", tu_bin(), trace, cost);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n  %s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT(strstr(out, "600 steps") && strstr(out, "decode") && strstr(out, "wrote"));

    json_error_t je;
    json_t *o = json_load_file(cost, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "kind")), "linear");
    const char *keys[5] = {"base_s", "per_prefill_token_s", "per_decode_seq_s", "per_context_token_s",
                           "per_attention_s"};
    const double want[5] = {TRUTH.base_s, TRUTH.per_prefill_token_s, TRUTH.per_decode_seq_s,
                            TRUTH.per_context_token_s, TRUTH.per_attention_s};
    for (int i = 0; i < 5; i++) {
        double got = json_number_value(json_object_get(o, keys[i]));
        CU_ASSERT(fabs(got - want[i]) <= 1e-8 * want[i]);
    }
    json_t *err = json_object_get(json_object_get(o, "fit"), "error");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(err, "mixed"), "steps")), 200);
    CU_ASSERT(json_real_value(json_object_get(json_object_get(err, "decode"), "max")) < 1e-9);
    json_decref(o);

    /* the written file is a cost model the loader accepts */
    rh_err e;
    cost_model *m = cost_load(cost, &e);
    CU_ASSERT_PTR_NOT_NULL(m);
    cost_free(m);
    remove(trace);
    remove(cost);
}

static void test_fit_cli_errors(void)
{
    char trace[256], cost[256], cmd[1024], out[4096];
    tu_tmp_path("fit-empty.rhtr", trace, sizeof trace);
    tu_tmp_path("fit-none.json", cost, sizeof cost);
    CU_ASSERT_EQUAL_FATAL(write_trace(trace, 0), 0);
    struct {
        const char *fmt, *needle;
    } cases[] = {
        {"%s fit %s -o %s", "no step records"},
        {"%s fit %s", "needs -o COST"},
        {"%s fit build/tmp/absent.rhtr -o %s", "absent.rhtr"},
        {"%s fit %s -o %s --draft-ratio -1", "--draft-ratio"},
        {"%s fit %s -o %s --wobble", "unknown flag --wobble"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (i == 1) snprintf(cmd, sizeof cmd, cases[i].fmt, tu_bin(), trace);
        else if (i == 2) snprintf(cmd, sizeof cmd, cases[i].fmt, tu_bin(), cost);
        else snprintf(cmd, sizeof cmd, cases[i].fmt, tu_bin(), trace, cost);
        CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
        int ok = strstr(out, cases[i].needle) != NULL;
        if (!ok) printf("\n  %s -> %s\n", cmd, out);
        CU_ASSERT(ok);
        CU_ASSERT(!tu_file_exists(cost));
    }
    remove(trace);
}

void register_test_cost_fit_cli(void)
{
    CU_pSuite s = CU_add_suite("cost_fit_cli", NULL, NULL);
    CU_add_test(s, "rehearse fit recovers a recorded model", test_fit_cli_recovers);
    CU_add_test(s, "rehearse fit bad input", test_fit_cli_errors);
}
