/* test_cost_kernels.c — kernel times (sim/cost/kernel_time.h) with the GPU
 * presets' fitted "kernels" against every row of Vidur's measured operator
 * times (../shared/gpu-profiles/vidur/compute: H100 and A100, Llama-2 and
 * Llama-3, 1 to 32,768 tokens, tp 1 to 8): median error at most 15% and p90
 * at most 30% per operator per file. The fitter recovers parameters it
 * generated data from; the roofline prices each of its kernels this way. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/calibrate/kernel_fit.h"
#include "sim/cost/cost_table.h"
#include "sim/cost/kernel_time.h"
#include "sim/cost/roofline.h"
#include "sim/cost/vidur_import.h"
#include "sim/cost/vidur_profile.h"
#include "testutil.h"

static int init(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

static void check_gpu(const char *dir, const char *sub, const char *preset)
{
    char path[512];
    snprintf(path, sizeof path, "%s/vidur/compute/%s", dir, sub);
    rl_gpu g;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(rl_gpu_load(preset, &g, &e), 0);
    kernel_fit f;
    const char *paths[] = {path};
    if (kernel_fit_errors(paths, 1, &g, g.kern, &f, &e) < 0) {
        printf("\n  SKIPPED %s: %s", preset, e.msg);
        return;
    }
    CU_ASSERT(f.n_errors >= 20);
    for (size_t i = 0; i < f.n_errors; i++) {
        const kernel_fit_error *x = &f.errors[i];
        const char *file = strstr(x->file, sub);
        int ok = x->median <= 0.15 && x->p90 <= 0.30;
        printf("\n  %-36s %-26s median %5.1f%%  p90 %5.1f%%%s", file ? file : x->file, x->op, 100 * x->median,
               100 * x->p90, ok ? "" : "  MISSED");
        CU_ASSERT(ok);
    }
    kernel_fit_free(&f);
}

static void test_measured_operators(void)
{
    const char *dir = tu_gpu_profiles("kernel times against measured operators");
    if (!dir) return;
    check_gpu(dir, "h100", "h100-sxm");
    check_gpu(dir, "a100", "a100-80g");
    printf("\n  ");
}

/* A profile written from known parameters (on a made-up GPU) is fitted
 * back to them. */
static void test_fit_recovers_parameters(void)
{
    char dir[256], gpu_path[300], csv[300];
    tu_tmp_path("kfit", dir, sizeof dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, NULL, 0), 0);
    snprintf(gpu_path, sizeof gpu_path, "%s/fake.json", dir);
    const char *gj = "{\"memory_GB\": 40, \"hbm_GBps\": 2000, \"bf16_tflops\": 500, \"fp8_tflops\": 0,"
                     " \"nvlink_GBps\": 100, \"ib_GBps\": 10, \"gpus_per_node\": 8}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(gpu_path, gj, strlen(gj)), 0);
    rl_gpu g;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(rl_gpu_load(gpu_path, &g, &e), 0);
    rl_kernel truth[RL_K_N];
    for (int i = 0; i < RL_K_N; i++) truth[i] = rl_kernel_pure();
    truth[RL_K_GEMM] = (rl_kernel){.compute_eff = 0.7, .memory_eff = 0.85, .floor_s = 5e-6, .half_rows = 120};
    truth[RL_K_NORM] = (rl_kernel){.compute_eff = 1, .memory_eff = 0.4, .floor_s = 1e-6, .row_s = 7e-10};
    truth[RL_K_ROPE] = (rl_kernel){.compute_eff = 1, .memory_eff = 0.5, .floor_s = 1.5e-6, .row_s = 3e-10};
    truth[RL_K_ACT] = (rl_kernel){.compute_eff = 1, .memory_eff = 0.55, .floor_s = 1.2e-6, .row_s = 4e-10};
    truth[RL_K_ADD] = (rl_kernel){.compute_eff = 1, .memory_eff = 0.9, .floor_s = 0.4e-6, .row_s = 2e-10};
    truth[RL_K_EMBED] = (rl_kernel){.compute_eff = 1, .memory_eff = 0.2, .floor_s = 2e-6, .index_s = 5e-7};

    /* the rows a profile of a made-up model would hold */
    snprintf(csv, sizeof csv, "%s/mlp.csv", dir);
    FILE *f = fopen(csv, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int i = 0; i < VIDUR_N_OPS; i++) fprintf(f, "time_stats.%s.median,", vidur_op_names[i]);
    fprintf(f, "n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,"
               "num_tensor_parallel_workers\n");
    for (int tp = 1; tp <= 4; tp *= 2)
        for (double M = 1; M <= 8192; M *= 1.25) {
            uint32_t m = (uint32_t)M;
            /* a model of 16 heads, 4 KV heads, h 2048, I 5632: each operator's shape as the reader makes it */
            double h = 2048, hd = 128, I = 5632, q = 16 * hd / tp, kv = 4 * hd / tp;
            double t[VIDUR_N_OPS];
            vidur_sample s[VIDUR_N_OPS] = {
                {.kind = RL_K_EMBED, .M = m, .bytes = 4 * m * h},
                {.kind = RL_K_NORM, .M = m, .bytes = 4 * m * h + 2 * h, .row = h},
                {.kind = RL_K_GEMM, .M = m, .K = h, .N = q + 2 * kv},
                {.kind = RL_K_ROPE, .M = m, .bytes = 4 * m * (q + kv) + 2 * m * hd, .row = q + kv},
                {.kind = RL_K_GEMM, .M = m, .K = q, .N = h},
                {.kind = RL_K_NORM, .M = m, .bytes = 4 * m * h + 2 * h, .row = h},
                {.kind = RL_K_GEMM, .M = m, .K = h, .N = 2 * I / tp},
                {.kind = RL_K_ACT, .M = m, .bytes = 6 * m * I / tp, .row = I / tp},
                {.kind = RL_K_GEMM, .M = m, .K = I / tp, .N = h},
                {.kind = RL_K_ADD, .M = m, .bytes = 6 * m * h, .row = h},
            };
            for (int op = 0; op < VIDUR_N_OPS; op++)
                t[op] = vidur_predict(&s[op], &truth[s[op].kind], 500e12, 2000e9);
            for (int op = 0; op < VIDUR_N_OPS; op++) fprintf(f, "%.9g,", t[op] * 1e3);
            fprintf(f, "16,4,2048,5632,32000,True,%u,%d\n", m, tp);
        }
    fclose(f);

    kernel_fit fit;
    const char *paths[] = {dir};
    CU_ASSERT_EQUAL_FATAL(kernel_fit_profiles(paths, 1, &g, &fit, &e), 0);
    CU_ASSERT_EQUAL(fit.n_errors, VIDUR_N_OPS);
    for (size_t i = 0; i < fit.n_errors; i++) {
        if (fit.errors[i].median > 0.01) printf("\n  %s: median %.3f", fit.errors[i].op, fit.errors[i].median);
        CU_ASSERT(fit.errors[i].median <= 0.01);
    }
    const rl_kernel *k = &fit.kern[RL_K_GEMM];
    CU_ASSERT(fabs(k->compute_eff / 0.7 - 1) < 0.03);
    CU_ASSERT(fabs(k->memory_eff / 0.85 - 1) < 0.03);
    CU_ASSERT(fabs(k->half_rows / 120 - 1) < 0.05);
    CU_ASSERT(fabs(fit.kern[RL_K_EMBED].memory_eff / 0.2 - 1) < 0.03);
    CU_ASSERT(!fit.fitted[RL_K_ATTENTION]);
    kernel_fit_free(&fit);

    /* a file that is not a profile is named with what it lacks */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad.csv", dir);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(bad, "a,b\n1,2\n", 8), 0);
    const char *bp[] = {bad};
    CU_ASSERT_EQUAL(kernel_fit_profiles(bp, 1, &g, &fit, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "bad.csv: no column 'n_head'"));
}

/* The roofline times each kernel with the preset's parameters: a
 * 512-token prefill of Llama-3-8B on an H100, by hand from kernel_time.h. */
static void test_roofline_uses_them(void)
{
    rh_err e;
    const char *text = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\"}";
    cost_model *m = cost_parse(text, "k.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const rl_gpu *g = roofline_gpu(m);
    CU_ASSERT(g->kern[RL_K_GEMM].floor_s > 0 && g->kern[RL_K_GEMM].half_rows > 0);
    cost_seq s = {512, 0, true};
    cost_batch b = {.seqs = &s, .n = 1};
    cost_batch_summarize(&b);
    rl_breakdown bd;
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(m, &b, &bd, &e), 0);
    double P = 989e12, H = 3350e9;
    const rl_kernel *gk = &g->kern[RL_K_GEMM];
    CU_ASSERT_DOUBLE_EQUAL(bd.op[RL_QKV_PROJ].seconds, 32 * rl_gemm_s(gk, P, H, 512, 4096, 6144, 2, 1), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(bd.op[RL_MLP].seconds,
                           32 * (rl_gemm_s(gk, P, H, 512, 4096, 28672, 2, 1) + rl_gemm_s(gk, P, H, 512, 14336, 4096, 2, 1)),
                           1e-12);
    CU_ASSERT_DOUBLE_EQUAL(bd.op[RL_NORM].seconds,
                           65 * rl_stream_s(&g->kern[RL_K_NORM], H, 4.0 * 512 * 4096 + 2 * 4096, 4096, 1), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(bd.op[RL_ACT].seconds, 32 * rl_stream_s(&g->kern[RL_K_ACT], H, 6.0 * 512 * 14336, 14336, 1),
                           1e-12);
    CU_ASSERT_DOUBLE_EQUAL(bd.op[RL_LM_HEAD].seconds, rl_gemm_s(gk, P, H, 1, 4096, 128256, 2, 1), 1e-12);
    /* measured kernels are slower than the pure roofline, never faster */
    cost_model *pure = cost_parse("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", "
                                  "\"gpu\": \"h100-sxm\", \"kernels\": \"none\"}", "p.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pure);
    rl_breakdown pb;
    CU_ASSERT_EQUAL_FATAL(roofline_breakdown(pure, &b, &pb, &e), 0);
    for (int i = 0; i < RL_N_OPS; i++) CU_ASSERT(bd.op[i].seconds >= pb.op[i].seconds);
    CU_ASSERT_DOUBLE_EQUAL(pb.op[RL_QKV_PROJ].seconds, 32 * 2.0 * 512 * 4096 * 6144 / P, 1e-12);
    cost_free(pure);
    cost_free(m);
}

/* The stream and embedding shapes by hand. A stream kernel whose row term
 * equals its memory term takes cbrt(2) times either (the soft maximum of
 * kernel_time.h, not the larger one); an embedding of up to 16 tokens pays
 * index_s per token, 16 included, 17 not. Then the same embedding through
 * the roofline: a 16-token prefill of Llama-3-8B on an H100 reads 16 rows
 * of 4,096 bf16 values and writes them. */
static void test_stream_and_embedding_by_hand(void)
{
    rl_kernel k = {.compute_eff = 1, .memory_eff = 0.5, .floor_s = 2e-6, .row_s = 1e-9, .index_s = 3e-7};
    double hbm = 1e12, bytes = 2e6;   /* 2e6 / (1e12 * 0.5) = 4 us, and 4,000 elements * 1 ns = 4 us */
    CU_ASSERT_DOUBLE_EQUAL(rl_stream_s(&k, hbm, bytes, 4000, 1), 2e-6 + cbrt(2) * 4e-6, 1e-15);
    /* a thousandth of the memory term in rows: the time is the memory term's, nearly */
    CU_ASSERT_DOUBLE_EQUAL(rl_stream_s(&k, hbm, bytes, 4, 1), 2e-6 + cbrt(pow(4e-6, 3) + pow(4e-9, 3)), 1e-15);
    /* eff scales the bandwidth: 8 us of memory against 4 us of rows */
    CU_ASSERT_DOUBLE_EQUAL(rl_stream_s(&k, hbm, bytes, 4000, 0.5), 2e-6 + cbrt(pow(8e-6, 3) + pow(4e-6, 3)), 1e-15);
    CU_ASSERT_EQUAL(rl_stream_s(&k, hbm, 0, 4000, 1), 0);
    double eb = 16 * 4096 * 2.0;
    CU_ASSERT_DOUBLE_EQUAL(rl_embedding_s(&k, hbm, 16, eb, 1), 2e-6 + 16 * 3e-7 + eb / (1e12 * 0.5), 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(rl_embedding_s(&k, hbm, 1, eb / 16, 1), 2e-6 + 3e-7 + eb / 16 / (1e12 * 0.5), 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(rl_embedding_s(&k, hbm, 17, eb * 17 / 16, 1), 2e-6 + eb * 17 / 16 / (1e12 * 0.5), 1e-15);
    CU_ASSERT_EQUAL(rl_embedding_s(&k, hbm, 0, eb, 1), 0);

    rh_err e;
    const char *text = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\"}";
    cost_model *m = cost_parse(text, "k.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const rl_kernel *ek = &roofline_gpu(m)->kern[RL_K_EMBED];
    CU_ASSERT_FATAL(ek->index_s > 0 && ek->memory_eff > 0 && ek->memory_eff < 1);
    for (int T = 16; T <= 17; T++) {
        cost_seq sq = {(uint32_t)T, 0, true};
        cost_batch b = {.seqs = &sq, .n = 1};
        cost_batch_summarize(&b);
        rl_breakdown bd;
        CU_ASSERT_EQUAL_FATAL(roofline_breakdown(m, &b, &bd, &e), 0);
        double want = ek->floor_s + (T == 16 ? 16 * ek->index_s : 0) + 2.0 * T * 4096 * 2 / (3350e9 * ek->memory_eff);
        CU_ASSERT_DOUBLE_EQUAL(bd.op[RL_EMBED].seconds, want, 1e-15);
    }
    cost_free(m);
}

/* `cost import vidur`: the profile as a table cost model. Its per-token
 * operators are the measured times (checked at grid points), and its steps
 * agree with the roofline of the same model on the same GPU with the fitted
 * kernels: two computations of the same forward pass. A profile of another
 * model's shapes is refused. */
static void test_import_vidur(void)
{
    const char *dir = tu_gpu_profiles("cost import vidur");
    if (!dir) return;
    char prof[512];
    snprintf(prof, sizeof prof, "%s/vidur/compute/h100/meta-llama/Llama-2-7b-hf", dir);
    rh_err e = {{0}};
    json_t *t = vidur_import_table(prof, "llama-2-7b", NULL, 1, &e);
    if (!t) printf("\n  %s", e.msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    char *text = json_dumps(t, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(t);
    cost_model *table = cost_parse(text, "imported.json", &e);
    free(text);
    if (!table) printf("\n  %s", e.msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(table);

    /* the measured rows, at tp 1 */
    char csv[600];
    snprintf(csv, sizeof csv, "%s/mlp.csv", prof);
    vidur_profile p;
    CU_ASSERT_EQUAL_FATAL(vidur_profile_read(csv, &p, &e), 0);
    /* the profile repeats a few token counts: the table holds their mean */
    double up[3] = {0}, act[3] = {0};
    int nup[3] = {0}, nact[3] = {0};
    static const double at[3] = {1, 512, 4096};
    for (size_t i = 0; i < p.n; i++) {
        const vidur_sample *x = &p.s[i];
        for (int k = 0; k < 3; k++) {
            if (x->tp != 1 || x->M != at[k]) continue;
            if (x->op == 6) up[k] += x->seconds, nup[k]++;      /* mlp_up_proj: gate and up fused */
            if (x->op == 7) act[k] += x->seconds, nact[k]++;    /* mlp_act */
        }
    }
    for (int k = 0; k < 3; k++) {
        CU_ASSERT_FATAL(nup[k] > 0 && nact[k] > 0);
        CU_ASSERT_DOUBLE_EQUAL(cost_table_op_time(table, CT_GATE_UP_PROJ, at[k], 0), up[k] / nup[k] / 2, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(cost_table_op_time(table, CT_SILU_MUL, at[k], 0), act[k] / nact[k], 1e-12);
    }
    vidur_profile_free(&p);

    cost_model *roof = cost_parse("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-2-7b\", "
                                  "\"gpu\": \"h100-sxm\", \"host\": \"none\"}", "r.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(roof);
    cost_seq seqs[128];
    static const struct { uint32_t n, chunk; } cases[] = {{1, 512}, {1, 2048}, {1, 0}, {32, 0}, {128, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint32_t n = cases[c].n;
        for (uint32_t i = 0; i < n; i++)
            seqs[i] = cases[c].chunk ? (cost_seq){cases[c].chunk, 0, true} : (cost_seq){1, 1000, false};
        cost_batch b = {.seqs = seqs, .n = n};
        cost_batch_summarize(&b);
        double tt = cost_step_time(table, &b), tr = cost_step_time(roof, &b);
        printf("\n  %s of %u: table %.3f ms, roofline %.3f ms", cases[c].chunk ? "prefill" : "decodes",
               cases[c].chunk ? cases[c].chunk : n, tt * 1e3, tr * 1e3);
        CU_ASSERT(fabs(tr / tt - 1) < 0.2);   /* the kernels' fit: p90 up to 28% per operator */
    }
    printf("\n  ");
    cost_free(roof);
    cost_free(table);

    CU_ASSERT_PTR_NULL(vidur_import_table(prof, "llama-3-8b", NULL, 1, &e));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "model llama-3-8b has"));
}

void register_test_cost_kernels(void)
{
    CU_pSuite s = CU_add_suite("cost_kernels", init, NULL);
    CU_add_test(s, "the roofline times its kernels with the preset's parameters", test_roofline_uses_them);
    CU_add_test(s, "stream and embedding kernels by hand: equal terms, exactly 16 tokens", test_stream_and_embedding_by_hand);
    CU_add_test(s, "the fit recovers the parameters it was given", test_fit_recovers_parameters);
    CU_add_test(s, "every measured operator: median <= 15%, p90 <= 30% per file", test_measured_operators);
    CU_add_test(s, "cost import vidur: the measured table agrees with the roofline", test_import_vidur);
}
