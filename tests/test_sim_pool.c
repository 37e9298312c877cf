/* test_sim_pool.c — the KV pool sized from GPU memory against SGLang's and
 * vLLM's formulas computed here by hand (parameter counts from the configs,
 * the reserve from SGLang's rule), MLA's latent per token, the pool a
 * simulation gets without --max-total-tokens and with it, the context
 * length from the model, and a model that does not fit refused with its
 * numbers. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost.h"
#include "sim/pool.h"
#include "sim/sim.h"

#define GIB 1073741824.0

static cost_model *roof(const char *model, const char *gpu, int tp, const char *extra)
{
    char text[512];
    snprintf(text, sizeof text, "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"%s\", \"gpu\": \"%s\", "
             "\"tp\": %d%s}", model, gpu, tp, extra);
    rh_err e = {{0}};
    cost_model *m = cost_parse(text, "pool.json", &e);
    if (!m) printf("\n  %s\n", e.msg);
    return m;
}

static int init(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

/* Parameters of a Llama-3 config, counted from its shapes. */
static double llama_params(double h, double L, double heads, double kv, double I, double V)
{
    double attn = h * (heads + 2 * kv) * 128 + heads * 128 * h, mlp = 3 * h * I;
    return 2 * V * h + h + L * (attn + mlp + 2 * h);
}

static uint64_t tokens_of(double rest, double cell)
{
    return (uint64_t)(floor(rest / cell) / 16) * 16;
}

static void test_sglang_by_hand(void)
{
    core_config c;
    core_config_default(&c);   /* chunked prefill 8192, page 16 */
    double free = 80 * GIB - GIB;

    /* Llama-3-8B on one H100: reserve 512 + 1.5 x 8192 + 2 x 256 + 1024/8 MB. */
    cost_model *m = roof("llama-3-8b", "h100-sxm", 1, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_memory mem;
    CU_ASSERT_EQUAL_FATAL(cost_memory_of(m, 0, &mem), 1);
    double w8 = 2 * llama_params(4096, 32, 32, 8, 14336, 128256);
    CU_ASSERT_DOUBLE_EQUAL(w8, 2 * 8030261248.0, 1);
    CU_ASSERT_DOUBLE_EQUAL(mem.weight_bytes, w8, 1);
    CU_ASSERT_DOUBLE_EQUAL(mem.kv_bytes_per_token, 8 * 128 * 2 * 32 * 2, 0);
    CU_ASSERT_EQUAL(mem.context_length, 8192);
    double f = round((81920.0 - (512 + 1.5 * 8192 + 2 * 256 + 1024.0 / 8)) / 81920 * 1000) / 1000;
    CU_ASSERT_DOUBLE_EQUAL(f, 0.836, 1e-12);
    sim_pool_opts o = {0};
    sim_pool p;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(sim_pool_size(&mem, &c, &o, &p, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(p.fraction, f, 1e-12);
    CU_ASSERT_EQUAL(p.tokens, tokens_of(f * free - w8, 131072));
    CU_ASSERT_EQUAL(p.tokens, 418496);
    /* --mem-fraction-static given */
    o.mem_fraction_static = 0.9;
    CU_ASSERT_EQUAL_FATAL(sim_pool_size(&mem, &c, &o, &p, &e), 0);
    CU_ASSERT_EQUAL(p.tokens, tokens_of(0.9 * free - w8, 131072));
    cost_free(m);

    /* Llama-3-70B over 8 H100s: 512 graphs at tp >= 4, a GB per 8 ranks;
     * each GPU holds an eighth and one of the 8 KV heads. */
    m = roof("llama-3-70b", "h100-sxm", 8, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL_FATAL(cost_memory_of(m, 0, &mem), 1);
    double w70 = 2 * llama_params(8192, 80, 64, 8, 28672, 128256) / 8;
    CU_ASSERT_DOUBLE_EQUAL(mem.weight_bytes, w70, 1);
    CU_ASSERT_DOUBLE_EQUAL(mem.kv_bytes_per_token, 1 * 128 * 2 * 80 * 2, 0);
    f = round((81920.0 - (512 + 1.5 * 8192 + 2 * 512 + 1024)) / 81920 * 1000) / 1000;
    o.mem_fraction_static = 0;
    CU_ASSERT_EQUAL_FATAL(sim_pool_size(&mem, &c, &o, &p, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(p.fraction, 0.819, 1e-12);
    CU_ASSERT_EQUAL(p.tokens, tokens_of(f * free - w70, 40960));
    CU_ASSERT_EQUAL(p.tokens, 1265472);
    /* a small chunk on a large GPU: the 10 GB floor holds */
    CU_ASSERT_DOUBLE_EQUAL(sim_sglang_mem_fraction(80 * GIB, 1, 2048, false), 0.875, 1e-12);
    /* ...and on a 32 GB-class card SGLang reserves by its own rule (no 10 GB floor) */
    CU_ASSERT_DOUBLE_EQUAL(sim_sglang_mem_fraction(32 * GIB, 1, 8192, false),
                           round((32768.0 - (512 + 1.5 * 8192 + 2 * 24 + 128)) / 32768 * 1000) / 1000, 1e-12);
    cost_free(m);
}

/* SGLang reserves for at least a 2048-token chunk: on a GPU of 60 GB or
 * less, where no 10 GB floor hides it, --chunked-prefill-size 1024 sizes
 * the pool as 2048 does. Llama-3-8B on one L40S (48 GB, 32 CUDA-graph
 * batch sizes at tp 1): reserve 512 + 1.5 x 2048 + 2 x 32 + 1024/8 MB. */
static void test_sglang_chunk_floor(void)
{
    cost_model *m = roof("llama-3-8b", "l40s", 1, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_memory mem;
    CU_ASSERT_EQUAL_FATAL(cost_memory_of(m, 0, &mem), 1);
    CU_ASSERT_DOUBLE_EQUAL_FATAL(mem.gpu_bytes, 48 * GIB, 0);
    double f = round((49152.0 - (512 + 1.5 * 2048 + 2 * 32 + 1024.0 / 8)) / 49152 * 1000) / 1000;
    CU_ASSERT_DOUBLE_EQUAL(f, 0.923, 1e-12);
    for (int32_t chunk = 512; chunk <= 2048; chunk *= 2)
        CU_ASSERT_DOUBLE_EQUAL(sim_sglang_mem_fraction(48 * GIB, 1, chunk, false), f, 1e-12);
    /* above the floor the chunk counts: 4096 reserves 1.5 x 4096 MB */
    CU_ASSERT_DOUBLE_EQUAL(sim_sglang_mem_fraction(48 * GIB, 1, 4096, false),
                           round((49152.0 - (512 + 1.5 * 4096 + 2 * 32 + 1024.0 / 8)) / 49152 * 1000) / 1000, 1e-12);
    core_config c;
    core_config_default(&c);
    c.chunked_prefill_size = 1024;
    sim_pool_opts o = {0};
    sim_pool p;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(sim_pool_size(&mem, &c, &o, &p, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(p.fraction, f, 1e-12);
    double w8 = 2 * llama_params(4096, 32, 32, 8, 14336, 128256);
    CU_ASSERT_EQUAL(p.tokens, tokens_of(f * 47 * GIB - w8, 131072));
    CU_ASSERT_EQUAL(p.tokens, 232832);   /* 0.954 and 244,768 tokens without the floor */
    cost_free(m);
}

static void test_vllm_by_hand(void)
{
    core_config c;
    core_config_default(&c);
    c.preset = CORE_PRESET_VLLM;
    cost_model *m = roof("llama-3-8b", "h100-sxm", 1, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_memory mem;
    CU_ASSERT_EQUAL_FATAL(cost_memory_of(m, 0, &mem), 1);
    double w8 = 2 * llama_params(4096, 32, 32, 8, 14336, 128256);
    /* a profile forward of 8192 tokens, the sampled rows' fp32 logits, half a GiB outside torch */
    double act = 8192.0 * (4 * 4096 + 3 * 14336) * 2 + (double)c.max_running_requests * 128256 * 4 + GIB / 2;
    sim_pool_opts o = {0};
    sim_pool p;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(sim_pool_size(&mem, &c, &o, &p, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(p.fraction, 0.9, 0);
    CU_ASSERT_EQUAL(p.tokens, tokens_of(0.9 * 80 * GIB - w8 - act, 131072));
    cost_free(m);
}

static void test_mla_and_refusal(void)
{
    core_config c;
    core_config_default(&c);
    sim_pool_opts o = {0};
    sim_pool p;
    rh_err e = {{0}};
    cost_memory mem;
    /* DeepSeek-R1 in bf16 on 4 H100s: weights of ~312 GiB a GPU. */
    cost_model *m = roof("deepseek-r1", "h100-sxm", 4, ", \"dtype\": \"bf16\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL_FATAL(cost_memory_of(m, 0, &mem), 1);
    CU_ASSERT_EQUAL(sim_pool_size(&mem, &c, &o, &p, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "deepseek-r1 does not fit 4 x h100-sxm"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "GiB per GPU of 80.0 GiB"));
    CU_ASSERT(mem.weight_bytes > 300 * GIB && mem.weight_bytes < 340 * GIB);
    cost_free(m);
    /* In fp8 over 8 H200s with the experts spread it fits; MLA keeps the
     * 512 + 64 latent of all 61 layers per token, each GPU for its own
     * requests, so the pool is eight GPUs' worth. */
    m = roof("deepseek-r1", "h200", 8, ", \"dtype\": \"fp8\", \"ep\": 8");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL_FATAL(cost_memory_of(m, 0, &mem), 1);
    CU_ASSERT_DOUBLE_EQUAL(mem.kv_bytes_per_token, (512 + 64) * 61 * 2, 0);
    CU_ASSERT(mem.kv_per_rank);
    CU_ASSERT_EQUAL(mem.context_length, 163840);
    CU_ASSERT_EQUAL_FATAL(sim_pool_size(&mem, &c, &o, &p, &e), 0);
    double one = floor(p.kv_bytes / p.kv_bytes_per_token);
    CU_ASSERT_EQUAL(p.tokens, (uint64_t)(one * 8 / 16) * 16);
    /* the MTP module's weights and KV count when it drafts */
    sim_pool q;
    o.speculative = true;
    CU_ASSERT_EQUAL_FATAL(sim_pool_size(&mem, &c, &o, &q, &e), 0);
    CU_ASSERT(mem.draft_weight_bytes > 0 && mem.draft_kv_bytes_per_token == (512 + 64) * 1 * 2);
    CU_ASSERT(q.tokens < p.tokens);
    cost_free(m);
}

/* A simulation without --max-total-tokens gets the sized pool and the
 * model's context length; with it, the given pool. */
static void test_simulation_uses_it(void)
{
    cost_model *m = roof("llama-3-8b", "h100-sxm", 1, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    tr_trace t;
    tr_trace_init(&t);
    rh_err e;
    tr_request a = {.id = 1, .arrival = 0, .input_len = 500, .output_len = 4};
    tr_request b = {.id = 2, .arrival = 0, .input_len = 9000, .output_len = 4};   /* past 8192 */
    CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(&t, &a, &e), 0);
    CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(&t, &b, &e), 0);
    sim_config c;
    sim_config_default(&c);
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &r, &e), 0);
    CU_ASSERT_EQUAL(r.pool_tokens, 418496);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.pool_how, "--mem-fraction-static 0.836"));
    CU_ASSERT_EQUAL(r.summary.completed, 1);
    CU_ASSERT_EQUAL(r.summary.failed_context_length, 1);
    sim_result_free(&r);
    c.core.max_total_tokens = 100000;
    c.core.context_length = 16384;
    CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &r, &e), 0);
    CU_ASSERT_EQUAL(r.pool_tokens, 100000);
    CU_ASSERT_EQUAL(r.pool_how[0], '\0');
    CU_ASSERT_EQUAL(r.summary.completed, 2);
    sim_result_free(&r);
    tr_trace_free(&t);
    cost_free(m);
}

void register_test_sim_pool(void)
{
    CU_pSuite s = CU_add_suite("sim_pool", init, NULL);
    CU_add_test(s, "SGLang's pool by hand: llama-3-8b on 1 H100, llama-3-70b on 8", test_sglang_by_hand);
    CU_add_test(s, "SGLang's 2048-token chunk floor on a 48 GB GPU with chunk 1024", test_sglang_chunk_floor);
    CU_add_test(s, "vLLM's pool by hand", test_vllm_by_hand);
    CU_add_test(s, "MLA's latent, data-parallel pools, a model that does not fit", test_mla_and_refusal);
    CU_add_test(s, "a simulation sizes its pool and context unless told", test_simulation_uses_it);
}
