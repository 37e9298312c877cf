/* lua_plot.c — rehearse.plot.KIND{...}: the plot module of the Lua API.
 *   rehearse.plot.lines{csv="a.csv" | rows={...}, out="reports/x/p99",
 *                       x=, y=, z=, by=, title=, xlabel=, ylabel=, zlabel=,
 *                       logx=, logy=, hline=, hline_label=, vline=, vline_label=, diagonal=}
 * With `rows` (an array of tables) the CSV is written first as OUT.csv.
 * Kinds: lines, timeseries, scatter, cdf, heatmap, bars. A plot that cannot
 * be drawn (gnuplot missing, say) warns on stderr and returns false and the
 * message; the CSV stays, so an experiment never loses its numbers. */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include "sim/lua/lua_api.h"
#include "sim/plot/plot.h"

static const char *opt_str(lua_State *L, int t, const char *k)
{
    lua_getfield(L, t, k);
    const char *v = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
    lua_pop(L, 1);     /* the string stays alive: the table holds it */
    return v;
}

static double opt_num(lua_State *L, int t, const char *k, double dflt)
{
    lua_getfield(L, t, k);
    double v = lua_isnil(L, -1) ? dflt : luaL_checknumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static int opt_bool(lua_State *L, int t, const char *k)
{
    lua_getfield(L, t, k);
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

static int draw(lua_State *L, plot_kind kind)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    plot_spec s;
    plot_spec_init(&s);
    s.kind = kind;
    s.out = opt_str(L, 1, "out");
    if (!s.out) return luaL_error(L, "plot.%s: 'out' (the output path without extension) is required",
                                  plot_kind_name(kind));
    char csvpath[4096];
    lua_getfield(L, 1, "rows");
    if (!lua_isnil(L, -1)) {
        snprintf(csvpath, sizeof csvpath, "%s.csv", s.out);
        lua_getglobal(L, "rehearse");
        lua_getfield(L, -1, "csv");
        lua_getfield(L, -1, "write");
        lua_pushstring(L, csvpath);
        lua_pushvalue(L, -5);
        lua_getfield(L, 1, "columns");
        lua_call(L, 3, 0);
        lua_pop(L, 2);
        s.csv = csvpath;
    } else {
        s.csv = opt_str(L, 1, "csv");
    }
    lua_pop(L, 1);
    if (!s.csv) return luaL_error(L, "plot.%s: give 'csv' (a file) or 'rows' (a table)", plot_kind_name(kind));
    s.x = opt_str(L, 1, "x");
    s.y = opt_str(L, 1, "y");
    s.z = opt_str(L, 1, "z");
    s.by = opt_str(L, 1, "by");
    s.title = opt_str(L, 1, "title");
    s.xlabel = opt_str(L, 1, "xlabel");
    s.ylabel = opt_str(L, 1, "ylabel");
    s.zlabel = opt_str(L, 1, "zlabel");
    s.hline_label = opt_str(L, 1, "hline_label");
    s.vline_label = opt_str(L, 1, "vline_label");
    s.hline = opt_num(L, 1, "hline", NAN);
    s.vline = opt_num(L, 1, "vline", NAN);
    s.logx = opt_bool(L, 1, "logx");
    s.logy = opt_bool(L, 1, "logy");
    s.diagonal = opt_bool(L, 1, "diagonal");
    rh_err e;
    if (plot_draw(&s, &e) < 0) {
        fprintf(stderr, "rehearse: plot %s: %s\n", s.out, e.msg);
        lua_pushboolean(L, 0);
        lua_pushstring(L, e.msg);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int l_lines(lua_State *L) { return draw(L, PLOT_LINES); }
static int l_timeseries(lua_State *L) { return draw(L, PLOT_TIMESERIES); }
static int l_scatter(lua_State *L) { return draw(L, PLOT_SCATTER); }
static int l_cdf(lua_State *L) { return draw(L, PLOT_CDF); }
static int l_heatmap(lua_State *L) { return draw(L, PLOT_HEATMAP); }
static int l_bars(lua_State *L) { return draw(L, PLOT_BARS); }

void rlua_open_plot(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"lines", l_lines}, {"timeseries", l_timeseries}, {"scatter", l_scatter},
        {"cdf", l_cdf},     {"heatmap", l_heatmap},       {"bars", l_bars},
        {NULL, NULL},
    };
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "plot");
}
