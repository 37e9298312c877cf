/* cost_linear.c — the linear kind: a step's time as five coefficients times
 * five features of the batch, one coefficient set per tensor-parallel size.
 *
 *   t = base_s + per_prefill_token_s · (prefill tokens + draft slots)
 *     + per_decode_seq_s · decode seqs + per_context_token_s · Σ decode context
 *     + per_attention_s · Σ over prefill chunks of new · (context + new)
 *
 * Speculative verify: a decode carrying 1 + k tokens costs one decode (its
 * first token, and one read of its KV cache, which the verify kernel shares
 * among all 1 + k queries) plus k draft slots priced like prompt tokens —
 * they are extra rows through every GEMM, which is what per_prefill_token_s
 * measures. Drafting: each draft forward costs draft_ratio of a decode-only
 * step over the drafted sequences (cost.c), so the features stay linear in
 * the coefficients and `rehearse fit` can fit recordings with speculation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost_impl.h"
#include "util/json_file.h"

typedef struct linear_tp {
    uint32_t tp;
    cost_linear_coef c;
} linear_tp;

typedef struct cost_linear {
    cost_model base;
    uint32_t n_tp;
    linear_tp *tps;         /* tps[0] holds the top-level coefficients (tp_size) */
} cost_linear;

static const cost_linear_coef *coef_for(const cost_linear *l, uint32_t tp)
{
    if (tp == 0) return &l->tps[0].c;
    for (uint32_t i = 0; i < l->n_tp; i++)
        if (l->tps[i].tp == tp) return &l->tps[i].c;
    return NULL;
}

void cost_linear_features(const cost_batch *b, double draft_ratio, double phi[5])
{
    memset(phi, 0, 5 * sizeof phi[0]);
    if (b->prefill_tokens == 0 && b->decode_seqs == 0) return;
    uint32_t slots = b->decode_tokens > b->decode_seqs ? b->decode_tokens - b->decode_seqs : 0;
    phi[0] = 1;
    phi[1] = (double)b->prefill_tokens + slots;
    phi[2] = b->decode_seqs;
    phi[3] = (double)b->decode_context;
    phi[4] = (double)b->prefill_attn;
    if (b->draft_steps && b->draft_seqs && draft_ratio > 0) {
        for (uint32_t i = 0; i < b->draft_steps; i++) {
            phi[0] += draft_ratio;
            phi[2] += draft_ratio * b->draft_seqs;
            phi[3] += draft_ratio * (double)cost_draft_context(b, i);
        }
    }
}

/* The forward alone (no drafting): the features without the draft terms. */
static double linear_step(const cost_model *m, const cost_batch *b)
{
    const cost_linear_coef *c = coef_for((const cost_linear *)m, b->tp);
    if (!c) return NAN;
    double phi[5];
    cost_batch fwd = *b;
    fwd.draft_steps = 0;
    cost_linear_features(&fwd, 0, phi);
    return c->base_s * phi[0] + c->per_prefill_token_s * phi[1] + c->per_decode_seq_s * phi[2] +
           c->per_context_token_s * phi[3] + c->per_attention_s * phi[4];
}

static int linear_breakdown(const cost_model *m, const cost_batch *b, cost_term *t, int max)
{
    const cost_linear_coef *c = coef_for((const cost_linear *)m, b->tp);
    double phi[5];
    cost_batch fwd = *b;
    fwd.draft_steps = 0;
    cost_linear_features(&fwd, 0, phi);
    const double k[5] = {c ? c->base_s : NAN, c ? c->per_prefill_token_s : NAN,
                         c ? c->per_decode_seq_s : NAN, c ? c->per_context_token_s : NAN,
                         c ? c->per_attention_s : NAN};
    static const char *names[5] = {"base", "prefill tokens + draft slots", "decode seqs",
                                   "decode context", "prefill attention"};
    int n = 0;
    for (int i = 0; i < 5 && n < max; i++) t[n++] = (cost_term){names[i], k[i] * phi[i], 0, 0, ""};
    return n;
}

static int linear_check_tp(const cost_model *m, uint32_t tp, rh_err *e)
{
    const cost_linear *l = (const cost_linear *)m;
    if (coef_for(l, tp)) return 0;
    char have[256] = "";
    for (uint32_t i = 0; i < l->n_tp; i++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%u", i ? ", " : "", l->tps[i].tp);
    return rh_fail(e, "%s: field 'tp': no coefficients for tensor-parallel size %u (the file has: %s)",
                   m->path[0] ? m->path : "linear cost model", tp, have);
}

static void linear_free(cost_model *m)
{
    cost_linear *l = (cost_linear *)m;
    free(l->tps);
    free(l);
}

/* A formula of the aggregates: the same batch shape, the same price. */
static bool linear_by_aggregates(const cost_model *m, uint32_t tp, const cost_serving *sv)
{
    (void)m, (void)tp, (void)sv;
    return true;
}

static const cost_ops linear_ops = {
    .kind = "linear",
    .step_time = linear_step,
    .draft_time = NULL,
    .check_tp = linear_check_tp,
    .breakdown = linear_breakdown,
    .free = linear_free,
    .by_aggregates = linear_by_aggregates,
};

static cost_linear *linear_alloc(uint32_t n_tp, const cost_src *src)
{
    cost_linear *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->tps = calloc(n_tp, sizeof *l->tps);
    l->n_tp = n_tp;
    if (!l->tps || cost_model_init(&l->base, &linear_ops, src) < 0) {
        free(l->tps);
        free(l->base.path);
        free(l);
        return NULL;
    }
    return l;
}

cost_model *cost_linear_new(const cost_linear_coef *c)
{
    cost_src src = {"", "."};
    cost_linear *l = linear_alloc(1, &src);
    if (!l) return NULL;
    l->tps[0].tp = 1;
    l->tps[0].c = *c;
    return &l->base;
}

/* A coefficient is seconds per unit of its feature; 1000 s is far beyond any
 * real step and keeps every product finite. */
#define COEF_MAX 1e3

static const char *const coef_keys[] = {"base_s", "per_prefill_token_s", "per_decode_seq_s",
                                        "per_context_token_s", "per_attention_s", NULL};

static int parse_coefs(json_t *obj, const char *at, cost_linear_coef *c, const cost_src *src, rh_err *e)
{
    double *dst[5] = {&c->base_s, &c->per_prefill_token_s, &c->per_decode_seq_s,
                      &c->per_context_token_s, &c->per_attention_s};
    for (int i = 0; i < 5; i++)
        if (cj_number(obj, at, coef_keys[i], 1, 0, 0, COEF_MAX, dst[i], src, e) < 0) return -1;
    return 0;
}

/* Parses a tp map key: a positive decimal integer. */
static int parse_tp_key(const char *s, uint32_t *out)
{
    if (!*s || strlen(s) > 6) return -1;
    uint32_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (uint32_t)(*p - '0');
    }
    if (v == 0) return -1;
    *out = v;
    return 0;
}

cost_model *cost_linear_parse(json_t *root, const cost_src *src, rh_err *e)
{
    static const char *const allowed[] = {"kind", "version", "base_s", "per_prefill_token_s",
                                          "per_decode_seq_s", "per_context_token_s", "per_attention_s",
                                          "tp_size", "tp", "draft_ratio", "comment", "fit", NULL};
    if (cj_only_keys(root, "", allowed, src, e) < 0) return NULL;
    json_t *tpmap = json_object_get(root, "tp");
    if (tpmap && !json_is_object(tpmap)) {
        cj_fail(src, "", "tp", e, "must be an object mapping a tensor-parallel size to coefficients, "
                "e.g. {\"2\": {\"base_s\": ...}}");
        return NULL;
    }
    uint32_t n_tp = 1 + (tpmap ? (uint32_t)json_object_size(tpmap) : 0);
    cost_linear *l = linear_alloc(n_tp, src);
    if (!l) {
        rh_fail(e, "%s: out of memory", src->label);
        return NULL;
    }
    if (cj_uint(root, "", "tp_size", 0, 1, 1, 65536, &l->tps[0].tp, src, e) < 0 ||
        parse_coefs(root, "", &l->tps[0].c, src, e) < 0 ||
        cj_number(root, "", "draft_ratio", 0, COST_DRAFT_RATIO_DEFAULT, 0, 100, &l->base.draft_ratio, src,
                  e) < 0)
        goto fail;
    uint32_t i = 1;
    const char *key;
    json_t *v;
    json_object_foreach(tpmap, key, v) {
        char at[96];
        snprintf(at, sizeof at, "tp.%.80s", key);
        uint32_t tp;
        if (parse_tp_key(key, &tp) < 0) {
            cj_fail(src, "tp", key, e, "a tensor-parallel size must be a positive integer");
            goto fail;
        }
        for (uint32_t j = 0; j < i; j++)
            if (l->tps[j].tp == tp) {
                cj_fail(src, "tp", key, e, "tensor-parallel size %u is given twice (tp_size is %u)", tp,
                        l->tps[0].tp);
                goto fail;
            }
        if (!json_is_object(v)) {
            cj_fail(src, "tp", key, e, "must be an object holding the five coefficients");
            goto fail;
        }
        if (cj_only_keys(v, at, coef_keys, src, e) < 0 || parse_coefs(v, at, &l->tps[i].c, src, e) < 0)
            goto fail;
        l->tps[i++].tp = tp;
    }
    json_t *comment = json_object_get(root, "comment"), *fit = json_object_get(root, "fit");
    if (comment && !json_is_string(comment)) {
        cj_fail(src, "", "comment", e, "must be a string");
        goto fail;
    }
    if (fit && !json_is_object(fit)) {
        cj_fail(src, "", "fit", e, "must be an object (written by rehearse fit)");
        goto fail;
    }
    return &l->base;
fail:
    cost_free(&l->base);
    return NULL;
}

int cost_linear_save(const char *path, const cost_linear_coef *c, uint32_t tp_size, double draft_ratio,
                     const void *extra, rh_err *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string("linear"));
    json_object_set_new(o, "version", json_integer(1));
    if (tp_size > 1) json_object_set_new(o, "tp_size", json_integer(tp_size));
    const double v[5] = {c->base_s, c->per_prefill_token_s, c->per_decode_seq_s, c->per_context_token_s,
                         c->per_attention_s};
    for (int i = 0; i < 5; i++) json_object_set_new(o, coef_keys[i], json_real(v[i]));
    if (draft_ratio != COST_DRAFT_RATIO_DEFAULT) json_object_set_new(o, "draft_ratio", json_real(draft_ratio));
    if (extra) json_object_update(o, (json_t *)extra);
    int rc = rh_json_save(o, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12), "the cost file", e);
    json_decref(o);
    return rc;
}
