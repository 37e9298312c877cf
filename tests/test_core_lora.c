/* test_core_lora.c — LoRA adapters in the scheduler core: the per-batch
 * adapter cap as SGLang (base counted) and vLLM (base free) apply it, skip
 * rather than block, the GPU slots' loads under lru and fifo against their
 * closed forms, the prefix cache keyed by adapter, and a random workload
 * whose every batch keeps the cap and whose every request finishes. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "test_core_harness.h"
#include "engine/core/core.h"
#include "engine/core/internal.h"
#include "util/rng.h"

static harness H;

static core_req *add_lora(uint64_t id, uint32_t prompt, uint32_t max_new, uint32_t adapter)
{
    core_req_desc d = {.id = id, .prompt_len = prompt, .max_new_tokens = max_new, .adapter = adapter};
    rh_err e = {{0}};
    core_req *r = core_add(H.c, &d, 0, &e);
    if (!r) printf("\n  core_add: %s\n", e.msg);
    return r;
}

/* Four requests: adapter 1, adapter 2, the base, adapter 1 again, cap 2.
 * SGLang counts the base, so it waits while 1 and 2 run and the second
 * adapter-1 request (already in the set) is admitted past it; vLLM admits
 * all four. */
static void admitted_ids(core_preset preset, uint32_t cap, uint64_t *ids, uint32_t *n)
{
    core_config cfg;
    core_config_default(&cfg);
    cfg.preset = preset;
    cfg.max_loras_per_batch = cap;
    h_new(&H, &cfg);
    uint32_t adapters[4] = {1, 2, 0, 1};
    for (uint32_t i = 0; i < 4; i++) CU_ASSERT_PTR_NOT_NULL(add_lora(i + 1, 64, 8, adapters[i]));
    core_seq s[8];
    core_batch b;
    *n = h_step_with(&H, 0, NULL, s, 8, &b);
    for (uint32_t i = 0; i < *n; i++) ids[i] = s[i].id;
    CU_ASSERT_EQUAL(b.n_adapters, 2);
    CU_ASSERT_EQUAL(b.adapter_loads, 2);
    CU_ASSERT_EQUAL(b.adapter_tokens, *n == 4 ? 3 * 64 : 3 * 64);
    CU_ASSERT_EQUAL(H.last.adapters, 2);
    CU_ASSERT_EQUAL(H.last.adapter_loads, 2);
    double now = 1;
    h_drain(&H, &now, 100);
    for (uint32_t i = 1; i <= 4; i++) CU_ASSERT_EQUAL(H.req[i].tokens, 8);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_free(H.c);
}

static void test_cap_sglang_and_vllm(void)
{
    uint64_t ids[8];
    uint32_t n;
    admitted_ids(CORE_PRESET_SGLANG, 2, ids, &n);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT(ids[0] == 1 && ids[1] == 2 && ids[2] == 4);
    admitted_ids(CORE_PRESET_VLLM, 2, ids, &n);
    CU_ASSERT_EQUAL(n, 4);
    admitted_ids(CORE_PRESET_SGLANG, 3, ids, &n);
    CU_ASSERT_EQUAL(n, 4);
}

/* One request at a time, so each step's set is one adapter: the loads are
 * the misses of a cache of `cap` slots under lru or fifo, worked out by
 * hand. SGLang's base takes a slot too but is evicted last. */
static uint64_t loads_for(core_preset preset, core_lora_evict ev, uint32_t cap, const uint32_t *seq, uint32_t n)
{
    core_config cfg;
    core_config_default(&cfg);
    cfg.preset = preset;
    cfg.max_loras_per_batch = cap;
    cfg.lora_eviction = ev;
    cfg.enable_lora = true;   /* the base takes its slot from the first request */
    h_new(&H, &cfg);
    double now = 0;
    for (uint32_t i = 0; i < n; i++) {
        CU_ASSERT_PTR_NOT_NULL(add_lora(i + 1, 32, 2, seq[i]));
        h_drain(&H, &now, 10);
    }
    core_stats st;
    core_get_stats(H.c, &st);
    uint32_t ids[8], nr = core_lora_resident(H.c, ids, 8);
    CU_ASSERT(nr <= cap);
    core_free(H.c);
    return st.adapter_loads;
}

static void test_slots_lru_fifo(void)
{
    /* lru, 2 slots: 1 L, 2 L, 1 hit, 3 L (evicts 2), 1 hit, 2 L (evicts 3): 4.
     * fifo: 1 L, 2 L, 1 hit, 3 L (evicts 1), 1 L (evicts 2), 2 L (evicts 3): 5. */
    uint32_t seq[] = {1, 2, 1, 3, 1, 2};
    CU_ASSERT_EQUAL(loads_for(CORE_PRESET_VLLM, CORE_LORA_EVICT_LRU, 2, seq, 6), 4);
    CU_ASSERT_EQUAL(loads_for(CORE_PRESET_VLLM, CORE_LORA_EVICT_FIFO, 2, seq, 6), 5);
    CU_ASSERT_EQUAL(loads_for(CORE_PRESET_SGLANG, CORE_LORA_EVICT_LRU, 2, seq, 6), 4);
    /* The base: vLLM gives it no slot (1 L, 2 L, 1 hit: 2); SGLang's base
     * holds one of the two, so 1 and 2 share the other (1 L, 2 L evicting 1
     * though the base was used longer ago, 1 L: 3). */
    uint32_t with_base[] = {0, 1, 2, 1};
    CU_ASSERT_EQUAL(loads_for(CORE_PRESET_VLLM, CORE_LORA_EVICT_LRU, 2, with_base, 4), 2);
    CU_ASSERT_EQUAL(loads_for(CORE_PRESET_SGLANG, CORE_LORA_EVICT_LRU, 2, with_base, 4), 3);
}

/* The same prompt under another adapter shares nothing; under the same
 * adapter it hits; the base keeps its own keys. */
static void test_prefix_cache_by_adapter(void)
{
    core_config cfg;
    core_config_default(&cfg);
    h_new(&H, &cfg);
    uint64_t hs[2] = {5, 6};
    double now = 0;
    uint32_t adapters[4] = {1, 2, 1, 0};
    for (uint32_t i = 0; i < 4; i++) {
        core_req_desc d = {.id = i + 1, .prompt_len = 1100, .max_new_tokens = 2, .block_hashes = hs,
                           .n_block_hashes = 2, .block_size = 512, .adapter = adapters[i]};
        rh_err e;
        CU_ASSERT_PTR_NOT_NULL(core_add(H.c, &d, now, &e));
        h_drain(&H, &now, 10);
    }
    CU_ASSERT_EQUAL(H.req[1].cached, 0);
    CU_ASSERT_EQUAL(H.req[2].cached, 0);
    CU_ASSERT_EQUAL(H.req[3].cached, 1024);
    CU_ASSERT_EQUAL(H.req[4].cached, 0);
    core_free(H.c);
}

/* Distinct adapters the cap counts among the running requests and the batch. */
static uint32_t counted_in_use(const core *c, const core_batch *b)
{
    uint32_t seen[1024], n = 0;
    for (uint32_t i = 0; i < c->n_run + (c->chunked != NULL) + b->n; i++) {
        const core_req *r = i < c->n_run ? c->run[i] : (i == c->n_run && c->chunked) ? c->chunked
                                                                                      : b->seqs[i - c->n_run - (c->chunked != NULL)].req;
        if (!r->adapter && c->cfg.preset == CORE_PRESET_VLLM) continue;
        uint32_t k = 0;
        while (k < n && seen[k] != r->adapter) k++;
        if (k == n && n < 1024) seen[n++] = r->adapter;
    }
    return n;
}

/* 600 requests over 12 adapters (a quarter on the base), arriving over
 * time, under a tight pool: every batch keeps the cap, every request ends
 * with its tokens, and with as many slots as adapters each loads once. */
static void random_workload(core_preset preset, uint32_t cap, uint32_t n_adapters, uint64_t *loads)
{
    core_config cfg;
    core_config_default(&cfg);
    cfg.preset = preset;
    cfg.max_loras_per_batch = cap;
    cfg.max_total_tokens = 16 * 400;
    cfg.max_running_requests = 32;
    h_new(&H, &cfg);
    uint64_t seed = 7;
    double now = 0;
    uint32_t added = 0, worst = 0;
    bool ok = true;
    for (int step = 0; step < 100000 && (added < 600 || !core_idle(H.c)); step++) {
        while (added < 600 && rh_splitmix_next(&seed) % 3 == 0) {
            uint64_t x = rh_splitmix_next(&seed);
            uint32_t a = x % 4 == 0 ? 0 : 1 + (uint32_t)(x >> 8) % n_adapters;
            add_lora(added + 1, 16 + (uint32_t)(x >> 20) % 300, 1 + (uint32_t)(x >> 40) % 40, a);
            added++;
        }
        core_batch b;
        H.cur_step = (int64_t)H.steps;
        uint32_t n = core_schedule(H.c, now, &b);
        if (n) {
            uint32_t in_use = counted_in_use(H.c, &b);
            if (in_use > worst) worst = in_use;
            ok &= in_use <= cap && b.adapter_loads <= b.n_adapters;
            rh_err e;
            ok &= core_complete(H.c, &b, NULL, now + 0.01, &e) == 0;
            H.steps++;
        }
        now += 0.01;
    }
    CU_ASSERT(ok);
    CU_ASSERT_EQUAL(worst, cap < n_adapters ? cap : worst);   /* the cap is reached, never passed */
    uint32_t done = 0;
    for (uint32_t i = 1; i <= 600; i++) done += H.req[i].finished == 1;
    CU_ASSERT_EQUAL(done, 600);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_stats st;
    core_get_stats(H.c, &st);
    *loads = st.adapter_loads;
    core_free(H.c);
}

static void test_random_workload(void)
{
    uint64_t loads;
    for (int p = 0; p < 2; p++) {
        core_preset preset = p ? CORE_PRESET_VLLM : CORE_PRESET_SGLANG;
        random_workload(preset, 4, 12, &loads);
        CU_ASSERT(loads > 12);              /* fewer slots than adapters: some load again */
        random_workload(preset, 13, 12, &loads);
        CU_ASSERT_EQUAL(loads, 12);         /* a slot each (and the base's): each loads once */
    }
}

static void test_knobs(void)
{
    core_config cfg;
    core_config_default(&cfg);
    rh_err e;
    CU_ASSERT_EQUAL(cfg.max_loras_per_batch, 8);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "max-loras", "3", &e), 1);
    CU_ASSERT_EQUAL(cfg.max_loras_per_batch, 3);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "lora-eviction-policy", "fifo", &e), 1);
    CU_ASSERT_EQUAL(cfg.lora_eviction, CORE_LORA_EVICT_FIFO);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "lora-eviction-policy", "lfu", &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "lora-eviction-policy"));
    cfg.max_loras_per_batch = 0;
    CU_ASSERT_EQUAL(core_config_validate(&cfg, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--max-loras-per-batch"));
    CU_ASSERT_PTR_NOT_NULL(strstr(core_config_help(), "--max-loras-per-batch N"));
}

void register_test_core_lora(void)
{
    CU_pSuite s = CU_add_suite("core_lora", NULL, NULL);
    CU_add_test(s, "the adapter cap: SGLang counts the base, vLLM does not; skipped, not blocked",
                test_cap_sglang_and_vllm);
    CU_add_test(s, "adapter slots: loads under lru and fifo as worked by hand", test_slots_lru_fifo);
    CU_add_test(s, "the prefix cache is keyed by adapter", test_prefix_cache_by_adapter);
    CU_add_test(s, "a random workload keeps the cap and finishes every request", test_random_workload);
    CU_add_test(s, "knobs: --max-loras-per-batch (--max-loras), --lora-eviction-policy", test_knobs);
}
