/* vidur_profile.c — reading Vidur's operator profiles (vidur_profile.h). */
#include "sim/cost/vidur_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/csv.h"

const char *const vidur_op_names[VIDUR_N_OPS] = {
    "emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
    "mlp_up_proj", "mlp_act", "mlp_down_proj", "add",
};

static const uint8_t kinds[VIDUR_N_OPS] = {
    RL_K_EMBED, RL_K_NORM, RL_K_GEMM, RL_K_ROPE, RL_K_GEMM, RL_K_NORM, RL_K_GEMM, RL_K_ACT, RL_K_GEMM, RL_K_ADD,
};

/* The shape of operator op at one row. */
static vidur_sample shape(int op, double M, double tp, const vidur_model *m)
{
    double h = m->hidden, hd = h / m->heads, I = m->intermediate;
    double q = m->heads * hd / tp, kv = m->kv_heads * hd / tp;
    vidur_sample s = {.op = (uint8_t)op, .kind = kinds[op], .tp = (uint32_t)tp, .M = M};
    switch (op) {
    case 0: s.bytes = 2 * M * h * 2; break;
    case 1: case 5: s.bytes = 2 * M * h * 2 + h * 2, s.row = h; break;
    case 2: s.K = h, s.N = q + 2 * kv; break;
    case 3: s.bytes = 2 * M * (q + kv) * 2 + M * hd * 2, s.row = q + kv; break;
    case 4: s.K = q, s.N = h; break;
    case 6: s.K = h, s.N = 2 * I / tp; break;
    case 7: s.bytes = 3 * M * (I / tp) * 2, s.row = I / tp; break;
    case 8: s.K = I / tp, s.N = h; break;
    default: s.bytes = 3 * M * h * 2, s.row = h; break;
    }
    return s;
}

int vidur_profile_read(const char *path, vidur_profile *p, rh_err *e)
{
    memset(p, 0, sizeof *p);
    rh_csv_table t;
    if (rh_csv_read(path, &t, e) < 0) return -1;
    static const char *const cols[] = {"n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size",
                                       "num_tokens", "num_tensor_parallel_workers"};
    int c[7], ct[VIDUR_N_OPS];
    for (int i = 0; i < 7; i++)
        if ((c[i] = rh_csv_col(&t, cols[i])) < 0) {
            rh_csv_free(&t);
            return rh_fail(e, "%s: no column '%s' (not a Vidur compute profile)", path, cols[i]);
        }
    for (int i = 0; i < VIDUR_N_OPS; i++) {
        char name[96];
        snprintf(name, sizeof name, "time_stats.%s.median", vidur_op_names[i]);
        if ((ct[i] = rh_csv_col(&t, name)) < 0) {
            rh_csv_free(&t);
            return rh_fail(e, "%s: no column '%s' (not a Vidur compute profile)", path, name);
        }
    }
    if (!(p->s = malloc((t.nrow ? t.nrow : 1) * VIDUR_N_OPS * sizeof *p->s))) {
        rh_csv_free(&t);
        return rh_fail(e, "%s: out of memory", path);
    }
    for (size_t r = 0; r < t.nrow; r++) {
        double v[7];
        int ok = 1, k;
        for (int i = 0; i < 7; i++) v[i] = rh_csv_num(&t, r, c[i], &k), ok &= k && v[i] >= 1;
        if (!ok) {
            rh_fail(e, "%s: line %zu: a shape column is not a positive number", path, r + 2);
            vidur_profile_free(p);
            rh_csv_free(&t);
            return -1;
        }
        vidur_model m = {(uint32_t)v[0], (uint32_t)v[1], (uint32_t)v[2], (uint32_t)v[3], (uint32_t)v[4]};
        if (r == 0) p->model = m;
        if ((uint32_t)v[5] > p->max_tokens) p->max_tokens = (uint32_t)v[5];
        for (int op = 0; op < VIDUR_N_OPS; op++) {
            double ms = rh_csv_num(&t, r, ct[op], &k);
            if (!k || !(ms > 0)) continue;   /* an operator not measured at this row */
            vidur_sample s = shape(op, v[5], v[6], &m);
            s.seconds = ms * 1e-3;
            p->s[p->n++] = s;
        }
    }
    rh_csv_free(&t);
    return 0;
}

void vidur_profile_free(vidur_profile *p)
{
    free(p->s);
    memset(p, 0, sizeof *p);
}

double vidur_predict(const vidur_sample *s, const rl_kernel *k, double peak, double hbm)
{
    switch (s->kind) {
    case RL_K_GEMM: return rl_gemm_s(k, peak, hbm, s->M, s->K, s->N, 2, 1);
    case RL_K_EMBED: return rl_embedding_s(k, hbm, s->M, s->bytes, 1);
    default: return rl_stream_s(k, hbm, s->bytes, s->row, 1);
    }
}
