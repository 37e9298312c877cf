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
 * A script file (a server's or a simulation's --policy-script) runs in the
 * sandbox of engine/core/lua_box.h: a state whose allocator holds at most
 * policy_max_memory bytes, with only base, table, string, math and utf8. A
 * caller-owned state (a Lua experiment script's own function) is the
 * caller's: neither the cap nor the sandbox applies to it. */
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/internal.h"
#include "engine/core/lua_box.h"

static const lbox_names NAMES = {
    .script = "policy script",
    .function = "policy",
    .signature = "policy(waiting, state)",
    .memory_flag = "--policy-max-memory",
    .seconds_flag = "--policy-max-seconds",
};

struct core_lua {
    lbox box;
    uint8_t *seen;
    uint32_t cap_seen;
};

/* The budget of one call under c's knobs: instructions, and the wall-clock
 * guard when the caller gave the core a clock for it. */
static lbox_budget budget_for(const core *c, long long instructions)
{
    return lbox_budget_make(&NAMES, instructions, c->hooks.guard_clock, c->hooks.ctx, c->cfg.policy_max_seconds);
}

core_lua *clua_open_file(const core *c, const char *path, rh_err *e)
{
    core_lua *l = calloc(1, sizeof *l);
    if (!l) {
        rh_fail(e, "policy script %s: out of memory", path);
        return NULL;
    }
    lbox_budget load = budget_for(c, 100000000LL);
    if (lbox_open_file(&l->box, &NAMES, path, c->cfg.policy_max_memory, c->cfg.seed, &load, e) < 0) {
        free(l);
        return NULL;
    }
    return l;
}

core_lua *clua_wrap(void *lua_state, int ref, rh_err *e)
{
    core_lua *l = calloc(1, sizeof *l);
    if (!l) {
        rh_fail(e, "Lua policy: out of memory");
        return NULL;
    }
    if (lbox_wrap(&l->box, &NAMES, lua_state, ref) < 0) {
        free(l);
        rh_fail(e, "Lua policy: registry reference %d is not a function", ref);
        return NULL;
    }
    return l;
}

void clua_close(core_lua *l)
{
    if (!l) return;
    lbox_close(&l->box);
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
    lbox_budget b;
} call_ctx;

/* Builds the arguments, calls the policy and reads its answer, all inside
 * one protected call: any Lua error, even running out of memory while
 * building a table, unwinds to clua_order and never past it. */
static int protected_call(lua_State *L)
{
    call_ctx *x = lua_touserdata(L, 1);
    core *c = x->c;
    lua_rawgeti(L, LUA_REGISTRYINDEX, x->l->box.ref);

    lua_createtable(L, (int)x->n, 0);
    for (uint32_t i = 0; i < x->n; i++) {
        core_req *r = x->reqs[i];
        uint32_t dummy, m = keys_match(c, r, NULL, &dummy);
        uint64_t cached = (uint64_t)m * c->ps;
        lua_createtable(L, 0, 11);
        lbox_set_int(L, "index", i + 1);
        lbox_set_int(L, "id", (long long)r->id);
        lbox_set_int(L, "prompt_len", r->prompt_len);
        lbox_set_int(L, "max_new_tokens", r->max_new);
        lbox_set_int(L, "output_len", r->out);
        lbox_set_int(L, "cached_len", (long long)(cached < r->prompt_len ? cached : r->prompt_len));
        lbox_set_num(L, "arrival", r->arrival);
        lbox_set_num(L, "wait", x->now - r->arrival);
        lbox_set_int(L, "retractions", r->retractions);
        lbox_set_int(L, "priority", r->priority);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }

    lua_createtable(L, 0, 14);
    lbox_set_num(L, "now", x->now);
    lbox_set_int(L, "step", (long long)c->step_index);
    lbox_set_int(L, "page_size", c->ps);
    lbox_set_int(L, "total_pages", c->kv.n_pages);
    lbox_set_int(L, "free_pages", (long long)kv_free_pages(&c->kv));
    lbox_set_int(L, "cached_pages", (long long)kv_cached_pages(&c->kv));
    lbox_set_int(L, "running", c->n_active);
    lbox_set_int(L, "waiting", c->n_waiting);
    lbox_set_int(L, "max_running_requests", c->cfg.max_running_requests);
    lbox_set_int(L, "chunked_prefill_size", c->cfg.chunked_prefill_size);
    lbox_set_int(L, "max_prefill_tokens", c->cfg.max_prefill_tokens);
    lbox_set_num(L, "new_token_ratio", c->ratio);
    lua_pushstring(L, c->cfg.preset == CORE_PRESET_VLLM ? "vllm" : "sglang");
    lua_setfield(L, -2, "scheduler");

    /* The hook stays on until the answer is read: reading it runs no Lua
     * (raw accesses only), but a budget spent is spent. */
    lbox_arm(L, &x->b);
    lua_call(L, 2, 1);

    const char *where = x->l->box.where;
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
            snprintf(err, errn, "%s: out of memory", l->box.where);
            return -1;
        }
        l->seen = s;
        l->cap_seen = n;
    }
    call_ctx x = {.c = c, .l = l, .now = now, .reqs = reqs, .n = n, .out = out};
    x.b = budget_for(c, (long long)c->cfg.policy_max_instructions);
    if (lbox_call(&l->box, protected_call, &x, err, errn) < 0) return -1;
    return (int)x.n_out;
}
