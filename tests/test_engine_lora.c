/* test_engine_lora.c — LoRA in the engine: twelve requests over three
 * adapters and the base give each request the same greedy tokens whether
 * the batch may hold every adapter or only two (SGLang's cap, the base
 * counted: requests wait for a slot) or one (vLLM's, the base free), and
 * those tokens are the merged model's; the step records count the
 * adapters and their loads. Also the registry: duplicate names, unknown
 * adapters, removal while in use. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/model/peft.h"
#include "testutil.h"

#define NREQ 12
#define OUT 8

typedef struct run_out {
    int32_t tokens[NREQ][OUT];
    uint32_t n[NREQ];
    uint64_t steps, loads, max_adapters;
} run_out;

static void on_event(void *ctx, const engine_event *ee)
{
    run_out *o = ctx;
    size_t i = (size_t)(uintptr_t)ee->user;
    if (ee->ev.kind != CORE_EV_TOKENS) return;
    for (uint32_t k = 0; k < ee->ev.n_tokens && o->n[i] < OUT; k++) o->tokens[i][o->n[i]++] = ee->tokens[k];
}

static void on_step(void *ctx, const tr_step *st)
{
    run_out *o = ctx;
    o->steps++;
    o->loads += st->adapter_loads;
    if (st->adapters > o->max_adapters) o->max_adapters = st->adapters;
}

static char dirs[3][256];

static void make_adapters(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "eng_lora_%d", i);
        tu_tmp_path(name, dirs[i], sizeof dirs[i]);
        CU_ASSERT_FATAL(model_lora_save_seeded(dirs[i], &c, 4 + 4 * i, 8, LORA_ALL_MODULES, 10 + i, ST_F32, &e) == 0);
    }
}

/* adapter of request i: 0 (base), 1, 2, 3 in turn; merged: run the base
 * engine over a model with adapter `merged` folded in, for its requests only. */
static void run(const core_preset preset, uint32_t cap, const model *m, int merged, run_out *o)
{
    memset(o, 0, sizeof *o);
    engine_config cfg;
    engine_config_default(&cfg);
    cfg.m = m;
    cfg.core.max_total_tokens = 4096;
    cfg.core.preset = preset;
    cfg.core.max_loras_per_batch = cap;
    char paths[900];
    snprintf(paths, sizeof paths, "a=%s,b=%s,c=%s", dirs[0], dirs[1], dirs[2]);
    if (merged < 0) cfg.lora_paths = paths;
    cfg.hooks = (engine_hooks){.ctx = o, .on_event = on_event, .on_step = on_step};
    rh_err e;
    engine *g = engine_new(&cfg, &e);
    if (!g) printf("\n  %s\n", e.msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    if (merged < 0) CU_ASSERT_EQUAL(engine_lora_count(g), 3);
    const char *names[4] = {NULL, "a", "b", "c"};
    for (uint32_t i = 0; i < NREQ; i++) {
        int which = (int)(i % 4);
        if (merged >= 0 && which != merged) continue;
        int32_t prompt[24];
        for (int t = 0; t < 24; t++) prompt[t] = (int32_t)((i * 37 + (uint32_t)t * 11) % 250);
        engine_request r = {.id = i + 1, .prompt = prompt, .prompt_len = 17 + i % 7, .max_tokens = OUT,
                            .sampling = {0, 1, 0}, .ignore_eos = true, .user = (void *)(uintptr_t)i};
        if (merged < 0 && which) r.adapter = engine_lora_find(g, names[which]);
        CU_ASSERT_EQUAL_FATAL(engine_add(g, &r, 0, &e), 0);
    }
    int rc;
    while ((rc = engine_step(g, &e)) == 1) {}
    CU_ASSERT_EQUAL(rc, 0);
    engine_free(g);
}

static void test_cap_and_merged(void)
{
    make_adapters();
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    model *m = model_new_dummy(&c, 42, 0, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    run_out wide, narrow, vllm, alone;
    run(CORE_PRESET_SGLANG, 8, m, -1, &wide);
    run(CORE_PRESET_SGLANG, 2, m, -1, &narrow);
    run(CORE_PRESET_VLLM, 1, m, -1, &vllm);
    CU_ASSERT_EQUAL(wide.loads, 3);               /* each adapter once */
    /* two slots, the base holding one while base requests run: the fcfs
     * queue runs a's requests with the base's, then b's and c's together,
     * each adapter loaded once, in twice the steps */
    CU_ASSERT_EQUAL(narrow.loads, 3);
    CU_ASSERT(narrow.max_adapters == 2 && wide.max_adapters == 3 && vllm.max_adapters == 1);
    CU_ASSERT(narrow.steps >= 2 * wide.steps && vllm.steps > wide.steps);
    int same = 1, vsame = 1;
    for (int i = 0; i < NREQ; i++) {
        same &= narrow.n[i] == OUT && wide.n[i] == OUT && !memcmp(narrow.tokens[i], wide.tokens[i], sizeof wide.tokens[i]);
        vsame &= vllm.n[i] == OUT && !memcmp(vllm.tokens[i], wide.tokens[i], sizeof wide.tokens[i]);
    }
    CU_ASSERT(same);
    CU_ASSERT(vsame);
    /* each adapter's requests against its merged model; the base's against the base */
    int merged_same = 1, differs = 0;
    run(CORE_PRESET_SGLANG, 8, m, 0, &alone);
    for (int i = 0; i < NREQ; i += 4) merged_same &= !memcmp(alone.tokens[i], wide.tokens[i], sizeof alone.tokens[i]);
    for (int k = 0; k < 3; k++) {
        model_lora *l = model_lora_load(dirs[k], "x", &c, 0, &e);
        CU_ASSERT_PTR_NOT_NULL_FATAL(l);
        model *mm = model_lora_merged(m, l, &e);
        run(CORE_PRESET_SGLANG, 8, mm, k + 1, &alone);
        for (int i = k + 1; i < NREQ; i += 4) merged_same &= !memcmp(alone.tokens[i], wide.tokens[i], sizeof alone.tokens[i]);
        run(CORE_PRESET_SGLANG, 8, m, k + 1, &alone);   /* the same prompts on the base model */
        for (int i = k + 1; i < NREQ; i += 4) differs += memcmp(alone.tokens[i], wide.tokens[i], sizeof alone.tokens[i]) != 0;
        model_free(mm);
        model_lora_free(l);
    }
    CU_ASSERT(merged_same);
    CU_ASSERT(differs >= 6);   /* the adapters change what is generated */
    model_free(m);
}

static void test_registry(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    model *m = model_new_dummy(&c, 42, 0, &e);
    engine_config cfg;
    engine_config_default(&cfg);
    cfg.m = m;
    cfg.core.max_total_tokens = 4096;
    cfg.max_lora_rank = 8;
    engine *g = engine_new(&cfg, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(engine_lora_add(g, "a", dirs[0], &e), 1);
    CU_ASSERT_EQUAL(engine_lora_add(g, "a", dirs[1], &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "already served"));
    CU_ASSERT_EQUAL(engine_lora_add(g, "c", dirs[2], &e), -1);   /* rank 12 > 8 */
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--max-lora-rank 8"));
    CU_ASSERT_EQUAL(engine_lora_add(g, "x:y", dirs[1], &e), -1);
    int32_t p[4] = {1, 2, 3, 4};
    engine_request r = {.id = 1, .prompt = p, .prompt_len = 4, .max_tokens = 2, .sampling = {0, 1, 0}, .adapter = 9};
    CU_ASSERT_EQUAL(engine_add(g, &r, 0, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "adapter 9 is not served"));
    r.adapter = engine_lora_find(g, "a");
    CU_ASSERT_EQUAL_FATAL(engine_add(g, &r, 0, &e), 0);
    uint32_t id, reqs;
    const char *path;
    CU_ASSERT_STRING_EQUAL(engine_lora_name(g, 0, &path, &id, &reqs), "a");
    CU_ASSERT(id == 1 && reqs == 1 && !strcmp(path, dirs[0]));
    CU_ASSERT_EQUAL(engine_lora_remove(g, "a", &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "1 requests still use it"));
    while (engine_step(g, &e) == 1) {}
    CU_ASSERT_EQUAL(engine_lora_remove(g, "a", &e), 0);
    CU_ASSERT_EQUAL(engine_lora_count(g), 0);
    CU_ASSERT_EQUAL(engine_lora_remove(g, "a", &e), -1);
    engine_free(g);
    model_free(m);
}

void register_test_engine_lora(void)
{
    CU_pSuite s = CU_add_suite("engine_lora", NULL, NULL);
    CU_add_test(s, "the same tokens under any adapter cap, and the merged model's", test_cap_and_merged);
    CU_add_test(s, "the adapter registry: names, ranks, unknown ids, removal in use", test_registry);
}
