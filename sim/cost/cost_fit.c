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

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
