/* fuzz_policy.c — a --policy-script is outside input that runs inside the
 * scheduler: the bytes drive a small Lua grammar (loops that never end,
 * recursion, metatables on what it is shown and on what it returns,
 * errors that are not strings, __close handlers, huge strings and
 * tables, sorts with lying comparators, the sandbox's missing functions,
 * answers of every wrong shape), and the program is run as a policy
 * through the core. Every input must leave the process standing and the
 * core consistent, no step may run far past the policy's time limit, every
 * request must still be served (a policy may reorder and hold back, never
 * starve an idle core), and a policy error must name the script.
 * A violation aborts with what broke, so the fuzzer keeps the input. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/core/core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The policy's limits here, and how far past the time limit one step may
 * run before it counts as a finding: the guard is checked at the hooks, so
 * a step ends at most one C call (bounded by the memory cap) past it. */
#define MAX_SECONDS 0.05
#define MAX_INSTRUCTIONS 200000   /* or, for one input in two, none the time limit does not come first */
#define MAX_MEMORY (4u << 20)
#define STEP_LIMIT_S 1.0
#define N_REQUESTS 6

typedef struct gen {
    const uint8_t *p;
    size_t n;
    char *out;
    size_t len, cap;
    int depth;
} gen;

static unsigned pick(gen *g, unsigned k)
{
    if (!g->n) return 0;
    unsigned v = *g->p++ % k;
    g->n--;
    return v;
}

static void emit(gen *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(g->out + g->len, g->cap - g->len, fmt, ap);
    va_end(ap);
    if (w > 0) g->len += (size_t)w < g->cap - g->len ? (size_t)w : g->cap - g->len - 1;
}

#define ONE_OF(g, arr) emit(g, "%s", arr[pick(g, sizeof arr / sizeof arr[0])])

static void block(gen *g);
static void expr(gen *g);

static void number(gen *g)
{
    static const char *const v[] = {"0", "1", "-1", "2", "#w", "i", "s.waiting", "math.huge", "-math.huge", "0/0",
                                    "math.maxinteger", "math.mininteger", "1e308", "0.5", "2^53", "s.step",
                                    "(w[1] and w[1].prompt_len or 0)", "s.free_pages", "#t"};
    ONE_OF(g, v);
}

static void count(gen *g)
{
    static const char *const v[] = {"3", "10", "1000", "1e6", "1e9", "math.huge", "math.maxinteger", "#w"};
    ONE_OF(g, v);
}

static void metatable(gen *g)
{
    static const char *const head[] = {
        "{__index = function(tt, k) ", "{__len = function() ",  "{__lt = function(a, b) ",
        "{__tostring = function() ",   "{__close = function() ", "{__eq = function(a, b) ",
        "{__concat = function(a, b) ", "{__call = function(self, ...) ", "{__newindex = function(tt, k, v) ",
        "{__gc = function() ",
    };
    if (pick(g, 6) == 0) {
        static const char *const plain[] = {"{__metatable = 1}", "{__mode = 'k'}", "{__index = w}", "{__len = 5}",
                                            "{__index = string}"};
        ONE_OF(g, plain);
        return;
    }
    ONE_OF(g, head);
    block(g);
    emit(g, " return ");
    expr(g);
    emit(g, " end}");
}

static void function(gen *g)
{
    emit(g, "function(a, b) ");
    block(g);
    emit(g, " return ");
    expr(g);
    emit(g, " end");
}

static void table(gen *g)
{
    static const char *const v[] = {"w", "t", "{}", "{1, 2, 3}", "{w[1], w[1]}", "s", "string", "_G"};
    if (g->depth < 4 && pick(g, 4) == 0) {
        g->depth++;
        emit(g, "setmetatable({}, ");
        metatable(g);
        emit(g, ")");
        g->depth--;
        return;
    }
    ONE_OF(g, v);
}

static void string_expr(gen *g)
{
    static const char *const v[] = {"'x'", "''", "string.rep('ab', ", "('x'):rep(", "string.rep('', ",
                                    "tostring(", "string.format('%5.2f|%q', 1.5, ", "table.concat(t, ','",
                                    "utf8.char(", "string.char(65, ", "string.pack('>s4', ", "('%099d'):format(",
                                    "string.sub(('y'):rep(100), "};
    unsigned k = pick(g, sizeof v / sizeof v[0]);
    emit(g, "%s", v[k]);
    if (k < 2) return;
    if (k == 7) {
        emit(g, ")");
        return;
    }
    if (k >= 10 && k != 12) {
        emit(g, "%s)", k == 10 ? "'abc'" : "7");
        return;
    }
    if (k == 2 || k == 3 || k == 4) count(g);
    else expr(g);
    emit(g, ")");
}

static void expr(gen *g)
{
    if (g->depth >= 4) {
        number(g);
        return;
    }
    g->depth++;
    switch (pick(g, 16)) {
    case 0: case 1: number(g); break;
    case 2: string_expr(g); break;
    case 3: table(g); break;
    case 4: function(g); break;
    case 5: emit(g, "pcall("); function(g); emit(g, ")"); break;
    case 6: emit(g, "select('#', table.unpack(t, 1, "); count(g); emit(g, "))"); break;
    case 7: emit(g, "#"); table(g); break;
    case 8: emit(g, "("); expr(g); emit(g, " .. "); expr(g); emit(g, ")"); break;
    case 9: emit(g, "("); expr(g); emit(g, pick(g, 2) ? " + " : " < "); expr(g); emit(g, ")"); break;
    case 10: emit(g, "next("); table(g); emit(g, ")"); break;
    case 11: emit(g, pick(g, 2) ? "rawlen(" : "rawget("); table(g); emit(g, ", 1)"); break;
    case 12: emit(g, "getmetatable('')"); break;
    case 13: emit(g, "math.random("); number(g); emit(g, ")"); break;
    case 14: emit(g, "f("); number(g); emit(g, ")"); break;
    default: emit(g, "("); function(g); emit(g, ")()"); break;
    }
    g->depth--;
}

static void condition(gen *g)
{
    static const char *const v[] = {"true", "false", "i < 10", "#t < 100", "w[1]", "s.running > 0", "#w > 2"};
    ONE_OF(g, v);
}

static void statement(gen *g)
{
    static const char *const simple[] = {
        "i = i + 1",
        "t = {}",
        "collectgarbage()",
        "load('return 1')()",
        "string.find('a', 'a')",
        "table.move(t, 1, 1e9, 2)",
        "coroutine.wrap(function() end)()",
        "math.randomseed(1)",
        "getmetatable('').__index = string.rep",
        "do local s2 = 'x' for j = 1, 40 do s2 = s2 .. s2 end end",
        "while true do end",
        "repeat i = i + 1 until false",
        "do ::top:: i = i + 1 goto top end",
        "table.sort(t)",
        "table.sort(w, function(a, b) return true end)",
        "table.sort(w, function(a, b) return a.prompt_len > b.prompt_len end)",
        "for j = 1, 2e5 do t[j] = j end",
        "for j = 1, 1e5 do t[j] = tostring(j) end",
        "policy = nil",
        "policy = function() return w end",
        "s = nil",
        "w[1] = nil",
        "table.remove(t)",
        "error('plain', 0)",
        "error()",
        "error({}, 2)",
        "print(#w)",
        "local u = {table.unpack(t, 1, 1e7)}",
        "string.rep('x', 1e18)",
        "string.rep('', 1e18)",
        "for k, v in pairs(w) do t[#t + 1] = v end",
    };
    if (g->depth >= 3) {
        ONE_OF(g, simple);
        return;
    }
    g->depth++;
    switch (pick(g, 16)) {
    case 0: emit(g, "local x = "); expr(g); break;
    case 1: emit(g, "t[#t + 1] = "); expr(g); break;
    case 2: emit(g, "for j = 1, "); count(g); emit(g, " do "); block(g); emit(g, " end"); break;
    case 3: emit(g, "while "); condition(g); emit(g, " do "); block(g); emit(g, " i = i + 1 end"); break;
    case 4: emit(g, "table.sort("); table(g); emit(g, ", "); function(g); emit(g, ")"); break;
    case 5: emit(g, "pcall("); function(g); emit(g, ")"); break;
    case 6: emit(g, "xpcall("); function(g); emit(g, ", "); function(g); emit(g, ")"); break;
    case 7: emit(g, "error("); expr(g); emit(g, ")"); break;
    case 8: emit(g, "error(setmetatable({}, "); metatable(g); emit(g, "))"); break;
    case 9: emit(g, "do local c <close> = setmetatable({}, "); metatable(g); emit(g, ") "); block(g); emit(g, " end"); break;
    case 10: emit(g, "setmetatable("); table(g); emit(g, ", "); metatable(g); emit(g, ")"); break;
    case 11: emit(g, "rawset(w, 1, "); expr(g); emit(g, ")"); break;
    case 12: emit(g, "if "); condition(g); emit(g, " then "); block(g); emit(g, " else "); block(g); emit(g, " end"); break;
    case 13: emit(g, "for k, v in pairs("); table(g); emit(g, ") do "); block(g); emit(g, " end"); break;
    default: ONE_OF(g, simple); break;
    }
    g->depth--;
}

static void block(gen *g)
{
    for (unsigned k = pick(g, 3); k > 0; k--) {
        statement(g);
        emit(g, " ");
    }
}

static void answer(gen *g)
{
    static const char *const v[] = {
        "w", "t", "nil", "{}", "{1}", "{#w}", "{#w + 1}", "{0}", "{1, 1}", "{0.5}", "{'1'}", "{w[1]}", "5", "'x'",
        "{table.unpack(t)}", "(function() local r = {} for j = #w, 1, -1 do r[#r + 1] = j end return r end)()",
        "{math.huge}", "{-1}", "{w[#w]}", "{[2] = 1}", "{1, nil, 2}",
    };
    if (pick(g, 5) == 0) {
        emit(g, "setmetatable({}, ");
        metatable(g);
        emit(g, ")");
        return;
    }
    ONE_OF(g, v);
}

/* The whole script: a few statements run when it loads, then policy(). */
static void program(gen *g)
{
    emit(g, "local t, i = {}, 1\n");
    if (pick(g, 4) == 0) {
        block(g);
        emit(g, "\n");
    }
    if (pick(g, 16) == 0) return;   /* no policy() at all */
    emit(g, "function policy(w, s)\n  local t, i = {}, 1\n"
            "  local function f(n) if n > 200 then return n end return f(n + 1) + 1 end\n  ");
    block(g);
    emit(g, "\n  return ");
    answer(g);
    emit(g, "\nend\n");
}

static double mono(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double longest;   /* the longest step seen, reported as it grows and at exit */
static char path[64];

static void at_exit(void)
{
    fprintf(stderr, "fuzz_policy: the longest step took %.3f s, against --policy-max-seconds %.2f\n", longest,
            MAX_SECONDS);
    if (path[0]) unlink(path);
}

static void timed(double t0, const char *what, const char *script)
{
    double dt = mono(NULL) - t0;
    if (dt > longest) {
        if (dt > MAX_SECONDS && dt > longest * 1.25)
            fprintf(stderr, "fuzz_policy: longest %s so far %.3f s (limit %.2f s)\n", what, dt, MAX_SECONDS);
        longest = dt;
    }
    if (dt > STEP_LIMIT_S) {
        fprintf(stderr, "%s took %.3f s, past %.1f s, with --policy-max-seconds %.2f:\n%s\n", what, dt, STEP_LIMIT_S,
                MAX_SECONDS, script);
        abort();
    }
}

static void must(int ok, const char *what, const char *script)
{
    if (ok) return;
    fprintf(stderr, "%s\n--- the script:\n%s\n", what, script);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char script[16384];
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/fuzz_policy.%d.lua", (int)getpid());
        atexit(at_exit);
    }
    gen g = {data, size, script, 0, sizeof script, 0};
    unsigned vllm = pick(&g, 2), running = 1 + pick(&g, 8), timed_only = pick(&g, 2);
    program(&g);
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    fwrite(script, 1, g.len, f);
    fclose(f);

    core_config cfg;
    core_config_default(&cfg);
    cfg.page_size = 4;
    cfg.max_total_tokens = 4096;
    cfg.preset = vllm ? CORE_PRESET_VLLM : CORE_PRESET_SGLANG;
    cfg.max_running_requests = running;
    cfg.policy = CORE_POLICY_LUA;
    cfg.lua_policy_path = path;
    cfg.policy_max_instructions = timed_only ? 4000000000ull : MAX_INSTRUCTIONS;
    cfg.policy_max_memory = MAX_MEMORY;
    cfg.policy_max_seconds = MAX_SECONDS;
    core_hooks hooks = {.guard_clock = mono};
    rh_err e;
    double t0 = mono(NULL);
    core *c = core_new(&cfg, &hooks, &e);
    timed(t0, "loading the script", script);
    if (!c) {
        must(strstr(e.msg, path) != NULL, "a script refused without its name", script);
        return 0;
    }

    int32_t tokens[48];
    for (int i = 0; i < 48; i++) tokens[i] = i % 7;
    for (uint32_t r = 0; r < N_REQUESTS; r++) {
        core_req_desc d = {.id = r, .prompt_len = 8 + 7 * r, .max_new_tokens = 1 + r % 3, .prompt_tokens = tokens};
        must(core_add(c, &d, 0.01 * r, &e) != NULL, e.msg, script);
    }
    /* Served one at a time, each request needs at most a prefill and its
     * outputs: anything beyond that bound is a starved queue. */
    double now = 0.1;
    int steps = 0;
    while (!core_idle(c)) {
        must(++steps <= 4 * N_REQUESTS + 8, "requests left unserved: the policy starved the core", script);
        core_batch b;
        t0 = mono(NULL);
        uint32_t n = core_schedule(c, now, &b);
        timed(t0, "step", script);
        must(core_check(c, &e) == 0, e.msg, script);
        must(n > 0, "an empty batch while requests wait", script);
        now += 0.01;
        must(core_complete(c, &b, NULL, now, &e) == 0, e.msg, script);
        must(core_check(c, &e) == 0, e.msg, script);
    }
    const char *err = core_policy_error(c);
    if (err && !strstr(err, path)) {
        fprintf(stderr, "a policy error without the script's name: \"%s\"\n", err);
        must(0, "unnamed error", script);
    }
    core_stats st;
    core_get_stats(c, &st);
    must(st.finished == N_REQUESTS, "a request lost", script);
    core_free(c);
    return 0;
}
