/* report.c — see report.h. */
#include "sim/plan/report.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/router/router.h"
#include "sim/plan/launch.h"
#include "sim/plot/plot.h"
#include "util/atomic_file.h"

static const char *state_name(const plan_cand *c)
{
    switch (c->state) {
    case PLAN_REFUSED_MEMORY: return "refused: memory";
    case PLAN_PRUNED_CAPACITY: return "pruned: capacity";
    case PLAN_EVALUATED: return "simulated";
    default: return "not simulated";
    }
}

static double pct(double margin)
{
    return isfinite(margin) ? 100 * margin : -100;
}

static void print_row(FILE *f, const plan_opts *o, const plan_space *sp, const plan_cand *c, uint32_t rank, int width)
{
    char name[160];
    plan_cand_name(sp, c, name, sizeof name);
    plan_verdict v = plan_judge(&o->slo, &c->ev);
    fprintf(f, "%4u  %-*s %4u %8.2f %8.3f %8.0f /%7.0f %7.1f /%6.1f   %+5.0f%% / %+5.0f%%  %s", rank, width, name, c->gpus,
            c->usd_hour, c->ev.goodput, c->ev.ttft_p50, c->ev.ttft_p99, c->ev.tpot_p50, c->ev.tpot_p99,
            pct(v.margin_ttft), pct(v.margin_tpot), v.ok ? "yes" : "no");
    if (c->ev.ttft_hi > 0) fprintf(f, "   p95 bound: TTFT %.0f, TPOT %.1f", c->ev.ttft_hi, c->ev.tpot_hi);
    fprintf(f, "\n");
}

void plan_print(FILE *f, const plan_opts *o, const plan_space *sp, const plan_result *r, uint32_t top)
{
    uint32_t last = 0;
    while (last + 1 < 8 && r->rung_candidates[last + 1]) last++;
    fprintf(f, "%u candidates: %u refused (their weights leave no KV pool), %u pruned (cannot keep up with the "
               "trace's tokens at their best rates)",
            r->n, r->refused_memory, r->pruned_capacity);
    for (uint32_t k = 0; k < 8 && r->rung_candidates[k]; k++)
        fprintf(f, "%s %u simulated on %u requests", k ? "," : "; then", r->rung_candidates[k], r->rung_requests[k]);
    if (r->backfilled)
        fprintf(f, ", and %u more that met the SLOs on a prefix but were dropped for cheaper ones that missed them on "
                   "the whole trace",
                r->backfilled);
    fprintf(f, "\n");
    if (r->refused_memory) fprintf(f, "  the first refused: %s\n", r->first_refusal);
    if (r->bounded)
        fprintf(f, "prediction intervals: the best %u run %u more times each; each meets the SLOs only if the p95 of "
                   "its quantile does (margins against that bound)\n",
                r->bounded, o->interval_runs);
    if (o->slo.attainment > 0)
        fprintf(f, "SLOs: %.0f%% of requests within TTFT %.0f ms and TPOT %.0f ms\n", 100 * o->slo.attainment,
                o->slo.ttft_ms, o->slo.tpot_ms);
    else
        fprintf(f, "SLOs: p%g TTFT <= %.0f ms, p%g TPOT <= %.0f ms\n", 100 * o->slo.quantile, o->slo.ttft_ms,
                100 * o->slo.quantile, o->slo.tpot_ms);
    int width = 48;   /* the deployment column: as wide as its longest name shown */
    for (uint32_t i = 0; i < r->n_ranked && i < top; i++) {
        char name[160];
        plan_cand_name(sp, &r->c[r->ranked[i]], name, sizeof name);
        if ((int)strlen(name) > width) width = (int)strlen(name);
    }
    fprintf(f, "\n%4s  %-*s %4s %8s %8s %16s %15s   %-17s %s\n", "rank", width, "deployment", "GPUs", "$/hour",
            "goodput", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "margin TTFT/TPOT", "meets");
    for (uint32_t i = 0; i < r->n_ranked && i < top; i++) print_row(f, o, sp, &r->c[r->ranked[i]], i + 1, width);
    if (!r->n_ranked) fprintf(f, "  (no candidate was simulated)\n");
    else if (!plan_judge(&o->slo, &r->c[r->ranked[0]].ev).ok)
        fprintf(f, "no candidate meets the SLOs: more GPUs (--max-gpus, --max-replicas), other GPU types, or looser "
                   "SLOs\n");
    fprintf(f, "\nper GPU type: its cheapest deployment within the SLOs, and the highest rate that one sustains\n");
    for (int g = 0; g < sp->n_gpus; g++) {
        const plan_gpu_rate *pg = &r->per_gpu[g];
        if (pg->best < 0) {
            fprintf(f, "  %-12s none meets the SLOs\n", sp->gpus[g].name);
            continue;
        }
        const plan_cand *c = &r->c[pg->best];
        char name[160];
        plan_cand_name(sp, c, name, sizeof name);
        fprintf(f, "  %-12s %-48s $%.2f/hour", sp->gpus[g].name, name, c->usd_hour);
        if (pg->max_rate > 0)
            fprintf(f, "  sustains %.2f req/s (x%.2f the trace's), %.0f requests per $\n", pg->max_rate,
                    pg->max_rate_scale / o->base.rate_scale, pg->max_rate * 3600 / c->usd_hour);
        else
            fprintf(f, "\n");
    }
}

static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *cand_json(const plan_opts *o, const plan_space *sp, const plan_cand *c, const char *model_path)
{
    char name[160], flags[512];
    plan_cand_name(sp, c, name, sizeof name);
    plan_cand_flags(sp, c, flags, sizeof flags);
    plan_verdict v = plan_judge(&o->slo, &c->ev);
    json_t *j = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:i, s:f, s:s, s:f, s:I, s:s}", "name", name,
                          "gpu", sp->gpus[c->gpu].name, "tp", (json_int_t)c->tp, "replicas", (json_int_t)c->replicas,
                          "prefill_replicas", (json_int_t)c->prefill, "chunked_prefill_size", (json_int_t)c->chunk,
                          "max_running_requests", (json_int_t)c->max_running, "speculative_num_steps",
                          (json_int_t)c->spec_steps, "router", router_policy_name((router_policy)c->router), "gpus",
                          (json_int_t)c->gpus, "usd_per_hour", c->usd_hour, "state", state_name(c), "load", c->load,
                          "pool_tokens", (json_int_t)c->pool_tokens, "sim_flags", flags);
    if (c->parallel) json_object_set_new(j, "parallel", json_string(plan_parallel_name(c->parallel)));
    if (c->state == PLAN_EVALUATED) {
        json_t *m = json_pack("{s:i, s:f, s:o, s:o, s:o, s:o, s:o, s:o, s:f, s:f, s:f, s:I, s:I}", "requests",
                              (json_int_t)c->ev.requests, "rate_scale", c->ev.rate_scale, "p50_ttft_ms",
                              num(c->ev.ttft_p50), "p99_ttft_ms", num(c->ev.ttft_p99), "p50_tpot_ms",
                              num(c->ev.tpot_p50), "p99_tpot_ms", num(c->ev.tpot_p99), "slo_quantile_ttft_ms",
                              num(c->ev.ttft_q), "slo_quantile_tpot_ms", num(c->ev.tpot_q), "slo_attainment",
                              c->ev.attainment, "request_goodput", c->ev.goodput, "request_throughput",
                              c->ev.throughput, "completed", (json_int_t)c->ev.completed, "failed",
                              (json_int_t)c->ev.failed);
        if (c->ev.ttft_hi > 0) {
            json_object_set_new(m, "slo_quantile_ttft_ms_p95", json_real(c->ev.ttft_hi));
            json_object_set_new(m, "slo_quantile_tpot_ms_p95", json_real(c->ev.tpot_hi));
        }
        json_object_set_new(m, "margin_ttft", num(v.margin_ttft));
        json_object_set_new(m, "margin_tpot", num(v.margin_tpot));
        json_object_set_new(m, "meets_slos", json_boolean(v.ok));
        json_object_set_new(j, "metrics", m);
    }
    if (model_path) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (f) {
            plan_launch_lines(sp, c, model_path, f);
            fclose(f);
            json_object_set_new(j, "launch", json_string(text ? text : ""));
        }
        free(text);
    }
    return j;
}

json_t *plan_to_json(const plan_opts *o, const plan_space *sp, const plan_result *r, const char *model_path)
{
    json_t *j = json_object();
    json_t *slo = json_pack("{s:f, s:f}", "ttft_ms", o->slo.ttft_ms, "tpot_ms", o->slo.tpot_ms);
    if (o->slo.attainment > 0) json_object_set_new(slo, "attainment", json_real(o->slo.attainment));
    else json_object_set_new(slo, "quantile", json_real(o->slo.quantile));
    json_object_set_new(j, "slo", slo);
    json_object_set_new(j, "trace_rate", json_real(r->trace_rate));
    json_object_set_new(j, "requests_left_out", json_integer(r->dropped_too_long));
    json_object_set_new(j, "candidates", json_integer(r->n));
    json_object_set_new(j, "refused_memory", json_integer(r->refused_memory));
    json_object_set_new(j, "pruned_capacity", json_integer(r->pruned_capacity));
    json_t *rungs = json_array();
    for (uint32_t k = 0; k < 8 && r->rung_candidates[k]; k++)
        json_array_append_new(rungs, json_pack("{s:i, s:i}", "requests", (json_int_t)r->rung_requests[k],
                                               "candidates", (json_int_t)r->rung_candidates[k]));
    json_object_set_new(j, "rungs", rungs);
    json_object_set_new(j, "backfilled", json_integer(r->backfilled));
    json_t *ranked = json_array();
    for (uint32_t i = 0; i < r->n_ranked; i++)
        json_array_append_new(ranked, cand_json(o, sp, &r->c[r->ranked[i]], i == 0 ? model_path : NULL));
    json_object_set_new(j, "ranked", ranked);
    json_t *per = json_array();
    for (int g = 0; g < sp->n_gpus; g++) {
        const plan_gpu_rate *pg = &r->per_gpu[g];
        json_t *x = json_pack("{s:s, s:f}", "gpu", sp->gpus[g].name, "usd_per_gpu_hour", sp->gpus[g].usd_per_gpu_hour);
        if (pg->best >= 0) {
            char name[160];
            plan_cand_name(sp, &r->c[pg->best], name, sizeof name);
            json_object_set_new(x, "best", json_string(name));
            json_object_set_new(x, "max_rate", json_real(pg->max_rate));
            json_object_set_new(x, "max_rate_scale", json_real(pg->max_rate_scale));
        }
        json_array_append_new(per, x);
    }
    json_object_set_new(j, "per_gpu", per);
    return j;
}

/* Not dominated in ($/hour, p99 TTFT) by another candidate of the last rung. */
static bool on_front(const plan_result *r, uint32_t i)
{
    const plan_cand *a = &r->c[r->ranked[i]];
    for (uint32_t k = 0; k < r->n_ranked; k++) {
        const plan_cand *b = &r->c[r->ranked[k]];
        if (k != i && b->usd_hour <= a->usd_hour && b->ev.ttft_p99 <= a->ev.ttft_p99 &&
            (b->usd_hour < a->usd_hour || b->ev.ttft_p99 < a->ev.ttft_p99))
            return false;
    }
    return true;
}

static int write_text(const char *dir, const char *file, const char *text, size_t len, rh_err *e)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return rh_write_file_atomic(path, text, len, e);
}

int plan_write(const char *dir, const plan_opts *o, const plan_space *sp, const plan_result *r,
               const char *model_path, rh_err *e)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) return rh_fail(e, "%s: cannot create: %s", dir, strerror(errno));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return rh_fail(e, "out of memory");
    fprintf(f, "name,gpu,tp,replicas,prefill_replicas,chunked_prefill_size,max_running_requests,speculative_num_steps,"
               "parallel,router,gpus,usd_per_hour,state,load,pool_tokens,requests,p50_ttft_ms,p99_ttft_ms,p50_tpot_ms,"
               "p99_tpot_ms,slo_quantile_ttft_ms,slo_quantile_tpot_ms,slo_attainment,request_goodput,meets_slos\n");
    for (uint32_t i = 0; i < r->n; i++) {
        const plan_cand *c = &r->c[i];
        char name[160];
        plan_cand_name(sp, c, name, sizeof name);
        fprintf(f, "%s,%s,%u,%u,%u,%d,%u,%u,%s,%s,%u,%.4f,%s,%.4f,%llu", name, sp->gpus[c->gpu].name, c->tp,
                c->replicas, c->prefill, c->chunk, c->max_running, c->spec_steps, plan_parallel_name(c->parallel),
                router_policy_name((router_policy)c->router),
                c->gpus, c->usd_hour, state_name(c), c->load, (unsigned long long)c->pool_tokens);
        if (c->state == PLAN_EVALUATED)
            fprintf(f, ",%u,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.5f,%.5f,%d\n", c->ev.requests, c->ev.ttft_p50,
                    c->ev.ttft_p99, c->ev.tpot_p50, c->ev.tpot_p99, c->ev.ttft_q, c->ev.tpot_q, c->ev.attainment,
                    c->ev.goodput, plan_judge(&o->slo, &c->ev).ok);
        else
            fprintf(f, ",,,,,,,,,,\n");
    }
    fclose(f);
    int rc = write_text(dir, "candidates.csv", text, len, e);
    free(text);
    if (rc < 0) return -1;

    json_t *j = plan_to_json(o, sp, r, model_path);
    char *js = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) : NULL;
    json_decref(j);
    if (!js) return rh_fail(e, "out of memory");
    rc = write_text(dir, "plan.json", js, strlen(js), e);
    free(js);
    if (rc < 0) return -1;

    if (r->n_ranked && model_path) {
        text = NULL;
        len = 0;
        if (!(f = open_memstream(&text, &len))) return rh_fail(e, "out of memory");
        fprintf(f, "#!/bin/sh\n# The plan's winner, as its servers are started.\n");
        plan_launch_lines(sp, &r->c[r->ranked[0]], model_path, f);
        fclose(f);
        rc = write_text(dir, "launch.sh", text, len, e);
        free(text);
        if (rc < 0) return -1;
    }

    /* The plots: the last rung's candidates (the whole trace), by GPU type,
     * the Pareto front of $/hour against p99 TTFT as a group of its own. */
    text = NULL;
    len = 0;
    if (!(f = open_memstream(&text, &len))) return rh_fail(e, "out of memory");
    fprintf(f, "group,usd_per_hour,p99_ttft_ms,good_requests_per_usd\n");
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < r->n_ranked; i++) {
            const plan_cand *c = &r->c[r->ranked[i]];
            if (pass == 1 && !on_front(r, i)) continue;
            fprintf(f, "%s,%.4f,%.3f,%.3f\n", pass ? "Pareto front" : sp->gpus[c->gpu].name, c->usd_hour,
                    c->ev.ttft_p99, c->usd_hour > 0 ? c->ev.goodput * 3600 / c->usd_hour : 0);
        }
    fclose(f);
    rc = write_text(dir, "pareto.csv", text, len, e);
    free(text);
    if (rc < 0 || !r->n_ranked) return rc;
    char csv[PATH_MAX], out[PATH_MAX];
    snprintf(csv, sizeof csv, "%s/pareto.csv", dir);
    plot_spec s;
    plot_spec_init(&s);
    s.kind = PLOT_SCATTER;
    s.csv = csv;
    s.x = "usd_per_hour";
    s.by = "group";
    s.y = "p99_ttft_ms";
    s.title = "Deployments simulated on the whole trace: cost against p99 TTFT";
    s.xlabel = "cost ($/hour)";
    s.ylabel = "p99 TTFT (ms)";
    s.hline = o->slo.ttft_ms;
    s.hline_label = "TTFT SLO";
    s.logy = 1;
    snprintf(out, sizeof out, "%s/pareto-ttft", dir);
    s.out = out;
    rh_err pe = {{0}};
    if (plot_draw(&s, &pe) < 0) {
        fprintf(stderr, "rehearse plan: no plots: %s\n", pe.msg);
        return 0;
    }
    s.y = "good_requests_per_usd";
    s.title = "Deployments simulated on the whole trace: requests within the SLOs per dollar";
    s.ylabel = "requests within the SLOs per $";
    s.hline = NAN;
    s.hline_label = NULL;
    s.logy = 0;
    snprintf(out, sizeof out, "%s/pareto-goodput", dir);
    if (plot_draw(&s, &pe) < 0) fprintf(stderr, "rehearse plan: no plots: %s\n", pe.msg);
    return 0;
}
