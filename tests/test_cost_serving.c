/* test_cost_serving.c — how a server runs a forward, on the roofline kind:
 * the host's time (the least a tiny kernel takes, a CUDA graph for small
 * decode batches and eager launches otherwise, the per-step host time and
 * the scheduling the overlap scheduler hides), GPU presets carried from a
 * measured one by the ridge point, and SGLang's flags in the simulator
 * (--enable-dp-attention, --ep-size, --moe-a2a-backend, two-batch overlap,
 * --speculative-accept-length, the default --max-running-requests), each
 * against a hand computation or a second computation of the same thing. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost.h"
#include "sim/cost/roofline.h"
#include "sim/sim.h"
#include "testutil.h"

#define CLOSE(a, b) tu_close_rel((a), (b), 1e-12, #a, __LINE__)
#define NEAR(a, b, rel) tu_close_rel((a), (b), (rel), #a, __LINE__)

static int init(void)
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

/* SGLang's host preset (sim/cost/presets/hosts/sglang.json). */
#define KERNEL_MIN 3.1e-6
#define EAGER 2.9e-5
#define EXPOSED 3.1e-4
#define PER_REQUEST 2.2e-6

static void batch_of(cost_batch *b, cost_seq *s, uint32_t n, uint32_t new_tokens, uint32_t ctx, bool prefill)
{
    for (uint32_t i = 0; i < n; i++) s[i] = (cost_seq){new_tokens, ctx, prefill};
    *b = (cost_batch){.seqs = s, .n = n};
    cost_batch_summarize(b);
}

/* The same model with and without the host: the forward differs by the
 * tiny kernels' least time alone, summed over the kernels by hand; a
 * small decode batch is a graph (no launches), the step adds the
 * per-step time and, hideable, each request's scheduling. */
static void test_host_terms(void)
{
    cost_model *with = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-r1\", \"gpu\": \"h200\","
                            " \"tp\": 8, \"dtype\": \"fp8\"}");
    cost_model *bare = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-r1\", \"gpu\": \"h200\","
                            " \"tp\": 8, \"dtype\": \"fp8\", \"host\": \"none\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(with);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bare);
    cost_seq s[700];
    cost_batch b;
    batch_of(&b, s, 4, 1, 2000, false);
    rl_breakdown x, y;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(with, &b, &x, &e), 0);
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(bare, &b, &y, &e), 0);
    double least = 0;
    for (int i = 0; i < y.nk; i++)
        least += y.k[i].calls * fmax(0, KERNEL_MIN - y.k[i].seconds / y.k[i].calls);
    CU_ASSERT(least > 0);
    CLOSE(x.total_s, y.total_s + least);
    CLOSE(x.kernels_s, y.kernels_s);
    CU_ASSERT(x.graph);
    cost_parts p;
    double serial = cost_step_parts(with, &b, &p);
    CLOSE(p.forward_s, x.total_s);
    CU_ASSERT_EQUAL(p.launch_s, 0);
    CLOSE(p.exposed_s, EXPOSED);
    CLOSE(p.hidden_s, 4 * PER_REQUEST);
    CLOSE(serial, x.total_s + EXPOSED + 4 * PER_REQUEST);
    /* after a step of as much GPU time the scheduling is hidden */
    CLOSE(cost_parts_duration(&p, true, p.forward_s), x.total_s + EXPOSED);
    CLOSE(cost_parts_duration(&p, true, 0), serial);
    CLOSE(cost_parts_duration(&p, false, p.forward_s), serial);

    /* H200 at tp 8: SGLang's CUDA-graph bound is 512 decodes; 600 run
     * eagerly, a launch per kernel, and the GPU waits for what the host's
     * launches take beyond its time */
    batch_of(&b, s, 600, 1, 2000, false);
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(with, &b, &x, &e), 0);
    CU_ASSERT(!x.graph);
    cost_step_parts(with, &b, &p);
    CLOSE(p.launch_s, fmax(0, x.launches * EAGER - x.total_s));
    batch_of(&b, s, 512, 1, 2000, false);
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(with, &b, &x, &e), 0);
    CU_ASSERT(x.graph);
    /* --disable-cuda-graph: one decode launched kernel by kernel: some 1,800
     * launches at 29 us outrun the GPU */
    cost_serving sv;
    cost_serving_default(with, 0, &sv);
    CU_ASSERT_EQUAL(sv.cuda_graph_max_bs, 512);
    sv.cuda_graph_max_bs = 0;
    batch_of(&b, s, 1, 1, 2000, false);
    b.serving = &sv;
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(with, &b, &x, &e), 0);
    cost_step_parts(with, &b, &p);
    CU_ASSERT(!x.graph && x.launches > 1500);
    CLOSE(p.launch_s, x.launches * EAGER - x.total_s);
    CU_ASSERT(p.launch_s > x.total_s);
    /* a prefill is eager: its launches hide under a long chunk's kernels */
    batch_of(&b, s, 1, 8192, 0, true);
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(with, &b, &x, &e), 0);
    cost_step_parts(with, &b, &p);
    CU_ASSERT(!x.graph);
    CU_ASSERT_EQUAL(p.launch_s, 0);
    CU_ASSERT(x.launches * EAGER < x.total_s);
    cost_free(with);
    cost_free(bare);

    /* the graph bound by GPU memory and tp (server_args) */
    CU_ASSERT_EQUAL(rl_sglang_cuda_graph_max_bs(80 * 1073741824.0, 2), 256);
    CU_ASSERT_EQUAL(rl_sglang_cuda_graph_max_bs(80 * 1073741824.0, 4), 512);
    CU_ASSERT_EQUAL(rl_sglang_cuda_graph_max_bs(48 * 1073741824.0, 8), 160);
    CU_ASSERT_EQUAL(rl_sglang_cuda_graph_max_bs(24 * 1073741824.0, 1), 24);
}

/* H20 carries H100's kernels: the same efficiencies and floors, a GEMM's
 * ramp scaled by the ridge point, so a one-token expert GEMM is bound by its
 * weights, as on every GPU (with H100's ramp it came out compute-bound at
 * H20's low peak). */
static void test_carried_kernels(void)
{
    rl_gpu h100, h20, b200;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(rl_gpu_load("h100-sxm", &h100, &e), 0);
    CU_ASSERT_EQUAL_FATAL(rl_gpu_load("h20", &h20, &e), 0);
    CU_ASSERT_EQUAL_FATAL(rl_gpu_load("b200", &b200, &e), 0);
    double ridge = (148.0 / 4000) / (989.0 / 3350);
    CLOSE(h20.kern[RL_K_GEMM].half_rows, h100.kern[RL_K_GEMM].half_rows * ridge);
    CLOSE(h20.kern[RL_K_GEMM_FP8].half_rows, h100.kern[RL_K_GEMM_FP8].half_rows * ridge);
    CLOSE(b200.kern[RL_K_GEMM].half_rows, h100.kern[RL_K_GEMM].half_rows * (2250.0 / 8000) / (989.0 / 3350));
    CLOSE(h20.kern[RL_K_GEMM].compute_eff, h100.kern[RL_K_GEMM].compute_eff);
    CLOSE(h20.kern[RL_K_NORM].floor_s, h100.kern[RL_K_NORM].floor_s);
    CLOSE(h20.kern[RL_K_ATTENTION].memory_eff, h100.kern[RL_K_ATTENTION].memory_eff);
    const rl_kernel *k = &h20.kern[RL_K_GEMM_FP8];
    double peak = h20.fp8_tflops * 1e12, hbm = h20.hbm_GBps * 1e9, K = 7168, N = 4096;
    double tc = 2 * (1 + k->half_rows) * K * N / (peak * k->compute_eff);
    double tm = (K * N + K + 2 * N) / (hbm * k->memory_eff);
    CU_ASSERT(tm > tc);
    CLOSE(rl_gemm_in_s(k, peak, hbm, 1, K, N, 1, 1, 1), k->floor_s + tm);
    /* a chain of carried presets is refused past its depth, naming the field */
    char dir[256], path[300];
    tu_tmp_path("carry", dir, sizeof dir);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, NULL, 0), 0);
    snprintf(path, sizeof path, "%s/loop.json", dir);
    const char *g = "{\"memory_GB\": 80, \"hbm_GBps\": 1000, \"bf16_tflops\": 100, \"fp8_tflops\": 0,"
                    " \"nvlink_GBps\": 100, \"ib_GBps\": 10, \"gpus_per_node\": 4, \"kernels\": {\"carry_from\": \"loop.json\"}}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, g, strlen(g)), 0);
    rl_gpu x;
    CU_ASSERT_EQUAL(rl_gpu_load(path, &x, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "carry_from"));
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    tu_run(cmd, NULL, 0);
}

static cost_model *write_host_and_load(const char *dir, const char *host_json)
{
    char cmd[400], path[300], cost[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (tu_run(cmd, NULL, 0)) return NULL;
    snprintf(path, sizeof path, "%s/myhost.json", dir);
    if (tu_write_file(path, host_json, strlen(host_json))) return NULL;
    snprintf(cost, sizeof cost, "%s/cost.json", dir);
    const char *c = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\","
                    " \"host\": \"myhost.json\"}";
    if (tu_write_file(cost, c, strlen(c))) return NULL;
    rh_err e;
    cost_model *m = cost_load(cost, &e);
    if (!m) printf("\n  %s\n", e.msg);
    return m;
}

/* The overlap scheduler in the simulator: 4 ms of scheduling a step, on a
 * model whose decode steps take longer on the GPU, hides under every step
 * but the first after an idle gap; without it every step pays it. One
 * request's TPOT differs by exactly 4 ms, its TTFT by none. */
static void test_overlap_in_the_simulator(void)
{
    char dir[256];
    tu_tmp_path("overlap", dir, sizeof dir);
    cost_model *m = write_host_and_load(dir, "{\"kernel_min_s\": 0, \"eager_launch_s\": 0, \"step_exposed_s\": 0,"
                                             " \"schedule_s\": 0.004, \"per_request_s\": 0, \"per_token_s\": 0}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    tr_trace t;
    tr_trace_init(&t);
    rh_err e;
    tr_request a = {.id = 1, .arrival = 0, .input_len = 100, .output_len = 50};
    CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(&t, &a, &e), 0);
    sim_config c;
    sim_config_default(&c);
    c.core.max_total_tokens = 100000;
    sim_result on, off;
    CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &on, &e), 0);
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "disable-overlap-schedule", "", &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &off, &e), 0);
    NEAR(off.summary.tpot_ms.mean - on.summary.tpot_ms.mean, 4.0, 1e-9);
    NEAR(off.summary.ttft_ms.mean, on.summary.ttft_ms.mean, 1e-12);
    sim_result_free(&on);
    sim_result_free(&off);
    tr_trace_free(&t);
    cost_free(m);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    tu_run(cmd, NULL, 0);
}

/* SGLang's flags as simulator knobs: laid over the cost file's, checked. */
static void test_serving_knobs(void)
{
    cost_model *m = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-r1\", \"gpu\": \"h200\","
                         " \"tp\": 8, \"dtype\": \"fp8\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    rh_err e;
    sim_config c;
    sim_config_default(&c);
    CU_ASSERT_EQUAL_FATAL(sim_serving_resolve(&c, m, &e), 0);
    CU_ASSERT_EQUAL(c.serving.ep, 1);
    CU_ASSERT_EQUAL(c.serving.dp, 1);
    CU_ASSERT(c.serving.overlap);
    CU_ASSERT_EQUAL(sim_config_set(&c, "enable-dp-attention", "", &e), 1);
    CU_ASSERT_EQUAL(sim_config_set(&c, "moe-a2a-backend", "deepep", &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_serving_resolve(&c, m, &e), 0);
    CU_ASSERT_EQUAL(c.serving.dp, 8);
    CU_ASSERT_EQUAL(c.serving.ep, 8);   /* DeepEP spreads the experts, as SGLang sets --ep-size */
    CU_ASSERT(c.serving.deepep);
    /* --dp-size before or after --enable-dp-attention */
    sim_config_default(&c);
    CU_ASSERT_EQUAL(sim_config_set(&c, "dp-size", "4", &e), 1);
    CU_ASSERT_EQUAL(sim_config_set(&c, "enable-dp-attention", "true", &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_serving_resolve(&c, m, &e), 0);
    CU_ASSERT_EQUAL(c.serving.dp, 4);
    /* refusals name the flag */
    sim_config_default(&c);
    sim_config_set(&c, "moe-a2a-backend", "deepep", &e);
    CU_ASSERT_EQUAL(sim_serving_resolve(&c, m, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--enable-dp-attention"));
    sim_config_default(&c);
    sim_config_set(&c, "ep-size", "4", &e);
    CU_ASSERT_EQUAL(sim_serving_resolve(&c, m, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--ep-size 4"));
    sim_config_default(&c);
    CU_ASSERT_EQUAL(sim_config_set(&c, "expert-imbalance", "0.5", &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--expert-imbalance"));
    CU_ASSERT_EQUAL(sim_config_set(&c, "moe-a2a-backend", "nccl", &e), -1);
    CU_ASSERT_EQUAL(sim_config_set(&c, "deepep-mode", "fast", &e), -1);
    /* SGLang's --stream-interval: checked, and the configuration is the default's, byte for byte */
    sim_config plain;
    sim_config_default(&plain);
    sim_config_default(&c);
    CU_ASSERT_EQUAL(sim_config_takes_value("stream-interval"), 1);
    CU_ASSERT_EQUAL(sim_config_set(&c, "stream-interval", "8", &e), 1);
    CU_ASSERT_EQUAL(memcmp(&c, &plain, sizeof c), 0);
    CU_ASSERT_EQUAL(sim_config_set(&c, "stream-interval", "0", &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--stream-interval"));
    sim_config_default(&c);
    sim_config_set(&c, "dp-size", "3", &e);
    sim_config_set(&c, "enable-dp-attention", "", &e);
    CU_ASSERT_EQUAL(sim_serving_resolve(&c, m, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "dp-size 3"));
    /* a linear cost model prices no expert parallelism */
    cost_linear_coef lc = {.base_s = 0.01};
    cost_model *lin = cost_linear_new(&lc);
    sim_config_default(&c);
    sim_config_set(&c, "ep-size", "8", &e);
    CU_ASSERT_EQUAL(sim_serving_resolve(&c, lin, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--ep-size"));
    cost_free(lin);
    cost_free(m);
}

/* Two-batch overlap: the batch as two micro-batches, each kernel launched
 * twice over half the tokens, and the communication of each hidden under
 * the other's kernels: the forward is the two halves' kernels less the
 * smaller of their communication and their computation. */
static void test_two_batch_overlap(void)
{
    cost_model *m = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-r1\", \"gpu\": \"h100-sxm\","
                         " \"tp\": 16, \"ep\": 16, \"dtype\": \"fp8\", \"host\": \"none\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    static cost_seq s[1024];
    cost_batch b;
    batch_of(&b, s, 1024, 1, 2000, false);
    cost_serving sv;
    cost_serving_default(m, 0, &sv);
    CU_ASSERT(sv.deepep && sv.dp == 16);
    rl_breakdown one, two;
    rh_err e;
    b.serving = &sv;
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(m, &b, &one, &e), 0);
    sv.two_batch_overlap = true;
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(m, &b, &two, &e), 0);
    double comm = 0, compute = 0;
    for (int i = 0; i < two.nk; i++) {
        if (!strcmp(two.k[i].bound, "link")) comm += two.k[i].seconds;
        else compute += two.k[i].seconds;
    }
    CU_ASSERT(comm > 0 && compute > comm);
    CLOSE(two.overlap_saved_s, fmin(comm, compute));
    CLOSE(two.total_s, two.kernels_s - two.overlap_saved_s);
    CLOSE(two.launches, 2 * one.launches);
    /* it pays where there is computation to hide under: 16 prompts of 4096,
     * one a rank; at 64 decodes a rank the second read of every expert's
     * weights costs more than it hides */
    batch_of(&b, s, 16, 4096, 0, true);
    b.serving = &sv;
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(m, &b, &two, &e), 0);
    sv.two_batch_overlap = false;
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(m, &b, &one, &e), 0);
    CU_ASSERT(two.total_s < one.total_s);
    cost_free(m);
}

/* --speculative-accept-length L: the per-token acceptance whose chain of
 * `steps` drafts commits L tokens a verify on average; the simulated
 * verifies commit that many (seeded draws, 2,000 of them). */
static void test_accept_length(void)
{
    cost_linear_coef lc = {.base_s = 0.01, .per_decode_seq_s = 1e-4};
    cost_model *m = cost_linear_new(&lc);
    tr_trace t;
    tr_trace_init(&t);
    rh_err e;
    tr_request one = {.id = 1, .arrival = 0, .input_len = 64, .output_len = 3000};
    CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(&t, &one, &e), 0);
    sim_config c;
    sim_config_default(&c);
    c.core.max_total_tokens = 100000;
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "speculative-algorithm", "NGRAM", &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "speculative-num-steps", "3", &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "speculative-accept-length", "2.5", &e), 1);
    CU_ASSERT_EQUAL(sim_config_set(&c, "speculative-accept-length", "0.5", &e), -1);
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &r, &e), 0);
    /* one request alone: every step after its prefill is one verify at
     * base + one decode, 10.1 ms, committing 1 + its accepted drafts */
    const sim_request_result *q = &r.requests[0];
    CU_ASSERT_EQUAL(q->output_len, 3000);
    double verifies = (q->e2e - q->ttft) / 0.0101;
    NEAR(2999 / verifies, 2.5, 0.03);
    sim_result_free(&r);
    tr_trace_free(&t);
    cost_free(m);
}

/* Without --max-running-requests a sized deployment runs as many requests
 * as its server would: SGLang's from the pool (here at least 2048), vLLM's
 * 1024 on a GPU of 70 GiB or more; 3,000 requests at once show it. */
static void test_default_max_running(void)
{
    /* no host: the requests reach the scheduler at once, not one tokenizer
     * at a time */
    cost_model *m = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h200\","
                         " \"host\": \"none\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    tr_trace t;
    tr_trace_init(&t);
    rh_err e;
    for (uint64_t i = 0; i < 3000; i++) {
        tr_request r = {.id = i + 1, .arrival = 0, .input_len = 32, .output_len = 64};
        CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(&t, &r, &e), 0);
    }
    sim_config c;
    sim_config_default(&c);
    c.series_points = 200;
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &r, &e), 0);
    double most = 0;
    for (uint32_t i = 0; i < r.series.n; i++) most = fmax(most, r.series.running[i]);
    CU_ASSERT(most > 2000);
    sim_result_free(&r);
    sim_config_default(&c);
    c.series_points = 200;
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "scheduler", "vllm", &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &r, &e), 0);
    most = 0;
    for (uint32_t i = 0; i < r.series.n; i++) most = fmax(most, r.series.running[i]);
    CU_ASSERT(most > 900 && most <= 1024);
    sim_result_free(&r);
    /* given, it holds */
    sim_config_default(&c);
    c.series_points = 200;
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "max-running-requests", "78", &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &r, &e), 0);
    most = 0;
    for (uint32_t i = 0; i < r.series.n; i++) most = fmax(most, r.series.running[i]);
    CU_ASSERT(most <= 78);
    sim_result_free(&r);
    tr_trace_free(&t);
    cost_free(m);

    /* The chunk: one 6000-token prompt on an A100 80 GB. vLLM's default
     * there is 2048 tokens a step (its big-GPU 8192 leaves A100s out), the
     * same run as the value given; SGLang's is 8192 (under 160 GiB). */
    m = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"a100-80g\","
             " \"host\": \"none\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    tr_trace_init(&t);
    tr_request one = {.id = 1, .arrival = 0, .input_len = 6000, .output_len = 2};
    CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(&t, &one, &e), 0);
    static const struct {
        const char *scheduler, *chunk, *says;
    } runs[] = {{"vllm", NULL, "--max-num-batched-tokens 2048: vLLM's default for a100-80g"},
                {"vllm", "2048", ""},
                {"vllm", "8192", ""},
                {"sglang", NULL, "--chunked-prefill-size 8192: SGLang's default for a100-80g"}};
    double ttft[4];
    for (int i = 0; i < 4; i++) {
        sim_config_default(&c);
        CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "scheduler", runs[i].scheduler, &e), 1);
        if (runs[i].chunk) CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "max-num-batched-tokens", runs[i].chunk, &e), 1);
        CU_ASSERT_EQUAL_FATAL(sim_run(&c, &t, m, &r, &e), 0);
        ttft[i] = r.summary.ttft_ms.mean;
        CU_ASSERT(runs[i].says[0] ? strstr(r.defaults_how, runs[i].says) != NULL : r.defaults_how[0] == '\0');
        sim_result_free(&r);
    }
    CU_ASSERT_EQUAL(ttft[0], ttft[1]);           /* the default is 2048, bit for bit */
    /* three steps re-read the earlier chunks' KV: slower, if only by a few
     * percent (prefill is compute-bound); 8192 takes it in one step under
     * either scheduler, the same time */
    CU_ASSERT(ttft[0] > ttft[2] * 1.01);
    CU_ASSERT_DOUBLE_EQUAL(ttft[3], ttft[2], 1e-9 * ttft[2]);
    tr_trace_free(&t);
    cost_free(m);
}

/* The flags where a user gives them: a CLUSTER.json group's knobs price
 * that group as the same flags price a single server (prefill and decode
 * groups of different parallelism run), and `serve` takes them only with
 * --backend sim, refusing what its cost model cannot price. */
static void test_flags_in_cluster_and_serve(void)
{
    char dir[256], cmd[2048], out[16384], trace[300], cost[300], cluster[300];
    tu_tmp_path("serving-flags", dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, NULL, 0), 0);
    snprintf(trace, sizeof trace, "%s/t.rhtr", dir);
    snprintf(cost, sizeof cost, "%s/r1.json", dir);
    snprintf(cluster, sizeof cluster, "%s/cluster.json", dir);
    const char *c = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-r1\", \"gpu\": \"h100-sxm\","
                    " \"tp\": 16, \"dtype\": \"fp8\"}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(cost, c, strlen(c)), 0);
    const char *cl = "{\"groups\": [{\"name\": \"dp\", \"cost\": \"r1.json\", \"enable-dp-attention\": true,"
                     " \"moe-a2a-backend\": \"deepep\", \"moe-dense-tp-size\": 1}]}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(cluster, cl, strlen(cl)), 0);
    snprintf(cmd, sizeof cmd, "%s trace synth --requests 40 --rate 8 --input-len 1024 --output-len 64 -o %s", tu_bin(),
             trace);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, out, sizeof out), 0);
    double tpot[3];
    const char *how[3] = {"--cluster %s", "--cost %s --enable-dp-attention --moe-a2a-backend deepep --moe-dense-tp-size 1",
                          "--cost %s"};
    const char *arg[3] = {cluster, cost, cost};
    for (int i = 0; i < 3; i++) {
        char flags[600];
        snprintf(flags, sizeof flags, how[i], arg[i]);
        snprintf(cmd, sizeof cmd, "REHEARSE_PRESETS=sim/cost/presets %s sim %s %s --json", tu_bin(), trace, flags);
        int rc = tu_run(cmd, out, sizeof out);
        if (rc) printf("\n  %s\n", out);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        json_t *o = json_loads(strchr(out, '{'), JSON_DISABLE_EOF_CHECK, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(o);
        tpot[i] = json_number_value(json_object_get(o, "median_tpot_ms"));
        json_decref(o);
    }
    CLOSE(tpot[0], tpot[1]);
    CU_ASSERT(fabs(tpot[1] - tpot[2]) > 0.01 * tpot[2]);   /* the layout is priced, not ignored */
    /* a group's flag the cost model cannot price names the group */
    const char *bad = "{\"groups\": [{\"name\": \"x\", \"cost\": \"r1.json\", \"ep-size\": 8}]}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(cluster, bad, strlen(bad)), 0);
    snprintf(cmd, sizeof cmd, "REHEARSE_PRESETS=sim/cost/presets %s sim %s --cluster %s", tu_bin(), trace, cluster);
    CU_ASSERT_NOT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--ep-size 8"));
    /* serve: without --backend sim the flag is taken and said to change nothing (it stops at the recording it
     * cannot open, so a server that ignored the flag silently would still end); a linear cost prices no EP */
    snprintf(cmd, sizeof cmd, "%s serve --model tiny-llama --ep-size 2 --port 0 --record-trace /no/such/dir/t.rhtr",
             tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--ep-size: no effect on this engine"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--backend sim"));
    const char *lin = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.01, \"per_prefill_token_s\": 1e-5,"
                      " \"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 0, \"per_attention_s\": 0}";
    snprintf(cost, sizeof cost, "%s/lin.json", dir);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(cost, lin, strlen(lin)), 0);
    snprintf(cmd, sizeof cmd, "%s serve --model tiny-llama --backend sim --cost %s --ep-size 2 --port 0", tu_bin(), cost);
    CU_ASSERT_NOT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--ep-size"));
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    tu_run(cmd, NULL, 0);
}

void register_test_cost_serving(void)
{
    CU_pSuite s = CU_add_suite("cost_serving", init, NULL);
    CU_add_test(s, "host: tiny kernels' least time, graphs and eager launches, per-step time", test_host_terms);
    CU_add_test(s, "GPU presets carried from H100 by the ridge point", test_carried_kernels);
    CU_add_test(s, "the overlap scheduler hides scheduling under the previous step", test_overlap_in_the_simulator);
    CU_add_test(s, "SGLang's serving flags in the simulator, checked", test_serving_knobs);
    CU_add_test(s, "two-batch overlap hides communication under the other micro-batch", test_two_batch_overlap);
    CU_add_test(s, "--speculative-accept-length gives that many tokens a verify", test_accept_length);
    CU_add_test(s, "the servers' default max running requests and chunk size for the GPU", test_default_max_running);
    CU_add_test(s, "the flags in a CLUSTER.json group and in serve --backend sim", test_flags_in_cluster_and_serve);
}
