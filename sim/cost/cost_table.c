/* cost_table.c — the table kind: a step priced operator by operator from
 * grids of times measured by `rehearse calibrate` (see cost_table.h and the
 * `table` section of sim/cost/COST.md for the file).
 *
 * Interpolation. Between two grid points a time is a straight line in the
 * operator's natural coordinate: the axis value itself, except prefill
 * attention along new tokens, whose work grows as the causal pairs a chunk
 * attends (n·c + n(n+1)/2 at context c), so its time is interpolated linearly
 * in pairs. That is exact at grid points and monotone between them. Past the
 * last point (or before the first) the time follows the slope of a
 * least-squares line through the last (first) three points in the same
 * coordinate, continuing from the end point, so a step longer than anything
 * calibrated costs more in proportion, never the last grid value. */
#include "sim/cost/cost_table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost_impl.h"

const cost_table_op_info cost_table_ops[CT_N_OPS] = {
    [CT_EMBEDDING] = {"embedding", false, 1, 1, {"tokens", NULL}, false},
    [CT_ROPE_ANGLES] = {"rope_angles", false, 1, 1, {"tokens", NULL}, false},
    [CT_RMSNORM] = {"rmsnorm", true, 2, 1, {"tokens", NULL}, false},
    [CT_Q_PROJ] = {"q_proj", true, 1, 1, {"tokens", NULL}, false},
    [CT_KV_PROJ] = {"kv_proj", true, 2, 1, {"tokens", NULL}, false},
    [CT_ROPE] = {"rope", true, 1, 1, {"tokens", NULL}, false},
    [CT_KV_WRITE] = {"kv_write", true, 1, 1, {"tokens", NULL}, false},
    [CT_PREFILL_ATTN] = {"prefill_attention", true, 1, 2, {"new_tokens", "context"}, false},
    [CT_DECODE_ATTN] = {"decode_attention", true, 1, 2, {"seqs", "context"}, false},
    [CT_O_PROJ] = {"o_proj", true, 1, 1, {"tokens", NULL}, false},
    [CT_GATE_UP_PROJ] = {"gate_up_proj", true, 2, 1, {"tokens", NULL}, false},
    [CT_SILU_MUL] = {"silu_mul", true, 1, 1, {"tokens", NULL}, false},
    [CT_DOWN_PROJ] = {"down_proj", true, 1, 1, {"tokens", NULL}, false},
    [CT_ALLREDUCE] = {"allreduce", true, 2, 1, {"bytes", NULL}, true},
    [CT_LM_HEAD] = {"lm_head", false, 1, 1, {"rows", NULL}, false},
    [CT_SAMPLE] = {"sample", false, 1, 1, {"rows", NULL}, false},
    [CT_BATCH_PREP] = {"batch_prep", false, 1, 1, {"seqs", NULL}, false},
    [CT_SCHEDULE] = {"schedule", false, 1, 1, {"seqs", NULL}, false},
    [CT_STEP_PREFILL] = {"step_prefill", false, 1, 2, {"new_tokens", "context"}, true},
    [CT_STEP_DECODE] = {"step_decode", false, 1, 2, {"seqs", "context"}, true},
    [CT_LORA] = {"lora", true, 1, 2, {"tokens", "adapters"}, true},
    [CT_LORA_LOAD] = {"lora_load", false, 1, 1, {"adapters", NULL}, true},
    [CT_KV_COPY] = {"kv_copy", false, 1, 1, {"tokens", NULL}, true},
};

/* A grid point needs at least two per axis (a line), and a file of a few
 * megabytes at most is plenty for any calibration. */
#define AXIS_MAX 1024
#define SECONDS_MAX 1e4
#define TREND_POINTS 3

typedef struct ct_grid {
    bool present;
    uint32_t n[2];          /* points per axis (n[1] = 1 for one axis) */
    double *ax[2];
    double *t;              /* [n[0]][n[1]] seconds per call */
} ct_grid;

typedef struct cost_table {
    cost_model base;
    uint32_t tp, layers, hidden, act_bytes;
    uint32_t lora_rank;     /* the rank CT_LORA and CT_LORA_LOAD were measured at (0: not measured) */
    bool schedule_in_step;
    ct_grid ops[CT_N_OPS];
} cost_table;

static const cost_ops table_ops;

static const cost_table *as_table(const cost_model *m)
{
    return m && m->ops == &table_ops ? (const cost_table *)m : NULL;
}

/* ---- interpolation ------------------------------------------------------ */

/* The coordinate in which an axis is linear: the value itself, or for prefill
 * attention's new-token axis the causal pairs of a chunk at context c. */
static double coord(double x, int pairs, double c)
{
    return pairs ? x * c + x * (x + 1) / 2 : x;
}

/* Slope of the least-squares line through points [lo, hi) of (u, y). */
static double ls_slope(const double *u, const double *y, uint32_t lo, uint32_t hi)
{
    double n = hi - lo, su = 0, sy = 0;
    for (uint32_t i = lo; i < hi; i++) su += u[i], sy += y[i];
    double mu = su / n, my = sy / n, num = 0, den = 0;
    for (uint32_t i = lo; i < hi; i++) {
        num += (u[i] - mu) * (y[i] - my);
        den += (u[i] - mu) * (u[i] - mu);
    }
    return den > 0 ? num / den : 0;
}

/* The slope to extrapolate with at one end: the local trend when it rises,
 * else the whole axis's, else the end point's ratio to its coordinate
 * (proportional growth) — measurement noise can flatten the last few
 * points, but a larger batch never costs nothing more. */
static double trend(const double *u, const double *y, uint32_t n, int upper)
{
    uint32_t k = n < TREND_POINTS ? n : TREND_POINTS;
    double s = upper ? ls_slope(u, y, n - k, n) : ls_slope(u, y, 0, k);
    if (s > 0) return s;
    s = ls_slope(u, y, 0, n);
    if (s > 0) return s;
    uint32_t end = upper ? n - 1 : 0;
    return u[end] > 0 && y[end] > 0 ? y[end] / u[end] : 0;
}

/* Piecewise-linear y(x) over ascending xs, in the coordinate `coord`. */
static double interp1(const double *xs, const double *ys, uint32_t n, double x, int pairs, double c)
{
    if (x >= xs[0] && x <= xs[n - 1]) {
        uint32_t lo = 0, hi = n - 1;
        while (hi - lo > 1) {
            uint32_t mid = (lo + hi) / 2;
            if (xs[mid] <= x) lo = mid;
            else hi = mid;
        }
        double u0 = coord(xs[lo], pairs, c), u1 = coord(xs[hi], pairs, c), u = coord(x, pairs, c);
        double f = u1 > u0 ? (u - u0) / (u1 - u0) : 0;
        return ys[lo] + f * (ys[hi] - ys[lo]);
    }
    /* Outside: the trend through the end points in the same coordinate. */
    double u[AXIS_MAX];
    for (uint32_t i = 0; i < n; i++) u[i] = coord(xs[i], pairs, c);
    int upper = x > xs[n - 1];
    uint32_t end = upper ? n - 1 : 0;
    double t = ys[end] + trend(u, ys, n, upper) * (coord(x, pairs, c) - u[end]);
    return t > 0 ? t : 0;
}

static double grid_eval(const ct_grid *g, double x, double y, int pairs_axis0)
{
    if (!g->present) return 0;
    if (g->n[1] == 1 && !g->ax[1]) return interp1(g->ax[0], g->t, g->n[0], x, 0, 0);
    /* Along the second axis at every first-axis row, then along the first. */
    double col[AXIS_MAX];
    for (uint32_t i = 0; i < g->n[0]; i++) col[i] = interp1(g->ax[1], g->t + (size_t)i * g->n[1], g->n[1], y, 0, 0);
    return interp1(g->ax[0], col, g->n[0], x, pairs_axis0, y);
}

static double op_time(const cost_table *t, int op, double x, double y)
{
    return grid_eval(&t->ops[op], x, y, op == CT_PREFILL_ATTN);
}

double cost_table_op_time(const cost_model *m, int op, double x, double y)
{
    const cost_table *t = as_table(m);
    if (!t || op < 0 || op >= CT_N_OPS) return NAN;
    return op_time(t, op, x, y);
}

uint32_t cost_table_layers(const cost_model *m)
{
    const cost_table *t = as_table(m);
    return t ? t->layers : 0;
}

/* ---- a step --------------------------------------------------------------- */

/* Causal (query, key) pairs of the batch's prefill chunks. Known exactly for
 * a batch built from sequences; from a step record only Σn, Σc and
 * Σn(c+n) are known, and pairs = Σn(c+n) − (Σn² − Σn)/2. Σn² is taken at its
 * tightest lower bound max(T²/P, Σn(c+n) − T·Σc): exact for one chunk, for
 * equal chunks and for chunks without context (a fresh prompt, the common
 * case), so the error stays with the rare step mixing unequal chunks that
 * both have context. */
static double prefill_pairs(const cost_batch *b)
{
    if (b->prefill_causal) return (double)b->prefill_causal;
    double T = b->prefill_tokens, P = b->prefill_seqs ? b->prefill_seqs : 1, C = (double)b->prefill_context;
    double A = b->prefill_attn ? (double)b->prefill_attn : T * C / P + T * T / P;
    double sq = fmax(T * T / P, A - T * C);
    return fmax(A - (sq - T) / 2, T);
}

/* Seconds of every operator for the batch, summed over layers and calls. */
static void table_terms(const cost_table *t, const cost_batch *b, double out[CT_N_OPS])
{
    memset(out, 0, CT_N_OPS * sizeof out[0]);
    double T = (double)b->prefill_tokens + b->decode_tokens;
    if (T <= 0) return;
    static const int row_ops[] = {CT_RMSNORM, CT_Q_PROJ, CT_KV_PROJ, CT_ROPE, CT_KV_WRITE, CT_O_PROJ,
                                  CT_GATE_UP_PROJ, CT_SILU_MUL, CT_DOWN_PROJ, CT_EMBEDDING, CT_ROPE_ANGLES};
    for (size_t i = 0; i < sizeof row_ops / sizeof row_ops[0]; i++) out[row_ops[i]] = op_time(t, row_ops[i], T, 0);
    if (b->prefill_tokens) {
        /* P equal chunks carrying the batch's causal pairs: the per-chunk
         * time at n̄ tokens and the context that gives those pairs. */
        double P = b->prefill_seqs ? b->prefill_seqs : 1, n = b->prefill_tokens / P;
        double c = (prefill_pairs(b) / P - n * (n + 1) / 2) / n;
        out[CT_PREFILL_ATTN] = P * op_time(t, CT_PREFILL_ATTN, n, c > 0 ? c : 0);
    }
    if (b->decode_seqs) {
        /* A decode verifying k drafts runs 1 + k query rows over about the
         * same context. */
        double rows_per_seq = b->decode_tokens > b->decode_seqs ? (double)b->decode_tokens / b->decode_seqs : 1;
        out[CT_DECODE_ATTN] = rows_per_seq * op_time(t, CT_DECODE_ATTN, b->decode_seqs, (double)b->decode_context);
    }
    if (t->tp > 1) out[CT_ALLREDUCE] = op_time(t, CT_ALLREDUCE, T * t->hidden * t->act_bytes, 0);
    /* Every decode row and one position per prefill chunk want logits and
     * a sampled token. */
    double logit_rows = (double)b->decode_tokens + b->prefill_seqs;
    out[CT_LM_HEAD] = op_time(t, CT_LM_HEAD, logit_rows, 0);
    out[CT_SAMPLE] = op_time(t, CT_SAMPLE, logit_rows, 0);
    double seqs = (double)b->prefill_seqs + b->decode_seqs;
    out[CT_BATCH_PREP] = op_time(t, CT_BATCH_PREP, seqs, 0);
    out[CT_SCHEDULE] = t->schedule_in_step ? op_time(t, CT_SCHEDULE, seqs, 0) : 0;
    for (int op = 0; op < CT_STEP_PREFILL; op++)
        out[op] *= cost_table_ops[op].calls * (cost_table_ops[op].per_layer ? t->layers : 1);
    /* LoRA: every layer's adapters at the rank served; GEMMs of rank r scale
     * with r, so another rank is priced in proportion */
    const cost_serving *sv = b->serving;
    if (sv && sv->lora_rank && t->lora_rank && t->ops[CT_LORA].present) {
        double ratio = (double)sv->lora_rank / t->lora_rank;
        if (b->lora_tokens)
            out[CT_LORA] = t->layers * ratio * op_time(t, CT_LORA, b->lora_tokens, b->lora_adapters ? b->lora_adapters : 1);
        if (b->lora_loads && t->ops[CT_LORA_LOAD].present) out[CT_LORA_LOAD] = ratio * op_time(t, CT_LORA_LOAD, b->lora_loads, 0);
    }
    /* the host tier's copies: the engine makes every one before the forward */
    double copied = (double)b->load_tokens + b->writeback_tokens + b->backup_tokens;
    if (copied > 0 && t->ops[CT_KV_COPY].present) out[CT_KV_COPY] = op_time(t, CT_KV_COPY, copied, 0);
}

/* The forward's share of the kernel terms: all but sampling and scheduling,
 * which run outside runner_forward (and outside the whole-step grids). */
static double forward_sum(const double terms[CT_N_OPS])
{
    double s = 0;
    for (int op = 0; op < CT_STEP_PREFILL; op++)
        if (op != CT_SAMPLE && op != CT_SCHEDULE) s += terms[op];
    return s;
}

/* whole / kernel sum for one class at a shape held inside the measured
 * grid (past it the ratio at the edge holds: both sides extrapolate, their
 * ratio would not). 1 when the grid is absent or says nothing. */
static double whole_ratio(const cost_table *t, int op, double x, double y)
{
    const ct_grid *g = &t->ops[op];
    if (!g->present) return 1;
    x = fmin(fmax(x, g->ax[0][0]), g->ax[0][g->n[0] - 1]);
    y = fmin(fmax(y, g->ax[1][0]), g->ax[1][g->n[1] - 1]);
    cost_batch b = {0};   /* the grid's shape, as aggregates */
    uint64_t c = (uint64_t)round(y);
    if (op == CT_STEP_PREFILL) {
        uint32_t n = (uint32_t)fmax(1, round(x));
        b.prefill_tokens = n, b.prefill_seqs = 1, b.prefill_context = c;
        b.prefill_attn = (uint64_t)n * (c + n);
        b.prefill_causal = (uint64_t)n * c + (uint64_t)n * (n + 1) / 2;
    } else {
        uint32_t n = (uint32_t)fmax(1, round(x));
        b.decode_seqs = b.decode_tokens = n, b.decode_context = (uint64_t)n * c;
    }
    double terms[CT_N_OPS];
    table_terms(t, &b, terms);
    double kern = forward_sum(terms), whole = grid_eval(g, x, y, 0);
    return kern > 0 && whole > 0 ? whole / kern : 1;
}

/* The whole-step correction of a batch: terms[CT_STEP_PREFILL] and
 * terms[CT_STEP_DECODE] get what each class's ratio adds to (or takes from)
 * its share of the forward's kernel sum; a mixed batch's shares are its
 * prefill and decode parts priced alone. */
static void whole_step_terms(const cost_table *t, const cost_batch *b, double terms[CT_N_OPS])
{
    if (!t->ops[CT_STEP_PREFILL].present && !t->ops[CT_STEP_DECODE].present) return;
    double fwd = forward_sum(terms);
    if (!(fwd > 0)) return;
    double rp = 1, rd = 1, share_p = 0, share_d = 0;
    if (b->prefill_tokens) {
        double P = b->prefill_seqs ? b->prefill_seqs : 1;
        rp = whole_ratio(t, CT_STEP_PREFILL, b->prefill_tokens, (double)b->prefill_context / P);
    }
    if (b->decode_seqs) rd = whole_ratio(t, CT_STEP_DECODE, b->decode_seqs, (double)b->decode_context / b->decode_seqs);
    if (b->prefill_tokens && b->decode_seqs) {
        cost_batch p = *b, d = *b;
        p.seqs = d.seqs = NULL;
        p.n = d.n = 0;
        p.decode_seqs = p.decode_tokens = 0, p.decode_context = 0;
        d.prefill_tokens = d.prefill_seqs = 0, d.prefill_context = d.prefill_attn = d.prefill_causal = 0;
        double tp_[CT_N_OPS], td[CT_N_OPS];
        table_terms(t, &p, tp_);
        table_terms(t, &d, td);
        double a = forward_sum(tp_), c = forward_sum(td);
        share_p = a + c > 0 ? fwd * a / (a + c) : 0;
        share_d = fwd - share_p;
    } else if (b->prefill_tokens) {
        share_p = fwd;
    } else {
        share_d = fwd;
    }
    terms[CT_STEP_PREFILL] = share_p * (rp - 1);
    terms[CT_STEP_DECODE] = share_d * (rd - 1);
}

static double table_step(const cost_model *m, const cost_batch *b)
{
    const cost_table *t = (const cost_table *)m;
    if (b->tp && b->tp != t->tp) return NAN;
    double terms[CT_N_OPS], sum = 0;
    table_terms(t, b, terms);
    whole_step_terms(t, b, terms);
    for (int op = 0; op < CT_N_OPS; op++) sum += terms[op];
    return sum;
}

static int table_breakdown(const cost_model *m, const cost_batch *b, cost_term *out, int max)
{
    const cost_table *t = (const cost_table *)m;
    double terms[CT_N_OPS];
    table_terms(t, b, terms);
    whole_step_terms(t, b, terms);
    int n = 0;
    for (int op = 0; op < CT_N_OPS && n < max; op++) {
        if (!t->ops[op].present) continue;
        if (op == CT_ALLREDUCE && t->tp == 1) continue;
        if (op == CT_SCHEDULE && !t->schedule_in_step) continue;
        double v = (b->tp && b->tp != t->tp) ? NAN : terms[op];
        out[n++] = (cost_term){cost_table_ops[op].name, v, 0, 0, ""};
    }
    return n;
}

static int table_check_tp(const cost_model *m, uint32_t tp, rh_err *e)
{
    const cost_table *t = (const cost_table *)m;
    if (tp == 0 || tp == t->tp) return 0;
    return rh_fail(e, "%s: field 'tp': the table was measured at tensor-parallel size %u, not %u "
                      "(run rehearse calibrate --tp %u)",
                   m->path[0] ? m->path : "table cost model", t->tp, tp, tp);
}

static void table_free(cost_model *m)
{
    cost_table *t = (cost_table *)m;
    for (int op = 0; op < CT_N_OPS; op++) {
        free(t->ops[op].ax[0]);
        free(t->ops[op].ax[1]);
        free(t->ops[op].t);
    }
    free(t);
}

/* Interpolated over the aggregates: the same batch shape, the same price. */
static bool table_by_aggregates(const cost_model *m, uint32_t tp, const cost_serving *sv)
{
    (void)m, (void)tp, (void)sv;
    return true;
}

/* LoRA and the host tier are priced when the table measured them
 * (calibrate --lora-rank; kv_copy). */
static int table_check_serving(const cost_model *m, uint32_t tp, const cost_serving *s, rh_err *e)
{
    const cost_table *t = (const cost_table *)m;
    cost_serving plain = *s;
    plain.lora_rank = 0;
    plain.hicache = false;
    if (s->hicache && !t->ops[CT_KV_COPY].present)
        return rh_fail(e, "%s: this table measured no kv_copy, the host tier's page copies (calibrate again: "
                          "rehearse calibrate measures them)", m->path[0] ? m->path : "table cost model");
    if (cost_serving_check_default(m, tp, &plain, e) < 0) return -1;
    if (s->lora_rank && !(t->lora_rank && t->ops[CT_LORA].present))
        return rh_fail(e, "%s: this table measured no LoRA kernels (rehearse calibrate --lora-rank R measures "
                          "them; --max-lora-rank 0 simulates the adapter cap with their work free)",
                       m->path[0] ? m->path : "table cost model");
    return 0;
}

static const cost_ops table_ops = {
    .kind = "table",
    .check_serving = table_check_serving,
    .step_time = table_step,
    .draft_time = NULL,
    .check_tp = table_check_tp,
    .breakdown = table_breakdown,
    .free = table_free,
    .by_aggregates = table_by_aggregates,
};

/* ---- the file --------------------------------------------------------- */

static int parse_axis(json_t *op, const char *at, const char *name, ct_grid *g, int k, const cost_src *src,
                      rh_err *e)
{
    json_t *a = json_object_get(op, name);
    if (!a) return cj_fail(src, at, name, e, "missing (the axis: an ascending array of numbers)");
    if (!json_is_array(a)) return cj_fail(src, at, name, e, "must be an ascending array of numbers");
    size_t n = json_array_size(a);
    if (n < 2 || n > AXIS_MAX)
        return cj_fail(src, at, name, e, "has %zu points; an axis needs 2 to %d", n, AXIS_MAX);
    if (!(g->ax[k] = malloc(n * sizeof *g->ax[k]))) return rh_fail(e, "%s: out of memory", src->label);
    g->n[k] = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        char key[64];
        snprintf(key, sizeof key, "%s[%zu]", name, i);
        if (!json_is_number(v)) return cj_fail(src, at, key, e, "must be a number");
        double x = json_number_value(v);
        if (!isfinite(x) || x < 0 || x > 1e15) return cj_fail(src, at, key, e, "%g is out of range [0, 1e15]", x);
        if (i && x <= g->ax[k][i - 1])
            return cj_fail(src, at, key, e, "%g does not follow %g: an axis must be strictly ascending", x,
                           g->ax[k][i - 1]);
        g->ax[k][i] = x;
    }
    return 0;
}

/* One time of the grid; null or absent is a hole in the grid. */
static int parse_time(json_t *v, const char *at, const char *key, const char *where, double *out,
                      const cost_src *src, rh_err *e)
{
    if (!v || json_is_null(v))
        return cj_fail(src, at, key, e, "the grid has a hole at %s: every grid point needs a time", where);
    if (!json_is_number(v)) return cj_fail(src, at, key, e, "must be a number of seconds");
    double x = json_number_value(v);
    if (!isfinite(x) || x < 0 || x > SECONDS_MAX)
        return cj_fail(src, at, key, e, "%g is out of range [0, %g] seconds", x, SECONDS_MAX);
    *out = x;
    return 0;
}

static int parse_seconds(json_t *op, const char *at, const cost_table_op_info *info, ct_grid *g, const cost_src *src,
                         rh_err *e)
{
    json_t *s = json_object_get(op, "seconds");
    if (!s) return cj_fail(src, at, "seconds", e, "missing (the measured times of the grid)");
    if (!json_is_array(s)) return cj_fail(src, at, "seconds", e, "must be an array");
    if (json_array_size(s) != g->n[0])
        return cj_fail(src, at, "seconds", e, "has %zu entries but axis '%s' has %u points", json_array_size(s),
                       info->axes[0], g->n[0]);
    if (!(g->t = malloc((size_t)g->n[0] * g->n[1] * sizeof *g->t)))
        return rh_fail(e, "%s: out of memory", src->label);
    for (uint32_t i = 0; i < g->n[0]; i++) {
        json_t *row = json_array_get(s, i);
        char key[64], where[128];
        if (info->dims == 1) {
            snprintf(key, sizeof key, "seconds[%u]", i);
            snprintf(where, sizeof where, "%s = %g", info->axes[0], g->ax[0][i]);
            if (parse_time(row, at, key, where, &g->t[i], src, e) < 0) return -1;
            continue;
        }
        snprintf(key, sizeof key, "seconds[%u]", i);
        if (!json_is_array(row)) {
            snprintf(where, sizeof where, "%s = %g", info->axes[0], g->ax[0][i]);
            if (!row || json_is_null(row)) return parse_time(row, at, key, where, &g->t[0], src, e);
            return cj_fail(src, at, key, e, "must be an array over axis '%s'", info->axes[1]);
        }
        if (json_array_size(row) != g->n[1])
            return cj_fail(src, at, key, e, "has %zu entries but axis '%s' has %u points", json_array_size(row),
                           info->axes[1], g->n[1]);
        for (uint32_t j = 0; j < g->n[1]; j++) {
            snprintf(key, sizeof key, "seconds[%u][%u]", i, j);
            snprintf(where, sizeof where, "%s = %g, %s = %g", info->axes[0], g->ax[0][i], info->axes[1],
                     g->ax[1][j]);
            if (parse_time(json_array_get(row, j), at, key, where, &g->t[(size_t)i * g->n[1] + j], src, e) < 0)
                return -1;
        }
    }
    return 0;
}

static int parse_op(json_t *op, int k, ct_grid *g, const cost_src *src, rh_err *e)
{
    const cost_table_op_info *info = &cost_table_ops[k];
    char at[96];
    snprintf(at, sizeof at, "operators.%s", info->name);
    if (!json_is_object(op))
        return cj_fail(src, "operators", info->name, e, "must be an object with its axes and \"seconds\"");
    const char *allowed[] = {info->axes[0], info->dims == 2 ? info->axes[1] : "seconds", "seconds", "spread", NULL};
    if (cj_only_keys(op, at, allowed, src, e) < 0) return -1;
    if (parse_axis(op, at, info->axes[0], g, 0, src, e) < 0) return -1;
    g->n[1] = 1;
    if (info->dims == 2 && parse_axis(op, at, info->axes[1], g, 1, src, e) < 0) return -1;
    json_t *spread = json_object_get(op, "spread");
    if (spread && !json_is_array(spread))
        return cj_fail(src, at, "spread", e, "must be an array (relative spread of each point)");
    if (parse_seconds(op, at, info, g, src, e) < 0) return -1;
    g->present = true;
    return 0;
}

static int parse_operators(json_t *root, cost_table *t, const cost_src *src, rh_err *e)
{
    json_t *ops = json_object_get(root, "operators");
    if (!ops) return cj_fail(src, "", "operators", e, "missing (the measured grids, written by rehearse calibrate)");
    if (!json_is_object(ops)) return cj_fail(src, "", "operators", e, "must be an object of operator grids");
    const char *key;
    json_t *v;
    json_object_foreach(ops, key, v) {
        int k = -1;
        for (int i = 0; i < CT_N_OPS && k < 0; i++)
            if (!strcmp(cost_table_ops[i].name, key)) k = i;
        if (k < 0) return cj_fail(src, "operators", key, e, "unknown operator (a typo?)");
        if (parse_op(v, k, &t->ops[k], src, e) < 0) return -1;
    }
    for (int i = 0; i < CT_N_OPS; i++)
        if (!t->ops[i].present && !cost_table_ops[i].optional)
            return cj_fail(src, "operators", cost_table_ops[i].name, e, "missing (every operator of the forward "
                           "pass needs a grid; calibrate again)");
    return 0;
}

static int parse_model(json_t *root, cost_table *t, const cost_src *src, rh_err *e)
{
    static const char *const allowed[] = {"name", "num_hidden_layers", "hidden_size", "intermediate_size",
                                          "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                                          "max_position_embeddings", "qkv_bias", NULL};
    json_t *m = json_object_get(root, "model");
    if (!m) return cj_fail(src, "", "model", e, "missing (the shape the table was measured for)");
    if (!json_is_object(m)) return cj_fail(src, "", "model", e, "must be an object");
    const char *name;
    uint32_t v;
    int b;
    if (cj_only_keys(m, "model", allowed, src, e) < 0 || cj_string(m, "model", "name", 0, "", &name, src, e) < 0 ||
        cj_uint(m, "model", "num_hidden_layers", 1, 0, 1, 100000, &t->layers, src, e) < 0 ||
        cj_uint(m, "model", "hidden_size", 1, 0, 1, 1u << 20, &t->hidden, src, e) < 0 ||
        cj_bool(m, "model", "qkv_bias", 0, &b, src, e) < 0)
        return -1;
    static const char *const sizes[] = {"intermediate_size", "num_attention_heads", "num_key_value_heads",
                                        "head_dim", "vocab_size", "max_position_embeddings"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (cj_uint(m, "model", sizes[i], 0, 1, 1, 1u << 30, &v, src, e) < 0) return -1;
    return 0;
}

cost_model *cost_table_parse(json_t *root, const cost_src *src, rh_err *e)
{
    static const char *const allowed[] = {"kind", "version", "backend", "tp", "page_size", "threads",
                                          "activation_bytes", "model", "sampling", "schedule_in_step",
                                          "draft_ratio", "calibration", "operators", "comment", "lora_rank", NULL};
    cost_table *t = calloc(1, sizeof *t);
    if (!t || cost_model_init(&t->base, &table_ops, src) < 0) {
        if (t) free(t->base.path);
        free(t);
        rh_fail(e, "%s: out of memory", src->label);
        return NULL;
    }
    const char *backend, *sampling;
    uint32_t u;
    int sched;
    json_t *cal = json_object_get(root, "calibration");
    if (cj_only_keys(root, "", allowed, src, e) < 0 || cj_string(root, "", "backend", 1, NULL, &backend, src, e) < 0 ||
        cj_uint(root, "", "tp", 0, 1, 1, 4096, &t->tp, src, e) < 0 ||
        cj_uint(root, "", "page_size", 0, 16, 1, 1u << 16, &u, src, e) < 0 ||
        cj_uint(root, "", "threads", 0, 1, 0, 4096, &u, src, e) < 0 ||
        cj_uint(root, "", "activation_bytes", 0, 4, 1, 8, &t->act_bytes, src, e) < 0 ||
        cj_string(root, "", "sampling", 0, "greedy", &sampling, src, e) < 0 ||
        cj_bool(root, "", "schedule_in_step", 1, &sched, src, e) < 0 ||
        cj_number(root, "", "draft_ratio", 0, COST_DRAFT_RATIO_DEFAULT, 0, 100, &t->base.draft_ratio, src, e) < 0 ||
        cj_uint(root, "", "lora_rank", 0, 0, 0, 4096, &t->lora_rank, src, e) < 0)
        goto fail;
    if (cal && !json_is_object(cal)) {
        cj_fail(src, "", "calibration", e, "must be an object (how the table was measured)");
        goto fail;
    }
    t->schedule_in_step = sched;
    if (parse_model(root, t, src, e) < 0 || parse_operators(root, t, src, e) < 0) goto fail;
    if (t->ops[CT_LORA].present && !t->lora_rank) {
        cj_fail(src, "", "lora_rank", e, "is needed with the lora operator: the rank it was measured at");
        goto fail;
    }
    return &t->base;
fail:
    free(t->base.path);
    table_free(&t->base);
    return NULL;
}
