/* forward.c — see forward.h. */
#include "engine/model/forward.h"

#include <math.h>

/* Products of one input: in one call where the backend groups them. */
static void gemm_group(const kern_table *K, const float *x, uint32_t m, uint32_t k, uint32_t n_prod,
                       const kern_gemm_out *outs)
{
    if (K->gemm_group) {
        K->gemm_group(x, m, k, n_prod, outs);
        return;
    }
    for (uint32_t i = 0; i < n_prod; i++) K->gemm(x, outs[i].w, outs[i].bias, outs[i].y, m, outs[i].n, k, 0);
}

/* y[rows of each segment] += (x·Aᵀ)·Bᵀ for module m of layer l: the
 * shrink into lora_u, then the expand accumulated into y. x and y are
 * row-major with widths in and out. */
static void lora_add(const kern_table *K, const fwd_batch *b, fwd_buffers *buf, uint32_t l, int m, const float *x,
                     uint32_t in, float *y, uint32_t out)
{
    for (uint32_t i = 0; i < b->n_lora; i++) {
        const fwd_lora_seg *s = &b->lora[i];
        size_t at = (size_t)l * 7 + (size_t)m;
        const float *A = s->w->a[at], *B = s->w->b[at];
        if (!A || !B || !s->rows) continue;
        K->gemm(x + (size_t)s->row0 * in, A, NULL, buf->lora_u, s->rows, s->w->rank, in, 0);
        K->gemm(buf->lora_u, B, NULL, y + (size_t)s->row0 * out, s->rows, out, s->w->rank, 1);
    }
}

void forward_run(const kern_table *K, const model_config *c, const model_weights *w, const float *inv_freq,
                 float *const *k_pools, float *const *v_pools, uint32_t page_size, const fwd_batch *b,
                 fwd_buffers *buf)
{
    forward_run_tp(K, c, w, inv_freq, k_pools, v_pools, page_size, b, buf, NULL);
}

void forward_run_tp(const kern_table *K, const model_config *c, const model_weights *w, const float *inv_freq,
                    float *const *k_pools, float *const *v_pools, uint32_t page_size, const fwd_batch *b,
                    fwd_buffers *buf, const kern_comm *comm)
{
    /* Other ranks overwrite x with their partial sum (accumulate 0) and the
     * all-reduce adds rank 0's residual + partial to it. */
    int lead = !comm || comm->rank == 0;
    uint32_t T = b->rows, d = c->hidden_size, f = c->intermediate_size;
    uint32_t qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    kern_attn_shape shape = {
        .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads,
        .head_dim = c->head_dim,
        .page_size = page_size,
        .window = c->sliding_window,
        .scale = 1.0f / sqrtf((float)c->head_dim),
    };

    if (K->plan) K->plan(&b->attn, b->h_row0, b->h_start, &shape);
    K->embedding(w->embed, b->tokens, T, d, buf->x);
    /* One cos/sin table for the batch, shared by Q and K of every layer. */
    K->rope_angles(b->positions, inv_freq, T, c->head_dim / 2, buf->cos, buf->sin);

    for (uint32_t l = 0; l < c->n_layers; l++) {
        const model_layer *L = &w->layers[l];

        K->rmsnorm(buf->x, L->attn_norm, c->rms_norm_eps, T, d, buf->xn);
        const kern_gemm_out qkv[3] = {{L->wq, L->bq, buf->q, qd}, {L->wk, L->bk, buf->k, kvd}, {L->wv, L->bv, buf->v, kvd}};
        gemm_group(K, buf->xn, T, d, 3, qkv);
        if (b->n_lora) {   /* module order of lora.h: q, k, v, o, gate, up, down */
            lora_add(K, b, buf, l, 0, buf->xn, d, buf->q, qd);
            lora_add(K, b, buf, l, 1, buf->xn, d, buf->k, kvd);
            lora_add(K, b, buf, l, 2, buf->xn, d, buf->v, kvd);
        }
        K->rope(buf->q, buf->cos, buf->sin, T, c->n_heads, c->head_dim, qd);
        K->rope(buf->k, buf->cos, buf->sin, T, c->n_kv_heads, c->head_dim, kvd);
        /* Write first: a chunk's rows then find their own keys in the pages. */
        K->kv_write(buf->k, buf->v, &b->attn, &shape, k_pools[l], v_pools[l]);
        K->attention(buf->q, k_pools[l], v_pools[l], &b->attn, &shape, buf->att, buf->scores);
        K->gemm(buf->att, L->wo, L->bo, buf->x, T, d, qd, lead);
        if (b->n_lora) lora_add(K, b, buf, l, 3, buf->att, qd, buf->x, d);

        if (comm) comm->all_reduce(comm->ctx, buf->x, (size_t)T * d);

        K->rmsnorm(buf->x, L->ffn_norm, c->rms_norm_eps, T, d, buf->xn);
        const kern_gemm_out gate_up[2] = {{L->w_gate, L->b_gate, buf->gate, f}, {L->w_up, L->b_up, buf->up, f}};
        gemm_group(K, buf->xn, T, d, 2, gate_up);
        if (b->n_lora) {
            lora_add(K, b, buf, l, 4, buf->xn, d, buf->gate, f);
            lora_add(K, b, buf, l, 5, buf->xn, d, buf->up, f);
        }
        K->silu_mul(buf->gate, buf->up, buf->gate, (size_t)T * f);
        K->gemm(buf->gate, L->w_down, L->b_down, buf->x, T, d, f, lead);
        if (b->n_lora) lora_add(K, b, buf, l, 6, buf->gate, f, buf->x, d);
        if (comm) comm->all_reduce(comm->ctx, buf->x, (size_t)T * d);
    }

    if (b->n_logits)
        K->lm_head(buf->x, b->logit_rows, b->n_logits, w->final_norm, c->rms_norm_eps, w->lm_head, c->vocab_size, d,
                   buf->lm_tmp, buf->logits);
}
