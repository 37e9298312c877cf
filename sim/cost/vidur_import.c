/* vidur_import.c — a table cost model from Vidur's profiles (vidur_import.h). */
#include "sim/cost/vidur_import.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sim/cost/collective.h"
#include "sim/cost/cost.h"
#include "sim/cost/cost_table.h"
#include "sim/cost/roofline.h"
#include "sim/cost/vidur_profile.h"

/* The profile's times at tp, by token count: seconds[op][i] at tokens[i]. */
typedef struct rows_at {
    double *tokens;
    double *t[VIDUR_N_OPS];
    size_t n;
} rows_at;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int collect(const vidur_profile *p, uint32_t tp, rows_at *r, rh_err *e)
{
    memset(r, 0, sizeof *r);
    r->tokens = malloc((p->n ? p->n : 1) * sizeof *r->tokens);
    if (!r->tokens) return rh_fail(e, "out of memory");
    for (size_t i = 0; i < p->n; i++)
        if (p->s[i].tp == tp && p->s[i].op == 0) r->tokens[r->n++] = p->s[i].M;
    qsort(r->tokens, r->n, sizeof *r->tokens, cmp_double);
    size_t u = 0;
    for (size_t i = 0; i < r->n; i++)
        if (!u || r->tokens[i] != r->tokens[u - 1]) r->tokens[u++] = r->tokens[i];
    r->n = u;
    if (r->n < 2) return rh_fail(e, "the profile has %zu token counts at tp %u (a table needs two)", r->n, tp);
    for (int op = 0; op < VIDUR_N_OPS; op++) {
        if (!(r->t[op] = calloc(r->n, sizeof(double)))) return rh_fail(e, "out of memory");
    }
    /* A token count measured twice (the profiles repeat a few) takes the mean. */
    uint32_t *count = calloc(r->n * VIDUR_N_OPS, sizeof *count);
    if (!count) return rh_fail(e, "out of memory");
    for (size_t i = 0; i < p->n; i++) {
        const vidur_sample *s = &p->s[i];
        if (s->tp != tp) continue;
        double *hit = bsearch(&s->M, r->tokens, r->n, sizeof *r->tokens, cmp_double);
        if (!hit) continue;
        size_t k = (size_t)(hit - r->tokens);
        r->t[s->op][k] += s->seconds;
        count[(size_t)s->op * r->n + k]++;
    }
    for (int op = 0; op < VIDUR_N_OPS; op++)
        for (size_t k = 0; k < r->n; k++)
            if (count[(size_t)op * r->n + k]) r->t[op][k] /= count[(size_t)op * r->n + k];
    free(count);
    for (int op = 0; op < VIDUR_N_OPS; op++)
        for (size_t i = 0; i < r->n; i++)
            if (!(r->t[op][i] > 0))
                return rh_fail(e, "the profile has no %s time at %g tokens, tp %u", vidur_op_names[op], r->tokens[i],
                               tp);
    return 0;
}

static void rows_free(rows_at *r)
{
    free(r->tokens);
    for (int op = 0; op < VIDUR_N_OPS; op++) free(r->t[op]);
}

static json_t *axis(const double *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

/* A one-axis operator: seconds[i] = f(i). */
static json_t *grid1(const char *axis_name, const double *x, size_t n, const double *seconds)
{
    return json_pack("{s:o, s:o}", axis_name, axis(x, n), "seconds", axis(seconds, n));
}

/* The roofline's time of one operator for a batch, per layer (or per step). */
static double roof_op(const cost_model *roof, const cost_seq *s, uint32_t n, int op, double per)
{
    cost_batch b = {.seqs = s, .n = n};
    cost_batch_summarize(&b);
    rl_breakdown bd;
    rh_err e;
    if (roofline_breakdown(roof, &b, &bd, &e) < 0) return NAN;
    return bd.op[op].seconds / per;
}

static const char *gpu_from_path(const char *path)
{
    if (strstr(path, "/h100/") || strstr(path, "h100")) return "h100-sxm";
    if (strstr(path, "/a100/") || strstr(path, "a100")) return "a100-80g";
    return NULL;
}

json_t *vidur_import_table(const char *profile, const char *model, const char *gpu, uint32_t tp, rh_err *e)
{
    char path[4096];
    struct stat st;
    if (stat(profile, &st) != 0) return rh_fail(e, "%s: no such file or directory", profile), NULL;
    snprintf(path, sizeof path, S_ISDIR(st.st_mode) ? "%s/mlp.csv" : "%s", profile);
    if (!gpu && !(gpu = gpu_from_path(path)))
        return rh_fail(e, "%s: cannot tell the GPU from the path: give --gpu", path), NULL;
    vidur_profile p;
    if (vidur_profile_read(path, &p, e) < 0) return NULL;
    char text[512];
    snprintf(text, sizeof text, "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"%s\", \"gpu\": \"%s\", \"tp\": %u}",
             model, gpu, tp);
    cost_model *roof = cost_parse(text, "--model/--gpu", e);
    json_t *out = NULL;
    rows_at r = {0};
    double *a = NULL, *b = NULL, *c = NULL;
    if (!roof) goto done;
    const rl_model *md = roofline_model(roof);
    const rl_gpu *g = roofline_gpu(roof);
    const vidur_model *vm = &p.model;
    if (md->mla || md->moe || md->hidden != vm->hidden || md->heads != vm->heads || md->kv_heads != vm->kv_heads ||
        md->intermediate != vm->intermediate) {
        rh_fail(e, "%s profiles a model of hidden %u, %u heads, %u KV heads, MLP %u; model %s has %u, %u, %u, %u%s",
                path, vm->hidden, vm->heads, vm->kv_heads, vm->intermediate, md->name, md->hidden, md->heads,
                md->kv_heads, md->intermediate, md->mla || md->moe ? " (and MLA or experts)" : "");
        goto done;
    }
    if (collect(&p, tp, &r, e) < 0) goto done;

    size_t n = r.n;
    a = calloc(n, sizeof *a), b = calloc(n, sizeof *b), c = calloc(n, sizeof *c);
    if (!a || !b || !c) {
        rh_fail(e, "out of memory");
        goto done;
    }
    double hd = (double)md->hidden / md->heads, q = md->heads * hd / tp;
    double kv = (md->kv_heads >= tp ? (double)md->kv_heads / tp : 1) * hd, qkv = q + 2 * kv;
    json_t *ops = json_object();
    /* enum order of vidur_op_names: emb 0, in-norm 1, qkv 2, rope 3, o 4, post-norm 5, up 6, act 7, down 8, add 9 */
    json_object_set_new(ops, "embedding", grid1("tokens", r.tokens, n, r.t[0]));
    for (size_t i = 0; i < n; i++) a[i] = 0;
    json_object_set_new(ops, "rope_angles", grid1("tokens", r.tokens, n, a));
    json_object_set_new(ops, "kv_write", grid1("tokens", r.tokens, n, a));
    for (size_t i = 0; i < n; i++) a[i] = (r.t[1][i] + r.t[5][i]) / 2;
    json_object_set_new(ops, "rmsnorm", grid1("tokens", r.tokens, n, a));
    for (size_t i = 0; i < n; i++) a[i] = r.t[2][i] * q / qkv, b[i] = r.t[2][i] * kv / qkv;
    json_object_set_new(ops, "q_proj", grid1("tokens", r.tokens, n, a));
    json_object_set_new(ops, "kv_proj", grid1("tokens", r.tokens, n, b));
    json_object_set_new(ops, "rope", grid1("tokens", r.tokens, n, r.t[3]));
    for (size_t i = 0; i < n; i++) a[i] = r.t[4][i] + r.t[9][i], b[i] = r.t[8][i] + r.t[9][i], c[i] = r.t[6][i] / 2;
    json_object_set_new(ops, "o_proj", grid1("tokens", r.tokens, n, a));
    json_object_set_new(ops, "down_proj", grid1("tokens", r.tokens, n, b));
    json_object_set_new(ops, "gate_up_proj", grid1("tokens", r.tokens, n, c));
    json_object_set_new(ops, "silu_mul", grid1("tokens", r.tokens, n, r.t[7]));

    /* From the roofline: attention over a grid of chunks and decodes, the
     * LM head (and the final norm) over rows, the all-reduce over sizes. */
    double L = md->layers;
    uint32_t ctx_max = md->max_position ? md->max_position : 32768;
    double chunks[16], ctxs[8], seqs[10], sums[12], rows[12], bytes[19];
    size_t nc = 0, nx = 0, ns = 0, nS = 0, nr = 0, nb = 0;
    for (double v = 1; v <= 16384 && v <= ctx_max; v *= 2) chunks[nc++] = v;
    ctxs[nx++] = 0;
    for (double v = 1024; v <= ctx_max && nx < 8; v *= 4) ctxs[nx++] = v;
    for (double v = 1; v <= 512; v *= 2) seqs[ns++] = v;
    sums[nS++] = 0;
    for (double v = 1024; nS < 12; v *= 4) sums[nS++] = v;
    for (double v = 1; nr < 12; v *= 4) rows[nr++] = v;
    for (double v = 1024; nb < 19; v *= 2) bytes[nb++] = v;
    json_t *pa = json_array(), *da = json_array();
    cost_seq *sq = malloc(512 * sizeof *sq);
    if (!sq) {
        json_decref(ops), json_decref(pa), json_decref(da);
        rh_fail(e, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nc; i++) {
        json_t *row = json_array();
        for (size_t j = 0; j < nx; j++) {
            cost_seq s1 = {(uint32_t)chunks[i], (uint32_t)ctxs[j], true};
            json_array_append_new(row, json_real(roof_op(roof, &s1, 1, RL_ATTN_PREFILL, L)));
        }
        json_array_append_new(pa, row);
    }
    for (size_t i = 0; i < ns; i++) {
        json_t *row = json_array();
        uint32_t k = (uint32_t)seqs[i];
        for (size_t j = 0; j < nS; j++) {
            for (uint32_t m = 0; m < k; m++) sq[m] = (cost_seq){1, (uint32_t)(sums[j] / k), false};
            json_array_append_new(row, json_real(roof_op(roof, sq, k, RL_ATTN_DECODE, L)));
        }
        json_array_append_new(da, row);
    }
    json_object_set_new(ops, "prefill_attention", json_pack("{s:o, s:o, s:o}", "new_tokens", axis(chunks, nc),
                                                            "context", axis(ctxs, nx), "seconds", pa));
    json_object_set_new(ops, "decode_attention", json_pack("{s:o, s:o, s:o}", "seqs", axis(seqs, ns), "context",
                                                           axis(sums, nS), "seconds", da));
    double lm[12], zero[12] = {0}, ar[19];
    for (size_t i = 0; i < nr; i++) {
        uint32_t k = (uint32_t)rows[i] < 512 ? (uint32_t)rows[i] : 512;
        for (uint32_t m = 0; m < k; m++) sq[m] = (cost_seq){1, 0, false};
        lm[i] = roof_op(roof, sq, k, RL_LM_HEAD, 1) * rows[i] / k + roof_op(roof, sq, k, RL_NORM, 2 * L + 1);
    }
    free(sq);
    json_object_set_new(ops, "lm_head", grid1("rows", rows, nr, lm));
    json_object_set_new(ops, "sample", grid1("rows", rows, nr, zero));
    json_object_set_new(ops, "batch_prep", grid1("seqs", rows, nr, zero));
    json_object_set_new(ops, "schedule", grid1("seqs", rows, nr, zero));
    if (tp > 1) {
        uint32_t per_node = tp < g->gpus_per_node ? tp : g->gpus_per_node;
        for (size_t i = 0; i < nb; i++) ar[i] = rl_allreduce_s(g, tp, per_node, bytes[i], 1);
        json_object_set_new(ops, "allreduce", grid1("bytes", bytes, nb, ar));
    }
    char backend[96], source[4400];
    snprintf(backend, sizeof backend, "vidur:%s", g->name);
    snprintf(source, sizeof source, "%.4000s (Vidur's measured operators at tp %u); attention, LM head and "
             "all-reduce from the roofline of %.60s on %.60s", path, tp, md->name, g->name);
    out = json_pack("{s:s, s:i, s:s, s:i, s:i, s:i, s:s, s:b, s:{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}, "
                    "s:{s:s}, s:o}",
                    "kind", "table", "version", (json_int_t)COST_TABLE_VERSION, "backend", backend, "tp",
                    (json_int_t)tp, "page_size", (json_int_t)16, "activation_bytes", (json_int_t)2, "sampling",
                    "greedy", "schedule_in_step", 0, "model", "name", md->name, "num_hidden_layers",
                    (json_int_t)md->layers, "hidden_size", (json_int_t)md->hidden, "intermediate_size",
                    (json_int_t)md->intermediate, "num_attention_heads", (json_int_t)md->heads,
                    "num_key_value_heads", (json_int_t)md->kv_heads, "head_dim", (json_int_t)md->head_dim,
                    "vocab_size", (json_int_t)md->vocab, "max_position_embeddings", (json_int_t)ctx_max,
                    "calibration", "source", source, "operators", ops);
done:
    free(a), free(b), free(c);
    rows_free(&r);
    vidur_profile_free(&p);
    cost_free(roof);
    return out;
}
