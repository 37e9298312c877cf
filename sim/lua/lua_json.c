/* lua_json.c — JSON <-> Lua values, and the `rehearse.json` and
 * `rehearse.csv` writers of the Lua API.
 *
 * Arrays become sequences (1-based), objects become tables, null becomes nil
 * inside objects and a `rehearse.json.null` sentinel inside arrays (so array
 * lengths survive). A Lua table is an array when its keys are exactly 1..n. */
#include "sim/lua/lua_api.h"
#include "util/atomic_file.h"

#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rlua_push_json(lua_State *L, const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        lua_createtable(L, 0, (int)json_object_size(j));
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            if (json_is_null(v)) continue;
            rlua_push_json(L, v);
            lua_setfield(L, -2, k);
        }
        break;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        lua_createtable(L, (int)n, 0);
        for (size_t i = 0; i < n; i++) {
            rlua_push_json(L, json_array_get(j, i));
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    }
    case JSON_STRING:
        lua_pushlstring(L, json_string_value(j), json_string_length(j));
        break;
    case JSON_INTEGER:
        lua_pushinteger(L, (lua_Integer)json_integer_value(j));
        break;
    case JSON_REAL:
        lua_pushnumber(L, json_real_value(j));
        break;
    case JSON_TRUE:
        lua_pushboolean(L, 1);
        break;
    case JSON_FALSE:
        lua_pushboolean(L, 0);
        break;
    default:
        lua_pushnil(L);
        break;
    }
}

/* Is the table at idx a sequence 1..n (n may be 0 for an empty table)? */
static int is_array(lua_State *L, int idx, size_t *n_out)
{
    size_t n = 0;
    lua_Integer max = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (!lua_isinteger(L, -1)) {
            lua_pop(L, 1);
            return 0;
        }
        lua_Integer k = lua_tointeger(L, -1);
        if (k < 1) {
            lua_pop(L, 1);
            return 0;
        }
        if (k > max) max = k;
        n++;
    }
    *n_out = n;
    return (lua_Integer)n == max;
}

json_t *rlua_to_json(lua_State *L, int idx, int depth, rh_err *e)
{
    idx = lua_absindex(L, idx);
    if (depth > 64) {
        rh_fail(e, "table nested too deeply (or a cycle)");
        return NULL;
    }
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
        return json_null();
    case LUA_TBOOLEAN:
        return json_boolean(lua_toboolean(L, idx));
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) return json_integer((json_int_t)lua_tointeger(L, idx));
        {
            double d = lua_tonumber(L, idx);
            return isfinite(d) ? json_real(d) : json_null();
        }
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        return json_stringn(s, len);
    }
    case LUA_TLIGHTUSERDATA:
        return json_null();     /* rehearse.json.null */
    case LUA_TTABLE: {
        size_t n;
        if (is_array(L, idx, &n) && n > 0) {
            json_t *a = json_array();
            for (size_t i = 1; i <= n; i++) {
                lua_rawgeti(L, idx, (lua_Integer)i);
                json_t *v = rlua_to_json(L, -1, depth + 1, e);
                lua_pop(L, 1);
                if (!v) {
                    json_decref(a);
                    return NULL;
                }
                json_array_append_new(a, v);
            }
            return a;
        }
        json_t *o = json_object();
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            char key[64];
            const char *k;
            if (lua_type(L, -2) == LUA_TSTRING) {
                k = lua_tostring(L, -2);
            } else if (lua_isinteger(L, -2)) {
                snprintf(key, sizeof key, "%lld", (long long)lua_tointeger(L, -2));
                k = key;
            } else {
                lua_pop(L, 2);
                json_decref(o);
                rh_fail(e, "a table key of type %s cannot be written as JSON", luaL_typename(L, -2));
                return NULL;
            }
            json_t *v = rlua_to_json(L, -1, depth + 1, e);
            if (!v) {
                lua_pop(L, 2);
                json_decref(o);
                return NULL;
            }
            json_object_set_new(o, k, v);
            lua_pop(L, 1);
        }
        return o;
    }
    default:
        rh_fail(e, "a %s cannot be written as JSON", luaL_typename(L, idx));
        return NULL;
    }
}

static int l_json_encode(lua_State *L)
{
    rh_err e;
    json_t *j = rlua_to_json(L, 1, 0, &e);
    if (!j) return luaL_error(L, "json.encode: %s", e.msg);
    int pretty = lua_toboolean(L, 2);
    char *s = json_dumps(j, JSON_ENCODE_ANY | JSON_REAL_PRECISION(12) | (pretty ? JSON_INDENT(2) : JSON_COMPACT));
    json_decref(j);
    if (!s) return luaL_error(L, "json.encode: out of memory");
    lua_pushstring(L, s);
    free(s);
    return 1;
}

static int l_json_decode(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    json_error_t je;
    json_t *j = json_loadb(s, len, JSON_DECODE_ANY, &je);
    if (!j) return luaL_error(L, "json.decode: line %d: %s", je.line, je.text);
    rlua_push_json(L, j);
    json_decref(j);
    return 1;
}

static int l_json_write(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    rh_err e;
    json_t *j = rlua_to_json(L, 2, 0, &e);
    if (!j) return luaL_error(L, "json.write %s: %s", path, e.msg);
    char *s = json_dumps(j, JSON_ENCODE_ANY | JSON_INDENT(2) | JSON_REAL_PRECISION(12));
    json_decref(j);
    if (!s) return luaL_error(L, "json.write: out of memory");
    int rc = rh_write_file_atomic(path, s, strlen(s), &e);
    free(s);
    if (rc < 0) return luaL_error(L, "json.write: %s", e.msg);
    return 0;
}

static int l_json_read(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    json_error_t je;
    json_t *j = json_load_file(path, JSON_DECODE_ANY, &je);
    if (!j) return luaL_error(L, "json.read: %s:%d: %s", path, je.line, je.text);
    rlua_push_json(L, j);
    json_decref(j);
    return 1;
}

/* The CSV text grows in a plain C buffer: a luaL_Buffer forbids the stack
 * traffic that reading rows needs between additions. */
typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->n + n + 1 > cap) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

/* One CSV field: numbers as %.10g, strings quoted when they need it. */
static void csv_field(sbuf *b, lua_State *L, int idx)
{
    char num[64];
    switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, idx));
        else snprintf(num, sizeof num, "%.10g", lua_tonumber(L, idx));
        sb_str(b, num);
        break;
    case LUA_TBOOLEAN:
        sb_str(b, lua_toboolean(L, idx) ? "true" : "false");
        break;
    case LUA_TSTRING: {
        const char *s = lua_tostring(L, idx);
        if (strpbrk(s, ",\"\n\r")) {
            sb_add(b, "\"", 1);
            for (; *s; s++) {
                if (*s == '"') sb_add(b, "\"", 1);
                sb_add(b, s, 1);
            }
            sb_add(b, "\"", 1);
        } else {
            sb_str(b, s);
        }
        break;
    }
    default:
        break;      /* nil and others: empty field */
    }
}

/* csv.write(path, rows [, columns]): rows is an array of tables; columns an
 * array of names (default: the sorted keys of the first row). */
static int l_csv_write(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (lua_isnoneornil(L, 3)) {
        lua_settop(L, 2);
        lua_newtable(L);                      /* 3: the column names */
        lua_rawgeti(L, 2, 1);                 /* 4: the first row */
        int n = 0;
        if (lua_istable(L, 4)) {
            lua_pushnil(L);
            while (lua_next(L, 4)) {
                lua_pop(L, 1);
                if (lua_type(L, -1) == LUA_TSTRING) {
                    lua_pushvalue(L, -1);
                    lua_rawseti(L, 3, ++n);
                }
            }
        }
        lua_pop(L, 1);
        lua_getglobal(L, "table");
        lua_getfield(L, -1, "sort");
        lua_pushvalue(L, 3);
        lua_call(L, 1, 0);
        lua_pop(L, 1);
    }
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_Integer ncol = luaL_len(L, 3), nrow = luaL_len(L, 2);
    sbuf b = {0};
    for (lua_Integer c = 1; c <= ncol; c++) {
        if (c > 1) sb_add(&b, ",", 1);
        lua_rawgeti(L, 3, c);
        csv_field(&b, L, -1);
        lua_pop(L, 1);
    }
    sb_add(&b, "\n", 1);
    for (lua_Integer r = 1; r <= nrow; r++) {
        lua_rawgeti(L, 2, r);
        if (!lua_istable(L, -1)) {
            free(b.s);
            return luaL_error(L, "csv.write %s: row %d is not a table", path, (int)r);
        }
        for (lua_Integer c = 1; c <= ncol; c++) {
            if (c > 1) sb_add(&b, ",", 1);
            lua_rawgeti(L, 3, c);
            lua_gettable(L, -2);
            csv_field(&b, L, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        sb_add(&b, "\n", 1);
    }
    if (b.oom) {
        free(b.s);
        return luaL_error(L, "csv.write %s: out of memory", path);
    }
    rh_err e;
    int rc = rh_write_file_atomic(path, b.s ? b.s : "", b.n, &e);
    free(b.s);
    if (rc < 0) return luaL_error(L, "csv.write: %s", e.msg);
    return 0;
}

void rlua_open_json(lua_State *L)
{
    static const luaL_Reg json_fns[] = {
        {"encode", l_json_encode}, {"decode", l_json_decode},
        {"write", l_json_write},   {"read", l_json_read},
        {NULL, NULL},
    };
    luaL_newlib(L, json_fns);
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    lua_setfield(L, -2, "json");
    static const luaL_Reg csv_fns[] = {{"write", l_csv_write}, {NULL, NULL}};
    luaL_newlib(L, csv_fns);
    lua_setfield(L, -2, "csv");
}
