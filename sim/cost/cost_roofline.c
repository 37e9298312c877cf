/* cost_roofline.c — the roofline kind (see roofline.h for the model): a
 * forward's kernels (roofline_forward.c) laid out on the GPUs as the
 * serving flags say, its collectives on the GPU preset's links, the gaps of
 * a CUDA graph or the host's eager launches, and the host's time per step
 * (a "hosts" preset). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/collective.h"
#include "sim/cost/cost_impl.h"
#include "sim/cost/kernel_time.h"
#include "sim/cost/roofline.h"
#include "sim/cost/roofline_impl.h"

static const char *const op_names[RL_N_OPS] = {
    "embed", "norm", "qkv_proj", "mla_down_proj", "mla_up_proj", "attn_prefill", "attn_decode",
    "o_proj", "mlp", "moe_gate", "moe_experts", "shared_expert", "mtp_proj", "lm_head", "rope", "activation",
    "allreduce", "alltoall", "logits_gather", "quant", "kv_store", "copy", "moe_route", "attn_meta", "sample",
    "lora", "lora_load",
};

const char *rl_op_name(int op)
{
    return (op >= 0 && op < RL_N_OPS) ? op_names[op] : "?";
}

static const cost_ops roofline_ops;

static const cost_roofline *as_roofline(const cost_model *m)
{
    return (m && m->ops == &roofline_ops) ? (const cost_roofline *)m : NULL;
}

/* ---- collectives ---- */

double rl_comm_call_s(const cost_roofline *r, int kind, double msg, double n, const rl_layout *l, double eff)
{
    const rl_gpu *g = &r->gpu;
    uint32_t gn = (uint32_t)n, per_node = gn < g->gpus_per_node ? gn : g->gpus_per_node;
    bool one_domain = gn <= (g->links.nvlink_domain ? g->links.nvlink_domain : g->gpus_per_node);
    switch (kind) {
    case RL_COMM_ALLREDUCE: {
        double nccl = rl_allreduce_s(g, gn, per_node, msg, eff);
        return one_domain ? fmin(nccl, rl_custom_allreduce_s(g, msg, eff)) : nccl;
    }
    case RL_COMM_ALLGATHER:
    case RL_COMM_REDUCE_SCATTER:
        return rl_allgather_s(g, gn, per_node, msg, eff);
    default:
        return rl_deepep_s(g, l->low_latency, gn, per_node, msg, eff);
    }
}

/* ---- the batch and its layout ---- */

static rl_shape shape_of(const cost_batch *b)
{
    rl_shape s = {0};
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
    s.R_all = s.Td + s.Sp;
    return s;
}

/* One rank's share of a batch known only by its aggregates: even. */
static rl_shape shape_share(const rl_shape *all, double ranks)
{
    rl_shape s = *all;
    double f = 1 / ranks;
    s.Tp *= f, s.Sp *= f, s.Td *= f, s.Sd *= f, s.pctx *= f, s.pairs_p *= f, s.dctx *= f, s.pairs_d *= f;
    s.lora_T *= f;   /* each micro-batch still reads every adapter: lora_k stays */
    return s;
}

static const cost_serving *serving_of(const cost_roofline *r, const cost_batch *b)
{
    return b->serving ? b->serving : &r->serving;
}

static bool is_deepseek(const rl_model *md)
{
    return md->mla && md->moe;
}

static rl_layout layout_of(const cost_roofline *r, const rl_model *md, uint32_t g, const cost_serving *sv,
                           const rl_shape *all)
{
    rl_layout l;
    memset(&l, 0, sizeof l);
    l.g = g;
    l.dp = sv->dp > 1 && g > 1 ? sv->dp : 1;
    l.atp = g / l.dp;
    l.qh = md->heads / l.atp;
    /* Fewer KV heads than GPUs: each GPU keeps a copy of one. */
    l.kvh = md->kv_heads >= l.atp ? md->kv_heads / l.atp : 1;
    l.ep = md->moe && g > 1 && sv->ep > 1;
    l.deepep = l.ep && sv->deepep;
    bool decode_only = all->Tp == 0;
    l.low_latency = l.deepep && (sv->deepep_mode == COST_DEEPEP_LOW_LATENCY ||
                                 (sv->deepep_mode == COST_DEEPEP_AUTO && decode_only));
    l.tbo = sv->two_batch_overlap;
    l.dense_dp = l.dp > 1 && sv->dense_tp == 1;
    l.redundant = l.ep ? sv->redundant_experts : 0;
    l.imbalance = sv->expert_imbalance;
    l.per_node_split = g > r->gpu.gpus_per_node;
    /* SGLang fuses DeepSeek's shared expert into the routed ones when the
     * experts are not spread (deepseek_v2.py: shared-experts fusion) */
    l.fused_shared = is_deepseek(md) && !l.ep && md->shared_experts > 0;
    /* FlashInfer's all-reduce + add + RMSNorm: DeepSeek, tensor-parallel
     * attention on one node, at most 2048 tokens (communicator.py) */
    l.fused_ar_norm = is_deepseek(md) && l.atp > 1 && l.dp == 1 && !l.per_node_split && !l.deepep &&
                      all->T_all <= 2048;
    return l;
}

/* SMs DeepEP's normal kernels take while they run (DeepEP's published
 * figures were measured with 24: its tests' setting). */
#define DEEPEP_NORMAL_SMS 24

/* Bounds of every operator and kernel, and the forward's GPU time. Under
 * two-batch overlap the kernels that hide DeepEP's normal dispatch and
 * combine run on the SMs those leave. */
static void finish(const cost_roofline *r, const rl_counter *c, rl_breakdown *out, bool graph, bool sm_shared)
{
    for (int i = 0; i < RL_N_OPS; i++) {
        rl_op_cost *o = &out->op[i];
        o->bound = o->calls == 0 ? "" : (i == RL_ALLREDUCE || i == RL_ALLTOALL || i == RL_LOGITS_GATHER) ? "link"
                   : o->compute_s >= o->memory_s ? "compute" : "memory";
    }
    for (int i = 0; i < out->nk; i++) {
        rl_kernel_cost *k = &out->k[i];
        k->bound = (k->op == RL_ALLREDUCE || k->op == RL_ALLTOALL || k->op == RL_LOGITS_GATHER) ? "link"
                   : k->compute_s >= k->memory_s ? "compute" : "memory";
    }
    out->graph = graph;
    /* the least a kernel takes in a stream of them: a tiny kernel costs
     * that much however little it does */
    out->gaps_s = 0;
    for (int i = 0; i < out->nk; i++) {
        const rl_kernel_cost *k = &out->k[i];
        if (k->calls > 0) out->gaps_s += k->calls * fmax(0, r->host.kernel_min_s - k->seconds / k->calls);
    }
    /* two-batch overlap: each micro-batch's communication under the other's kernels */
    out->overlap_saved_s = c->scale > 1 ? fmin(c->comm_s, c->compute_s) : 0;
    uint32_t sms = r->gpu.sms;
    out->sm_share_s = sm_shared && sms > DEEPEP_NORMAL_SMS
                          ? out->overlap_saved_s * DEEPEP_NORMAL_SMS / (sms - DEEPEP_NORMAL_SMS) : 0;
    out->total_s = out->kernels_s + out->gaps_s - out->overlap_saved_s + out->sm_share_s;
}

/* Whether a forward of this rank's shape replays a CUDA graph: a decode
 * batch (verify included) of at most cuda_graph_max_bs requests, or any
 * forward when the host runs prefills as graphs too. */
static bool runs_as_graph(const cost_roofline *r, const cost_serving *sv, const rl_shape *s)
{
    if (sv->cuda_graph_max_bs <= 0) return false;
    if (s->Tp > 0) return r->host.prefill_graph;
    return s->Sd <= sv->cuda_graph_max_bs;
}

/* One rank's forward: every kernel, halved into two micro-batches under
 * two-batch overlap (when there are two to make). */
static void forward_of(const cost_roofline *r, const rl_model *md, double Ld, double Lm, bool mtp, const rl_shape *s,
                       const rl_layout *l, bool graph, rl_breakdown *out)
{
    rl_counter c;
    rl_counter_init(&c, r, out);
    if (l->tbo && (s->Sp + s->Sd >= 2 || s->Tp >= 2)) {
        rl_shape half = shape_share(s, 2);
        half.T_all /= 2, half.R_all /= 2;
        c.scale = 2;
        rl_count_forward(&c, md, Ld, Lm, mtp, &half, l);
    } else {
        rl_count_forward(&c, md, Ld, Lm, mtp, s, l);
    }
    finish(r, &c, out, graph, c.scale > 1 && l->deepep && !l->low_latency);
}

static double dense_layers(const rl_model *md)
{
    return md->moe ? md->dense_layers : md->layers;
}

/* Why md cannot run on g GPUs as sv lays it out, or "" when it can. */
static int check_layout(const rl_model *md, const rl_gpu *gpu, uint32_t g, const cost_serving *sv, char *why,
                        size_t n)
{
    why[0] = '\0';
    if (g == 0) return snprintf(why, n, "tensor-parallel size 0");
    if (g > gpu->gpus_per_node && g % gpu->gpus_per_node)
        return snprintf(why, n, "tp %u spans nodes of %u GPUs (%s) unevenly", g, gpu->gpus_per_node, gpu->name);
    uint32_t dp = sv->dp > 1 ? sv->dp : 1;
    if (g % dp) return snprintf(why, n, "dp-size %u does not divide tp %u", dp, g);
    uint32_t atp = g / dp;
    if (sv->ep > 1 && md->moe && (md->experts + sv->redundant_experts) % g) {
        if (sv->redundant_experts)
            return snprintf(why, n, "%u experts of %s and %u redundant copies do not spread evenly over %u GPUs",
                            md->experts, md->name, sv->redundant_experts, g);
        return snprintf(why, n, "%u experts of %s do not spread evenly over %u GPUs (--ep-num-redundant-experts "
                        "adds copies)", md->experts, md->name, g);
    }
    char over[64];
    if (dp > 1) snprintf(over, sizeof over, "attention over %u GPUs (tp %u, dp-size %u)", atp, g, dp);
    else snprintf(over, sizeof over, "tp %u", g);
    if (md->heads % atp)
        return snprintf(why, n, "%s does not divide the %u attention heads of %s", over, md->heads, md->name);
    if (!md->mla && (md->kv_heads >= atp ? md->kv_heads % atp : atp % md->kv_heads))
        return snprintf(why, n, "%s and the %u KV heads of %s neither divide the other", over, md->kv_heads,
                        md->name);
    return 0;
}

static int check_with(const cost_model *m, uint32_t tp, const cost_serving *sv, rh_err *e)
{
    const cost_roofline *r = as_roofline(m);
    uint32_t g = tp ? tp : r->tp;
    char why[512];
    if (check_layout(&r->model, &r->gpu, g, sv, why, sizeof why) ||
        (r->has_draft && check_layout(&r->draft, &r->gpu, g, sv, why, sizeof why)))
        return rh_fail(e, "%s: field 'tp': %s", m->path[0] ? m->path : "roofline cost model", why);
    return 0;
}

static int roofline_check_tp(const cost_model *m, uint32_t tp, rh_err *e)
{
    return check_with(m, tp, &as_roofline(m)->serving, e);
}

static int roofline_check_serving(const cost_model *m, uint32_t tp, const cost_serving *sv, rh_err *e)
{
    const cost_roofline *r = as_roofline(m);
    uint32_t g = tp ? tp : r->tp;
    const char *at = m->path[0] ? m->path : "roofline cost model";
    if (sv->ep > 1 && sv->ep != g)
        return rh_fail(e, "%s: --ep-size %u: the experts spread over all %u GPUs (ep 1 or %u)", at, sv->ep, g, g);
    if (sv->ep > 1 && !r->model.moe) return rh_fail(e, "%s: --ep-size: %s has no experts", at, r->model.name);
    if (sv->deepep && sv->ep <= 1)
        return rh_fail(e, "%s: --moe-a2a-backend deepep moves tokens to experts spread over the GPUs (ep %u)", at, g);
    if (sv->dp > g) return rh_fail(e, "%s: --dp-size %u is more than the %u GPUs", at, sv->dp, g);
    if (sv->dense_tp > 1 && sv->dense_tp != g)
        return rh_fail(e, "%s: --moe-dense-tp-size %u: 1 (each attention group's dense MLPs whole) or %u", at,
                       sv->dense_tp, g);
    if (sv->redundant_experts && sv->ep <= 1)
        return rh_fail(e, "%s: --ep-num-redundant-experts needs the experts spread (--ep-size %u)", at, g);
    if (sv->expert_imbalance != 0 && sv->expert_imbalance < 1)
        return rh_fail(e, "%s: --expert-imbalance %g: the busiest GPU has at least the mean (>= 1)", at,
                       sv->expert_imbalance);
    if (sv->hicache && !(r->gpu.host_link_GBps > 0))
        return rh_fail(e, "%s: GPU preset %s has no host_link_GBps to load a host tier's KV over", at, r->gpu.name);
    if (sv->lora_rank) {
        if (r->model.mla)
            return rh_fail(e, "%s: LoRA adapters on %s's MLA attention are not priced (a GQA model's are)", at,
                           r->model.name);
        if (sv->dp > 1) return rh_fail(e, "%s: LoRA adapters under --enable-dp-attention are not priced", at);
        if (!(r->gpu.host_link_GBps > 0))
            return rh_fail(e, "%s: GPU preset %s has no host_link_GBps to load LoRA adapters over", at, r->gpu.name);
    }
    return check_with(m, tp, sv, e);
}

/* Data-parallel attention: each request runs on one attention group. The
 * batch's sequences are placed as a balancing dispatcher places them, the
 * next largest on the least loaded group (load: new tokens, plus a
 * decode's context at 1/128 of a token), and rank[i] says where sequence i
 * went. */
static void place(const cost_batch *b, uint32_t groups, uint32_t *rank, uint32_t *order, double *load)
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
    for (uint32_t k = 0; k < groups; k++) load[k] = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        const cost_seq *x = &b->seqs[order[i]];
        uint32_t best = 0;
        for (uint32_t k = 1; k < groups; k++)
            if (load[k] < load[best]) best = k;
        rank[order[i]] = best;
        load[best] += x->n_new + (x->prefill ? 0 : x->context / 128.0);
    }
}

/* The step under data-parallel attention: every group's own requests
 * through attention, all the batch's tokens through the gathered parts
 * and the experts; the groups step together, so the slowest one's forward
 * is the step's. Groups of the same shape are priced once. */
static int per_group(const cost_roofline *r, const cost_batch *b, uint32_t g, const cost_serving *sv,
                     const rl_shape *all, rl_breakdown *out, rh_err *e)
{
    uint32_t groups = sv->dp;
    uint32_t *rank = malloc(2 * (size_t)b->n * sizeof *rank);
    cost_seq *mine = malloc((size_t)b->n * sizeof *mine);
    double *load = malloc(groups * sizeof *load);
    rl_shape *seen = malloc(groups * sizeof *seen);
    rl_breakdown *bd = malloc(sizeof *bd);
    if (!rank || !mine || !load || !seen || !bd) {
        free(rank), free(mine), free(load), free(seen), free(bd);
        return rh_fail(e, "out of memory");
    }
    place(b, groups, rank, rank + b->n, load);
    double Ld = dense_layers(&r->model);
    rl_layout l = layout_of(r, &r->model, g, sv, all);
    out->total_s = -1;
    uint32_t n_seen = 0;
    for (uint32_t k = 0; k < groups; k++) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < b->n; i++)
            if (rank[i] == k) mine[n++] = b->seqs[i];
        cost_batch rb = {.seqs = mine, .n = n, .tp = b->tp};
        cost_batch_summarize(&rb);
        rl_shape s = shape_of(&rb);
        s.T_all = all->T_all, s.R_all = all->R_all;
        bool dup = false;
        for (uint32_t j = 0; j < n_seen && !dup; j++) dup = !memcmp(&seen[j], &s, sizeof s);
        if (dup) continue;
        seen[n_seen++] = s;
        forward_of(r, &r->model, Ld, r->model.layers - Ld, false, &s, &l, runs_as_graph(r, sv, &s), bd);
        if (bd->total_s > out->total_s) *out = *bd;   /* an idle group still runs the gathered layers */
    }
    free(rank), free(mine), free(load), free(seen), free(bd);
    return 0;
}

static int breakdown_with(const cost_roofline *r, const cost_batch *b, rl_breakdown *out, rh_err *e)
{
    const cost_serving *sv = serving_of(r, b);
    if (check_with(&r->base, b->tp, sv, e) < 0) return -1;
    uint32_t g = b->tp ? b->tp : r->tp;
    rl_shape all = shape_of(b);
    if (sv->lora_rank && b->lora_tokens) {
        all.lora_T = b->lora_tokens;
        all.lora_k = b->lora_adapters ? b->lora_adapters : 1;
        all.lora_r = sv->lora_rank;
        all.lora_targets = sv->lora_targets ? sv->lora_targets : COST_LORA_ALL;
    }
    if (sv->dp > 1 && g > 1 && b->seqs && b->n) return per_group(r, b, g, sv, &all, out, e);
    rl_layout l = layout_of(r, &r->model, g, sv, &all);
    /* a batch known only by its aggregates (a step record) is spread evenly */
    rl_shape s = l.dp > 1 ? shape_share(&all, l.dp) : all;
    double Ld = dense_layers(&r->model);
    forward_of(r, &r->model, Ld, r->model.layers - Ld, false, &s, &l, runs_as_graph(r, sv, &s), out);
    return 0;
}

int roofline_breakdown(const cost_model *m, const cost_batch *b, rl_breakdown *out, rh_err *e)
{
    const cost_roofline *r = as_roofline(m);
    if (!r) return rh_fail(e, "%s: not a roofline cost model", m ? m->path : "(null)");
    return breakdown_with(r, b, out, e);
}

/* One draft forward of n rows at summed context (each row one token; an
 * extend pass gives rows of its own): the MTP module (one MoE layer and
 * the shared head) or the draft model. */
static int draft_with(const cost_roofline *r, uint32_t n, uint32_t tokens, uint64_t context, uint32_t tp,
                      const cost_serving *sv, rl_breakdown *out, rh_err *e)
{
    if (!r->has_draft && !r->model.mtp_layers)
        return rh_fail(e, "%s: neither an MTP module in %s nor a draft_model", r->base.path, r->model.name);
    if (check_with(&r->base, tp, sv, e) < 0) return -1;
    uint32_t g = tp ? tp : r->tp;
    cost_batch d;
    memset(&d, 0, sizeof d);
    d.decode_seqs = n;
    d.decode_tokens = tokens > n ? tokens : n;
    d.decode_context = context;
    rl_shape all = shape_of(&d);
    const rl_model *md = r->has_draft ? &r->draft : &r->model;
    rl_layout l = layout_of(r, md, g, sv, &all);
    rl_shape s = l.dp > 1 ? shape_share(&all, l.dp) : all;
    bool graph = runs_as_graph(r, sv, &s);
    if (r->has_draft) {
        double Ld = dense_layers(md);
        forward_of(r, md, Ld, md->layers - Ld, false, &s, &l, graph, out);
    } else {
        /* one MTP module: its decoder layer is a MoE layer in a MoE model */
        forward_of(r, md, md->moe ? 0 : 1, md->moe ? 1 : 0, true, &s, &l, graph, out);
    }
    return 0;
}

int roofline_draft_breakdown(const cost_model *m, uint32_t n, uint32_t tokens, uint64_t context, uint32_t tp,
                             rl_breakdown *out, rh_err *e)
{
    const cost_roofline *r = as_roofline(m);
    if (!r) return rh_fail(e, "%s: not a roofline cost model", m ? m->path : "(null)");
    return draft_with(r, n, tokens, context, tp, &r->serving, out, e);
}

static double roofline_step(const cost_model *m, const cost_batch *b)
{
    rl_breakdown bd;
    return roofline_breakdown(m, b, &bd, NULL) < 0 ? NAN : bd.total_s;
}

static double roofline_draft(const cost_model *m, uint32_t n, uint64_t context, uint32_t tp)
{
    const cost_roofline *r = as_roofline(m);
    if (!r->has_draft && !r->model.mtp_layers) return cost_draft_fallback(m, n, context, tp);
    rl_breakdown bd;
    return draft_with(r, n, n, context, tp, &r->serving, &bd, NULL) < 0 ? NAN : bd.total_s;
}

double rl_lora_bytes(const rl_model *md, double g, double r, uint32_t targets, double *copies)
{
    double h = md->hidden, q = (double)md->heads * md->head_dim, kv = (double)md->kv_heads * md->head_dim;
    double I = md->intermediate, L = md->layers;
    if (!targets) targets = COST_LORA_ALL;
    double col = 0, row = 0;   /* Σ (in + out / g) over column-parallel modules; Σ (in / g + out) over row-parallel */
    if (targets & COST_LORA_Q) col += h + q / g;
    if (targets & COST_LORA_K) col += h + kv / g;
    if (targets & COST_LORA_V) col += h + kv / g;
    if (targets & COST_LORA_GATE) col += h + I / g;
    if (targets & COST_LORA_UP) col += h + I / g;
    if (targets & COST_LORA_O) row += q / g + h;
    if (targets & COST_LORA_DOWN) row += I / g + h;
    if (copies) {
        double fused = ((targets & (COST_LORA_Q | COST_LORA_K | COST_LORA_V)) != 0) + ((targets & COST_LORA_O) != 0) +
                       ((targets & (COST_LORA_GATE | COST_LORA_UP)) != 0) + ((targets & COST_LORA_DOWN) != 0);
        *copies = 2 * fused * L;
    }
    return AB * L * r * (col + row);
}

/* Adapters loaded into GPU slots before the step, as SGLang loads them
 * without --enable-lora-overlap-loading: synchronously, each A and B of
 * each fused module of each layer copied from host memory, the GPU
 * waiting. A load takes its bytes over the host link or the host's launch
 * of every copy, whichever is longer (the copies run while later ones are
 * issued). The slots are sized for --max-lora-rank (SGLang pads); the
 * copies carry that rank too, as every adapter of a trace has one rank. */
static double lora_load_s(const cost_roofline *r, const cost_batch *b, const cost_serving *sv, double *bytes)
{
    *bytes = 0;
    if (!sv->lora_rank || !b->lora_loads) return 0;
    uint32_t g = b->tp ? b->tp : r->tp;
    double copies, one = rl_lora_bytes(&r->model, g, sv->lora_rank, sv->lora_targets, &copies);
    *bytes = one * b->lora_loads;
    double link = one / (r->gpu.host_link_GBps * 1e9 * r->eff[RL_LORA_LOAD]);
    return b->lora_loads * fmax(link, copies * r->host.eager_launch_s);
}

static void model_memory(const cost_roofline *r, const rl_model *md, uint32_t g, const cost_serving *sv, bool mtp,
                         double *weights, double *kv_per_token);

/* The host tier's copies over the GPU's host link (SGLang's HiCache:
 * hiradix_cache.py load_back, cache_controller.py). A load-back is issued
 * one layer at a time on its own stream when the batch forms, and layer
 * i's attention waits for layer i's copy: with t_l one layer's copy and
 * t_c one layer's share of the forward, the first layer's copy is never
 * hidden and each later layer stalls by what its copy takes beyond the
 * compute before it,
 *     exposed = t_l + (L - 1) · max(0, t_l - t_c),
 * so a load that keeps pace costs one layer's copy and one that does not
 * costs every layer's copy but the last layer's compute. A write-back an
 * eviction waited for (write_back: SGLang's evict() blocks on the copies)
 * is all exposed. The link is the preset's host_link_GBps, an nvbandwidth
 * copy-engine figure; SGLang's kernel I/O backend is taken to reach it. */
static double hicache_io_s(const cost_roofline *r, const cost_batch *b, double forward_s, double *load_s, double *wb_s,
                           double *bytes)
{
    *load_s = *wb_s = *bytes = 0;
    if (!b->load_tokens && !b->writeback_tokens) return 0;
    double w, per_token;
    const cost_serving *sv = serving_of(r, b);
    model_memory(r, &r->model, b->tp ? b->tp : r->tp, sv, false, &w, &per_token);
    double link = r->gpu.host_link_GBps * 1e9, L = r->model.layers ? r->model.layers : 1;
    if (!(link > 0)) return NAN;   /* check_serving refuses it first */
    double t_l = b->load_tokens * per_token / L / link, t_c = forward_s / L;
    if (b->load_tokens) *load_s = t_l + (L - 1) * fmax(0, t_l - t_c);
    /* Pages fetched from storage land in host memory before their load
     * starts (SGLang: storage -> host -> GPU), the step waiting for them. */
    if (b->storage_tokens && sv->storage_Bps > 0)
        *load_s += sv->storage_latency_s + b->storage_tokens * per_token / sv->storage_Bps;
    *wb_s = b->writeback_tokens * per_token / link;
    *bytes = (double)(b->load_tokens + b->writeback_tokens) * per_token;
    return *load_s + *wb_s;
}

/* The host's launches a forward's GPU waits for: none in a graph; eagerly
 * one launch per kernel, and the GPU idle where they fall behind. */
static double eager_excess(const cost_roofline *r, const rl_breakdown *bd)
{
    if (bd->graph) return 0;
    return fmax(0, bd->launches * r->host.eager_launch_s - bd->total_s);
}

/* The step in parts: the forward, the drafting as SGLang's EAGLE worker
 * runs it with an MTP module (steps − 1 one-token draft passes, and one
 * draft-extend pass over the verified tokens that drafts the next step's
 * first token; a draft model: steps one-token passes), each graph or
 * eager, and the host's time. */
static void roofline_parts(const cost_model *m, const cost_batch *b, cost_parts *p)
{
    const cost_roofline *r = as_roofline(m);
    const cost_serving *sv = serving_of(r, b);
    rl_breakdown *bd = malloc(sizeof *bd);
    if (!bd || breakdown_with(r, b, bd, NULL) < 0) {
        free(bd);
        p->forward_s = NAN;
        return;
    }
    double load_bytes, hl, hw, hb;
    p->forward_s = bd->total_s + lora_load_s(r, b, sv, &load_bytes) + hicache_io_s(r, b, bd->total_s, &hl, &hw, &hb);
    p->launch_s = eager_excess(r, bd);
    if (b->draft_steps && b->draft_seqs && (r->has_draft || r->model.mtp_layers)) {
        uint32_t w = b->draft_width > 1 ? b->draft_width : 1, n = b->draft_seqs * w;
        bool mtp = !r->has_draft;
        uint32_t one_token = mtp ? b->draft_steps - 1 : b->draft_steps;
        for (uint32_t i = 0; i < one_token + (mtp ? 1 : 0); i++) {
            bool extend = mtp && i == one_token;
            uint32_t seqs = extend ? b->draft_seqs : n, tokens = extend ? b->draft_seqs * (b->draft_steps + 1) : n;
            uint64_t ctx = extend ? cost_draft_context(b, 0) : cost_draft_context(b, i) * w;
            if (draft_with(r, seqs, tokens, ctx, b->tp, sv, bd, NULL) < 0) {
                p->draft_s = NAN;
                break;
            }
            p->draft_s += bd->total_s;
            p->launch_s += eager_excess(r, bd);
        }
    } else if (b->draft_steps && b->draft_seqs) {
        p->draft_s = cost_draft_time(m, b);
    }
    free(bd);
    /* the host: per step on the critical path; the scheduling, per
     * attention group (each runs its own scheduler) */
    const rl_host *h = &r->host;
    double groups = sv->dp > 1 ? sv->dp : 1;
    p->exposed_s = h->step_exposed_s;
    p->hidden_s = h->schedule_s + h->per_request_s * (b->prefill_seqs + b->decode_seqs) / groups +
                  h->per_token_s * b->prefill_tokens / groups;
}

static int roofline_terms(const cost_model *m, const cost_batch *b, cost_term *t, int max)
{
    rl_breakdown *bd = malloc(sizeof *bd);
    if (!bd || roofline_breakdown(m, b, bd, NULL) < 0) {
        free(bd);
        t[0] = (cost_term){"unsupported tp", NAN, 0, 0, ""};
        return 1;
    }
    int n = 0;
    for (int i = 0; i < bd->nk && n < max; i++)
        if (bd->k[i].seconds > 0)
            t[n++] = (cost_term){bd->k[i].name, bd->k[i].seconds, bd->k[i].flops, bd->k[i].bytes, bd->k[i].bound};
    if (bd->gaps_s > 0 && n < max)
        t[n++] = (cost_term){"tiny kernels' least time", bd->gaps_s, 0, 0, "launch"};
    if (bd->overlap_saved_s > 0 && n < max)
        t[n++] = (cost_term){"hidden by two-batch overlap", -bd->overlap_saved_s, 0, 0, "overlap"};
    if (bd->sm_share_s > 0 && n < max)
        t[n++] = (cost_term){"SMs DeepEP takes meanwhile", bd->sm_share_s, 0, 0, "overlap"};
    double load_bytes, load = lora_load_s(as_roofline(m), b, serving_of(as_roofline(m), b), &load_bytes);
    if (load > 0 && n < max) t[n++] = (cost_term){"lora_load", load, 0, load_bytes, "link"};
    double hl, hw, hb;
    hicache_io_s(as_roofline(m), b, bd->total_s, &hl, &hw, &hb);
    if (hl > 0 && n < max)
        t[n++] = (cost_term){"hicache_load_back (exposed)", hl, 0, (double)b->load_tokens / (b->load_tokens + b->writeback_tokens) * hb, "link"};
    if (hw > 0 && n < max)
        t[n++] = (cost_term){"hicache_write_back", hw, 0, (double)b->writeback_tokens / (b->load_tokens + b->writeback_tokens) * hb, "link"};
    free(bd);
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
    if (ep) *ep = r && r->serving.ep > 1;
    return r ? r->tp : 0;
}

static void roofline_serving(const cost_model *m, uint32_t tp, cost_serving *out)
{
    const cost_roofline *r = as_roofline(m);
    uint32_t g = tp ? tp : r->tp;
    *out = r->serving;
    if (out->ep > 1) out->ep = g;
    if (out->dp > 1 && r->serving.dp == r->tp) out->dp = g;   /* "dp attention over every GPU" follows tp */
    if (g != r->tp && !r->graph_bs_given)
        out->cuda_graph_max_bs = (int32_t)rl_sglang_cuda_graph_max_bs(r->gpu.memory_GB * 1073741824.0, g);
}
/* Weights per GPU: the layers at the file's dtype, the embedding, LM head
 * and final norm in bf16; the experts split or spread over every GPU, the
 * rest split over the attention group (every GPU without data-parallel
 * attention). KV per token per GPU: MLA's latent whole on every GPU of the
 * group, else K and V of the GPU's KV heads (one copied head when fewer
 * heads than GPUs). The MTP module (its layer and projection; it shares
 * embedding and head) or the draft model go to the draft fields. */
static void model_memory(const cost_roofline *r, const rl_model *md, uint32_t g, const cost_serving *sv, bool mtp,
                         double *weights, double *kv_per_token)
{
    rl_params p;
    rl_model_params(md, &p);
    double wb = r->fp8 ? 1 : 2, h = md->hidden;
    double outer = (double)md->vocab * h * (md->tie_embeddings ? 1 : 2) + h;
    double layers = mtp ? p.mtp : p.total - outer;
    double experts = !mtp ? p.experts : md->moe ? md->mtp_layers * 3.0 * h * md->moe_intermediate * md->experts : 0;
    double atp = sv->dp > 1 && g > 1 ? (double)g / sv->dp : g;
    if (md->moe && sv->ep > 1 && md->experts) experts *= 1.0 + (double)sv->redundant_experts / md->experts;
    *weights = ((layers - experts) / atp + experts / g) * wb + (mtp ? 0 : outer * 2 / atp);
    double L = mtp ? md->mtp_layers : md->layers;
    if (md->mla) *kv_per_token = ((double)md->kv_lora_rank + md->qk_rope_dim) * L * r->kv_bytes;
    else *kv_per_token = (md->kv_heads >= atp ? md->kv_heads / atp : 1) * md->head_dim * 2 * L * r->kv_bytes;
}

static void roofline_memory(const cost_model *m, uint32_t tp, const cost_serving *sv_in, cost_memory *out)
{
    const cost_roofline *r = as_roofline(m);
    uint32_t g = tp ? tp : r->tp;
    cost_serving own;
    roofline_serving(m, tp, &own);
    const cost_serving *sv = sv_in ? sv_in : &own;
    out->gpu_bytes = r->gpu.memory_GB * 1073741824.0;
    out->gpus = g;
    out->context_length = r->model.max_position;
    out->kv_per_rank = sv->dp > 1 && g > 1;
    out->hidden = r->model.hidden;
    out->intermediate_per_gpu = r->model.intermediate / g;
    out->vocab = r->model.vocab;
    snprintf(out->gpu_name, sizeof out->gpu_name, "%s", r->gpu.name);
    snprintf(out->model_name, sizeof out->model_name, "%s", r->model.name);
    model_memory(r, &r->model, g, sv, false, &out->weight_bytes, &out->kv_bytes_per_token);
    /* the adapter slots, each sized for the largest rank (SGLang's LoRAMemoryPool, vLLM's max_loras) */
    if (sv->lora_rank) out->weight_bytes += sv->lora_slots * rl_lora_bytes(&r->model, g, sv->lora_rank, sv->lora_targets, NULL);
    if (r->has_draft)
        model_memory(r, &r->draft, g, sv, false, &out->draft_weight_bytes, &out->draft_kv_bytes_per_token);
    else if (r->model.mtp_layers)
        model_memory(r, &r->model, g, sv, true, &out->draft_weight_bytes, &out->draft_kv_bytes_per_token);
}

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

static void roofline_free(cost_model *m)
{
    free(m);
}

static bool roofline_by_aggregates(const cost_model *m, uint32_t tp, const cost_serving *sv)
{
    const cost_roofline *r = as_roofline(m);
    uint32_t g = tp ? tp : r->tp;
    if (!sv) sv = &r->serving;
    return !(sv->dp > 1 && g > 1);   /* per_group places each request on a rank */
}

static const cost_ops roofline_ops = {
    .kind = "roofline",
    .step_time = roofline_step,
    .draft_time = roofline_draft,
    .check_tp = roofline_check_tp,
    .breakdown = roofline_terms,
    .memory = roofline_memory,
    .parts = roofline_parts,
    .serving = roofline_serving,
    .check_serving = roofline_check_serving,
    .by_aggregates = roofline_by_aggregates,
    .free = roofline_free,
};

/* The serving fields of a cost file (SGLang's flags, COST.md). */
static int parse_serving(json_t *root, cost_roofline *r, uint32_t ep, const cost_src *src, rh_err *e)
{
    cost_serving *sv = &r->serving;
    *sv = (cost_serving){.ep = ep, .dp = 1, .cuda_graph_max_bs = -1, .overlap = true};
    /* "ep" = tp alone is DeepSeek's layout: data-parallel attention, the
     * tokens moved to the experts by an all-to-all */
    bool dp_given = json_object_get(root, "dp_attention") != NULL;
    int dp_att, tbo;
    const char *a2a;
    uint32_t graph_bs;
    if (cj_bool(root, "", "dp_attention", ep > 1, &dp_att, src, e) < 0 ||
        cj_string(root, "", "moe_a2a_backend", 0, ep > 1 && !dp_given ? "deepep" : "none", &a2a, src, e) < 0 ||
        cj_bool(root, "", "two_batch_overlap", 0, &tbo, src, e) < 0 ||
        cj_number(root, "", "expert_imbalance", 0, 0, 0, 1e3, &sv->expert_imbalance, src, e) < 0 ||
        cj_uint(root, "", "cuda_graph_max_bs", 0, UINT32_MAX, 0, UINT32_MAX, &graph_bs, src, e) < 0 ||
        cj_uint(root, "", "moe_dense_tp_size", 0, 0, 0, 4096, &sv->dense_tp, src, e) < 0 ||
        cj_uint(root, "", "ep_num_redundant_experts", 0, 0, 0, 65536, &sv->redundant_experts, src, e) < 0)
        return -1;
    if (sv->expert_imbalance != 0 && sv->expert_imbalance < 1)
        return cj_fail(src, "", "expert_imbalance", e, "%g: the busiest GPU has at least the mean (>= 1; 0: the "
                       "statistical imbalance of uniform routing)", sv->expert_imbalance);
    if (strcmp(a2a, "none") && strcmp(a2a, "deepep"))
        return cj_fail(src, "", "moe_a2a_backend", e, "'%s' is not none or deepep", a2a);
    sv->dp = dp_att ? r->tp : 1;
    sv->deepep = !strcmp(a2a, "deepep");
    sv->two_batch_overlap = tbo;
    if (graph_bs != UINT32_MAX) sv->cuda_graph_max_bs = (int32_t)(graph_bs > INT32_MAX ? INT32_MAX : graph_bs);
    r->graph_bs_given = graph_bs != UINT32_MAX;
    if (sv->deepep && ep <= 1)
        return cj_fail(src, "", "moe_a2a_backend", e, "deepep moves tokens to experts spread over the GPUs: set "
                       "\"ep\" to tp (%u)", r->tp);
    return 0;
}

cost_model *cost_roofline_parse(json_t *root, const cost_src *src, rh_err *e)
{
    static const char *const allowed[] = {"kind", "version", "model", "gpu", "tp", "ep", "dtype", "kv_dtype",
                                          "efficiency", "step_overhead_s", "collective_latency_s",
                                          "draft_model", "draft_ratio", "kernels", "compute_efficiency",
                                          "memory_efficiency", "host", "dp_attention", "moe_a2a_backend",
                                          "two_batch_overlap", "expert_imbalance", "cuda_graph_max_bs",
                                          "moe_dense_tp_size", "ep_num_redundant_experts", "fit", "comment", NULL};
    cost_roofline *r = calloc(1, sizeof *r);
    if (!r || cost_model_init(&r->base, &roofline_ops, src) < 0) {
        if (r) free(r->base.path);
        free(r);
        rh_fail(e, "%s: out of memory", src->label);
        return NULL;
    }
    const char *model, *gpu, *draft, *kernels, *host;
    uint32_t ep;
    double wbytes;
    if (cj_only_keys(root, "", allowed, src, e) < 0 || cj_string(root, "", "model", 1, NULL, &model, src, e) < 0 ||
        cj_string(root, "", "gpu", 1, NULL, &gpu, src, e) < 0 ||
        cj_string(root, "", "draft_model", 0, NULL, &draft, src, e) < 0 ||
        cj_string(root, "", "kernels", 0, "preset", &kernels, src, e) < 0 ||
        cj_string(root, "", "host", 0, "sglang", &host, src, e) < 0 ||
        cj_uint(root, "", "tp", 0, 1, 1, 4096, &r->tp, src, e) < 0 ||
        cj_uint(root, "", "ep", 0, 1, 1, 4096, &ep, src, e) < 0 ||
        parse_dtype(root, "kv_dtype", "bf16", true, &r->kv_bytes, src, e) < 0 ||
        cj_number(root, "", "step_overhead_s", 0, 0, 0, 10, &r->base.over.step_s, src, e) < 0 ||
        cj_number(root, "", "collective_latency_s", 0, 0, 0, 1, &r->latency_s, src, e) < 0 ||
        cj_number(root, "", "draft_ratio", 0, COST_DRAFT_RATIO_DEFAULT, 0, 100, &r->base.draft_ratio, src, e) < 0 ||
        parse_efficiency(root, r, src, e) < 0)
        goto fail;
    if (rl_model_resolve(model, "model", src, &r->model, e) < 0 || rl_gpu_resolve(gpu, "gpu", src, &r->gpu, e) < 0)
        goto fail;
    /* the weights as published: an FP8 checkpoint runs in FP8 where the GPU
     * can (as SGLang and vLLM load DeepSeek-V3/R1), else in bf16 */
    const char *dtype_default = r->model.fp8_checkpoint && r->gpu.fp8_tflops > 0 ? "fp8" : "bf16";
    if (parse_dtype(root, "dtype", dtype_default, true, &wbytes, src, e) < 0) goto fail;
    r->fp8 = wbytes == 1;
    if (draft) {
        if (rl_model_resolve(draft, "draft_model", src, &r->draft, e) < 0) goto fail;
        r->has_draft = true;
    }
    if (strcmp(host, "none") && rl_host_resolve(host, "host", src, &r->host, e) < 0) goto fail;
    r->base.over.arrival_s = r->host.arrival_s;   /* a file's "overheads" may set its own */
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
    if (parse_serving(root, r, ep, src, e) < 0) goto fail;
    if (r->serving.cuda_graph_max_bs < 0)
        r->serving.cuda_graph_max_bs = (int32_t)rl_sglang_cuda_graph_max_bs(r->gpu.memory_GB * 1073741824.0, r->tp);
    if (roofline_check_tp(&r->base, 0, e) < 0) goto fail;
    return &r->base;
fail:
    cost_free(&r->base);
    return NULL;
}
