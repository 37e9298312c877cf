/* plan.c — the search: bounds, successive halving, the rate each GPU type
 * sustains; evaluations run in a fork pool and, with a resume folder, are
 * kept one per line as they finish, so a killed plan resumes where it
 * stopped and ends with the same plan. */
#include "sim/plan/internal.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/intervals.h"
#include "util/fork_pool.h"
#include "util/hashmap.h"
#include "util/progress.h"

void plan_opts_default(plan_opts *o)
{
    memset(o, 0, sizeof *o);
    sim_config_default(&o->base);
    o->slo.quantile = 0.99;
    o->rungs = 0;   /* as many as halving needs (plan_run) */
    o->eta = 4;
    o->keep = 10;
    o->min_requests = 200;
    o->rate_search = true;
}

/* ------------------------------------------------------------ ranking -- */

/* Meeting the SLOs first, cheapest first, then the larger worst margin;
 * the rest by how little they miss, then the cheaper; the index last, so
 * the order is total. */
static int rank_before(const plan_opts *o, const plan_cand *c, uint32_t a, uint32_t b)
{
    if (o->objective) {
        double sa = isnan(c[a].score) ? INFINITY : c[a].score, sb = isnan(c[b].score) ? INFINITY : c[b].score;
        if (sa != sb) return sa < sb;
        return a < b;
    }
    const plan_slo *slo = &o->slo;
    plan_verdict va = plan_judge(slo, &c[a].ev), vb = plan_judge(slo, &c[b].ev);
    if (va.ok != vb.ok) return va.ok;
    if (va.ok) {
        if (c[a].usd_hour != c[b].usd_hour) return c[a].usd_hour < c[b].usd_hour;
        if (va.worst != vb.worst) return va.worst > vb.worst;
    } else {
        if (va.worst != vb.worst) return va.worst > vb.worst;
        if (c[a].usd_hour != c[b].usd_hour) return c[a].usd_hour < c[b].usd_hour;
    }
    return a < b;
}

/* A stable merge sort of candidate indices by rank_before (no qsort_r in C11). */
static void rank(const plan_opts *o, const plan_cand *c, uint32_t *idx, uint32_t n, uint32_t *tmp)
{
    if (n < 2) return;
    uint32_t h = n / 2;
    rank(o, c, idx, h, tmp);
    rank(o, c, idx + h, n - h, tmp);
    uint32_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = rank_before(o, c, idx[j], idx[i]) ? idx[j++] : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static int by_index(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* ------------------------------------------------------- evaluations -- */

typedef struct run_ctx {
    const plan_opts *o;
    const plan_space *sp;
    plan_cand *c;
    const tr_trace *t;
    plan_result *res;
    plan_job *jobs;
    uint32_t *todo;          /* jobs not found in the resume folder */
    FILE *log;               /* the resume folder's evals.jsonl, appended */
    rh_strmap kept;          /* evaluation key -> index into stored */
    plan_eval *stored;
    size_t n_stored, cap_stored;
} run_ctx;

typedef struct child_out {
    int rc;
    plan_eval ev;
    char msg[512];
} child_out;

void plan_eval_key(const plan_space *sp, const plan_cand *c, uint32_t requests, double rate_scale, char *buf, size_t n)
{
    char name[160];
    plan_cand_name(sp, c, name, sizeof name);
    snprintf(buf, n, "%s|%u|%.17g", name, requests, rate_scale);
}

static void eval_key(const run_ctx *x, const plan_job *j, char *buf, size_t n)
{
    plan_eval_key(x->sp, &x->c[j->cand], j->requests, j->rate_scale, buf, n);
}

static int child_job(void *ctx, int i, FILE *f)
{
    run_ctx *x = ctx;
    plan_job *j = &x->jobs[x->todo[i]];
    child_out co;
    memset(&co, 0, sizeof co);
    rh_err e = {{0}};
    co.rc = plan_simulate(x->sp, x->o, &x->c[j->cand], x->t, j->requests, j->rate_scale, &co.ev, &e);
    if (co.rc < 0) snprintf(co.msg, sizeof co.msg, "%.500s", e.msg);
    return fwrite(&co, sizeof co, 1, f) == 1 ? 0 : -1;
}

static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();   /* the quantiles are infinite when too many failed */
}

char *plan_eval_line(const char *key, const plan_eval *v)
{
    json_t *o = json_pack("{s:s, s:i, s:f, s:o, s:o, s:o, s:o, s:o, s:o, s:f, s:f, s:f, s:I, s:I}", "key", key,
                          "requests", (json_int_t)v->requests, "rate_scale", v->rate_scale, "ttft_p50", num(v->ttft_p50),
                          "ttft_p99", num(v->ttft_p99), "tpot_p50", num(v->tpot_p50), "tpot_p99", num(v->tpot_p99),
                          "ttft_q", num(v->ttft_q), "tpot_q", num(v->tpot_q), "attainment", v->attainment, "goodput",
                          v->goodput, "throughput", v->throughput, "completed", (json_int_t)v->completed, "failed",
                          (json_int_t)v->failed);
    char *line = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    return line;
}

static int keep_eval(run_ctx *x, const plan_job *j, rh_err *e)
{
    if (!x->log) return 0;
    char key[256];
    eval_key(x, j, key, sizeof key);
    char *line = plan_eval_line(key, &j->ev);
    if (!line) return rh_fail(e, "out of memory");
    int ok = fprintf(x->log, "%s\n", line) > 0 && fflush(x->log) == 0;
    free(line);
    if (ok) fsync(fileno(x->log));   /* each finished evaluation survives a kill */
    return ok ? 0 : rh_fail(e, "cannot write the resume folder's evals.jsonl: %s", strerror(errno));
}

static int child_done(void *ctx, int i, FILE *f, int ok, const char *why, rh_err *e)
{
    run_ctx *x = ctx;
    plan_job *j = &x->jobs[x->todo[i]];
    char name[160];
    plan_cand_name(x->sp, &x->c[j->cand], name, sizeof name);
    child_out co;
    if (!f || fread(&co, sizeof co, 1, f) != 1) return rh_fail(e, "%s: its simulation died (%s)", name, why);
    (void)ok;
    if (co.rc < 0) return rh_fail(e, "%s: %s", name, co.msg);
    j->ev = co.ev;
    x->res->simulations++;
    x->res->sim_cpu_s += co.ev.sim_s;
    return keep_eval(x, j, e);
}

/* Fills every job's evaluation: from the resume folder, else simulated. */
static int evaluate(run_ctx *x, plan_job *jobs, uint32_t n, const char *label, rh_err *e)
{
    x->jobs = jobs;
    uint32_t todo = 0;
    for (uint32_t i = 0; i < n; i++) {
        char key[256];
        eval_key(x, &jobs[i], key, sizeof key);
        int64_t at;
        if (x->log && rh_strmap_get(&x->kept, key, strlen(key), &at)) {
            jobs[i].ev = x->stored[at];
            x->res->resumed++;
        } else {
            x->todo[todo++] = i;
        }
    }
    if (x->o->emit_jobs && todo) {   /* a round for the cluster: the plan stops here */
        if (plan_jobs_write(x->o->resume_dir, x->sp, x->c, jobs, x->todo, todo, &x->res->jobs_round, e) < 0) return -1;
        x->res->jobs = todo;
        return 1;
    }
    int workers = x->o->workers > 0 ? x->o->workers : rh_fork_pool_default_workers();
    return rh_fork_pool((int)todo, workers, x->o->progress ? label : NULL, child_job, child_done, x, e);
}

/* ------------------------------------------------------ resume folder -- */

static double field(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : INFINITY;
}

const char *plan_eval_parse(json_t *o, plan_eval *v)
{
    const char *key = json_string_value(json_object_get(o, "key"));
    if (!key) return NULL;
    *v = (plan_eval){.requests = (uint32_t)field(o, "requests"), .rate_scale = field(o, "rate_scale"),
                     .ttft_p50 = field(o, "ttft_p50"), .ttft_p99 = field(o, "ttft_p99"),
                     .tpot_p50 = field(o, "tpot_p50"), .tpot_p99 = field(o, "tpot_p99"), .ttft_q = field(o, "ttft_q"),
                     .tpot_q = field(o, "tpot_q"), .attainment = field(o, "attainment"),
                     .goodput = field(o, "goodput"), .throughput = field(o, "throughput"),
                     .completed = (uint64_t)field(o, "completed"), .failed = (uint64_t)field(o, "failed")};
    return key;
}

/* Reads DIR/evals.jsonl (a torn last line, from a kill mid-write, is cut
 * off) and opens it for appending. DIR/question.txt must hold the same
 * question, or the folder is another plan's. */
static int open_resume(run_ctx *x, const char *dir, const char *question, rh_err *e)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) return rh_fail(e, "%s: cannot create: %s", dir, strerror(errno));
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/question.txt", dir);
    FILE *q = fopen(path, "r");
    if (q) {
        char buf[8192];
        size_t got = fread(buf, 1, sizeof buf - 1, q);
        buf[got] = '\0';
        fclose(q);
        if (strcmp(buf, question))
            return rh_fail(e, "%s holds the evaluations of another plan (its question.txt differs from this one's); "
                              "give a new folder to --resume",
                           dir);
    } else if (!(q = fopen(path, "w")) || fputs(question, q) < 0 || fclose(q) != 0) {
        return rh_fail(e, "%s: cannot write: %s", path, strerror(errno));
    }
    snprintf(path, sizeof path, "%s/evals.jsonl", dir);
    FILE *f = fopen(path, "a+");
    if (!f) return rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
    rewind(f);
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    long good_end = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        lineno++;
        json_error_t je;
        json_t *o = line[len - 1] == '\n' ? json_loads(line, 0, &je) : NULL;
        plan_eval ev;
        const char *key = o ? plan_eval_parse(o, &ev) : NULL;
        if (!key) {
            json_decref(o);
            if (getc(f) == EOF) break;   /* the last line, cut short: dropped */
            free(line);
            fclose(f);
            return rh_fail(e, "%s:%zu: not an evaluation this plan wrote", path, lineno);
        }
        if (x->n_stored == x->cap_stored) {
            size_t nc = x->cap_stored ? 2 * x->cap_stored : 256;
            plan_eval *s2 = realloc(x->stored, nc * sizeof *s2);
            if (!s2) {
                json_decref(o);
                free(line);
                fclose(f);
                return rh_fail(e, "out of memory");
            }
            x->stored = s2;
            x->cap_stored = nc;
        }
        x->stored[x->n_stored] = ev;
        rh_strmap_put(&x->kept, key, strlen(key), (int64_t)x->n_stored++);
        json_decref(o);
        good_end = ftell(f);
    }
    free(line);
    fflush(f);
    if (ftruncate(fileno(f), good_end) < 0) {
        fclose(f);
        return rh_fail(e, "%s: cannot cut its torn last line: %s", path, strerror(errno));
    }
    fseek(f, 0, SEEK_END);
    x->log = f;
    return 0;
}

/* ---------------------------------------------------------------- run -- */

int plan_servable(const plan_opts *o, const plan_space *sp, const tr_trace *t, tr_trace *view, uint32_t *dropped,
                  rh_err *e)
{
    cost_memory mem;
    uint32_t context = o->base.core.context_length;
    if (!context && sp->n_gpus && cost_memory_of(sp->gpus[0].cost, 1, &mem)) context = mem.context_length;
    *view = *t;
    view->n_steps = 0;
    view->requests = malloc((t->n_requests ? t->n_requests : 1) * sizeof *view->requests);
    if (!view->requests) return rh_fail(e, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < t->n_requests; i++) {
        const tr_request *r = &t->requests[i];
        if (context && (uint64_t)r->input_len + r->output_len > context) continue;
        view->requests[n++] = *r;
    }
    *dropped = (uint32_t)(t->n_requests - n);
    view->n_requests = n;
    if (n) return 0;
    free(view->requests);
    view->requests = NULL;
    return rh_fail(e, "no request of the trace fits the model's context of %u tokens", context);
}

static int search_rates(run_ctx *x, rh_err *e)
{
    const plan_space *sp = x->sp;
    plan_result *res = x->res;
    plan_job *jobs = calloc((size_t)sp->n_gpus, sizeof *jobs);
    double *lo = calloc((size_t)sp->n_gpus, sizeof *lo), *hi = calloc((size_t)sp->n_gpus, sizeof *hi);
    int rc = jobs && lo && hi ? 0 : rh_fail(e, "out of memory");
    for (int g = 0; g < sp->n_gpus && rc == 0; g++) lo[g] = 1;
    /* Doubling until a rate misses (6 at most: 64 times the trace's), then
     * halving the gap to 2%: at most 12 rounds, one simulation per GPU type each. */
    for (int round = 0; round < 12 && rc == 0; round++) {
        uint32_t n = 0;
        int who[64];
        for (int g = 0; g < sp->n_gpus; g++) {
            if (res->per_gpu[g].best < 0) continue;
            if (hi[g] == 0 && lo[g] >= 64) continue;
            if (hi[g] > 0 && (hi[g] - lo[g]) / lo[g] < 0.02) continue;
            double f = hi[g] > 0 ? (lo[g] + hi[g]) / 2 : 2 * lo[g];
            who[n] = g;
            jobs[n++] = (plan_job){.cand = (uint32_t)res->per_gpu[g].best, .requests = (uint32_t)x->t->n_requests,
                                   .rate_scale = x->o->base.rate_scale * f};
        }
        if (!n) break;
        if ((rc = evaluate(x, jobs, n, "plan: rate", e)) != 0) break;
        for (uint32_t i = 0; i < n; i++) {
            int g = who[i];
            double f = jobs[i].rate_scale / x->o->base.rate_scale;
            if (plan_judge(&x->o->slo, &jobs[i].ev).ok) lo[g] = f;
            else hi[g] = f;
        }
    }
    for (int g = 0; g < sp->n_gpus && rc == 0; g++) {
        if (res->per_gpu[g].best < 0) continue;
        res->per_gpu[g].max_rate_scale = x->o->base.rate_scale * lo[g];
        res->per_gpu[g].max_rate = res->trace_rate * lo[g];
    }
    free(jobs);
    free(lo);
    free(hi);
    return rc;
}

static int cheaper(const void *a, const void *b, const plan_cand *c)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (c[x].usd_hour != c[y].usd_hour) return c[x].usd_hour < c[y].usd_hour ? -1 : 1;
    return (x > y) - (x < y);
}

static const plan_cand *g_by_price;
static int by_price(const void *a, const void *b)
{
    return cheaper(a, b, g_by_price);
}

/* Whether reserve candidate r could still change the answer: the `keep`
 * cheapest that meet the SLOs on the whole trace (the table), or its GPU
 * type's cheapest (the per-GPU line). */
static bool could_matter(const run_ctx *x, const uint32_t *idx, uint32_t live, uint32_t r)
{
    const plan_cand *c = x->res->c, *cr = &c[r];
    uint32_t met = 0;
    bool gpu_met = false;
    double kth = INFINITY, gpu_best = INFINITY;
    for (uint32_t i = 0; i < live; i++) {
        const plan_cand *k = &c[idx[i]];
        if (!plan_judge(&x->o->slo, &k->ev).ok) continue;
        if (++met == x->o->keep) kth = k->usd_hour;
        if (k->gpu == cr->gpu && !gpu_met) {
            gpu_met = true;
            gpu_best = k->usd_hour;
        }
    }
    return met < x->o->keep || cr->usd_hour < kth || !gpu_met || cr->usd_hour < gpu_best;
}

/* Halving judges on prefixes, where queues have had less time to grow
 * than over the whole trace: a cheap candidate can meet the SLOs on a
 * prefix and miss them on the whole, while dearer ones that also met them
 * were dropped. So, after the last rung, those dropped ones are simulated
 * on the whole trace too, cheapest first, keep at a time, as long as one
 * could still enter the table (fewer than keep meet the SLOs, or it is
 * cheaper than the keep-th that does) or be its GPU type's cheapest. The
 * winner is then the cheapest of every candidate that met the SLOs on each
 * prefix it was simulated on, and so is each GPU type's. */
static int backfill(run_ctx *x, uint32_t *idx, uint32_t *live, uint32_t *reserve, uint32_t n_reserve, plan_job *jobs,
                    uint32_t *tmp, rh_err *e)
{
    plan_result *out = x->res;
    g_by_price = out->c;
    qsort(reserve, n_reserve, sizeof *reserve, by_price);
    uint32_t batch = x->o->keep ? x->o->keep : 1, n_requests = (uint32_t)x->t->n_requests;
    uint32_t rung = 0;
    while (rung + 1 < 8 && out->rung_candidates[rung + 1]) rung++;
    bool *done = calloc(n_reserve ? n_reserve : 1, sizeof *done);
    if (!done) return rh_fail(e, "out of memory");
    for (;;) {
        uint32_t n = 0, pick[64];
        for (uint32_t i = 0; i < n_reserve && n < batch && n < 64; i++)
            if (!done[i] && could_matter(x, idx, *live, reserve[i])) pick[n++] = i;
        if (!n) break;
        for (uint32_t i = 0; i < n; i++)
            jobs[i] = (plan_job){.cand = reserve[pick[i]], .requests = n_requests, .rate_scale = x->o->base.rate_scale};
        int rc = evaluate(x, jobs, n, "plan: the dropped, on the whole trace", e);
        if (rc != 0) {
            free(done);
            return rc;
        }
        for (uint32_t i = 0; i < n; i++) {
            plan_cand *c = &out->c[reserve[pick[i]]];
            c->ev = jobs[i].ev;
            c->rung = (int)rung;
            c->score = NAN;
            idx[(*live)++] = reserve[pick[i]];
            done[pick[i]] = true;
        }
        out->backfilled += n;
        rank(x->o, out->c, idx, *live, tmp);
    }
    free(done);
    return 0;
}

/* The `keep` best bounded by prediction intervals, then ranked again. */
static int bound_best(run_ctx *x, uint32_t *tmp, rh_err *e)
{
    const plan_opts *o = x->o;
    plan_result *out = x->res;
    const char *which = o->slo.quantile == 0.5 ? "median" : o->slo.quantile == 0.9 ? "p90" : "p99";
    char ttft_key[32], tpot_key[32];
    snprintf(ttft_key, sizeof ttft_key, "%s_ttft_ms", which);
    snprintf(tpot_key, sizeof tpot_key, "%s_tpot_ms", which);
    uint32_t n = out->n_ranked < o->keep ? out->n_ranked : o->keep;
    /* Bounds can reorder the best: bound whoever reaches them unbounded,
     * until the best `keep` all are. */
    for (int again = 1; again;) {
    again = 0;
    for (uint32_t i = 0; i < n; i++) {
        plan_cand *c = &out->c[out->ranked[i]];
        if (c->ev.ttft_hi > 0) continue;
        again = 1;
        const plan_gpu *g = &x->sp->gpus[c->gpu];
        if (!g->cost_text) return rh_fail(e, "%s: no cost file text to draw intervals from", g->name);
        sim_config cfg;
        if (plan_cand_config(x->sp, c, &o->base, &cfg, e) < 0) return -1;
        cfg.slo = (metrics_slo){.ttft_ms = o->slo.ttft_ms, .tpot_ms = o->slo.tpot_ms};
        sim_interval_opts io;
        sim_interval_opts_default(&io);
        io.runs = o->interval_runs;
        io.sigma = o->step_noise;
        io.workers = o->workers;
        io.progress = o->progress;
        json_t *j;
        if (sim_intervals_run(&cfg, x->t, g->cost_text, g->name, &io, &j, e) < 0) return -1;
        json_t *m = json_object_get(j, "metrics");
        c->ev.ttft_hi = json_number_value(json_object_get(json_object_get(m, ttft_key), "p95"));
        c->ev.tpot_hi = json_number_value(json_object_get(json_object_get(m, tpot_key), "p95"));
        json_decref(j);
        out->bounded++;
    }
    rank(o, out->c, out->ranked, out->n_ranked, tmp);
    }
    return 0;
}

int plan_run(const plan_opts *o, const plan_space *sp, const tr_trace *trace, plan_result *out, rh_err *e)
{
    memset(out, 0, sizeof *out);
    if (!sp->n_gpus || !sp->n_tp || !sp->n_chunk || !sp->n_max_running || !sp->n_spec || !sp->n_routers || !sp->n_pd)
        return rh_fail(e, "the plan's space is empty");
    if (sp->n_gpus > 64) return rh_fail(e, "at most 64 GPU types");
    if (!(o->slo.ttft_ms > 0) || !(o->slo.tpot_ms > 0)) return rh_fail(e, "the plan needs a TTFT and a TPOT SLO");
    tr_trace t;
    if (plan_servable(o, sp, trace, &t, &out->dropped_too_long, e) < 0) return -1;
    double span = t.requests[t.n_requests - 1].arrival - t.requests[0].arrival;
    out->trace_rate = span > 0 ? t.n_requests / span * o->base.rate_scale : 0;

    run_ctx x = {.o = o, .sp = sp, .t = &t, .res = out};
    int rc = plan_enumerate(sp, &out->c, &out->n, e);
    x.c = out->c;
    uint32_t *idx = NULL, *tmp = NULL, *reserve = NULL, n_reserve = 0;
    plan_job *jobs = NULL;
    if (rc == 0) {
        reserve = malloc((out->n ? out->n : 1) * sizeof *reserve);
        idx = malloc((out->n ? out->n : 1) * sizeof *idx);
        tmp = malloc((out->n ? out->n : 1) * sizeof *tmp);
        jobs = malloc((out->n ? out->n : 1) * sizeof *jobs);
        x.todo = malloc((out->n ? out->n : 1) * sizeof *x.todo);
        out->per_gpu = calloc((size_t)sp->n_gpus, sizeof *out->per_gpu);
        if (!idx || !tmp || !jobs || !x.todo || !out->per_gpu || !reserve) rc = rh_fail(e, "out of memory");
    }
    if (rc == 0 && o->resume_dir) rc = open_resume(&x, o->resume_dir, o->question ? o->question : "", e);

    /* 1-2: memory and capacity, in the parent (a few cost-model calls each). */
    plan_demand d;
    plan_demand_of(&t, o->base.rate_scale, &d);
    uint32_t live = 0;
    for (uint32_t i = 0; i < out->n && rc == 0; i++) {
        rh_err why = {{0}};
        if ((rc = plan_bound(sp, o, &d, &out->c[i], &why)) < 0) {
            *e = why;
            break;
        }
        if (out->c[i].state == PLAN_REFUSED_MEMORY) {
            if (!out->refused_memory++) snprintf(out->first_refusal, sizeof out->first_refusal, "%.250s", why.msg);
        } else if (out->c[i].state == PLAN_PRUNED_CAPACITY) {
            out->pruned_capacity++;
        } else {
            idx[live++] = i;
        }
    }

    /* 3: successive halving on prefixes eta times longer each rung. */
    uint32_t eta = o->eta >= 2 ? o->eta : 2, r_out = 0, rungs = o->rungs;
    if (!rungs) {
        /* Successive halving's own count: enough rungs of 1/eta each for the
         * candidates left to come down to the `keep` the table shows (the
         * first rungs, shorter than min_requests, become one). */
        double ratio = (double)live / (o->keep ? o->keep : 1);
        rungs = ratio > 1 ? (uint32_t)ceil(log(ratio) / log(eta)) : 1;
        if (rungs < 1) rungs = 1;
    }
    if (rungs > 8) rungs = 8;
    for (uint32_t r = 0; r < rungs && rc == 0 && live; r++) {
        double len = (double)t.n_requests / pow(eta, rungs - 1 - r);
        uint32_t n = len < o->min_requests ? o->min_requests : (uint32_t)len;
        if (n > t.n_requests || r == rungs - 1) n = (uint32_t)t.n_requests;
        if (r_out && n == out->rung_requests[r_out - 1]) continue;   /* the same prefix twice: one rung */
        for (uint32_t i = 0; i < live; i++)
            jobs[i] = (plan_job){.cand = idx[i], .requests = n, .rate_scale = o->base.rate_scale};
        char label[64];
        snprintf(label, sizeof label, "plan: %u requests", n);
        if ((rc = evaluate(&x, jobs, live, label, e)) != 0) break;
        for (uint32_t i = 0; i < live; i++) {
            plan_cand *c = &out->c[idx[i]];
            c->ev = jobs[i].ev;
            c->rung = (int)r_out;
            c->state = PLAN_EVALUATED;
            c->score = o->objective ? o->objective(o->objective_ctx, sp, c) : NAN;
        }
        out->rung_requests[r_out] = n;
        out->rung_candidates[r_out++] = live;
        rank(o, out->c, idx, live, tmp);
        if (n == t.n_requests) break;
        uint32_t keep = (live + eta - 1) / eta;
        if (keep < o->keep) keep = o->keep;
        if (keep < live) {
            /* Those that met the SLOs here but were dropped for cheaper ones (the
             * cheapest-first ranking only: a custom objective ranks as it likes). */
            for (uint32_t i = keep; i < live; i++)
                if (!o->objective && plan_judge(&o->slo, &out->c[idx[i]].ev).ok) reserve[n_reserve++] = idx[i];
            live = keep;
        }
        qsort(idx, live, sizeof *idx, by_index);   /* the next rung in candidate order */
    }
    if (rc == 0 && live && n_reserve) rc = backfill(&x, idx, &live, reserve, n_reserve, jobs, tmp, e);
    if (rc == 0) {
        out->ranked = idx;
        out->n_ranked = live;
        idx = NULL;
        if (o->interval_runs) rc = bound_best(&x, tmp, e);
    }
    if (rc == 0) {
        for (int g = 0; g < sp->n_gpus; g++) {
            out->per_gpu[g].best = -1;
            for (uint32_t i = 0; i < out->n_ranked && out->per_gpu[g].best < 0; i++) {
                const plan_cand *c = &out->c[out->ranked[i]];
                if (c->gpu == g && plan_judge(&o->slo, &c->ev).ok) out->per_gpu[g].best = (int)out->ranked[i];
            }
        }
        if (o->rate_search) rc = search_rates(&x, e);
    }
    if (x.log) fclose(x.log);
    rh_strmap_free(&x.kept);
    free(x.stored);
    free(x.todo);
    free(jobs);
    free(tmp);
    free(idx);
    free(reserve);
    free(t.requests);
    if (rc < 0) plan_result_free(out);
    if (rc > 0) {   /* jobs written: nothing of the result stands but the round */
        uint32_t round = out->jobs_round, n_jobs = out->jobs;
        plan_result_free(out);
        out->jobs_round = round;
        out->jobs = n_jobs;
    }
    return rc;
}

void plan_result_free(plan_result *r)
{
    free(r->c);
    free(r->ranked);
    free(r->per_gpu);
    memset(r, 0, sizeof *r);
}
