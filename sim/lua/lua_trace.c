/* lua_trace.c — rehearse.trace: Trace objects in Lua.
 *   trace.load(path)              a trace file: binary, or any importable format
 *   trace.new{block_size=, model=}  an empty trace, filled with t:add
 *   t:add{arrival=, input_len=, output_len=, id=, session_id=, priority=, adapter=, hashes={...}}
 *   t:slice{from=, to=, first=, sample=, seed=, rate_scale=, input_scale=,
 *           output_scale=, length_scale=}   a new trace, cut as `trace slice` cuts
 *   trace.import(path, {format=, model=, block_size=})   with explicit import options
 *   trace.synth{requests=, rate=, arrival=, input_len=, ...}   the options of
 *           `rehearse trace synth`, by the same names
 *   t:save(path)                  write it (remembered as its path)
 *   #t, t:count()                 requests
 *   t:request(i)                  the i-th request as a table (1-based)
 *   t.path                        the file it lives in, or nil */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "sim/lua/lua_api.h"
#include "traces/import/import.h"
#include "traces/tools/slice.h"
#include "traces/tools/stats.h"
#include "traces/tools/synth.h"

rlua_trace *rlua_check_trace(lua_State *L, int idx)
{
    return luaL_checkudata(L, idx, RLUA_TRACE_MT);
}

static int trace_gc(lua_State *L)
{
    rlua_trace *t = rlua_check_trace(L, 1);
    tr_trace_free(&t->t);
    free(t->path);
    t->path = NULL;
    return 0;
}

rlua_trace *rlua_push_new_trace(lua_State *L)
{
    rlua_trace *t = lua_newuserdatauv(L, sizeof *t, 0);
    memset(t, 0, sizeof *t);
    tr_trace_init(&t->t);
    luaL_setmetatable(L, RLUA_TRACE_MT);
    return t;
}

static int l_trace_load(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    rlua_trace *t = rlua_push_new_trace(L);
    rh_err e;
    tr_trace_free(&t->t);   /* tr_trace_load initializes it afresh */
    if (tr_trace_load(path, &t->t, &e) < 0) return luaL_error(L, "trace.load: %s", e.msg);
    t->path = strdup(path);
    return 1;
}

static uint32_t opt_u32(lua_State *L, int t, const char *k, uint32_t dflt)
{
    lua_getfield(L, t, k);
    lua_Integer v = lua_isnil(L, -1) ? (lua_Integer)dflt : luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    if (v < 0 || v > UINT32_MAX) luaL_error(L, "trace: '%s' = %d is out of range", k, (int)v);
    return (uint32_t)v;
}

static int l_trace_new(lua_State *L)
{
    int has_opts = lua_istable(L, 1);
    rlua_trace *t = rlua_push_new_trace(L);
    if (has_opts) {
        t->t.header.block_size = opt_u32(L, 1, "block_size", 0);
        lua_getfield(L, 1, "model");
        if (lua_isstring(L, -1)) tr_header_set_model(&t->t.header, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    return 1;
}

/* t:add{...}: appends a request; ids default to 1, 2, 3, ... */
static int l_trace_add(lua_State *L)
{
    rlua_trace *t = rlua_check_trace(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    tr_request r = {0};
    lua_getfield(L, 2, "arrival");
    r.arrival = luaL_optnumber(L, -1, 0);
    lua_pop(L, 1);
    if (!(r.arrival >= 0)) return luaL_error(L, "trace:add: arrival must be >= 0");
    lua_getfield(L, 2, "id");
    r.id = lua_isnil(L, -1) ? t->t.n_requests + 1 : (uint64_t)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    r.input_len = opt_u32(L, 2, "input_len", 0);
    r.output_len = opt_u32(L, 2, "output_len", 0);
    if (r.input_len == 0 || r.output_len == 0) return luaL_error(L, "trace:add: input_len and output_len must be > 0");
    lua_getfield(L, 2, "session_id");
    r.session_id = lua_isnil(L, -1) ? 0 : (uint64_t)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 2, "priority");
    lua_Integer prio = lua_isnil(L, -1) ? 0 : luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    if (prio < INT32_MIN || prio > INT32_MAX) return luaL_error(L, "trace:add: priority must fit in 32 bits");
    r.priority = (int32_t)prio;
    r.adapter = opt_u32(L, 2, "adapter", 0);
    uint64_t hashes[4096];
    lua_getfield(L, 2, "hashes");
    if (lua_istable(L, -1)) {
        lua_Integer n = luaL_len(L, -1);
        if (n > 4096) return luaL_error(L, "trace:add: at most 4096 block hashes");
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            hashes[i - 1] = (uint64_t)luaL_checkinteger(L, -1);
            lua_pop(L, 1);
        }
        r.n_hashes = (uint32_t)n;
        r.hashes = hashes;
    }
    lua_pop(L, 1);
    rh_err e;
    if (tr_trace_add_request(&t->t, &r, &e) < 0) return luaL_error(L, "trace:add: %s", e.msg);
    lua_settop(L, 1);
    return 1;
}

/* A sink that collects a stream into an in-memory trace. */
static int into_header(void *ctx, const tr_header *h, rh_err *e)
{
    tr_trace *t = ctx;
    tr_header_free(&t->header);
    if (tr_header_copy(&t->header, h) < 0) return rh_fail(e, "out of memory");
    return 0;
}

static int into_record(void *ctx, const tr_record *r, rh_err *e)
{
    tr_trace *t = ctx;
    return r->kind == TR_REQUEST ? tr_trace_add_request(t, &r->req, e) : tr_trace_add_step(t, &r->step, e);
}

/* Feeds every key = value of the table at `t` to a by-name setter; an
 * unknown key or a bad value leaves an error message on the stack and
 * returns -1 (the caller raises it). */
static int set_opts(lua_State *L, int t, const char *who, int (*set)(void *, const char *, const char *, rh_err *),
                    void *opts)
{
    lua_pushnil(L);
    while (lua_next(L, t)) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            lua_pop(L, 2);
            lua_pushfstring(L, "%s: option names must be strings", who);
            return -1;
        }
        const char *k = lua_tostring(L, -2);
        char num[64];
        const char *v;
        if (lua_isinteger(L, -1)) {
            snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, -1));
            v = num;
        } else if (lua_type(L, -1) == LUA_TNUMBER) {
            snprintf(num, sizeof num, "%.17g", lua_tonumber(L, -1));
            v = num;
        } else if (lua_type(L, -1) == LUA_TSTRING) {
            v = lua_tostring(L, -1);   /* the table keeps it alive */
        } else {
            lua_pushfstring(L, "%s: option '%s' has a %s value", who, k, luaL_typename(L, -1));
            return -1;
        }
        rh_err e;
        int r = set(opts, k, v, &e);
        if (r <= 0) {
            if (r == 0) lua_pushfstring(L, "%s: unknown option '%s'", who, k);
            else lua_pushfstring(L, "%s: %s", who, e.msg);
            return -1;
        }
        lua_pop(L, 1);
    }
    return 0;
}

static int set_synth(void *o, const char *k, const char *v, rh_err *e)
{
    return tr_synth_opts_set(o, k, v, e);
}

static int set_slice(void *o, const char *k, const char *v, rh_err *e)
{
    return tr_slice_opts_set(o, k, v, e);
}

static int l_trace_synth(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    if (set_opts(L, 1, "trace.synth", set_synth, &o) < 0)
        return lua_error(L);
    tr_synth_opts_finish(&o);
    rh_err e;
    if (tr_synth_check(&o, &e) < 0) return luaL_error(L, "trace.synth: %s", e.msg);
    rlua_trace *t = rlua_push_new_trace(L);
    tr_sink sink = {&t->t, into_header, into_record};
    if (tr_synth(&o, &sink, &e) < 0) return luaL_error(L, "trace.synth: %s", e.msg);
    return 1;
}

static int l_trace_import(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    tr_import_opts o;
    tr_import_opts_init(&o);
    if (lua_istable(L, 2)) {
        lua_getfield(L, 2, "format");
        if (lua_isstring(L, -1)) {
            o.format = tr_format_parse(lua_tostring(L, -1));
            if (o.format == TR_FMT_UNKNOWN) return luaL_error(L, "trace.import: unknown format '%s'", lua_tostring(L, -1));
        }
        lua_getfield(L, 2, "model");
        if (lua_isstring(L, -1)) o.model = lua_tostring(L, -1);
        lua_getfield(L, 2, "block_size");
        if (!lua_isnil(L, -1)) o.block_size = (uint32_t)luaL_checkinteger(L, -1);
        /* the option values stay on the stack while they are used */
    }
    rlua_trace *t = rlua_push_new_trace(L);
    tr_sink sink = {&t->t, into_header, into_record};
    rh_err e;
    if (tr_read(path, &o, &sink, NULL, &e) < 0) return luaL_error(L, "trace.import: %s", e.msg);
    return 1;
}

static int l_trace_slice(lua_State *L)
{
    rlua_trace *src = rlua_check_trace(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    tr_slice_opts o;
    tr_slice_opts_init(&o);
    rh_err e;
    if (set_opts(L, 2, "trace:slice", set_slice, &o) < 0)
        return lua_error(L);
    if (tr_slice_check(&o, &e) < 0) return luaL_error(L, "trace:slice: %s", e.msg);
    rlua_trace *dst = rlua_push_new_trace(L);
    tr_sink down = {&dst->t, into_header, into_record};
    tr_slicer *sl = tr_slicer_new(&o, &down);
    if (!sl) return luaL_error(L, "trace:slice: out of memory");
    tr_sink in = tr_slicer_sink(sl);
    int rc = in.header(in.ctx, &src->t.header, &e);
    for (size_t i = 0; rc == 0 && i < src->t.n_requests; i++) {
        tr_record r = {.kind = TR_REQUEST, .req = src->t.requests[i]};
        rc = in.record(in.ctx, &r, &e);
    }
    for (size_t i = 0; rc == 0 && i < src->t.n_steps; i++) {
        tr_record r = {.kind = TR_STEP, .step = src->t.steps[i]};
        rc = in.record(in.ctx, &r, &e);
    }
    tr_slicer_free(sl);
    if (rc < 0) return luaL_error(L, "trace:slice: %s", e.msg);
    return 1;
}

static int l_trace_save(lua_State *L)
{
    rlua_trace *t = rlua_check_trace(L, 1);
    const char *path = luaL_checkstring(L, 2);
    rh_err e;
    if (tr_trace_save(&t->t, path, &e) < 0) return luaL_error(L, "trace:save: %s", e.msg);
    free(t->path);
    t->path = strdup(path);
    lua_settop(L, 1);
    return 1;
}

static int l_trace_len(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)rlua_check_trace(L, 1)->t.n_requests);
    return 1;
}

/* trace:stats(): what `rehearse trace stats` prints, as a table. */
static int l_trace_stats(lua_State *L)
{
    rlua_trace *t = rlua_check_trace(L, 1);
    tr_stats_acc *a = tr_stats_new();
    if (!a) return luaL_error(L, "trace:stats: out of memory");
    tr_sink k = tr_stats_sink(a);
    rh_err e = {{0}};
    int rc = k.header(k.ctx, &t->t.header, &e);
    for (size_t i = 0; rc == 0 && i < t->t.n_requests; i++) {
        tr_record r = {.kind = TR_REQUEST, .req = t->t.requests[i]};
        rc = k.record(k.ctx, &r, &e) < 0 ? -1 : 0;
    }
    tr_stats st;
    if (rc == 0) rc = tr_stats_finish(a, &st, &e);
    tr_stats_free(a);
    if (rc < 0) return luaL_error(L, "trace:stats: %s", e.msg);
    lua_createtable(L, 0, 8);
    lua_pushinteger(L, (lua_Integer)st.requests);
    lua_setfield(L, -2, "requests");
    lua_pushnumber(L, st.span);
    lua_setfield(L, -2, "span");
    lua_pushnumber(L, st.rate);
    lua_setfield(L, -2, "rate");
    lua_pushinteger(L, (lua_Integer)st.input_tokens);
    lua_setfield(L, -2, "input_tokens");
    lua_pushinteger(L, (lua_Integer)st.output_tokens);
    lua_setfield(L, -2, "output_tokens");
    lua_pushnumber(L, st.prefix_hit_ratio);
    lua_setfield(L, -2, "prefix_hit_ratio");
    lua_pushinteger(L, (lua_Integer)st.sessions);
    lua_setfield(L, -2, "sessions");
    return 1;
}

static int l_trace_request(lua_State *L)
{
    rlua_trace *t = rlua_check_trace(L, 1);
    lua_Integer i = luaL_checkinteger(L, 2);
    if (i < 1 || (size_t)i > t->t.n_requests)
        return luaL_error(L, "trace:request: index %d out of 1..%d", (int)i, (int)t->t.n_requests);
    const tr_request *r = &t->t.requests[i - 1];
    lua_createtable(L, 0, 8);
    lua_pushinteger(L, (lua_Integer)r->id);
    lua_setfield(L, -2, "id");
    lua_pushnumber(L, r->arrival);
    lua_setfield(L, -2, "arrival");
    lua_pushinteger(L, r->input_len);
    lua_setfield(L, -2, "input_len");
    lua_pushinteger(L, r->output_len);
    lua_setfield(L, -2, "output_len");
    lua_pushinteger(L, (lua_Integer)r->session_id);
    lua_setfield(L, -2, "session_id");
    lua_pushinteger(L, (lua_Integer)r->priority);
    lua_setfield(L, -2, "priority");
    lua_pushinteger(L, (lua_Integer)r->adapter);
    lua_setfield(L, -2, "adapter");
    lua_pushinteger(L, r->n_hashes);
    lua_setfield(L, -2, "n_hashes");
    if (r->flags & TR_REQ_MEASURED) {
        lua_pushnumber(L, r->ttft);
        lua_setfield(L, -2, "ttft");
        lua_pushnumber(L, r->e2e);
        lua_setfield(L, -2, "e2e");
    }
    return 1;
}

static int l_trace_index(lua_State *L)
{
    rlua_trace *t = rlua_check_trace(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "path")) {
        if (t->path) lua_pushstring(L, t->path);
        else lua_pushnil(L);
        return 1;
    }
    lua_getmetatable(L, 1);
    lua_getfield(L, -1, "methods");
    lua_getfield(L, -1, k);
    return 1;
}

void rlua_open_trace(lua_State *L)
{
    if (luaL_newmetatable(L, RLUA_TRACE_MT)) {
        lua_pushcfunction(L, trace_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_trace_len);
        lua_setfield(L, -2, "__len");
        lua_pushcfunction(L, l_trace_index);
        lua_setfield(L, -2, "__index");
        static const luaL_Reg methods[] = {
            {"save", l_trace_save}, {"count", l_trace_len}, {"request", l_trace_request},
            {"stats", l_trace_stats},
            {"add", l_trace_add},   {"slice", l_trace_slice}, {NULL, NULL}};
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "methods");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"load", l_trace_load}, {"new", l_trace_new}, {"synth", l_trace_synth},
                                   {"import", l_trace_import}, {NULL, NULL}};
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "trace");
}
