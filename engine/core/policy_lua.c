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
 * budget — makes the step use fcfs, and the message names the script's
 * file and line. The call runs under a count hook, saved and restored, so a
 * caller-owned state keeps its own hooks. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/internal.h"

#define HOOK_EVERY 1000

struct core_lua {
    lua_State *L;
    bool owned;
    int ref;
    char where[200];            /* "file:line" where policy() is defined */
    uint8_t *seen;
    uint32_t cap_seen;
};

/* The running call's instruction budget. Thread-local because sweeps may
 * run one core per thread, each with its own state; saved and restored
 * around every call so nested calls (a policy calling into a simulator
 * that steps another core) keep their own. */
typedef struct budget {
    long long left, limit;
} budget;
static _Thread_local budget *tl_budget;

static void count_hook(lua_State *L, lua_Debug *ar)
{
    budget *b = tl_budget;
    if (!b) return;
    b->left -= HOOK_EVERY;
    if (b->left >= 0) return;
    if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
        lua_pushfstring(L, "%s:%d: policy ran past its budget of %I instructions", ar->short_src, ar->currentline,
                        (lua_Integer)b->limit);
    else
        lua_pushfstring(L, "policy ran past its budget of %I instructions", (lua_Integer)b->limit);
    lua_error(L);
}

static void describe_function(core_lua *l)
{
    lua_State *L = l->L;
    lua_Debug ar;
    lua_rawgeti(L, LUA_REGISTRYINDEX, l->ref);
    if (lua_getinfo(L, ">S", &ar))
        snprintf(l->where, sizeof l->where, "%s:%d", ar.short_src, ar.linedefined);
    else
        snprintf(l->where, sizeof l->where, "policy");
}

static const luaL_Reg safe_libs[] = {
    {LUA_GNAME, luaopen_base},     {LUA_TABLIBNAME, luaopen_table}, {LUA_STRLIBNAME, luaopen_string},
    {LUA_MATHLIBNAME, luaopen_math}, {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL},
};

core_lua *clua_open_file(const char *path, uint64_t seed, rh_err *e)
{
    core_lua *l = calloc(1, sizeof *l);
    if (!l) {
        rh_fail(e, "policy script %s: out of memory", path);
        return NULL;
    }
    l->owned = true;
    l->L = luaL_newstate();
    if (!l->L) {
        free(l);
        rh_fail(e, "policy script %s: cannot create a Lua state", path);
        return NULL;
    }
    lua_State *L = l->L;
    /* No io, os or package: a policy is a pure function of what it is
     * shown, so it is deterministic and behaves the same in both clocks. */
    for (const luaL_Reg *lib = safe_libs; lib->func; lib++) {
        luaL_requiref(L, lib->name, lib->func, 1);
        lua_pop(L, 1);
    }
    lua_getglobal(L, "math");
    lua_getfield(L, -1, "randomseed");
    lua_pushinteger(L, (lua_Integer)seed);
    lua_pcall(L, 1, 0, 0);
    lua_settop(L, 0);

    if (luaL_loadfile(L, path) != LUA_OK) {
        rh_fail(e, "policy script: %s", lua_tostring(L, -1));
        clua_close(l);
        return NULL;
    }
    budget b = {100000000LL, 100000000LL}, *saved = tl_budget;
    tl_budget = &b;
    lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_EVERY);
    int rc = lua_pcall(L, 0, 0, 0);
    lua_sethook(L, NULL, 0, 0);
    tl_budget = saved;
    if (rc != LUA_OK) {
        const char *m = lua_tostring(L, -1);
        rh_fail(e, "policy script %s: %s", path, m ? m : "error object is not a string");
        clua_close(l);
        return NULL;
    }
    lua_getglobal(L, "policy");
    if (!lua_isfunction(L, -1)) {
        rh_fail(e, "policy script %s: defines no global function policy(waiting, state)", path);
        clua_close(l);
        return NULL;
    }
    l->ref = luaL_ref(L, LUA_REGISTRYINDEX);
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

    tl_budget = &x->b;
    lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_EVERY);
    lua_call(L, 2, 1);
    lua_sethook(L, NULL, 0, 0);

    const char *where = x->l->where;
    if (lua_isnil(L, -1)) {
        for (uint32_t i = 0; i < x->n; i++) x->out[i] = x->reqs[i];
        x->n_out = x->n;
        return 0;
    }
    if (!lua_istable(L, -1))
        return luaL_error(L, "%s: policy() returned a %s, not a list of waiting requests", where, luaL_typename(L, -1));
    memset(x->l->seen, 0, x->n);
    lua_Integer len = luaL_len(L, -1);
    if (len > (lua_Integer)x->n)
        return luaL_error(L, "%s: policy() returned %I entries for %d waiting requests", where, len, (int)x->n);
    for (lua_Integer i = 1; i <= len; i++) {
        int t = lua_geti(L, -1, i);
        if (t == LUA_TTABLE) {
            lua_getfield(L, -1, "index");
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
    x.b.limit = x.b.left = (long long)c->cfg.policy_max_instructions;
    lua_pushcfunction(L, protected_call);
    lua_pushlightuserdata(L, &x);
    int rc = lua_pcall(L, 1, 0, 0);

    lua_sethook(L, old_hook, old_mask, old_count);
    tl_budget = saved;
    if (rc != LUA_OK) {
        /* Runtime errors carry "file:line:" already; the others get the
         * line where policy() is defined. */
        const char *m = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (rc == LUA_ERRMEM) snprintf(err, errn, "%s: policy ran out of memory", l->where);
        else if (!m) snprintf(err, errn, "%s: policy raised a %s instead of a message", l->where, luaL_typename(L, -1));
        else snprintf(err, errn, "%s", m);
        lua_settop(L, top);
        return -1;
    }
    lua_settop(L, top);
    return (int)x.n_out;
}
