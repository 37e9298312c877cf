/* router.c — the router core; see router.h for each policy (lua's call in
 * router_lua.c). */
#include "engine/router/router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"
#include "engine/core/breaker.h"
#include "engine/router/router_lua.h"
#include "util/hash.h"
#include "util/hashmap.h"
#include "util/rng.h"

static const char *const NAMES[ROUTER_N_POLICIES] = {"round-robin", "least-outstanding", "least-kv", "power-of-two",
                                                     "cache-aware", "lua"};

int router_policy_parse(const char *name)
{
    for (int i = 0; i < ROUTER_N_POLICIES; i++)
        if (!strcmp(name, NAMES[i])) return i;
    return -1;
}

const char *router_policy_name(router_policy p)
{
    return p < ROUTER_N_POLICIES ? NAMES[p] : "?";
}

void router_config_default(router_config *c)
{
    memset(c, 0, sizeof *c);
    c->policy = ROUTER_ROUND_ROBIN;
    c->n_replicas = 1;
    c->balance_abs = 32;
    c->balance_rel = 1.0001;
    c->cache_threshold = 0.5;
    c->max_tree_blocks = 65536;
    core_config core;   /* one set of defaults for every Lua hook */
    core_config_default(&core);
    c->lua_max_instructions = core.policy_max_instructions;
    c->lua_max_memory = core.policy_max_memory;
    c->lua_max_seconds = core.policy_max_seconds;
    c->lua_max_failures = core.policy_max_failures;
}

/* A replica's approximate prefix tree: block hash -> when last routed. */
typedef struct tree {
    rh_map64 blocks;
} tree;

struct router {
    router_config cfg;
    uint32_t next;              /* round-robin's cursor */
    rh_rng rng;
    uint64_t tick;
    tree *trees;                /* [n_replicas], cache-aware and lua only */
    router_lua *lua;
    uint32_t *match;            /* lua: scratch, [n_replicas] */
    uint64_t *sizes;
    uint64_t seq, errors;
    breaker brk;                /* lua: around the script */
    char error[512];            /* the first failed call's message */
};

static bool keeps_trees(router_policy p)
{
    return p == ROUTER_CACHE_AWARE || p == ROUTER_LUA;
}

/* The same ranges as the scheduler's --policy-max-* (engine/core/config.c). */
static int check_lua(const router_config *c, rh_err *e)
{
    if (!c->lua_script) return rh_fail(e, "router: the lua policy needs a script (route(request, replicas))");
    if (c->lua_max_instructions < 1000 || c->lua_max_instructions > (1ull << 50))
        return rh_fail(e, "router: lua_max_instructions %llu must be 1000..2^50",
                       (unsigned long long)c->lua_max_instructions);
    if (c->lua_max_memory < (1u << 20) || c->lua_max_memory > (1ull << 40))
        return rh_fail(e, "router: lua_max_memory %llu must be 1 MiB..1 TiB (1048576..1099511627776 bytes)",
                       (unsigned long long)c->lua_max_memory);
    if (!(c->lua_max_seconds >= 0.001 && c->lua_max_seconds <= 3600))
        return rh_fail(e, "router: lua_max_seconds %g must be 0.001..3600", c->lua_max_seconds);
    return 0;
}

router *router_new(const router_config *c, rh_err *e)
{
    if (c->policy >= ROUTER_N_POLICIES) return rh_fail(e, "router: unknown policy %d", (int)c->policy), NULL;
    if (c->n_replicas == 0) return rh_fail(e, "router: no replica to route to"), NULL;
    if (!(c->balance_rel >= 1)) return rh_fail(e, "router: balance_rel %g must be at least 1", c->balance_rel), NULL;
    if (!(c->balance_abs >= 0)) return rh_fail(e, "router: balance_abs %g must be at least 0", c->balance_abs), NULL;
    if (!(c->cache_threshold >= 0 && c->cache_threshold <= 1))
        return rh_fail(e, "router: cache_threshold %g must be in [0, 1]", c->cache_threshold), NULL;
    if (keeps_trees(c->policy) && c->max_tree_blocks < 2)
        return rh_fail(e, "router: max_tree_blocks must be at least 2"), NULL;
    if (c->policy == ROUTER_LUA && check_lua(c, e) < 0) return NULL;
    router *r = calloc(1, sizeof *r);
    if (!r) return rh_fail(e, "router: out of memory"), NULL;
    r->cfg = *c;
    r->cfg.lua_script = NULL;   /* read once, here; the caller's string may go */
    rh_rng_seed(&r->rng, c->seed);
    if (keeps_trees(c->policy) && !(r->trees = calloc(c->n_replicas, sizeof *r->trees))) goto oom;
    if (c->policy == ROUTER_LUA) {
        if (!(r->match = calloc(c->n_replicas, sizeof *r->match)) ||
            !(r->sizes = calloc(c->n_replicas, sizeof *r->sizes)))
            goto oom;
        if (!(r->lua = rtlua_open(c, e))) {
            router_free(r);
            return NULL;
        }
        breaker_init(&r->brk, c->lua_max_failures);
    }
    return r;
oom:
    router_free(r);
    return rh_fail(e, "router: out of memory"), NULL;
}

void router_free(router *r)
{
    if (!r) return;
    for (uint32_t i = 0; r->trees && i < r->cfg.n_replicas; i++) rh_map64_free(&r->trees[i].blocks);
    free(r->trees);
    rtlua_close(r->lua);
    free(r->match);
    free(r->sizes);
    free(r);
}

uint64_t router_errors(const router *r)
{
    return r->errors;
}

const char *router_error(const router *r)
{
    return r->error[0] ? r->error : NULL;
}

uint64_t router_trips(const router *r) { return r->brk.trips; }
uint64_t router_skipped(const router *r) { return r->brk.skipped; }
uint64_t router_backoff(const router *r) { return breaker_backoff(&r->brk); }

uint32_t router_tree_match(const router *r, uint32_t replica, const uint64_t *hashes, uint32_t n_hashes)
{
    if (!r->trees || replica >= r->cfg.n_replicas) return 0;
    const rh_map64 *m = &r->trees[replica].blocks;
    uint32_t k = 0;
    /* chained hashes: the first miss ends the shared prefix */
    while (k < n_hashes && rh_map64_get(m, hashes[k], NULL)) k++;
    return k;
}

uint64_t router_tree_size(const router *r, uint32_t replica)
{
    return r->trees && replica < r->cfg.n_replicas ? r->trees[replica].blocks.n : 0;
}

static int by_tick(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Past the bound, the tree keeps its most recently routed half: one rebuild
 * per max/2 inserts, so the cost per request stays flat. */
static void trim(tree *t, uint64_t max)
{
    rh_map64 *m = &t->blocks;
    if (m->n <= max) return;
    uint64_t *ticks = malloc(m->n * sizeof *ticks);
    if (!ticks) return;   /* out of memory: the tree grows instead */
    size_t k = 0;
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i]) ticks[k++] = m->vals[i];
    qsort(ticks, k, sizeof *ticks, by_tick);
    uint64_t cut = ticks[k - max / 2];
    free(ticks);
    rh_map64 kept = {0};
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i] && m->vals[i] >= cut && rh_map64_put(&kept, m->keys[i], m->vals[i]) < 0) {
            rh_map64_free(&kept);
            return;
        }
    rh_map64_free(m);
    *m = kept;
}

/* SGLang's router inserts every request's text into the tree of the
 * worker it picked, so a worker's tree grows with each request it is sent
 * and "the smallest tree" takes turns among equally loaded workers. A
 * request without block hashes (a trace of lengths only) still takes its
 * place there: one block of its own, which nothing else can match. */
static void remember(router *r, uint32_t replica, const uint64_t *hashes, uint32_t n_hashes)
{
    tree *t = &r->trees[replica];
    uint64_t now = ++r->tick;
    if (!n_hashes) {
        uint64_t own = rh_hash64(now);
        rh_map64_put(&t->blocks, own, now);
    }
    for (uint32_t i = 0; i < n_hashes; i++)
        if (rh_map64_put(&t->blocks, hashes[i], now) < 0) break;   /* out of memory: the tree stays smaller */
    trim(t, r->cfg.max_tree_blocks);
}

static int least(const router_replica *st, uint32_t n, int by_kv)
{
    int best = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (!st[i].healthy) continue;
        if (best < 0 || (by_kv ? st[i].kv_use < st[best].kv_use : st[i].outstanding < st[best].outstanding))
            best = (int)i;
    }
    return best;
}

static int cache_aware(router *r, const router_replica *st, const uint64_t *hashes, uint32_t n_hashes)
{
    uint32_t n = r->cfg.n_replicas;
    int lo = least(st, n, 0);
    if (lo < 0) return -1;
    uint32_t most = 0;
    for (uint32_t i = 0; i < n; i++)
        if (st[i].healthy && st[i].outstanding > most) most = st[i].outstanding;
    double least_load = st[lo].outstanding;
    bool unbalanced = most - least_load > r->cfg.balance_abs && most > least_load * r->cfg.balance_rel;
    int pick = lo;
    if (!unbalanced) {
        int best = -1, roomy = -1;
        uint32_t best_match = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (!st[i].healthy) continue;
            uint32_t m = router_tree_match(r, i, hashes, n_hashes);
            if (best < 0 || m > best_match) {
                best = (int)i;
                best_match = m;
            }
            if (roomy < 0 || r->trees[i].blocks.n < r->trees[roomy].blocks.n) roomy = (int)i;
        }
        double share = n_hashes ? (double)best_match / n_hashes : 0;
        pick = share > r->cfg.cache_threshold ? best : roomy;
    }
    remember(r, (uint32_t)pick, hashes, n_hashes);
    return pick;
}

/* The script's pick; on any error least-outstanding's, counted. Either is
 * remembered in the trees, so match means what cache-aware's does. */
static int lua_pick(router *r, const router_replica *st, const uint64_t *hashes, uint32_t n_hashes)
{
    uint32_t n = r->cfg.n_replicas;
    int lo = least(st, n, 0);
    if (lo < 0) return -1;
    if (breaker_skip(&r->brk)) {
        remember(r, (uint32_t)lo, hashes, n_hashes);
        return lo;
    }
    for (uint32_t i = 0; i < n; i++) {
        r->match[i] = router_tree_match(r, i, hashes, n_hashes);
        r->sizes[i] = r->trees[i].blocks.n;
    }
    rtlua_ask a = {.st = st, .match = r->match, .tree_size = r->sizes, .n_replicas = n, .blocks = n_hashes,
                   .seq = ++r->seq};
    char err[512];
    int pick = rtlua_route(r->lua, &a, err, sizeof err);
    breaker_done(&r->brk, pick < 0);
    if (pick < 0) {
        r->errors++;
        if (!r->error[0]) snprintf(r->error, sizeof r->error, "%s", err);
        pick = lo;
    }
    remember(r, (uint32_t)pick, hashes, n_hashes);
    return pick;
}

int router_pick(router *r, const router_replica *st, const uint64_t *hashes, uint32_t n_hashes)
{
    uint32_t n = r->cfg.n_replicas;
    switch (r->cfg.policy) {
    case ROUTER_ROUND_ROBIN:
        for (uint32_t k = 0; k < n; k++) {
            uint32_t i = (r->next + k) % n;
            if (!st[i].healthy) continue;
            r->next = (i + 1) % n;
            return (int)i;
        }
        return -1;
    case ROUTER_LEAST_OUTSTANDING: return least(st, n, 0);
    case ROUTER_LEAST_KV: return least(st, n, 1);
    case ROUTER_POWER_OF_TWO: {
        uint32_t healthy = 0;
        for (uint32_t i = 0; i < n; i++) healthy += st[i].healthy;
        if (!healthy) return -1;
        /* the a-th and b-th healthy replicas, a != b when two exist */
        uint32_t a = (uint32_t)rh_rng_below(&r->rng, healthy), b = a;
        if (healthy > 1) {
            b = (uint32_t)rh_rng_below(&r->rng, healthy - 1);
            if (b >= a) b++;
        }
        int ia = -1, ib = -1;
        for (uint32_t i = 0, k = 0; i < n; i++) {
            if (!st[i].healthy) continue;
            if (k == a) ia = (int)i;
            if (k == b) ib = (int)i;
            k++;
        }
        return st[ib].outstanding < st[ia].outstanding ? ib : ia;
    }
    case ROUTER_CACHE_AWARE: return cache_aware(r, st, hashes, n_hashes);
    case ROUTER_LUA: return lua_pick(r, st, hashes, n_hashes);
    default: return -1;
    }
}
