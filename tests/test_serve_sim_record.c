/* test_serve_sim_record.c — `rehearse serve --backend sim` records what it
 * priced: under concurrent load, every step record's duration is the cost
 * model's price of that step's batch, computed again here by hand from the
 * record's own shape (a linear cost file: base + per prefill token + per
 * decode sequence + per decode context token + per attention unit), and
 * `rehearse fit` on the recording gives back the cost file's coefficients.
 * A step formed after the last one's priced end (the loop's own work) once
 * kept only the remnant of its price after that gap, 30-140 us of 11 ms,
 * and the fit collapsed. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>

#include "test_hardening_util.h"
#include "test_serve_util.h"
#include "testutil.h"
#include "traces/import/import.h"
#include "traces/trace.h"

#define BASE 0.011
#define PER_PREFILL 2e-5
#define PER_DECODE 1e-4
#define PER_CONTEXT 1e-8
#define PER_ATTN 1e-10

typedef struct sr_client {
    const char *url;
    int k, ok;
} sr_client;

static void *sr_run(void *arg)
{
    sr_client *c = arg;
    for (int m = 0; m < 3; m++) {
        char body[4096];
        int n = 7 * c->k + 13 * m + 1, len = snprintf(body, sizeof body, "{\"prompt\":[");
        for (int i = 0; i < n; i++) len += snprintf(body + len, sizeof body - (size_t)len, "%s%d", i ? "," : "", 7 + i % 300);
        snprintf(body + len, sizeof body - (size_t)len, "],\"max_tokens\":%d,\"ignore_eos\":true}", 5 + c->k);
        ts_resp r = ts_request_at(c->url, "POST", "/v1/completions", body, NULL);
        c->ok += r.status == 200;
        ts_resp_free(&r);
    }
    return NULL;
}

static void test_steps_recorded_as_priced(void)
{
    hu_watchdog(120);
    char cost[256], rec[256], fit[256];
    tu_tmp_path("sr-linear.json", cost, sizeof cost);
    tu_tmp_path("sr-rec.rhtr", rec, sizeof rec);
    tu_tmp_path("sr-fit.json", fit, sizeof fit);
    char text[512];
    snprintf(text, sizeof text,
             "{\"kind\": \"linear\", \"version\": 1, \"base_s\": %g, \"per_prefill_token_s\": %g, "
             "\"per_decode_seq_s\": %g, \"per_context_token_s\": %g, \"per_attention_s\": %g}",
             BASE, PER_PREFILL, PER_DECODE, PER_CONTEXT, PER_ATTN);
    CU_ASSERT_FATAL(tu_write_file(cost, text, strlen(text)) == 0);
    const char *args[] = {"--backend", "sim", "--cost", cost, "--record-trace", rec, NULL};
    hu_proc p;
    CU_ASSERT_FATAL(hu_spawn(&p, "serve-sim-record", args, 0) == 0);
    enum { N = 16 };
    sr_client c[N];
    pthread_t t[N];
    for (int k = 0; k < N; k++) {
        c[k] = (sr_client){.url = p.url, .k = k + 1};
        pthread_create(&t[k], NULL, sr_run, &c[k]);
    }
    int ok = 0;
    for (int k = 0; k < N; k++) {
        pthread_join(t[k], NULL);
        ok += c[k].ok;
    }
    CU_ASSERT_EQUAL(ok, 3 * N);
    kill(p.pid, SIGTERM);
    CU_ASSERT_EQUAL(hu_exit_status(p.pid), 0);

    rh_err e = {{0}};
    tr_reader *rd = tr_reader_open(rec, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rd);
    tr_record r;
    int steps = 0, off = 0, rc;
    double worst = 0;
    while ((rc = tr_reader_next(rd, &r, &e)) == 1) {
        if (r.kind != TR_STEP) continue;
        const tr_step *s = &r.step;
        double want = BASE + PER_PREFILL * (s->prefill_tokens + (s->decode_tokens - s->decode_seqs)) +
                      PER_DECODE * s->decode_seqs + PER_CONTEXT * (double)s->decode_context +
                      PER_ATTN * (double)s->prefill_attn;
        double err = fabs(s->duration - want) / want;
        if (err > worst) worst = err;
        off += err > 1e-9;
        steps++;
    }
    CU_ASSERT_EQUAL(rc, 0);
    tr_reader_close(rd);
    printf("\n    %d steps recorded, %d off their price, worst %.3g", steps, off, worst);
    CU_ASSERT(steps > 50);
    CU_ASSERT_EQUAL(off, 0);

    /* The fit gives the cost file back. */
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s fit %s -o %s 2>&1", tu_bin(), rec, fit);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    json_t *j = json_load_file(fit, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    double base = json_number_value(json_object_get(j, "base_s"));
    double pre = json_number_value(json_object_get(j, "per_prefill_token_s"));
    double dec = json_number_value(json_object_get(j, "per_decode_seq_s"));
    printf(", fit: base %.6g s, per prefill token %.6g s, per decode sequence %.6g s\n    ", base, pre, dec);
    CU_ASSERT(fabs(base - BASE) < 1e-6 * BASE);
    CU_ASSERT(fabs(pre - PER_PREFILL) < 1e-6 * PER_PREFILL);
    CU_ASSERT(fabs(dec - PER_DECODE) < 1e-6 * PER_DECODE);
    json_decref(j);
    hu_watchdog(0);
}

/* Priority over HTTP: with one request running at a time (20 ms a step),
 * a long request holds the server for a second while three more arrive
 * 0.1 s in, with priorities 1, 5 and 3 (/generate's field and the
 * completions one); the record holds each priority, and they are served
 * 5, 3, 1 (SGLang's order: higher first). A priority that is not a
 * whole number is refused, naming it. */
typedef struct pr_client {
    const char *url, *path, *body;
    double delay;
    int status;
} pr_client;

static void *pr_run(void *arg)
{
    pr_client *c = arg;
    if (c->delay > 0) usleep((useconds_t)(c->delay * 1e6));
    ts_resp r = ts_request_at(c->url, "POST", c->path, c->body, NULL);
    c->status = r.status;
    ts_resp_free(&r);
    return NULL;
}

static void test_priority_over_http(void)
{
    hu_watchdog(120);
    char cost[256], rec[256];
    tu_tmp_path("pr-linear.json", cost, sizeof cost);
    tu_tmp_path("pr-rec.rhtr", rec, sizeof rec);
    const char *text = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.02, \"per_prefill_token_s\": 0, "
                       "\"per_decode_seq_s\": 0, \"per_context_token_s\": 0, \"per_attention_s\": 0}";
    CU_ASSERT_FATAL(tu_write_file(cost, text, strlen(text)) == 0);
    const char *args[] = {"--backend", "sim", "--cost", cost, "--record-trace", rec, "--max-running-requests", "1",
                          "--enable-priority-scheduling", NULL};
    hu_proc p;
    CU_ASSERT_FATAL(hu_spawn(&p, "serve-priority", args + 0, 0) == 0);
    ts_resp bad = ts_request_at(p.url, "POST", "/v1/completions",
                                "{\"prompt\":[1,2],\"max_tokens\":1,\"priority\":\"high\"}", NULL);
    CU_ASSERT_EQUAL(bad.status, 400);
    CU_ASSERT_PTR_NOT_NULL(bad.body ? strstr(bad.body, "priority") : NULL);
    ts_resp_free(&bad);
    pr_client c[4] = {
        {p.url, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":50,\"ignore_eos\":true}", 0, 0},
        {p.url, "/v1/completions", "{\"prompt\":[4,5,6],\"max_tokens\":2,\"ignore_eos\":true,\"priority\":1}", 0.1, 0},
        {p.url, "/generate",
         "{\"input_ids\":[7,8,9],\"sampling_params\":{\"max_new_tokens\":2,\"ignore_eos\":true},\"priority\":5}", 0.1, 0},
        {p.url, "/v1/completions", "{\"prompt\":[10,11,12],\"max_tokens\":2,\"ignore_eos\":true,\"priority\":3}", 0.1, 0},
    };
    pthread_t t[4];
    for (int k = 0; k < 4; k++) pthread_create(&t[k], NULL, pr_run, &c[k]);
    for (int k = 0; k < 4; k++) {
        pthread_join(t[k], NULL);
        CU_ASSERT_EQUAL(c[k].status, 200);
    }
    kill(p.pid, SIGTERM);
    CU_ASSERT_EQUAL(hu_exit_status(p.pid), 0);

    rh_err e = {{0}};
    tr_trace tr;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(rec, &tr, &e), 0);
    double first[6] = {0};   /* by priority 1, 3, 5: when its first token came */
    int seen = 0;
    for (size_t i = 0; i < tr.n_requests; i++) {
        const tr_request *q = &tr.requests[i];
        if (q->priority == 1 || q->priority == 3 || q->priority == 5) {
            first[q->priority] = q->arrival + q->ttft;
            seen++;
        }
    }
    CU_ASSERT_EQUAL(seen, 3);
    printf("\n    first tokens at %.3f (priority 5), %.3f (3), %.3f (1) s", first[5], first[3], first[1]);
    CU_ASSERT(first[5] < first[3] && first[3] < first[1]);
    tr_trace_free(&tr);
    hu_watchdog(0);
}

void register_test_serve_sim_record(void)
{
    CU_pSuite s = CU_add_suite("serve_sim_record", NULL, NULL);
    CU_add_test(s, "serve --backend sim: every step recorded at its price; fit gives the cost file back",
                test_steps_recorded_as_priced);
    CU_add_test(s, "priority over HTTP: recorded, and served higher first under --enable-priority-scheduling",
                test_priority_over_http);
}
