/* cost_fit.c — non-negative least squares of the linear features against
 * measured step durations (see cost_fit.h).
 *
 * Five unknowns and up to millions of steps: each step's row is folded into
 * a 5x5 triangular factor by Givens rotations as it is read, which is as
 * accurate as a QR factorisation of the whole matrix (the normal equations
 * would square a condition number that is already large: prefill_attn runs
 * to 1e9 while the base feature is 1) and needs no memory per step. Columns
 * are first scaled to a largest entry of 1 for the same reason.
 *
 * The non-negative solution is found exactly by trying every subset of the
 * features (2^5 = 32 small least-squares problems on the factor): the
 * optimum's positive coefficients are the unconstrained solution on their
 * own subset, so the best feasible subset solution is the optimum. */
#include "sim/cost/cost_fit.h"

#include <jansson.h>
#include <stdio.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/args.h"

#include "util/stats.h"

#define NF 5

int cost_step_class(const tr_step *s)
{
    bool p = s->prefill_tokens > 0, d = s->decode_seqs > 0;
    if (p && d) return COST_CLASS_MIXED;
    if (p) return COST_CLASS_PREFILL;
    if (d) return COST_CLASS_DECODE;
    return -1;
}

const char *cost_class_name(int c)
{
    static const char *names[COST_N_CLASSES] = {"prefill", "decode", "mixed"};
    return (c >= 0 && c < COST_N_CLASSES) ? names[c] : "none";
}

static bool step_usable(const tr_step *s)
{
    return cost_step_class(s) >= 0 && s->duration > 0 && isfinite(s->duration);
}

int cost_step_errors(const cost_model *m, const tr_step *steps, size_t n, uint32_t tp,
                     cost_err_summary out[COST_N_CLASSES], rh_err *e)
{
    rh_dvec err[COST_N_CLASSES];
    memset(err, 0, sizeof err);
    memset(out, 0, COST_N_CLASSES * sizeof *out);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!step_usable(&steps[i])) continue;
        cost_batch b;
        cost_batch_from_step(&b, &steps[i]);
        b.tp = tp;
        double pred = cost_step_time(m, &b);
        if (!isfinite(pred)) {
            rc = rh_fail(e, "%s cannot price step %llu (tensor-parallel size %u)", m->path[0] ? m->path : "the cost model",
                         (unsigned long long)steps[i].index, tp);
            break;
        }
        double rel = fabs(pred - steps[i].duration) / steps[i].duration;
        if (rh_dvec_push(&err[cost_step_class(&steps[i])], rel) < 0) rc = rh_fail(e, "out of memory");
    }
    for (int c = 0; c < COST_N_CLASSES; c++) {
        if (rc == 0 && err[c].n) {
            rh_summary s;
            rh_summarize(err[c].v, err[c].n, &s);
            out[c] = (cost_err_summary){s.n, s.median, s.p90, s.max, s.mean};
        }
        rh_dvec_free(&err[c]);
    }
    return rc;
}

void cost_fit_opts_default(cost_fit_opts *o)
{
    o->draft_ratio = COST_DRAFT_RATIO_DEFAULT;
    o->absolute = false;
}

/* A least-squares problem folded row by row: R x ≈ z, with rss the part of
 * the target no x can explain. */
typedef struct ls_acc {
    int m;
    double R[NF][NF], z[NF], rss;
} ls_acc;

static void ls_add(ls_acc *a, const double *row, double y)
{
    double x[NF];
    memcpy(x, row, (size_t)a->m * sizeof x[0]);
    for (int j = 0; j < a->m; j++) {
        if (x[j] == 0) continue;
        double r = a->R[j][j], h = hypot(r, x[j]);
        double c = r / h, s = x[j] / h;
        a->R[j][j] = h;
        for (int k = j + 1; k < a->m; k++) {
            double t = a->R[j][k];
            a->R[j][k] = c * t + s * x[k];
            x[k] = c * x[k] - s * t;
        }
        double t = a->z[j];
        a->z[j] = c * t + s * y;
        y = c * y - s * t;
    }
    a->rss += y * y;
}

/* Least squares on the columns listed in cols (of the folded problem a):
 * 0 and the solution, or -1 when those columns are (nearly) dependent. */
static int ls_subset(const ls_acc *a, const int *cols, int m, double *x, double *res)
{
    ls_acc s;
    memset(&s, 0, sizeof s);
    s.m = m;
    double norm[NF] = {0};
    for (int i = 0; i < NF; i++) {
        double row[NF];
        for (int k = 0; k < m; k++) {
            row[k] = a->R[i][cols[k]];
            norm[k] += row[k] * row[k];
        }
        ls_add(&s, row, a->z[i]);
    }
    for (int k = 0; k < m; k++)
        if (!(fabs(s.R[k][k]) > 1e-9 * sqrt(norm[k]))) return -1;
    for (int k = m - 1; k >= 0; k--) {
        double v = s.z[k];
        for (int j = k + 1; j < m; j++) v -= s.R[k][j] * x[j];
        x[k] = v / s.R[k][k];
    }
    *res = s.rss;
    return 0;
}

int cost_fit_steps(const tr_step *steps, size_t n, const cost_fit_opts *o, cost_fit_result *r, rh_err *e)
{
    memset(r, 0, sizeof *r);
    /* Pass 1: column scales, so every column's largest entry is 1. */
    double scale[NF] = {0};
    for (size_t i = 0; i < n; i++) {
        if (!step_usable(&steps[i])) {
            r->skipped++;
            continue;
        }
        cost_batch b;
        cost_batch_from_step(&b, &steps[i]);
        double phi[NF], w = o->absolute ? 1 : 1 / steps[i].duration;
        cost_linear_features(&b, o->draft_ratio, phi);
        for (int j = 0; j < NF; j++) scale[j] = fmax(scale[j], fabs(phi[j] * w));
        r->used++;
    }
    if (r->used == 0)
        return rh_fail(e, "no step to fit: %zu step records, none with work and a positive duration", n);
    /* Pass 2: fold the scaled rows. */
    ls_acc a;
    memset(&a, 0, sizeof a);
    a.m = NF;
    for (size_t i = 0; i < n; i++) {
        if (!step_usable(&steps[i])) continue;
        cost_batch b;
        cost_batch_from_step(&b, &steps[i]);
        double phi[NF], w = o->absolute ? 1 : 1 / steps[i].duration;
        cost_linear_features(&b, o->draft_ratio, phi);
        for (int j = 0; j < NF; j++) phi[j] = scale[j] > 0 ? phi[j] * w / scale[j] : 0;
        ls_add(&a, phi, steps[i].duration * w);
    }
    int det[NF], nd = 0;
    for (int j = 0; j < NF; j++) {
        r->determined[j] = scale[j] > 0;
        if (r->determined[j]) det[nd++] = j;
    }
    /* Every subset of the determined features; the empty one predicts 0. */
    double best_res = 0, best_x[NF] = {0};
    for (int j = 0; j < NF; j++) best_res += a.z[j] * a.z[j];
    for (unsigned mask = 1; mask < (1u << nd); mask++) {
        int cols[NF], m = 0;
        for (int k = 0; k < nd; k++)
            if (mask & (1u << k)) cols[m++] = det[k];
        double x[NF], res;
        if (ls_subset(&a, cols, m, x, &res) < 0) continue;
        bool feasible = true;
        for (int k = 0; k < m; k++) feasible &= x[k] >= 0;
        if (!feasible || res >= best_res) continue;
        best_res = res;
        memset(best_x, 0, sizeof best_x);
        for (int k = 0; k < m; k++) best_x[cols[k]] = x[k];
    }
    double c[NF];
    for (int j = 0; j < NF; j++) c[j] = scale[j] > 0 ? best_x[j] / scale[j] : 0;
    r->coef = (cost_linear_coef){c[0], c[1], c[2], c[3], c[4]};
    r->rms = sqrt((best_res + a.rss) / (double)r->used);
    return 0;
}

const char *const cost_fit_coef_names[5] = {"base_s", "per_prefill_token_s", "per_decode_seq_s",
                                            "per_context_token_s", "per_attention_s"};
const char *const cost_fit_undetermined_why[5] = {"no usable step", "no step computed prompt tokens or draft slots",
                                                  "no step had decodes", "no decode had context",
                                                  "no prompt chunk was computed"};

static json_t *errors_json(const cost_err_summary es[COST_N_CLASSES])
{
    json_t *o = json_object();
    for (int c = 0; c < COST_N_CLASSES; c++)
        json_object_set_new(o, cost_class_name(c),
                            json_pack("{s:I, s:f, s:f, s:f}", "steps", (json_int_t)es[c].n, "median", es[c].median,
                                      "p90", es[c].p90, "max", es[c].max));
    return o;
}

int cost_fit_file(const char *recorded, const char *out, const cost_fit_opts *o, uint32_t tp, cost_fit_report *r,
                  rh_err *e)
{
    memset(r, 0, sizeof *r);
    tr_step *steps;
    size_t n;
    tr_header h;
    if (tr_read_steps(recorded, &steps, &n, &h, e) < 0) return -1;
    r->tp = 1;
    const char *t = tr_header_get(&h, "tp-size");
    unsigned long long v;
    if (t && rh_parse_u64(t, "tp-size", &v, NULL) == 0 && v >= 1 && v <= 65536) r->tp = (uint32_t)v;
    if (tp) r->tp = tp;
    char model[256];
    snprintf(model, sizeof model, "%s", h.model ? h.model : "");
    tr_header_free(&h);
    int rc = 0;
    if (n == 0) rc = rh_fail(e, "%s: no step records to fit (a recorded run from rehearse replay or serve has them)", recorded);
    cost_model *m = NULL;
    if (rc == 0) rc = cost_fit_steps(steps, n, o, &r->fit, e);
    if (rc == 0 && !(m = cost_linear_new(&r->fit.coef))) rc = rh_fail(e, "out of memory");
    if (rc == 0) {
        m->draft_ratio = o->draft_ratio;
        rc = cost_step_errors(m, steps, n, 0, r->errors, e);
    }
    cost_free(m);
    free(steps);
    if (rc < 0) return -1;
    json_t *fit = json_pack("{s:s, s:s, s:I, s:I, s:s, s:f, s:o}", "trace", recorded, "model", model, "steps",
                            (json_int_t)r->fit.used, "skipped", (json_int_t)r->fit.skipped, "weight",
                            o->absolute ? "absolute" : "relative", "rms_residual", r->fit.rms, "error",
                            errors_json(r->errors));
    json_t *undet = json_array();
    for (int i = 0; i < 5; i++)
        if (!r->fit.determined[i]) json_array_append_new(undet, json_string(cost_fit_coef_names[i]));
    json_object_set_new(fit, "undetermined", undet);
    json_t *extra = json_pack("{s:O}", "fit", fit);
    rc = cost_linear_save(out, &r->fit.coef, r->tp, o->draft_ratio, extra, e);
    json_decref(extra);
    if (rc < 0) {
        json_decref(fit);
        return -1;
    }
    r->provenance = fit;
    return 0;
}

void cost_fit_report_free(cost_fit_report *r)
{
    json_decref(r->provenance);
    r->provenance = NULL;
}
