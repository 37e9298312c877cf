/* test_router_lua.c — the router core's lua policy:
 *   - a script reimplementing least-outstanding picks exactly what
 *     ROUTER_LEAST_OUTSTANDING picks over thousands of random states, and
 *     one reimplementing cache-aware's balanced rule (the most match past
 *     the threshold, else the smallest tree) what ROUTER_CACHE_AWARE picks,
 *     the trees kept alike request by request;
 *   - the sandbox: os and io absent, an endless loop, unbounded memory, a
 *     result of 0, 99, a string, a fraction or an unhealthy replica, an
 *     error raised: each request falls back to least-outstanding, the count
 *     rises, the first message names the file and line, and later calls
 *     run again; a syntax error, a failing chunk or no route() fail
 *     router_new naming the file;
 *   - `rehearse sim --replicas 4 --router-script rr.lua` (round-robin in
 *     Lua) prints exactly what `--router round-robin` prints, and a Lua
 *     least-kv what `--router least-kv` prints (the replicas' KV use reaches
 *     the script); a script error mid-run stops the run naming its line,
 *     or with --policy-fallback is counted (router_errors). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/router/router.h"
#include "testutil.h"
#include "util/rng.h"

static const char *script(const char *name, const char *text, char *path, size_t n)
{
    tu_tmp_path(name, path, n);
    CU_ASSERT_FATAL(tu_write_file(path, text, strlen(text)) == 0);
    return path;
}

static router *make(router_policy p, uint32_t n, const char *path)
{
    router_config c;
    router_config_default(&c);
    c.policy = p;
    c.n_replicas = n;
    c.lua_script = path;
    c.balance_abs = 1e9;   /* cache-aware: always balanced, so its prefix rule decides */
    c.lua_max_instructions = 1000000;
    c.lua_max_memory = 2u << 20;
    rh_err e = {{0}};
    router *r = router_new(&c, &e);
    if (!r) printf("\n  %s\n", e.msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    return r;
}

static const char LEAST_OUTSTANDING[] =
    "function route(request, replicas)\n"
    "  local best\n"
    "  for _, r in ipairs(replicas) do\n"
    "    if r.healthy and (not best or r.outstanding < best.outstanding) then best = r end\n"
    "  end\n"
    "  return best.index\n"
    "end\n";

static void test_least_outstanding(void)
{
    char path[256];
    script("rl-least.lua", LEAST_OUTSTANDING, path, sizeof path);
    uint64_t rng = 11;
    for (uint32_t n = 1; n <= 8; n++) {
        router *lua = make(ROUTER_LUA, n, path), *c = make(ROUTER_LEAST_OUTSTANDING, n, NULL);
        router_replica st[8];
        int differ = 0, none = 0;
        for (int k = 0; k < 500; k++) {
            for (uint32_t i = 0; i < n; i++)
                st[i] = (router_replica){.healthy = rh_splitmix_unit(&rng) < 0.8,
                                         .outstanding = (uint32_t)(rh_splitmix_unit(&rng) * 6),
                                         .kv_use = rh_splitmix_unit(&rng)};
            int want = router_pick(c, st, NULL, 0), got = router_pick(lua, st, NULL, 0);
            differ += want != got;
            none += want < 0;
        }
        if (differ || router_errors(lua)) printf("\n  %u replicas: %d picks differ; %s\n", n, differ,
                                                 router_error(lua) ? router_error(lua) : "");
        CU_ASSERT_EQUAL(differ, 0);
        CU_ASSERT_EQUAL(router_errors(lua), 0);
        CU_ASSERT(n > 2 || none > 0);   /* the all-unhealthy case came up where it is likely */
        router_free(lua);
        router_free(c);
    }
}

static const char MOST_MATCH[] =
    "function route(request, replicas)\n"
    "  local best, roomy\n"
    "  for _, r in ipairs(replicas) do\n"
    "    if r.healthy then\n"
    "      if not best or r.match > best.match then best = r end\n"
    "      if not roomy or r.tree_size < roomy.tree_size then roomy = r end\n"
    "    end\n"
    "  end\n"
    "  if request.blocks > 0 and best.match / request.blocks > 0.5 then return best.index end\n"
    "  return roomy.index\n"
    "end\n";

/* Requests of 12 prefix groups (4 shared blocks, then 1..4 of their own):
 * the picks, and so the trees, stay equal all along. */
static void test_cache_aware_rule(void)
{
    char path[256];
    script("rl-match.lua", MOST_MATCH, path, sizeof path);
    const uint32_t n = 5;
    router *lua = make(ROUTER_LUA, n, path), *c = make(ROUTER_CACHE_AWARE, n, NULL);
    uint64_t rng = 5;
    router_replica st[5];
    int differ = 0;
    for (int k = 0; k < 3000; k++) {
        uint64_t h[8];
        uint32_t g = (uint32_t)(rh_splitmix_unit(&rng) * 12), own = 1 + (uint32_t)(rh_splitmix_unit(&rng) * 4);
        uint32_t nh = (k % 7 == 0) ? 0 : 4 + own;
        for (uint32_t b = 0; b < nh; b++) h[b] = b < 4 ? 1000003ull * (g + 1) + b : rh_splitmix_next(&rng);
        for (uint32_t i = 0; i < n; i++)
            st[i] = (router_replica){.healthy = rh_splitmix_unit(&rng) < 0.9,
                                     .outstanding = (uint32_t)(rh_splitmix_unit(&rng) * 4)};
        int want = router_pick(c, st, h, nh), got = router_pick(lua, st, h, nh);
        differ += want != got;
    }
    for (uint32_t i = 0; i < n; i++) CU_ASSERT_EQUAL(router_tree_size(lua, i), router_tree_size(c, i));
    CU_ASSERT(router_tree_size(lua, 0) > 0);
    if (differ || router_errors(lua)) printf("\n  %d picks differ; %s\n", differ, router_error(lua) ? router_error(lua) : "");
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT_EQUAL(router_errors(lua), 0);
    router_free(lua);
    router_free(c);
}

/* Each bad script, called three times over states where least-outstanding
 * picks replica 3 (index 2): the fallback's picks, three errors, the first
 * message naming the file and the line. */
static void test_sandbox_falls_back(void)
{
    static const struct {
        const char *name, *text, *says;
    } bad[] = {
        {"rl-os.lua", "function route(q, r)\n  os.execute('touch /tmp/rl-owned')\n  return 1\nend\n", "rl-os.lua:2:"},
        {"rl-io.lua", "function route(q, r)\n  local f = io.open('/etc/passwd')\n  return 1\nend\n", "rl-io.lua:2:"},
        {"rl-loop.lua", "function route(q, r)\n  local x = 0\n  while true do x = x + 1 end\nend\n",
         "route ran past its budget of 1000000 instructions"},
        {"rl-pcall.lua", "function route(q, r)\n  while true do pcall(function() while true do end end) end\nend\n",
         "route ran past its budget"},
        /* few big strings: their bytes, charged, stay under the budget */
        {"rl-mem.lua", "function route(q, r)\n  local t = {}\n  for i = 1, 1e9 do t[i] = string.rep('x', 500000) end\nend\n",
         "rl-mem.lua:1: route ran past its memory limit of 2097152 bytes"},
        {"rl-zero.lua", "function route(q, r)\n  return 0\nend\n", "rl-zero.lua:1: route() returned 0, not a replica index 1..4"},
        {"rl-99.lua", "function route(q, r)\n  return 99\nend\n", "rl-99.lua:1: route() returned 99"},
        {"rl-str.lua", "function route(q, r)\n  return '2'\nend\n", "rl-str.lua:1: route() returned a string"},
        {"rl-half.lua", "function route(q, r)\n  return 1.5\nend\n", "rl-half.lua:1: route() returned 1.5"},
        {"rl-nil.lua", "function route(q, r)\nend\n", "rl-nil.lua:1: route() returned a nil"},
        {"rl-sick.lua", "function route(q, r)\n  return 2\nend\n", "rl-sick.lua:1: route() returned replica 2, which is unhealthy"},
        {"rl-raise.lua", "local function f()\n  error('no replica suits')\nend\nfunction route(q, r)\n  f()\nend\n",
         "rl-raise.lua:2: no replica suits"},
        {"rl-gc.lua", "function route(q, r)\n  setmetatable({}, {__gc = function() while true do end end})\n  return 1\nend\n",
         "__gc"},
    };
    router_replica st[4] = {{true, 5, 0}, {false, 0, 0}, {true, 1, 0}, {true, 3, 0}};
    uint64_t h[3] = {1, 2, 3};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[256];
        script(bad[i].name, bad[i].text, path, sizeof path);
        router *r = make(ROUTER_LUA, 4, path);
        for (int k = 0; k < 3; k++) CU_ASSERT_EQUAL(router_pick(r, st, h, 3), 2);
        const char *m = router_error(r);
        if (router_errors(r) != 3 || !m || !strstr(m, bad[i].says) || !strstr(m, bad[i].name))
            printf("\n  %s: %llu errors, '%s'\n", bad[i].name, (unsigned long long)router_errors(r), m ? m : "(none)");
        CU_ASSERT_EQUAL(router_errors(r), 3);
        CU_ASSERT_PTR_NOT_NULL(m);
        CU_ASSERT_PTR_NOT_NULL(m ? strstr(m, bad[i].says) : NULL);
        CU_ASSERT_PTR_NOT_NULL(m ? strstr(m, bad[i].name) : NULL);
        CU_ASSERT_EQUAL(router_tree_match(r, 2, h, 3), 3);   /* the fallback's pick is remembered */
        router_free(r);
    }
    CU_ASSERT(!tu_file_exists("/tmp/rl-owned"));
}

/* A script that fails on every other request, once by running out of
 * memory: the requests between get its own picks, the cap whole again. */
static void test_goes_on(void)
{
    char path[256];
    script("rl-flaky.lua",
           "function route(q, r)\n"
           "  if q.seq % 4 == 1 then local t = {} for i = 1, 1e9 do t[i] = {i} end end\n"
           "  if q.seq % 4 == 3 then error('odd') end\n"
           "  return 4\n"
           "end\n",
           path, sizeof path);
    router *r = make(ROUTER_LUA, 4, path);
    router_replica st[4] = {{true, 0, 0}, {true, 1, 0}, {true, 1, 0}, {true, 1, 0}};
    for (int k = 1; k <= 40; k++) CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), k % 2 ? 0 : 3);
    CU_ASSERT_EQUAL(router_errors(r), 20);
    CU_ASSERT_PTR_NOT_NULL(strstr(router_error(r), "memory limit"));   /* the first kept */
    st[0].healthy = st[1].healthy = st[2].healthy = st[3].healthy = false;
    CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), -1);   /* none healthy: the script is not asked */
    CU_ASSERT_EQUAL(router_errors(r), 20);
    router_free(r);
}

/* A script that always fails trips its breaker after lua_max_failures
 * picks: the next 64 are least-outstanding's without asking it (its error
 * count stands still), then one is tried, fails and trips it for 128. A
 * script whose failures come with successes between never trips. */
static void test_breaker(void)
{
    char path[256];
    script("rl-broken.lua", "n = 0\nfunction route(q, r)\n  n = n + 1\n  error('broken')\nend\n", path, sizeof path);
    router *r = make(ROUTER_LUA, 3, path);
    router_replica st[3] = {{true, 4, 0}, {true, 1, 0}, {true, 2, 0}};
    for (int k = 1; k <= 16; k++) CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), 1);
    CU_ASSERT_EQUAL(router_errors(r), 16);
    CU_ASSERT_EQUAL(router_trips(r), 1);
    for (int k = 1; k <= 64; k++) CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), 1);
    CU_ASSERT_EQUAL(router_errors(r), 16);   /* not asked */
    CU_ASSERT_EQUAL(router_skipped(r), 64);
    CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), 1);   /* the trial: asked, fails, trips again */
    CU_ASSERT_EQUAL(router_errors(r), 17);
    CU_ASSERT_EQUAL(router_trips(r), 2);
    for (int k = 1; k <= 128; k++) router_pick(r, st, NULL, 0);
    CU_ASSERT_EQUAL(router_errors(r), 17);
    CU_ASSERT_EQUAL(router_skipped(r), 64 + 128);
    router_pick(r, st, NULL, 0);
    CU_ASSERT_EQUAL(router_errors(r), 18);
    CU_ASSERT_EQUAL(router_trips(r), 3);
    router_free(r);

    script("rl-halfway.lua", "function route(q, r)\n  if q.seq % 2 == 0 then error('even') end\n  return 3\nend\n", path,
           sizeof path);
    r = make(ROUTER_LUA, 3, path);
    for (int k = 1; k <= 200; k++) CU_ASSERT_EQUAL(router_pick(r, st, NULL, 0), k % 2 ? 2 : 1);
    CU_ASSERT_EQUAL(router_errors(r), 100);
    CU_ASSERT_EQUAL(router_trips(r), 0);
    router_free(r);
}

static void test_open_errors(void)
{
    static const struct {
        const char *name, *text, *says;
    } bad[] = {
        {"rl-syntax.lua", "function route(q, r)\n  return 1 +\nend\n", "rl-syntax.lua:3:"},
        {"rl-chunk.lua", "local x = 1\nerror('not today')\n", "rl-chunk.lua:2: not today"},
        {"rl-none.lua", "function pick(q, r) return 1 end\n", "defines no global function route(request, replicas)"},
        {"rl-spin.lua", "while true do end\n", "route ran past its budget"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[256];
        script(bad[i].name, bad[i].text, path, sizeof path);
        router_config c;
        router_config_default(&c);
        c.policy = ROUTER_LUA;
        c.n_replicas = 2;
        c.lua_script = path;
        rh_err e = {{0}};
        router *r = router_new(&c, &e);
        if (r || !strstr(e.msg, bad[i].says)) printf("\n  %s: '%s'\n", bad[i].name, e.msg);
        CU_ASSERT_PTR_NULL(r);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, bad[i].says));
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, bad[i].name));
        router_free(r);
    }
    router_config c;
    router_config_default(&c);
    c.policy = ROUTER_LUA;
    c.n_replicas = 2;
    rh_err e = {{0}};
    CU_ASSERT(router_new(&c, &e) == NULL && strstr(e.msg, "script"));
    c.lua_script = "build/tmp/rl-no-such-file.lua";
    CU_ASSERT(router_new(&c, &e) == NULL && strstr(e.msg, "rl-no-such-file.lua"));
    c.lua_max_instructions = 10;
    CU_ASSERT(router_new(&c, &e) == NULL && strstr(e.msg, "lua_max_instructions"));
    CU_ASSERT_EQUAL(router_policy_parse("lua"), ROUTER_LUA);
    CU_ASSERT_STRING_EQUAL(router_policy_name(ROUTER_LUA), "lua");
    router_config_default(&c);
    CU_ASSERT_EQUAL(c.lua_max_instructions, 10000000);
    CU_ASSERT_EQUAL(c.lua_max_memory, 64u << 20);
    CU_ASSERT_EQUAL(c.lua_max_seconds, 1.0);
}

static const char ROUND_ROBIN[] =
    "local next = 0\n"
    "function route(request, replicas)\n"
    "  local n = #replicas\n"
    "  for k = 0, n - 1 do\n"
    "    local i = (next + k) % n\n"
    "    if replicas[i + 1].healthy then\n"
    "      next = (i + 1) % n\n"
    "      return i + 1\n"
    "    end\n"
    "  end\n"
    "end\n";

/* A file's bytes, each "wall_s" and "sim_wall_s" value (the time the run
 * itself took) cut out; NUL-terminated, malloc'd; NULL when unreadable. */
static char *without_wall_time(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    size_t got;
    while (s && (got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) free(s);
            s = t;
        }
    }
    fclose(f);
    if (!s) return NULL;
    s[n] = 0;
    for (size_t i = 0; i < n; i++)   /* a binary trace: compared whole, its NULs kept apart */
        if (!s[i]) s[i] = '\1';
    for (char *p = s; (p = strstr(p, "wall_s\"")) != NULL;) {
        char *q = p + 7;
        while (*q == ':' || *q == ' ') q++;
        char *end = q;
        while (*end && strchr("0123456789.eE+-", *end)) end++;
        memmove(q, end, strlen(end) + 1);
        p = q;
    }
    return s;
}

/* Through the command line: the knob table, the simulator's router, the
 * result printed. */
static void test_sim_round_robin(void)
{
    char trace[256], cost[256], rr[256], a[256], b[256], out[8192], cmd[2048];
    tu_tmp_path("rl-sim.rhtr", trace, sizeof trace);
    tu_tmp_path("rl-sim-cost.json", cost, sizeof cost);
    tu_tmp_path("rl-sim-a.json", a, sizeof a);
    tu_tmp_path("rl-sim-b.json", b, sizeof b);
    script("rl-rr.lua", ROUND_ROBIN, rr, sizeof rr);
    const char *lin = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5, "
                      "\"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}\n";
    CU_ASSERT_FATAL(tu_write_file(cost, lin, strlen(lin)) == 0);
    snprintf(cmd, sizeof cmd,
             "%s trace synth --requests 300 --rate 40 --seed 3 --block-size 64 --prefix-groups 6 "
             "--prompts-per-group 50 --system-prompt-len 512 -o %s",
             tu_bin(), trace);
    CU_ASSERT_FATAL(tu_run(cmd, out, sizeof out) == 0);
    /* the printed summary, the whole result with every request's replica,
     * and the simulated run: all equal but the wall time the run took */
    const char *how[2] = {"--router round-robin", "--router lua --router-script"};
    char *res[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd,
                 "%s sim %s --cost %s --replicas 4 %s %s --json --per-request --result %s.result -o %s.rhtr > %s",
                 tu_bin(), trace, cost, how[k], k ? rr : "", res[k], res[k], res[k]);
        int rc = tu_run(cmd, out, sizeof out);
        if (rc) printf("\n  %s\n", out);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
    }
    for (int f = 0; f < 3; f++) {
        static const char *const ext[] = {"", ".result", ".rhtr"};
        char pa[300], pb[300];
        snprintf(pa, sizeof pa, "%s%s", a, ext[f]);
        snprintf(pb, sizeof pb, "%s%s", b, ext[f]);
        char *x = without_wall_time(pa), *y = without_wall_time(pb);
        CU_ASSERT_PTR_NOT_NULL_FATAL(x);
        CU_ASSERT_PTR_NOT_NULL_FATAL(y);
        if (strcmp(x, y)) printf("\n  %s and %s differ\n", pa, pb);
        CU_ASSERT_STRING_EQUAL(x, y);
        CU_ASSERT(strlen(x) > 1000);
        if (f == 1) CU_ASSERT_PTR_NOT_NULL(strstr(x, "\"replica\":[0,1,2,3,0,1,2,3,"));   /* round-robin indeed */
        free(x);
        free(y);
    }

    /* least-kv in Lua: the replicas' KV use reaches the script as least-kv sees it */
    char kv[256];
    script("rl-kv.lua",
           "function route(q, replicas)\n  local best = 1\n"
           "  for i, r in ipairs(replicas) do if r.kv_use < replicas[best].kv_use then best = i end end\n"
           "  return best\nend\n",
           kv, sizeof kv);
    const char *kv_how[2] = {"--router least-kv", "--router-script"};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s sim %s --cost %s --replicas 4 --rate-scale 3 %s %s --json > %s", tu_bin(), trace,
                 cost, kv_how[k], k ? kv : "", res[k]);
        CU_ASSERT_EQUAL_FATAL(tu_run(cmd, out, sizeof out), 0);
    }
    char *x = without_wall_time(a), *y = without_wall_time(b);
    CU_ASSERT_FATAL(x && y);
    if (strcmp(x, y)) printf("\n  least-kv: %s and %s differ\n", a, b);
    CU_ASSERT_STRING_EQUAL(x, y);
    free(x);
    free(y);

    /* a script error mid-run stops it, naming the line, unless --policy-fallback counts it */
    char flaky[256];
    script("rl-flaky.lua",
           "local n = 0\nfunction route(q, replicas)\n  n = n + 1\n"
           "  if n % 50 == 0 then error('fiftieth') end\n  return 1 + n % #replicas\nend\n",
           flaky, sizeof flaky);
    snprintf(cmd, sizeof cmd, "%s sim %s --cost %s --replicas 4 --router-script %s --json", tu_bin(), trace, cost, flaky);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "rl-flaky.lua:4: fiftieth"));
    snprintf(cmd, sizeof cmd,
             "%s sim %s --cost %s --replicas 4 --router-script %s --policy-fallback --json | grep -v '^      '", tu_bin(),
             trace, cost, flaky);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"router_errors\": 6"));   /* 300 requests, every 50th */

    /* a broken script: the run stops before it starts, naming the file and line */
    char broken[256];
    script("rl-broken.lua", "function route(q, r)\n  return (\nend\n", broken, sizeof broken);
    snprintf(cmd, sizeof cmd, "%s sim %s --cost %s --replicas 4 --router-script %s --json", tu_bin(), trace, cost,
             broken);
    int rc = tu_run(cmd, out, sizeof out);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "rl-broken.lua:3:"));
    snprintf(cmd, sizeof cmd, "%s sim %s --cost %s --router fastest", tu_bin(), trace, cost);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "cache-aware or lua"));
    snprintf(cmd, sizeof cmd, "%s sim --help", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--router-script FILE"));
}

void register_test_router_lua(void)
{
    CU_pSuite s = CU_add_suite("router_lua", NULL, NULL);
    CU_add_test(s, "a Lua least-outstanding picks as ROUTER_LEAST_OUTSTANDING does", test_least_outstanding);
    CU_add_test(s, "a Lua most-match rule picks as cache-aware does when balanced", test_cache_aware_rule);
    CU_add_test(s, "sandbox: every bad script falls back, counted, file:line kept", test_sandbox_falls_back);
    CU_add_test(s, "a script failing now and then: the calls between run", test_goes_on);
    CU_add_test(s, "the breaker: 16 failures in a row, then 64 picks without the script, doubling", test_breaker);
    CU_add_test(s, "syntax errors, failing chunks, no route(): router_new refuses", test_open_errors);
    CU_add_test(s, "rehearse sim: round-robin in Lua prints what --router round-robin does", test_sim_round_robin);
}
