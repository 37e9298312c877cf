/* calibrate.c — the grids, the walk over the operators, and the table file.
 *
 * Grids follow where step times bend. Token counts are dense where decode
 * batches live (every count to 16, where GEMMs switch kernels and blockings)
 * and a quarter octave apart above. Attention is linear in the pairs it
 * attends, so its grids are powers of two in new tokens and sequences and a
 * few contexts, each up to about half the model's context length (the table
 * extrapolates along pairs past that). The summed decode context goes to
 * 128k tokens, far enough past the last-level cache that the trend the table
 * extends is the memory-bound one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim/calibrate/internal.h"
#include "sim/cost/cost_table.h"
#include "util/json_file.h"

#define AX_MAX 128
#define DECODE_CONTEXT_MAX 131072u
#define KV_BENCH_BYTES (1ull << 30)

void calib_opts_default(calib_opts *o)
{
    memset(o, 0, sizeof *o);
    o->tp = 1;
    o->page_size = 16;
    o->max_tokens = 8192;
    o->max_seqs = 256;
    o->sampling = (kern_sampling){0.0f, 1.0f, 0};
    calib_rule_default(&o->rule);
    o->seed = 1;
    o->progress = true;
}

typedef struct axis {
    uint32_t n;
    double v[AX_MAX];
} axis;

static void ax_add(axis *a, double v)
{
    if (a->n < AX_MAX && (a->n == 0 || v > a->v[a->n - 1])) a->v[a->n++] = v;
}

/* Powers of `step` from lo to hi, hi always included (and at least lo, hi). */
static void ax_geometric(axis *a, double lo, double hi, double step)
{
    for (double v = lo; v < hi; v *= step) ax_add(a, round(v));
    ax_add(a, hi);
    if (a->n < 2) ax_add(a, a->v[0] * 2 + 1);
}

static void ax_list(axis *a, const double *v, size_t n, double cap)
{
    for (size_t i = 0; i < n; i++) ax_add(a, v[i] < cap ? v[i] : cap);
    if (a->n < 2) ax_add(a, a->v[0] + 1);
}

typedef struct plan {
    axis ax[CT_N_OPS][2];
    bool skip[CT_N_OPS];
} plan;

static void make_plan(const calib_ctx *x, plan *p)
{
    const calib_opts *o = x->o;
    uint32_t ctx = o->max_context ? o->max_context : x->c->max_position;
    memset(p, 0, sizeof *p);
    axis tokens = {0}, newt = {0}, pctx = {0}, seqs = {0}, dctx = {0}, rows = {0}, srows = {0}, over = {0}, bytes = {0};
    if (o->quick) {
        static const double t[] = {1, 2, 4, 16, 64, 256}, n[] = {1, 16, 64}, c[] = {0, 64}, b[] = {1, 4, 16},
                            s[] = {0, 512, 4096}, r[] = {1, 8}, ov[] = {1, 8}, by[] = {1024, 16384, 262144};
        ax_list(&tokens, t, 6, o->max_tokens);
        ax_list(&newt, n, 3, o->max_tokens);
        ax_list(&pctx, c, 2, ctx);
        ax_list(&seqs, b, 3, o->max_seqs);
        ax_list(&dctx, s, 3, DECODE_CONTEXT_MAX);
        ax_list(&rows, r, 2, o->max_seqs);
        ax_list(&srows, r, 2, o->max_seqs);
        ax_list(&over, ov, 2, o->max_seqs);
        ax_list(&bytes, by, 3, 1e15);
    } else {
        for (uint32_t t = 1; t <= 16 && t < o->max_tokens; t++) ax_add(&tokens, t);
        ax_geometric(&tokens, 16, o->max_tokens, pow(2, 0.25));
        uint32_t half = ctx / 2 > 16 ? ctx / 2 : 16;
        ax_geometric(&newt, 1, o->max_tokens < half ? o->max_tokens : half, 2);
        const double c[] = {0, half / 8.0, half / 2.0, half};
        ax_list(&pctx, c, 4, half);
        ax_geometric(&seqs, 1, o->max_seqs, 2);
        /* The decode pools: summed context plus a page per sequence, K and V. */
        double per_token = (double)x->s.kvd * sizeof(float) * 2;
        double smax = fmin(DECODE_CONTEXT_MAX, (double)o->max_seqs * ctx);
        smax = fmin(smax, KV_BENCH_BYTES / per_token - 2.0 * o->max_seqs * o->page_size);
        ax_add(&dctx, 0);
        ax_geometric(&dctx, 1024, smax > 2048 ? smax : 2048, 2);
        ax_geometric(&rows, 1, o->max_seqs, 2);
        const double sr[] = {1, 4, 16, 64, 256};
        ax_list(&srows, sr, 5, o->max_seqs);
        ax_geometric(&over, 1, o->max_seqs, 4);
        ax_geometric(&bytes, 1024, 1 << 28, 4);
    }
    for (int op = 0; op < CT_N_OPS; op++) p->ax[op][0] = tokens;
    p->ax[CT_PREFILL_ATTN][0] = newt, p->ax[CT_PREFILL_ATTN][1] = pctx;
    p->ax[CT_DECODE_ATTN][0] = seqs, p->ax[CT_DECODE_ATTN][1] = dctx;
    p->ax[CT_LM_HEAD][0] = rows;
    p->ax[CT_SAMPLE][0] = srows;
    p->ax[CT_BATCH_PREP][0] = over;
    p->ax[CT_SCHEDULE][0] = over;
    p->ax[CT_ALLREDUCE][0] = bytes;
    p->skip[CT_ALLREDUCE] = o->tp == 1 || !x->b->allreduce;
    /* Whole forwards (steps.c): the shapes recordings hold most, few of them
     * (each point is a whole forward pass), the decodes' KV within the
     * bench's memory. */
    axis sn = {0}, sc = {0}, dn = {0}, dc = {0};
    uint32_t half = ctx / 2 > 16 ? ctx / 2 : 16;
    double kv_token = (double)x->s.kvd * sizeof(float) * 2 * x->s.layers;
    if (o->quick) {
        static const double n[] = {16, 64}, c0[] = {0, 64}, s_[] = {1, 4}, c1[] = {16, 64};
        ax_list(&sn, n, 2, o->max_tokens);
        ax_list(&sc, c0, 2, half);
        ax_list(&dn, s_, 2, o->max_seqs);
        ax_list(&dc, c1, 2, half);
    } else {
        /* A chunk and its context, or a decode's context spread up to twice
         * its mean, stay inside the model's context length. */
        static const double n[] = {16, 128, 512, 2048}, s_[] = {1, 4, 16, 64};
        ax_list(&sn, n, 4, fmin(fmin(o->max_tokens, 2048), half));
        const double c0[] = {0, half / 4.0, half};
        ax_list(&sc, c0, 3, half);
        ax_list(&dn, s_, 4, o->max_seqs);
        double cmax = fmin(half - 16, KV_BENCH_BYTES / (kv_token * dn.v[dn.n - 1]));
        const double c1[] = {16, cmax / 8, cmax / 2, cmax};
        ax_list(&dc, c1, 4, cmax > 32 ? cmax : 32);
    }
    p->ax[CT_STEP_PREFILL][0] = sn, p->ax[CT_STEP_PREFILL][1] = sc;
    p->ax[CT_STEP_DECODE][0] = dn, p->ax[CT_STEP_DECODE][1] = dc;
    p->skip[CT_STEP_PREFILL] = p->skip[CT_STEP_DECODE] = o->tp > 1 || !o->whole_steps;
    /* LoRA: tokens by factors of 4 (the GEMMs' rank-wide side is small, so
     * time grows about linearly between), adapters as batches hold them */
    axis lt = {0}, la = {0}, ll = {0};
    static const double adapters[] = {1, 2, 4, 8}, loads[] = {1, 2, 4};
    if (o->quick) {
        static const double t[] = {1, 16, 256};
        ax_list(&lt, t, 3, o->max_tokens);
        ax_list(&la, adapters, 2, o->max_seqs);
        ax_list(&ll, loads, 2, 1e9);
    } else {
        ax_geometric(&lt, 1, o->max_tokens, 4);
        ax_list(&la, adapters, 4, o->max_seqs);
        ax_list(&ll, loads, 3, 1e9);
    }
    p->ax[CT_LORA][0] = lt, p->ax[CT_LORA][1] = la;
    p->ax[CT_LORA_LOAD][0] = ll;
    p->skip[CT_LORA] = p->skip[CT_LORA_LOAD] = !o->lora_rank || o->tp > 1;
    /* the host tier's copies: tokens by factors of 4, whole pages */
    axis kc = {0};
    ax_geometric(&kc, o->page_size, o->quick ? 4096 : 16384, o->quick ? 16 : 4);
    p->ax[CT_KV_COPY][0] = kc;
    p->skip[CT_KV_COPY] = o->tp > 1;
}

/* The shapes of one rank; fails on a tp that does not split the model. */
static int make_shape(const model_config *c, const calib_opts *o, calib_shape *s, rh_err *e)
{
    uint32_t tp = o->tp;
    if (c->n_heads % tp)
        return rh_fail(e, "--tp %u: the %u attention heads of %s do not split over %u ranks", tp, c->n_heads, c->name, tp);
    if (c->intermediate_size % tp)
        return rh_fail(e, "--tp %u: the MLP width %u of %s does not split over %u ranks", tp, c->intermediate_size,
                       c->name, tp);
    if (c->n_kv_heads >= tp && c->n_kv_heads % tp)
        return rh_fail(e, "--tp %u: the %u KV heads of %s do not split over %u ranks", tp, c->n_kv_heads, c->name, tp);
    *s = (calib_shape){
        .layers = c->n_layers,
        .d = c->hidden_size,
        .f = c->intermediate_size / tp,
        .vocab = c->vocab_size,
        .n_heads = c->n_heads / tp,
        /* fewer KV heads than ranks: each rank keeps a copy of one */
        .n_kv = c->n_kv_heads >= tp ? c->n_kv_heads / tp : 1,
        .hd = c->head_dim,
        .page_size = o->page_size,
        .window = c->sliding_window,
        .eps = c->rms_norm_eps,
        .scale = 1.0f / sqrtf((float)c->head_dim),
        .qkv_bias = c->qkv_bias,
        .o_bias = c->o_bias,
        .mlp_bias = c->mlp_bias,
    };
    s->qd = s->n_heads * s->hd;
    s->kvd = s->n_kv * s->hd;
    return 0;
}

static json_t *axis_json(const axis *a)
{
    json_t *arr = json_array();
    for (uint32_t i = 0; i < a->n; i++) json_array_append_new(arr, json_integer((json_int_t)a->v[i]));
    return arr;
}

static json_t *values_json(const double *v, uint32_t n0, uint32_t n1, int two_d)
{
    json_t *arr = json_array();
    for (uint32_t i = 0; i < n0; i++) {
        if (!two_d) {
            json_array_append_new(arr, json_real(v[i]));
            continue;
        }
        json_t *row = json_array();
        for (uint32_t j = 0; j < n1; j++) json_array_append_new(row, json_real(v[(size_t)i * n1 + j]));
        json_array_append_new(arr, row);
    }
    return arr;
}

static int run_op(calib_ctx *x, int op, calib_grid *g, rh_err *e)
{
    switch (op) {
    case CT_Q_PROJ:
    case CT_KV_PROJ:
    case CT_O_PROJ:
    case CT_GATE_UP_PROJ:
    case CT_DOWN_PROJ: return calib_bench_gemm(x, op, g, e);
    case CT_PREFILL_ATTN: return calib_bench_prefill_attention(x, g, e);
    case CT_DECODE_ATTN: return calib_bench_decode_attention(x, g, e);
    case CT_LM_HEAD: return calib_bench_lm_head(x, g, e);
    case CT_SAMPLE: return calib_bench_sample(x, g, e);
    case CT_ALLREDUCE: return calib_bench_allreduce(x, g, e);
    case CT_BATCH_PREP: return calib_bench_batch_prep(x, g, e);
    case CT_SCHEDULE:
        if (x->o->skip_schedule) return 0;
        return calib_bench_schedule(x, g, e);
    case CT_STEP_PREFILL:
    case CT_STEP_DECODE: return calib_bench_step(x, op, g, e);
    case CT_LORA: return calib_bench_lora(x, g, e);
    case CT_LORA_LOAD: return calib_bench_lora_load(x, g, e);
    case CT_KV_COPY: return calib_bench_kv_copy(x, g, e);
    default: return calib_bench_rows(x, op, g, e);
    }
}

static json_t *model_json(const model_config *c)
{
    return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b}", "name", c->name, "num_hidden_layers",
                     (json_int_t)c->n_layers, "hidden_size", (json_int_t)c->hidden_size, "intermediate_size",
                     (json_int_t)c->intermediate_size, "num_attention_heads", (json_int_t)c->n_heads,
                     "num_key_value_heads", (json_int_t)c->n_kv_heads, "head_dim", (json_int_t)c->head_dim,
                     "vocab_size", (json_int_t)c->vocab_size, "max_position_embeddings",
                     (json_int_t)c->max_position, "qkv_bias", (int)c->qkv_bias);
}

static json_t *calibration_json(const calib_ctx *x)
{
    const calib_opts *o = x->o;
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *notes = json_array();
    for (uint32_t i = 0; i < x->r->n_notes; i++) json_array_append_new(notes, json_string(x->r->notes[i]));
    char host[128] = "";
    gethostname(host, sizeof host - 1);
    return json_pack("{s:s, s:s, s:f, s:i, s:i, s:s, s:{s:i, s:i, s:f, s:f, s:f}, s:b, s:o}", "created", when,
                     "host", host, "seconds", x->r->seconds, "points", (json_int_t)x->r->points, "unconverged",
                     (json_int_t)x->r->unconverged, "statistic",
                     "median of samples, taken until their interquartile range is within tolerance of it", "rule",
                     "min_samples", (json_int_t)o->rule.min_samples, "max_samples", (json_int_t)o->rule.max_samples,
                     "tolerance", o->rule.tolerance, "sample_s", o->rule.sample_s, "point_budget_s",
                     o->rule.point_budget_s, "quick", (int)o->quick, "notes", notes);
}

static void sampling_text(const kern_sampling *s, char *buf, size_t n)
{
    if (s->temperature <= 0 || s->top_k == 1) snprintf(buf, n, "greedy");
    else
        snprintf(buf, n, "temperature %g, top_p %g, top_k %u", (double)s->temperature, (double)s->top_p, s->top_k);
}

json_t *calib_run(const calib_backend *b, const model_config *c, const calib_opts *o, calib_report *r, rh_err *e)
{
    memset(r, 0, sizeof *r);
    if (o->tp < 1 || o->page_size < 1 || o->max_tokens < 2 || o->max_seqs < 2)
        return rh_fail(e, "calibrate: --tp, --page-size must be at least 1 and --max-tokens, --max-seqs at least 2"),
               NULL;
    calib_ctx x = {.b = b, .o = o, .c = c, .r = r, .rng = 0x9e3779b97f4a7c15ull ^ o->seed};
    if (make_shape(c, o, &x.s, e) < 0) return NULL;
    kern_attn_shape sh = calib_attn_shape(&x.s);
    const char *why = b->K->check_shape ? b->K->check_shape(&sh) : NULL;
    if (why) return rh_fail(e, "calibrate: the %s backend cannot run the attention of %s: %s", b->name, c->name, why), NULL;
    plan *p = calloc(1, sizeof *p);
    if (!p) return rh_fail(e, "calibrate: out of memory"), NULL;
    make_plan(&x, p);
    if (o->tp > 1 && !b->allreduce)
        calib_note(&x, "allreduce: skipped: the %s backend has no collective to time, so this table prices "
                       "tensor parallel without communication",
                   b->name);
    if (o->skip_schedule) calib_note(&x, "schedule: not measured (left at zero)");

    uint64_t total = 0;
    for (int op = 0; op < CT_N_OPS; op++)
        if (!p->skip[op]) total += (uint64_t)p->ax[op][0].n * (cost_table_ops[op].dims == 2 ? p->ax[op][1].n : 1);
    double t0 = rh_now();
    if (o->progress) rh_progress_begin(&x.bar, "calibrate", total);

    json_t *ops = json_object(), *op_seconds = json_object();
    int rc = 0;
    for (int op = 0; op < CT_N_OPS && rc == 0; op++) {
        if (p->skip[op]) continue;
        const cost_table_op_info *info = &cost_table_ops[op];
        const axis *a0 = &p->ax[op][0], *a1 = &p->ax[op][1];
        uint32_t n1 = info->dims == 2 ? a1->n : 1;
        calib_grid g = {a0->v, a1->v, a0->n, n1, calloc((size_t)a0->n * n1, sizeof(double)),
                        calloc((size_t)a0->n * n1, sizeof(double))};
        double op_t0 = rh_now();
        if (!g.seconds || !g.spread) rc = rh_fail(e, "calibrate: out of memory");
        else rc = run_op(&x, op, &g, e);
        json_object_set_new(op_seconds, info->name, json_real(rh_now() - op_t0));
        if (rc > 0) rc = 0;   /* skipped, with a note */
        else if (rc == 0) {
            json_t *o_ = json_object();
            json_object_set_new(o_, info->axes[0], axis_json(a0));
            if (info->dims == 2) json_object_set_new(o_, info->axes[1], axis_json(a1));
            json_object_set_new(o_, "seconds", values_json(g.seconds, a0->n, n1, info->dims == 2));
            json_object_set_new(o_, "spread", values_json(g.spread, a0->n, n1, info->dims == 2));
            json_object_set_new(ops, info->name, o_);
        }
        free(g.seconds);
        free(g.spread);
    }
    if (o->progress) rh_progress_end(&x.bar);
    free(p);
    r->seconds = rh_now() - t0;
    if (rc < 0) {
        json_decref(ops);
        json_decref(op_seconds);
        return NULL;
    }
    char sampling[96];
    sampling_text(&o->sampling, sampling, sizeof sampling);
    json_t *root = json_pack("{s:s, s:i, s:s, s:i, s:i, s:i, s:i, s:o, s:s, s:b}", "kind", "table", "version",
                             (json_int_t)COST_TABLE_VERSION, "backend", b->name, "tp", (json_int_t)o->tp, "page_size",
                             (json_int_t)o->page_size, "threads", (json_int_t)b->threads, "activation_bytes",
                             (json_int_t)b->activation_bytes, "model", model_json(c), "sampling", sampling,
                             "schedule_in_step", 1);
    if (!root) {
        json_decref(ops);
        json_decref(op_seconds);
        return rh_fail(e, "calibrate: out of memory"), NULL;
    }
    if (o->lora_rank && o->tp == 1) json_object_set_new(root, "lora_rank", json_integer(o->lora_rank));
    json_t *cal = calibration_json(&x);
    json_object_set_new(cal, "operator_seconds", op_seconds);
    json_object_set_new(root, "calibration", cal);
    json_object_set_new(root, "operators", ops);
    return root;
}

int calib_save(json_t *table, const char *path, rh_err *e)
{
    return rh_json_save(table, path, JSON_INDENT(1) | JSON_REAL_PRECISION(6) | JSON_PRESERVE_ORDER, "the cost file", e);
}
