/* cost_roofline.c — the roofline kind (see roofline.h for the model).
 *
 * Conventions of the operator counts below, per GPU and summed over layers:
 *   - a GEMM of M tokens, K inputs, N outputs does 2·M·K·N FLOPs and moves
 *     its weights (K·N at the weight dtype) plus its input and output
 *     activations (M·K and M·N, bf16); elementwise work fused into a GEMM
 *     (SiLU·mul, rotary, biases) is not counted;
 *   - attention does 2·d FLOPs per (query, key) pair per head for QKᵀ and as
 *     many for PV, over the causal pairs; it reads the KV cache of every
 *     attended token once (context + new), writes the new tokens' KV, and
 *     moves Q and O;
 *   - an RMSNorm does 4 FLOPs per element and reads and writes its input;
 *   - routed experts: a token picks top_k of E experts uniformly, so a batch
 *     of T tokens touches E·(1 − (1 − k/E)^T) distinct experts, whose
 *     weights are read once each;
 *   - MLA (DeepSeek): prefill chunks use the decompressed form (K and V of
 *     context and new tokens expanded by kv_b_proj, then ordinary attention
 *     with head dims nope+rope and v); decodes use the absorbed form
 *     (W_UK folded into the query, attention over the kv_lora_rank + rope
 *     latent shared by all heads, W_UV applied after). Under tensor
 *     parallelism every GPU reads the whole latent cache.
 * Weights are at the cost file's dtype (bf16 2 bytes, fp8 1 byte) in the
 * layers; the embedding, router and LM head stay bf16 as in DeepSeek-V3's FP8
 * checkpoint; activations and collectives are bf16. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/collective.h"
#include "sim/cost/cost_impl.h"
#include "sim/cost/kernel_time.h"
#include "sim/cost/roofline.h"

#define AB 2.0   /* bytes of a bf16 activation */

static const char *const op_names[RL_N_OPS] = {
    "embed", "norm", "qkv_proj", "mla_down_proj", "mla_up_proj", "attn_prefill", "attn_decode",
    "o_proj", "mlp", "moe_gate", "moe_experts", "shared_expert", "mtp_proj", "lm_head", "rope", "activation",
    "allreduce", "alltoall", "logits_gather",
};

const char *rl_op_name(int op)
{
    return (op >= 0 && op < RL_N_OPS) ? op_names[op] : "?";
}

/* Layer GEMMs run at the file's dtype; the rest at bf16 peak. */
static bool op_in_weight_dtype(int op)
{
    return op == RL_QKV_PROJ || op == RL_MLA_DOWN_PROJ || op == RL_MLA_UP_PROJ || op == RL_O_PROJ ||
           op == RL_MLP || op == RL_MOE_EXPERTS || op == RL_SHARED_EXPERT || op == RL_MTP_PROJ;
}

static bool op_is_collective(int op)
{
    return op == RL_ALLREDUCE || op == RL_ALLTOALL || op == RL_LOGITS_GATHER;
}

typedef struct cost_roofline {
    cost_model base;
    rl_model model, draft;
    bool has_draft;          /* a draft_model preset was named */
    rl_gpu gpu;
    uint32_t tp;             /* the file's own size */
    bool ep;                 /* experts spread over the tp GPUs (ep == tp) */
    bool fp8;
    double kv_bytes;         /* per element of the KV cache */
    double eff[RL_N_OPS];
    rl_kernel kern[RL_K_N];  /* the GPU preset's kernel parameters, or the pure roofline's */
    double latency_s;
} cost_roofline;

static const cost_ops roofline_ops;

static const cost_roofline *as_roofline(const cost_model *m)
{
    return (m && m->ops == &roofline_ops) ? (const cost_roofline *)m : NULL;
}

/* The batch as the counts below read it. */
typedef struct shape {
    double Tp, Sp, Td, Sd;   /* prefill tokens and chunks, decode tokens and sequences */
    double pctx, pairs_p;    /* Σ prefill context; causal (query, key) pairs of the chunks */
    double dctx, pairs_d;    /* Σ decode context; pairs of the decodes' 1 + k queries */
    /* The whole batch's tokens, for the routed experts every rank serves,
     * and whether the fields above are one data-parallel rank's own
     * requests (else the batch's, spread evenly over the ranks). */
    double T_all;
    bool one_rank;
} shape;

static shape shape_of(const cost_batch *b)
{
    shape s;
    s.Tp = b->prefill_tokens;
    s.Sp = b->prefill_seqs;
    s.Td = b->decode_tokens > b->decode_seqs ? b->decode_tokens : b->decode_seqs;
    s.Sd = b->decode_seqs;
    s.pctx = (double)b->prefill_context;
    s.dctx = (double)b->decode_context;
    s.pairs_p = (double)b->prefill_causal;
    if (s.pairs_p == 0 && s.Tp > 0) {
        /* Unknown: equal chunks of Tp/Sp tokens give Σ new² = Tp²/Sp, and
         * causal = attn − (Σ new² − Tp)/2 with attn = Σ new·(ctx + new). */
        double sp = s.Sp > 0 ? s.Sp : 1;
        double attn = b->prefill_attn ? (double)b->prefill_attn : s.Tp * s.Tp / sp;
        s.pairs_p = fmax(attn - (s.Tp * s.Tp / sp - s.Tp) / 2, s.Tp);
    }
    /* Each decode's queries: n̄ = 1 + k tokens, the j-th attending ctx + j. */
    double nbar = s.Sd > 0 ? s.Td / s.Sd : 0;
    s.pairs_d = nbar * s.dctx + s.Td * (nbar + 1) / 2;
    s.T_all = s.Tp + s.Td;
    s.one_rank = false;
    return s;
}

/* How a model is laid out on g GPUs. */
typedef struct layout {
    double g, ts, hs;        /* GPUs; share of the tokens; share of heads and columns */
    double qh, kvh;          /* query and KV heads per GPU */
    bool ep;
} layout;

static layout layout_of(const rl_model *md, uint32_t g, bool ep)
{
    layout l;
    l.g = g;
    l.ep = ep && g > 1;
    l.ts = l.ep ? 1.0 / g : 1.0;
    l.hs = l.ep ? 1.0 : 1.0 / g;
    l.qh = md->heads * l.hs;
    /* Fewer KV heads than GPUs: each GPU keeps a copy of one. */
    l.kvh = l.ep ? md->kv_heads : (md->kv_heads >= g ? (double)md->kv_heads / g : 1);
    return l;
}

/* One forward's counting and timing: every kernel call gets its FLOPs and
 * bytes counted and its time from kernel_time.h, with the parameters of
 * r's GPU (or the pure roofline's, "kernels": "none"). */
typedef struct counter {
    const cost_roofline *r;
    rl_breakdown *out;
    double hbm;
} counter;

static double peak_of(const counter *c, int op)
{
    const rl_gpu *g = &c->r->gpu;
    return (c->r->fp8 && op_in_weight_dtype(op) ? g->fp8_tflops : g->bf16_tflops) * 1e12;
}

static const rl_kernel *kernel(const counter *c, int kind)
{
    return &c->r->kern[kind];
}

/* Adds calls of one kernel: its time, and the compute or memory share of
 * it for the operator's bound. */
static void account(counter *c, int op, double calls, double flops, double bytes, double seconds, double tc,
                    double tm)
{
    rl_op_cost *o = &c->out->op[op];
    o->flops += calls * flops;
    o->bytes += calls * bytes;
    o->calls += calls;
    o->seconds += calls * seconds;
    o->compute_s += calls * tc;
    o->memory_s += calls * tm;
}

static void gemm(counter *c, int op, double calls, double M, double K, double N, double wbytes)
{
    if (M <= 0 || calls <= 0) return;
    const rl_kernel *k = kernel(c, RL_K_GEMM);
    double peak = peak_of(c, op), eff = c->r->eff[op], bytes = K * N * wbytes + M * K * AB + M * N * AB;
    account(c, op, calls, 2 * M * K * N, bytes, rl_gemm_s(k, peak, c->hbm, M, K, N, wbytes, eff),
            2 * (M + k->half_rows) * K * N / (peak * k->compute_eff * eff), bytes / (c->hbm * k->memory_eff * eff));
}

/* A MoE layer's grouped GEMM: `rows` token-expert pairs over `experts`. */
static void grouped(counter *c, int op, double calls, double rows, double experts, double K, double N, double wbytes)
{
    if (rows <= 0 || calls <= 0) return;
    const rl_kernel *k = kernel(c, RL_K_GEMM);
    double peak = peak_of(c, op), eff = c->r->eff[op];
    double bytes = experts * K * N * wbytes + rows * (K + N) * AB;
    account(c, op, calls, 2 * rows * K * N, bytes, rl_grouped_gemm_s(k, peak, c->hbm, rows, experts, K, N, wbytes, eff),
            2 * (rows + experts * k->half_rows) * K * N / (peak * k->compute_eff * eff),
            bytes / (c->hbm * k->memory_eff * eff));
}

static void attention(counter *c, int op, double calls, double flops, double bytes)
{
    if (calls <= 0 || (flops <= 0 && bytes <= 0)) return;
    const rl_kernel *k = kernel(c, RL_K_ATTENTION);
    double peak = peak_of(c, op), eff = c->r->eff[op];
    account(c, op, calls, flops, bytes, rl_attention_s(k, peak, c->hbm, flops, bytes, eff),
            flops / (peak * k->compute_eff * eff), bytes / (c->hbm * k->memory_eff * eff));
}

/* A kernel streaming `bytes` that walks each token's `row` elements. */
static void stream(counter *c, int op, int kind, double calls, double flops, double bytes, double row)
{
    if (calls <= 0 || bytes <= 0) return;
    const rl_kernel *k = kernel(c, kind);
    double eff = c->r->eff[op];
    account(c, op, calls, flops, bytes, rl_stream_s(k, c->hbm, bytes, row, eff), 0,
            bytes / (c->hbm * k->memory_eff * eff));
}

/* An RMSNorm of `width` over `rows` tokens: 4 FLOPs an element, the
 * input read and written, its weights read. */
static void norm(counter *c, double calls, double rows, double width)
{
    stream(c, RL_NORM, RL_K_NORM, calls, 4 * rows * width, 2 * rows * width * AB + width * AB, width);
}

/* FLOPs and bytes of a forward over Ld dense and Lm MoE layers (plus the
 * MTP module's own parts when mtp) of model md on g GPUs, and every
 * kernel's time. */
static void count_ops(const cost_roofline *r, const rl_model *md, double Ld, double Lm, bool mtp, const shape *s,
                      uint32_t g, rl_breakdown *out)
{
    memset(out, 0, sizeof *out);
    counter cn = {r, out, r->gpu.hbm_GBps * 1e9}, *c = &cn;
    layout l = layout_of(md, g, r->ep && md->moe);
    if (s->one_rank) l.ts = 1;   /* the shape is already one rank's */
    double wb = r->fp8 ? 1 : 2, kvb = r->kv_bytes;
    double h = md->hidden, L = Ld + Lm, T = s->Tp + s->Td, Tt = T * l.ts, ts = l.ts;
    double qh = l.qh, kvh = l.kvh;

    if (Tt > 0) {
        const rl_kernel *k = kernel(c, RL_K_EMBED);
        double bytes = 2 * Tt * h * AB, eff = r->eff[RL_EMBED];
        account(c, RL_EMBED, 1, 0, bytes, rl_embedding_s(k, c->hbm, Tt, bytes, eff), 0,
                bytes / (c->hbm * k->memory_eff * eff));
    }

    /* two per layer and the final one; MLA's q and kv latents; MTP's enorm and hnorm */
    norm(c, 2 * L + 1 + (mtp ? 2 : 0), Tt, h);
    if (md->mla) {
        if (md->q_lora_rank) norm(c, L, Tt, md->q_lora_rank);
        norm(c, L, Tt, md->kv_lora_rank);
    }

    if (!md->mla) {
        double hd = md->head_dim;
        gemm(c, RL_QKV_PROJ, L, Tt, h, (qh + 2 * kvh) * hd, wb);
        /* rotary on Q and K, reading its cos/sin cache */
        stream(c, RL_ROPE, RL_K_ROPE, L, 0, 4 * Tt * (qh + kvh) * hd + 2 * Tt * hd, (qh + kvh) * hd);
        if (s->Tp > 0)
            attention(c, RL_ATTN_PREFILL, L, 4 * hd * qh * s->pairs_p * ts,
                      ts * ((s->pctx + 2 * s->Tp) * 2 * kvh * hd * kvb + 2 * s->Tp * qh * hd * AB));
        if (s->Sd > 0)
            attention(c, RL_ATTN_DECODE, L, 4 * hd * qh * s->pairs_d * ts,
                      ts * ((s->dctx + 2 * s->Td) * 2 * kvh * hd * kvb + 2 * s->Td * qh * hd * AB));
        gemm(c, RL_O_PROJ, L, Tt, qh * hd, h, wb);
    } else {
        double qr = md->q_lora_rank, kr = md->kv_lora_rank, rope = md->qk_rope_dim;
        double nope = md->qk_nope_dim, vd = md->v_head_dim;
        gemm(c, RL_MLA_DOWN_PROJ, L, Tt, h, qr + kr + rope, wb);           /* replicated */
        gemm(c, RL_MLA_UP_PROJ, L, Tt, qr > 0 ? qr : h, qh * (nope + rope), wb);
        stream(c, RL_ROPE, RL_K_ROPE, L, 0, 4 * Tt * (qh + 1) * rope + 2 * Tt * rope, (qh + 1) * rope);
        if (s->Tp > 0) {
            double kv_tokens = (s->pctx + s->Tp) * ts;
            gemm(c, RL_MLA_UP_PROJ, L, kv_tokens, kr, qh * (nope + vd), wb);   /* decompress K, V */
            attention(c, RL_ATTN_PREFILL, L, 2 * (nope + rope + vd) * qh * s->pairs_p * ts,
                      kv_tokens * (qh * (nope + vd) * AB + rope * kvb) +
                          ts * s->Tp * ((kr + rope) * kvb + qh * (nope + rope + vd) * AB));
        }
        if (s->Sd > 0) {
            /* absorb W_UK and W_UV: one batched GEMM over the heads each, a
             * weight matrix per head (a grouped GEMM of qh groups) */
            grouped(c, RL_MLA_UP_PROJ, L, s->Td * ts * qh, qh, nope, kr, wb);
            grouped(c, RL_MLA_UP_PROJ, L, s->Td * ts * qh, qh, kr, vd, wb);
            attention(c, RL_ATTN_DECODE, L, 2 * (2 * kr + rope) * qh * s->pairs_d * ts,
                      ts * ((s->dctx + 2 * s->Td) * (kr + rope) * kvb + s->Td * qh * (2 * kr + rope) * AB));
        }
        gemm(c, RL_O_PROJ, L, Tt, qh * vd, h, wb);
    }

    /* SiLU(gate)·up reads 2·I and writes I per token */
    double I = md->intermediate, Ig_dense = I * l.hs;
    gemm(c, RL_MLP, Ld, Tt, h, 2 * Ig_dense, wb);
    stream(c, RL_ACT, RL_K_ACT, Ld, 0, 3 * Tt * Ig_dense * AB, Ig_dense);
    gemm(c, RL_MLP, Ld, Tt, Ig_dense, h, wb);

    if (Lm > 0 && md->moe) {
        double E = md->experts, k = md->top_k, Im = md->moe_intermediate, Ta = s->T_all;
        gemm(c, RL_MOE_GATE, Lm, Tt, h, E, AB);
        double here = l.ep ? E / g : E, Ig = l.ep ? Im : Im / g, A = Ta * k * (l.ep ? 1.0 / g : 1.0);
        double active = here * (1 - pow(1 - k / E, Ta));
        grouped(c, RL_MOE_EXPERTS, Lm, A, active, h, 2 * Ig, wb);
        stream(c, RL_ACT, RL_K_ACT, Lm, 0, 3 * A * Ig * AB, Ig);
        grouped(c, RL_MOE_EXPERTS, Lm, A, active, Ig, h, wb);
        double Is = (double)md->shared_experts * Im;
        if (md->shared_experts) {
            gemm(c, RL_SHARED_EXPERT, Lm, Tt, h, 2 * Is * l.hs, wb);
            stream(c, RL_ACT, RL_K_ACT, Lm, 0, 3 * Tt * Is * l.hs * AB, Is * l.hs);
            gemm(c, RL_SHARED_EXPERT, Lm, Tt, Is * l.hs, h, wb);
        }
        if (l.ep) {
            /* dispatch and combine: each GPU's tokens' k copies of h */
            rl_op_cost *o = &out->op[RL_ALLTOALL];
            o->bytes += Lm * 2 * Tt * k * h * AB * (g - 1.0) / g;
            o->calls += 2 * Lm;
            o->msg = Tt * k * h * AB;
        }
    }
    if (mtp) gemm(c, RL_MTP_PROJ, 1, Tt, 2 * h, h, wb);                        /* replicated */

    double M = (s->Td + s->Sp) * ts, V = md->vocab;
    gemm(c, RL_LM_HEAD, 1, M, h, V * l.hs, AB);

    if (!l.ep && g > 1) {
        double calls = 2 * L + 1;                   /* attention, MLP, the embedding */
        rl_op_cost *o = &out->op[RL_ALLREDUCE];
        o->bytes += calls * 2 * (g - 1.0) / g * T * h * AB;
        o->calls += calls;
        o->msg = T * h * AB;
        o = &out->op[RL_LOGITS_GATHER];
        o->bytes += (g - 1.0) / g * M * V * AB;
        o->calls += 1;
        o->msg = M * V * AB;
    }
}

/* One call of a collective on r's GPU with g GPUs in the group, per_node
 * of them on each node (collective.h). */
static double collective_call(const cost_roofline *r, int op, uint32_t g, double msg, double eff)
{
    uint32_t per_node = g < r->gpu.gpus_per_node ? g : r->gpu.gpus_per_node;
    if (op == RL_ALLREDUCE) return rl_allreduce_s(&r->gpu, g, per_node, msg, eff);
    if (op == RL_LOGITS_GATHER) return rl_allgather_s(&r->gpu, g, per_node, msg, eff);
    return rl_alltoall_s(&r->gpu, g, per_node, msg, eff);
}

/* The collectives' times, every operator's bound, and the sum. */
static void price(const cost_roofline *r, uint32_t g, rl_breakdown *out)
{
    out->total_s = 0;
    for (int i = 0; i < RL_N_OPS; i++) {
        rl_op_cost *o = &out->op[i];
        o->bound = "";
        if (o->calls == 0) continue;
        if (op_is_collective(i)) {
            o->seconds = o->calls * (collective_call(r, i, g, o->msg, r->eff[i]) + r->latency_s);
            o->bound = "link";
        } else {
            o->bound = o->compute_s >= o->memory_s ? "compute" : "memory";
        }
        out->total_s += o->seconds;
    }
}

/* Why md cannot run on g GPUs (ep: experts spread), or "" when it can. */
static int check_layout(const rl_model *md, const rl_gpu *gpu, uint32_t g, bool ep, char *why, size_t n)
{
    why[0] = '\0';
    if (g == 0) return snprintf(why, n, "tensor-parallel size 0");
    if (g > gpu->gpus_per_node && g % gpu->gpus_per_node)
        return snprintf(why, n, "tp %u spans nodes of %u GPUs (%s) unevenly", g, gpu->gpus_per_node, gpu->name);
    if (ep && md->moe) {
        if (md->experts % g)
            return snprintf(why, n, "%u experts of %s do not spread evenly over %u GPUs", md->experts, md->name,
                            g);
        return 0;
    }
    if (md->heads % g)
        return snprintf(why, n, "tp %u does not divide the %u attention heads of %s", g, md->heads, md->name);
    if (!md->mla && (md->kv_heads >= g ? md->kv_heads % g : g % md->kv_heads))
        return snprintf(why, n, "tp %u and the %u KV heads of %s neither divide the other", g, md->kv_heads,
                        md->name);
    return 0;
}

static int roofline_check_tp(const cost_model *m, uint32_t tp, rh_err *e)
{
    const cost_roofline *r = as_roofline(m);
    uint32_t g = tp ? tp : r->tp;
    char why[512];
    if (check_layout(&r->model, &r->gpu, g, r->ep, why, sizeof why) ||
        (r->has_draft && check_layout(&r->draft, &r->gpu, g, r->ep, why, sizeof why)))
        return rh_fail(e, "%s: field 'tp': %s", m->path[0] ? m->path : "roofline cost model", why);
    return 0;
}

static double dense_layers(const rl_model *md)
{
    return md->moe ? md->dense_layers : md->layers;
}

static double roofline_step(const cost_model *m, const cost_batch *b)
{
    rl_breakdown bd;
    return roofline_breakdown(m, b, &bd, NULL) < 0 ? NAN : bd.total_s;
}

/* Data-parallel attention (ep): each request runs on one rank. The
 * batch's sequences are placed as a balancing dispatcher places them, the
 * next largest on the least loaded rank (load: new tokens, plus a decode's
 * context at 1/128 of a token), and rank[i] says where sequence i went. */
static void place(const cost_batch *b, uint32_t g, uint32_t *rank, uint32_t *order, double *load)
{
    for (uint32_t i = 0; i < b->n; i++) order[i] = i;
    for (uint32_t i = 1; i < b->n; i++)   /* by descending load, stable */
        for (uint32_t j = i; j > 0; j--) {
            const cost_seq *x = &b->seqs[order[j]], *y = &b->seqs[order[j - 1]];
            double lx = x->n_new + (x->prefill ? 0 : x->context / 128.0);
            double ly = y->n_new + (y->prefill ? 0 : y->context / 128.0);
            if (lx <= ly) break;
            uint32_t t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    for (uint32_t k = 0; k < g; k++) load[k] = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        const cost_seq *x = &b->seqs[order[i]];
        uint32_t best = 0;
        for (uint32_t k = 1; k < g; k++)
            if (load[k] < load[best]) best = k;
        rank[order[i]] = best;
        load[best] += x->n_new + (x->prefill ? 0 : x->context / 128.0);
    }
}

/* The step under data-parallel attention: every rank's own requests through
 * attention and the dense parts, all the batch's tokens through the routed
 * experts; the ranks step together, so the slowest one's forward is the
 * step's. */
static int per_rank(const cost_roofline *r, const cost_batch *b, uint32_t g, rl_breakdown *out, rh_err *e)
{
    uint32_t *rank = malloc(2 * (size_t)b->n * sizeof *rank);
    cost_seq *mine = malloc((size_t)b->n * sizeof *mine);
    double *load = malloc(g * sizeof *load);
    if (!rank || !mine || !load) {
        free(rank), free(mine), free(load);
        return rh_fail(e, "out of memory");
    }
    place(b, g, rank, rank + b->n, load);
    double T_all = (double)b->prefill_tokens + (b->decode_tokens > b->decode_seqs ? b->decode_tokens : b->decode_seqs);
    double Ld = dense_layers(&r->model);
    out->total_s = -1;
    for (uint32_t k = 0; k < g; k++) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < b->n; i++)
            if (rank[i] == k) mine[n++] = b->seqs[i];
        cost_batch rb = {.seqs = mine, .n = n, .tp = b->tp};
        cost_batch_summarize(&rb);
        shape s = shape_of(&rb);
        s.T_all = T_all;
        s.one_rank = true;
        rl_breakdown bd;
        count_ops(r, &r->model, Ld, r->model.layers - Ld, false, &s, g, &bd);
        price(r, g, &bd);
        if (bd.total_s > out->total_s) *out = bd;   /* an idle rank still runs the experts' layers */
    }
    free(rank), free(mine), free(load);
    return 0;
}

int roofline_breakdown(const cost_model *m, const cost_batch *b, rl_breakdown *out, rh_err *e)
{
    const cost_roofline *r = as_roofline(m);
    if (!r) return rh_fail(e, "%s: not a roofline cost model", m ? m->path : "(null)");
    if (roofline_check_tp(m, b->tp, e) < 0) return -1;
    uint32_t g = b->tp ? b->tp : r->tp;
    /* A batch whose sequences are known is placed rank by rank; one rebuilt
     * from a step record (aggregates only) is spread evenly. */
    if (r->ep && r->model.moe && g > 1 && b->seqs && b->n) return per_rank(r, b, g, out, e);
    shape s = shape_of(b);
    double Ld = dense_layers(&r->model);
    count_ops(r, &r->model, Ld, r->model.layers - Ld, false, &s, g, out);
    price(r, g, out);
    return 0;
}

int roofline_draft_breakdown(const cost_model *m, uint32_t n, uint64_t context, uint32_t tp, rl_breakdown *out,
                             rh_err *e)
{
    const cost_roofline *r = as_roofline(m);
    if (!r) return rh_fail(e, "%s: not a roofline cost model", m ? m->path : "(null)");
    if (!r->has_draft && !r->model.mtp_layers)
        return rh_fail(e, "%s: neither an MTP module in %s nor a draft_model", m->path, r->model.name);
    if (roofline_check_tp(m, tp, e) < 0) return -1;
    uint32_t g = tp ? tp : r->tp;
    cost_batch d;
    memset(&d, 0, sizeof d);
    d.decode_seqs = d.decode_tokens = n;
    d.decode_context = context;
    shape s = shape_of(&d);
    if (r->has_draft) {
        double Ld = dense_layers(&r->draft);
        count_ops(r, &r->draft, Ld, r->draft.layers - Ld, false, &s, g, out);
    } else {
        /* one MTP module: its decoder layer is a MoE layer in a MoE model */
        count_ops(r, &r->model, r->model.moe ? 0 : 1, r->model.moe ? 1 : 0, true, &s, g, out);
    }
    price(r, g, out);
    return 0;
}

static double roofline_draft(const cost_model *m, uint32_t n, uint64_t context, uint32_t tp)
{
    const cost_roofline *r = as_roofline(m);
    if (!r->has_draft && !r->model.mtp_layers) return cost_draft_fallback(m, n, context, tp);
    rl_breakdown bd;
    return roofline_draft_breakdown(m, n, context, tp, &bd, NULL) < 0 ? NAN : bd.total_s;
}

static int roofline_terms(const cost_model *m, const cost_batch *b, cost_term *t, int max)
{
    rl_breakdown bd;
    if (roofline_breakdown(m, b, &bd, NULL) < 0) {
        t[0] = (cost_term){"unsupported tp", NAN, 0, 0, ""};
        return 1;
    }
    int n = 0;
    for (int i = 0; i < RL_N_OPS && n < max; i++)
        if (bd.op[i].seconds > 0)
            t[n++] = (cost_term){op_names[i], bd.op[i].seconds, bd.op[i].flops, bd.op[i].bytes, bd.op[i].bound};
    return n;
}

const rl_model *roofline_model(const cost_model *m)
{
    const cost_roofline *r = as_roofline(m);
    return r ? &r->model : NULL;
}

const rl_gpu *roofline_gpu(const cost_model *m)
{
    const cost_roofline *r = as_roofline(m);
    return r ? &r->gpu : NULL;
}

uint32_t roofline_tp(const cost_model *m, bool *ep)
{
    const cost_roofline *r = as_roofline(m);
    if (ep) *ep = r && r->ep;
    return r ? r->tp : 0;
}

/* Weights per GPU: the layers at the file's dtype, the embedding, LM head
 * and final norm in bf16; under ep the experts spread and the rest
 * replicated, else everything split. KV per token per GPU: MLA's latent
 * whole on every GPU (on its request's rank under ep), else K and V of the
 * GPU's KV heads (one copied head when fewer heads than GPUs). The MTP
 * module (its layer and projection; it shares embedding and head) or the
 * draft model go to the draft fields. */
static void model_memory(const cost_roofline *r, const rl_model *md, uint32_t g, bool mtp, double *weights,
                         double *kv_per_token)
{
    rl_params p;
    rl_model_params(md, &p);
    double wb = r->fp8 ? 1 : 2, h = md->hidden;
    double outer = (double)md->vocab * h * (md->tie_embeddings ? 1 : 2) + h;
    double layers = mtp ? p.mtp : p.total - outer;
    double experts = !mtp ? p.experts : md->moe ? md->mtp_layers * 3.0 * h * md->moe_intermediate * md->experts : 0;
    bool ep = r->ep && md->moe && g > 1;
    double split = ep ? (layers - experts) + experts / g : layers / g;
    *weights = split * wb + (mtp ? 0 : outer * 2 / (ep ? 1 : g));
    double L = mtp ? md->mtp_layers : md->layers;
    if (md->mla) *kv_per_token = ((double)md->kv_lora_rank + md->qk_rope_dim) * L * r->kv_bytes;
    else *kv_per_token = (md->kv_heads >= g ? (double)md->kv_heads / g : 1) * md->head_dim * 2 * L * r->kv_bytes;
}

static void roofline_memory(const cost_model *m, uint32_t tp, cost_memory *out)
{
    const cost_roofline *r = as_roofline(m);
    uint32_t g = tp ? tp : r->tp;
    out->gpu_bytes = r->gpu.memory_GB * 1073741824.0;
    out->gpus = g;
    out->context_length = r->model.max_position;
    out->kv_per_rank = r->ep && r->model.moe && g > 1;
    out->hidden = r->model.hidden;
    out->intermediate_per_gpu = r->model.intermediate / g;
    out->vocab = r->model.vocab;
    snprintf(out->gpu_name, sizeof out->gpu_name, "%s", r->gpu.name);
    snprintf(out->model_name, sizeof out->model_name, "%s", r->model.name);
    model_memory(r, &r->model, g, false, &out->weight_bytes, &out->kv_bytes_per_token);
    if (r->has_draft)
        model_memory(r, &r->draft, g, false, &out->draft_weight_bytes, &out->draft_kv_bytes_per_token);
    else if (r->model.mtp_layers)
        model_memory(r, &r->model, g, true, &out->draft_weight_bytes, &out->draft_kv_bytes_per_token);
}

static void roofline_free(cost_model *m)
{
    free(m);
}

static const cost_ops roofline_ops = {
    .kind = "roofline",
    .step_time = roofline_step,
    .draft_time = roofline_draft,
    .check_tp = roofline_check_tp,
    .breakdown = roofline_terms,
    .memory = roofline_memory,
    .free = roofline_free,
};

static int parse_dtype(json_t *root, const char *key, const char *def, bool allow_fp16, double *bytes,
                       const cost_src *src, rh_err *e)
{
    const char *d;
    if (cj_string(root, "", key, 0, def, &d, src, e) < 0) return -1;
    if (!strcmp(d, "bf16") || (allow_fp16 && !strcmp(d, "fp16"))) *bytes = 2;
    else if (!strcmp(d, "fp8")) *bytes = 1;
    else return cj_fail(src, "", key, e, "'%s' is not a dtype (bf16, fp16 or fp8)", d);
    return 0;
}

static int parse_efficiency(json_t *root, cost_roofline *r, const cost_src *src, rh_err *e)
{
    for (int i = 0; i < RL_N_OPS; i++) r->eff[i] = 1;
    json_t *eo = json_object_get(root, "efficiency");
    if (!eo) return 0;
    if (!json_is_object(eo))
        return cj_fail(src, "", "efficiency", e, "must be an object of factors in (0, 1], e.g. {\"mlp\": 0.7}");
    const char *allowed[RL_N_OPS + 2];
    allowed[0] = "default";
    for (int i = 0; i < RL_N_OPS; i++) allowed[i + 1] = op_names[i];
    allowed[RL_N_OPS + 1] = NULL;
    double def;
    if (cj_only_keys(eo, "efficiency", (const char *const *)allowed, src, e) < 0 ||
        cj_number(eo, "efficiency", "default", 0, 1, 1e-6, 1, &def, src, e) < 0)
        return -1;
    for (int i = 0; i < RL_N_OPS; i++)
        if (cj_number(eo, "efficiency", op_names[i], 0, def, 1e-6, 1, &r->eff[i], src, e) < 0) return -1;
    return 0;
}

cost_model *cost_roofline_parse(json_t *root, const cost_src *src, rh_err *e)
{
    static const char *const allowed[] = {"kind", "version", "model", "gpu", "tp", "ep", "dtype", "kv_dtype",
                                          "efficiency", "step_overhead_s", "collective_latency_s",
                                          "draft_model", "draft_ratio", "kernels", "compute_efficiency",
                                          "memory_efficiency", "fit", "comment", NULL};
    cost_roofline *r = calloc(1, sizeof *r);
    if (!r || cost_model_init(&r->base, &roofline_ops, src) < 0) {
        if (r) free(r->base.path);
        free(r);
        rh_fail(e, "%s: out of memory", src->label);
        return NULL;
    }
    const char *model, *gpu, *draft, *kernels;
    uint32_t ep;
    double wbytes;
    if (cj_only_keys(root, "", allowed, src, e) < 0 || cj_string(root, "", "model", 1, NULL, &model, src, e) < 0 ||
        cj_string(root, "", "gpu", 1, NULL, &gpu, src, e) < 0 ||
        cj_string(root, "", "draft_model", 0, NULL, &draft, src, e) < 0 ||
        cj_string(root, "", "kernels", 0, "preset", &kernels, src, e) < 0 ||
        cj_uint(root, "", "tp", 0, 1, 1, 4096, &r->tp, src, e) < 0 ||
        cj_uint(root, "", "ep", 0, 1, 1, 4096, &ep, src, e) < 0 ||
        parse_dtype(root, "dtype", "bf16", true, &wbytes, src, e) < 0 ||
        parse_dtype(root, "kv_dtype", "bf16", true, &r->kv_bytes, src, e) < 0 ||
        cj_number(root, "", "step_overhead_s", 0, 0, 0, 10, &r->base.over.step_s, src, e) < 0 ||
        cj_number(root, "", "collective_latency_s", 0, 0, 0, 1, &r->latency_s, src, e) < 0 ||
        cj_number(root, "", "draft_ratio", 0, COST_DRAFT_RATIO_DEFAULT, 0, 100, &r->base.draft_ratio, src, e) < 0 ||
        parse_efficiency(root, r, src, e) < 0)
        goto fail;
    r->fp8 = wbytes == 1;
    if (rl_model_resolve(model, "model", src, &r->model, e) < 0 || rl_gpu_resolve(gpu, "gpu", src, &r->gpu, e) < 0)
        goto fail;
    if (draft) {
        if (rl_model_resolve(draft, "draft_model", src, &r->draft, e) < 0) goto fail;
        r->has_draft = true;
    }
    if (strcmp(kernels, "preset") && strcmp(kernels, "none")) {
        cj_fail(src, "", "kernels", e, "'%s' is not preset (the GPU's measured kernels) or none (the pure roofline)",
                kernels);
        goto fail;
    }
    /* A deployment's own shares of its GPU's kernels (what `rehearse fit`
     * finds from a live server): every kernel's compute and memory rates. */
    double ce, me;
    if (cj_number(root, "", "compute_efficiency", 0, 1, 1e-3, 10, &ce, src, e) < 0 ||
        cj_number(root, "", "memory_efficiency", 0, 1, 1e-3, 10, &me, src, e) < 0)
        goto fail;
    for (int i = 0; i < RL_K_N; i++) {
        r->kern[i] = strcmp(kernels, "none") ? r->gpu.kern[i] : rl_kernel_pure();
        r->kern[i].compute_eff *= ce;
        r->kern[i].memory_eff *= me;
    }
    if (r->fp8 && r->gpu.fp8_tflops == 0) {
        cj_fail(src, "", "dtype", e, "fp8 needs FP8 tensor cores, and GPU %s has none (fp8_tflops is 0)",
                r->gpu.name);
        goto fail;
    }
    if (ep != 1 && ep != r->tp) {
        cj_fail(src, "", "ep", e, "%u: expert parallelism spreads the experts over all tp GPUs, so ep is 1 or "
                "equal to tp (%u)", ep, r->tp);
        goto fail;
    }
    if (ep > 1 && !r->model.moe) {
        cj_fail(src, "", "ep", e, "%u: model %s has no experts to spread", ep, r->model.name);
        goto fail;
    }
    r->ep = ep > 1;
    if (roofline_check_tp(&r->base, 0, e) < 0) goto fail;
    return &r->base;
fail:
    cost_free(&r->base);
    return NULL;
}
