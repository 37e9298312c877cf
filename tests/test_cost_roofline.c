/* test_cost_roofline.c — the roofline kind against hand computations: the
 * FLOPs and bytes of one Llama-3-8B decode step and one prefill step, what
 * tp=2 changes, DeepSeek-V3's communication under TP and under EP (one node
 * and two), parameter counts against the published ones, the MTP draft, the
 * efficiency factors, and bad roofline files and presets.
 *
 * Every expected number is written out from the config.json values of the
 * model (Llama-3-8B: hidden 4096, 32 layers, 32 heads, 8 KV heads of 128,
 * MLP 14336, vocabulary 128256) and the GPU datasheet, not from the code. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost.h"
#include "sim/cost/roofline.h"
#include "sim/cost/roofline_impl.h"
#include "testutil.h"

#define CLOSE(a, b) tu_close_rel((a), (b), 1e-12, #a, __LINE__)
#define NEAR(a, b, rel) tu_close_rel((a), (b), (rel), #a, __LINE__)

static int init_presets(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

static cost_model *load(const char *json)
{
    rh_err e;
    cost_model *m = cost_parse(json, "roofline.json", &e);
    if (!m) printf("\n  load failed: %s\n", e.msg);
    return m;
}

static int breakdown(cost_model *m, const cost_seq *s, uint32_t n, uint32_t tp, rl_breakdown *bd)
{
    cost_batch b = {.seqs = s, .n = n, .tp = tp};
    cost_batch_summarize(&b);
    rh_err e;
    int rc = roofline_breakdown(m, &b, bd, &e);
    if (rc < 0) printf("\n  breakdown failed: %s\n", e.msg);
    return rc;
}

/* A kernel's calls add up in one slot whichever literal names it: the
 * slot index finds it by pointer, and by text when a copy of the name
 * comes from elsewhere; slots stay in first-launch order past names that
 * share a hash chain. */
static void test_kernel_slots_by_name(void)
{
    cost_model *m = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const cost_roofline *r = (const cost_roofline *)m;
    rl_breakdown *bd = calloc(1, sizeof *bd);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bd);
    rl_counter c;
    rl_counter_init(&c, r, bd);
    /* 40 names, many sharing their first characters (one hash chain) */
    static char names[40][24];
    for (int i = 0; i < 40; i++) snprintf(names[i], sizeof names[i], "%s_%d", i % 2 ? "attn" : "at", i);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 40; i++) rl_stream(&c, names[i], RL_NORM, RL_K_NORM, 1, 0, 1000 * (i + 1), 100);
    char copy[24];
    snprintf(copy, sizeof copy, "%s", names[7]);   /* the same name at another address */
    rl_stream(&c, copy, RL_NORM, RL_K_NORM, 2, 0, 8000, 100);
    CU_ASSERT_EQUAL(bd->nk, 40);
    for (int i = 0; i < 40 && i < bd->nk; i++) {
        CU_ASSERT_STRING_EQUAL(bd->k[i].name, names[i]);
        CU_ASSERT_EQUAL(bd->k[i].calls, i == 7 ? 5 : 3);
        CU_ASSERT_EQUAL(bd->k[i].bytes, (i == 7 ? 5 : 3) * 1000.0 * (i + 1));
    }
    free(bd);
    cost_free(m);
}

/* Four decodes at contexts 1000..4000 on one H100, bf16. */
static void test_llama8b_decode_by_hand(void)
{
    cost_model *m = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\",\n                         \"kernels\": \"none\", \"host\": \"none\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_seq s[] = {{1, 1000, false}, {1, 2000, false}, {1, 3000, false}, {1, 4000, false}};
    rl_breakdown bd;
    CU_ASSERT_EQUAL_FATAL(breakdown(m, s, 4, 0, &bd), 0);
    const rl_op_cost *o = bd.op;
    /* embedding: 4 rows of 4096 read and written */
    CLOSE(o[RL_EMBED].bytes, 2.0 * 4 * 4096 * 2);
    /* 65 RMSNorms (2 per layer + final) over 4 x 4096 elements */
    CLOSE(o[RL_NORM].flops, 4.0 * 4 * 4096 * 65);
    CLOSE(o[RL_NORM].bytes, 2.0 * 4 * 4096 * 65 * 2 + 65.0 * 4096 * 2);
    /* QKV: 4096 -> (32 + 2·8)·128 = 6144 per layer */
    CLOSE(o[RL_QKV_PROJ].flops, 32 * 2.0 * 4 * 4096 * 6144);
    CLOSE(o[RL_QKV_PROJ].bytes, 32 * (4096.0 * 6144 * 2 + 4 * 4096 * 2 + 4 * 6144 * 2));
    /* attention: each decode attends ctx + 1 keys: 10004 pairs, 4·128 FLOPs
     * per pair per head; reads 10004 tokens of K and V (2·8·128 bf16),
     * writes 4, moves Q and O (4·32·128 each) */
    CLOSE(o[RL_ATTN_DECODE].flops, 32 * 4.0 * 128 * 32 * 10004);
    CLOSE(o[RL_ATTN_DECODE].bytes, 32 * (10004.0 * 2 * 8 * 128 * 2 + 4.0 * 2 * 8 * 128 * 2 + 2.0 * 4 * 32 * 128 * 2));
    CU_ASSERT_EQUAL(o[RL_ATTN_PREFILL].flops, 0);
    CLOSE(o[RL_O_PROJ].flops, 32 * 2.0 * 4 * 4096 * 4096);
    CLOSE(o[RL_O_PROJ].bytes, 32 * (4096.0 * 4096 * 2 + 2.0 * 4 * 4096 * 2));
    /* MLP: gate+up 4096 -> 28672, down 14336 -> 4096 */
    CLOSE(o[RL_MLP].flops, 32 * (2.0 * 4 * 4096 * 28672 + 2.0 * 4 * 14336 * 4096));
    CLOSE(o[RL_MLP].bytes, 32 * (4096.0 * 28672 * 2 + 4 * 4096 * 2 + 4 * 28672 * 2 +
                                 14336.0 * 4096 * 2 + 4 * 14336 * 2 + 4 * 4096 * 2));
    /* LM head over the 4 sampled positions */
    CLOSE(o[RL_LM_HEAD].flops, 2.0 * 4 * 4096 * 128256);
    CLOSE(o[RL_LM_HEAD].bytes, 4096.0 * 128256 * 2 + 4 * 4096 * 2 + 4 * 128256 * 2);
    CU_ASSERT_EQUAL(o[RL_ALLREDUCE].bytes, 0);
    CU_ASSERT_EQUAL(o[RL_MOE_EXPERTS].flops, 0);

    /* A decode of 4 is memory bound everywhere: each op takes bytes / 3.35 TB/s. */
    double total_bytes = 0;
    for (int i = 0; i < RL_N_OPS; i++) {
        total_bytes += o[i].bytes;
        if (o[i].bytes > 0) CU_ASSERT_STRING_EQUAL(o[i].bound, "memory");
    }
    CLOSE(bd.total_s, total_bytes / 3350e9);
    /* the interface gives the same time */
    cost_batch b = {.seqs = s, .n = 4};
    cost_batch_summarize(&b);
    CLOSE(cost_step_time(m, &b), bd.total_s);
    /* ≈ 7.5e9 bf16 weights (all but the embedding) plus 10004 tokens of KV
     * at 32·2·8·128·2 bytes each, at 3.35 TB/s: about 4.87 ms */
    NEAR(bd.total_s, (7.5e9 * 2 + 10004.0 * 32 * 2 * 8 * 128 * 2) / 3350e9, 0.01);
    cost_free(m);
}

/* One 2048-token prompt, no context, on one H100, bf16. */
static void test_llama8b_prefill_by_hand(void)
{
    cost_model *m = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\",\n                         \"kernels\": \"none\", \"host\": \"none\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_seq s = {2048, 0, true};
    rl_breakdown bd;
    CU_ASSERT_EQUAL_FATAL(breakdown(m, &s, 1, 0, &bd), 0);
    const rl_op_cost *o = bd.op;
    const double T = 2048, pairs = 2048.0 * 2049 / 2;     /* causal */
    CLOSE(o[RL_EMBED].bytes, 2 * T * 4096 * 2);
    CLOSE(o[RL_NORM].flops, 4 * T * 4096 * 65);
    CLOSE(o[RL_QKV_PROJ].flops, 32 * 2 * T * 4096 * 6144);
    CLOSE(o[RL_QKV_PROJ].bytes, 32 * (4096.0 * 6144 * 2 + T * 4096 * 2 + T * 6144 * 2));
    CLOSE(o[RL_ATTN_PREFILL].flops, 32 * 4.0 * 128 * 32 * pairs);
    /* reads K, V of the 2048 tokens and writes them; Q and O */
    CLOSE(o[RL_ATTN_PREFILL].bytes, 32 * ((2 * T) * 2 * 8 * 128 * 2 + 2 * T * 32 * 128 * 2));
    CU_ASSERT_EQUAL(o[RL_ATTN_DECODE].flops, 0);
    CLOSE(o[RL_O_PROJ].flops, 32 * 2 * T * 4096 * 4096);
    CLOSE(o[RL_MLP].flops, 32 * (2 * T * 4096 * 28672 + 2 * T * 14336 * 4096));
    CLOSE(o[RL_MLP].bytes, 32 * (4096.0 * 28672 * 2 + T * 4096 * 2 + T * 28672 * 2 +
                                 14336.0 * 4096 * 2 + T * 14336 * 2 + T * 4096 * 2));
    /* only the last position is sampled */
    CLOSE(o[RL_LM_HEAD].flops, 2.0 * 1 * 4096 * 128256);
    /* total FLOPs ≈ 2 · 6.98e9 layer weights (8.03e9 less the embedding
     * and the LM head, which sees one token) · 2048 tokens + attention */
    double flops = 0;
    for (int i = 0; i < RL_N_OPS; i++) flops += o[i].flops;
    NEAR(flops, 2 * (8.03e9 - 2 * 0.525e9) * T + 32 * 4.0 * 128 * 32 * pairs, 0.01);
    /* the GEMMs are compute bound at 989 TFLOP/s */
    CU_ASSERT_STRING_EQUAL(o[RL_MLP].bound, "compute");
    CLOSE(o[RL_MLP].seconds, o[RL_MLP].flops / 989e12);
    CLOSE(o[RL_QKV_PROJ].seconds, o[RL_QKV_PROJ].flops / 989e12);

    /* A chunk of 1024 at context 3072: 1024·3072 + 1024·1025/2 pairs; the
     * same step rebuilt from a step record prices the same. */
    cost_seq c = {1024, 3072, true};
    CU_ASSERT_EQUAL_FATAL(breakdown(m, &c, 1, 0, &bd), 0);
    CLOSE(bd.op[RL_ATTN_PREFILL].flops, 32 * 4.0 * 128 * 32 * (1024.0 * 3072 + 1024.0 * 1025 / 2));
    CLOSE(bd.op[RL_ATTN_PREFILL].bytes, 32 * ((3072 + 2 * 1024.0) * 2 * 8 * 128 * 2 + 2 * 1024.0 * 32 * 128 * 2));
    tr_step st = {0};
    st.prefill_tokens = 1024;
    st.prefill_seqs = 1;
    st.prefill_context = 3072;
    st.prefill_attn = 1024 * (3072 + 1024);
    cost_batch fb;
    cost_batch_from_step(&fb, &st);
    CLOSE(cost_step_time(m, &fb), bd.total_s);
    cost_free(m);
}

/* The measured collectives of h100-sxm.json (h200.json has the same):
 * per-call latencies, the achieved NVLink and InfiniBand bandwidths. */
#define AR_LAT 3.288e-5
#define P2P_LAT 7.52e-6
#define IB_LAT 1.061e-5
#define NVL 361.8e9
#define IB 36.22e9

/* One ring all-reduce of S bytes on n GPUs in one node, by hand. */
static double ring_in_node(double n, double S)
{
    return AR_LAT + 2 * (n - 1) / n * S / NVL;
}

static void test_llama8b_tp2(void)
{
    cost_model *m = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_seq s[] = {{512, 0, true}, {1, 1000, false}, {1, 3000, false}};
    rl_breakdown one, two;
    CU_ASSERT_EQUAL_FATAL(breakdown(m, s, 3, 1, &one), 0);
    CU_ASSERT_EQUAL_FATAL(breakdown(m, s, 3, 2, &two), 0);
    const int halved[] = {RL_QKV_PROJ, RL_O_PROJ, RL_MLP, RL_LM_HEAD, RL_ATTN_PREFILL, RL_ATTN_DECODE};
    for (size_t i = 0; i < sizeof halved / sizeof halved[0]; i++)
        CLOSE(two.op[halved[i]].flops, one.op[halved[i]].flops / 2);
    /* norms are replicated */
    CLOSE(two.op[RL_NORM].flops, one.op[RL_NORM].flops);
    /* all-reduce: 2 per layer + the embedding's, of 514 tokens x 4096 bf16,
     * a ring moving 2(n−1)/n of the message: 65 · 1 · 514·4096·2 bytes */
    CU_ASSERT_EQUAL(one.op[RL_ALLREDUCE].bytes, 0);
    const double msg = 514.0 * 4096 * 2;
    CLOSE(two.op[RL_ALLREDUCE].bytes, 65 * 2 * (2 - 1) / 2.0 * msg);
    CLOSE(two.op[RL_ALLREDUCE].seconds, 65 * ring_in_node(2, msg));
    CU_ASSERT_STRING_EQUAL(two.op[RL_ALLREDUCE].bound, "link");
    /* At 4 and 8 GPUs in one node the ring moves 2(n−1)/n = 1.5 and 1.75
     * messages per all-reduce (at 2 the factor is 1 and cannot show). */
    for (uint32_t n = 4; n <= 8; n *= 2) {
        rl_breakdown bd;
        CU_ASSERT_EQUAL_FATAL(breakdown(m, s, 3, n, &bd), 0);
        double ring = 2.0 * (n - 1) / n;
        CLOSE(bd.op[RL_ALLREDUCE].bytes, 65 * ring * msg);
        CLOSE(bd.op[RL_ALLREDUCE].seconds, 65 * ring_in_node(n, msg));
        CLOSE(bd.op[RL_QKV_PROJ].flops, one.op[RL_QKV_PROJ].flops / n);
    }
    /* logits of the 3 sampled positions gathered: half of 3·128256 bf16 */
    CLOSE(two.op[RL_LOGITS_GATHER].bytes, 0.5 * 3 * 128256 * 2);
    CU_ASSERT(two.total_s < one.total_s);
    cost_free(m);
}

/* The serving frameworks' custom all-reduce inside a node (h100-sxm.json,
 * SGLang PR #2904's H100 figures) and DeepEP's low-latency kernels (the
 * H800 fit with H100's NVLink: 148 x 450 / 200 = 333 GB/s, RDMA 44 GB/s,
 * 30 us a call). */
#define CAR_LAT 6.1e-6
#define CAR_BW 33e9
#define LL_LAT 3.0e-5
#define LL_NVL 333e9
#define LL_RDMA 44e9

/* An all-reduce of S bytes on n GPUs of one node: NCCL's ring or the
 * custom all-reduce, whichever is faster. */
static double ar_in_node(double n, double S)
{
    return fmin(ring_in_node(n, S), CAR_LAT + S / CAR_BW);
}

/* DeepSeek-V3, 64 decodes: tensor parallel over 8 H200 (all-reduces) against
 * "ep": 8 (DeepSeek's layout: data-parallel attention, experts spread,
 * DeepEP's low-latency dispatch and combine), and the same on 16 GPUs over
 * two nodes. */
static void test_deepseek_tp_vs_ep(void)
{
    cost_seq s[64];
    for (int i = 0; i < 64; i++) s[i] = (cost_seq){1, 2000, false};
    const double T = 64, h = 7168, k = 8, V = 129280;
    rl_breakdown tp, ep;

    cost_model *mt = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-v3\", \"gpu\": \"h200\","
                          " \"tp\": 8, \"dtype\": \"fp8\"}");
    cost_model *me = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-v3\", \"gpu\": \"h200\","
                          " \"tp\": 8, \"ep\": 8, \"dtype\": \"fp8\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mt);
    CU_ASSERT_PTR_NOT_NULL_FATAL(me);
    CU_ASSERT_EQUAL_FATAL(breakdown(mt, s, 64, 0, &tp), 0);
    CU_ASSERT_EQUAL_FATAL(breakdown(me, s, 64, 0, &ep), 0);
    /* TP: the embedding's, 61 after attention, 3 after the dense MLPs, 58
     * after the MoE layers: 123 all-reduces of 64 x 7168 bf16, ring 2·7/8
     * (the custom all-reduce here, the faster at 0.9 MB) */
    const double S = T * h * 2;
    CLOSE(tp.op[RL_ALLREDUCE].bytes, 123 * 2 * 7.0 / 8 * S);
    CLOSE(tp.op[RL_ALLREDUCE].seconds, 123 * ar_in_node(8, S));
    CU_ASSERT(CAR_LAT + S / CAR_BW < ring_in_node(8, S));
    CU_ASSERT_EQUAL(tp.op[RL_ALLTOALL].bytes, 0);
    /* logits of the 64 sampled rows gathered: 7/8 of 64·129280 bf16 */
    CLOSE(tp.op[RL_LOGITS_GATHER].bytes, 7.0 / 8 * T * V * 2);
    /* EP: each rank's 8 tokens dispatched to 8 experts each (FP8 with a
     * scale per 128), combined back in bf16, 7/8 of them to other GPUs; the
     * dense layers' and the head's tokens gathered from every rank and
     * scattered back */
    const double Tr = T / 8, Sd = Tr * k * (h + h / 128 * 4), Sc = Tr * k * h * 2;
    CLOSE(ep.op[RL_ALLTOALL].bytes, 58 * 7.0 / 8 * (Sd + Sc));
    CLOSE(ep.op[RL_ALLTOALL].seconds, 58 * (2 * LL_LAT + 7.0 / 8 * (Sd + Sc) / LL_NVL));
    CLOSE(ep.op[RL_ALLREDUCE].bytes, (2 * 3 + 1) * 7.0 / 8 * S);
    CLOSE(ep.op[RL_LOGITS_GATHER].bytes, 7.0 / 8 * T * V * 2);
    /* routed experts per GPU: under TP 1/8 of the 2048 columns for each of
     * the 512 token-expert pairs and the fused shared expert's 64; under EP
     * whole experts for the busiest GPU's pairs: 64 on average, times the
     * statistical imbalance of uniform routing, 1 + sqrt(2 ln 8)·sqrt((7/8) / 64) */
    CLOSE(tp.op[RL_MOE_EXPERTS].flops, 58 * 6 * (T * (k + 1)) * h * (2048.0 / 8));
    const double imb = 1 + sqrt(2 * log(8.0)) * sqrt((7.0 / 8) / 64);
    CLOSE(ep.op[RL_MOE_EXPERTS].flops, 58 * 6 * (T * k / 8 * imb) * h * 2048.0);
    /* the shared expert apart under EP, whole, on the rank's 8 tokens */
    CLOSE(ep.op[RL_SHARED_EXPERT].flops, 58 * 6 * Tr * h * 2048.0);
    CLOSE(ep.op[RL_ATTN_DECODE].flops, tp.op[RL_ATTN_DECODE].flops);
    /* under TP each GPU reads the whole MLA latent cache (576 per token,
     * bf16), under EP its rank's eighth */
    CLOSE(tp.op[RL_ATTN_DECODE].bytes, 61 * ((128000 + T) * 576 * 2 + T * 16 * (2 * 512 + 64) * 2));
    CLOSE(ep.op[RL_ATTN_DECODE].bytes, 61 * ((16000 + Tr) * 576 * 2 + Tr * 128 * (2 * 512 + 64) * 2));
    cost_free(mt);
    cost_free(me);

    /* Two nodes of 8: the TP ring crosses InfiniBand, its eight NICs at once
     * bounding it below NVLink, twice the slow hop's latency, NCCL's alone
     * (the custom all-reduce is one node's); DeepEP sends 7 of 16 shares
     * over NVLink, 8 over RDMA. */
    mt = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-v3\", \"gpu\": \"h200\","
              " \"tp\": 16, \"dtype\": \"fp8\"}");
    me = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-v3\", \"gpu\": \"h200\","
              " \"tp\": 16, \"ep\": 16, \"dtype\": \"fp8\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mt);
    CU_ASSERT_PTR_NOT_NULL_FATAL(me);
    CU_ASSERT_EQUAL_FATAL(breakdown(mt, s, 64, 0, &tp), 0);
    CU_ASSERT_EQUAL_FATAL(breakdown(me, s, 64, 0, &ep), 0);
    CLOSE(tp.op[RL_ALLREDUCE].bytes, 123 * 2 * 15.0 / 16 * S);
    CLOSE(tp.op[RL_ALLREDUCE].seconds, 123 * (AR_LAT + 2 * IB_LAT + 2 * 15.0 / 16 * S / fmin(NVL, 8 * IB)));
    const double Tr16 = T / 16, Sd16 = Tr16 * k * (h + h / 128 * 4), Sc16 = Tr16 * k * h * 2;
    CLOSE(ep.op[RL_ALLTOALL].bytes, 58 * 15.0 / 16 * (Sd16 + Sc16));
    CLOSE(ep.op[RL_ALLTOALL].seconds, 58 * (2 * LL_LAT + fmax(Sd16 * 7 / 16 / LL_NVL, Sd16 * 8 / 16 / LL_RDMA) +
                                            fmax(Sc16 * 7 / 16 / LL_NVL, Sc16 * 8 / 16 / LL_RDMA)));
    CU_ASSERT(ep.op[RL_ALLTOALL].seconds < tp.op[RL_ALLREDUCE].seconds);
    cost_free(mt);
    cost_free(me);
}

/* Parameter counts from the presets against the published ones, and the
 * FLOPs of one token against the parameters it activates. */
static void test_params_match_published(void)
{
    rl_model m;
    rl_params p;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(rl_model_load("llama-3-8b", &m, &e), 0);
    rl_model_params(&m, &p);
    CU_ASSERT_EQUAL(p.total, 8030261248.0);             /* safetensors total of Meta-Llama-3-8B */
    CU_ASSERT_EQUAL_FATAL(rl_model_load("llama-3-70b", &m, &e), 0);
    rl_model_params(&m, &p);
    CU_ASSERT_EQUAL(p.total, 70553706496.0);
    CU_ASSERT_EQUAL_FATAL(rl_model_load("qwen2.5-7b", &m, &e), 0);
    rl_model_params(&m, &p);
    NEAR(p.total, 7.61e9, 0.003);                          /* model card: 7.61B, 6.53B non-embedding */
    NEAR(p.total - 2.0 * 152064 * 3584, 6.53e9, 0.003);
    CU_ASSERT_EQUAL_FATAL(rl_model_load("qwen2.5-72b", &m, &e), 0);
    rl_model_params(&m, &p);
    NEAR(p.total, 72.7e9, 0.003);                          /* model card: 72.7B */
    CU_ASSERT_EQUAL_FATAL(rl_model_load("mixtral-8x7b", &m, &e), 0);
    rl_model_params(&m, &p);
    NEAR(p.total, 46.7e9, 0.003);                          /* Mistral: 46.7B total, 12.9B active */
    NEAR(p.active + 32000.0 * 4096, 12.9e9, 0.003);
    CU_ASSERT_EQUAL_FATAL(rl_model_load("deepseek-v3", &m, &e), 0);
    rl_model_params(&m, &p);
    NEAR(p.total, 671e9, 0.003);                           /* 671B; 36.6B active incl. the 0.9B head */
    NEAR(p.active, 36.6e9, 0.003);
    NEAR(p.mtp, 11.5e9, 0.015);                            /* MTP: 11.5B unique */
    CU_ASSERT_EQUAL_FATAL(rl_model_load("deepseek-r1", &m, &e), 0);
    rl_params r1;
    rl_model_params(&m, &r1);
    CU_ASSERT_EQUAL(r1.total, p.total);

    /* One decode token at context 0 (bf16, one GPU): the GEMMs do 2 FLOPs
     * per activated weight, i.e. every activated parameter but the norms. */
    const char *models[] = {"llama-3-8b", "qwen2.5-7b", "mixtral-8x7b", "deepseek-v3"};
    for (size_t i = 0; i < 4; i++) {
        char json[256];
        snprintf(json, sizeof json, "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"%s\", \"gpu\": \"h200\"}",
                 models[i]);
        cost_model *cm = load(json);
        CU_ASSERT_PTR_NOT_NULL_FATAL(cm);
        const rl_model *md = roofline_model(cm);
        rl_model_params(md, &p);
        cost_seq one = {1, 0, false};
        rl_breakdown bd;
        CU_ASSERT_EQUAL_FATAL(breakdown(cm, &one, 1, 0, &bd), 0);
        double gemm = 0;
        const int ops[] = {RL_QKV_PROJ, RL_MLA_DOWN_PROJ, RL_MLA_UP_PROJ, RL_O_PROJ, RL_MLP, RL_MOE_GATE,
                           RL_MOE_EXPERTS, RL_SHARED_EXPERT, RL_LM_HEAD};
        for (size_t j = 0; j < sizeof ops / sizeof ops[0]; j++) gemm += bd.op[ops[j]].flops;
        double norms = md->hidden * (2.0 * md->layers + 1) +
                       (md->mla ? md->layers * ((double)md->q_lora_rank + md->kv_lora_rank) : 0);
        double biases = md->qkv_bias ? md->layers * (md->heads + 2.0 * md->kv_heads) * md->head_dim : 0;
        CLOSE(gemm, 2 * (p.active - norms - biases));
        cost_free(cm);
    }
}

/* DeepSeek's MTP module drafts: a speculative step costs the verify forward
 * plus one MTP forward per draft step. */
static void test_mtp_draft(void)
{
    cost_model *m = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-v3\", \"gpu\": \"h200\","
                         " \"tp\": 8, \"dtype\": \"fp8\", \"host\": \"none\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_seq s[32];
    for (int i = 0; i < 32; i++) s[i] = (cost_seq){3, 1000, false};     /* verify 2 drafts */
    cost_batch b = {.seqs = s, .n = 32, .draft_steps = 2, .draft_seqs = 32};
    cost_batch_summarize(&b);
    rl_breakdown fwd, d0, d1;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(m, &b, &fwd, &e), 0);
    /* SGLang's EAGLE worker with an MTP module: steps − 1 one-token passes,
     * then one extend pass over each request's 3 verified tokens */
    CU_ASSERT_EQUAL_FATAL(roofline_draft_breakdown(m, 32, 32, 32000, 0, &d0, &e), 0);
    CU_ASSERT_EQUAL_FATAL(roofline_draft_breakdown(m, 32, 96, 32000, 0, &d1, &e), 0);
    CLOSE(cost_step_time(m, &b), fwd.total_s + d0.total_s + d1.total_s);
    CLOSE(d1.op[RL_MTP_PROJ].flops, 2 * 96.0 * (2 * 7168) * 7168);
    /* the verify runs 96 tokens through the GEMMs */
    CLOSE(fwd.op[RL_O_PROJ].flops, 61 * 2 * 96.0 * (16 * 128) * 7168);
    /* an MTP forward is one MoE layer of the model plus eh_proj (2h -> h)
     * and the shared head, over the 32 sequences */
    cost_seq one[32];
    for (int i = 0; i < 32; i++) one[i] = (cost_seq){1, 1000, false};
    rl_breakdown plain;
    CU_ASSERT_EQUAL_FATAL(breakdown(m, one, 32, 0, &plain), 0);
    CLOSE(d0.op[RL_MOE_EXPERTS].flops, plain.op[RL_MOE_EXPERTS].flops / 58);
    CLOSE(d0.op[RL_O_PROJ].flops, plain.op[RL_O_PROJ].flops / 61);
    CLOSE(d0.op[RL_MTP_PROJ].flops, 2 * 32.0 * (2 * 7168) * 7168);
    CLOSE(d0.op[RL_LM_HEAD].flops, plain.op[RL_LM_HEAD].flops);
    CLOSE(d0.op[RL_ALLREDUCE].bytes, 3 * 2 * 7.0 / 8 * 32 * 7168 * 2);
    CU_ASSERT(d0.total_s < fwd.total_s / 10);
    cost_free(m);

    /* a dense model without MTP drafts with a named draft model, or else at
     * draft_ratio of a decode */
    m = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-70b\", \"gpu\": \"h100-sxm\","
             " \"tp\": 4, \"draft_model\": \"llama-3-8b\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL_FATAL(roofline_draft_breakdown(m, 32, 32, 32000, 0, &d0, &e), 0);
    cost_model *small = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\","
                             " \"gpu\": \"h100-sxm\", \"tp\": 4}");
    CU_ASSERT_EQUAL_FATAL(breakdown(small, one, 32, 0, &plain), 0);
    CLOSE(d0.total_s, plain.total_s);
    cost_free(small);
    cost_free(m);
    m = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\","
             " \"draft_ratio\": 0.2, \"host\": \"none\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_batch b1 = {.seqs = one, .n = 32};
    cost_batch_summarize(&b1);
    double dec = cost_step_time(m, &b1);
    b1.draft_steps = 1;
    b1.draft_seqs = 32;
    CLOSE(cost_draft_time(m, &b1), 0.2 * dec);
    cost_free(m);
}

static void test_efficiency_overhead_latency(void)
{
    cost_model *a = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\", \"kernels\": \"none\","
                         " \"tp\": 2, \"host\": \"none\"}");
    cost_model *b = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\", \"kernels\": \"none\","
                         " \"tp\": 2, \"efficiency\": {\"default\": 0.8, \"mlp\": 0.5}, \"step_overhead_s\": 0.002,"
                         " \"collective_latency_s\": 1e-5, \"host\": \"none\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    cost_seq s[] = {{700, 0, true}, {1, 5000, false}};
    rl_breakdown x, y;
    CU_ASSERT_EQUAL_FATAL(breakdown(a, s, 2, 0, &x), 0);
    CU_ASSERT_EQUAL_FATAL(breakdown(b, s, 2, 0, &y), 0);
    CLOSE(y.op[RL_MLP].seconds, 2 * x.op[RL_MLP].seconds);
    CLOSE(y.op[RL_QKV_PROJ].seconds, x.op[RL_QKV_PROJ].seconds / 0.8);
    /* an efficiency scales the link's bandwidth, not its latency */
    CLOSE(y.op[RL_ALLREDUCE].seconds, (x.op[RL_ALLREDUCE].seconds - 65 * AR_LAT) / 0.8 + 65 * AR_LAT + 65 * 1e-5);
    double sum = 0;
    for (int i = 0; i < RL_N_OPS; i++) sum += y.op[i].seconds;
    CLOSE(y.total_s, sum);
    /* step_overhead_s is the step's CPU time: once, outside the forward */
    cost_batch bb = {.seqs = s, .n = 2};
    cost_batch_summarize(&bb);
    CLOSE(cost_step_time(b, &bb), y.total_s + 0.002);
    /* the interface's terms add up to the step time */
    cost_term t[32];
    int n = cost_breakdown(b, &bb, t, 32);
    double tsum = 0;
    for (int i = 0; i < n; i++) tsum += t[i].seconds;
    CLOSE(tsum, cost_step_time(b, &bb));
    /* another tp size is priced when the model allows it, else refused */
    rh_err e;
    CU_ASSERT_EQUAL(cost_check_tp(a, 8, &e), 0);
    CU_ASSERT_EQUAL(cost_check_tp(a, 3, &e), -1);
    CU_ASSERT(strstr(e.msg, "'tp'") && strstr(e.msg, "tp 3"));
    bb.tp = 3;
    CU_ASSERT(isnan(cost_step_time(a, &bb)));
    cost_free(a);
    cost_free(b);
}

static void bad(const char *json, const char *needle)
{
    rh_err e = {""};
    cost_model *m = cost_parse(json, "bad.json", &e);
    CU_ASSERT_PTR_NULL(m);
    if (m) cost_free(m);
    int ok = strstr(e.msg, needle) != NULL;
    if (!ok) printf("\n  message '%s' lacks '%s'\n", e.msg, needle);
    CU_ASSERT(ok);
}

#define RL "{\"kind\": \"roofline\", \"version\": 1, "

static void test_bad_roofline_files(void)
{
    bad(RL "\"model\": \"llama-9b\", \"gpu\": \"h200\"}", "bad.json: field 'model': no model preset 'llama-9b'");
    bad(RL "\"model\": \"llama-9b\", \"gpu\": \"h200\"}", "known: deepseek-r1, deepseek-v3, llama-2-70b");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"x200\"}", "bad.json: field 'gpu': no GPU preset 'x200'");
    bad(RL "\"model\": \"../../etc/x\", \"gpu\": \"h200\"}", "'model': preset file");
    bad(RL "\"model\": \"llama 3\", \"gpu\": \"h200\"}", "not a preset name");
    bad(RL "\"gpu\": \"h200\"}", "'model': missing");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"a100-80g\", \"dtype\": \"fp8\"}", "'dtype': fp8 needs");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"h200\", \"dtype\": \"int4\"}", "'dtype': 'int4'");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"h200\", \"tp\": 3}", "'tp': tp 3 does not divide the 32");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"h200\", \"tp\": 0}", "'tp': 0 is out of range");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"h200\", \"tp\": 12}", "spans nodes of 8 GPUs");
    bad(RL "\"model\": \"qwen2.5-7b\", \"gpu\": \"h200\", \"tp\": 8}", "'tp': tp 8 does not divide the 28");
    bad(RL "\"model\": \"deepseek-v3\", \"gpu\": \"h200\", \"tp\": 8, \"ep\": 4}", "'ep': 4");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"h200\", \"tp\": 8, \"ep\": 8}", "'ep': 8: model llama-3-8b has no experts");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"h200\", \"efficiency\": {\"mlpp\": 0.5}}", "'efficiency.mlpp': unknown");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"h200\", \"efficiency\": {\"mlp\": 0}}", "'efficiency.mlp': 0 is out");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"h200\", \"efficiency\": {\"mlp\": 1.5}}", "'efficiency.mlp'");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"h200\", \"step_overhead_s\": -1}", "'step_overhead_s'");
    bad(RL "\"model\": \"llama-3-8b\", \"gpu\": \"h200\", \"tpp\": 2}", "'tpp': unknown field");
    bad(RL "\"model\": \"llama-3-70b\", \"gpu\": \"h200\", \"tp\": 8, \"draft_model\": \"nope\"}", "'draft_model'");
    bad("{\"kind\": \"roofline\", \"version\": 3, \"model\": \"llama-3-8b\", \"gpu\": \"h200\"}", "'version': version 3");
}

/* Presets named by path, relative to the cost file; a Hugging Face
 * config.json with nulls and extra keys is a model preset; a broken preset
 * is named with its own field. */
static void test_presets_by_path(void)
{
    char dir[256], path[300], cfg[300], gpu[300];
    tu_tmp_path("presets", dir, sizeof dir);
    CU_ASSERT_EQUAL_FATAL(tu_run("mkdir -p build/tmp", NULL, 0), 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, NULL, 0), 0);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    const char *hf = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 4096, \"intermediate_size\": 14336,"
                     " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
                     " \"vocab_size\": 128256, \"rope_scaling\": null, \"torch_dtype\": \"bfloat16\"}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(cfg, hf, strlen(hf)), 0);
    snprintf(gpu, sizeof gpu, "%s/mygpu.json", dir);
    const char *g = "{\"memory_GB\": 80, \"hbm_GBps\": 1000, \"bf16_tflops\": 100, \"fp8_tflops\": 0,"
                    " \"nvlink_GBps\": 100, \"ib_GBps\": 10, \"gpus_per_node\": 4}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(gpu, g, strlen(g)), 0);
    snprintf(path, sizeof path, "%s/cost.json", dir);
    const char *c = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"config.json\", \"gpu\": \"mygpu.json\","
                    " \"host\": \"none\"}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, c, strlen(c)), 0);
    rh_err e;
    cost_model *m = cost_load(path, &e);
    if (!m) printf("\n  %s\n", e.msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_STRING_EQUAL(roofline_gpu(m)->name, "mygpu");
    CU_ASSERT_EQUAL(roofline_model(m)->head_dim, 128);
    /* same model, same prices per byte: a decode of one at 1000 GB/s */
    cost_model *ref = load(RL "\"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\", \"kernels\": \"none\", \"host\": \"none\"}");
    cost_seq s = {1, 100, false};
    rl_breakdown x, y;
    CU_ASSERT_EQUAL_FATAL(breakdown(m, &s, 1, 0, &x), 0);
    CU_ASSERT_EQUAL_FATAL(breakdown(ref, &s, 1, 0, &y), 0);
    CLOSE(x.total_s, y.total_s * 3350 / 1000);
    cost_free(ref);
    cost_free(m);
    /* the same text parsed in memory under the file's name resolves the same */
    m = cost_parse(c, path, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_STRING_EQUAL(roofline_gpu(m)->name, "mygpu");
    cost_free(m);

    /* a GPU preset with a typo is named by its own file and field */
    const char *g2 = "{\"memory_GB\": 80, \"hbm_GBps\": 1000, \"bf16_tflop\": 100, \"fp8_tflops\": 0,"
                     " \"nvlink_GBps\": 100, \"ib_GBps\": 10, \"gpus_per_node\": 4}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(gpu, g2, strlen(g2)), 0);
    CU_ASSERT_PTR_NULL(cost_load(path, &e));
    CU_ASSERT(strstr(e.msg, "mygpu.json: field 'bf16_tflop': unknown field") != NULL);
    const char *hf2 = "{\"hidden_size\": 4096, \"num_attention_heads\": 32, \"num_hidden_layers\": 32,"
                      " \"vocab_size\": 128256}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(gpu, g, strlen(g)), 0);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(cfg, hf2, strlen(hf2)), 0);
    CU_ASSERT_PTR_NULL(cost_load(path, &e));
    CU_ASSERT(strstr(e.msg, "config.json: field 'intermediate_size': missing") != NULL);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    tu_run(cmd, NULL, 0);
}

/* Every number of a shipped GPU preset has its source; every model preset
 * names the config.json it copies. */
static void test_shipped_presets_cite_sources(void)
{
    const char *cats[] = {"gpus", "models", "hosts"};
    int files = 0;
    for (int c = 0; c < 3; c++) {
        char d[64];
        snprintf(d, sizeof d, "sim/cost/presets/%s", cats[c]);
        DIR *dir = opendir(d);
        CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
        struct dirent *de;
        while ((de = readdir(dir))) {
            if (!strstr(de->d_name, ".json")) continue;
            char p[600];
            snprintf(p, sizeof p, "%s/%s", d, de->d_name);
            json_error_t je;
            json_t *o = json_load_file(p, 0, &je);
            CU_ASSERT_PTR_NOT_NULL_FATAL(o);
            files++;
            json_t *src = json_object_get(o, "sources");
            const char *key;
            json_t *v;
            json_object_foreach(o, key, v) {
                if (!json_is_number(v)) continue;
                int cited = (src && json_is_string(json_object_get(src, key))) ||
                            (c == 1 && json_is_string(json_object_get(o, "source")));
                if (c == 2 && !cited) printf("\n  %s: '%s' needs a source in \"sources\"\n", p, key);
                if (!cited) printf("\n  %s: '%s' has no source\n", p, key);
                CU_ASSERT(cited);
            }
            char name[300];
            snprintf(name, sizeof name, "%.*s", (int)(strlen(de->d_name) - 5), de->d_name);
            CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "name")), name);
            json_decref(o);
            rh_err e;
            if (c == 0) {
                rl_gpu g;
                CU_ASSERT_EQUAL(rl_gpu_load(name, &g, &e), 0);
            } else if (c == 2) {
                rl_host h;
                CU_ASSERT_EQUAL(rl_host_load(name, &h, &e), 0);
            } else {
                rl_model m;
                CU_ASSERT_EQUAL(rl_model_load(name, &m, &e), 0);
            }
        }
        closedir(dir);
    }
    CU_ASSERT_EQUAL(files, 9 + 11 + 1);
}

/* Data-parallel attention (ep = tp): a request runs on one rank. A lone 8k
 * prompt's attention is one GPU's attention of the whole prompt (as on a
 * single GPU), sixteen times what the even split of a batch known only by
 * its aggregates gives; sixteen equal prompts go one to a rank, as the even
 * split has it; of two unequal prompts the step is the longer one's rank. */
static void test_dp_attention(void)
{
    cost_model *ep = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-r1\", \"gpu\": \"h100-sxm\","
                          " \"tp\": 16, \"ep\": 16, \"dtype\": \"fp8\", \"kernels\": \"none\"}");
    cost_model *one = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-r1\", \"gpu\": \"h100-sxm\","
                           " \"dtype\": \"fp8\", \"kernels\": \"none\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(ep);
    CU_ASSERT_PTR_NOT_NULL_FATAL(one);
    cost_seq lone = {8192, 0, true};
    rl_breakdown placed, spread, single;
    CU_ASSERT_EQUAL_FATAL(breakdown(ep, &lone, 1, 0, &placed), 0);
    CU_ASSERT_EQUAL_FATAL(breakdown(one, &lone, 1, 0, &single), 0);
    cost_batch agg = {.seqs = &lone, .n = 1};
    cost_batch_summarize(&agg);
    agg.seqs = NULL;
    agg.n = 0;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(ep, &agg, &spread, &e), 0);
    CLOSE(placed.op[RL_ATTN_PREFILL].seconds, single.op[RL_ATTN_PREFILL].seconds);
    CLOSE(placed.op[RL_ATTN_PREFILL].seconds, 16 * spread.op[RL_ATTN_PREFILL].seconds);
    CU_ASSERT(placed.total_s > spread.total_s);

    cost_seq sixteen[16];
    for (int i = 0; i < 16; i++) sixteen[i] = (cost_seq){512, 0, true};
    CU_ASSERT_EQUAL_FATAL(breakdown(ep, sixteen, 16, 0, &placed), 0);
    cost_batch agg16 = {.seqs = sixteen, .n = 16};
    cost_batch_summarize(&agg16);
    agg16.seqs = NULL;
    agg16.n = 0;
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(ep, &agg16, &spread, &e), 0);
    CLOSE(placed.total_s, spread.total_s);

    cost_seq two[] = {{1024, 0, true}, {8192, 0, true}};
    CU_ASSERT_EQUAL_FATAL(breakdown(ep, two, 2, 0, &placed), 0);
    CLOSE(placed.op[RL_ATTN_PREFILL].seconds, single.op[RL_ATTN_PREFILL].seconds);
    cost_free(ep);
    cost_free(one);
}

/* The weights as published: DeepSeek's FP8 checkpoint runs in FP8 on a GPU
 * with FP8 tensor cores unless the file says otherwise, in bf16 on one
 * without; a bf16 checkpoint stays bf16. */
static double step_of(const char *json, const cost_seq *s, size_t n)
{
    cost_model *m = load(json);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_batch b = {.seqs = (cost_seq *)s, .n = n};
    cost_batch_summarize(&b);
    double t = cost_step_time(m, &b);
    cost_free(m);
    return t;
}

static void test_dtype_from_checkpoint(void)
{
    cost_seq s[2] = {{2048, 0, true}, {1, 1000, false}};
#define R1(gpu, extra) "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-r1\", \"gpu\": \"" gpu "\", " \
                       "\"tp\": 16" extra "}"
    double h200 = step_of(R1("h200", ""), s, 2), h200_fp8 = step_of(R1("h200", ", \"dtype\": \"fp8\""), s, 2);
    double h200_bf16 = step_of(R1("h200", ", \"dtype\": \"bf16\""), s, 2);
    CLOSE(h200, h200_fp8);
    CU_ASSERT(fabs(h200_bf16 / h200 - 1) > 0.02);
    double a100 = step_of(R1("a100-80g", ""), s, 2), a100_bf16 = step_of(R1("a100-80g", ", \"dtype\": \"bf16\""), s, 2);
    CLOSE(a100, a100_bf16);
#undef R1
    const char *l8 = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\"";
    char a[256], b[256];
    snprintf(a, sizeof a, "%s}", l8);
    snprintf(b, sizeof b, "%s, \"dtype\": \"bf16\"}", l8);
    CLOSE(step_of(a, s, 2), step_of(b, s, 2));
    rl_model m;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(rl_model_load("deepseek-v3", &m, &e), 0);
    CU_ASSERT(m.fp8_checkpoint);
    CU_ASSERT_EQUAL_FATAL(rl_model_load("llama-3-8b", &m, &e), 0);
    CU_ASSERT(!m.fp8_checkpoint);
}

void register_test_cost_roofline(void)
{
    CU_pSuite s = CU_add_suite("cost_roofline", init_presets, NULL);
    CU_add_test(s, "llama-3-8b decode step by hand", test_llama8b_decode_by_hand);
    CU_add_test(s, "llama-3-8b prefill step by hand", test_llama8b_prefill_by_hand);
    CU_add_test(s, "tp=2, 4, 8: GEMM FLOPs split, the ring all-reduce added", test_llama8b_tp2);
    CU_add_test(s, "deepseek-v3 TP vs EP communication by hand", test_deepseek_tp_vs_ep);
    CU_add_test(s, "parameter counts match published ones", test_params_match_published);
    CU_add_test(s, "MTP and draft-model drafting", test_mtp_draft);
    CU_add_test(s, "efficiency, overhead, latency, other tp", test_efficiency_overhead_latency);
    CU_add_test(s, "bad roofline files name file and field", test_bad_roofline_files);
    CU_add_test(s, "presets by path, HF config.json", test_presets_by_path);
    CU_add_test(s, "data-parallel attention: a request runs on one rank", test_dp_attention);
    CU_add_test(s, "shipped presets cite their sources", test_shipped_presets_cite_sources);
    CU_add_test(s, "dtype defaults to the checkpoint's where the GPU runs it", test_dtype_from_checkpoint);
    CU_add_test(s, "a kernel's calls add up in one slot whichever literal names it", test_kernel_slots_by_name);
}
