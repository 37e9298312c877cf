/* test_live_fit.c — the fit to client-side timings (sim/calibrate/live_fit.h)
 * on a trace the simulator itself made, so the answer is known exactly: lone
 * requests of log-spaced prompts, each its own steps, so the overhead
 * between a send and the scheduler (overheads.arrival_s) moves their TTFTs
 * and nothing else. The fit's first stage scores the ITLs alone; at the
 * kind's starting point, where the step's terms are already the truth,
 * that stage has nothing to gain, and the TTFTs that only the arrival
 * explains must not pull the step's terms away. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/calibrate/live_fit.h"
#include "sim/cost/cost.h"
#include "sim/sim.h"
#include "testutil.h"
#include "traces/import/import.h"

static int init(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

static const char *const BASE = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", "
                                "\"gpu\": \"h100-sxm\", \"tp\": 1}";

typedef struct losses {
    int n;
    double first, least;   /* the stage's losses */
    double shown;          /* the progress line's, the last */
    int shown_rose;        /* it rose once: two quantities shown as one */
} losses;

static void on_progress(void *ctx, int evals, double loss, double stage_loss)
{
    losses *l = ctx;
    if (evals == 1) l->first = stage_loss;
    if (l->n == 0 || stage_loss < l->least) l->least = stage_loss;
    if (l->n > 0 && loss > l->shown) l->shown_rose = 1;   /* the line's loss never rises */
    l->shown = loss;
    l->n++;
}

static void test_first_stage_scores_itl_alone(void)
{
    const live_kind *k = &live_roofline;
    /* the secret: the kind's starting point, but 40 ms from send to scheduler */
    double secret[LIVE_MAX_TERMS];
    memcpy(secret, k->start, sizeof secret);
    CU_ASSERT_STRING_EQUAL_FATAL(k->term[3], "overheads.arrival_s");
    CU_ASSERT_FATAL(!k->itl_stage[3] && k->itl_stage[1] && k->itl_stage[2]);
    secret[3] = 0.04;
    rh_err e = {{0}};
    char *text = live_fit_cost_text(k, BASE, secret, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    cost_model *m = cost_parse(text, "secret.json", &e);
    free(text);
    if (!m) printf("\n  %s\n", e.msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);

    /* twelve prompts of 64 to 8192 tokens, 32 tokens out each, 1 s apart:
     * every request runs alone */
    tr_trace t;
    tr_trace_init(&t);
    for (int i = 0; i < 12; i++) {
        tr_request r = {.id = (uint64_t)i + 1, .arrival = i, .input_len = (uint32_t)lround(64 * pow(2, i * 7 / 11.0)),
                        .output_len = 32};
        CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(&t, &r, &e), 0);
    }
    sim_config sc;
    sim_config_default(&sc);
    char path[256];
    sc.out_path = tu_tmp_path("live_fit_measured.rhtr", path, sizeof path);
    sim_result sr;
    CU_ASSERT_EQUAL_FATAL(sim_run(&sc, &t, m, &sr, &e), 0);
    for (size_t i = 0; i < sr.n_requests; i++) CU_ASSERT(sr.requests[i].e2e < 0.9);   /* alone: done before the next */
    sim_result_free(&sr);
    cost_free(m);
    tr_trace measured;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(path, &measured, &e), 0);
    CU_ASSERT_EQUAL_FATAL(measured.n_requests, 12);
    CU_ASSERT_EQUAL_FATAL(measured.requests[0].n_times, 32);

    live_fit_opts o;
    live_fit_opts_default(&o);
    o.base_json = BASE;
    o.iters = 60;
    o.restarts = 1;
    losses l = {0};
    o.progress = on_progress;
    o.ctx = &l;
    live_fit_result r;
    int rc = live_fit(&measured, &o, &r, &e);
    if (rc) printf("\n  live_fit: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    printf("\n  %d simulations; first loss %.3g; fitted compute %.4f memory %.4f step %.4g ms arrival+request "
           "%.4g ms (secret %.4g) ",
           r.evals, l.first, r.terms[0], r.terms[1], 1e3 * r.terms[2], 1e3 * (r.terms[3] + r.terms[4]),
           1e3 * (secret[3] + secret[4]));
    /* Stage 1, at the start: the step's terms are the secret's and every
     * ITL matches (the arrival does not move them), so its loss is 0 */
    CU_ASSERT(l.first < 1e-12);
    CU_ASSERT_FALSE(l.shown_rose);   /* the progress line's loss is one quantity across the stages */
    /* and the fit ends where the secret is: the step's terms kept, the
     * arrival found (with the tokenizer's, which lone requests cannot
     * tell apart from it) */
    CU_ASSERT_DOUBLE_EQUAL(r.terms[1], secret[1], 1e-3 * secret[1]);
    CU_ASSERT_DOUBLE_EQUAL(r.terms[2], secret[2], 1e-3 * secret[2]);
    CU_ASSERT_DOUBLE_EQUAL(r.terms[0], secret[0], 0.02 * secret[0]);
    CU_ASSERT_DOUBLE_EQUAL(r.terms[3] + r.terms[4], secret[3] + secret[4], 0.02 * (secret[3] + secret[4]));
    CU_ASSERT(r.err[LIVE_ERR_ITL].median < 1e-6);
    CU_ASSERT(r.err[LIVE_ERR_TTFT].median < 0.01);
    live_fit_result_free(&r);
    tr_trace_free(&measured);
    tr_trace_free(&t);
    remove(path);
}

void register_test_live_fit(void)
{
    CU_pSuite s = CU_add_suite("live_fit", init, NULL);
    CU_add_test(s, "stage 1 fits the step on ITLs alone: TTFTs only the arrival moves leave it", test_first_stage_scores_itl_alone);
}
