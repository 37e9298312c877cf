/* intervals.c — see intervals.h. */
#include "sim/intervals.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost_noise.h"
#include "traces/metrics/metrics.h"
#include "util/fork_pool.h"
#include "util/rng.h"
#include "util/stats.h"

void sim_interval_opts_default(sim_interval_opts *o)
{
    memset(o, 0, sizeof *o);
    o->runs = 20;
    o->sigma = -1;
    o->draw_terms = true;
    o->resample = true;
    o->seed = 1;
}

double sim_cost_step_noise(const char *cost_text, bool *gpu_only)
{
    json_t *j = json_loads(cost_text, 0, NULL);
    json_t *n = json_object_get(json_object_get(j, "fit"), "step_noise");
    json_t *g = json_object_get(n, "gpu_sigma"), *s = json_object_get(n, "sigma");
    *gpu_only = json_is_number(g) && json_number_value(g) > 0;
    double v = *gpu_only ? json_number_value(g) : json_is_number(s) ? json_number_value(s) : 0;
    json_decref(j);
    return v > 0 && isfinite(v) ? v : 0;
}

/* The number at a "a.b" path of an object, and where it sits. */
static json_t *at_path(json_t *root, const char *path, json_t **parent, char *key, size_t n)
{
    json_t *cur = root;
    const char *p = path;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len >= n) return NULL;
        memcpy(key, p, len);
        key[len] = '\0';
        if (!dot) {
            *parent = cur;
            return json_object_get(cur, key);
        }
        cur = json_object_get(cur, key);
        if (!json_is_object(cur)) return NULL;
        p = dot + 1;
    }
}

/* The cost text with each fitted term drawn from its interval. */
static char *drawn_terms(const char *text, rh_rng *g, json_t *names)
{
    json_t *root = json_loads(text, 0, NULL);
    json_t *iv = json_object_get(json_object_get(root, "fit"), "intervals");
    const char *term;
    json_t *x;
    json_object_foreach(iv, term, x) {
        json_t *lo = json_object_get(x, "lo"), *hi = json_object_get(x, "hi"), *parent = NULL;
        char key[128];
        json_t *v = at_path(root, term, &parent, key, sizeof key);
        if (!parent || !json_is_number(lo) || !json_is_number(hi) || !json_is_number(v)) continue;   /* unbounded: kept */
        double mid = json_number_value(v), sd = (json_number_value(hi) - json_number_value(lo)) / (2 * 1.96);
        if (!(sd > 0)) continue;
        double d = mid;
        for (int tries = 0; tries < 100; tries++) {
            d = mid + sd * rh_rng_normal(g);
            if (d > 0) break;
        }
        if (!(d > 0)) d = mid;
        json_object_set_new(parent, key, json_real(d));
        if (names) json_array_append_new(names, json_string(term));
    }
    char *out = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(root);
    return out;
}

typedef struct run_ctx {
    const sim_config *cfg;
    const tr_trace *t;
    const char *text, *label;
    const sim_interval_opts *o;
    double sigma;
    bool gpu_only;           /* sigma is the GPU's (fit.step_noise.gpu_sigma), else the whole step's */
    double bias[2], se[2];   /* the fit's median residual of TTFT and ITL and its standard error */
    bool have_bias;
    json_t **metrics;
} run_ctx;

/* From fit.residuals' quantiles (0, 5, ..., 100%) of log(measured /
 * simulated): the median, and its standard error, 1.2533 sigma / sqrt(n)
 * with sigma from the interquartile range (IQR / 1.349), for TTFT (k = 0)
 * and ITL (k = 1). false without them. */
static bool bias_of(const char *cost_text, double bias[2], double se[2])
{
    json_t *j = json_loads(cost_text, 0, NULL);
    json_t *r = json_object_get(json_object_get(j, "fit"), "residuals");
    const char *names[2] = {"ttft", "itl"};
    bool ok = true;
    for (int k = 0; k < 2 && ok; k++) {
        json_t *x = json_object_get(r, names[k]), *q = json_object_get(x, "log_ratio_quantiles");
        double n = json_number_value(json_object_get(x, "requests"));
        if (json_array_size(q) != 21 || !(n >= 10)) {
            ok = false;
            break;
        }
        double q25 = json_number_value(json_array_get(q, 5)), q50 = json_number_value(json_array_get(q, 10)),
               q75 = json_number_value(json_array_get(q, 15));
        bias[k] = q50;
        se[k] = 1.2533 * (q75 - q25) / 1.349 / sqrt(n);
        ok = isfinite(bias[k]) && isfinite(se[k]) && se[k] >= 0;
    }
    json_decref(j);
    return ok;
}

static int one_run(void *ctx, int k, FILE *f)
{
    run_ctx *x = ctx;
    rh_rng g;
    rh_rng_seed(&g, x->o->seed * 1000003u + (uint64_t)k);
    char *text = x->o->draw_terms ? drawn_terms(x->text, &g, NULL) : strdup(x->text);
    rh_err e = {{0}};
    if (!text) rh_fail(&e, "out of memory");
    cost_model *m = text ? cost_parse(text, x->label, &e) : NULL;
    free(text);
    if (!m) {
        json_t *err = json_pack("{s:s}", "error", e.msg);
        json_dumpf(err, f, JSON_COMPACT);
        json_decref(err);
        return -1;
    }
    cost_noise noisy;
    cost_noise_init(&noisy, m, x->sigma, &g);
    noisy.whole_step = !x->gpu_only;   /* a gap's noise is the whole step's, unless the fit said the GPU's */
    if (x->o->resample && x->have_bias) {
        /* How much of a request's TTFT error is its prefill step's, and how
         * much the way in, the queue or the chunking around it, a client
         * cannot tell: each run takes a share of the bias drawn evenly
         * between none and all of it. ITL is one decode step: the same rule,
         * whose bias is small where the fit is good. */
        noisy.prefill_scale = exp(rh_rng_uniform(&g) * x->bias[0] + x->se[0] * rh_rng_normal(&g));
        noisy.decode_scale = exp(rh_rng_uniform(&g) * x->bias[1] + x->se[1] * rh_rng_normal(&g));
    }
    sim_config cfg = *x->cfg;
    cfg.progress = 0;
    cfg.out_path = NULL;
    cfg.seed = x->cfg->seed + (uint64_t)k + 1;
    sim_result r;
    int rc = sim_run(&cfg, x->t, &noisy.base, &r, &e);
    json_t *o = rc == 0 ? (json_t *)metrics_to_json(&r.summary) : json_pack("{s:s}", "error", e.msg);
    if (rc == 0) sim_result_free(&r);
    cost_free(m);
    rc = json_dumpf(o, f, JSON_COMPACT | JSON_REAL_PRECISION(17)) == 0 && rc == 0 ? 0 : -1;
    json_decref(o);
    return rc;
}

static int run_done(void *ctx, int k, FILE *f, int ok, const char *why, rh_err *e)
{
    run_ctx *x = ctx;
    json_t *o = f ? json_loadf(f, 0, NULL) : NULL;
    if (!o) return rh_fail(e, "interval run %d died (%s)", k + 1, why);
    json_t *err = json_object_get(o, "error");
    if (!ok || err) {
        rh_fail(e, "interval run %d: %s", k + 1, err ? json_string_value(err) : why);
        json_decref(o);
        return -1;
    }
    x->metrics[k] = o;
    return 0;
}

int sim_intervals_run(const sim_config *cfg, const tr_trace *t, const char *cost_text, const char *label,
                      const sim_interval_opts *o, json_t **out, rh_err *e)
{
    *out = NULL;
    if (o->runs < 2) return rh_fail(e, "--intervals needs at least 2 runs (got %u)", o->runs);
    bool gpu_only = false;
    double sigma = o->sigma >= 0 ? o->sigma : sim_cost_step_noise(cost_text, &gpu_only);
    json_t **metrics = calloc(o->runs, sizeof *metrics);
    if (!metrics) return rh_fail(e, "out of memory");
    run_ctx x = {.cfg = cfg, .t = t, .text = cost_text, .label = label, .o = o, .sigma = sigma,
                 .gpu_only = gpu_only && o->sigma < 0, .metrics = metrics};
    x.have_bias = bias_of(cost_text, x.bias, x.se);
    int workers = o->workers > 0 ? o->workers : rh_fork_pool_default_workers();
    int rc = rh_fork_pool((int)o->runs, workers, o->progress ? "intervals" : NULL, one_run, run_done, &x, e);
    json_t *res = NULL;
    double *v = rc == 0 ? malloc(o->runs * sizeof *v) : NULL;
    if (rc == 0 && !v) rc = rh_fail(e, "out of memory");
    if (rc == 0) {
        res = json_object();
        json_t *all = json_object(), *names = json_array();
        rh_rng g;
        rh_rng_seed(&g, o->seed * 1000003u);
        if (o->draw_terms) free(drawn_terms(cost_text, &g, names));   /* which terms the runs draw */
        const char *key;
        json_t *first;
        json_object_foreach(metrics[0], key, first) {
            if (!json_is_number(first)) continue;
            uint32_t n = 0;
            for (uint32_t k = 0; k < o->runs; k++) {
                json_t *m = json_object_get(metrics[k], key);
                if (json_is_number(m)) v[n++] = json_number_value(m);
            }
            rh_sort_doubles(v, n);
            json_object_set_new(all, key, json_pack("{s:f, s:f, s:f}", "p5", rh_percentile_sorted(v, n, 5), "p50",
                                                    rh_percentile_sorted(v, n, 50), "p95",
                                                    rh_percentile_sorted(v, n, 95)));
        }
        json_object_set_new(res, "runs", json_integer(o->runs));
        json_object_set_new(res, "sigma", json_real(sigma));
        json_object_set_new(res, "sigma_of", json_string(x.gpu_only ? "the GPU's time" : "the whole step"));
        if (o->resample && x.have_bias)
            json_object_set_new(res, "model_error", json_pack("{s:f, s:f, s:f, s:f}", "prefill_log_bias", x.bias[0],
                                                              "prefill_log_se", x.se[0], "decode_log_bias", x.bias[1],
                                                              "decode_log_se", x.se[1]));
        json_object_set_new(res, "terms_drawn", names);
        json_object_set_new(res, "metrics", all);
    }
    free(v);
    for (uint32_t k = 0; k < o->runs; k++) json_decref(metrics[k]);
    free(metrics);
    *out = res;
    return rc;
}
