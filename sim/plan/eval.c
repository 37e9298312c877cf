/* eval.c — one candidate simulated, and judged against the SLOs. */
#include "sim/plan/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/progress.h"
#include "util/stats.h"

/* The q-quantile (numpy's interpolation) of ascending x that may end in
 * infinities: infinite as soon as an infinity takes part. */
static double quantile(const double *x, size_t n, double q)
{
    if (!n) return 0;
    double pos = q * (double)(n - 1);
    size_t hi = (size_t)ceil(pos);
    if (isinf(x[hi])) return INFINITY;
    return rh_percentile_sorted(x, n, 100 * q);
}

static void judge_requests(const plan_opts *o, const sim_result *r, uint32_t n, plan_eval *ev)
{
    double *ttft_all = malloc((n ? n : 1) * sizeof *ttft_all), *tpot_all = malloc((n ? n : 1) * sizeof *tpot_all);
    double *ttft_ok = malloc((n ? n : 1) * sizeof *ttft_ok), *tpot_ok = malloc((n ? n : 1) * sizeof *tpot_ok);
    if (!ttft_all || !tpot_all || !ttft_ok || !tpot_ok) goto out;
    size_t n_ok = 0, n_tpot = 0, good = 0;
    for (uint32_t i = 0; i < n; i++) {
        const sim_request_result *q = &r->requests[i];
        if (q->ttft < 0) {
            ttft_all[i] = tpot_all[i] = INFINITY;
            continue;
        }
        double ttft = 1e3 * q->ttft;
        double tpot = q->output_len > 1 ? 1e3 * (q->e2e - q->ttft) / (q->output_len - 1) : 0;
        ttft_all[i] = ttft;
        tpot_all[i] = tpot;
        ttft_ok[n_ok++] = ttft;
        if (q->output_len > 1) tpot_ok[n_tpot++] = tpot;
        good += ttft <= o->slo.ttft_ms && tpot <= o->slo.tpot_ms;
    }
    rh_summary s;
    rh_summarize(ttft_ok, n_ok, &s);
    ev->ttft_p50 = s.median;
    ev->ttft_p99 = s.p99;
    rh_summarize(tpot_ok, n_tpot, &s);
    ev->tpot_p50 = s.median;
    ev->tpot_p99 = s.p99;
    rh_sort_doubles(ttft_all, n);
    rh_sort_doubles(tpot_all, n);
    double q = o->slo.quantile > 0 ? o->slo.quantile : 0.99;
    ev->ttft_q = quantile(ttft_all, n, q);
    ev->tpot_q = quantile(tpot_all, n, q);
    ev->attainment = n ? (double)good / n : 0;
    ev->goodput = r->summary.duration > 0 ? good / r->summary.duration : 0;
out:
    free(ttft_all);
    free(tpot_all);
    free(ttft_ok);
    free(tpot_ok);
}

int plan_simulate(const plan_space *sp, const plan_opts *o, const plan_cand *c, const tr_trace *t, uint32_t n,
                  double rate_scale, plan_eval *ev, rh_err *e)
{
    memset(ev, 0, sizeof *ev);
    sim_config cfg;
    if (plan_cand_config(sp, c, &o->base, &cfg, e) < 0) return -1;
    cfg.rate_scale = rate_scale;
    cfg.progress = 0;
    cfg.out_path = NULL;
    cfg.series_points = 16;
    cfg.slo = (metrics_slo){.ttft_ms = o->slo.ttft_ms, .tpot_ms = o->slo.tpot_ms};
    tr_trace prefix = *t;   /* a view of the first n requests: nothing is copied or freed */
    prefix.n_requests = n < t->n_requests ? n : t->n_requests;
    prefix.n_steps = 0;
    double t0 = rh_now();
    sim_result r;
    if (sim_run(&cfg, &prefix, sp->gpus[c->gpu].cost, &r, e) < 0) return -1;
    ev->sim_s = rh_now() - t0;
    ev->requests = (uint32_t)prefix.n_requests;
    ev->rate_scale = rate_scale;
    ev->completed = r.summary.completed;
    ev->failed = r.summary.failed;
    ev->throughput = r.summary.request_throughput;
    judge_requests(o, &r, (uint32_t)prefix.n_requests, ev);
    sim_result_free(&r);
    return 0;
}

plan_verdict plan_judge(const plan_slo *slo, const plan_eval *ev)
{
    plan_verdict v;
    if (slo->attainment > 0) {
        v.margin_ttft = v.margin_tpot = ev->attainment - slo->attainment;
    } else {
        double ttft = ev->ttft_hi > ev->ttft_q ? ev->ttft_hi : ev->ttft_q;   /* the upper bound, where known */
        double tpot = ev->tpot_hi > ev->tpot_q ? ev->tpot_hi : ev->tpot_q;
        v.margin_ttft = isinf(ttft) ? -INFINITY : 1 - ttft / slo->ttft_ms;
        v.margin_tpot = isinf(tpot) ? -INFINITY : 1 - tpot / slo->tpot_ms;
    }
    v.worst = v.margin_ttft < v.margin_tpot ? v.margin_ttft : v.margin_tpot;
    v.ok = v.worst >= 0;
    return v;
}
