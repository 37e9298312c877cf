/* test_core_lua.c — Lua policies: an identity policy forms exactly the fcfs
 * batches and a sorting one exactly the lof batches; a raising policy, a bad
 * answer and an endless loop fall back to fcfs with one message naming the
 * script's file and line; a policy may hold requests back; a caller-owned
 * state keeps its stack and hooks. */
#include <CUnit/CUnit.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <string.h>

#include "test_core_harness.h"
#include "engine/core/core.h"
#include "testutil.h"

static harness H;

#define N_REQ 300

static core_config lua_cfg(void)
{
    core_config cfg;
    core_config_default(&cfg);
    cfg.max_total_tokens = 256 * 16;
    cfg.max_running_requests = 16;
    cfg.chunked_prefill_size = 256;
    cfg.policy_window = 1000;
    return cfg;
}

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* With priority_levels > 0, each request gets a priority in [0, levels). */
static uint32_t priority_levels;

/* 300 requests of random sizes arriving over time, run to the end; returns
 * the digest of every batch. */
static uint64_t workload(const core_config *cfg, uint64_t seed)
{
    if (!h_new(&H, cfg)) return 0;
    double now = 0;
    uint64_t id = 1;
    for (int step = 0; step < 20000 && (id <= N_REQ || !core_idle(H.c)); step++) {
        if (id <= N_REQ && rnd(&seed) % 3 == 0)
            for (uint64_t k = 1 + rnd(&seed) % 2; k > 0 && id <= N_REQ; k--, id++)
            {
                core_req_desc d = {.id = id, .prompt_len = 1 + (uint32_t)(rnd(&seed) % 600),
                                   .max_new_tokens = 1 + (uint32_t)(rnd(&seed) % 80)};
                if (priority_levels) d.priority = (int32_t)(rnd(&seed) % priority_levels);
                rh_err e;
                CU_ASSERT_PTR_NOT_NULL(core_add(H.c, &d, now, &e));
            }
        h_step(&H, now);
        now += 0.01;
        if (step % 50 == 0) CU_ASSERT_EQUAL(h_check(&H), 0);
    }
    CU_ASSERT(core_idle(H.c));
    for (uint64_t i = 1; i <= N_REQ; i++) CU_ASSERT_EQUAL(H.req[i].finished, 1);
    uint64_t d = H.digest;
    return d;
}

static void test_identity_equals_fcfs(void)
{
    core_config cfg = lua_cfg();
    uint64_t fcfs = workload(&cfg, 9);
    core_free(H.c);
    cfg.lua_policy_path = h_script("identity.lua",
                                       "function policy(waiting, state)\n"
                                       "  local order = {}\n"
                                       "  for i = 1, #waiting do order[i] = i end\n"
                                       "  return order\n"
                                       "end\n");
    cfg.policy = CORE_POLICY_LUA;
    uint64_t lua = workload(&cfg, 9);
    CU_ASSERT_EQUAL(H.n_msgs, 0);
    core_free(H.c);
    CU_ASSERT_EQUAL(fcfs, lua);
    /* The vLLM preset too. */
    cfg.preset = CORE_PRESET_VLLM;
    lua = workload(&cfg, 9);
    core_free(H.c);
    cfg.policy = CORE_POLICY_FCFS;
    cfg.lua_policy_path = NULL;
    fcfs = workload(&cfg, 9);
    core_free(H.c);
    CU_ASSERT_EQUAL(fcfs, lua);
}

static void test_sort_equals_lof(void)
{
    core_config cfg = lua_cfg();
    cfg.policy = CORE_POLICY_LOF;
    uint64_t lof = workload(&cfg, 4);
    core_free(H.c);
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_policy_path = h_script("lof.lua",
                                       "function policy(waiting, state)\n"
                                       "  table.sort(waiting, function(a, b)\n"
                                       "    if a.max_new_tokens ~= b.max_new_tokens then\n"
                                       "      return a.max_new_tokens > b.max_new_tokens end\n"
                                       "    return a.index < b.index\n"
                                       "  end)\n"
                                       "  return waiting\n"
                                       "end\n");
    uint64_t lua = workload(&cfg, 4);
    CU_ASSERT_EQUAL(H.n_msgs, 0);
    core_free(H.c);
    CU_ASSERT_EQUAL(lof, lua);
    cfg.policy = CORE_POLICY_FCFS;
    cfg.lua_policy_path = NULL;
    CU_ASSERT_NOT_EQUAL(workload(&cfg, 4), lof);   /* the comparison can tell */
    core_free(H.c);
}

/* A Lua sort by priority (higher first, queue order within) schedules as
 * the built-in --enable-priority-scheduling does, batch for batch. */
static void test_sort_equals_priority(void)
{
    priority_levels = 3;
    core_config cfg = lua_cfg();
    cfg.enable_priority_scheduling = true;
    uint64_t builtin = workload(&cfg, 6);
    core_free(H.c);
    cfg.enable_priority_scheduling = false;
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_policy_path = h_script("priority.lua",
                                   "function policy(waiting, state)\n"
                                   "  table.sort(waiting, function(a, b)\n"
                                   "    if a.priority ~= b.priority then return a.priority > b.priority end\n"
                                   "    return a.index < b.index\n"
                                   "  end)\n"
                                   "  return waiting\n"
                                   "end\n");
    uint64_t lua = workload(&cfg, 6);
    CU_ASSERT_EQUAL(H.n_msgs, 0);
    core_free(H.c);
    CU_ASSERT_EQUAL(builtin, lua);
    cfg.policy = CORE_POLICY_FCFS;
    cfg.lua_policy_path = NULL;
    CU_ASSERT_NOT_EQUAL(workload(&cfg, 6), builtin);   /* the comparison can tell */
    core_free(H.c);
    priority_levels = 0;
}

/* Every failing call falls back to fcfs; the first error is reported once. */
static void fallback_case(const char *name, const char *script, const char *want1, const char *want2, uint64_t limit)
{
    core_config cfg = lua_cfg();
    static uint64_t fcfs;
    if (!fcfs) {
        fcfs = workload(&cfg, 21);
        core_free(H.c);
    }
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_policy_path = h_script(name, script);
    if (limit) cfg.policy_max_instructions = limit;
    cfg.policy_max_failures = 0;   /* every call made (the breaker: test_hardening_lua) */
    uint64_t lua = workload(&cfg, 21);
    CU_ASSERT_EQUAL(lua, fcfs);
    CU_ASSERT_EQUAL(H.n_msgs, 1);
    core_stats st;
    core_get_stats(H.c, &st);
    CU_ASSERT(st.policy_errors > 10);
    const char *err = core_policy_error(H.c);
    if (!strstr(H.msg, want1) || !strstr(H.msg, want2) || !strstr(err, want1))
        printf("\n  message: %s\n", H.msg);
    CU_ASSERT(strstr(H.msg, want1) != NULL);
    CU_ASSERT(strstr(H.msg, want2) != NULL);
    CU_ASSERT(strstr(H.msg, "fcfs") != NULL);
    CU_ASSERT(strstr(err, want1) != NULL);
    core_free(H.c);
}

static void test_errors_fall_back(void)
{
    fallback_case("raise.lua",
                  "-- fails once the queue is long\n"
                  "function policy(waiting, state)\n"
                  "  if #waiting > 0 then\n"
                  "    error('queue too long: ' .. #waiting)\n"
                  "  end\n"
                  "end\n",
                  "raise.lua:4:", "queue too long", 0);
    fallback_case("nilindex.lua",
                  "function policy(waiting, state)\n"
                  "  return waiting[1].missing.field\n"
                  "end\n",
                  "nilindex.lua:2:", "attempt to index", 0);
    fallback_case("loop.lua",
                  "function policy(waiting, state)\n"
                  "  local n = 0\n"
                  "  while true do n = n + 1 end\n"
                  "end\n",
                  "loop.lua:3:", "budget of 20000 instructions", 20000);
    fallback_case("badret.lua",
                  "function policy(waiting, state)\n"
                  "  return 'first'\n"
                  "end\n",
                  "badret.lua:1:", "returned a string", 0);
    fallback_case("range.lua",
                  "function policy(waiting, state)\n"
                  "  return {#waiting + 1}\n"
                  "end\n",
                  "range.lua:1:", "not a position", 0);
    fallback_case("table.lua",
                  "function policy(waiting, state)\n"
                  "  error({code = 7})\n"
                  "end\n",
                  "table.lua:1:", "raised a table", 0);
    fallback_case("twice.lua",
                  "function policy(waiting, state)\n"
                  "  if #waiting < 2 then return nil end\n"
                  "  return {1, 1}\n"
                  "end\n",
                  "twice.lua:1:", "twice", 0);
}

/* Hold everything back while anything runs: one request at a time, yet an
 * idle core always starts the first one, so the run still ends. */
static void test_hold_back(void)
{
    core_config cfg = lua_cfg();
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_policy_path = h_script("one.lua",
                                       "function policy(waiting, state)\n"
                                       "  assert(type(state.free_pages) == 'number' and state.page_size == 16)\n"
                                       "  assert(state.scheduler == 'sglang' and state.max_running_requests == 16)\n"
                                       "  local w = waiting[1]\n"
                                       "  assert(w.id and w.prompt_len and w.max_new_tokens and w.cached_len)\n"
                                       "  assert(w.wait >= 0 and w.arrival <= state.now and w.output_len == 0)\n"
                                       "  return {}\n"
                                       "end\n");
    workload(&cfg, 3);
    CU_ASSERT_EQUAL(H.n_msgs, 0);
    CU_ASSERT_EQUAL(H.max_running_seen, 1);
    core_free(H.c);
}

/* A function in the caller's own state, by registry reference. */
static void test_caller_state(void)
{
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    CU_ASSERT_EQUAL_FATAL(luaL_dostring(L, "return function(waiting, state)\n"
                                           "  local o = {}\n"
                                           "  for i = #waiting, 1, -1 do o[#o + 1] = i end\n"
                                           "  return o\n"
                                           "end\n"),
                          LUA_OK);
    int ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushinteger(L, 12345);   /* something of the caller's on the stack */
    int top = lua_gettop(L);
    core_config cfg = lua_cfg();
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_state = L;
    cfg.lua_policy_ref = ref;
    cfg.max_running_requests = 1;
    h_new(&H, &cfg);
    for (uint64_t i = 1; i <= 5; i++) h_add(&H, i, 20, 2, 0);
    double now = 0;
    h_drain(&H, &now, 100);
    /* Reversed: the newest first each time. */
    uint64_t want[5] = {5, 4, 3, 2, 1};
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(H.order[i], want[i]);
    CU_ASSERT_EQUAL(lua_gettop(L), top);
    CU_ASSERT_EQUAL(lua_tointeger(L, -1), 12345);
    CU_ASSERT_PTR_NULL(lua_gethook(L));
    core_free(H.c);

    /* A reference that is not a function is refused. */
    lua_pushinteger(L, 3);
    cfg.lua_policy_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    rh_err e;
    CU_ASSERT_PTR_NULL(core_new(&cfg, NULL, &e));
    CU_ASSERT(strstr(e.msg, "not a function") != NULL);
    lua_close(L);
}

static void test_script_load_errors(void)
{
    core_config cfg;
    core_config_default(&cfg);
    rh_err e;
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_policy_path = "build/tmp/no-such-policy.lua";
    CU_ASSERT_PTR_NULL(core_new(&cfg, NULL, &e));
    CU_ASSERT(strstr(e.msg, "no-such-policy.lua") != NULL);
    cfg.lua_policy_path = h_script("syntax.lua", "function policy(w, s)\n  return {\nend\n");
    CU_ASSERT_PTR_NULL(core_new(&cfg, NULL, &e));
    CU_ASSERT(strstr(e.msg, "syntax.lua:3:") != NULL);
    cfg.lua_policy_path = h_script("nofn.lua", "x = 1\n");
    CU_ASSERT_PTR_NULL(core_new(&cfg, NULL, &e));
    CU_ASSERT(strstr(e.msg, "nofn.lua") && strstr(e.msg, "policy(waiting, state)"));
    cfg.lua_policy_path = h_script("toplevel.lua", "while true do end\n");
    CU_ASSERT_PTR_NULL(core_new(&cfg, NULL, &e));
    CU_ASSERT(strstr(e.msg, "toplevel.lua:1:") != NULL);
    cfg.lua_policy_path = h_script("noio.lua", "function policy(w, s) return nil end\nassert(io == nil and os == nil)\n");
    core *c = core_new(&cfg, NULL, &e);
    CU_ASSERT_PTR_NOT_NULL(c);
    core_free(c);
    /* --policy-script through the knob table implies the lua policy. */
    core_config_default(&cfg);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "policy-script", "x.lua", &e), 1);
    CU_ASSERT_EQUAL(cfg.policy, CORE_POLICY_LUA);
}

void register_test_core_lua(void)
{
    CU_pSuite s = CU_add_suite("core_lua", NULL, NULL);
    CU_add_test(s, "identity Lua policy gives the fcfs batches", test_identity_equals_fcfs);
    CU_add_test(s, "sorting Lua policy gives the lof batches", test_sort_equals_lof);
    CU_add_test(s, "a Lua sort by priority gives the --enable-priority-scheduling batches", test_sort_equals_priority);
    CU_add_test(s, "errors, bad answers and endless loops fall back", test_errors_fall_back);
    CU_add_test(s, "a policy may hold requests back", test_hold_back);
    CU_add_test(s, "caller-owned state and registry reference", test_caller_state);
    CU_add_test(s, "script load errors name the file", test_script_load_errors);
}
