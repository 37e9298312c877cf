/* test_cost_table_validate.c — `rehearse validate-steps`: recorded steps
 * whose durations are a known model's prediction off by known relative
 * errors give those errors back per class (median, p90 and max computed here
 * by hand), the CSV has a row per step and the scatter plot is drawn; bad
 * input exits 1 with a message naming the file. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost.h"
#include "sim/validate/validate_steps.h"
#include "testutil.h"
#include "traces/trace.h"

static const cost_linear_coef K = {0.002, 2e-5, 1e-4, 1e-8, 1e-10};

/* Relative errors, by class: prefill 0..8%, decode 0..16%, mixed 10%. */
#define N_STEPS 30
static double wanted_error(int i)
{
    int cls = i % 3;
    if (cls == 0) return 0.01 * (i / 3 % 9);
    if (cls == 1) return 0.02 * (i / 3 % 9);
    return 0.10;
}

/* Steps of each class in turn, plus two that carry no comparison (an empty
 * step and one without a duration). A step measured at pred / (1 + r) has
 * relative error |pred - meas| / meas = r exactly. */
static void make_steps(tr_step *st, size_t *n)
{
    cost_model *m = cost_linear_new(&K);
    size_t k = 0;
    for (int i = 0; i < N_STEPS; i++, k++) {
        tr_step *s = &st[k];
        memset(s, 0, sizeof *s);
        s->index = (uint64_t)k;
        int cls = i % 3;
        if (cls != 1) {
            s->prefill_tokens = 100 + 37 * (uint32_t)i;
            s->prefill_seqs = 1;
            s->prefill_context = (uint64_t)(i * 11);
            s->prefill_attn = (uint64_t)s->prefill_tokens * (s->prefill_context + s->prefill_tokens);
        }
        if (cls != 0) {
            s->decode_seqs = s->decode_tokens = 1 + (uint32_t)i;
            s->decode_context = 500ull * s->decode_seqs;
        }
        cost_batch b;
        cost_batch_from_step(&b, s);
        s->duration = cost_step_time(m, &b) / (1 + wanted_error(i));
    }
    memset(&st[k], 0, sizeof st[k]);
    st[k].index = k, st[k].duration = 0.01;
    k++;
    memset(&st[k], 0, sizeof st[k]);
    st[k].index = k, st[k].decode_seqs = st[k].decode_tokens = 3;
    k++;
    *n = k;
    cost_free(m);
}

static void class_errors(int cls, double *v, size_t *n)
{
    *n = 0;
    for (int i = 0; i < N_STEPS; i++)
        if (i % 3 == cls) v[(*n)++] = wanted_error(i);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's linear percentile, by hand */
static double pct(double *v, size_t n, double q)
{
    qsort(v, n, sizeof *v, cmp);
    double pos = q / 100 * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    size_t hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (pos - (double)lo) * (v[hi] - v[lo]);
}

static void test_known_errors(void)
{
    tr_step st[N_STEPS + 2];
    size_t n;
    make_steps(st, &n);
    cost_model *m = cost_linear_new(&K);
    char csv[256];
    tu_tmp_path("steps.csv", csv, sizeof csv);
    vs_result r;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(validate_steps(m, st, n, 0, csv, &r, &e), 0);
    CU_ASSERT_EQUAL(r.used, N_STEPS);
    CU_ASSERT_EQUAL(r.skipped, 2);
    for (int c = 0; c < COST_N_CLASSES; c++) {
        double v[N_STEPS];
        size_t k;
        class_errors(c, v, &k);
        CU_ASSERT_EQUAL(r.cls[c].n, k);
        CU_ASSERT(fabs(r.cls[c].median - pct(v, k, 50)) < 1e-9);
        CU_ASSERT(fabs(r.cls[c].p90 - pct(v, k, 90)) < 1e-9);
        CU_ASSERT(fabs(r.cls[c].max - pct(v, k, 100)) < 1e-9);
    }
    /* one CSV row per compared step, each with its own error */
    FILE *f = fopen(csv, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[256];
    int rows = 0;
    CU_ASSERT_PTR_NOT_NULL(fgets(line, sizeof line, f));
    CU_ASSERT_STRING_EQUAL(line, "step,class,measured_ms,predicted_ms,rel_error\n");
    while (fgets(line, sizeof line, f)) {
        unsigned long long idx;
        char cls[16];
        double meas, pred, err;
        CU_ASSERT_EQUAL(sscanf(line, "%llu,%15[^,],%lf,%lf,%lf", &idx, cls, &meas, &pred, &err), 5);
        CU_ASSERT(idx < N_STEPS);
        CU_ASSERT(fabs(err - wanted_error((int)idx)) < 1e-5);
        CU_ASSERT(fabs(pred / meas - (1 + wanted_error((int)idx))) < 1e-4);
        rows++;
    }
    fclose(f);
    CU_ASSERT_EQUAL(rows, N_STEPS);
    remove(csv);

    /* nothing to compare, and a tp the model cannot price */
    CU_ASSERT_EQUAL(validate_steps(m, st + N_STEPS, 2, 0, NULL, &r, &e), -1);
    CU_ASSERT(strstr(e.msg, "no step record") != NULL);
    CU_ASSERT_EQUAL(validate_steps(m, st, n, 4, NULL, &r, &e), -1);
    CU_ASSERT(strstr(e.msg, "tensor-parallel size 4") != NULL);
    cost_free(m);
}

static int write_trace(const char *path, int with_steps)
{
    tr_step st[N_STEPS + 2];
    size_t n;
    make_steps(st, &n);
    tr_header h;
    tr_header_init(&h);
    rh_err e;
    tr_writer *w = tr_writer_open(path, &h, 0, &e);
    tr_header_free(&h);
    if (!w) return -1;
    for (size_t i = 0; i < n && with_steps; i++)
        if (tr_write_step(w, &st[i], &e) < 0) {
            tr_writer_abort(w);
            return -1;
        }
    return tr_writer_close(w, &e);
}

static void test_cli(void)
{
    char trace[256], cost[256], dir[256], cmd[2048], out[8192], path[512];
    tu_tmp_path("vs.rhtr", trace, sizeof trace);
    tu_tmp_path("vs-cost.json", cost, sizeof cost);
    tu_tmp_path("vs-out", dir, sizeof dir);
    CU_ASSERT_EQUAL_FATAL(write_trace(trace, 1), 0);
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(cost_linear_save(cost, &K, 1, 0.1, NULL, &e), 0);

    snprintf(cmd, sizeof cmd, "%s validate-steps %s %s -o %s", tu_bin(), trace, cost, dir);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n  %s\n", out);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(strstr(out, "30 steps") && strstr(out, "2 skipped"));
    /* decode errors 0, 0, 2, ..., 16%: median 7%, p90 14.2%, max 16% */
    CU_ASSERT(strstr(out, "decode         10     7.0%    14.2%    16.0%") != NULL);
    CU_ASSERT(strstr(out, "mixed          10    10.0%    10.0%    10.0%") != NULL);
    snprintf(path, sizeof path, "%s/steps.csv", dir);
    CU_ASSERT(tu_file_exists(path));
    snprintf(path, sizeof path, "%s/scatter.png", dir);
    int plotted = tu_file_exists(path);
    if (!plotted) printf("\n  (no scatter plot: %s)\n", out);
    CU_ASSERT(plotted || strstr(out, "gnuplot"));

    snprintf(cmd, sizeof cmd, "%s validate-steps %s %s -o %s --json --no-plot", tu_bin(), trace, cost, dir);
    rc = tu_run(cmd, out, sizeof out);
    CU_ASSERT_EQUAL(rc, 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    json_t *pf = json_object_get(json_object_get(j, "error"), "prefill");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(pf, "steps")), 10);
    CU_ASSERT(fabs(json_number_value(json_object_get(pf, "max")) - 0.08) < 1e-6);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "kind")), "linear");
    json_decref(j);

    /* bad input */
    char empty[256], bad_cost[256];
    tu_tmp_path("vs-empty.rhtr", empty, sizeof empty);
    tu_tmp_path("vs-bad.json", bad_cost, sizeof bad_cost);
    CU_ASSERT_EQUAL_FATAL(write_trace(empty, 0), 0);
    const char *bc = "{\"kind\": \"table\", \"version\": 7}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(bad_cost, bc, strlen(bc)), 0);
    struct {
        const char *a, *b, *extra, *needle;
    } bad[] = {
        {empty, cost, "", "no step records"},
        {"build/tmp/absent.rhtr", cost, "", "absent.rhtr"},
        {trace, bad_cost, "", "version 7"},
        {trace, "build/tmp/absent.json", "", "absent.json"},
        {trace, cost, "--tp 2", "tensor-parallel size 2"},
        {trace, cost, "--frobnicate", "unknown flag --frobnicate"},
        {trace, "", "", "needs RECORDED and COST"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s validate-steps %s %s %s -o %s/bad", tu_bin(), bad[i].a, bad[i].b, bad[i].extra,
                 dir);
        rc = tu_run(cmd, out, sizeof out);
        CU_ASSERT_EQUAL(rc, 1);
        int ok = strstr(out, bad[i].needle) != NULL;
        if (!ok) printf("\n  %s -> %s\n", cmd, out);
        CU_ASSERT(ok);
        snprintf(path, sizeof path, "%s/bad/steps.csv", dir);
        CU_ASSERT(!tu_file_exists(path));
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s %s %s %s %s", dir, trace, cost, empty, bad_cost);
    tu_run(cmd, NULL, 0);
}

void register_test_cost_table_validate(void)
{
    CU_pSuite s = CU_add_suite("cost_table_validate", NULL, NULL);
    CU_add_test(s, "known relative errors per class", test_known_errors);
    CU_add_test(s, "rehearse validate-steps front", test_cli);
}
