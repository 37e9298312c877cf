/* policy_lua.c — a waiting-queue policy written in Lua 5.4.
 *
 * The script (or the caller's function) is called once per step that admits:
 *   policy(waiting, state) -> order
 * waiting  a list of tables, one per request in queue order, with fields
 *          index (its position, 1-based), id, prompt_len, max_new_tokens,
 *          output_len (tokens produced before a retraction), cached_len
 *          (prompt tokens the prefix cache holds now), arrival, wait
 *          (now - arrival), retractions;
 * state    now, step, page_size, total_pages, free_pages, cached_pages,
 *          running, waiting (the whole queue), max_running_requests,
 *          chunked_prefill_size, max_prefill_tokens, new_token_ratio,
 *          scheduler ("sglang" or "vllm").
 * order    a list of positions (or of the request tables themselves, so
 *          `table.sort(waiting, f); return waiting` works) in the order to
 *          offer them; requests left out wait this step. nil: queue order.
 * Any error — raised, a bad return value, running past the instruction
 * budget, running out of the memory cap — makes the step use fcfs, and the
 * message names the script's file and line. The call runs under a count
 * hook, saved and restored, so a caller-owned state keeps its own hooks.
 *
 * A script file (a server's or a simulation's --policy-script) runs in a
 * sandbox of its own: a state whose allocator holds at most
 * policy_max_memory bytes, with only base, table, string, math and utf8, and
 * without everything that could reach outside the state or run beyond the
 * count hook's reach (see sandbox() for the list and why). A caller-owned
 * state (a Lua experiment script's own function) is the caller's: neither
 * the cap nor the sandbox applies to it. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/internal.h"

#define HOOK_EVERY 1000
/* What a function call costs against the budget, beyond the instructions
 * that make it. C functions run without instructions (table.concat calling
 * a C __index ten million times, say); the call hook counts each such call,
 * so a loop inside C is bounded like a loop in Lua. */
#define CALL_COST 10
#define HOOK_MASK (LUA_MASKCOUNT | LUA_MASKCALL)

/* The bytes an owned state holds, against its cap. */
typedef struct lua_mem {
    size_t used, cap;
} lua_mem;

struct core_lua {
    lua_State *L;
    bool owned;
    lua_mem mem;
    int ref;
    char where[200];            /* "file:line" where policy() is defined */
    char src[160];              /* its "file" alone: a message that does not start with it gets where */
    uint8_t *seen;
    uint32_t cap_seen;
};

/* The running call's instruction budget. Thread-local because sweeps may
 * run one core per thread, each with its own state; saved and restored
 * around every call so nested calls (a policy calling into a simulator
 * that steps another core) keep their own. */
typedef struct budget {
    long long left, limit;
    /* The wall-clock guard, for work no hook sees (a sort of a million
     * numbers is one call): checked at the hooks, so a call stops at the
     * first hook after its deadline. clock NULL: no guard. */
    double (*clock)(void *ctx);
    void *clock_ctx;
    double deadline, max_seconds;
    unsigned calls;
    int spent;                  /* raised once: every later hook raises msg again */
    char msg[300];
} budget;
static _Thread_local budget *tl_budget;

static void count_hook(lua_State *L, lua_Debug *ar)
{
    budget *b = tl_budget;
    if (!b) return;
    if (b->spent) {
        /* Raised again at every instruction and call: a policy that catches
         * the error with pcall gets it back at once, so the budget cannot be
         * swallowed. The same message each time: a call the unwinding makes
         * (a buffer's __close) has no line of the script's to name. */
        lua_pushstring(L, b->msg);
        lua_error(L);
    }
    int counted = ar->event == LUA_HOOKCOUNT;
    b->left -= counted ? HOOK_EVERY : CALL_COST;
    int late = b->clock && (counted || (++b->calls & 7) == 0) && b->clock(b->clock_ctx) > b->deadline;
    if (b->left >= 0 && !late) return;
    b->spent = 1;
    lua_sethook(L, count_hook, HOOK_MASK, 1);   /* the caller restores the hook */
    char what[96];
    if (b->left < 0) snprintf(what, sizeof what, "its budget of %lld instructions", b->limit);
    else snprintf(what, sizeof what, "its time limit of %g s (--policy-max-seconds)", b->max_seconds);
    /* The line of the innermost Lua frame: a call event's own frame is
     * the callee, often a C function (pcall, table.sort) without one. */
    lua_Debug at;
    int level = 0, found = 0;
    while (!found && lua_getstack(L, level++, &at)) found = lua_getinfo(L, "Sl", &at) && at.currentline > 0;
    if (found) snprintf(b->msg, sizeof b->msg, "%s:%d: policy ran past %s", at.short_src, at.currentline, what);
    else snprintf(b->msg, sizeof b->msg, "policy ran past %s", what);
    lua_pushstring(L, b->msg);
    lua_error(L);
}

static void describe_function(core_lua *l)
{
    lua_State *L = l->L;
    lua_Debug ar;
    lua_rawgeti(L, LUA_REGISTRYINDEX, l->ref);
    if (lua_getinfo(L, ">S", &ar)) {
        snprintf(l->where, sizeof l->where, "%s:%d", ar.short_src, ar.linedefined);
        snprintf(l->src, sizeof l->src, "%s:", ar.short_src);
    } else {
        snprintf(l->where, sizeof l->where, "policy");
    }
}

/* Lua's allocator with a cap on what the state holds: past it an
 * allocation fails, Lua raises a memory error, and the step falls back.
 * (With ptr NULL, osize is the new object's type, not a size.) */
static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    lua_mem *m = ud;
    if (!ptr) osize = 0;
    if (nsize == 0) {
        free(ptr);
        m->used -= osize;
        return NULL;
    }
    if (nsize > osize && nsize - osize > m->cap - m->used) return NULL;
    void *p = realloc(ptr, nsize);
    if (p) m->used = m->used - osize + nsize;
    return p;
}

/* string.rep with an empty string (and separator) loops n times in C
 * without allocating, beyond both the count hook and the memory cap; the
 * answer is "" anyway. Any other call allocates its whole result first, so
 * the cap bounds its loop. */
/* Calls the wrapped original (upvalue 1) with every argument, returns its one result. */
static int call_original(lua_State *L)
{
    int nargs = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, nargs, 1);
    return 1;
}

static int sandboxed_rep(lua_State *L)
{
    size_t l, lsep;
    luaL_checklstring(L, 1, &l);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_optlstring(L, 3, "", &lsep);
    if (n <= 0 || l + lsep == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    return call_original(L);
}

/* setmetatable without __gc: finalizers run with hooks off, whenever the
 * collector likes (during the next allocation, or in lua_close), so an
 * endless finalizer would hang the scheduler past every budget. */
static int sandboxed_setmetatable(lua_State *L)
{
    if (lua_type(L, 2) == LUA_TTABLE) {
        lua_pushliteral(L, "__gc");
        int t = lua_rawget(L, 2);
        lua_pop(L, 1);
        if (t != LUA_TNIL) return luaL_error(L, "setmetatable: a policy may not set a __gc finalizer");
    }
    return call_original(L);
}

/* xpcall whose message handler runs after the error unwound, as a handler
 * of pcall's result would. Lua calls a real xpcall's handler at the point
 * of the error, and for the budget's error that point is inside the count
 * hook, where hooks are off: an endless handler would never be stopped.
 * (Without the debug library a handler cannot look at the stack anyway.)
 * Written in C so a budget error raised after it names the script's line. */
static int sandboxed_xpcall(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushboolean(L, 1);
    lua_pushvalue(L, 1);
    lua_rotate(L, 3, 2);   /* f, msgh, true, f, args... */
    int status = lua_pcall(L, n - 2, LUA_MULTRET, 0);
    if (status == LUA_OK) return lua_gettop(L) - 2;
    if (status == LUA_ERRRUN) {
        lua_pushvalue(L, 2);
        lua_insert(L, -2);
        lua_call(L, 1, 1);
    }
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
}

/* print on stderr: a policy's output is a diagnostic, and stdout belongs to
 * the command (`rehearse sim --json` prints its result there). */
static int sandboxed_print(lua_State *L)
{
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        size_t len;
        const char *s = luaL_tolstring(L, i, &len);
        if (i > 1) fputc('\t', stderr);
        fwrite(s, 1, len, stderr);
        lua_pop(L, 1);
    }
    fputc('\n', stderr);
    fflush(stderr);
    return 0;
}

static void drop_field(lua_State *L, const char *name)
{
    lua_pushnil(L);
    lua_setfield(L, -2, name);
}

static void wrap_field(lua_State *L, const char *name, lua_CFunction f)
{
    lua_getfield(L, -1, name);
    lua_pushcclosure(L, f, 1);
    lua_setfield(L, -2, name);
}

/* A policy is a pure function of what it is shown, so it is deterministic,
 * behaves the same in both clocks, and cannot reach the machine it runs on.
 * Opened: base, table, string, math, utf8; never io, os, package (require),
 * debug or coroutine. Then removed or tamed:
 *   dofile, loadfile, load   run code from files, or from strings and
 *                            binary chunks (which can crash the VM);
 *   collectgarbage           the collector belongs to the host;
 *   string.find, match, gmatch, gsub
 *                            Lua patterns backtrack inside one C call,
 *                            exponentially on a crafted pattern, and the
 *                            count hook only fires between instructions;
 *   table.move               loops in C over any index range, even of nils;
 *   string.rep, setmetatable, xpcall, print
 *                            see sandboxed_rep, sandboxed_setmetatable,
 *                            sandboxed_xpcall and sandboxed_print;
 *   the strings' metatable   shared by every string, and its __index is
 *                            what s:f() and s[k] run: protected
 *                            (__metatable), so getmetatable("").__index =
 *                            string.sub cannot turn indexing a string into
 *                            a C call inside another C function's loop.
 * Runs protected: an allocation failure here is an error, not a panic. */
static int sandbox(lua_State *L)
{
    static const luaL_Reg libs[] = {
        {LUA_GNAME, luaopen_base},       {LUA_TABLIBNAME, luaopen_table}, {LUA_STRLIBNAME, luaopen_string},
        {LUA_MATHLIBNAME, luaopen_math}, {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL},
    };
    lua_Integer seed = lua_tointeger(L, 1);
    for (const luaL_Reg *lib = libs; lib->func; lib++) {
        luaL_requiref(L, lib->name, lib->func, 1);
        lua_pop(L, 1);
    }
    lua_pushglobaltable(L);
    drop_field(L, "dofile");
    drop_field(L, "loadfile");
    drop_field(L, "load");
    drop_field(L, "collectgarbage");
    wrap_field(L, "setmetatable", sandboxed_setmetatable);
    lua_pushcfunction(L, sandboxed_xpcall);
    lua_setfield(L, -2, "xpcall");
    lua_pushcfunction(L, sandboxed_print);
    lua_setfield(L, -2, "print");
    lua_getfield(L, -1, LUA_STRLIBNAME);
    drop_field(L, "find");
    drop_field(L, "match");
    drop_field(L, "gmatch");
    drop_field(L, "gsub");
    wrap_field(L, "rep", sandboxed_rep);
    lua_pop(L, 1);
    lua_getfield(L, -1, LUA_TABLIBNAME);
    drop_field(L, "move");
    lua_pop(L, 2);
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 2);
    lua_getglobal(L, LUA_MATHLIBNAME);
    lua_getfield(L, -1, "randomseed");
    lua_pushinteger(L, seed);
    lua_call(L, 1, 0);
    return 0;
}

/* Takes the script's global policy() into the registry; its reference is
 * returned on the stack. Protected for the same reason as sandbox(). */
static int take_policy(lua_State *L)
{
    lua_getglobal(L, "policy");
    if (!lua_isfunction(L, -1)) {
        lua_pushboolean(L, 0);
        return 1;
    }
    lua_pushinteger(L, luaL_ref(L, LUA_REGISTRYINDEX));
    return 1;
}

/* The budget of one call under c's knobs: instructions, and the wall-clock
 * guard when the caller gave the core a clock for it. */
static budget budget_for(const core *c, long long instructions)
{
    budget b = {.left = instructions, .limit = instructions};
    if (c->hooks.guard_clock && c->cfg.policy_max_seconds > 0) {
        b.clock = c->hooks.guard_clock;
        b.clock_ctx = c->hooks.ctx;
        b.max_seconds = c->cfg.policy_max_seconds;
        b.deadline = b.clock(b.clock_ctx) + b.max_seconds;
    }
    return b;
}

core_lua *clua_open_file(const core *c, const char *path, rh_err *e)
{
    uint64_t seed = c->cfg.seed, max_memory = c->cfg.policy_max_memory;
    core_lua *l = calloc(1, sizeof *l);
    if (!l) {
        rh_fail(e, "policy script %s: out of memory", path);
        return NULL;
    }
    l->owned = true;
    l->mem.cap = max_memory > SIZE_MAX ? SIZE_MAX : (size_t)max_memory;
    l->L = lua_newstate(capped_alloc, &l->mem);
    if (!l->L) {
        free(l);
        rh_fail(e, "policy script %s: cannot create a Lua state", path);
        return NULL;
    }
    lua_State *L = l->L;
    lua_pushcfunction(L, sandbox);
    lua_pushinteger(L, (lua_Integer)seed);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        rh_fail(e, "policy script %s: cannot set up its Lua state (--policy-max-memory %llu bytes): %s", path,
                (unsigned long long)max_memory, lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error");
        clua_close(l);
        return NULL;
    }

    if (luaL_loadfile(L, path) != LUA_OK) {
        rh_fail(e, "policy script: %s", lua_tostring(L, -1));
        clua_close(l);
        return NULL;
    }
    budget b = budget_for(c, 100000000LL), *saved = tl_budget;
    tl_budget = &b;
    lua_sethook(L, count_hook, HOOK_MASK, HOOK_EVERY);
    int rc = lua_pcall(L, 0, 0, 0);
    lua_sethook(L, NULL, 0, 0);
    tl_budget = saved;
    if (rc != LUA_OK) {
        const char *m = lua_tostring(L, -1);
        if (rc == LUA_ERRMEM)
            rh_fail(e, "policy script %s: ran past its memory limit of %llu bytes (--policy-max-memory)", path,
                    (unsigned long long)max_memory);
        else
            rh_fail(e, "policy script %s: %s", path, m ? m : "error object is not a string");
        clua_close(l);
        return NULL;
    }
    lua_pushcfunction(L, take_policy);
    if (lua_pcall(L, 0, 1, 0) != LUA_OK || !lua_isinteger(L, -1)) {
        if (lua_isboolean(L, -1))
            rh_fail(e, "policy script %s: defines no global function policy(waiting, state)", path);
        else
            rh_fail(e, "policy script %s: out of memory (--policy-max-memory %llu bytes)", path,
                    (unsigned long long)max_memory);
        clua_close(l);
        return NULL;
    }
    l->ref = (int)lua_tointeger(L, -1);
    describe_function(l);
    lua_settop(L, 0);
    return l;
}

core_lua *clua_wrap(void *lua_state, int ref, rh_err *e)
{
    lua_State *L = lua_state;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    bool ok = lua_isfunction(L, -1);
    lua_settop(L, top);
    if (!ok) {
        rh_fail(e, "Lua policy: registry reference %d is not a function", ref);
        return NULL;
    }
    core_lua *l = calloc(1, sizeof *l);
    if (!l) {
        rh_fail(e, "Lua policy: out of memory");
        return NULL;
    }
    l->L = L;
    l->ref = ref;
    describe_function(l);
    lua_settop(L, top);
    return l;
}

void clua_close(core_lua *l)
{
    if (!l) return;
    if (l->owned && l->L) lua_close(l->L);
    free(l->seen);
    free(l);
}

typedef struct call_ctx {
    core *c;
    core_lua *l;
    double now;
    core_req **reqs;
    uint32_t n;
    core_req **out;
    uint32_t n_out;
    budget b;
} call_ctx;

static void set_int(lua_State *L, const char *k, long long v)
{
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

static void set_num(lua_State *L, const char *k, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

/* Builds the arguments, calls the policy and reads its answer, all inside
 * one protected call: any Lua error, even running out of memory while
 * building a table, unwinds to clua_order and never past it. */
static int protected_call(lua_State *L)
{
    call_ctx *x = lua_touserdata(L, 1);
    core *c = x->c;
    lua_rawgeti(L, LUA_REGISTRYINDEX, x->l->ref);

    lua_createtable(L, (int)x->n, 0);
    for (uint32_t i = 0; i < x->n; i++) {
        core_req *r = x->reqs[i];
        uint32_t dummy, m = keys_match(c, r, NULL, &dummy);
        uint64_t cached = (uint64_t)m * c->ps;
        lua_createtable(L, 0, 10);
        set_int(L, "index", i + 1);
        set_int(L, "id", (long long)r->id);
        set_int(L, "prompt_len", r->prompt_len);
        set_int(L, "max_new_tokens", r->max_new);
        set_int(L, "output_len", r->out);
        set_int(L, "cached_len", (long long)(cached < r->prompt_len ? cached : r->prompt_len));
        set_num(L, "arrival", r->arrival);
        set_num(L, "wait", x->now - r->arrival);
        set_int(L, "retractions", r->retractions);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }

    lua_createtable(L, 0, 14);
    set_num(L, "now", x->now);
    set_int(L, "step", (long long)c->step_index);
    set_int(L, "page_size", c->ps);
    set_int(L, "total_pages", c->kv.n_pages);
    set_int(L, "free_pages", (long long)kv_free_pages(&c->kv));
    set_int(L, "cached_pages", (long long)kv_cached_pages(&c->kv));
    set_int(L, "running", c->n_active);
    set_int(L, "waiting", c->n_waiting);
    set_int(L, "max_running_requests", c->cfg.max_running_requests);
    set_int(L, "chunked_prefill_size", c->cfg.chunked_prefill_size);
    set_int(L, "max_prefill_tokens", c->cfg.max_prefill_tokens);
    set_num(L, "new_token_ratio", c->ratio);
    lua_pushstring(L, c->cfg.preset == CORE_PRESET_VLLM ? "vllm" : "sglang");
    lua_setfield(L, -2, "scheduler");

    /* The hook stays on until the answer is read: reading it runs no Lua
     * (raw accesses only), but a budget spent is spent. */
    tl_budget = &x->b;
    lua_sethook(L, count_hook, HOOK_MASK, HOOK_EVERY);
    lua_call(L, 2, 1);

    const char *where = x->l->where;
    if (lua_isnil(L, -1)) {
        for (uint32_t i = 0; i < x->n; i++) x->out[i] = x->reqs[i];
        x->n_out = x->n;
        return 0;
    }
    if (!lua_istable(L, -1))
        return luaL_error(L, "%s: policy() returned a %s, not a list of waiting requests", where, luaL_typename(L, -1));
    /* Raw reads: a metamethod (__len, __index) on the list or an entry
     * would run Lua code, or a C function, outside any budget. */
    memset(x->l->seen, 0, x->n);
    lua_Integer len = (lua_Integer)lua_rawlen(L, -1);
    if (len > (lua_Integer)x->n)
        return luaL_error(L, "%s: policy() returned %I entries for %d waiting requests", where, len, (int)x->n);
    for (lua_Integer i = 1; i <= len; i++) {
        int t = lua_rawgeti(L, -1, i);
        if (t == LUA_TTABLE) {
            lua_pushliteral(L, "index");
            lua_rawget(L, -2);
            lua_remove(L, -2);
        }
        int isnum = 0;
        lua_Integer k = lua_tointegerx(L, -1, &isnum);
        lua_pop(L, 1);
        if (!isnum || k < 1 || k > (lua_Integer)x->n)
            return luaL_error(L, "%s: policy() entry %I is not a position 1..%d nor a request table", where, i,
                              (int)x->n);
        if (x->l->seen[k - 1])
            return luaL_error(L, "%s: policy() lists request %I twice", where, k);
        x->l->seen[k - 1] = 1;
        x->out[x->n_out++] = x->reqs[k - 1];
    }
    return 0;
}

int clua_order(core *c, core_lua *l, double now, core_req **reqs, uint32_t n, core_req **out, char *err, size_t errn)
{
    if (n > l->cap_seen) {
        uint8_t *s = realloc(l->seen, n);
        if (!s) {
            snprintf(err, errn, "%s: out of memory", l->where);
            return -1;
        }
        l->seen = s;
        l->cap_seen = n;
    }
    lua_State *L = l->L;
    int top = lua_gettop(L);
    if (!lua_checkstack(L, 8)) {
        snprintf(err, errn, "%s: Lua stack exhausted", l->where);
        return -1;
    }
    lua_Hook old_hook = lua_gethook(L);
    int old_mask = lua_gethookmask(L), old_count = lua_gethookcount(L);
    budget *saved = tl_budget;

    call_ctx x = {.c = c, .l = l, .now = now, .reqs = reqs, .n = n, .out = out};
    x.b = budget_for(c, (long long)c->cfg.policy_max_instructions);
    lua_pushcfunction(L, protected_call);
    lua_pushlightuserdata(L, &x);
    int rc = lua_pcall(L, 1, 0, 0);

    lua_sethook(L, old_hook, old_mask, old_count);
    tl_budget = saved;
    if (rc != LUA_OK) {
        /* Runtime errors of the script's own lines carry "file:line:"
         * already; the others (a C function's, error(m, 0), a message
         * without a line) get the line where policy() is defined. */
        const char *m = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (rc == LUA_ERRMEM && l->owned)
            snprintf(err, errn, "%s: policy ran past its memory limit of %zu bytes", l->where, l->mem.cap);
        else if (rc == LUA_ERRMEM) snprintf(err, errn, "%s: policy ran out of memory", l->where);
        else if (!m) snprintf(err, errn, "%s: policy raised a %s instead of a message", l->where, luaL_typename(L, -1));
        else if (l->src[0] && strncmp(m, l->src, strlen(l->src)) == 0) snprintf(err, errn, "%s", m);
        else snprintf(err, errn, "%s: %s", l->where, m);   /* raised by a C function, or error(m, 0) */
        lua_settop(L, top);
        /* What the failed call built is garbage now; an owned state gives
         * it back at once so the next call starts with its whole cap. */
        if (l->owned) lua_gc(L, LUA_GCCOLLECT);
        return -1;
    }
    lua_settop(L, top);
    return (int)x.n_out;
}
