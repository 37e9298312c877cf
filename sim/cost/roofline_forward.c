/* roofline_forward.c — one forward pass as SGLang's model code launches it,
 * kernel by kernel, for the three families (COST.md "The forward as SGLang
 * runs it" lists each kernel and the SGLang file it comes from):
 *   - dense GQA (Llama, Qwen2: models/llama.py, qwen2.py);
 *   - Mixtral-style MoE (models/mixtral.py, layers/moe/fused_moe_triton);
 *   - DeepSeek (models/deepseek_v2.py, deepseek_nextn.py): MLA with the
 *     MHA form for prefill without a short prefix and the absorbed form
 *     otherwise, FP8 block-scaled GEMMs each behind a per-token-group
 *     quantisation, the grouped top-k router, the shared expert fused into
 *     the routed ones (ep 1) or run apart, DeepEP's dispatch and combine.
 * Counting conventions (per GPU, summed over layers and calls):
 *   - a GEMM of M rows, K inputs, N outputs does 2·M·K·N FLOPs and moves
 *     its weights (K·N at the weight dtype) plus its input (M·K, FP8 behind
 *     a quantisation, else bf16) and its output (M·N, bf16);
 *   - attention does 2·d FLOPs per (query, key) pair per head for QKᵀ and as
 *     many for PV over the causal pairs; it reads the KV of every attended
 *     token once and moves Q and O;
 *   - an RMSNorm does 4 FLOPs per element and reads and writes its input;
 *   - routed experts: a token picks top_k of E experts uniformly, so T
 *     tokens touch E·(1 − (1 − k/E)^T) distinct experts, each read once;
 *   - the embedding, router and LM head stay bf16 (as in DeepSeek-V3's FP8
 *     checkpoint); activations and collectives are bf16 (DeepEP's dispatch
 *     FP8). */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "sim/cost/collective.h"
#include "sim/cost/kernel_time.h"
#include "sim/cost/roofline_impl.h"
#include "util/hash.h"

void rl_counter_init(rl_counter *c, const cost_roofline *r, rl_breakdown *out)
{
    /* Not the kernel slots (4 KB, most of the struct): a slot is written
     * whole when the forward first launches its kernel, and none past nk is
     * read. A light step's forward clears this every time. */
    memset(out->op, 0, sizeof out->op);
    memset(&out->nk, 0, sizeof *out - offsetof(rl_breakdown, nk));
    *c = (rl_counter){.r = r, .out = out, .hbm = r->gpu.hbm_GBps * 1e9, .scale = 1};
}

static uint32_t pointer_hash(const char *name)
{
    return rh_fib32((uintptr_t)name);
}

/* Of the first two characters: names sharing them ("attn_", "shared_")
 * share a chain, which strcmp tells apart. Every kernel is new to each
 * forward, so this runs for each: hashing whole names cost more than the
 * chains. */
static uint32_t text_hash(const char *name)
{
    uint32_t h = (unsigned char)name[0];
    if (h) h = h << 8 | (unsigned char)name[1];
    return rh_fib32(h);
}

/* Records slot s under hash h in table t (a free cell is there: the tables
 * are twice the most slots a forward has). */
static void index_put(uint8_t *t, uint32_t h, int s)
{
    uint32_t i = h % RL_KERNEL_INDEX;
    while (t[i]) i = (i + 1) % RL_KERNEL_INDEX;
    t[i] = (uint8_t)(s + 1);
}

/* The kernel's slot, made on its first launch in this forward. Names are
 * static strings: the pointer finds a slot, the text only when the same
 * name came from another literal. Slots stay in first-launch order. */
static rl_kernel_cost *slot(rl_counter *c, const char *name, int op)
{
    rl_breakdown *o = c->out;
    uint32_t hp = pointer_hash(name);
    for (uint32_t i = hp % RL_KERNEL_INDEX; c->by_pointer[i]; i = (i + 1) % RL_KERNEL_INDEX)
        if (o->k[c->by_pointer[i] - 1].name == name) return &o->k[c->by_pointer[i] - 1];
    uint32_t ht = text_hash(name);
    for (uint32_t i = ht % RL_KERNEL_INDEX; c->by_text[i]; i = (i + 1) % RL_KERNEL_INDEX) {
        int s = c->by_text[i] - 1;
        if (!strcmp(o->k[s].name, name)) {
            if (c->n_pointers < RL_KERNEL_INDEX / 2) {   /* this literal too, while there is room */
                index_put(c->by_pointer, hp, s);
                c->n_pointers++;
            }
            return &o->k[s];
        }
    }
    if (o->nk == RL_MAX_KERNELS) return &o->k[RL_MAX_KERNELS - 1];   /* never: the lists are shorter */
    int s = o->nk++;
    o->k[s] = (rl_kernel_cost){.name = name, .op = op};
    index_put(c->by_text, ht, s);
    if (c->n_pointers < RL_KERNEL_INDEX / 2) {
        index_put(c->by_pointer, hp, s);
        c->n_pointers++;
    }
    return &o->k[s];
}

/* Adds calls of one kernel to its slot and its operator. */
static void account(rl_counter *c, const char *name, int op, double calls, double flops, double bytes, double seconds,
                    double tc, double tm, bool comm)
{
    calls *= c->scale;
    rl_op_cost *o = &c->out->op[op];
    o->flops += calls * flops;
    o->bytes += calls * bytes;
    o->calls += calls;
    o->seconds += calls * seconds;
    o->compute_s += calls * tc;
    o->memory_s += calls * tm;
    rl_kernel_cost *k = slot(c, name, op);
    k->calls += calls;
    k->flops += calls * flops;
    k->bytes += calls * bytes;
    k->seconds += calls * seconds;
    k->compute_s += calls * tc;
    k->memory_s += calls * tm;
    c->out->launches += calls;
    c->out->kernels_s += calls * seconds;
    if (comm) c->comm_s += calls * seconds;
    else c->compute_s += calls * seconds;
}

static double peak_of(const rl_counter *c, bool fp8)
{
    const rl_gpu *g = &c->r->gpu;
    return (fp8 ? g->fp8_tflops : g->bf16_tflops) * 1e12;
}

void rl_gemm(rl_counter *c, const char *name, int op, double calls, double M, double K, double N, double wbytes,
             bool fp8)
{
    if (M <= 0 || calls <= 0) return;
    const rl_kernel *k = &c->r->kern[fp8 ? RL_K_GEMM_FP8 : RL_K_GEMM];
    double peak = peak_of(c, fp8), eff = c->r->eff[op], in = fp8 ? 1 : AB;
    double bytes = K * N * wbytes + M * K * in + M * N * AB;
    double tc = 2 * (M + k->half_rows) * K * N / rl_kernel_rate(k, peak, eff);
    double tm = bytes / (c->hbm * k->memory_eff * eff);
    account(c, name, op, calls, 2 * M * K * N, bytes, rl_gemm_in_s(k, peak, c->hbm, M, K, N, wbytes, in, eff), tc, tm,
            false);
}

void rl_grouped(rl_counter *c, const char *name, int op, int kind, double calls, double rows, double experts,
                double K, double N, double wbytes, bool fp8)
{
    if (rows <= 0 || calls <= 0 || experts <= 0) return;
    const rl_kernel *k = &c->r->kern[kind];
    double peak = peak_of(c, fp8), eff = c->r->eff[op], in = fp8 ? 1 : AB;
    double bytes = experts * K * N * wbytes + rows * (K * in + N * AB);
    double tc = 2 * (rows + experts * k->half_rows) * K * N / rl_kernel_rate(k, peak, eff);
    double tm = bytes / (c->hbm * k->memory_eff * eff);
    account(c, name, op, calls, 2 * rows * K * N, bytes,
            rl_grouped_gemm_in_s(k, peak, c->hbm, rows, experts, K, N, wbytes, in, eff), tc, tm, false);
}

void rl_attention(rl_counter *c, const char *name, int op, double calls, double flops, double bytes)
{
    if (calls <= 0 || (flops <= 0 && bytes <= 0)) return;
    const rl_kernel *k = &c->r->kern[RL_K_ATTENTION];
    double peak = peak_of(c, false), eff = c->r->eff[op];
    double tc = flops / rl_kernel_rate(k, peak, eff), tm = bytes / (c->hbm * k->memory_eff * eff);
    account(c, name, op, calls, flops, bytes, k->floor_s + fmax(tc, tm), tc, tm, false);
}

void rl_stream(rl_counter *c, const char *name, int op, int kind, double calls, double flops, double bytes,
               double row)
{
    if (calls <= 0 || bytes <= 0) return;
    const rl_kernel *k = &c->r->kern[kind];
    double eff = c->r->eff[op];
    account(c, name, op, calls, flops, bytes, rl_stream_s(k, c->hbm, bytes, row, eff), 0,
            bytes / (c->hbm * k->memory_eff * eff), false);
}

void rl_embedding(rl_counter *c, double rows, double h)
{
    if (rows <= 0) return;
    const rl_kernel *k = &c->r->kern[RL_K_EMBED];
    double bytes = 2 * rows * h * AB, eff = c->r->eff[RL_EMBED];
    account(c, "embedding", RL_EMBED, 1, 0, bytes, rl_embedding_s(k, c->hbm, rows, bytes, eff), 0,
            bytes / (c->hbm * k->memory_eff * eff), false);
}

void rl_collective(rl_counter *c, const char *name, int op, int kind, double calls, double msg, double n,
                   const rl_layout *l)
{
    if (calls <= 0 || n < 2 || msg <= 0) return;
    double eff = c->r->eff[op];
    double t = rl_comm_call_s(c->r, kind, msg, n, l, eff) + c->r->latency_s;
    /* bytes on the wire per GPU: a ring all-reduce moves 2(n-1)/n of its
     * buffer, a gather or scatter half that; dispatch and combine the
     * share bound for other GPUs */
    double wire = kind == RL_COMM_ALLREDUCE ? 2 * (n - 1) / n * msg : (n - 1) / n * msg;
    account(c, name, op, calls, 0, wire, t, 0, 0, true);
    rl_op_cost *o = &c->out->op[op];
    o->msg = msg;
}

/* DeepEP's dispatch or combine: bytes over NVLink and over RDMA. */
static void deepep(rl_counter *c, const char *name, double calls, double nvlink_bytes, double rdma_bytes,
                   const rl_layout *l)
{
    if (calls <= 0 || nvlink_bytes + rdma_bytes <= 0) return;
    double eff = c->r->eff[RL_ALLTOALL];
    double t = rl_deepep_split_s(&c->r->gpu, l->low_latency, nvlink_bytes, rdma_bytes, eff) + c->r->latency_s;
    account(c, name, RL_ALLTOALL, calls, 0, nvlink_bytes + rdma_bytes, t, 0, 0, true);
}

/* C(n, k) for the small counts of expert groups. */
static double choose(double n, double k)
{
    if (k < 0 || k > n) return 0;
    double r = 1;
    for (double i = 1; i <= k; i++) r *= (n - k + i) / i;
    return r;
}

/* The nodes a token's k experts sit on, on average, the experts spread
 * evenly over m nodes, its own node included: with group-limited routing
 * (topk_group of n_group groups, the groups spread over the nodes) the
 * nodes holding a chosen group, else the nodes of k uniform picks. DeepEP's
 * normal kernels send a token once to each (its published bandwidths count
 * the own node too: they are logical, not the NIC's bytes). */
static double touched_nodes(const rl_model *md, double m)
{
    if (m <= 1) return 1;
    if (md->n_group && fmod(md->n_group, m) == 0) {
        double G = md->n_group, per = G / m;
        return m * (1 - choose(G - per, md->topk_group) / choose(G, md->topk_group));
    }
    return m * (1 - pow(1 - 1 / m, md->top_k));
}

/* An RMSNorm of `width` over `rows` tokens: 4 FLOPs an element, the input
 * read and written, its weights read. */
static void norm(rl_counter *c, const char *name, double calls, double rows, double width)
{
    rl_stream(c, name, RL_NORM, RL_K_NORM, calls, 4 * rows * width, 2 * rows * width * AB + width * AB, width);
}

/* FP8 per-token-group quantisation of rows x width bf16: the input read,
 * one byte and a scale per 128 written. */
static void quant(rl_counter *c, const char *name, double calls, double rows, double width)
{
    rl_stream(c, name, RL_QUANT, RL_K_ACT, calls, rows * width, rows * width * (AB + 1 + 4.0 / 128), width);
}

/* A layout copy of rows x width bf16 elements. */
static void copy(rl_counter *c, const char *name, double calls, double rows, double width)
{
    rl_stream(c, name, RL_COPY, RL_K_ADD, calls, 0, 2 * rows * width * AB, width);
}

/* A small kernel that reads and writes `bytes` (top-k, sorting, padding). */
static void small(rl_counter *c, const char *name, int op, double calls, double bytes, double row)
{
    rl_stream(c, name, op, RL_K_ADD, calls, 0, bytes > 1 ? bytes : 1, row);
}

/* A GEMM at the layer dtype: FP8 ones behind their quantisation kernel. */
static void layer_gemm(rl_counter *c, const char *name, const char *qname, int op, double calls, double M, double K,
                       double N)
{
    bool fp8 = c->r->fp8;
    if (fp8) quant(c, qname, calls, M, K);
    rl_gemm(c, name, op, calls, M, K, N, fp8 ? 1 : 2, fp8);
}

/* A norm that follows an all-reduce: fused into it where SGLang fuses them
 * (DeepSeek on one node, few tokens: FlashInfer's all-reduce + residual
 * add + RMSNorm), else a kernel of its own. */
static void norm_after_reduce(rl_counter *c, const char *name, double calls, double rows, double h,
                              const rl_layout *l)
{
    if (!l->fused_ar_norm) norm(c, name, calls, rows, h);
}

/* ---- LoRA ----
 * SGLang's triton LoRA backend (python/sglang/srt/lora/backend, triton_ops)
 * beside each target module: a segmented shrink x·Aᵀ (T × in into T × n·r,
 * the stacked A of a fused module's n slices) and a segmented expand
 * adding u·Bᵀ into the base output, one segment per request; each kernel
 * reads every adapter of the batch once, so a decode step's LoRA time
 * grows with the distinct adapters. Priced as grouped GEMMs over
 * lora_T rows and lora_k weight sets. Under tensor parallelism the
 * column-parallel modules (q, k, v, gate, up) shrink whole and expand their
 * shard; the row-parallel ones (o, down) shrink their shard and expand
 * whole (the T × r partial sums' all-reduce is left out: r values a token). */
static void lora_pair(rl_counter *c, const char *shrink, const char *expand, double L, const rl_shape *s, double in,
                      double slices, double out)
{
    if (!s || s->lora_T <= 0 || s->lora_k <= 0 || s->lora_r <= 0 || slices <= 0 || out <= 0) return;
    rl_grouped(c, shrink, RL_LORA, RL_K_GROUPED, L, s->lora_T, s->lora_k, in, slices * s->lora_r, AB, false);
    rl_grouped(c, expand, RL_LORA, RL_K_GROUPED, L, s->lora_T, s->lora_k, s->lora_r, out, AB, false);
}

static double has(uint32_t targets, uint32_t bit)
{
    return (targets & bit) ? 1 : 0;
}

/* ---- attention ---- */

static void gqa_attention(rl_counter *c, const rl_model *md, double L, const rl_shape *s, const rl_layout *l)
{
    double h = md->hidden, hd = md->head_dim, qh = l->qh, kvh = l->kvh, kvb = c->r->kv_bytes;
    double T = s->Tp + s->Td;
    layer_gemm(c, "qkv_proj", "qkv_quant", RL_QKV_PROJ, L, T, h, (qh + 2 * kvh) * hd);
    uint32_t lt = s->lora_targets;
    lora_pair(c, "qkv_lora_a", "qkv_lora_b", L, s, h, has(lt, COST_LORA_Q) + has(lt, COST_LORA_K) + has(lt, COST_LORA_V),
              (has(lt, COST_LORA_Q) * qh + (has(lt, COST_LORA_K) + has(lt, COST_LORA_V)) * kvh) * hd);
    /* rotary on Q and K in place, reading its cos/sin cache */
    rl_stream(c, "rope", RL_ROPE, RL_K_ROPE, L, 0, 4 * T * (qh + kvh) * hd + 2 * T * hd, (qh + kvh) * hd);
    rl_stream(c, "kv_store", RL_KV_STORE, RL_K_ADD, L, 0, 2 * T * 2 * kvh * hd * kvb, 2 * kvh * hd);
    copy(c, "q_contiguous", L, T, qh * hd);   /* FA3 takes q contiguous; it is a slice of qkv */
    if (s->Tp > 0) {
        small(c, "attn_prepare", RL_ATTN_META, L, 64 * s->Sp, s->Sp);
        rl_attention(c, "attn_prefill", RL_ATTN_PREFILL, L, 4 * hd * qh * s->pairs_p,
                     (s->pctx + 2 * s->Tp) * 2 * kvh * hd * kvb + 2 * s->Tp * qh * hd * AB);
    }
    if (s->Sd > 0) {
        rl_attention(c, "attn_decode", RL_ATTN_DECODE, L, 4 * hd * qh * s->pairs_d,
                     (s->dctx + 2 * s->Td) * 2 * kvh * hd * kvb + 2 * s->Td * qh * hd * AB);
        /* split-KV: the partial results combined */
        small(c, "attn_combine", RL_ATTN_META, L, 4 * s->Td * qh * hd * AB, qh * hd);
    }
    layer_gemm(c, "o_proj", "o_quant", RL_O_PROJ, L, T, qh * hd, h);
    lora_pair(c, "o_lora_a", "o_lora_b", L, s, qh * hd, has(lt, COST_LORA_O), h);
}

/* MLA (DeepSeek). The projections run over every token of the rank; the
 * absorbed form (attention over the latent shared by the heads) serves
 * decodes and prefills after a short prefix, the MHA form (K and V
 * decompressed) prefills without a prefix or after a long one
 * (attention_backend_handler.py: SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD). */
#define MLA_MHA_PREFIX_THRESHOLD 8192

static void mla_attention(rl_counter *c, const rl_model *md, double L, const rl_shape *s, const rl_layout *l)
{
    double h = md->hidden, qr = md->q_lora_rank, kr = md->kv_lora_rank, rope = md->qk_rope_dim;
    double nope = md->qk_nope_dim, vd = md->v_head_dim, qh = l->qh, kvb = c->r->kv_bytes;
    double T = s->Tp + s->Td;
    /* q_a and kv_a fused into one replicated projection */
    layer_gemm(c, "qkv_a_proj", "qkv_a_quant", RL_MLA_DOWN_PROJ, L, T, h, qr + kr + rope);
    if (qr > 0) norm(c, "q_a_norm", L, T, qr);
    norm(c, "kv_a_norm", L, T, kr);
    layer_gemm(c, "q_b_proj", "q_b_quant", RL_MLA_UP_PROJ, L, T, qr > 0 ? qr : h, qh * (nope + rope));
    rl_stream(c, "rope", RL_ROPE, RL_K_ROPE, L, 0, 4 * T * (qh + 1) * rope + 2 * T * rope, (qh + 1) * rope);
    rl_stream(c, "kv_store", RL_KV_STORE, RL_K_ADD, L, 0, T * (kr + rope) * (AB + kvb), kr + rope);

    bool mha = s->Tp > 0 && (s->pctx == 0 || s->pctx >= MLA_MHA_PREFIX_THRESHOLD);
    double Ta = s->Td + (mha ? 0 : s->Tp);   /* tokens through the absorbed form */
    if (mha) {
        double P = s->pctx, kv_tokens = s->Tp + P;
        copy(c, "q_pe_copy", L, s->Tp, qh * rope);
        if (P > 0) copy(c, "prefix_latent_gather", L, P, kr + rope);
        /* K and V decompressed from the latent, then concatenated with k_pe */
        layer_gemm(c, "kv_b_proj", "kv_b_quant", RL_MLA_UP_PROJ, L, kv_tokens, kr, qh * (nope + vd));
        copy(c, "concat_k", L, kv_tokens, qh * (nope + rope));
        small(c, "attn_prepare", RL_ATTN_META, L, 64 * s->Sp, s->Sp);
        rl_attention(c, "attn_prefill", RL_ATTN_PREFILL, L, 2 * (nope + rope + vd) * qh * s->pairs_p,
                     kv_tokens * qh * (nope + rope + vd) * AB + s->Tp * qh * (nope + rope + vd) * AB);
    }
    if (Ta > 0) {
        /* the absorbed form: W_UK folded into the query and W_UV after,
         * bf16 batched GEMMs of one weight matrix per head */
        rl_grouped(c, "bmm_w_kc", RL_MLA_UP_PROJ, RL_K_GROUPED, L, Ta * qh, qh, nope, kr, AB, false);
        small(c, "attn_prepare", RL_ATTN_META, L, 64 * (s->Sd + (mha ? 0 : s->Sp)), s->Sd);
        double pairs = s->pairs_d + (mha ? 0 : s->pairs_p), ctx = s->dctx + (mha ? 0 : s->pctx);
        int op = s->Tp > 0 && !mha && s->Td == 0 ? RL_ATTN_PREFILL : RL_ATTN_DECODE;
        rl_attention(c, op == RL_ATTN_PREFILL ? "attn_prefill" : "attn_decode", op, L,
                     2 * (2 * kr + rope) * qh * pairs, (ctx + Ta) * (kr + rope) * kvb + Ta * qh * (2 * kr + rope) * AB);
        small(c, "attn_combine", RL_ATTN_META, L, 4 * Ta * qh * kr * AB, qh * kr);
        rl_grouped(c, "bmm_w_vc", RL_MLA_UP_PROJ, RL_K_GROUPED, L, Ta * qh, qh, kr, vd, AB, false);
    }
    layer_gemm(c, "o_proj", "o_quant", RL_O_PROJ, L, T, qh * vd, h);
}

/* ---- MLPs and experts ---- */

/* The rows the dense MLPs, the router and (without DeepEP) the experts
 * serve on one GPU: under data-parallel attention every rank's tokens,
 * gathered first. */
static double gathered_rows(const rl_shape *s, const rl_layout *l)
{
    return l->dp > 1 ? s->T_all : s->Tp + s->Td;
}

/* lora: the batch's LoRA work on the dense MLPs (NULL: none, the shared experts) */
static void dense_mlp(rl_counter *c, const char *tag, double L, double rows, double h, double I_gpu,
                      const rl_shape *lora)
{
    bool up = !strcmp(tag, "mlp");
    uint32_t lt = lora ? lora->lora_targets : 0;
    layer_gemm(c, up ? "gate_up_proj" : "shared_gate_up", up ? "gate_up_quant" : "shared_up_quant",
               up ? RL_MLP : RL_SHARED_EXPERT, L, rows, h, 2 * I_gpu);
    double gu = has(lt, COST_LORA_GATE) + has(lt, COST_LORA_UP);
    lora_pair(c, "gate_up_lora_a", "gate_up_lora_b", L, lora, h, gu, gu * I_gpu);
    rl_stream(c, up ? "silu_and_mul" : "shared_silu_and_mul", RL_ACT, RL_K_ACT, L, 0, 3 * rows * I_gpu * AB, I_gpu);
    layer_gemm(c, up ? "down_proj" : "shared_down", up ? "down_quant" : "shared_down_quant",
               up ? RL_MLP : RL_SHARED_EXPERT, L, rows, I_gpu, h);
    lora_pair(c, "down_lora_a", "down_lora_b", L, lora, I_gpu, has(lt, COST_LORA_DOWN), h);
}

/* The statistical imbalance of uniform routing: the busiest of g GPUs
 * among `pairs` token-expert pairs (the expected maximum of g binomials,
 * normal approximation), 1 for a single GPU. */
static double routing_imbalance(double pairs, double g)
{
    if (g < 2 || pairs <= 0) return 1;
    double mean = pairs / g;
    return 1 + sqrt(2 * log(g)) * sqrt((1 - 1 / g) / mean);
}

static void moe_layers(rl_counter *c, const rl_model *md, double Lm, const rl_shape *s, const rl_layout *l)
{
    double h = md->hidden, E = md->experts, k = md->top_k, Im = md->moe_intermediate, g = l->g;
    double Tr = s->Tp + s->Td;                       /* this rank's tokens */
    double Tg = l->deepep ? Tr : gathered_rows(s, l); /* what the router and the experts see here */
    bool deepseek = md->mla;
    /* the router: bf16 weights, fp32 logits for DeepSeek */
    rl_gemm(c, "moe_gate", RL_MOE_GATE, Lm, Tg, h, E, AB, false);
    if (deepseek) {
        small(c, "grouped_topk", RL_MOE_ROUTE, Lm, Tg * E * 4, E);
    } else {
        small(c, "topk_zeros", RL_MOE_ROUTE, Lm, E * 4, E);
        small(c, "topk_softmax", RL_MOE_ROUTE, Lm, Tg * E * 4, E);
    }
    double Is = (double)md->shared_experts * Im;
    bool fused = l->fused_shared && md->shared_experts > 0;
    if (fused) small(c, "shared_append", RL_MOE_ROUTE, 4 * Lm, Tg * (k + 1) * 8, k + 1);

    /* the routed experts on this GPU: rows, distinct experts, width */
    double here = l->ep ? (E + l->redundant) / g : E, Ig = l->ep ? Im : Im / g;
    double T_all = l->ep ? s->T_all : Tg;            /* the tokens that reach this GPU's experts */
    double imbalance = l->imbalance > 0 ? l->imbalance : routing_imbalance(T_all * k, g);
    double rows = l->ep ? T_all * k / g * imbalance : Tg * k;
    double active = here * (1 - pow(1 - k / E, T_all / (1 + l->redundant / E)));
    if (fused) rows += Tg, active += 1;
    bool fp8 = c->r->fp8;
    double wb = fp8 ? 1 : 2;

    if (l->deepep) {
        /* DeepEP: FP8 dispatch of each token's k copies, masked (low latency)
         * or contiguous (normal) grouped GEMMs, the activation fused with its
         * quantisation, bf16 combine */
        /* low latency: every token-expert copy straight to its GPU; normal:
         * once to each other node that holds one of its experts (RDMA), then
         * to the GPUs inside the node (NVLink) */
        double q = fmin(g, c->r->gpu.gpus_per_node), nodes = g / q;
        double bd = h + h / 128 * 4, bc = h * AB, nvl_share, rdma_copies;
        if (l->low_latency) {
            nvl_share = k * (q - 1) / g;
            rdma_copies = k * (g - q) / g;
        } else {
            /* once to each GPU of the node holding one of its experts
             * (NVLink), once to each node (RDMA, when there are others) */
            nvl_share = q * (1 - pow(1 - 1 / q, k));
            rdma_copies = nodes > 1 ? touched_nodes(md, nodes) : 0;
        }
        deepep(c, "deepep_dispatch", Lm, Tr * nvl_share * bd, Tr * rdma_copies * bd, l);
        rl_grouped(c, "moe_w13", RL_MOE_EXPERTS, RL_K_GROUPED, Lm, rows, active, h, 2 * Ig, wb, fp8);
        rl_stream(c, "silu_and_mul_quant", RL_ACT, RL_K_ACT, Lm, 0, rows * Ig * (3 * AB + 1), Ig);
        rl_grouped(c, "moe_w2", RL_MOE_EXPERTS, RL_K_GROUPED, Lm, rows, active, Ig, h, wb, fp8);
        deepep(c, "deepep_combine", Lm, Tr * nvl_share * bc, Tr * rdma_copies * bc, l);
    } else {
        /* SGLang's and vLLM's fused_moe Triton kernel: in FP8 its rate has a
         * ceiling of its own (kernel_time.h); in bf16 it is priced as the
         * grouped GEMM, as Mixtral's measured deployments hold */
        int triton = fp8 ? RL_K_FUSED_MOE : RL_K_GROUPED;
        small(c, "moe_align", RL_MOE_ROUTE, (deepseek || Tg * k >= 1024 || E > 64) ? 2 * Lm : Lm, rows * 8, k);
        if (fp8) quant(c, "moe_w13_quant", Lm, Tg, h);
        rl_grouped(c, "moe_w13", RL_MOE_EXPERTS, triton, Lm, rows, active, h, 2 * Ig, wb, fp8);
        rl_stream(c, "moe_silu_and_mul", RL_ACT, RL_K_ACT, Lm, 0, 3 * rows * Ig * AB, Ig);
        if (fp8) quant(c, "moe_w2_quant", Lm, rows, Ig);
        rl_grouped(c, "moe_w2", RL_MOE_EXPERTS, triton, Lm, rows, active, Ig, h, wb, fp8);
        /* the weighted sum of each token's k outputs (Mixtral's k = 2: one add) */
        rl_stream(c, "moe_sum", RL_MOE_ROUTE, RL_K_ADD, Lm, 0, (Tg * (k + (fused ? 1 : 0)) + Tg) * h * AB, h);
    }
    if (md->shared_experts && !fused) {
        /* apart: with DeepEP on the rank's own tokens, whole; else split g ways */
        double rows_sh = l->deepep ? Tr : Tg, Is_gpu = l->deepep ? Is : Is / g;
        dense_mlp(c, "shared", Lm, rows_sh, h, Is_gpu, NULL);
    }
}

/* ---- the forward ---- */

/* The all-reduce that ends a block over the attention group (n GPUs, the
 * rank's rows). */
static void block_reduce(rl_counter *c, const char *name, double L, double rows, double h, double n,
                         const rl_layout *l)
{
    rl_collective(c, name, RL_ALLREDUCE, RL_COMM_ALLREDUCE, L, rows * h * AB, n, l);
}

void rl_count_forward(rl_counter *c, const rl_model *md, double Ld, double Lm, bool mtp, const rl_shape *s,
                      const rl_layout *l)
{
    double h = md->hidden, L = Ld + Lm, T = s->Tp + s->Td;
    double Tg = gathered_rows(s, l);
    if (T <= 0 && Tg <= 0) return;

    if (T > 0) {
        rl_embedding(c, T, h);
        block_reduce(c, "embed_allreduce", 1, T, h, l->atp, l);   /* vocabulary-parallel over the attention group */
    }
    if (mtp) {
        /* the MTP module: enorm and hnorm in one kernel, eh_proj (2h -> h,
         * bf16, whole on every GPU), then its decoder layer below */
        rl_stream(c, "eh_norm", RL_NORM, RL_K_NORM, 1, 8 * T * h, 4 * T * h * AB, 2 * h);
        rl_gemm(c, "eh_proj", RL_MTP_PROJ, 1, T, 2 * h, h, AB, false);
    }
    if (!md->mla) small(c, "attn_metadata", RL_ATTN_META, 1, 64 * (s->Sp + s->Sd), s->Sp + s->Sd);

    if (T > 0) {
        /* the first layer's input norm follows no all-reduce */
        norm(c, "input_norm", 1, T, h);
        norm_after_reduce(c, "input_norm", L - 1, T, h, l);
        if (md->mla) mla_attention(c, md, L, s, l);
        else gqa_attention(c, md, L, s, l);
        block_reduce(c, l->fused_ar_norm ? "allreduce_add_norm" : "attn_allreduce", L, T, h, l->atp, l);
        norm_after_reduce(c, "post_attn_norm", L, T, h, l);
    }

    /* Between attention and the MLP under data-parallel attention: every
     * rank's tokens gathered to every GPU, and the outputs reduced and
     * scattered back after (DeepEP moves the MoE layers' tokens itself). */
    double gather_layers = l->dp > 1 ? (l->dense_dp ? 0 : Ld) + (l->deepep ? 0 : Lm) : 0;
    if (gather_layers > 0) {
        rl_collective(c, "dp_gather", RL_ALLREDUCE, RL_COMM_ALLGATHER, gather_layers, s->T_all * h * AB, l->g, l);
        rl_collective(c, "dp_scatter", RL_ALLREDUCE, RL_COMM_REDUCE_SCATTER, gather_layers, s->T_all * h * AB, l->g, l);
    }
    if (Ld > 0) {
        if (l->dense_dp) dense_mlp(c, "mlp", Ld, T, h, md->intermediate, NULL);
        else dense_mlp(c, "mlp", Ld, Tg, h, md->intermediate / l->g, s);
        if (l->dp <= 1) block_reduce(c, l->fused_ar_norm ? "allreduce_add_norm" : "mlp_allreduce", Ld, T, h, l->g, l);
    }
    if (Lm > 0 && md->moe) {
        moe_layers(c, md, Lm, s, l);
        if (l->dp <= 1) block_reduce(c, l->fused_ar_norm ? "allreduce_add_norm" : "moe_allreduce", Lm, T, h, l->g, l);
    }

    /* the head: the final norm, the LM head over the rows that want logits
     * (vocabulary split g ways over every rank's rows), the logits gathered */
    double R = l->dp > 1 ? s->R_all : s->Td + s->Sp, V = md->vocab;
    if (T > 0) norm_after_reduce(c, "final_norm", 1, T, h, l);
    if (l->dp > 1 && R > 0) rl_collective(c, "head_gather", RL_ALLREDUCE, RL_COMM_ALLGATHER, 1, R * h * AB, l->g, l);
    rl_gemm(c, "lm_head", RL_LM_HEAD, 1, R, h, V / l->g, AB, false);
    if (R > 0) rl_collective(c, "logits_gather", RL_LOGITS_GATHER, RL_COMM_ALLGATHER, 1, R * V * AB, l->g, l);
}
