/* test_core_hicache.c — the host tier below the GPU's prefix cache (SGLang's
 * HiCache) in the scheduler core: the tier's LRU against a plain reference,
 * a prefix evicted from the GPU loading back instead of recomputing (the
 * same work as without the tier, split into computed and loaded tokens),
 * the three write policies' copies, and a random workload under every
 * policy and host size whose pool and tier stay consistent every step. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "test_core_harness.h"
#include "engine/core/core.h"
#include "engine/core/tier.h"
#include "util/rng.h"

static harness H;

/* ---- the tier against a reference: an array scanned for the least stamp ---- */
typedef struct ref_entry {
    uint64_t key, stamp;
    int pinned;
} ref_entry;

static int ref_find(ref_entry *v, int n, uint64_t key)
{
    for (int i = 0; i < n; i++)
        if (v[i].key == key) return i;
    return -1;
}

/* A slot for a new key: appended, or the least recently used unpinned one's. */
static int ref_take(ref_entry *v, int *n, int cap, uint64_t key, uint64_t *evicted)
{
    int i = *n;
    if (*n == cap) {
        i = -1;
        for (int j = 0; j < *n; j++)
            if (!v[j].pinned && (i < 0 || v[j].stamp < v[i].stamp)) i = j;
        if (i < 0) return -1;
        (*evicted)++;
    } else {
        (*n)++;
    }
    v[i] = (ref_entry){.key = key};
    return i;
}

static void test_tier_against_reference(void)
{
    enum { CAP = 24, OPS = 40000 };
    kv_tier t;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(kv_tier_init(&t, CAP, &e), 0);
    ref_entry ref[CAP];
    int n = 0, agree = 1;
    uint64_t clock = 0, evicted = 0, g = 7;
    for (int op = 0; op < OPS && agree; op++) {
        uint64_t key = 1 + rh_splitmix_next(&g) % 40, what = rh_splitmix_next(&g) % 5;
        int i = ref_find(ref, n, key), want, got;
        switch (what) {
        case 0:   /* pin: written when absent */
            got = kv_tier_pin(&t, key);
            if (i >= 0) want = 0;
            else want = (i = ref_take(ref, &n, CAP, key, &evicted)) < 0 ? -1 : 1;
            if (i >= 0) ref[i].pinned = 1;
            break;
        case 1:   /* unpin: most recently used */
            got = kv_tier_unpin(&t, key);
            want = i >= 0;
            if (i >= 0) ref[i].pinned = 0, ref[i].stamp = ++clock;
            break;
        case 2:   /* put: a host-only copy, most recently used */
            got = kv_tier_put(&t, key);
            if (i >= 0) want = 0;
            else want = (i = ref_take(ref, &n, CAP, key, &evicted)) < 0 ? -1 : 1;
            if (i >= 0) ref[i].pinned = 0, ref[i].stamp = ++clock;
            break;
        case 3:   /* remove */
            kv_tier_remove(&t, key);
            if (i >= 0) ref[i] = ref[--n];
            got = want = 0;
            break;
        default:  /* has */
            got = kv_tier_has(&t, key);
            want = i >= 0;
            break;
        }
        agree &= got == want && t.n_used == (uint64_t)n && t.evicted == evicted;
        if (op % 97 == 0) agree &= kv_tier_check(&t, &e) == 0;
    }
    CU_ASSERT(agree);
    for (uint64_t key = 1; key <= 40; key++) CU_ASSERT_EQUAL(kv_tier_has(&t, key), ref_find(ref, n, key) >= 0);
    CU_ASSERT(evicted > 100);   /* the LRU choice was exercised */
    CU_ASSERT_EQUAL(kv_tier_check(&t, &e), 0);
    kv_tier_destroy(&t);
}

/* ---- the core ---- */
static int32_t toks[8][1024];

static core_req *add_tokens(uint64_t id, const int32_t *tokens, uint32_t prompt, uint32_t max_new, double now)
{
    core_req_desc d = {.id = id, .prompt_len = prompt, .max_new_tokens = max_new, .prompt_tokens = tokens};
    rh_err e = {{0}};
    core_req *r = core_add(H.c, &d, now, &e);
    if (!r) printf("\n  core_add: %s\n", e.msg);
    return r;
}

static void fill_tokens(void)
{
    uint64_t g = 11;
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < 1024; i++) toks[k][i] = (int32_t)(rh_splitmix_next(&g) % 30000);
}

static void small_pool(core_config *cfg, bool hicache, core_hicache_write policy, double ratio)
{
    core_config_default(cfg);
    cfg->page_size = 16;
    cfg->max_total_tokens = 64 * 16;   /* 64 pages: one 512-token prompt and a bit */
    cfg->chunked_prefill_size = -1;
    cfg->enable_hierarchical_cache = hicache;
    cfg->hicache_write_policy = policy;
    cfg->hicache_ratio = ratio;
}

typedef struct turn2 {
    uint32_t cached, cached_host, prefill_tokens, load_tokens;
    core_stats st;
} turn2;

/* A 512-token prompt (turn 1), then three other prompts that push it out of
 * the GPU pool, then turn 2: turn 1's prompt and 100 tokens more. */
static turn2 second_turn(bool hicache, core_hicache_write policy)
{
    core_config cfg;
    small_pool(&cfg, hicache, policy, 4);
    h_new(&H, &cfg);
    double now = 0;
    CU_ASSERT_PTR_NOT_NULL(add_tokens(1, toks[0], 512, 4, now));
    h_drain(&H, &now, 100);
    for (uint64_t k = 1; k <= 3; k++) {
        CU_ASSERT_PTR_NOT_NULL(add_tokens(1 + k, toks[k], 512, 4, now));
        h_drain(&H, &now, 100);
        CU_ASSERT_EQUAL(h_check(&H), 0);
    }
    memcpy(toks[7], toks[0], 512 * sizeof toks[0][0]);
    CU_ASSERT_PTR_NOT_NULL(add_tokens(5, toks[7], 612, 4, now));
    core_batch b;
    h_step_with(&H, now, NULL, NULL, 0, &b);
    turn2 out = {.cached = H.req[5].cached, .prefill_tokens = b.prefill_tokens, .load_tokens = b.load_tokens};
    out.cached_host = H.last.hicache_load_tokens;
    CU_ASSERT_EQUAL(H.last.hicache_load_tokens, b.load_tokens);
    h_drain(&H, &now, 100);
    CU_ASSERT_EQUAL(H.req[5].tokens, 4);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_get_stats(H.c, &out.st);
    core_free(H.c);
    return out;
}

static void test_demote_then_load_back(void)
{
    fill_tokens();
    turn2 off = second_turn(false, CORE_HICACHE_WRITE_THROUGH);
    CU_ASSERT_EQUAL(off.cached, 0);            /* the GPU pool lost it */
    CU_ASSERT_EQUAL(off.prefill_tokens, 612);
    static const core_hicache_write policies[] = {CORE_HICACHE_WRITE_THROUGH, CORE_HICACHE_WRITE_BACK};
    for (int p = 0; p < 2; p++) {
        turn2 on = second_turn(true, policies[p]);
        /* All 32 pages of turn 1 come back from the host, none recomputed;
         * computed plus loaded is the work without the tier. */
        CU_ASSERT_EQUAL(on.cached, 512);
        CU_ASSERT_EQUAL(on.load_tokens, 512);
        CU_ASSERT_EQUAL(on.prefill_tokens, 100);
        CU_ASSERT_EQUAL(on.prefill_tokens + on.load_tokens, off.prefill_tokens);
        CU_ASSERT_EQUAL(on.st.host_cached_tokens, 512);
        CU_ASSERT_EQUAL(on.st.load_back_tokens, 512);
        CU_ASSERT(on.st.demoted_pages >= 32);
        if (policies[p] == CORE_HICACHE_WRITE_THROUGH) {
            CU_ASSERT_EQUAL(on.st.writeback_pages, 0);
            CU_ASSERT(on.st.backup_pages >= 4 * 32);   /* every prompt page, as it entered the tree */
        } else {
            CU_ASSERT_EQUAL(on.st.backup_pages, 0);
            CU_ASSERT(on.st.writeback_pages >= 32);     /* only what eviction took */
        }
    }
}

/* write_through_selective copies a page once a second admission reuses it:
 * a prompt seen once is lost with the GPU's copy, one seen twice comes back. */
static void test_selective_needs_a_reuse(void)
{
    fill_tokens();
    for (int reuse = 0; reuse < 2; reuse++) {
        core_config cfg;
        small_pool(&cfg, true, CORE_HICACHE_WRITE_THROUGH_SELECTIVE, 4);
        h_new(&H, &cfg);
        double now = 0;
        CU_ASSERT_PTR_NOT_NULL(add_tokens(1, toks[0], 512, 4, now));
        h_drain(&H, &now, 100);
        core_stats st;
        core_get_stats(H.c, &st);
        CU_ASSERT_EQUAL(st.backup_pages, 0);
        if (reuse) {
            CU_ASSERT_PTR_NOT_NULL(add_tokens(2, toks[0], 512, 4, now));
            h_drain(&H, &now, 100);
            CU_ASSERT_EQUAL(H.req[2].cached, 496);   /* the last page recomputes */
            core_get_stats(H.c, &st);
            /* the 31 pages it matched, and the last one, which its insert
             * found already in the tree */
            CU_ASSERT_EQUAL(st.backup_pages, 32);
        }
        for (uint64_t k = 1; k <= 3; k++) {
            CU_ASSERT_PTR_NOT_NULL(add_tokens(2 + k, toks[k], 512, 4, now));
            h_drain(&H, &now, 100);
        }
        CU_ASSERT_PTR_NOT_NULL(add_tokens(9, toks[0], 512, 4, now));
        h_drain(&H, &now, 100);
        CU_ASSERT_EQUAL(H.req[9].cached, reuse ? 496 : 0);
        CU_ASSERT_EQUAL(h_check(&H), 0);
        core_free(H.c);
    }
}

/* Many sessions over a pool that holds few: every policy and host size
 * (smaller than the GPU pool too) keeps the pool and the tier consistent
 * at every step and finishes every request; a larger tier hits more. */
static double random_sessions(bool hicache, core_hicache_write policy, double ratio, uint64_t seed)
{
    core_config cfg;
    small_pool(&cfg, hicache, policy, ratio);
    cfg.max_total_tokens = 128 * 16;
    cfg.chunked_prefill_size = 256;
    h_new(&H, &cfg);
    static int32_t prompts[400][640];
    uint64_t g = seed;
    double now = 0;
    int consistent = 1;
    for (uint64_t id = 0; id < 400; id++) {
        /* 40 sessions, each turn its session's prefix and more */
        uint32_t s = (uint32_t)(rh_splitmix_next(&g) % 40), len = 64 + (uint32_t)(rh_splitmix_next(&g) % 576);
        for (uint32_t i = 0; i < len; i++) prompts[id][i] = (int32_t)(s * 1000 + (i < 320 ? i : i + id * 7));
        CU_ASSERT_PTR_NOT_NULL(add_tokens(id, prompts[id], len, 1 + (uint32_t)(rh_splitmix_next(&g) % 24), now));
        if (id % 4 == 3)
            for (int k = 0; k < 6 && !core_idle(H.c); k++) {
                h_step(&H, now);
                now += 0.01;
                consistent &= h_check(&H) == 0;
            }
    }
    while (!core_idle(H.c) && consistent) {
        h_step(&H, now);
        now += 0.01;
        consistent &= h_check(&H) == 0;
    }
    CU_ASSERT(consistent);
    for (uint64_t id = 0; id < 400; id++) CU_ASSERT_EQUAL(H.req[id].finished, 1);
    core_stats st;
    core_get_stats(H.c, &st);
    core_free(H.c);
    return (double)st.cached_tokens / (double)st.prompt_tokens;
}

static void test_random_sessions(void)
{
    double off = random_sessions(false, CORE_HICACHE_WRITE_THROUGH, 2, 3);
    for (int p = 0; p < 3; p++) {
        double small = random_sessions(true, (core_hicache_write)p, 0.5, 3);
        double big = random_sessions(true, (core_hicache_write)p, 8, 3);
        CU_ASSERT(big > off + 0.05);
        CU_ASSERT(big >= small);
    }
}

static void test_knobs(void)
{
    core_config cfg;
    core_config_default(&cfg);
    rh_err e;
    CU_ASSERT_EQUAL(cfg.hicache_ratio, 2.0);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "enable-hierarchical-cache", NULL, &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "hicache-write-policy", "write_back", &e), 1);
    CU_ASSERT_EQUAL(cfg.hicache_write_policy, CORE_HICACHE_WRITE_BACK);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "hicache-write-policy", "lazy", &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "write_through_selective"));
    CU_ASSERT_EQUAL(core_config_validate(&cfg, &e), 0);
    cfg.preset = CORE_PRESET_VLLM;
    CU_ASSERT_EQUAL(core_config_validate(&cfg, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--scheduler sglang"));
    cfg.preset = CORE_PRESET_SGLANG;
    CU_ASSERT_EQUAL(core_config_set(&cfg, "hicache-size", "40", &e), 1);
    CU_ASSERT_EQUAL(core_config_validate(&cfg, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "bytes per token"));
    /* 40 GB of 131072-byte tokens (Llama-3-8B's KV in bf16) in 16-token pages */
    cfg.kv_bytes_per_token = 131072;
    CU_ASSERT_EQUAL(core_config_validate(&cfg, &e), 0);
    core *c = core_new(&cfg, NULL, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    core_stats st;
    core_get_stats(c, &st);
    CU_ASSERT_EQUAL(st.host_pages_total, (uint64_t)(40e9 / (131072.0 * 16)));
    core_free(c);
    CU_ASSERT_PTR_NOT_NULL(strstr(core_config_help(), "--hicache-write-policy P"));
}

void register_test_core_hicache(void)
{
    CU_pSuite s = CU_add_suite("core_hicache", NULL, NULL);
    CU_add_test(s, "the tier's LRU and pins against a reference scan", test_tier_against_reference);
    CU_add_test(s, "an evicted prefix loads back from the host: computed + loaded = the work without it",
                test_demote_then_load_back);
    CU_add_test(s, "write_through_selective copies a page on its second use", test_selective_needs_a_reuse);
    CU_add_test(s, "random sessions: consistent every step under every policy and host size",
                test_random_sessions);
    CU_add_test(s, "knobs: --enable-hierarchical-cache, --hicache-ratio/-size/-write-policy", test_knobs);
}
