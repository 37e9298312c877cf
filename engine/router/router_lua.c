/* router_lua.c — route(request, replicas) called in the sandbox; see
 * router.h for the contract and engine/core/lua_box.h for the sandbox. */
#include "engine/router/router_lua.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>

#include "engine/core/lua_box.h"

/* The core is driven by both fronts, whose flags differ (--router-max-memory
 * in the simulator, --policy-max-memory in `rehearse router`): the
 * messages name the limits, not a flag. */
static const lbox_names NAMES = {
    .script = "router script",
    .function = "route",
    .signature = "route(request, replicas)",
};

struct router_lua {
    lbox box;
    long long max_instructions;
    double max_seconds;
    double (*clock)(void *ctx);
    void *clock_ctx;
};

router_lua *rtlua_open(const router_config *c, rh_err *e)
{
    router_lua *l = calloc(1, sizeof *l);
    if (!l) return rh_fail(e, "router script %s: out of memory", c->lua_script), NULL;
    l->max_instructions = (long long)c->lua_max_instructions;
    l->max_seconds = c->lua_max_seconds;
    l->clock = c->guard_clock;
    l->clock_ctx = c->guard_ctx;
    /* the chunk's own budget, as the scheduler's scripts get */
    lbox_budget load = lbox_budget_make(&NAMES, 100000000LL, l->clock, l->clock_ctx, l->max_seconds);
    if (lbox_open_file(&l->box, &NAMES, c->lua_script, c->lua_max_memory, c->seed, &load, e) < 0) {
        free(l);
        return NULL;
    }
    return l;
}

void rtlua_close(router_lua *l)
{
    if (!l) return;
    lbox_close(&l->box);
    free(l);
}

typedef struct route_ctx {
    router_lua *l;
    const rtlua_ask *a;
    lbox_budget b;
    int pick;
} route_ctx;

/* Builds the arguments, calls route() and checks its answer, all inside
 * lbox_call's protection: any error, even running out of memory while
 * building a table, comes back as a message. */
static int protected_route(lua_State *L)
{
    route_ctx *x = lua_touserdata(L, 1);
    const rtlua_ask *a = x->a;
    lua_rawgeti(L, LUA_REGISTRYINDEX, x->l->box.ref);

    lua_createtable(L, 0, 2);
    lbox_set_int(L, "blocks", a->blocks);
    lbox_set_int(L, "seq", (long long)a->seq);

    lua_createtable(L, (int)a->n_replicas, 0);
    for (uint32_t i = 0; i < a->n_replicas; i++) {
        lua_createtable(L, 0, 6);
        lbox_set_int(L, "index", i + 1);
        lua_pushboolean(L, a->st[i].healthy);
        lua_setfield(L, -2, "healthy");
        lbox_set_int(L, "outstanding", a->st[i].outstanding);
        lbox_set_num(L, "kv_use", a->st[i].kv_use);
        lbox_set_int(L, "match", a->match[i]);
        lbox_set_int(L, "tree_size", (long long)a->tree_size[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }

    lbox_arm(L, &x->b);
    lua_call(L, 2, 1);

    /* Read without metamethods or conversions: a string "2" is not an index. */
    const char *where = x->l->box.where;
    int n = (int)a->n_replicas, isint = 0;
    lua_Integer k = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0;
    if (lua_type(L, -1) == LUA_TNUMBER && !isint)
        return luaL_error(L, "%s: route() returned %f, not a replica index 1..%d", where, lua_tonumber(L, -1), n);
    if (!isint)
        return luaL_error(L, "%s: route() returned a %s, not a replica index 1..%d", where, luaL_typename(L, -1), n);
    if (k < 1 || k > n) return luaL_error(L, "%s: route() returned %I, not a replica index 1..%d", where, k, n);
    if (!a->st[k - 1].healthy) return luaL_error(L, "%s: route() returned replica %I, which is unhealthy", where, k);
    x->pick = (int)(k - 1);
    return 0;
}

int rtlua_route(router_lua *l, const rtlua_ask *a, char *err, size_t errn)
{
    route_ctx x = {.l = l, .a = a, .pick = -1};
    x.b = lbox_budget_make(&NAMES, l->max_instructions, l->clock, l->clock_ctx, l->max_seconds);
    if (lbox_call(&l->box, protected_route, &x, err, errn) < 0) return -1;
    return x.pick;
}
