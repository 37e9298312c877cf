/* router_lua.h — the router core's "lua" policy (router.h): a script's
 * route(request, replicas) in the sandbox of engine/core/lua_box.h. The
 * core keeps the trees and the fallback; this file only asks the script. */
#ifndef RH_ROUTER_LUA_H
#define RH_ROUTER_LUA_H

#include <stddef.h>
#include <stdint.h>

#include "engine/router/router.h"
#include "util/err.h"

typedef struct router_lua router_lua;

/* Opens c->lua_script under c's limits; NULL with e naming the file. */
router_lua *rtlua_open(const router_config *c, rh_err *e);
void rtlua_close(router_lua *l);

/* What route() is shown of one request: per replica its tree's match of
 * the prompt and its size, beside st. */
typedef struct rtlua_ask {
    const router_replica *st;
    const uint32_t *match;
    const uint64_t *tree_size;
    uint32_t n_replicas;
    uint32_t blocks;
    uint64_t seq;
} rtlua_ask;

/* The replica the script picks (0-based, healthy), or -1 with err filled
 * ("file:line: ..."). */
int rtlua_route(router_lua *l, const rtlua_ask *a, char *err, size_t errn);

#endif
