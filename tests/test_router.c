/* test_router.c — the router core against hand-made states: each policy's
 * choice, unhealthy replicas skipped, the same seed the same choices,
 * cache-aware's prefix affinity against its balance rule (SGLang's), and
 * its trees bounded. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "engine/router/router.h"

static router *make(router_policy p, uint32_t n, uint64_t seed)
{
    router_config c;
    router_config_default(&c);
    c.policy = p;
    c.n_replicas = n;
    c.seed = seed;
    rh_err e;
    router *r = router_new(&c, &e);
    if (!r) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(r != NULL);
    return r;
}

static void all_healthy(router_replica *st, uint32_t n)
{
    memset(st, 0, n * sizeof *st);
    for (uint32_t i = 0; i < n; i++) st[i].healthy = true;
}

static void test_simple_policies(void)
{
    router_replica st[4];
    all_healthy(st, 4);
    router *r = make(ROUTER_ROUND_ROBIN, 4, 0);
    int want[] = {0, 1, 2, 3, 0, 1};
    for (int k = 0; k < 6; k++) CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), want[k]);
    st[2].healthy = false;   /* skipped, the turn goes on */
    CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), 3);
    CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), 0);
    CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), 1);
    CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), 3);
    for (int i = 0; i < 4; i++) st[i].healthy = false;
    CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), -1);
    router_free(r);

    all_healthy(st, 4);
    st[0].outstanding = 5, st[1].outstanding = 2, st[2].outstanding = 2, st[3].outstanding = 7;
    st[0].kv_use = 0.9, st[1].kv_use = 0.5, st[2].kv_use = 0.7, st[3].kv_use = 0.1;
    r = make(ROUTER_LEAST_OUTSTANDING, 4, 0);
    CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), 1);   /* ties: the lowest index */
    st[1].healthy = false;
    CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), 2);
    router_free(r);
    r = make(ROUTER_LEAST_KV, 4, 0);
    CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), 3);
    router_free(r);
}

/* Power of two: never the busier of the pair it drew, so never the busiest
 * of all; over many draws every other replica serves; the seed repeats. */
static void test_power_of_two(void)
{
    router_replica st[5];
    all_healthy(st, 5);
    for (int i = 0; i < 5; i++) st[i].outstanding = (uint32_t)(10 * i);
    router *a = make(ROUTER_POWER_OF_TWO, 5, 9), *b = make(ROUTER_POWER_OF_TWO, 5, 9), *c = make(ROUTER_POWER_OF_TWO, 5, 10);
    int count[5] = {0}, same = 1, differs = 0;
    for (int k = 0; k < 2000; k++) {
        int x = router_pick(a, st, NULL, 0), y = router_pick(b, st, NULL, 0), z = router_pick(c, st, NULL, 0);
        CU_ASSERT_FATAL(x >= 0 && x < 5);
        count[x]++;
        same &= x == y;
        differs |= x != z;
    }
    CU_ASSERT_EQUAL(count[4], 0);
    for (int i = 0; i < 4; i++) CU_ASSERT(count[i] > 0);
    /* replica i wins the pairs with a busier partner: 4, 3, 2, 1 of the 10 pairs */
    CU_ASSERT(count[0] > count[1] && count[1] > count[2] && count[2] > count[3]);
    CU_ASSERT(same);
    CU_ASSERT(differs);
    /* one healthy replica: always it */
    for (int i = 0; i < 5; i++) st[i].healthy = i == 3;
    CU_ASSERT_EQUAL(router_pick(a, st, NULL, 0), 3);
    router_free(a);
    router_free(b);
    router_free(c);
}

/* Cache-aware: a prompt goes where its prefix went; a new prefix goes to
 * the emptiest tree; an unbalanced load overrides affinity. */
static void test_cache_aware(void)
{
    router_replica st[3];
    all_healthy(st, 3);
    router *r = make(ROUTER_CACHE_AWARE, 3, 0);
    uint64_t sys_a[8] = {11, 12, 13, 14, 15, 16, 17, 18}, sys_b[8] = {21, 22, 23, 24, 25, 26, 27, 28};
    int ra = router_pick(r, st, sys_a, 8);
    CU_ASSERT_EQUAL(ra, 0);   /* every tree empty: the first smallest */
    int rb = router_pick(r, st, sys_b, 8);
    CU_ASSERT_EQUAL(rb, 1);   /* no match: the emptiest tree */
    /* the same system prompt with its own question: 6 of 8 blocks shared */
    uint64_t q_a[8] = {11, 12, 13, 14, 15, 16, 91, 92}, q_b[8] = {21, 22, 23, 24, 25, 26, 93, 94};
    CU_ASSERT_EQUAL(router_pick(r, st, q_a, 8), ra);
    CU_ASSERT_EQUAL(router_pick(r, st, q_b, 8), rb);
    CU_ASSERT_EQUAL(router_tree_match(r, (uint32_t)ra, q_a, 8), 8);
    /* a match below the threshold (2 of 8): the emptiest tree instead */
    uint64_t weak[8] = {11, 12, 71, 72, 73, 74, 75, 76};
    CU_ASSERT_EQUAL(router_pick(r, st, weak, 8), 2);
    /* unbalanced: replica 0 holds 100 more than the least, so the least
     * loaded serves despite the affinity */
    st[0].outstanding = 140, st[1].outstanding = 40, st[2].outstanding = 100;
    CU_ASSERT_EQUAL(router_pick(r, st, q_a, 8), 1);
    /* balanced again (within 32): affinity */
    st[0].outstanding = 60, st[1].outstanding = 40, st[2].outstanding = 50;
    CU_ASSERT_EQUAL(router_pick(r, st, q_a, 8), 0);
    router_free(r);
}

/* Requests without block hashes (a trace of lengths only): SGLang's router
 * still inserts each one's text into its worker's tree, so among equally
 * loaded workers the smallest tree takes turns; sending every one to the
 * first would leave the others idle until the balance rule trips. */
static void test_cache_aware_without_hashes(void)
{
    router_replica st[3];
    all_healthy(st, 3);
    router *r = make(ROUTER_CACHE_AWARE, 3, 0);
    for (int i = 0; i < 9; i++) CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), i % 3);
    for (uint32_t k = 0; k < 3; k++) CU_ASSERT_EQUAL(router_tree_size(r, k), 3);
    router_free(r);
}

/* The balance rule's edge: a load gap of exactly balance_abs (32) is still
 * balanced (SGLang: unbalanced only when most - least > abs), so the prefix
 * match wins; one request more and the least loaded serves. Only the
 * absolute gap decides here: the relative test (72 > 40 * 1.0001) holds
 * on both sides. */
static void test_cache_aware_balance_edge(void)
{
    router_replica st[3];
    all_healthy(st, 3);
    router *r = make(ROUTER_CACHE_AWARE, 3, 0);
    uint64_t sys_a[8] = {11, 12, 13, 14, 15, 16, 17, 18}, sys_b[8] = {21, 22, 23, 24, 25, 26, 27, 28};
    CU_ASSERT_EQUAL(router_pick(r, st, sys_a, 8), 0);
    CU_ASSERT_EQUAL(router_pick(r, st, sys_b, 8), 1);
    /* replica 1 holds sys_b and is the busiest, by exactly 32 */
    uint64_t q_b[8] = {21, 22, 23, 24, 25, 26, 93, 94};
    st[0].outstanding = 40, st[1].outstanding = 72, st[2].outstanding = 40;
    CU_ASSERT_EQUAL(router_pick(r, st, q_b, 8), 1);
    st[1].outstanding = 73;   /* 33 apart: unbalanced, the least loaded (lowest index) */
    CU_ASSERT_EQUAL(router_pick(r, st, q_b, 8), 0);
    router_free(r);
}

/* Power of two draws two distinct replicas. Loaded 5, 0, 10, the idle one
 * is in two of the three pairs, so it serves 2/3 of the picks, the one
 * loaded 5 the other 1/3 (its pair with the busiest), the busiest none. A
 * draw that can take one replica twice and still never the busiest alone
 * (the second draw skipping past the first only when above it) gives the
 * idle one 1/2; two independent draws give it 5/9. Over 3,000 picks 2/3 is
 * 2,000 (binomial sd 26), 1/2 is 1,500 and 5/9 1,667: each seed's count is
 * exact (seeds 1..10 give 1,948..2,037), all inside 2,000 +- 150, a bound
 * 7 sd above 1,667. */
static void test_power_of_two_distinct(void)
{
    router_replica st[3];
    all_healthy(st, 3);
    st[0].outstanding = 5, st[1].outstanding = 0, st[2].outstanding = 10;
    for (uint64_t seed = 1; seed <= 10; seed++) {
        router *r = make(ROUTER_POWER_OF_TWO, 3, seed);
        int count[3] = {0};
        for (int k = 0; k < 3000; k++) {
            int x = router_pick(r, st, NULL, 0);
            CU_ASSERT_FATAL(x >= 0 && x < 3);
            count[x]++;
        }
        if (count[1] <= 1850 || count[1] >= 2150)
            printf("\n  seed %llu: the idle replica served %d of 3000 (2/3 is 2000)\n", (unsigned long long)seed,
                   count[1]);
        CU_ASSERT(count[1] > 1850 && count[1] < 2150);
        CU_ASSERT(count[0] > 850 && count[0] < 1150);
        CU_ASSERT_EQUAL(count[2], 0);
        router_free(r);
    }
}

static void test_tree_bound_and_config(void)
{
    router_config c;
    router_config_default(&c);
    c.policy = ROUTER_CACHE_AWARE;
    c.n_replicas = 1;
    c.max_tree_blocks = 100;
    rh_err e;
    router *r = router_new(&c, &e);
    CU_ASSERT_FATAL(r != NULL);
    router_replica st = {.healthy = true};
    uint64_t h[10];
    for (uint64_t k = 0; k < 100; k++) {
        for (int i = 0; i < 10; i++) h[i] = 1000 * k + (uint64_t)i + 1;
        router_pick(r, &st, h, 10);
        CU_ASSERT(router_tree_size(r, 0) <= 100);
    }
    /* the latest prompt is kept, the first long gone */
    CU_ASSERT_EQUAL(router_tree_match(r, 0, h, 10), 10);
    uint64_t first[10];
    for (int i = 0; i < 10; i++) first[i] = (uint64_t)i + 1;
    CU_ASSERT_EQUAL(router_tree_match(r, 0, first, 10), 0);
    router_free(r);

    router_config bad = c;
    bad.n_replicas = 0;
    CU_ASSERT(router_new(&bad, &e) == NULL && strstr(e.msg, "no replica"));
    bad = c;
    bad.balance_rel = 0.5;
    CU_ASSERT(router_new(&bad, &e) == NULL && strstr(e.msg, "balance_rel"));
    bad = c;
    bad.cache_threshold = 2;
    CU_ASSERT(router_new(&bad, &e) == NULL && strstr(e.msg, "cache_threshold"));
    CU_ASSERT_EQUAL(router_policy_parse("cache-aware"), ROUTER_CACHE_AWARE);
    CU_ASSERT_EQUAL(router_policy_parse("random"), -1);
    CU_ASSERT_STRING_EQUAL(router_policy_name(ROUTER_POWER_OF_TWO), "power-of-two");
}

void register_test_router(void)
{
    CU_pSuite s = CU_add_suite("router", NULL, NULL);
    CU_add_test(s, "round-robin, least outstanding, least KV; unhealthy skipped", test_simple_policies);
    CU_add_test(s, "power of two: never the busier of a pair; the seed repeats", test_power_of_two);
    CU_add_test(s, "cache-aware: affinity, the emptiest tree, the balance rule", test_cache_aware);
    CU_add_test(s, "cache-aware: a load gap of exactly balance_abs is balanced", test_cache_aware_balance_edge);
    CU_add_test(s, "cache-aware without block hashes: the smallest tree takes turns", test_cache_aware_without_hashes);
    CU_add_test(s, "power of two: two distinct replicas, the idle one of three 2/3", test_power_of_two_distinct);
    CU_add_test(s, "cache-aware trees stay bounded; bad configurations refused", test_tree_bound_and_config);
}
