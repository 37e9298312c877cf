/* test_hardening_lua.c — a --policy-script is untrusted code running inside
 * the scheduler: it sees no io, os, load, require or debug (calling them
 * fails cleanly, at load or per step); it cannot outrun the instruction
 * budget (not by pcall, xpcall or a to-be-closed variable) nor hang the
 * process where the count hook cannot reach (string patterns, string.rep of
 * nothing, table.move, __gc finalizers); and it cannot take more memory
 * than --policy-max-memory. Every failing step falls back to exactly the
 * batches fcfs forms, with one message naming the script's file and line;
 * legitimate policies still form the batches they mean to. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/core.h"
#include "test_core_harness.h"
#include "test_hardening_util.h"
#include "testutil.h"
#include "util/progress.h"

static harness H;

#define N_REQ 120

static core_config base_cfg(void)
{
    core_config cfg;
    core_config_default(&cfg);
    cfg.max_total_tokens = 128 * 16;
    cfg.max_running_requests = 8;
    cfg.chunked_prefill_size = 128;
    cfg.policy_window = 512;
    cfg.policy_max_instructions = 50000;
    cfg.policy_max_memory = 2u << 20;
    cfg.policy_max_failures = 0;   /* every call made: test_breaker has the breaker */
    return cfg;
}

static uint64_t mix(uint64_t *s)
{
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* N_REQ requests of random sizes arriving over time, run to the end; the
 * digest of every batch, or 0 when the core could not be made. */
static uint64_t run_n(const core_config *cfg, uint64_t n_req)
{
    if (!h_new(&H, cfg)) return 0;
    uint64_t seed = 77, id = 1;
    double now = 0;
    for (int step = 0; step < 200000 && (id <= n_req || !core_idle(H.c)); step++) {
        if (id <= n_req && mix(&seed) % 2 == 0)
            for (uint64_t k = 1 + mix(&seed) % 3; k > 0 && id <= n_req; k--, id++)
                h_add(&H, id, 1 + (uint32_t)(mix(&seed) % 300), 1 + (uint32_t)(mix(&seed) % 40), now);
        h_step(&H, now);
        now += 0.01;
    }
    CU_ASSERT(core_idle(H.c));
    CU_ASSERT_EQUAL(h_check(&H), 0);
    for (uint64_t i = 1; i <= n_req; i++) CU_ASSERT_EQUAL(H.req[i].finished, 1);
    return H.digest;
}

static uint64_t run(const core_config *cfg) { return run_n(cfg, N_REQ); }

static uint64_t fcfs_digest(void)
{
    static uint64_t d;
    if (!d) {
        core_config cfg = base_cfg();
        d = run(&cfg);
        core_free(H.c);
        H.c = NULL;
    }
    return d;
}

/* The policy fails at every step that calls it, yet the run forms exactly
 * the fcfs batches, says so once, and the message holds want1 and want2;
 * each call under a budget of `instructions`. */
static void falls_back_budget(const char *name, const char *text, const char *want1, const char *want2,
                              uint64_t instructions)
{
    uint64_t fcfs = fcfs_digest();
    core_config cfg = base_cfg();
    cfg.policy_max_instructions = instructions;
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_policy_path = h_script(name, text);
    double t0 = rh_now();
    uint64_t d = run(&cfg);
    double took = rh_now() - t0;
    if (!H.c) return;
    core_stats st;
    core_get_stats(H.c, &st);
    int ok = d == fcfs && H.n_msgs == 1 && st.policy_errors > 20 && strstr(H.msg, want1) &&
             strstr(H.msg, want2) && strstr(H.msg, "fcfs");
    if (!ok)
        printf("\n    %s: %s, %d messages, %llu errors, %.2f s: %s\n", name, d == fcfs ? "fcfs" : "NOT fcfs",
               H.n_msgs, (unsigned long long)st.policy_errors, took, H.msg);
    CU_ASSERT(ok);
    core_free(H.c);
    H.c = NULL;
}

static void falls_back(const char *name, const char *text, const char *want1, const char *want2)
{
    falls_back_budget(name, text, want1, want2, 50000);
}

/* The policy is accepted and never fails: it forms exactly `want`. */
static void behaves(const char *name, const char *text, uint64_t want)
{
    core_config cfg = base_cfg();
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_policy_path = h_script(name, text);
    uint64_t d = run(&cfg);
    if (!H.c) return;
    if (d != want || H.n_msgs) printf("\n    %s: %s, message: %s\n", name, d == want ? "same" : "DIFFERENT", H.msg);
    CU_ASSERT_EQUAL(d, want);
    CU_ASSERT_EQUAL(H.n_msgs, 0);
    core_free(H.c);
    H.c = NULL;
}

/* The script is refused when loaded, with a message holding want1 and want2. */
static void refused(const char *name, const char *text, const char *want1, const char *want2)
{
    core_config cfg = base_cfg();
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_policy_path = h_script(name, text);
    rh_err e = {{0}};
    core *c = core_new(&cfg, NULL, &e);
    int ok = !c && strstr(e.msg, want1) && strstr(e.msg, want2);
    if (!ok) printf("\n    %s: %s\n", name, c ? "accepted" : e.msg);
    CU_ASSERT(ok);
    core_free(c);
}

static void test_no_way_out(void)
{
    hu_watchdog(120);
    char marker[256], text[1024];
    tu_tmp_path("lua-escaped", marker, sizeof marker);
    /* Called while the script loads: refused, naming the line and what is missing. */
    snprintf(text, sizeof text, "os.execute('touch %s')\nfunction policy() end\n", marker);
    refused("os_execute.lua", text, "os_execute.lua:1:", "'os'");
    snprintf(text, sizeof text, "local f = io.open('%s', 'w')\nfunction policy() end\n", marker);
    refused("io_open.lua", text, "io_open.lua:1:", "'io'");
    refused("load.lua", "local f = load('return 1')\nfunction policy() end\n", "load.lua:1:", "'load'");
    refused("loadstring.lua", "local f = loadstring('return 1')\n", "loadstring.lua:1:", "'loadstring'");
    refused("dofile.lua", "dofile('/etc/passwd')\n", "dofile.lua:1:", "'dofile'");
    refused("loadfile.lua", "local f = loadfile('/etc/passwd')\n", "loadfile.lua:1:", "'loadfile'");
    refused("require.lua", "local os = require('os')\n", "require.lua:1:", "'require'");
    refused("package.lua", "package.path = '/tmp/?.lua'\n", "package.lua:1:", "'package'");
    refused("debug.lua", "debug.sethook()\n", "debug.lua:1:", "'debug'");
    refused("coroutine.lua", "local co = coroutine.create(print)\n", "coroutine.lua:1:", "'coroutine'");
    refused("collect.lua", "collectgarbage('stop')\n", "collect.lua:1:", "'collectgarbage'");
    CU_ASSERT(!tu_file_exists(marker));
    /* Not reachable another way either: string methods are the same, tamed
     * string table, the strings' metatable is protected, and nothing else is
     * left in _G. */
    behaves("globals.lua",
            "local allowed = {assert=1, error=1, getmetatable=1, ipairs=1, next=1, pairs=1, pcall=1, print=1,\n"
            "  rawequal=1, rawget=1, rawlen=1, rawset=1, select=1, setmetatable=1, tonumber=1, tostring=1,\n"
            "  type=1, warn=1, xpcall=1, _G=1, _VERSION=1, table=1, string=1, math=1, utf8=1}\n"
            "for k in pairs(_G) do assert(allowed[k], 'unexpected global ' .. tostring(k)) end\n"
            "assert(getmetatable('') == false)\n"
            "local s = ('x')\n"
            "assert(s.find == nil and s.gsub == nil and s.match == nil and s.gmatch == nil and s.rep ~= nil)\n"
            "assert(table.move == nil)\n"
            "function policy(waiting, state) return nil end\n",
            fcfs_digest());
    /* Called inside policy(): that step falls back, the message names the line. */
    snprintf(text, sizeof text, "function policy(waiting, state)\n  os.execute('touch %s')\nend\n", marker);
    falls_back("os_in_policy.lua", text, "os_in_policy.lua:2:", "'os'");
    snprintf(text, sizeof text, "function policy(waiting, state)\n  return io.open('%s', 'w')\nend\n", marker);
    falls_back("io_in_policy.lua", text, "io_in_policy.lua:2:", "'io'");
    falls_back("load_in_policy.lua", "function policy(waiting, state)\n  return load('return {1}')()\nend\n",
               "load_in_policy.lua:2:", "'load'");
    falls_back("find_in_policy.lua", "function policy(waiting, state)\n  return ('x'):find('x')\nend\n",
               "find_in_policy.lua:2:", "find");
    CU_ASSERT(!tu_file_exists(marker));
    hu_watchdog(0);
}

static void test_budget_cannot_be_swallowed(void)
{
    hu_watchdog(120);
    falls_back("pcall_loop.lua",
               "function policy(waiting, state)\n"
               "  while true do pcall(function() while true do end end) end\n"
               "end\n",
               "pcall_loop.lua:2:", "budget of 50000 instructions");
    falls_back("xpcall_loop.lua",
               "local function spin() while true do end end\n"
               "function policy(waiting, state)\n"
               "  while true do xpcall(spin, function(m) while true do end end) end\n"
               "end\n",
               "xpcall_loop.lua:", "budget of 50000 instructions");
    falls_back("close_loop.lua",
               "function policy(waiting, state)\n"
               "  local guard <close> = setmetatable({}, {__close = function() while true do end end})\n"
               "  while true do end\n"
               "end\n",
               "close_loop.lua:", "budget of 50000 instructions");
    /* Ordinary errors are still the policy's to catch. */
    behaves("pcall_ok.lua",
            "function policy(waiting, state)\n"
            "  local ok, msg = pcall(error, 'caught')\n"
            "  assert(not ok and msg == 'caught')\n"
            "  local ok2, m2 = xpcall(error, function(m) return 'handled: ' .. m end, 'x', 0)\n"
            "  assert(not ok2 and m2 == 'handled: x')\n"
            "  local ok3, a, b = xpcall(function(p, q) return p + q, p * q end, print, 3, 4)\n"
            "  assert(ok3 and a == 7 and b == 12)\n"
            "  assert(not pcall(xpcall, print, 'not a function'))\n"
            "  return nil\n"
            "end\n",
            fcfs_digest());
    hu_watchdog(0);
}

static void test_where_the_hook_cannot_reach(void)
{
    hu_watchdog(120);
    /* Each of these would spin inside one C call (hours, or for ever): the
     * step must end at once. Together they stay far below a second. */
    double t0 = rh_now();
    falls_back("gc.lua",
               "function policy(waiting, state)\n"
               "  setmetatable({}, {__gc = function() while true do end end})\n"
               "end\n",
               "gc.lua:2:", "__gc");
    falls_back("gc_later.lua",
               "function policy(waiting, state)\n"
               "  local mt = {__gc = true}\n"
               "  setmetatable({}, mt)\n"
               "  mt.__gc = function() while true do end end\n"
               "end\n",
               "gc_later.lua:3:", "__gc");
    falls_back("move.lua",
               "function policy(waiting, state)\n"
               "  table.move({}, 1, math.maxinteger - 1, 2)\n"
               "end\n",
               "move.lua:2:", "move");
    /* string.rep of nothing is "" at once; of something, the memory cap. */
    behaves("rep_empty.lua",
            "function policy(waiting, state)\n"
            "  assert(string.rep('', math.maxinteger) == '' and ('x'):rep(3, '') == 'xxx')\n"
            "  assert(string.rep('', math.maxinteger, '') == '' and ('ab'):rep(2, ',') == 'ab,ab')\n"
            "end\n",
            fcfs_digest());
    falls_back("rep_big.lua", "function policy(waiting, state)\n  return ('x'):rep(1 << 30)\nend\n", "rep_big.lua:",
               "memory limit of 2097152 bytes");
    double took = rh_now() - t0;
    if (took > 20) printf("\n    the tamed calls took %.1f s\n", took);
    CU_ASSERT(took < 20);   /* a generous bound: a hang would be hours */
    hu_watchdog(0);
}

static void test_memory_cap(void)
{
    hu_watchdog(120);
    /* Garbage that grows within one call, and memory held across calls:
     * both fail the call with the cap's message (under a budget their
     * bytes, charged, do not spend first). */
    falls_back_budget("hog.lua",
                      "function policy(waiting, state)\n"
                      "  local t = {}\n"
                      "  while true do t[#t + 1] = ('x'):rep(10000) .. #t end\n"
                      "end\n",
                      "hog.lua:", "memory limit of 2097152 bytes", 10000000);
    falls_back_budget("hoard.lua",
                      "kept = {}\n"
                      "function policy(waiting, state)\n"
                      "  for i = 1, 1e9 do kept[#kept + 1] = ('x'):rep(100000) .. i end\n"
                      "end\n",
                      "hoard.lua:", "memory limit of 2097152 bytes", 10000000);
    /* Under the suite's budget of 50000 the same bytes are work enough. */
    falls_back("hog_charged.lua",
               "function policy(waiting, state)\n"
               "  local t = {}\n"
               "  while true do t[#t + 1] = ('x'):rep(10000) .. #t end\n"
               "end\n",
               "hog_charged.lua:3:", "budget of 50000 instructions");
    /* At load time: refused with the cap named. */
    refused("hog_top.lua", "local t = {}\nfor i = 1, 1e9 do t[i] = i end\nfunction policy() end\n", "hog_top.lua",
            "--policy-max-memory");
    /* The cap is a knob, with bounds. */
    core_config cfg;
    core_config_default(&cfg);
    rh_err e;
    CU_ASSERT_EQUAL(cfg.policy_max_memory, 64u << 20);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "policy-max-memory", "1048576", &e), 1);
    CU_ASSERT_EQUAL(cfg.policy_max_memory, 1u << 20);
    CU_ASSERT_EQUAL(core_config_validate(&cfg, &e), 0);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "policy_max_memory", "1000", &e), 1);
    CU_ASSERT_EQUAL(core_config_validate(&cfg, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--policy-max-memory"));
    CU_ASSERT_PTR_NOT_NULL(strstr(core_config_help(), "--policy-max-memory"));
    hu_watchdog(0);
}

static void test_real_policies_unchanged(void)
{
    hu_watchdog(120);
    /* The sandbox leaves what policies use: sort, string.format, math,
     * metatables without finalizers, pcall. Shortest-first equals lof
     * reversed only by its own comparison, so compare against the same
     * order written two ways. */
    const char *sjf =
        "local order_mt = {__index = function(t, k) return 0 end}\n"
        "function policy(waiting, state)\n"
        "  local seen = setmetatable({}, order_mt)\n"
        "  local label = string.format('%d waiting, %.1f%% free', #waiting,\n"
        "                              100 * state.free_pages / state.total_pages)\n"
        "  assert(#label > 0 and seen[1] == 0 and math.max(1, 2) == 2 and utf8.char(72) == 'H')\n"
        "  table.sort(waiting, function(a, b)\n"
        "    if a.prompt_len ~= b.prompt_len then return a.prompt_len < b.prompt_len end\n"
        "    return a.index < b.index\n"
        "  end)\n"
        "  return waiting\n"
        "end\n";
    const char *sjf_positions =
        "function policy(waiting, state)\n"
        "  local pos = {}\n"
        "  for i = 1, #waiting do pos[i] = i end\n"
        "  table.sort(pos, function(x, y)\n"
        "    local a, b = waiting[x], waiting[y]\n"
        "    if a.prompt_len ~= b.prompt_len then return a.prompt_len < b.prompt_len end\n"
        "    return x < y\n"
        "  end)\n"
        "  return pos\n"
        "end\n";
    core_config cfg = base_cfg();
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_policy_path = h_script("sjf_positions.lua", sjf_positions);
    uint64_t want = run(&cfg);
    CU_ASSERT_EQUAL(H.n_msgs, 0);
    core_free(H.c);
    H.c = NULL;
    CU_ASSERT_NOT_EQUAL(want, fcfs_digest());   /* the comparison can tell */
    behaves("sjf.lua", sjf, want);
    hu_watchdog(0);
}

/* Runs a policy that must not fall back (its answer is read raw, so the
 * metamethods it carries never run): the run completes without a message. */
static void completes(const char *name, const char *text)
{
    core_config cfg = base_cfg();
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_policy_path = h_script(name, text);
    double t0 = rh_now();
    run(&cfg);
    if (!H.c) return;
    core_stats st;
    core_get_stats(H.c, &st);
    int ok = core_idle(H.c) && H.n_msgs == 0 && st.policy_errors == 0 && st.finished == N_REQ;
    if (!ok)
        printf("\n    %s: idle %d, %d messages, %llu errors, %llu finished, %.2f s: %s\n", name, core_idle(H.c), H.n_msgs,
               (unsigned long long)st.policy_errors, (unsigned long long)st.finished, rh_now() - t0, H.msg);
    CU_ASSERT(ok);
    core_free(H.c);
    H.c = NULL;
}

/* What a policy hands back is read raw: __len and __index on the list or an
 * entry never run. The strings' shared metatable is protected, and a C
 * function looping on C calls (table.concat over a C __index) is counted
 * call by call, inside pcall too. */
static void test_hostile_answers_and_c_loops(void)
{
    hu_watchdog(120);
    completes("len.lua", "function policy(w, s)\n  return setmetatable({}, {__len = function() while true do end end})\nend\n");
    completes("index_list.lua",
              "function policy(w, s)\n  return setmetatable({}, {__index = function() while true do end end})\nend\n");
    falls_back("index_entry.lua",
               "function policy(w, s)\n"
               "  return {setmetatable({}, {__index = function() while true do end end})}\n"
               "end\n",
               "index_entry.lua:", "entry 1 is not a position");
    falls_back("strmeta.lua",
               "function policy(w, s)\n"
               "  getmetatable('').__index = string.sub\n"
               "  return table.concat('a', '', 2, math.maxinteger)\n"
               "end\n",
               "strmeta.lua:2:", "index a boolean");
    falls_back("concat.lua",
               "function policy(w, s)\n"
               "  return table.concat(setmetatable({}, {__index = rawlen}), '', 1, math.maxinteger)\n"
               "end\n",
               "concat.lua:2:", "budget of 50000 instructions");
    falls_back("concat_pcall.lua",
               "function policy(w, s)\n"
               "  while true do pcall(table.concat, setmetatable({}, {__index = rawlen}), '', 1, math.maxinteger) end\n"
               "end\n",
               "concat_pcall.lua:2:", "budget of 50000 instructions");
    refused("strmeta_top.lua", "getmetatable('').__index = string.sub\nfunction policy() end\n", "strmeta_top.lua:1:",
            "index a boolean");
    /* An __index on _G that recurses through pcall, with no policy defined:
     * looking the policy up once ran it for ever, outside any budget (the
     * fuzzer's find). It is read raw. */
    double t0 = rh_now();
    refused("index_g.lua",
            "setmetatable(_G, {__index = function(tt, k) pcall(function() rawset(w, 1, pcall(function()\n"
            "  load('return 1')() load('return 1')() end)) end) return 0 end})\n",
            "index_g.lua", "defines no global function policy");
    CU_ASSERT(rh_now() - t0 < 10);
    hu_watchdog(0);
}

/* Work no hook sees in full (a sort is one call) is stopped by the wall
 * clock: with a budget no loop would spend, a call that keeps sorting stops
 * at --policy-max-seconds, its message naming the limit and the line. */
/* Every policy error names the script: one raised inside a C function (no
 * line of the script's), or by error(m, 0), gets the line policy() is
 * defined on; the script's own runtime errors keep their line. */
static void test_errors_name_the_script(void)
{
    falls_back("lua-err-level0.lua", "function policy(w, s)\n  error('plain', 0)\nend\n",
               "lua-err-level0.lua:1: plain", "");
    falls_back("lua-err-in-c.lua",
               "function policy(w, s)\n  setmetatable(setmetatable({}, {__metatable = 1}), {})\nend\n",
               "lua-err-in-c.lua:1: cannot change a protected metatable", "");
    falls_back("lua-err-own.lua", "\n\nfunction policy(w, s)\n  error('mine')\nend\n", "lua-err-own.lua:4: mine", "");
}

static void test_wall_clock_limit(void)
{
    hu_watchdog(120);
    core_config cfg = base_cfg();
    cfg.policy = CORE_POLICY_LUA;
    cfg.policy_max_instructions = 1ull << 50;
    cfg.policy_max_seconds = 0.02;
    cfg.lua_policy_path = h_script("sorts.lua",
                                   "local t = {}\nfor i = 1, 3000 do t[i] = -i end\n"
                                   "function policy(w, s)\n  while true do table.sort(t, nil) end\nend\n");
    double t0 = rh_now();
    uint64_t d = run(&cfg);
    double took = rh_now() - t0;
    if (!H.c) return;
    core_stats st;
    core_get_stats(H.c, &st);
    CU_ASSERT_EQUAL(d, fcfs_digest());
    CU_ASSERT(st.policy_errors > 20);
    CU_ASSERT_PTR_NOT_NULL(strstr(H.msg, "sorts.lua:4:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(H.msg, "time limit of 0.02 s"));
    /* every failed call stopped within a few hook periods of its limit */
    CU_ASSERT(took < 0.1 * (double)st.policy_errors + 5);
    printf("(%llu calls stopped at 0.02 s, %.2f s in all) ", (unsigned long long)st.policy_errors, took);
    core_free(H.c);
    H.c = NULL;
    hu_watchdog(0);
}

/* ---- work inside one C call or one instruction, bounded ---- */

/* A few requests behind one running slot, so the policy runs at most steps;
 * every call fails. want "budget": work the sandbox charges, which must
 * end by a budget of a million instructions, well before a time limit of
 * 2 s; want "time limit": work no charge sees, which must end by a limit
 * of 0.5 s under the default budget (the load's limit too: the strings a
 * script makes at load must fit in it on a busy machine). Either way each call ends within
 * twice its time limit on average (a hook period's work past the deadline
 * at most), and the message names the script's line. */
static void stops_in_time(const char *name, const char *text, const char *where, const char *want)
{
    bool by_budget = strcmp(want, "budget") == 0;
    const double max_seconds = by_budget ? 2 : 0.5;
    core_config cfg = base_cfg();
    cfg.policy = CORE_POLICY_LUA;
    cfg.max_running_requests = 1;
    cfg.policy_max_memory = 96u << 20;
    cfg.policy_max_instructions = by_budget ? 1000000 : 10000000;
    cfg.policy_max_seconds = max_seconds;
    cfg.lua_policy_path = h_script(name, text);
    if (!h_new(&H, &cfg)) return;
    for (uint64_t id = 1; id <= 4; id++) h_add(&H, id, 64, 4, 0);
    double t0 = rh_now(), now = 0;
    for (int step = 0; step < 200 && !core_idle(H.c); step++, now += 0.01) h_step(&H, now);
    double took = rh_now() - t0;
    core_stats st;
    core_get_stats(H.c, &st);
    double per_call = st.policy_errors ? took / (double)st.policy_errors : took;
    int ok = core_idle(H.c) && st.policy_errors >= 3 && per_call < 2 * max_seconds && strstr(H.msg, where) &&
             strstr(H.msg, want);
    printf("\n    %-14s %llu calls, %.3f s each: %s", name, (unsigned long long)st.policy_errors, per_call, H.msg);
    CU_ASSERT(ok);
    core_free(H.c);
    H.c = NULL;
}

/* Each of these once ran for minutes or for ever inside one call: a sort
 * of long equal strings (no hook fires inside C's sort, and equal strings
 * compare by content), a sort of many numbers, comparisons of long strings
 * (one instruction each), and every other C loop of the libraries. The
 * charged ones end by the instruction budget, deterministically; what no
 * charge can see (a < b and a == b on long strings) by the clock. */
static void test_c_work_bounded(void)
{
    hu_watchdog(300);
    const char *big = "local s = string.rep('x', 8000000)\n";
    char text[1024];
#define ATTACK(name, body, want)                                                                                    \
    do {                                                                                                            \
        snprintf(text, sizeof text, "%s%s", big, body);                                                            \
        stops_in_time(name, text, name ":", want);                                                                  \
    } while (0)
    ATTACK("sort_strings.lua",
           "local t = {}\nfor i = 1, 2000 do t[i] = s end\nfunction policy(w, st)\n  table.sort(t)\nend\n", "budget");
    ATTACK("sort_long.lua",
           "local t = {}\nfor i = 1, 5000 do t[i] = s end\nfunction policy(w, st)\n  table.sort(t)\nend\n", "budget");
    ATTACK("sort_numbers.lua",
           "local t = {}\nfor i = 1, 400000 do t[i] = (i * 7919) % 1000003 end\n"
           "function policy(w, st)\n  while true do table.sort(t) end\nend\n",
           "budget");
    /* The clock's cases build their strings in the first call, not at load:
     * the load has the same 0.5 s limit, and two 8 MB strings made under
     * the sanitizers on a busy machine once took longer than that. */
    stops_in_time("less.lua",
                  "local s\nfunction policy(w, st)\n  s = s or string.rep('x', 8000000)\n  repeat until s < s\nend\n",
                  "less.lua:", "time limit");
    stops_in_time("equal.lua",
                  "local s, t\nfunction policy(w, st)\n  s = s or string.rep('x', 8000000)\n"
                  "  t = t or string.rep('x', 8000000)\n  while s == t do end\nend\n",
                  "equal.lua:", "time limit");
    ATTACK("rawequal.lua",
           "local t = string.rep('x', 8000000)\nfunction policy(w, st)\n  while rawequal(s, t) do end\nend\n",
           "budget");
    ATTACK("dotdot.lua", "function policy(w, st)\n  while true do local u = s .. 'y' end\nend\n", "budget");
    ATTACK("rep.lua", "function policy(w, st)\n  while true do local u = string.rep('ab', 4000000) end\nend\n",
           "budget");
    ATTACK("format.lua", "function policy(w, st)\n  while true do local u = string.format('%s.', s) end\nend\n",
           "budget");
    ATTACK("upper.lua", "function policy(w, st)\n  while true do local u = s:upper() end\nend\n", "budget");
    ATTACK("concat.lua",
           "local t = {}\nfor i = 1, 1000000 do t[i] = '' end\n"
           "function policy(w, st)\n  while true do table.concat(t) end\nend\n",
           "budget");
    ATTACK("shift.lua",
           "local t = {}\nfor i = 1, 1000000 do t[i] = i end\n"
           "function policy(w, st)\n  while true do table.insert(t, 1, 0); table.remove(t, 1) end\nend\n",
           "budget");
    ATTACK("unpack.lua",
           "local t = {}\nfor i = 1, 200000 do t[i] = i end\n"
           "function policy(w, st)\n  while true do select('#', table.unpack(t)) end\nend\n",
           "budget");
    ATTACK("byte.lua", "function policy(w, st)\n  while true do select('#', s:byte(1, 200000)) end\nend\n", "budget");
    ATTACK("utf8len.lua", "function policy(w, st)\n  while true do utf8.len(s) end\nend\n", "budget");
    ATTACK("tonumber.lua",
           "local d = string.rep('1', 8000000)\nfunction policy(w, st)\n  while true do tonumber(d) end\nend\n",
           "budget");
    ATTACK("coerce.lua",
           "local d = string.rep('1', 8000000)\nfunction policy(w, st)\n  while true do local x = d + 0 end\nend\n",
           "budget");
#undef ATTACK
    printf("\n    ");
    hu_watchdog(0);
}

/* ---- the circuit breaker ---- */

/* Runs `text` as the policy with the breaker at max_failures; the stats. */
static core_stats run_breaker(const char *name, const char *text, uint32_t max_failures, uint64_t *digest)
{
    core_config cfg = base_cfg();
    cfg.policy = CORE_POLICY_LUA;
    cfg.policy_max_failures = max_failures;
    cfg.lua_policy_path = h_script(name, text);
    core_stats st = {0};
    *digest = run_n(&cfg, 1200);
    if (!H.c) return st;
    core_get_stats(H.c, &st);
    return st;
}

/* A script that fails on every call trips the breaker after max_failures
 * failures: the next 64 calls are not made, then one is tried, fails and
 * trips it again for 128, then 256...; every step fcfs all the same, and
 * one warning per trip. Counted by hand from the calls the core would
 * have made (the run with the breaker off makes every one). */
static void test_breaker(void)
{
    hu_watchdog(120);
    const char *always = "function policy(w, s)\n  error('no')\nend\n";
    uint64_t d_off, d_on;
    core_stats off = run_breaker("breaker_off.lua", always, 0, &d_off);
    core_free(H.c);
    H.c = NULL;
    core_stats on = run_breaker("breaker_on.lua", always, 16, &d_on);
    int msgs = H.n_msgs;
    core_free(H.c);
    H.c = NULL;
    uint64_t calls = off.policy_errors, errors = 0, skipped = 0, trips = 0, backoff = 64;
    /* by hand: 16 failures, then (skip backoff, one failed trial) while calls last */
    for (uint64_t k = 0; k < calls;) {
        if (errors < 16) {
            errors++, k++;
            if (errors == 16) trips++;
            continue;
        }
        uint64_t s = backoff < calls - k ? backoff : calls - k;
        skipped += s, k += s;
        if (k < calls) errors++, k++, trips++, backoff *= 2;
    }
    printf("(%llu calls: %llu made, %llu skipped, %llu trips) ", (unsigned long long)calls,
           (unsigned long long)on.policy_errors, (unsigned long long)on.policy_skipped,
           (unsigned long long)on.policy_trips);
    CU_ASSERT(calls > 16 + 64 + 1 + 128 + 1);   /* long enough for two trips */
    CU_ASSERT_EQUAL(d_on, d_off);
    CU_ASSERT_EQUAL(on.policy_errors, errors);
    CU_ASSERT_EQUAL(on.policy_skipped, skipped);
    CU_ASSERT_EQUAL(on.policy_trips, trips);
    CU_ASSERT(trips >= 2);
    CU_ASSERT_EQUAL(msgs, 1 + (int)trips);   /* the first error, and each trip */

    /* Failing its first 17 calls: trips at 16, the trial (17th) fails and
     * trips it again, the next trial succeeds and closes it: from then on
     * every call is made and answers (here: queue order reversed). */
    const char *heals = "local n = 0\nfunction policy(w, s)\n  n = n + 1\n  if n <= 17 then error('not yet') end\n"
                        "  local o = {}\n  for i = #w, 1, -1 do o[#o + 1] = i end\n  return o\nend\n";
    core_stats h = run_breaker("breaker_heals.lua", heals, 16, &d_on);
    core_free(H.c);
    H.c = NULL;
    CU_ASSERT_EQUAL(h.policy_errors, 17);
    CU_ASSERT_EQUAL(h.policy_trips, 2);
    CU_ASSERT_EQUAL(h.policy_skipped, 64 + 128);
    CU_ASSERT_NOT_EQUAL(d_on, d_off);   /* its answers were used */

    /* Failing every other call never trips it: each success closes it. */
    const char *flaky = "local n = 0\nfunction policy(w, s)\n  n = n + 1\n  if n % 2 == 0 then error('odd') end\nend\n";
    core_stats f = run_breaker("breaker_flaky.lua", flaky, 2, &d_on);
    core_free(H.c);
    H.c = NULL;
    CU_ASSERT_EQUAL(f.policy_trips, 0);
    CU_ASSERT_EQUAL(f.policy_skipped, 0);
    CU_ASSERT(f.policy_errors > 20);

    /* The knob: 0 is never; set by name. */
    core_config cfg;
    core_config_default(&cfg);
    rh_err e;
    CU_ASSERT_EQUAL(cfg.policy_max_failures, 16);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "policy-max-failures", "3", &e), 1);
    CU_ASSERT_EQUAL(cfg.policy_max_failures, 3);
    CU_ASSERT_PTR_NOT_NULL(strstr(core_config_help(), "--policy-max-failures"));
    hu_watchdog(0);
}

void register_test_hardening_lua(void)
{
    CU_pSuite s = CU_add_suite("hardening_lua", NULL, NULL);
    CU_add_test(s, "no io, os, load, require, debug: refused at load, fcfs per step", test_no_way_out);
    CU_add_test(s, "the instruction budget survives pcall, xpcall and to-be-closed variables",
                test_budget_cannot_be_swallowed);
    CU_add_test(s, "no hang inside C calls: __gc, table.move, string.rep", test_where_the_hook_cannot_reach);
    CU_add_test(s, "--policy-max-memory caps the state: growing, hoarding, at load", test_memory_cap);
    CU_add_test(s, "real policies are unchanged by the sandbox", test_real_policies_unchanged);
    CU_add_test(s, "hostile answers and C loops: read raw, strings protected, C calls counted", test_hostile_answers_and_c_loops);
    CU_add_test(s, "--policy-max-seconds stops work no hook sees", test_wall_clock_limit);
    CU_add_test(s, "every policy error names the script", test_errors_name_the_script);
    CU_add_test(s, "the breaker: trips after --policy-max-failures, backs off doubling, closes on success", test_breaker);
    CU_add_test(s, "work inside C calls and long-string instructions ends within twice the limit", test_c_work_bounded);
}
