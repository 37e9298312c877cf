/* test_plan.c — rehearse plan against computations of the same thing done
 * another way: the winner's evaluation against its own simulation, the
 * halving search against the exhaustive one, every candidate the capacity
 * bound pruned against its simulation (none meets the SLOs), a killed and
 * resumed plan against an uninterrupted one, one worker against two; and
 * the refusals, launch lines and command-line errors a user meets. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "engine/router/router.h"
#include "sim/plan/internal.h"
#include "sim/plan/launch.h"
#include "sim/plan/report.h"
#include "testutil.h"
#include "util/rng.h"

/* Poisson arrivals at `rate`, prompts 256..2047 and outputs 32..287 tokens. */
static void make_trace(tr_trace *t, uint32_t n, double rate, uint64_t seed)
{
    tr_trace_init(t);
    rh_rng g;
    rh_rng_seed(&g, seed);
    double at = 0;
    rh_err e;
    for (uint32_t i = 0; i < n; i++) {
        at += rh_rng_exp(&g, rate);
        tr_request r = {.id = i + 1, .arrival = at, .input_len = 256 + (uint32_t)rh_rng_below(&g, 1792),
                        .output_len = 32 + (uint32_t)rh_rng_below(&g, 256)};
        CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(t, &r, &e), 0);
    }
}

typedef struct fixture {
    cost_model *cost[2];
    plan_gpu gpus[2];
    plan_space sp;
    plan_opts o;
    tr_trace t;
} fixture;

/* llama-3-8b on an H100 and an A100: tp 1 or 2, 1..3 replicas, two max
 * running values, cache-aware and round-robin routers, colocated or 1:1
 * prefill-decode; 20 req/s, where one A100 cannot keep up. */
static void fixture_init(fixture *f)
{
    memset(f, 0, sizeof *f);
    const char *names[2] = {"h100-sxm", "a100-80g"};
    const double usd[2] = {3.0, 1.3};
    rh_err e = {{0}};
    for (int g = 0; g < 2; g++) {
        char text[256];
        snprintf(text, sizeof text, "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"%s\"}",
                 names[g]);
        f->cost[g] = cost_parse(text, "test", &e);
        CU_ASSERT_PTR_NOT_NULL_FATAL(f->cost[g]);
        f->gpus[g] = (plan_gpu){.usd_per_gpu_hour = usd[g], .cost = f->cost[g]};
        snprintf(f->gpus[g].name, sizeof f->gpus[g].name, "%s", names[g]);
    }
    f->sp = (plan_space){.gpus = f->gpus, .n_gpus = 2, .tp = {1, 2}, .n_tp = 2, .max_replicas = 3, .max_gpus = 4,
                         .chunk = {2048}, .n_chunk = 1, .max_running = {8, 256}, .n_max_running = 2,
                         .spec_steps = {0}, .n_spec = 1, .routers = {ROUTER_CACHE_AWARE, ROUTER_ROUND_ROBIN},
                         .n_routers = 2, .pd = {{0, 0}, {1, 1}}, .n_pd = 2};
    snprintf(f->sp.spec_algorithm, sizeof f->sp.spec_algorithm, "EAGLE");
    plan_opts_default(&f->o);
    f->o.slo = (plan_slo){.ttft_ms = 1000, .tpot_ms = 40, .quantile = 0.99};
    f->o.min_requests = 50;
    f->o.keep = 3;
    f->o.workers = 2;
    f->o.rate_search = false;
    make_trace(&f->t, 400, 20, 7);
}

static void fixture_free(fixture *f)
{
    for (int g = 0; g < 2; g++) cost_free(f->cost[g]);
    tr_trace_free(&f->t);
}

static int run_plan(fixture *f, plan_result *r)
{
    rh_err e = {{0}};
    int rc = plan_run(&f->o, &f->sp, &f->t, r, &e);
    if (rc) printf("\n  plan_run: %s\n", e.msg);
    return rc;
}

static char *plan_text(fixture *f, const plan_result *r)
{
    json_t *j = plan_to_json(&f->o, &f->sp, r, "m");
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(j);
    return s;
}

/* The winner's evaluation is its simulation on the whole trace; halving
 * finds what trying every candidate on the whole trace finds. */
static void test_winner_and_exhaustive(void)
{
    fixture f;
    fixture_init(&f);
    plan_result halved, all;
    CU_ASSERT_EQUAL_FATAL(run_plan(&f, &halved), 0);
    CU_ASSERT(halved.rung_candidates[1] > 0);                          /* it did halve */
    CU_ASSERT(halved.rung_candidates[1] < halved.rung_candidates[0]);
    CU_ASSERT(halved.pruned_capacity > 0);
    CU_ASSERT_FATAL(halved.n_ranked > 0);
    const plan_cand *w = &halved.c[halved.ranked[0]];
    CU_ASSERT_FATAL(plan_judge(&f.o.slo, &w->ev).ok);
    CU_ASSERT_EQUAL(w->ev.requests, f.t.n_requests);
    /* Against sim_run with the knobs the plan prints for it. */
    sim_config cfg;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(plan_cand_config(&f.sp, w, &f.o.base, &cfg, &e), 0);
    cfg.slo = (metrics_slo){.ttft_ms = f.o.slo.ttft_ms, .tpot_ms = f.o.slo.tpot_ms};
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(sim_run(&cfg, &f.t, f.sp.gpus[w->gpu].cost, &r, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(r.summary.ttft_ms.p99, w->ev.ttft_p99, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r.summary.tpot_ms.p99, w->ev.tpot_p99, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r.summary.request_goodput, w->ev.goodput, 1e-9);
    sim_result_free(&r);
    /* Every candidate on the whole trace: the same cheapest price. */
    f.o.rungs = 1;
    CU_ASSERT_EQUAL_FATAL(run_plan(&f, &all), 0);
    CU_ASSERT_EQUAL(all.rung_requests[0], f.t.n_requests);
    CU_ASSERT_FATAL(all.n_ranked > 0);
    const plan_cand *best = &all.c[all.ranked[0]];
    CU_ASSERT(plan_judge(&f.o.slo, &best->ev).ok);
    CU_ASSERT_DOUBLE_EQUAL(best->usd_hour, w->usd_hour, 1e-9);
    printf("\n  winner %s at $%.2f/hour; %u candidates, %u pruned, halving %u -> %u -> %u, exhaustive %u\n",
           "", w->usd_hour, halved.n, halved.pruned_capacity, halved.rung_candidates[0], halved.rung_candidates[1],
           halved.rung_candidates[2], all.rung_candidates[0]);
    /* The A100 is cheaper per GPU: somewhere both kinds meet the SLOs, or the
     * ranking by price would say nothing. */
    int kinds = 0;
    for (uint32_t i = 0; i < all.n_ranked; i++)
        if (plan_judge(&f.o.slo, &all.c[all.ranked[i]].ev).ok) kinds |= 1 << all.c[all.ranked[i]].gpu;
    CU_ASSERT_EQUAL(kinds, 3);
    /* Ranked: meeting first, by price. */
    for (uint32_t i = 1; i < all.n_ranked; i++) {
        const plan_cand *a = &all.c[all.ranked[i - 1]], *b = &all.c[all.ranked[i]];
        bool oka = plan_judge(&f.o.slo, &a->ev).ok, okb = plan_judge(&f.o.slo, &b->ev).ok;
        CU_ASSERT(oka >= okb);
        if (oka && okb) CU_ASSERT(a->usd_hour <= b->usd_hour);
    }
    /* Halving as hard as it goes (one kept a rung, from 20 requests): the
     * cheap ones that meet the SLOs on 20 requests miss them on 400, and
     * the dearer ones dropped for them are simulated after all. */
    plan_result hard;
    f.o.rungs = 3;
    f.o.eta = 8;
    f.o.keep = 1;
    f.o.min_requests = 20;
    CU_ASSERT_EQUAL_FATAL(run_plan(&f, &hard), 0);
    CU_ASSERT(hard.backfilled > 0);
    CU_ASSERT_FATAL(hard.n_ranked > 0);
    CU_ASSERT(plan_judge(&f.o.slo, &hard.c[hard.ranked[0]].ev).ok);
    CU_ASSERT_DOUBLE_EQUAL(hard.c[hard.ranked[0]].usd_hour, best->usd_hour, 1e-9);
    printf("  halving 1 of 8 a rung: %u -> %u -> %u, %u more after, winner at $%.2f/hour\n", hard.rung_candidates[0],
           hard.rung_candidates[1], hard.rung_candidates[2], hard.backfilled, hard.c[hard.ranked[0]].usd_hour);
    plan_result_free(&hard);
    plan_result_free(&halved);
    plan_result_free(&all);
    fixture_free(&f);
}

/* The capacity bound prunes only what a simulation would fail. */
static void test_capacity_bound_is_sound(void)
{
    fixture f;
    fixture_init(&f);
    plan_result r;
    CU_ASSERT_EQUAL_FATAL(run_plan(&f, &r), 0);
    uint32_t checked = 0, kept_failing = 0;
    for (uint32_t i = 0; i < r.n; i++) {
        const plan_cand *c = &r.c[i];
        if (c->state == PLAN_PRUNED_CAPACITY) {
            plan_eval ev;
            rh_err e = {{0}};
            CU_ASSERT_EQUAL_FATAL(plan_simulate(&f.sp, &f.o, c, &f.t, (uint32_t)f.t.n_requests, 1, &ev, &e), 0);
            CU_ASSERT(!plan_judge(&f.o.slo, &ev).ok);
            CU_ASSERT(c->load > 1);
            checked++;
        } else if (c->state == PLAN_EVALUATED && c->rung == 0 && !plan_judge(&f.o.slo, &c->ev).ok) {
            kept_failing++;
        }
    }
    CU_ASSERT(checked >= 4);
    printf("\n  %u pruned candidates simulated: none meets the SLOs (%u others fail on the first rung)\n", checked,
           kept_failing);
    plan_result_free(&r);
    fixture_free(&f);
}

/* The same plan with one worker or two, and read back from a resume
 * folder: the same bytes. A plan killed mid-run and resumed, too. */
static void test_resume_and_workers(void)
{
    fixture f;
    fixture_init(&f);
    char dir[400], cmd[4000];
    tu_tmp_path("plan-resume", dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
    plan_result a, b, c;
    f.o.workers = 1;
    CU_ASSERT_EQUAL_FATAL(run_plan(&f, &a), 0);
    char *ta = plan_text(&f, &a);
    f.o.workers = 2;
    f.o.resume_dir = dir;
    f.o.question = "test question\n";
    CU_ASSERT_EQUAL_FATAL(run_plan(&f, &b), 0);
    char *tb = plan_text(&f, &b);
    CU_ASSERT_STRING_EQUAL(ta, tb);
    CU_ASSERT(b.simulations > 0);
    CU_ASSERT_EQUAL(b.resumed, 0);
    /* Rerun: everything read back, nothing simulated. */
    CU_ASSERT_EQUAL_FATAL(run_plan(&f, &c), 0);
    char *tc = plan_text(&f, &c);
    CU_ASSERT_STRING_EQUAL(ta, tc);
    CU_ASSERT_EQUAL(c.simulations, 0);
    CU_ASSERT_EQUAL(c.resumed, b.simulations);
    plan_result_free(&c);
    free(tc);
    /* Half the lines and a torn one, as a kill mid-write leaves them. */
    char log[500];
    snprintf(log, sizeof log, "%s/evals.jsonl", dir);
    snprintf(cmd, sizeof cmd, "n=$(wc -l < '%s'); head -n $((n / 2)) '%s' > '%s.h' && printf '{\"key\": \"h100' >> '%s.h' && mv '%s.h' '%s'",
             log, log, log, log, log, log);
    CU_ASSERT_EQUAL(system(cmd), 0);
    CU_ASSERT_EQUAL_FATAL(run_plan(&f, &c), 0);
    tc = plan_text(&f, &c);
    CU_ASSERT_STRING_EQUAL(ta, tc);
    CU_ASSERT(c.simulations > 0 && c.resumed > 0);
    CU_ASSERT_EQUAL(c.simulations + c.resumed, b.simulations);
    plan_result_free(&c);
    free(tc);
    /* A real kill: a child plans into a fresh folder and is killed once a
     * few evaluations are kept; the rerun ends with the same plan. */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
    f.o.workers = 1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        plan_result x;
        rh_err e;
        _exit(plan_run(&f.o, &f.sp, &f.t, &x, &e) == 0 ? 0 : 1);
    }
    int lines = 0;
    for (int spin = 0; spin < 20000 && lines < 5; spin++) {
        FILE *l = fopen(log, "r");
        lines = 0;
        if (l) {
            int ch;
            while ((ch = getc(l)) != EOF) lines += ch == '\n';
            fclose(l);
        }
        usleep(1000);
    }
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    CU_ASSERT_EQUAL_FATAL(run_plan(&f, &c), 0);
    tc = plan_text(&f, &c);
    CU_ASSERT_STRING_EQUAL(ta, tc);
    printf("\n  killed after %d kept evaluations (%s); resumed %llu, simulated %llu\n", lines,
           WIFSIGNALED(status) ? "by the signal" : "it had finished", (unsigned long long)c.resumed,
           (unsigned long long)c.simulations);
    CU_ASSERT(c.resumed >= 5);
    plan_result_free(&c);
    free(tc);
    /* Another question in the same folder is refused. */
    f.o.question = "another\n";
    rh_err e = {{0}};
    CU_ASSERT_EQUAL(plan_run(&f.o, &f.sp, &f.t, &c, &e), -1);
    CU_ASSERT(strstr(e.msg, "another plan") != NULL);
    free(ta);
    free(tb);
    plan_result_free(&a);
    plan_result_free(&b);
    fixture_free(&f);
}

/* A model too big for one GPU is refused with its numbers; SLOs judged on
 * every request, a failed one over every bound. */
static void test_refusals_and_judging(void)
{
    rh_err e = {{0}};
    cost_model *m = cost_parse("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-70b\", \"gpu\": \"h100-sxm\"}",
                               "test", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    plan_gpu g = {.name = "h100-sxm", .usd_per_gpu_hour = 3, .cost = m};
    plan_space sp = {.gpus = &g, .n_gpus = 1, .tp = {1, 8}, .n_tp = 2, .max_replicas = 1, .chunk = {2048},
                     .n_chunk = 1, .max_running = {64}, .n_max_running = 1, .spec_steps = {0, 2}, .n_spec = 2,
                     .routers = {ROUTER_CACHE_AWARE}, .n_routers = 1, .pd = {{0, 0}}, .n_pd = 1};
    snprintf(sp.spec_algorithm, sizeof sp.spec_algorithm, "EAGLE");
    plan_opts o;
    plan_opts_default(&o);
    o.slo = (plan_slo){.ttft_ms = 5000, .tpot_ms = 200, .quantile = 0.99};
    o.rate_search = true;
    tr_trace t;
    make_trace(&t, 60, 2, 3);
    plan_result r;
    CU_ASSERT_EQUAL_FATAL(plan_run(&o, &sp, &t, &r, &e), 0);
    CU_ASSERT_EQUAL(r.n, 4);
    CU_ASSERT_EQUAL(r.refused_memory, 2);
    CU_ASSERT(strstr(r.first_refusal, "does not fit 1 x h100-sxm") != NULL);
    CU_ASSERT_FATAL(r.n_ranked == 2);
    /* The rate search: the best one sustains more than the trace's rate, and
     * a little more than that does not meet the SLOs any more. */
    CU_ASSERT_FATAL(r.per_gpu[0].best >= 0);
    CU_ASSERT(r.per_gpu[0].max_rate_scale > 1);
    plan_eval ev;
    const plan_cand *best = &r.c[r.per_gpu[0].best];
    CU_ASSERT_EQUAL(plan_simulate(&sp, &o, best, &t, (uint32_t)t.n_requests, r.per_gpu[0].max_rate_scale, &ev, &e), 0);
    CU_ASSERT(plan_judge(&o.slo, &ev).ok);
    if (r.per_gpu[0].max_rate_scale < 64) {
        CU_ASSERT_EQUAL(plan_simulate(&sp, &o, best, &t, (uint32_t)t.n_requests, r.per_gpu[0].max_rate_scale * 1.05,
                                      &ev, &e), 0);
        CU_ASSERT(!plan_judge(&o.slo, &ev).ok);
    }
    /* The launch lines of a speculating one. */
    for (uint32_t i = 0; i < r.n_ranked; i++) {
        const plan_cand *c = &r.c[r.ranked[i]];
        if (!c->spec_steps) continue;
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        plan_launch_lines(&sp, c, "meta-llama/Meta-Llama-3-70B", f);
        fclose(f);
        CU_ASSERT(strstr(text, "--tp-size 8 --chunked-prefill-size 2048 --max-running-requests 64") != NULL);
        CU_ASSERT(strstr(text, "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3") != NULL);
        CU_ASSERT(strstr(text, "\"num_speculative_tokens\": 2") != NULL);
        free(text);
    }
    plan_result_free(&r);
    /* Judging: an infinite quantile when more than 1% never got a token. */
    plan_eval bad = {.ttft_q = INFINITY, .tpot_q = 10};
    plan_verdict v = plan_judge(&o.slo, &bad);
    CU_ASSERT(!v.ok);
    CU_ASSERT(v.worst < 0);
    plan_slo att = {.ttft_ms = 1, .tpot_ms = 1, .attainment = 0.9};
    plan_eval half = {.attainment = 0.89};
    CU_ASSERT(!plan_judge(&att, &half).ok);
    half.attainment = 0.9;
    CU_ASSERT(plan_judge(&att, &half).ok);
    tr_trace_free(&t);
    cost_free(m);
}

/* Prediction intervals: the best are bounded, judged by the bound, and
 * ranked again by it. */
static void test_plan_intervals(void)
{
    fixture f;
    fixture_init(&f);
    const char *names[2] = {"h100-sxm", "a100-80g"};   /* the fixture's, not read from f: snprintf into f */
    for (int g = 0; g < 2; g++) {
        snprintf(f.gpus[g].text, sizeof f.gpus[g].text,
                 "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"%s\"}",
                 names[g]);
        f.gpus[g].cost_text = f.gpus[g].text;
    }
    f.o.interval_runs = 6;
    f.o.step_noise = 0.05;
    plan_result r;
    CU_ASSERT_EQUAL_FATAL(run_plan(&f, &r), 0);
    CU_ASSERT(r.bounded >= f.o.keep);
    for (uint32_t i = 0; i < f.o.keep && i < r.n_ranked; i++) {
        const plan_eval *ev = &r.c[r.ranked[i]].ev;
        CU_ASSERT(ev->ttft_hi > 0 && ev->tpot_hi > 0);
        /* p95 of 6 noisy runs' p99 against the noise-free one's */
        CU_ASSERT(ev->ttft_hi > 0.5 * ev->ttft_q && ev->ttft_hi < 2 * ev->ttft_q);
        if (i) CU_ASSERT(plan_judge(&f.o.slo, &r.c[r.ranked[i - 1]].ev).ok >= plan_judge(&f.o.slo, ev).ok);
    }
    plan_result_free(&r);
    /* Judged by the bound: a quantile within the SLO whose bound is not misses. */
    plan_eval ev = {.ttft_q = 900, .tpot_q = 30, .ttft_hi = 1100, .tpot_hi = 31};
    CU_ASSERT(!plan_judge(&f.o.slo, &ev).ok);
    ev.ttft_hi = 950;
    CU_ASSERT(plan_judge(&f.o.slo, &ev).ok);
    fixture_free(&f);
}

/* Prefill-decode candidates: split as the ratio says, launched in SGLang's
 * PD mode behind its router. */
static void test_pd_split_and_launch(void)
{
    fixture f;
    fixture_init(&f);
    f.sp.max_replicas = 4;
    f.sp.pd[1][0] = 1;
    f.sp.pd[1][1] = 3;
    plan_cand *c;
    uint32_t n;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(plan_enumerate(&f.sp, &c, &n, &e), 0);
    int pd = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!c[i].prefill) continue;
        pd++;
        CU_ASSERT(c[i].replicas >= 2);
        CU_ASSERT_EQUAL(c[i].prefill, c[i].replicas == 4 ? 1u : 1u);
        if (c[i].replicas == 4 && c[i].tp == 1 && c[i].gpu == 0 && c[i].max_running == 8) {
            char *text = NULL;
            size_t len = 0;
            FILE *out = open_memstream(&text, &len);
            plan_launch_lines(&f.sp, &c[i], "m", out);
            fclose(out);
            CU_ASSERT(strstr(text, "--disaggregation-mode prefill --port 30000") != NULL);
            CU_ASSERT(strstr(text, "--disaggregation-mode decode --port 30003") != NULL);
            CU_ASSERT(strstr(text, "--pd-disaggregation --prefill http://127.0.0.1:30000 --decode") != NULL);
            free(text);
        }
    }
    CU_ASSERT(pd > 0);
    free(c);
    fixture_free(&f);
}

/* The printed `rehearse sim` flags of a candidate parsed as the command
 * line parses them: "--name value", or a bare switch. */
static int config_from_flags(const char *flags, sim_config *cfg, rh_err *e)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", flags);
    char *tok[64];
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t && n < 64; t = strtok_r(NULL, " ", &save)) tok[n++] = t;
    for (int i = 0; i < n; i++) {
        if (strncmp(tok[i], "--", 2)) return rh_fail(e, "'%s' is not a flag", tok[i]);
        const char *name = tok[i] + 2, *v = "true";
        if (i + 1 < n && strncmp(tok[i + 1], "--", 2)) v = tok[++i];
        if (sim_config_set(cfg, name, v, e) != 1) return -1;
    }
    return 0;
}

/* A model with experts: plain TP, EP, DP attention and both are searched
 * (at tp >= 2 only); each one's evaluation is `rehearse sim` with the flags
 * the plan prints for it, the modes reach the simulation, and the launch
 * lines say them as SGLang and vLLM spell them. A dense model has no EP. */
static void test_expert_and_dp_attention(void)
{
    rh_err e = {{0}};
    cost_model *m = cost_parse("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"mixtral-8x7b\", \"gpu\": \"h100-sxm\"}",
                               "test", &e);
    cost_model *dense = cost_parse("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\"}",
                                   "test", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dense);
    CU_ASSERT(plan_model_has_experts(m));
    CU_ASSERT(!plan_model_has_experts(dense));
    plan_gpu g = {.name = "h100-sxm", .usd_per_gpu_hour = 3, .cost = m};
    plan_space sp = {.gpus = &g, .n_gpus = 1, .tp = {1, 2}, .n_tp = 2, .max_replicas = 1, .max_gpus = 8,
                     .chunk = {4096}, .n_chunk = 1, .max_running = {64}, .n_max_running = 1, .spec_steps = {0},
                     .n_spec = 1, .routers = {ROUTER_CACHE_AWARE}, .n_routers = 1, .pd = {{0, 0}}, .n_pd = 1,
                     .parallel = {0, PLAN_PAR_EP, PLAN_PAR_DP_ATTENTION, PLAN_PAR_EP | PLAN_PAR_DP_ATTENTION},
                     .n_parallel = 4};
    plan_cand *c;
    uint32_t n;
    CU_ASSERT_EQUAL_FATAL(plan_enumerate(&sp, &c, &n, &e), 0);
    CU_ASSERT_EQUAL_FATAL(n, 5);   /* tp 1 plain; tp 2 in each of the four */
    CU_ASSERT_EQUAL(c[0].tp, 1);
    CU_ASSERT_EQUAL(c[0].parallel, 0);
    plan_opts o;
    plan_opts_default(&o);
    o.slo = (plan_slo){.ttft_ms = 2000, .tpot_ms = 60, .quantile = 0.99};
    tr_trace t;
    make_trace(&t, 200, 8, 3);
    plan_eval ev[5];
    for (uint32_t i = 1; i < n; i++) {
        CU_ASSERT_EQUAL(c[i].tp, 2);
        CU_ASSERT_EQUAL(c[i].parallel, i - 1);
        CU_ASSERT_EQUAL_FATAL(plan_simulate(&sp, &o, &c[i], &t, (uint32_t)t.n_requests, 1, &ev[i], &e), 0);
        char flags[512];
        plan_cand_flags(&sp, &c[i], flags, sizeof flags);
        sim_config cfg = o.base;
        CU_ASSERT_EQUAL_FATAL(config_from_flags(flags, &cfg, &e), 0);
        cfg.series_points = 16;
        sim_result r;
        CU_ASSERT_EQUAL_FATAL(sim_run(&cfg, &t, m, &r, &e), 0);
        CU_ASSERT_DOUBLE_EQUAL(r.summary.ttft_ms.p99, ev[i].ttft_p99, 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(r.summary.tpot_ms.p99, ev[i].tpot_p99, 1e-9);
        sim_result_free(&r);
        char name[160];
        plan_cand_name(&sp, &c[i], name, sizeof name);
        printf("\n  %-44s %s: p99 TTFT %.1f ms, TPOT %.2f ms", name, flags, ev[i].ttft_p99, ev[i].tpot_p99);
    }
    printf("\n");
    CU_ASSERT(ev[3].tpot_p99 != ev[1].tpot_p99);   /* DP attention reached the simulation */
    CU_ASSERT(ev[2].tpot_p99 != ev[1].tpot_p99);   /* and EP */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    plan_launch_lines(&sp, &c[4], "m", out);
    fclose(out);
    CU_ASSERT(strstr(text, "--tp-size 2 --chunked-prefill-size 4096 --max-running-requests 64 --ep-size 2 "
                           "--enable-dp-attention --dp-size 2") != NULL);
    CU_ASSERT(strstr(text, "vllm serve m --tensor-parallel-size 1 --data-parallel-size 2 --enable-expert-parallel") != NULL);
    free(text);
    /* Chunked prefill off (-1, SGLang's spelling): named, and launched so. */
    c[0].chunk = -1;
    char name0[160];
    plan_cand_name(&sp, &c[0], name0, sizeof name0);
    CU_ASSERT_STRING_EQUAL(name0, "h100-sxm tp1 x1 nochunk run64 spec0");
    out = open_memstream(&text, &len);
    plan_launch_lines(&sp, &c[0], "m", out);
    fclose(out);
    CU_ASSERT(strstr(text, "--tp-size 1 --chunked-prefill-size -1 --max-running-requests 64") != NULL);
    CU_ASSERT(strstr(text, "--tensor-parallel-size 1 --no-enable-chunked-prefill --max-num-seqs 64") != NULL);
    free(text);
    free(c);
    tr_trace_free(&t);
    cost_free(m);
    cost_free(dense);
}

/* The command line: what a user gets wrong gets one message. */
static void test_cli(void)
{
    char buf[8192], cmd[2048], trace[512];
    tu_tmp_path("plan-cli.jsonl", trace, sizeof trace);
    FILE *f = fopen(trace, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "{\"rehearse_trace\": 2, \"block_size\": 0}\n");
    for (int i = 0; i < 40; i++) fprintf(f, "{\"type\": \"request\", \"id\": %d, \"arrival\": %.3f, \"input_len\": 300, \"output_len\": 40}\n", i, i * 0.25);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s plan %s --model llama-3-8b --slo-ttft-ms 1000 2>&1", tu_bin(), trace);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "--slo-tpot-ms") != NULL);
    snprintf(cmd, sizeof cmd, "%s plan %s --model llama-3-8b --slo-ttft-ms 1000 --slo-tpot-ms 50 --tp-size 2 2>&1",
             tu_bin(), trace);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "what the plan searches") != NULL);
    snprintf(cmd, sizeof cmd, "%s plan %s --model llama-3-8b --slo-ttft-ms 1000 --slo-tpot-ms 50 --gpus b200 2>&1",
             tu_bin(), trace);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "no price for GPU 'b200'") != NULL);
    snprintf(cmd, sizeof cmd, "%s plan %s --model llama-3-8b --slo-ttft-ms 1000 --slo-tpot-ms 50 --pd 1-3 2>&1",
             tu_bin(), trace);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "'1-3'") != NULL);
    /* A small plan end to end: the table, the winner's lines, the files. */
    char dir[512];
    tu_tmp_path("plan-cli-out", dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "%s plan %s --model llama-3-8b --slo-ttft-ms 1000 --slo-tpot-ms 50 --gpus h100-sxm,a100-80g --tp 1 "
             "--max-replicas 2 --chunked-prefill-sizes 2048 --max-running-requests-list 64 --speculative-steps 0 "
             "--workers 2 -o %s 2>&1",
             tu_bin(), trace, dir);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 0);
    CU_ASSERT(strstr(buf, "a100-80g tp1 x1 chunk2048 run64 spec0") != NULL);
    CU_ASSERT(strstr(buf, "python -m sglang.launch_server --model-path meta-llama/Meta-Llama-3-8B --tp-size 1") != NULL);
    char path[700];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "candidates")), 4);
    json_t *first = json_array_get(json_object_get(j, "ranked"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(first, "gpu")), "a100-80g");
    json_decref(j);
    snprintf(path, sizeof path, "%s/candidates.csv", dir);
    CU_ASSERT(tu_file_exists(path));
    /* The knobs every candidate was given are in the winner's own line. */
    snprintf(cmd, sizeof cmd,
             "%s plan %s --model llama-3-8b --slo-ttft-ms 1000 --slo-tpot-ms 50 --gpus a100-80g --tp 1 "
             "--max-replicas 1 --chunked-prefill-sizes 2048 --max-running-requests-list 64 --speculative-steps 0 "
             "--no-rate-search --scheduler vllm --disable-radix-cache 2>&1",
             tu_bin(), trace);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 0);
    CU_ASSERT(strstr(buf, "--max-running-requests 64 --scheduler 'vllm' --disable-radix-cache --rate-scale 1") != NULL);
}

/* Runs every line of DIR/jobs/round-K.parallel but shard `skip` (-1: none). */
static int run_round(const char *dir, uint32_t round, int skip)
{
    char path[600];
    snprintf(path, sizeof path, "%s/jobs/round-%u.parallel", dir, round);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int rc = 0;
    for (int i = 0; fgets(line, sizeof line, f); i++)
        if (i != skip && system(line) != 0) rc = -1;
    fclose(f);
    return rc;
}

/* A plan in rounds of jobs (--emit-jobs, each round's shards run as the
 * parallel list runs them, --collect) is the local plan, byte for byte,
 * rate search included; a shard that left no results is named and nothing
 * is folded in; a second emit while a round is pending, and a job from
 * another plan's list, are refused. */
static void test_emit_jobs_equals_local(void)
{
    tr_trace t;
    make_trace(&t, 400, 20, 11);
    char trace[512], dir[512], local[512], viajobs[512], cmd[4096], buf[16384];
    rh_err e = {{0}};
    tu_tmp_path("plan-jobs.rhtr", trace, sizeof trace);
    CU_ASSERT_EQUAL_FATAL(tr_trace_save(&t, trace, &e), 0);
    tr_trace_free(&t);
    tu_tmp_path("plan-jobs", dir, sizeof dir);
    tu_tmp_path("plan-jobs-local", local, sizeof local);
    tu_tmp_path("plan-jobs-out", viajobs, sizeof viajobs);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s'", dir, local, viajobs);
    CU_ASSERT_EQUAL(system(cmd), 0);
    char q[1024];
    snprintf(q, sizeof q,
             "%s --model llama-3-8b --slo-ttft-ms 1000 --slo-tpot-ms 40 --gpus h100-sxm,a100-80g --tp 1,2 "
             "--max-replicas 3 --max-gpus 4 --chunked-prefill-sizes 2048 --max-running-requests-list 8,256 "
             "--speculative-steps 0 --routers cache-aware,round-robin --min-requests 50 --top 3",
             trace);
    snprintf(cmd, sizeof cmd, "%s plan %s --workers 2 -o '%s' 2>&1", tu_bin(), q, local);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, buf, sizeof buf), 0);
    snprintf(cmd, sizeof cmd, "%s plan %s --emit-jobs '%s' --shards 3 -o '%s' 2>&1", tu_bin(), q, dir, viajobs);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, buf, sizeof buf), 0);
    CU_ASSERT(strstr(buf, "plan: round 0: ") != NULL && strstr(buf, "as 3 jobs") != NULL);
    /* Emitting again before the round ran is refused. */
    snprintf(cmd, sizeof cmd, "%s plan %s --emit-jobs '%s' 2>&1", tu_bin(), q, dir);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "round 0's jobs are pending") != NULL);
    /* Shard 1 missing: named, and evals.jsonl untouched. */
    char evals[600];
    snprintf(evals, sizeof evals, "%s/evals.jsonl", dir);
    CU_ASSERT_EQUAL(run_round(dir, 0, 1), 0);
    snprintf(cmd, sizeof cmd, "%s plan --collect '%s' 2>&1", tu_bin(), dir);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "1 of 3 shards left no results (shard 1;") != NULL);
    FILE *ev = fopen(evals, "r");
    CU_ASSERT(ev != NULL && fgetc(ev) == EOF);
    if (ev) fclose(ev);
    /* A job whose line names a candidate its plan does not have there. */
    char tsv[600];
    snprintf(tsv, sizeof tsv, "%s/jobs/round-0.tsv", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.keep' && sed -i '2s/^[0-9]*\t/0\t/' '%s' && %s plan --job '%s' --round 0 --shard 1/3 2>&1",
             tsv, tsv, tsv, tu_bin(), dir);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "round-0.tsv:2: candidate 0 is not") != NULL);
    snprintf(cmd, sizeof cmd, "mv '%s.keep' '%s'", tsv, tsv);
    CU_ASSERT_EQUAL(system(cmd), 0);
    CU_ASSERT_EQUAL(run_round(dir, 0, -1), 0);
    /* Then round after round until the plan is written. */
    int rounds = 1;
    for (;;) {
        snprintf(cmd, sizeof cmd, "%s plan --collect '%s' 2>&1", tu_bin(), dir);
        CU_ASSERT_EQUAL_FATAL(tu_run(cmd, buf, sizeof buf), 0);
        char pending[600];
        snprintf(pending, sizeof pending, "%s/jobs/pending", dir);
        FILE *p = fopen(pending, "r");
        if (!p) break;
        unsigned round, shards;
        CU_ASSERT_EQUAL_FATAL(fscanf(p, "%u %u", &round, &shards), 2);
        fclose(p);
        CU_ASSERT_EQUAL(round, (unsigned)rounds);
        CU_ASSERT_EQUAL_FATAL(run_round(dir, round, -1), 0);
        CU_ASSERT_FATAL(++rounds < 40);
    }
    CU_ASSERT(strstr(buf, "the winner, simulated again on its own") != NULL);
    CU_ASSERT(rounds > 4);   /* the rungs, and the rate search's steps */
    char a[700], b[700];
    const char *files[] = {"plan.json", "candidates.csv"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/%s", local, files[i]);
        snprintf(b, sizeof b, "%s/%s", viajobs, files[i]);
        CU_ASSERT(tu_same_file(a, b));
    }
    /* Another question into the same folder is refused, the folder's own kept. */
    char kept[700];
    snprintf(kept, sizeof kept, "%s/command.txt", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.was' && %s plan %s --eta 3 --emit-jobs '%s' 2>&1", kept, kept, tu_bin(), q, dir);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "another plan") != NULL);
    char was[720];
    snprintf(was, sizeof was, "%s.was", kept);
    CU_ASSERT(tu_same_file(was, kept));
    snprintf(cmd, sizeof cmd, "%s plan --collect '%s' 2>&1", tu_bin(), dir);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "no round of jobs is pending") != NULL);
    printf("\n  %d rounds of jobs, the same plan.json and candidates.csv as one machine's\n", rounds);
}

static int init_presets(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

void register_test_plan(void)
{
    CU_pSuite s = CU_add_suite("plan", init_presets, NULL);
    CU_add_test(s, "the winner is its simulation; halving finds the exhaustive search's price", test_winner_and_exhaustive);
    CU_add_test(s, "the capacity bound prunes only candidates a simulation fails", test_capacity_bound_is_sound);
    CU_add_test(s, "one worker or two, resumed, killed and resumed: the same plan", test_resume_and_workers);
    CU_add_test(s, "refusals, the rate search, launch lines, judging", test_refusals_and_judging);
    CU_add_test(s, "prefill-decode candidates and their launch lines", test_pd_split_and_launch);
    CU_add_test(s, "prediction intervals: the best bounded, judged by the bound", test_plan_intervals);
    CU_add_test(s, "expert parallelism and DP attention searched, simulated and launched", test_expert_and_dp_attention);
    CU_add_test(s, "the command line", test_cli);
    CU_add_test(s, "a plan in rounds of jobs, collected: the local plan, byte for byte", test_emit_jobs_equals_local);
}
