/* lua_box.c — the sandbox of lua_box.h: a capped allocator, the libraries
 * a script may use, the instruction budget and wall-clock guard, and the
 * protected call that turns every failure into one message. */
#include "engine/core/lua_box.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOOK_EVERY 1000
/* What a function call costs against the budget, beyond the instructions
 * that make it. C functions run without instructions (table.concat calling
 * a C __index ten million times, say); the call hook counts each such call,
 * so a loop inside C is bounded like a loop in Lua. */
#define CALL_COST 10
#define HOOK_MASK (LUA_MASKCOUNT | LUA_MASKCALL)

/* The running call's budget. Thread-local because sweeps may run one core
 * per thread, each with its own state; saved and restored around every
 * call so nested calls keep their own. */
static _Thread_local lbox_budget *tl_budget;

static void count_hook(lua_State *L, lua_Debug *ar)
{
    lbox_budget *b = tl_budget;
    if (!b) return;
    if (b->spent) {
        /* Raised again at every instruction and call: a script that catches
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
    lua_sethook(L, count_hook, HOOK_MASK, 1);   /* lbox_call restores the hook */
    const char *who = b->names->function, *flag = b->names->seconds_flag;
    char what[96];
    if (b->left < 0) snprintf(what, sizeof what, "its budget of %lld instructions", b->limit);
    else snprintf(what, sizeof what, "its time limit of %g s%s%s%s", b->max_seconds, flag ? " (" : "", flag ? flag : "",
                  flag ? ")" : "");
    /* The line of the innermost Lua frame: a call event's own frame is
     * the callee, often a C function (pcall, table.sort) without one. */
    lua_Debug at;
    int level = 0, found = 0;
    while (!found && lua_getstack(L, level++, &at)) found = lua_getinfo(L, "Sl", &at) && at.currentline > 0;
    if (found) snprintf(b->msg, sizeof b->msg, "%s:%d: %s ran past %s", at.short_src, at.currentline, who, what);
    else snprintf(b->msg, sizeof b->msg, "%s ran past %s", who, what);
    lua_pushstring(L, b->msg);
    lua_error(L);
}

lbox_budget lbox_budget_make(const lbox_names *n, long long instructions, double (*clock)(void *ctx), void *ctx,
                             double max_seconds)
{
    lbox_budget b = {.left = instructions, .limit = instructions, .names = n};
    if (clock && max_seconds > 0) {
        b.clock = clock;
        b.clock_ctx = ctx;
        b.max_seconds = max_seconds;
        b.deadline = clock(ctx) + max_seconds;
    }
    return b;
}

void lbox_arm(lua_State *L, lbox_budget *budget)
{
    tl_budget = budget;
    lua_sethook(L, count_hook, HOOK_MASK, HOOK_EVERY);
}

/* Lua's allocator with a cap on what the state holds: past it an
 * allocation fails, Lua raises a memory error, and the call fails.
 * (With ptr NULL, osize is the new object's type, not a size.) */
static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    lbox_mem *m = ud;
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

/* A policy (the scheduler's, the router's) is a pure function of what it
 * is shown, so it is deterministic, behaves the same in both clocks, and
 * cannot reach the machine it runs on.
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

static void describe_function(lbox *b)
{
    lua_State *L = b->L;
    lua_Debug ar;
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->ref);
    if (lua_getinfo(L, ">S", &ar)) {
        snprintf(b->where, sizeof b->where, "%s:%d", ar.short_src, ar.linedefined);
        snprintf(b->src, sizeof b->src, "%s:", ar.short_src);
    } else {
        snprintf(b->where, sizeof b->where, "%s", b->names->function);
    }
}

/* Takes the global named by the light userdata argument into the registry;
 * its reference is returned on the stack (false: no such function).
 * Protected for the same reason as sandbox(). */
static int take_function(lua_State *L)
{
    lua_getglobal(L, (const char *)lua_touserdata(L, 1));
    if (!lua_isfunction(L, -1)) {
        lua_pushboolean(L, 0);
        return 1;
    }
    lua_pushinteger(L, luaL_ref(L, LUA_REGISTRYINDEX));
    return 1;
}

/* Runs the loaded chunk under the load budget; the hook is off after. */
static int run_chunk(lua_State *L, lbox_budget *load)
{
    lbox_budget *saved = tl_budget;
    lbox_arm(L, load);
    int rc = lua_pcall(L, 0, 0, 0);
    lua_sethook(L, NULL, 0, 0);
    tl_budget = saved;
    return rc;
}

int lbox_open_file(lbox *b, const lbox_names *n, const char *path, uint64_t max_memory, uint64_t seed,
                   lbox_budget *load, rh_err *e)
{
    memset(b, 0, sizeof *b);
    b->names = n;
    b->owned = true;
    b->mem.cap = max_memory > SIZE_MAX ? SIZE_MAX : (size_t)max_memory;
    /* "--policy-max-memory 67108864 bytes", or the bytes alone */
    char cap[96];
    snprintf(cap, sizeof cap, "%s%s%llu bytes", n->memory_flag ? n->memory_flag : "", n->memory_flag ? " " : "",
             (unsigned long long)max_memory);
    b->L = lua_newstate(capped_alloc, &b->mem);
    if (!b->L) return rh_fail(e, "%s %s: cannot create a Lua state", n->script, path);
    lua_State *L = b->L;
    lua_pushcfunction(L, sandbox);
    lua_pushinteger(L, (lua_Integer)seed);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        rh_fail(e, "%s %s: cannot set up its Lua state (%s): %s", n->script, path, cap,
                lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error");
        lbox_close(b);
        return -1;
    }
    if (luaL_loadfile(L, path) != LUA_OK) {
        rh_fail(e, "%s: %s", n->script, lua_tostring(L, -1));
        lbox_close(b);
        return -1;
    }
    int rc = run_chunk(L, load);
    if (rc != LUA_OK) {
        const char *m = lua_tostring(L, -1);
        if (rc == LUA_ERRMEM)
            rh_fail(e, "%s %s: ran past its memory limit of %llu bytes%s%s%s", n->script, path,
                    (unsigned long long)max_memory, n->memory_flag ? " (" : "", n->memory_flag ? n->memory_flag : "",
                    n->memory_flag ? ")" : "");
        else
            rh_fail(e, "%s %s: %s", n->script, path, m ? m : "error object is not a string");
        lbox_close(b);
        return -1;
    }
    lua_pushcfunction(L, take_function);
    lua_pushlightuserdata(L, (void *)n->function);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK || !lua_isinteger(L, -1)) {
        if (lua_isboolean(L, -1)) rh_fail(e, "%s %s: defines no global function %s", n->script, path, n->signature);
        else rh_fail(e, "%s %s: out of memory (%s)", n->script, path, cap);
        lbox_close(b);
        return -1;
    }
    b->ref = (int)lua_tointeger(L, -1);
    describe_function(b);
    lua_settop(L, 0);
    return 0;
}

int lbox_wrap(lbox *b, const lbox_names *n, lua_State *L, int ref)
{
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    bool ok = lua_isfunction(L, -1);
    lua_settop(L, top);
    if (!ok) return -1;
    memset(b, 0, sizeof *b);
    b->names = n;
    b->L = L;
    b->ref = ref;
    describe_function(b);
    lua_settop(L, top);
    return 0;
}

void lbox_close(lbox *b)
{
    if (b->owned && b->L) lua_close(b->L);
    b->L = NULL;
}

int lbox_call(lbox *b, lua_CFunction f, void *ud, char *err, size_t errn)
{
    lua_State *L = b->L;
    const char *who = b->names->function;
    int top = lua_gettop(L);
    if (!lua_checkstack(L, 8)) {
        snprintf(err, errn, "%s: Lua stack exhausted", b->where);
        return -1;
    }
    lua_Hook old_hook = lua_gethook(L);
    int old_mask = lua_gethookmask(L), old_count = lua_gethookcount(L);
    lbox_budget *saved = tl_budget;

    lua_pushcfunction(L, f);
    lua_pushlightuserdata(L, ud);
    int rc = lua_pcall(L, 1, 0, 0);

    lua_sethook(L, old_hook, old_mask, old_count);
    tl_budget = saved;
    if (rc == LUA_OK) {
        lua_settop(L, top);
        return 0;
    }
    /* Runtime errors of the script's own lines carry "file:line:" already;
     * the others (a C function's, error(m, 0), a message without a line)
     * get the line where the function is defined. */
    const char *m = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    if (rc == LUA_ERRMEM && b->owned)
        snprintf(err, errn, "%s: %s ran past its memory limit of %zu bytes", b->where, who, b->mem.cap);
    else if (rc == LUA_ERRMEM) snprintf(err, errn, "%s: %s ran out of memory", b->where, who);
    else if (!m) snprintf(err, errn, "%s: %s raised a %s instead of a message", b->where, who, luaL_typename(L, -1));
    else if (b->src[0] && strncmp(m, b->src, strlen(b->src)) == 0) snprintf(err, errn, "%s", m);
    else snprintf(err, errn, "%s: %s", b->where, m);   /* raised by a C function, or error(m, 0) */
    lua_settop(L, top);
    /* What the failed call built is garbage now; an owned state gives it
     * back at once so the next call starts with its whole cap. */
    if (b->owned) lua_gc(L, LUA_GCCOLLECT);
    return -1;
}
