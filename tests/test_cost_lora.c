/* test_cost_lora.c — LoRA in the roofline and the simulator: an adapter's
 * bytes against the hand sum over Llama-3-8B's modules (whole and split two
 * ways), the segmented kernels' bytes against their closed form and their
 * growth with the distinct adapters, a load priced as the larger of its
 * bytes over the host link and its copies' launches, the slots taken from
 * the KV pool's memory, kinds that cannot price LoRA refusing it, and a
 * simulated trace whose one adapter is free (--max-lora-rank 0) equal to
 * the same trace on the base model, metric for metric. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/batch_spec.h"
#include "sim/cost/cost.h"
#include "sim/cost/roofline.h"
#include "sim/sim.h"
#include "cost_helpers.h"
#include "testutil.h"
#include "traces/tools/synth.h"


/* Llama-3-8B: hidden 4096, 32 query and 8 KV heads of 128, MLP 14336, 32
 * layers. Rank 16 on all seven modules: Σ (in + out) = q 8192 + k 5120 +
 * v 5120 + o 8192 + gate, up, down 18432 each = 81920 numbers a rank a
 * layer, x 16 x 32 x 2 bytes = 83,886,080 bytes. At tp 2 the column
 * modules keep A whole and halve B, the row ones the other way round:
 * 6144 + 4608 + 4608 + 6144 + 3 x 11264 = 55296. Copies: A and B of the
 * four fused modules a layer = 256. */
static void test_adapter_bytes(void)
{
    cost_model *m = ch_llama8b();
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const rl_model *md = roofline_model(m);
    double copies;
    NEAR(rl_lora_bytes(md, 1, 16, COST_LORA_ALL, &copies), 83886080.0, 1e-15);
    NEAR(copies, 256, 1e-15);
    NEAR(rl_lora_bytes(md, 2, 16, 0, NULL), 55296.0 * 16 * 32 * 2, 1e-15);
    uint32_t qv;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(cost_lora_targets_parse("q_proj, v_proj", &qv, &e), 0);
    CU_ASSERT_EQUAL(qv, COST_LORA_Q | COST_LORA_V);
    NEAR(rl_lora_bytes(md, 1, 8, qv, &copies), (8192.0 + 5120) * 8 * 32 * 2, 1e-15);
    NEAR(copies, 64, 1e-15);
    CU_ASSERT_EQUAL(cost_lora_targets_parse("q_proj,lm_head", &qv, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "'lm_head'"));
    cost_free(m);
}

static double term_bytes(const cost_term *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return t[i].bytes;
    return -1;
}

static double term_s(const cost_term *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return t[i].seconds;
    return -1;
}

/* The shrink of the fused qkv reads each adapter's stacked A (h x 3r) once
 * and the T tokens' inputs, and writes T x 3r: L (k·h·3r + T·(h + 3r)) x 2
 * bytes. More adapters cost more; no LoRA tokens, no LoRA terms. A load
 * is max(bytes / link, copies x launch) for each adapter loaded. */
static void test_kernels_and_loads(void)
{
    cost_model *m = ch_llama8b();
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_serving sv;
    cost_serving_default(m, 1, &sv);
    sv.lora_rank = 16;
    sv.lora_slots = 8;
    cost_seq seqs[64];
    cost_batch b;
    rh_err e;
    cost_term t[64];
    double prev = 0;
    uint32_t ks[] = {1, 4, 16};
    for (int i = 0; i < 3; i++) {
        char spec[64];
        snprintf(spec, sizeof spec, "decode=48@1000,lora=%u", ks[i]);
        CU_ASSERT_EQUAL_FATAL(cost_batch_parse(spec, seqs, 64, &b, &e), 0);
        b.serving = &sv;
        int n = cost_breakdown(m, &b, t, 64);
        double k = ks[i], T = 48, h = 4096, r3 = 48;
        NEAR(term_bytes(t, n, "qkv_lora_a"), 32 * (k * h * r3 + T * (h + r3)) * 2, 1e-12);
        double step = cost_step_time(m, &b);
        CU_ASSERT(step > prev);
        prev = step;
    }
    CU_ASSERT_EQUAL_FATAL(cost_batch_parse("decode=48@1000", seqs, 64, &b, &e), 0);
    b.serving = &sv;
    double base = cost_step_time(m, &b);
    int n = cost_breakdown(m, &b, t, 64);
    CU_ASSERT(term_bytes(t, n, "qkv_lora_a") < 0);
    cost_serving none;
    cost_serving_default(m, 1, &none);
    b.serving = &none;
    NEAR(cost_step_time(m, &b), base, 1e-15);

    CU_ASSERT_EQUAL_FATAL(cost_batch_parse("decode=48@1000,lora=4,loads=2", seqs, 64, &b, &e), 0);
    b.serving = &sv;
    n = cost_breakdown(m, &b, t, 64);
    const rl_gpu *g = roofline_gpu(m);
    double copies, one = rl_lora_bytes(roofline_model(m), 1, 16, 0, &copies);
    NEAR(term_s(t, n, "lora_load"), 2 * fmax(one / (g->host_link_GBps * 1e9), copies * 2.9e-5), 1e-12);
    double with_loads = cost_step_time(m, &b);
    b.lora_loads = 0;
    NEAR(with_loads - cost_step_time(m, &b), term_s(t, n, "lora_load"), 1e-9);

    /* the slots' memory: --max-loras-per-batch adapters of the largest rank */
    cost_memory a, c;
    CU_ASSERT(cost_memory_of(m, 1, &a));
    cost_memory_of_serving(m, 1, &sv, &c);
    NEAR(c.weight_bytes - a.weight_bytes, 8 * one, 1e-9);
    cost_free(m);
}

/* A linear cost model prices no LoRA: asked to, it refuses, naming the way out. */
static void test_kinds_refuse(void)
{
    rh_err e;
    cost_model *m = cost_parse("{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5, "
                               "\"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}",
                               "linear.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_serving sv;
    cost_serving_default(m, 1, &sv);
    CU_ASSERT_EQUAL(cost_serving_check(m, 1, &sv, &e), 0);
    sv.lora_rank = 8;
    CU_ASSERT_EQUAL(cost_serving_check(m, 1, &sv, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--max-lora-rank 0"));
    cost_free(m);
}

static void synth(uint32_t adapters, uint32_t zipf_off, tr_trace *t)
{
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    o.requests = 400;
    o.rate = 20;
    o.input.mean = 600;
    o.output.mean = 100;
    o.adapters = adapters;
    if (zipf_off) o.adapter_zipf = 0;
    rh_err e;
    tr_trace_init(t);
    tr_sink s = tr_trace_sink(t);
    CU_ASSERT_EQUAL_FATAL(tr_synth(&o, &s, &e), 0);
}

/* One adapter, free (--max-lora-rank 0): the same run as the base model,
 * metric for metric. Priced, every step costs more, so TTFT and TPOT rise;
 * forty adapters under a cap of 4 wait for slots as well. */
static void test_sim_one_adapter(void)
{
    cost_model *m = ch_llama8b();
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    tr_trace base, one, many;
    synth(0, 0, &base);
    synth(1, 0, &one);
    synth(40, 1, &many);
    sim_config c;
    sim_config_default(&c);
    rh_err e;
    sim_result rb, r0, r16, rm;
    CU_ASSERT_EQUAL_FATAL(sim_run(&c, &base, m, &rb, &e), 0);
    sim_config free_cfg = c;
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&free_cfg, "max-lora-rank", "0", &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_run(&free_cfg, &one, m, &r0, &e), 0);
    NEAR(r0.summary.ttft_ms.mean, rb.summary.ttft_ms.mean, 1e-12);
    NEAR(r0.summary.tpot_ms.p99, rb.summary.tpot_ms.p99, 1e-12);
    NEAR(r0.summary.duration, rb.summary.duration, 1e-12);
    CU_ASSERT_EQUAL_FATAL(sim_run(&c, &one, m, &r16, &e), 0);
    CU_ASSERT(r16.summary.tpot_ms.mean > rb.summary.tpot_ms.mean * 1.05);
    CU_ASSERT(r16.summary.ttft_ms.mean > rb.summary.ttft_ms.mean);
    sim_config cap = c;
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&cap, "max-loras-per-batch", "4", &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_run(&cap, &many, m, &rm, &e), 0);
    CU_ASSERT_EQUAL(rm.summary.completed, 400);
    CU_ASSERT(rm.summary.ttft_ms.mean > 2 * r16.summary.ttft_ms.mean);
    sim_result_free(&rb), sim_result_free(&r0), sim_result_free(&r16), sim_result_free(&rm);
    tr_trace_free(&base), tr_trace_free(&one), tr_trace_free(&many);
    cost_free(m);
}

void register_test_cost_lora(void)
{
    CU_pSuite s = CU_add_suite("cost_lora", ch_presets_init, NULL);
    CU_add_test(s, "an adapter's bytes and copies against the hand sum (whole, tp 2, two modules)", test_adapter_bytes);
    CU_add_test(s, "segmented kernels' bytes, growth with adapters, loads and the slots' memory", test_kernels_and_loads);
    CU_add_test(s, "a kind without LoRA refuses a rank", test_kinds_refuse);
    CU_add_test(s, "one free adapter simulates as the base; priced and capped ones cost more", test_sim_one_adapter);
}
