/* test_core_kv.c — the KV pool and radix cache against a brute-force model.
 *
 * Random "requests" walk key chains drawn from a small alphabet (so they
 * share prefixes), match them, hold what matched, allocate the rest, insert,
 * and later release. A reference model keeps its own copy of the tree as
 * flat arrays and answers every lookup and every eviction by scanning; the
 * pool's hash table and heap must agree with it on every call, and kv_check
 * must pass after every operation. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/core/kv.h"

#define NP 96          /* pages */
#define MAXLEN 12      /* pages per request */
#define NREQ 24        /* live requests at most */

typedef struct ref_node {
    bool in_tree;
    uint64_t key;
    uint32_t parent, holders;  /* holders: requests, not counting the tree */
    uint64_t tick;             /* release order, mirrored */
    uint32_t hits;
} ref_node;

typedef struct model {
    kv_pool kv;
    ref_node n[NP];
    uint64_t tick;
    kv_order order;
    struct { uint32_t pages[MAXLEN], n; bool live; } req[NREQ];
    uint64_t rng;
    uint64_t lookups, evictions;
} model;

static uint64_t rnd(model *m)
{
    uint64_t x = (m->rng += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint32_t ref_lookup(const model *m, uint64_t key, uint32_t parent)
{
    for (uint32_t p = 0; p < NP; p++)
        if (m->n[p].in_tree && m->n[p].key == key && m->n[p].parent == parent) return p;
    return KV_NONE;
}

static bool ref_evictable(const model *m, uint32_t p)
{
    if (!m->n[p].in_tree || m->n[p].holders) return false;
    for (uint32_t q = 0; q < NP; q++)
        if (m->n[q].in_tree && m->n[q].parent == p) return false;
    return true;
}

static uint32_t ref_victim(const model *m)
{
    uint32_t best = KV_NONE;
    for (uint32_t p = 0; p < NP; p++) {
        if (!ref_evictable(m, p)) continue;
        if (best == KV_NONE) {
            best = p;
            continue;
        }
        const ref_node *a = &m->n[p], *b = &m->n[best];
        /* LRU: oldest release; LFU: fewest hits, then oldest; SLRU: the
         * pages not reused twice after their insertion first, oldest first */
        uint64_t a1 = m->order == KV_LFU ? a->hits : m->order == KV_SLRU ? a->hits >= 3 : a->tick;
        uint64_t b1 = m->order == KV_LFU ? b->hits : m->order == KV_SLRU ? b->hits >= 3 : b->tick;
        uint64_t a2 = m->order == KV_LRU ? 0 : a->tick, b2 = m->order == KV_LRU ? 0 : b->tick;
        if (a1 < b1 || (a1 == b1 && (a2 < b2 || (a2 == b2 && p < best)))) best = p;
    }
    return best;
}

static uint32_t ref_cached(const model *m)
{
    uint32_t n = 0;
    for (uint32_t p = 0; p < NP; p++) n += m->n[p].in_tree && !m->n[p].holders;
    return n;
}

static void ref_hold(model *m, uint32_t p)
{
    if (m->n[p].in_tree) m->n[p].hits++;
    m->n[p].holders++;
}

static void ref_release(model *m, uint32_t p)
{
    m->n[p].holders--;
    if (m->n[p].in_tree && !m->n[p].holders) m->n[p].tick = ++m->tick;
}

static int check(model *m)
{
    rh_err e;
    if (kv_check(&m->kv, &e) < 0) {
        printf("\n  kv_check: %s\n", e.msg);
        return -1;
    }
    for (uint32_t p = 0; p < NP; p++) {
        const kv_node *k = &m->kv.node[p];
        const ref_node *r = &m->n[p];
        if (k->in_tree != r->in_tree || k->ref != r->holders + r->in_tree || (r->in_tree && k->key != r->key)) {
            printf("\n  page %u: pool says in_tree %u ref %u, model %u/%u\n", p, k->in_tree, k->ref, r->in_tree,
                   r->holders + r->in_tree);
            return -1;
        }
    }
    if (kv_cached_pages(&m->kv) != ref_cached(m)) return -1;
    return 0;
}

static uint64_t chain_key(uint64_t prev, uint32_t sym)
{
    uint64_t b[2] = {prev, sym};
    return XXH64(b, sizeof b, 7);
}

/* One random request: match its chain, hold, allocate, insert. */
static int admit(model *m, int slot)
{
    uint32_t len = 1 + (uint32_t)(rnd(m) % MAXLEN);
    uint64_t keys[MAXLEN], prev = 0;
    for (uint32_t i = 0; i < len; i++) {
        /* few symbols near the root, more further out: shared prefixes */
        uint32_t sym = (uint32_t)(rnd(m) % (i < 3 ? 2 : 5));
        keys[i] = prev = chain_key(prev, sym);
    }
    uint32_t parent = KV_NONE, i = 0;
    for (; i < len; i++) {
        uint32_t got = kv_lookup(&m->kv, keys[i], parent), want = ref_lookup(m, keys[i], parent);
        m->lookups++;
        if (got != want) {
            printf("\n  lookup %u: pool %u, model %u\n", i, got, want);
            return -1;
        }
        if (got == KV_NONE) break;
        kv_hold(&m->kv, got);
        ref_hold(m, got);
        m->req[slot].pages[i] = got;
        parent = got;
    }
    m->req[slot].n = i;
    m->req[slot].live = true;
    uint32_t need = len - i, fresh[MAXLEN];
    uint64_t avail = kv_available(&m->kv);
    /* The model predicts which pages an allocation evicts. */
    uint32_t free_now = kv_free_pages(&m->kv), expect[NP], n_expect = 0;
    bool ok = need <= avail;
    if (ok && need > free_now) {
        model *shadow = malloc(sizeof *shadow);
        memcpy(shadow->n, m->n, sizeof m->n);
        shadow->order = m->order;
        for (uint32_t k = 0; k < need - free_now; k++) {
            uint32_t v = ref_victim(shadow);
            if (v == KV_NONE) break;
            expect[n_expect++] = v;
            shadow->n[v].in_tree = false;
        }
        free(shadow);
    }
    int rc = kv_alloc(&m->kv, need, fresh);
    if ((rc == 0) != ok) {
        printf("\n  kv_alloc(%u) = %d with %llu available\n", need, rc, (unsigned long long)avail);
        return -1;
    }
    if (rc < 0) return 0;   /* partial match stays held; the request keeps what it has */
    for (uint32_t k = 0; k < n_expect; k++) {
        if (m->kv.node[expect[k]].in_tree) {
            printf("\n  page %u should have been evicted (order %d)\n", expect[k], (int)m->order);
            return -1;
        }
        m->n[expect[k]].in_tree = false;
        m->evictions++;
    }
    for (uint32_t k = 0; k < need; k++) {
        uint32_t p = fresh[k];
        if (m->n[p].in_tree || m->n[p].holders) {
            printf("\n  kv_alloc handed out page %u that is still in use\n", p);
            return -1;
        }
        m->n[p].holders = 1;
        m->req[slot].pages[i + k] = p;
        if (kv_insert(&m->kv, p, keys[i + k], parent) < 0) return -1;
        m->n[p] = (ref_node){.in_tree = true, .key = keys[i + k], .parent = parent, .holders = 1, .hits = 1};
        parent = p;
    }
    m->req[slot].n = len;
    return 0;
}

static void release(model *m, int slot)
{
    /* Leaf first, as requests do not; order must not matter to the pool. */
    for (uint32_t i = m->req[slot].n; i-- > 0;) {
        kv_release(&m->kv, m->req[slot].pages[i]);
        ref_release(m, m->req[slot].pages[i]);
    }
    m->req[slot].live = false;
    m->req[slot].n = 0;
}

static void run_model(kv_order order, uint64_t seed, int ops)
{
    static model M;
    model *m = &M;
    memset(m, 0, sizeof *m);
    m->order = order;
    m->rng = seed;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(kv_init(&m->kv, NP, 16, order, &e), 0);
    for (uint32_t p = 0; p < NP; p++) m->n[p].parent = KV_NONE;
    int failed = 0;
    for (int op = 0; op < ops && !failed; op++) {
        int slot = (int)(rnd(m) % NREQ);
        if (m->req[slot].live) release(m, slot);
        else if (admit(m, slot) < 0) failed = 1;
        if (!failed && check(m) < 0) failed = 1;
        if (failed) printf("  (op %d, order %d)\n", op, (int)order);
    }
    CU_ASSERT_FALSE(failed);
    CU_ASSERT(m->evictions > 100);   /* the pool really was under pressure */
    kv_destroy(&m->kv);
}

static void test_matches_model(void)
{
    run_model(KV_LRU, 1, 20000);
    run_model(KV_LFU, 2, 20000);
    run_model(KV_SLRU, 3, 20000);
}

/* Two chains A and B of two pages. B is matched `reuses` times more, then
 * released first. LRU evicts B's leaf (released earlier); LFU evicts A's
 * (fewer hits); SLRU evicts A's when B was reused twice (protected), else
 * B's (both probationary: the older release). */
static void lru_lfu_case(kv_order order, int reuses, bool expect_b_first)
{
    kv_pool kv;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(kv_init(&kv, 4, 16, order, &e), 0);
    uint32_t a[2], b[2];
    CU_ASSERT_EQUAL(kv_alloc(&kv, 2, a), 0);
    CU_ASSERT_EQUAL(kv_alloc(&kv, 2, b), 0);
    kv_insert(&kv, a[0], 100, KV_NONE);
    kv_insert(&kv, a[1], 101, a[0]);
    kv_insert(&kv, b[0], 200, KV_NONE);
    kv_insert(&kv, b[1], 201, b[0]);
    for (int k = 0; k < reuses; k++) {   /* more requests match B and leave */
        kv_hold(&kv, b[0]);
        kv_hold(&kv, b[1]);
        kv_release(&kv, b[1]);
        kv_release(&kv, b[0]);
    }
    kv_release(&kv, b[1]);
    kv_release(&kv, b[0]);
    kv_release(&kv, a[1]);
    kv_release(&kv, a[0]);
    CU_ASSERT_EQUAL(kv_cached_pages(&kv), 4);
    CU_ASSERT_EQUAL(kv_free_pages(&kv), 0);
    uint32_t got;
    CU_ASSERT_EQUAL(kv_alloc(&kv, 1, &got), 0);
    CU_ASSERT_EQUAL(got, expect_b_first ? b[1] : a[1]);
    CU_ASSERT_EQUAL(kv_lookup(&kv, expect_b_first ? 201 : 101, expect_b_first ? b[0] : a[0]), KV_NONE);
    CU_ASSERT_NOT_EQUAL(kv_lookup(&kv, expect_b_first ? 101 : 201, expect_b_first ? a[0] : b[0]), KV_NONE);
    /* A parent goes only after its child: two more evict the same chain's root next. */
    uint32_t more[2];
    CU_ASSERT_EQUAL(kv_alloc(&kv, 1, more), 0);
    CU_ASSERT_EQUAL(more[0], expect_b_first ? b[0] : a[0]);
    CU_ASSERT_EQUAL(kv_check(&kv, &e), 0);
    CU_ASSERT_EQUAL(kv_alloc(&kv, 3, more), -1);   /* only 2 left: nothing changes */
    CU_ASSERT_EQUAL(kv_cached_pages(&kv), 2);
    kv_destroy(&kv);
}

static void test_lru_lfu(void)
{
    lru_lfu_case(KV_LRU, 2, true);
    lru_lfu_case(KV_LFU, 2, false);
    lru_lfu_case(KV_SLRU, 2, false);
    lru_lfu_case(KV_LFU, 1, false);
    lru_lfu_case(KV_SLRU, 1, true);
}

/* A key already in the tree under another parent is a collision, not a match;
 * a run splits where a new child diverges inside it. */
static void test_parent_checked(void)
{
    kv_pool kv;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(kv_init(&kv, 8, 4, KV_LRU, &e), 0);
    uint32_t p[5];
    kv_alloc(&kv, 5, p);
    CU_ASSERT_EQUAL(kv_insert(&kv, p[0], 1, KV_NONE), 0);
    CU_ASSERT_EQUAL(kv_insert(&kv, p[1], 2, p[0]), 0);
    CU_ASSERT_EQUAL(kv_insert(&kv, p[2], 3, p[1]), 0);
    CU_ASSERT_EQUAL(kv_lookup(&kv, 2, p[0]), p[1]);
    CU_ASSERT_EQUAL(kv_lookup(&kv, 2, KV_NONE), KV_NONE);
    CU_ASSERT_EQUAL(kv_lookup(&kv, 3, p[0]), KV_NONE);
    CU_ASSERT_EQUAL(kv_insert(&kv, p[3], 1, KV_NONE), -1);   /* the root's child already has key 1 */
    CU_ASSERT_EQUAL(kv_insert(&kv, p[3], 2, p[0]), -1);      /* p[0]'s child already has key 2 */
    /* A third page diverging after p[0] splits the run 1-2-3 there. */
    CU_ASSERT_EQUAL(kv_insert(&kv, p[3], 4, p[0]), 0);
    CU_ASSERT_EQUAL(kv_lookup(&kv, 2, p[0]), p[1]);
    CU_ASSERT_EQUAL(kv_lookup(&kv, 4, p[0]), p[3]);
    CU_ASSERT_EQUAL(kv_lookup(&kv, 3, p[1]), p[2]);
    CU_ASSERT_EQUAL(kv.node[p[0]].nchild, 2);
    CU_ASSERT_EQUAL(kv_check(&kv, &e), 0);
    CU_ASSERT_EQUAL(kv_insert(&kv, p[4], 5, p[3]), 0);      /* and the new branch grows as a run */
    CU_ASSERT_EQUAL(kv.node[p[3]].next, p[4]);
    CU_ASSERT_EQUAL(kv_check(&kv, &e), 0);
    kv_destroy(&kv);
    CU_ASSERT_EQUAL(kv_init(&kv, 0, 4, KV_LRU, &e), -1);
    CU_ASSERT(strstr(e.msg, "KV pool") != NULL);
}

/* A leaf's parent that becomes a leaf goes next only when it is next in
 * order: here a0 was released (by its second holder) after b0, so freeing
 * two pages takes a1 then b0, and a0 stays. */
static void test_parent_waits_its_turn(void)
{
    kv_pool kv;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(kv_init(&kv, 3, 16, KV_LRU, &e), 0);
    uint32_t a[2], b;
    CU_ASSERT_EQUAL(kv_alloc(&kv, 2, a), 0);
    kv_insert(&kv, a[0], 10, KV_NONE);
    kv_insert(&kv, a[1], 11, a[0]);
    kv_hold(&kv, a[0]);        /* a second request shares a0 */
    kv_release(&kv, a[0]);
    kv_release(&kv, a[1]);     /* a1: released first */
    CU_ASSERT_EQUAL(kv_alloc(&kv, 1, &b), 0);
    kv_insert(&kv, b, 20, KV_NONE);
    kv_release(&kv, b);        /* b0: second */
    kv_release(&kv, a[0]);     /* a0: last, by its second holder */
    uint32_t got[2];
    CU_ASSERT_EQUAL(kv_alloc(&kv, 2, got), 0);
    CU_ASSERT_EQUAL(kv_lookup(&kv, 10, KV_NONE), a[0]);
    CU_ASSERT_EQUAL(kv_lookup(&kv, 11, a[0]), KV_NONE);
    CU_ASSERT_EQUAL(kv_lookup(&kv, 20, KV_NONE), KV_NONE);
    CU_ASSERT_EQUAL(kv.evicted, 2);
    CU_ASSERT_EQUAL(kv_check(&kv, &e), 0);
    kv_destroy(&kv);
}

/* Pages go out 0, 1, 2, ... and a returned page before any fresh one, the
 * order a pool filled up front would give (kv_init touches no page). */
static void test_hand_out_order(void)
{
    kv_pool kv;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(kv_init(&kv, 6, 16, KV_LRU, &e), 0);
    uint32_t a[3], b[2];
    CU_ASSERT_EQUAL(kv_alloc(&kv, 3, a), 0);
    CU_ASSERT(a[0] == 0 && a[1] == 1 && a[2] == 2);
    kv_release(&kv, a[1]);
    CU_ASSERT_EQUAL(kv_free_pages(&kv), 4);
    CU_ASSERT_EQUAL(kv_alloc(&kv, 2, b), 0);
    CU_ASSERT(b[0] == 1 && b[1] == 3);
    CU_ASSERT_EQUAL(kv_check(&kv, &e), 0);
    CU_ASSERT_EQUAL(kv_alloc(&kv, 3, a), -1);   /* 2 left */
    CU_ASSERT_EQUAL(kv_alloc(&kv, 2, a), 0);
    CU_ASSERT(a[0] == 4 && a[1] == 5);
    CU_ASSERT_EQUAL(kv_free_pages(&kv), 0);
    CU_ASSERT_EQUAL(kv_check(&kv, &e), 0);
    kv_destroy(&kv);
}

void register_test_core_kv(void)
{
    CU_pSuite s = CU_add_suite("core_kv", NULL, NULL);
    CU_add_test(s, "pool and radix agree with a brute-force model", test_matches_model);
    CU_add_test(s, "lru, lfu and slru evict the expected leaf", test_lru_lfu);
    CU_add_test(s, "a child is found only under its parent", test_parent_checked);
    CU_add_test(s, "a parent that becomes a leaf waits its turn", test_parent_waits_its_turn);
    CU_add_test(s, "pages go out in order, returned ones first", test_hand_out_order);
}
