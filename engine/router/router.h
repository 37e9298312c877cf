/* router.h — the router core: which replica serves a request. No I/O and
 * no clock, as engine/core: the caller reports every replica's state and
 * asks; the simulator drives it on its virtual clock, a real router on the
 * wall clock, so a policy simulated is the policy deployed. Deterministic
 * for a seed.
 *
 * Policies:
 *   round-robin        replicas in turn, skipping unhealthy ones;
 *   least-outstanding  the fewest requests sent and not finished (ties: the
 *                      lowest index);
 *   least-kv           the lowest KV-cache use the replica reports;
 *   power-of-two       two distinct healthy replicas drawn at random, the
 *                      one with fewer outstanding requests;
 *   cache-aware        SGLang's router: when the load is balanced (the most
 *                      and least outstanding differ by at most
 *                      balance_abs, or the most is at most balance_rel times
 *                      the least), the replica whose prefix tree matches
 *                      the most of the prompt, if that share exceeds
 *                      cache_threshold, else the one whose tree is smallest
 *                      (the most room); when unbalanced, the least
 *                      outstanding. Each replica's tree is approximate: the
 *                      chained block hashes routed to it, the least
 *                      recently routed dropped past max_tree_blocks.
 *   lua                a script's route(request, replicas) returns the
 *                      1-based index of a healthy replica. request:
 *                      {blocks (the prompt's block hashes), seq (1 for
 *                      the first request asked about, then 2, ...)};
 *                      replicas: a list, one table per replica in index
 *                      order, {index (1-based), healthy, outstanding,
 *                      kv_use, match (prompt blocks its prefix tree
 *                      matches), tree_size (blocks in it)}. The trees are
 *                      kept as cache-aware keeps them, the pick remembered
 *                      whoever made it. The script runs in the scheduler's
 *                      Lua sandbox (engine/core/lua_box.h: a state capped
 *                      at lua_max_memory bytes, only base, table, string,
 *                      math and utf8, math.random seeded with seed), each
 *                      call under lua_max_instructions and, with a
 *                      guard_clock, lua_max_seconds. Any error — raised, a
 *                      limit run past, a result that is not an integer,
 *                      out of range or an unhealthy replica — makes that
 *                      request least-outstanding's, is counted
 *                      (router_errors) and the first message, naming the
 *                      script's file and line, kept (router_error).
 *                      lua_max_failures in a row trip its breaker
 *                      (engine/core/breaker.h): the picks of its back-off
 *                      are least-outstanding's without asking it
 *                      (router_trips, router_skipped). With no healthy
 *                      replica the script is not called.
 * A request's prefix is its chained block hashes (equal hashes imply equal
 * prefixes, traces/FORMAT.md). */
#ifndef RH_ROUTER_H
#define RH_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

typedef enum router_policy {
    ROUTER_ROUND_ROBIN = 0,
    ROUTER_LEAST_OUTSTANDING,
    ROUTER_LEAST_KV,
    ROUTER_POWER_OF_TWO,
    ROUTER_CACHE_AWARE,
    ROUTER_LUA,
    ROUTER_N_POLICIES
} router_policy;

/* "round-robin", "least-outstanding", ...; -1 when unknown. */
int router_policy_parse(const char *name);
const char *router_policy_name(router_policy p);

typedef struct router_config {
    router_policy policy;
    uint32_t n_replicas;        /* >= 1 */
    uint64_t seed;              /* power-of-two's draws */
    double balance_abs;         /* cache-aware: SGLang's --balance-abs-threshold (32) */
    double balance_rel;         /* --balance-rel-threshold (1.0001) */
    double cache_threshold;     /* --cache-threshold (0.5) */
    uint64_t max_tree_blocks;   /* per replica (65536) */
    /* lua: the script, read by router_new (the path is not kept), and its
     * limits; the defaults are the scheduler's Lua policy's
     * (core_config_default's policy_max_*). Ignored under other policies. */
    const char *lua_script;
    uint64_t lua_max_instructions;  /* per route() call (10000000) */
    uint64_t lua_max_memory;        /* bytes the script's state may hold (64 MiB) */
    double lua_max_seconds;         /* wall time per call, measured with guard_clock (1) */
    uint32_t lua_max_failures;      /* failures in a row that trip the script's breaker
                                       (engine/core/breaker.h; 16); 0: never */
    double (*guard_clock)(void *ctx);   /* seconds; NULL: no time limit (the core itself has no clock) */
    void *guard_ctx;
} router_config;

/* SGLang's defaults for the thresholds, the scheduler's for the Lua
 * limits; round-robin over one replica. */
void router_config_default(router_config *c);

/* What the caller knows of a replica now. */
typedef struct router_replica {
    bool healthy;
    uint32_t outstanding;       /* requests this router sent it, not finished */
    double kv_use;              /* 0..1, from its metrics (least-kv) */
} router_replica;

typedef struct router router;

/* NULL with e filled on a bad configuration; under lua also when the
 * script cannot be read or run, or defines no route (naming its file and,
 * for a syntax or runtime error, the line). */
router *router_new(const router_config *c, rh_err *e);
void router_free(router *r);

/* The replica for a request whose prompt has these chained block hashes
 * (n may be 0), given every replica's state (n_replicas of them); -1 when
 * none is healthy. The choice is remembered (cache-aware's trees), so ask
 * once per request. */
int router_pick(router *r, const router_replica *replicas, const uint64_t *hashes, uint32_t n_hashes);

/* The prompt blocks a replica's tree matches: for tests and reports. */
uint32_t router_tree_match(const router *r, uint32_t replica, const uint64_t *hashes, uint32_t n_hashes);
uint64_t router_tree_size(const router *r, uint32_t replica);

/* lua: the calls that failed and fell back to least-outstanding, and the
 * first one's message ("file:line: ...", NULL while none has failed). */
uint64_t router_errors(const router *r);
const char *router_error(const router *r);
/* lua: the breaker's trips and the picks it left to least-outstanding
 * without asking the script. */
uint64_t router_trips(const router *r);
uint64_t router_skipped(const router *r);
/* The picks the breaker still leaves to least-outstanding. */
uint64_t router_backoff(const router *r);

#endif
