/* test_model_lora.c — LoRA in the forward pass against the merged weights:
 * a batch mixing three adapters (one on some modules only, in interleaved
 * segments) and the base gives each sequence the logits its own merged
 * model W + s·B·A gives it alone (within 1e-5 of the largest logit: both
 * are fp32 computations), and greedy decoding in the
 * mixed batch gives each the merged model's tokens. Also: the PEFT folder
 * round trip (f32 and bf16), rslora's scale, and adapters serving cannot
 * take refused with the file and field named. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/generate.h"
#include "engine/model/peft.h"
#include "testutil.h"

#define N_SEQ 5
#define PROMPT 19
#define DECODE 10
#define PAGE 16
#define PAGES_PER 4

static model *base_model(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    model *m = model_new_dummy(&c, 42, 0, &e);
    CU_ASSERT_FATAL(m != NULL);
    return m;
}

static model_lora *seeded(const model *m, const char *name, uint32_t rank, uint32_t targets, uint64_t seed,
                          st_dtype dt)
{
    char dir[256];
    tu_tmp_path(name, dir, sizeof dir);
    rh_err e;
    int rc = model_lora_save_seeded(dir, &m->cfg, rank, 2.0 * rank, targets, seed, dt, &e);
    if (rc) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(rc == 0);
    model_lora *l = model_lora_load(dir, name, &m->cfg, 0, &e);
    if (!l) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(l != NULL);
    return l;
}

static runner *new_runner(const model *m)
{
    runner_config rc = {PAGE, N_SEQ * PAGES_PER, 0, NULL};
    rh_err e;
    runner *r = runner_new(m, &rc, &e);
    CU_ASSERT_FATAL(r != NULL);
    return r;
}

static int argmax(const float *row, uint32_t n)
{
    int best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (row[i] > row[best]) best = (int)i;
    return best;
}

/* Prefills every sequence's prompt, then decodes DECODE greedy tokens, all
 * sequences in one batch each step (lora[i] NULL: the base). Writes the
 * first step's last logit row of each sequence to first[i] and the tokens
 * to out[i]. */
static void run_batch(runner *r, runner_lora *const *lora, uint32_t n, int32_t prompts[][PROMPT + DECODE],
                      float *first, int32_t out[][DECODE])
{
    uint32_t V = runner_model(r)->vocab_size;
    uint32_t pages[N_SEQ][PAGES_PER];
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t p = 0; p < PAGES_PER; p++) pages[i][p] = i * PAGES_PER + p;
    runner_seq s[N_SEQ];
    const float *lg;
    rh_err e;
    for (uint32_t i = 0; i < n; i++)
        s[i] = (runner_seq){prompts[i], PROMPT, 0, pages[i], PAGES_PER, 1, lora[i]};
    CU_ASSERT_FATAL(runner_forward(r, s, n, &lg, &e) == 0);
    memcpy(first, lg, (size_t)n * V * sizeof(float));
    for (uint32_t t = 0; t < DECODE; t++) {
        for (uint32_t i = 0; i < n; i++) {
            out[i][t] = argmax(lg + (size_t)i * V, V);
            prompts[i][PROMPT + t] = out[i][t];
        }
        if (t + 1 == DECODE) break;
        for (uint32_t i = 0; i < n; i++)
            s[i] = (runner_seq){&prompts[i][PROMPT + t], 1, PROMPT + t, pages[i], PAGES_PER, 1, lora[i]};
        CU_ASSERT_FATAL(runner_forward(r, s, n, &lg, &e) == 0);
    }
}

static void test_against_merged(void)
{
    model *m = base_model();
    uint32_t V = m->cfg.vocab_size;
    model_lora *ad[3] = {seeded(m, "lora_a", 8, LORA_ALL_MODULES, 1, ST_F32),
                         seeded(m, "lora_b", 4, (1u << LORA_Q) | (1u << LORA_V), 2, ST_F32),
                         seeded(m, "lora_c", 16, LORA_ALL_MODULES, 3, ST_F32)};
    runner *r = new_runner(m);
    rh_err e;
    runner_lora *h[3];
    for (int i = 0; i < 3; i++) {
        h[i] = runner_lora_load(r, ad[i], &e);
        CU_ASSERT_FATAL(h[i] != NULL);
    }
    /* a, the base, a again (a segment of its own: the base lies between), then b and c side by side */
    runner_lora *which[N_SEQ] = {h[0], NULL, h[0], h[1], h[2]};
    int idx[N_SEQ] = {0, -1, 0, 1, 2};
    int32_t prompts[N_SEQ][PROMPT + DECODE], alone_p[PROMPT + DECODE];
    uint64_t seed = 9;
    for (uint32_t i = 0; i < N_SEQ; i++)
        for (uint32_t t = 0; t < PROMPT; t++) prompts[i][t] = (int32_t)(rh_splitmix_next(&seed) % V);
    memcpy(prompts[2], prompts[0], sizeof prompts[0]);   /* same prompt, same adapter: same result */
    float *first = malloc((size_t)N_SEQ * V * sizeof(float)), *alone = malloc((size_t)V * sizeof(float));
    int32_t out[N_SEQ][DECODE], alone_out[1][DECODE];
    int32_t keep[N_SEQ][PROMPT + DECODE];
    memcpy(keep, prompts, sizeof keep);
    run_batch(r, which, N_SEQ, prompts, first, out);

    double worst = 0, moved = 0;
    for (uint32_t i = 0; i < N_SEQ; i++) {
        model *mm = idx[i] < 0 ? NULL : model_lora_merged(m, ad[idx[i]], &e);
        runner *rm = new_runner(mm ? mm : m);
        runner_lora *none[1] = {NULL};
        memcpy(alone_p, keep[i], sizeof alone_p);
        int32_t one[1][PROMPT + DECODE];
        memcpy(one[0], alone_p, sizeof alone_p);
        run_batch(rm, none, 1, one, alone, alone_out);
        for (uint32_t v = 0; v < V; v++) {
            double d = fabs((double)first[(size_t)i * V + v] - alone[v]);
            if (d > worst) worst = d;
        }
        CU_ASSERT(!memcmp(out[i], alone_out[0], sizeof out[i]));
        runner_free(rm);
        model_free(mm);
    }
    double big = 0;
    for (size_t k = 0; k < (size_t)N_SEQ * V; k++) big = fmax(big, fabs(first[k]));
    /* Two fp32 computations of the same function (W' rounded once against
     * u = x·Aᵀ rounded), so the bound is relative to the logits' size. */
    printf("\n    largest logit difference %.3g, %.2g of the largest logit (%.3g)\n", worst, worst / big, big);
    CU_ASSERT(worst <= 1e-5 * big);
    /* The adapters matter: the same prompt under the base and under each adapter differs. */
    runner *rb = new_runner(m);
    runner_lora *hb[3];
    for (int i = 0; i < 3; i++) hb[i] = runner_lora_load(rb, ad[i], &e);
    int32_t same[4][PROMPT + DECODE], outs[4][DECODE];
    for (int i = 0; i < 4; i++) memcpy(same[i], keep[0], sizeof same[i]);
    runner_lora *mix[4] = {NULL, hb[0], hb[1], hb[2]};
    float *rows = malloc(4 * (size_t)V * sizeof(float));
    run_batch(rb, mix, 4, same, rows, outs);
    for (int i = 1; i < 4; i++) {
        double d = 0;
        for (uint32_t v = 0; v < V; v++) d = fmax(d, fabs(rows[(size_t)i * V + v] - rows[v]));
        moved = i == 1 ? d : fmin(moved, d);
    }
    CU_ASSERT(moved > 1e-3);
    for (int i = 0; i < 3; i++) runner_lora_free(rb, hb[i]);
    runner_free(rb);
    free(rows);
    for (int i = 0; i < 3; i++) runner_lora_free(r, h[i]);
    runner_free(r);
    for (int i = 0; i < 3; i++) model_lora_free(ad[i]);
    free(first);
    free(alone);
    model_free(m);
}

/* bf16 storage reads back within bf16's rounding; use_rslora scales by
 * alpha / sqrt(r). */
static void test_folder_round_trip(void)
{
    model *m = base_model();
    model_lora *f = seeded(m, "lora_f32", 4, LORA_ALL_MODULES, 5, ST_F32);
    model_lora *b = seeded(m, "lora_bf16", 4, LORA_ALL_MODULES, 5, ST_BF16);
    CU_ASSERT_EQUAL(f->rank, 4);
    CU_ASSERT_EQUAL(f->targets, LORA_ALL_MODULES);
    CU_ASSERT_DOUBLE_EQUAL(f->scale, 2.0, 1e-7);   /* alpha 8 / r 4 */
    double worst = 0;
    uint32_t in, out;
    lora_module_dims(&m->cfg, LORA_Q, &in, &out);
    for (uint32_t i = 0; i < 4 * in; i++) worst = fmax(worst, fabs(f->a[0][i] - b->a[0][i]) / (fabs(f->a[0][i]) + 1e-30));
    CU_ASSERT(worst > 0 && worst < 1.0 / 128);
    /* the file's own A and B, read apart: A as stored, B times alpha / r */
    char path[320];
    tu_tmp_path("lora_f32", path, sizeof path);
    strncat(path, "/adapter_model.safetensors", sizeof path - strlen(path) - 1);
    rh_err se;
    st_file *st = st_open(path, &se);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    const st_tensor *ta = st_find(st, "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight");
    const st_tensor *tb = st_find(st, "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
    CU_ASSERT_FATAL(ta && tb);
    float *ra = malloc(ta->numel * sizeof *ra), *rb = malloc(tb->numel * sizeof *rb);
    st_read_f32(ta, ra), st_read_f32(tb, rb);
    int same = 1;
    size_t at = 1 * LORA_N_MODULES + LORA_DOWN;
    for (uint64_t i = 0; i < ta->numel; i++) same &= f->a[at][i] == ra[i];
    for (uint64_t i = 0; i < tb->numel; i++) same &= f->b[at][i] == rb[i] * 2.0f;
    CU_ASSERT(same);
    free(ra), free(rb);
    st_close(st);
    model_lora_free(f);
    model_lora_free(b);

    char dir[256], file[320];
    tu_tmp_path("lora_rs", dir, sizeof dir);
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(model_lora_save_seeded(dir, &m->cfg, 4, 8, 1u << LORA_Q, 6, ST_F32, &e), 0);
    snprintf(file, sizeof file, "%s/adapter_config.json", dir);
    const char *rs = "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"use_rslora\": true,"
                     " \"target_modules\": [\"model.layers.0.self_attn.q_proj\"]}";
    tu_write_file(file, rs, strlen(rs));
    model_lora *l = model_lora_load(dir, "rs", &m->cfg, 0, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    CU_ASSERT_DOUBLE_EQUAL(l->scale, 4.0, 1e-6);   /* 8 / sqrt(4) */
    model_lora_free(l);
    model_free(m);
}

static void expect_refused(const model *m, const char *dir, const char *config, uint32_t max_rank, const char *a,
                           const char *b)
{
    char file[320];
    snprintf(file, sizeof file, "%s/adapter_config.json", dir);
    tu_write_file(file, config, strlen(config));
    rh_err e = {{0}};
    model_lora *l = model_lora_load(dir, "x", &m->cfg, max_rank, &e);
    CU_ASSERT_PTR_NULL(l);
    model_lora_free(l);
    int ok = strstr(e.msg, a) && (!b || strstr(e.msg, b));
    if (!ok) printf("\n  got: %s\n", e.msg);
    CU_ASSERT(ok);
}

static void test_refusals(void)
{
    model *m = base_model();
    char dir[256];
    tu_tmp_path("lora_bad", dir, sizeof dir);
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(model_lora_save_seeded(dir, &m->cfg, 4, 8, LORA_ALL_MODULES, 7, ST_F32, &e), 0);
    const char *t = "\"target_modules\": [\"q_proj\"]";
    char cfg[512];
    snprintf(cfg, sizeof cfg, "{\"r\": 4, \"use_dora\": true, %s}", t);
    expect_refused(m, dir, cfg, 0, "adapter_config.json", "'use_dora'");
    snprintf(cfg, sizeof cfg, "{\"r\": 4, \"bias\": \"all\", %s}", t);
    expect_refused(m, dir, cfg, 0, "'bias'", NULL);
    snprintf(cfg, sizeof cfg, "{\"r\": 4, \"modules_to_save\": [\"lm_head\"], %s}", t);
    expect_refused(m, dir, cfg, 0, "'modules_to_save'", NULL);
    snprintf(cfg, sizeof cfg, "{\"r\": 4, \"rank_pattern\": {\"q_proj\": 8}, %s}", t);
    expect_refused(m, dir, cfg, 0, "'rank_pattern'", NULL);
    expect_refused(m, dir, "{\"r\": 4, \"target_modules\": [\"lm_head\"]}", 0, "'target_modules'", "'lm_head'");
    expect_refused(m, dir, "{\"r\": 0, \"target_modules\": [\"q_proj\"]}", 0, "field 'r'", NULL);
    expect_refused(m, dir, "{\"r\": 8, \"target_modules\": [\"q_proj\"]}", 0, "adapter_model.safetensors",
                   "rank 8 on this model needs");
    snprintf(cfg, sizeof cfg, "{\"r\": 4, %s}", t);
    expect_refused(m, dir, cfg, 2, "above --max-lora-rank 2", NULL);
    expect_refused(m, dir, "{\"r\": 4, \"target_modules\": [\"q_proj\"", 0, "adapter_config.json", "line");
    model_free(m);
}

/* The command writes what the loader reads; a bad module list is refused. */
static void test_save_lora_command(void)
{
    char dir[256], cmd[600], msg[1024];
    tu_tmp_path("lora_cli", dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s model save-lora tiny-llama -o %s --rank 6 --alpha 3 --target-modules o_proj,down_proj",
             tu_bin(), dir);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, msg, sizeof msg), 0);
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    model_lora *l = model_lora_load(dir, "cli", &c, 0, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    CU_ASSERT(l->rank == 6 && l->targets == ((1u << LORA_O) | (1u << LORA_DOWN)) && fabs(l->scale - 0.5) < 1e-7);
    model_lora_free(l);
    snprintf(cmd, sizeof cmd, "%s model save-lora tiny-llama -o %s --target-modules q_proj,lm_head 2>&1", tu_bin(), dir);
    CU_ASSERT_NOT_EQUAL(tu_run(cmd, msg, sizeof msg), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "'lm_head'"));
}

void register_test_model_lora(void)
{
    CU_pSuite s = CU_add_suite("model_lora", NULL, NULL);
    CU_add_test(s, "3 adapters and the base in one batch equal each merged W + s·B·A (1e-5 relative, greedy tokens)",
                test_against_merged);
    CU_add_test(s, "PEFT folders: f32 and bf16, rslora's scale", test_folder_round_trip);
    CU_add_test(s, "adapters serving cannot take are refused, naming file and field", test_refusals);
    CU_add_test(s, "rehearse model save-lora writes what the loader reads", test_save_lora_command);
}
