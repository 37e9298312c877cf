/* live_fit.c — the simulator in the loop of a fit to client-side timings
 * (live_fit.h). */
#include "sim/calibrate/live_fit.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost_fit.h"
#include "util/minimize.h"
#include "util/spd.h"
#include "util/stats.h"

const char *const live_err_names[LIVE_N_ERRS] = {"ttft", "itl", "tpot", "e2e"};
const char *const live_ident_why[4] = {"identified", "not identified: the data cannot tell it from 0",
                                       "not identified: no measured time depends on it",
                                       "not identified: confounded with other terms"};

/* The ranges: efficiencies up to 1 (a share of the GPU preset's kernels,
 * which are themselves fitted to measured kernel times: a server does not
 * beat its own kernels, and a fit above 1 says another term is absorbing
 * the error), a tenth of a microsecond to a second for the overheads. */
const live_kind live_roofline = {
    .name = "roofline",
    .n = 5,
    .term = {"compute_efficiency", "memory_efficiency", "overheads.step_s", "overheads.arrival_s",
             "overheads.request_s"},
    .lo = {1e-3, 1e-3, 1e-7, 1e-7, 1e-7},
    .hi = {1, 1, 1, 1, 1},
    .start = {1, 1, 1e-3, 1e-3, 1e-4},   /* the presets' own kernels */
    .itl_stage = {false, true, true, false, false},
};

const live_kind live_linear = {
    .name = "linear",
    .n = 7,
    .term = {"base_s", "per_prefill_token_s", "per_decode_seq_s", "per_context_token_s", "per_attention_s",
             "overheads.arrival_s", "overheads.request_s"},
    .lo = {1e-7, 1e-12, 1e-12, 1e-15, 1e-18, 1e-7, 1e-7},
    .hi = {10, 1, 1, 1e-2, 1e-3, 1, 1},
    .start = {1e-2, 1e-5, 1e-4, 1e-7, 1e-10, 1e-3, 1e-4},
    .itl_stage = {true, false, true, true, false, false, false},
    .start_from_data = true,
};

void live_fit_opts_default(live_fit_opts *o)
{
    memset(o, 0, sizeof *o);
    sim_config_default(&o->sim);
    o->kind = &live_roofline;
    o->iters = 300;
    o->restarts = 3;
}

int live_fit_requests(const tr_trace *measured, tr_trace *out, rh_err *e)
{
    tr_trace_init(out);
    tr_header_free(&out->header);   /* tr_header_copy makes it anew */
    if (tr_header_copy(&out->header, &measured->header) < 0) return rh_fail(e, "out of memory");
    for (size_t i = 0; i < measured->n_requests; i++) {
        const tr_request *q = &measured->requests[i];
        if (q->output_len == 0 || !(q->ttft > 0) || !(q->e2e >= q->ttft)) continue;
        if (tr_trace_add_request(out, q, e) < 0) {
            tr_trace_free(out);
            return -1;
        }
    }
    if (!out->n_requests) {
        tr_trace_free(out);
        return rh_fail(e, "no request in the trace has a measured TTFT: a client-side trace (rehearse probe, or "
                          "rehearse bench --record-trace) is needed");
    }
    return 0;
}

static void set_path(json_t *root, const char *name, double v)
{
    const char *dot = strchr(name, '.');
    if (!dot) {
        json_object_set_new(root, name, json_real(v));
        return;
    }
    char obj[64];
    snprintf(obj, sizeof obj, "%.*s", (int)(dot - name), name);
    json_t *o = json_object_get(root, obj);
    if (!json_is_object(o)) {
        o = json_object();
        json_object_set_new(root, obj, o);
    }
    json_object_set_new(o, dot + 1, json_real(v));
}

static json_t *with_terms(const live_kind *k, const char *base_json, const double *terms, rh_err *e)
{
    json_error_t je;
    json_t *root = json_loads(base_json, 0, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        rh_fail(e, "the base cost file is not a JSON object (line %d: %s)", je.line, je.text);
        return NULL;
    }
    for (int i = 0; i < k->n; i++) set_path(root, k->term[i], terms[i]);
    return root;
}

char *live_fit_cost_text(const live_kind *k, const char *base_json, const double *terms, rh_err *e)
{
    json_t *root = with_terms(k, base_json, terms, e);
    if (!root) return NULL;
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(8));
    json_decref(root);
    if (!s) rh_fail(e, "out of memory");
    return s;
}

/* Requests a client sends at one instant (a batch of probes, a burst's
 * first wave) reach the server in an order the trace cannot say: the server
 * serves one of them first, the simulator another. So requests sent within
 * LIVE_TOGETHER_S of each other form a group and are compared as sets: the
 * group's sorted simulated times against its sorted measured ones. */
#define LIVE_TOGETHER_S 2e-3

typedef struct fit_ctx {
    const live_fit_opts *o;
    const tr_trace *t;          /* the replayable requests */
    size_t *order;              /* request indices by arrival */
    size_t *group;              /* group g is order[group[g] .. group[g + 1]) */
    size_t n_groups;
    bool itl;                   /* every request has its token times: the second metric is the median ITL, else TPOT */
    double *ttft, *tpot;        /* measured, in `order`, sorted within each group (tpot: the second metric,
                                   0 with fewer than 2 tokens) */
    double *sim_ttft, *sim_tpot;/* scratch of the same shape */
    /* A stage of the search: the terms it moves (the others held at x)
     * and the weights of the two metrics in its loss. */
    const live_kind *k;
    bool free[LIVE_MAX_TERMS];
    double x[LIVE_MAX_TERMS];   /* logs of the terms */
    double w_ttft, w_itl;
    /* Each request's ITL counts as many times as it has gaps (its group's
     * mean, in `order`): a 128-token decode's median says more than a
     * 4-token one's. */
    double *gaps, gaps_sum;
    int evals;
    double best_whole;          /* the least TTFT + ITL loss seen so far (the progress line's) */
    int failed;
    rh_err err;
} fit_ctx;

static void terms_of(const live_kind *k, const double *x, double *terms)
{
    for (int i = 0; i < k->n; i++) terms[i] = fmin(k->hi[i], fmax(k->lo[i], exp(x[i])));
}

/* The median of a measured request's inter-token gaps (0 with fewer than 2 tokens). */
static double median_itl(const tr_request *q)
{
    if (q->output_len < 2 || q->n_times != q->output_len) return 0;
    double *g = malloc((q->n_times - 1) * sizeof *g);
    if (!g) return 0;
    for (uint32_t k = 1; k < q->n_times; k++) g[k - 1] = q->token_times[k] - q->token_times[k - 1];
    rh_sort_doubles(g, q->n_times - 1);
    double m = rh_percentile_sorted(g, q->n_times - 1, 50);
    free(g);
    return m;
}

/* 1.4826 x the median absolute deviation (a normal's standard deviation,
 * blind to a few outliers), reordering d; 0 for fewer than 100 values. */
static double robust_sigma(rh_dvec *d)
{
    if (d->n < 100) return 0;
    rh_sort_doubles(d->v, d->n);
    double med = rh_percentile_sorted(d->v, d->n, 50);
    for (size_t k = 0; k < d->n; k++) d->v[k] = fabs(d->v[k] - med);
    rh_sort_doubles(d->v, d->n);
    return 1.4826 * rh_percentile_sorted(d->v, d->n, 50);
}

/* The noise of one step as a client sees it: each measured inter-token
 * gap against its request's median gap, log(gap / median), pooled over the
 * requests with every token timed; sigma = 1.4826 x the median absolute
 * deviation of the pool (a standard deviation for lognormal noise, and
 * blind to the few gaps that hold another request's prefill, which the
 * simulator prices itself). 0 when fewer than 100 gaps. */
double live_step_noise(const tr_trace *t, size_t *gaps_used)
{
    rh_dvec d = {0};
    for (size_t i = 0; i < t->n_requests; i++) {
        const tr_request *q = &t->requests[i];
        if (q->output_len < 4 || q->n_times != q->output_len) continue;
        double m = median_itl(q);
        if (!(m > 0)) continue;
        for (uint32_t k = 1; k < q->n_times; k++) {
            double g = q->token_times[k] - q->token_times[k - 1];
            if (g > 0 && rh_dvec_push(&d, log(g / m)) < 0) break;
        }
    }
    double sigma = robust_sigma(&d);
    *gaps_used = d.n;
    rh_dvec_free(&d);
    return sigma;
}

static double tpot_of(double ttft, double e2e, uint32_t out)
{
    return out > 1 ? (e2e - ttft) / (out - 1) : 0;
}

/* Simulates the requests under the given terms; fills sim (n requests). */
static int simulate(fit_ctx *c, const double *terms, sim_result *sr, rh_err *e)
{
    char *text = live_fit_cost_text(c->k, c->o->base_json, terms, e);
    if (!text) return -1;
    cost_model *m = cost_parse(text, "the fitted cost model", e);
    free(text);
    if (!m) return -1;
    sim_config sc = c->o->sim;
    sc.rate_scale = 1;
    sc.max_concurrency = 0;
    sc.out_path = NULL;
    sc.progress = 0;
    sc.series_points = 16;
    sc.request_itl = c->itl;
    int rc = sim_run(&sc, c->t, m, sr, e);
    cost_free(m);
    if (rc == 0 && sr->n_requests != c->t->n_requests) {
        sim_result_free(sr);
        return rh_fail(e, "the simulator returned %llu requests for %zu", (unsigned long long)sr->n_requests,
                       c->t->n_requests);
    }
    return rc;
}

/* The pseudo-Huber loss of the log ratio: squared within a few percent,
 * linear beyond. A request's TTFT hangs on where its arrival fell against
 * the server's step boundaries (one that lands just after a step began
 * waits the whole step), which no model of the arrivals reproduces; a
 * squared loss would let those few requests pull every term. */
#define LIVE_HUBER 0.05
static const tr_trace *sort_trace;   /* qsort has no context: set around the one call below */
static int cmp_arrival(const void *a, const void *b)
{
    double x = sort_trace->requests[*(const size_t *)a].arrival, y = sort_trace->requests[*(const size_t *)b].arrival;
    if (x != y) return x < y ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

static void order_by_arrival(const tr_trace *t, size_t *order)
{
    for (size_t i = 0; i < t->n_requests; i++) order[i] = i;
    sort_trace = t;
    qsort(order, t->n_requests, sizeof *order, cmp_arrival);
    sort_trace = NULL;
}

static double sq_log(double sim, double meas)
{
    if (!(sim > 0) || !(meas > 0)) return 1;    /* never produced a token: as bad as a factor of e^20 */
    double l = log(sim / meas) / LIVE_HUBER;
    return LIVE_HUBER * LIVE_HUBER * (sqrt(1 + l * l) - 1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ttft and tpot of each request in c->order, sorted within each group. */
static void grouped(const fit_ctx *c, const double *ttft_by_req, const double *tpot_by_req, double *ttft,
                    double *tpot)
{
    size_t n = c->t->n_requests;
    for (size_t k = 0; k < n; k++) {
        ttft[k] = ttft_by_req[c->order[k]];
        tpot[k] = tpot_by_req[c->order[k]];
    }
    for (size_t g = 0; g < c->n_groups; g++) {
        size_t a = c->group[g], m = c->group[g + 1] - a;
        qsort(ttft + a, m, sizeof *ttft, cmp_double);
        qsort(tpot + a, m, sizeof *tpot, cmp_double);
    }
}

/* The simulated run's TTFT and TPOT, in c->sim_ttft and c->sim_tpot. */
static void sim_grouped(fit_ctx *c, const sim_result *sr)
{
    size_t n = c->t->n_requests;
    double *a = c->sim_ttft + n, *b = c->sim_tpot + n;   /* by request, in the scratch's second half */
    for (size_t i = 0; i < n; i++) {
        const sim_request_result *q = &sr->requests[i];
        a[i] = q->ttft;
        b[i] = c->itl ? q->itl_median : tpot_of(q->ttft, q->e2e, q->output_len);
    }
    grouped(c, a, b, c->sim_ttft, c->sim_tpot);
}

/* The stage's loss (its weights on the TTFT and ITL parts); *whole: both
 * parts, the one quantity the progress line shows at every stage (each
 * stage's own would jump when the weights change). */
static double loss_of(fit_ctx *c, const sim_result *sr, double *whole)
{
    sim_grouped(c, sr);
    double s_ttft = 0, s_tpot = 0;
    for (size_t k = 0; k < c->t->n_requests; k++) {
        s_ttft += sq_log(c->sim_ttft[k], c->ttft[k]);
        if (c->tpot[k] > 0) s_tpot += c->gaps[k] * sq_log(c->sim_tpot[k], c->tpot[k]);
    }
    double ttft = s_ttft / (double)c->t->n_requests, itl = c->gaps_sum > 0 ? s_tpot / c->gaps_sum : 0;
    *whole = ttft + itl;
    return c->w_ttft * ttft + c->w_itl * itl;
}

static double objective(const double *xs, void *ctx)
{
    fit_ctx *c = ctx;
    if (c->failed) return INFINITY;
    const live_kind *k = c->k;
    double x[LIVE_MAX_TERMS] = {0}, terms[LIVE_MAX_TERMS] = {0}, pen = 0;
    for (int i = 0, j = 0; i < k->n; i++) x[i] = c->free[i] ? xs[j++] : c->x[i];
    terms_of(k, x, terms);
    for (int i = 0; i < k->n; i++) {   /* outside the range: the edge's loss, sloped back in */
        double d = fmax(0, log(k->lo[i]) - x[i]) + fmax(0, x[i] - log(k->hi[i]));
        pen += d * d;
    }
    sim_result sr;
    if (simulate(c, terms, &sr, &c->err) < 0) {
        c->failed = 1;
        return INFINITY;
    }
    double whole;
    double l = loss_of(c, &sr, &whole) + pen;
    sim_result_free(&sr);
    c->evals++;
    if (whole < c->best_whole || c->evals == 1) c->best_whole = whole;
    if (c->o->progress) c->o->progress(c->o->ctx, c->evals, c->best_whole, l);
    return l;
}

/* ---- the intervals ----
 * The loss is a sum of squares of per-request residuals, so at the fit's
 * end the Jacobian of the residuals against the terms (finite differences:
 * the simulator is deterministic, so a 2% step in a term's log is a clean
 * derivative) gives each term's spread the residuals allow (Gauss–Newton).
 * It is the spread of the measurement's noise, given the model: it says
 * which terms the trace pins and which it cannot, not how far a model
 * unlike the server is from it. */

/* The residual whose square is the request's share of the whole loss. */
static double resid(double sim, double meas, double weight)
{
    double l = sim > 0 && meas > 0 ? log(sim / meas) : 1;
    return copysign(sqrt(weight * sq_log(sim, meas)), l);
}

/* The residuals of the terms exp(x) (clipped to their range), in r (count
 * *m); their sum of squares, or INFINITY when the simulation failed. */
static double residuals(fit_ctx *c, const double *x, double *r, size_t *m)
{
    double terms[LIVE_MAX_TERMS];
    terms_of(c->k, x, terms);
    sim_result sr;
    if (c->failed || simulate(c, terms, &sr, &c->err) < 0) {
        c->failed = 1;
        return INFINITY;
    }
    sim_grouped(c, &sr);
    sim_result_free(&sr);
    size_t n = c->t->n_requests, j = 0;
    double sum = 0;
    for (size_t k = 0; k < n; k++) r[j++] = resid(c->sim_ttft[k], c->ttft[k], 1.0 / (double)n);
    for (size_t k = 0; k < n; k++)
        if (c->tpot[k] > 0 && c->gaps_sum > 0) r[j++] = resid(c->sim_tpot[k], c->tpot[k], c->gaps[k] / c->gaps_sum);
    for (size_t k = 0; k < j; k++) sum += r[k] * r[k];
    *m = j;
    c->evals++;
    if (sum < c->best_whole) c->best_whole = sum;
    if (c->o->progress) c->o->progress(c->o->ctx, c->evals, c->best_whole, sum);
    return sum;
}

#define LIVE_FD_STEP 0.02   /* in a term's log */

/* J (m × n, row-major) of the residuals r0 at x against the logs of the
 * terms; -1 when a simulation failed. */
static int jacobian(fit_ctx *c, const double *x, const double *r0, size_t m, double *J, double *scratch)
{
    int p = c->k->n;
    for (int i = 0; i < p; i++) {
        double xi[LIVE_MAX_TERMS];
        memcpy(xi, x, sizeof xi);
        xi[i] += LIVE_FD_STEP;
        size_t mi;
        if (!isfinite(residuals(c, xi, scratch, &mi)) || mi != m) return -1;
        for (size_t k = 0; k < m; k++) J[k * p + i] = (scratch[k] - r0[k]) / LIVE_FD_STEP;
    }
    return 0;
}

/* A = JᵀJ (p × p). */
static void normal_eq(const double *J, size_t m, int p, double *A)
{
    memset(A, 0, (size_t)p * p * sizeof *A);
    for (size_t k = 0; k < m; k++)
        for (int i = 0; i < p; i++)
            for (int j = 0; j < p; j++) A[i * p + j] += J[k * p + i] * J[k * p + j];
}

/* Each term's 95% interval from the Jacobian at the fit's end: the
 * covariance of the terms themselves (not their logs, so a term near 0
 * gets an interval that reaches 0 rather than one a factor wide of a
 * negligible value) is s² (JᵀJ)⁻¹, s² the residuals' mean square over
 * their degrees of freedom. A term no residual moves with is named and
 * left out; the rest are inverted as a correlation matrix (scale-free:
 * the terms' units differ by twelve orders), and a term whose column the
 * earlier ones already explain is named confounded and left out too (the
 * others' intervals are then those with it held). */
static int intervals(fit_ctx *c, live_fit_result *res, double *J, double *r, double *scratch)
{
    const live_kind *k = c->k;
    int p = k->n;
    size_t m;
    double f = residuals(c, c->x, r, &m);
    if (!isfinite(f) || jacobian(c, c->x, r, m, J, scratch) < 0) return -1;
    res->loss = f;
    int keep[LIVE_MAX_TERMS], q = 0;
    for (int i = 0; i < p; i++) {
        double moved = 0;
        for (size_t row = 0; row < m; row++) moved = fmax(moved, fabs(J[row * p + i]));
        res->lo[i] = 0;
        res->hi[i] = INFINITY;
        res->ident[i] = LIVE_NO_EFFECT;
        if (moved > 0) keep[q++] = i;
        for (size_t row = 0; row < m; row++) J[row * p + i] /= res->terms[i];   /* d r / d term */
    }
    double A[LIVE_MAX_TERMS * LIVE_MAX_TERMS];
    normal_eq(J, m, p, A);
    for (;;) {
        double B[LIVE_MAX_TERMS * LIVE_MAX_TERMS], inv[LIVE_MAX_TERMS * LIVE_MAX_TERMS], d[LIVE_MAX_TERMS];
        for (int a = 0; a < q; a++) d[a] = sqrt(A[keep[a] * p + keep[a]]);
        for (int a = 0; a < q; a++)
            for (int b = 0; b < q; b++) B[a * q + b] = A[keep[a] * p + keep[b]] / (d[a] * d[b]);
        int bad = q ? rh_spd_inverse(B, inv, q) : 0;
        if (bad > 0) {   /* column bad - 1 is explained by those before it */
            res->ident[keep[bad - 1]] = LIVE_CONFOUNDED;
            memmove(keep + bad - 1, keep + bad, (size_t)(q - bad) * sizeof *keep);
            q--;
            continue;
        }
        double s2 = m > (size_t)q ? f / (double)(m - (size_t)q) : f;
        for (int a = 0; a < q; a++) {
            int i = keep[a];
            double half = 1.96 * sqrt(fmax(0, s2 * inv[a * q + a])) / d[a];
            res->lo[i] = fmax(0, res->terms[i] - half);
            res->hi[i] = res->terms[i] + half;
            res->ident[i] = res->lo[i] > 0 ? LIVE_IDENTIFIED : LIVE_NOT_FROM_ZERO;
        }
        return 0;
    }
}

static void error_of(rh_dvec *v, live_fit_error *out)
{
    rh_summary s;
    rh_summarize(v->v, v->n, &s);
    *out = (live_fit_error){.n = v->n, .median = s.median, .p90 = s.p90};
}

/* Per-request errors of the fitted model, and its "fit" object. */
static int score(fit_ctx *c, live_fit_result *r, rh_err *e)
{
    sim_result sr;
    if (simulate(c, r->terms, &sr, e) < 0) return -1;
    rh_dvec v[LIVE_N_ERRS] = {{0}};
    int rc = 0;
    sim_grouped(c, &sr);
    size_t n = c->t->n_requests;
    /* E2E and TPOT as sets of groups too. */
    double *buf = malloc(4 * n * sizeof *buf);
    double *me2e = buf, *se2e = buf + n, *mtpot = buf + 2 * n, *stpot = buf + 3 * n;
    if (!buf) rc = rh_fail(e, "out of memory");
    for (size_t k = 0; k < n && rc == 0; k++) {
        const tr_request *m = &c->t->requests[c->order[k]];
        const sim_request_result *q = &sr.requests[c->order[k]];
        me2e[k] = m->e2e;
        se2e[k] = q->e2e;
        mtpot[k] = tpot_of(m->ttft, m->e2e, m->output_len);
        stpot[k] = tpot_of(q->ttft, q->e2e, q->output_len);
    }
    for (size_t g = 0; g < c->n_groups && rc == 0; g++) {
        size_t a = c->group[g], m = c->group[g + 1] - a;
        qsort(me2e + a, m, sizeof *buf, cmp_double);
        qsort(se2e + a, m, sizeof *buf, cmp_double);
        qsort(mtpot + a, m, sizeof *buf, cmp_double);
        qsort(stpot + a, m, sizeof *buf, cmp_double);
    }
    rh_dvec res_ttft = {0}, res_itl = {0};
    for (size_t k = 0; k < n && rc == 0; k++) {
        if ((c->ttft[k] > 0 && c->sim_ttft[k] > 0 && rh_dvec_push(&res_ttft, log(c->ttft[k] / c->sim_ttft[k])) < 0) ||
            (c->tpot[k] > 0 && c->sim_tpot[k] > 0 && rh_dvec_push(&res_itl, log(c->tpot[k] / c->sim_tpot[k])) < 0))
            rc = rh_fail(e, "out of memory");
        if (rc == 0 && (rh_dvec_push(&v[LIVE_ERR_TTFT], fabs(c->sim_ttft[k] - c->ttft[k]) / c->ttft[k]) < 0 ||
            rh_dvec_push(&v[LIVE_ERR_E2E], fabs(se2e[k] - me2e[k]) / me2e[k]) < 0 ||
            (c->tpot[k] > 0 &&
             rh_dvec_push(&v[LIVE_ERR_ITL], fabs(c->sim_tpot[k] - c->tpot[k]) / c->tpot[k]) < 0) ||
            (mtpot[k] > 0 && rh_dvec_push(&v[LIVE_ERR_TPOT], fabs(stpot[k] - mtpot[k]) / mtpot[k]) < 0)))
            rc = rh_fail(e, "out of memory");
    }
    /* The residuals themselves, signed, as quantiles: what sim --intervals
     * draws each run's model error from. */
    rh_dvec *res[2] = {&res_ttft, &res_itl};
    double *q[2] = {r->resid_ttft, r->resid_itl};
    for (int k = 0; k < 2; k++) {
        if (res[k]->n < 10) continue;
        rh_sort_doubles(res[k]->v, res[k]->n);
        for (int i = 0; i < LIVE_RESID_Q; i++)
            q[k][i] = rh_percentile_sorted(res[k]->v, res[k]->n, 100.0 * i / (LIVE_RESID_Q - 1));
        r->n_resid[k] = res[k]->n;
    }
    rh_dvec_free(&res_ttft);
    rh_dvec_free(&res_itl);
    free(buf);
    sim_result_free(&sr);
    for (int k = 0; k < LIVE_N_ERRS; k++) {
        if (rc == 0) error_of(&v[k], &r->err[k]);
        rh_dvec_free(&v[k]);
    }
    return rc;
}

/* How many tokens request q had at time t (its token times are relative to
 * its arrival). */
static uint32_t tokens_by(const tr_request *q, double t)
{
    uint32_t lo = 0, hi = q->n_times;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (q->arrival + q->token_times[mid] <= t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The linear kind's start, read off the trace as steps the client can see
 * whole: each request's median inter-token gap is one decode step of the
 * requests decoding beside it at its middle (their count and contexts),
 * and a prompt no shorter than a chunk sent when nothing else was in
 * flight is one prefill step (TTFT: its network time folds into the
 * base). Those pseudo-steps fitted by cost_fit_steps (non-negative least
 * squares on relative error) give every coefficient at once, each from
 * the runs that vary it: a start near the answer, where a start far off
 * left the search in a valley that trades a step's base against its per
 * sequence price (base +19%, per sequence −23% on a secret it then could
 * not leave). -1 when the trace has too little for it (no token times). */
static int linear_start(const fit_ctx *c, double *start)
{
    const tr_trace *t = c->t;
    size_t n = t->n_requests;
    int32_t chunk = c->o->sim.core.chunked_prefill_size;
    tr_step *st = calloc(2 * n, sizeof *st);
    if (!st || !c->itl) {
        free(st);
        return -1;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const tr_request *q = &t->requests[i];
        double from = q->arrival, to = q->arrival + q->ttft;
        bool alone = true;
        for (size_t j = 0; j < n && alone; j++)
            alone = j == i || t->requests[j].arrival >= to || t->requests[j].arrival + t->requests[j].e2e <= from;
        if (alone && (chunk < 0 || q->input_len <= (uint32_t)chunk))
            st[m++] = (tr_step){.duration = q->ttft, .prefill_tokens = q->input_len, .prefill_seqs = 1,
                                .prefill_attn = (uint64_t)q->input_len * q->input_len};
        double itl = median_itl(q);
        if (!(itl > 0)) continue;
        double mid = q->arrival + (q->token_times[0] + q->token_times[q->n_times - 1]) / 2;
        tr_step d = {.duration = itl};
        for (size_t j = 0; j < n; j++) {
            const tr_request *o = &t->requests[j];
            if (o->n_times < 2 || o->arrival + o->token_times[0] > mid || o->arrival + o->e2e <= mid) continue;
            d.decode_seqs++;
            d.decode_context += o->input_len + tokens_by(o, mid);
        }
        d.decode_tokens = d.decode_seqs;
        if (d.decode_seqs) st[m++] = d;
    }
    cost_fit_opts fo;
    cost_fit_opts_default(&fo);
    cost_fit_result fr;
    rh_err e;
    int rc = cost_fit_steps(st, m, &fo, &fr, &e);
    free(st);
    if (rc < 0) return -1;
    const double coef[5] = {fr.coef.base_s, fr.coef.per_prefill_token_s, fr.coef.per_decode_seq_s,
                            fr.coef.per_context_token_s, fr.coef.per_attention_s};
    for (int i = 0; i < 5; i++)   /* a coefficient fitted 0 starts at its floor's thousandfold: logs move from there */
        start[i] = fmin(c->k->hi[i], fmax(1e3 * c->k->lo[i], coef[i]));
    return 0;
}

/* Where the searches start: the kind's own point; for a kind no preset
 * scales (linear), two read off the trace: linear_start's, and one from
 * the step of the shortest median ITL and a prompt token's time from the
 * longest lone prompt's TTFT, the other terms small fractions of those
 * (the search moves them in factors of e). Neither start wins on every
 * server: on a linear secret the second leaves the search in the valley
 * linear_start's comment names, on a roofline secret the first leaves it
 * with a 10 ms arrival (TTFT median error 28% against 3.9%); both are
 * searched and the lower loss kept. The count of starts. */
static int start_points(const fit_ctx *c, double start[2][LIVE_MAX_TERMS])
{
    const live_kind *k = c->k;
    memcpy(start[0], k->start, sizeof k->start);
    if (!k->start_from_data) return 1;
    double step = INFINITY, per_token = 0;
    uint32_t longest = 0;
    for (size_t g = 0; g < c->n_groups; g++) {
        size_t a = c->group[g], m = c->group[g + 1] - a;
        for (size_t j = a; j < a + m; j++)
            if (c->tpot[j] > 0 && c->tpot[j] < step) step = c->tpot[j];
        const tr_request *q = &c->t->requests[c->order[a]];
        if (m == 1 && q->input_len > longest) {
            longest = q->input_len;
            per_token = q->ttft / q->input_len;
        }
    }
    if (!isfinite(step)) step = k->start[0];
    if (!(per_token > 0)) per_token = k->start[1];
    double s[] = {step / 2, per_token, step / 100, step / 1e5, per_token / 1e4, 1e-3, 1e-4};
    for (int i = 0; i < k->n && i < (int)(sizeof s / sizeof s[0]); i++)
        start[0][i] = fmin(k->hi[i], fmax(k->lo[i], s[i]));
    memcpy(start[1], start[0], sizeof start[1]);
    return linear_start(c, start[1]) == 0 ? 2 : 1;
}

/* The three stages from `start`: stage 1 the terms a decode's step
 * depends on, from the ITLs alone (they measure the step itself, free of
 * where arrivals fell); stage 2 the others (prefill, arrival) from the
 * TTFTs, those held; stage 3 all on both, from there. c->x holds the end;
 * returns its loss (TTFT and ITL together). */
static double search(fit_ctx *c, const double *start)
{
    const live_kind *k = c->k;
    double loss = INFINITY;
    for (int i = 0; i < k->n; i++) c->x[i] = log(start[i]);
    for (int st = 0; st < 3 && !c->failed; st++) {
        for (int i = 0; i < k->n; i++) c->free[i] = st == 2 || (st == 0) == k->itl_stage[i];
        c->w_ttft = st == 0 ? 0 : 1;
        c->w_itl = st == 1 ? 0 : 1;
        double xs[LIVE_MAX_TERMS];
        int m = 0;
        for (int i = 0; i < k->n; i++)
            if (c->free[i]) xs[m++] = c->x[i];
        loss = rh_nelder_mead(objective, c, xs, m, 0.5, c->o->iters, c->o->restarts);
        for (int i = 0, j = 0; i < k->n; i++)
            if (c->free[i]) c->x[i] = xs[j++];
    }
    return loss;
}

void *live_fit_intervals_json(const live_kind *k, const live_fit_result *r)
{
    json_t *all = json_object();
    for (int i = 0; i < k->n; i++) {
        json_t *t = json_pack("{s:f, s:b, s:s}", "lo", r->lo[i], "identified", r->ident[i] == LIVE_IDENTIFIED, "why",
                              live_ident_why[r->ident[i]]);
        /* JSON has no infinity: an unbounded interval has no "hi" */
        if (isfinite(r->hi[i])) json_object_set_new(t, "hi", json_real(r->hi[i]));
        json_object_set_new(all, k->term[i], t);
    }
    return all;
}

/* The same noise as the GPU's: a decode step's gap is its forward pass and
 * the host's time around it, and only the forward jitters, so each gap's
 * deviation is divided by the forward's share of that step under the
 * fitted model (the request decoding beside those sent with it, at its
 * mid-output context). 0 when it cannot say. */
static double gpu_step_noise(const fit_ctx *c, const char *cost_json)
{
    rh_err e = {{0}};
    cost_model *m = cost_parse(cost_json, "fit", &e);
    if (!m) return 0;
    const tr_trace *t = c->t;
    rh_dvec d = {0};
    cost_seq *seqs = NULL;
    for (size_t g = 0; g < c->n_groups; g++) {
        size_t together = c->group[g + 1] - c->group[g];
        cost_seq *s2 = realloc(seqs, together * sizeof *seqs);
        if (!s2) break;
        seqs = s2;
        for (size_t k = c->group[g]; k < c->group[g + 1]; k++) {
            const tr_request *q = &t->requests[c->order[k]];
            if (q->output_len < 4 || q->n_times != q->output_len) continue;
            for (size_t j = 0; j < together; j++)
                seqs[j] = (cost_seq){.n_new = 1, .context = q->input_len + q->output_len / 2, .prefill = false};
            cost_batch b = {.seqs = seqs, .n = (uint32_t)together, .tp = c->o->sim.tp};
            cost_batch_summarize(&b);
            cost_parts p;
            cost_step_parts(m, &b, &p);
            double gpu = p.forward_s + p.draft_s, all = gpu + p.launch_s + p.exposed_s;
            double med = median_itl(q);
            if (!(gpu > 0) || !(all > 0) || !(med > 0)) continue;
            double share = gpu / all;
            for (uint32_t i = 1; i < q->n_times; i++) {
                double gap = q->token_times[i] - q->token_times[i - 1];
                if (gap > 0 && rh_dvec_push(&d, log(gap / med) / share) < 0) break;
            }
        }
    }
    free(seqs);
    cost_free(m);
    double sigma = robust_sigma(&d);
    rh_dvec_free(&d);
    return sigma;
}

void *live_step_noise_json(const tr_trace *t)
{
    size_t gaps = 0;
    double sigma = live_step_noise(t, &gaps);
    return json_pack("{s:f, s:I, s:s}", "sigma", sigma, "gaps", (json_int_t)gaps, "how",
                     "each measured inter-token gap against its request's median, log(gap / median), pooled; "
                     "sigma = 1.4826 x their median absolute deviation; gpu_sigma the same with each deviation "
                     "over the forward pass's share of its decode step under the fitted model (the host's time "
                     "does not jitter)");
}

void *live_residuals_json(const live_fit_result *r)
{
    json_t *o = json_object();
    const char *names[2] = {"ttft", "itl"};
    const double *q[2] = {r->resid_ttft, r->resid_itl};
    for (int k = 0; k < 2; k++) {
        if (!r->n_resid[k]) continue;
        json_t *a = json_array();
        for (int i = 0; i < LIVE_RESID_Q; i++) json_array_append_new(a, json_real(q[k][i]));
        json_object_set_new(o, names[k], json_pack("{s:I, s:o}", "requests", (json_int_t)r->n_resid[k],
                                                   "log_ratio_quantiles", a));
    }
    json_object_set_new(o, "how", json_string("log(measured / simulated) of each request's TTFT and median ITL under "
                                              "the fitted terms, at quantiles 0, 5, ..., 100 %"));
    return o;
}

int live_fit(const tr_trace *measured, const live_fit_opts *o, live_fit_result *r, rh_err *e)
{
    memset(r, 0, sizeof *r);
    tr_trace t;
    if (live_fit_requests(measured, &t, e) < 0) return -1;
    fit_ctx c = {.o = o, .t = &t, .k = o->kind ? o->kind : &live_roofline};
    size_t n = t.n_requests;
    c.order = malloc(n * sizeof *c.order);
    c.group = malloc((n + 1) * sizeof *c.group);
    c.ttft = malloc(n * sizeof *c.ttft);
    c.tpot = malloc(n * sizeof *c.tpot);
    c.sim_ttft = malloc(2 * n * sizeof *c.sim_ttft);
    c.sim_tpot = malloc(2 * n * sizeof *c.sim_tpot);
    c.gaps = malloc(n * sizeof *c.gaps);
    int rc = 0;
    if (!c.order || !c.group || !c.ttft || !c.tpot || !c.sim_ttft || !c.sim_tpot || !c.gaps) rc = rh_fail(e, "out of memory");
    if (rc == 0) {
        order_by_arrival(&t, c.order);
        for (size_t k = 0; k < n; k++)
            if (k == 0 || t.requests[c.order[k]].arrival - t.requests[c.order[c.group[c.n_groups - 1]]].arrival >
                              LIVE_TOGETHER_S)
                c.group[c.n_groups++] = k;
        c.group[c.n_groups] = n;
        c.itl = true;
        for (size_t i = 0; i < n; i++)
            if (t.requests[i].output_len >= 2 && t.requests[i].n_times != t.requests[i].output_len) c.itl = false;
        double *a = c.sim_ttft, *b = c.sim_tpot;   /* the measured by request, then grouped */
        for (size_t i = 0; i < n; i++) {
            const tr_request *q = &t.requests[i];
            a[i] = q->ttft;
            b[i] = c.itl ? median_itl(q) : tpot_of(q->ttft, q->e2e, q->output_len);
        }
        grouped(&c, a, b, c.ttft, c.tpot);
        for (size_t g = 0; g < c.n_groups; g++) {
            double sum = 0;
            for (size_t k = c.group[g]; k < c.group[g + 1]; k++) sum += t.requests[c.order[k]].output_len - 1.0;
            for (size_t k = c.group[g]; k < c.group[g + 1]; k++) {
                c.gaps[k] = sum / (double)(c.group[g + 1] - c.group[g]);
                if (c.tpot[k] > 0) c.gaps_sum += c.gaps[k];
            }
        }
    }
    if (rc == 0) {
        double starts[2][LIVE_MAX_TERMS], best = INFINITY, best_x[LIVE_MAX_TERMS] = {0};
        int n_starts = start_points(&c, starts);
        for (int s = 0; s < n_starts && !c.failed; s++) {
            double loss = search(&c, starts[s]);
            if (loss < best) {
                best = loss;
                memcpy(best_x, c.x, sizeof best_x);
            }
        }
        memcpy(c.x, best_x, sizeof best_x);
        r->loss = best;
        /* Then each term's interval, at the end. */
        size_t m = 2 * n;
        double *J = malloc(m * LIVE_MAX_TERMS * sizeof *J), *res = malloc(2 * m * sizeof *res);
        terms_of(c.k, c.x, r->terms);
        if (!J || !res) rc = rh_fail(e, "out of memory");
        else if (!c.failed) intervals(&c, r, J, res, res + m);
        free(J);
        free(res);
        if (rc == 0 && c.failed) {
            memcpy(e, &c.err, sizeof *e);
            rc = -1;
        } else if (rc == 0) {
            r->n_terms = c.k->n;
            r->evals = c.evals;
            r->requests = t.n_requests;
            rc = score(&c, r, e);
        }
    }
    if (rc == 0) {
        json_t *root = with_terms(c.k, o->base_json, r->terms, e);
        if (!root) {
            rc = -1;
        } else {
            json_t *fit = json_object(), *errs = json_object();
            json_object_set_new(fit, "method", json_string(c.itl ? "simulator in the loop on client-side TTFT and median ITL" : "simulator in the loop on client-side TTFT and TPOT"));
            json_object_set_new(fit, "requests", json_integer((json_int_t)r->requests));
            json_object_set_new(fit, "loss", json_real(r->loss));
            for (int k = 0; k < LIVE_N_ERRS; k++) {
                json_t *x = json_object();
                json_object_set_new(x, "median", json_real(r->err[k].median));
                json_object_set_new(x, "p90", json_real(r->err[k].p90));
                json_object_set_new(errs, live_err_names[k], x);
            }
            json_object_set_new(fit, "relative_error", errs);
            json_object_set_new(fit, "intervals", live_fit_intervals_json(c.k, r));
            json_t *noise = live_step_noise_json(&t);
            char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
            double gpu = text ? gpu_step_noise(&c, text) : 0;
            free(text);
            if (gpu > 0) json_object_set_new(noise, "gpu_sigma", json_real(gpu));
            json_object_set_new(fit, "step_noise", noise);
            json_object_set_new(fit, "residuals", live_residuals_json(r));
            json_object_set_new(root, "fit", fit);
            r->cost_json = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(8));
            json_decref(root);
            if (!r->cost_json) rc = rh_fail(e, "out of memory");
        }
    }
    free(c.order);
    free(c.group);
    free(c.ttft);
    free(c.tpot);
    free(c.sim_ttft);
    free(c.sim_tpot);
    free(c.gaps);
    tr_trace_free(&t);
    return rc;
}

void live_fit_result_free(live_fit_result *r)
{
    free(r->cost_json);
    r->cost_json = NULL;
}
