/* lua_util.c — small helpers experiment scripts need, kept out of Lua's own
 * os library so scripts stay portable and never shell out:
 *   rehearse.mkdir(path)          creates path and its parents; true
 *   rehearse.exists(path)         true when the file or folder exists
 *   rehearse.shared_traces()      the folder of the shared real traces, or nil
 *   rehearse.log(fmt, ...)        a line on stderr (progress notes), printf-style */
#include <errno.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/lua/lua_api.h"
#include "util/fs.h"

static int l_mkdir(lua_State *L)
{
    const char *p = luaL_checkstring(L, 1);
    if (rh_mkdir_p(p) < 0) return luaL_error(L, "mkdir %s: %s", p, strerror(errno));
    lua_pushboolean(L, 1);
    return 1;
}

static int l_exists(lua_State *L)
{
    lua_pushboolean(L, access(luaL_checkstring(L, 1), F_OK) == 0);
    return 1;
}

static int l_shared_traces(lua_State *L)
{
    const char *d = getenv("REHEARSE_SHARED_TRACES");
    if (!d || !*d) d = "../shared/traces";
    struct stat st;
    if (stat(d, &st) == 0 && S_ISDIR(st.st_mode)) lua_pushstring(L, d);
    else lua_pushnil(L);
    return 1;
}

static int l_log(lua_State *L)
{
    int n = lua_gettop(L);
    lua_getglobal(L, "string");
    lua_getfield(L, -1, "format");
    for (int i = 1; i <= n; i++) lua_pushvalue(L, i);
    lua_call(L, n, 1);
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    return 0;
}

void rlua_open_util(lua_State *L)
{
    static const luaL_Reg fns[] = {{"mkdir", l_mkdir}, {"exists", l_exists}, {"shared_traces", l_shared_traces},
                                   {"log", l_log},     {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
