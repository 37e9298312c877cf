/* lua_api.h — the Lua 5.4 API of `rehearse run SCRIPT.lua`.
 *
 * A global table `rehearse` (also returned by require "rehearse"):
 *   rehearse.trace.load(path) / .import(path [, {format=...}]) / .synth{...}
 *       -> Trace; t:save(path), t:slice{...}, t:stats(), #t
 *   rehearse.cost.load(path) / .new{kind=..., ...} / .linear{...} -> Cost
 *   rehearse.sim.run{trace=, cost=, <every knob by CLI name>, policy=function}
 *       -> {metrics=..., series=..., requests=... (with per_request=true)}
 *   rehearse.sweep(configs [, {workers=N}]) -> results in input order,
 *       run in parallel worker processes with a progress bar
 *   rehearse.plan{trace=, model=, slo_ttft_ms=, slo_tpot_ms=, ..., objective=function}
 *       -> the plan (sim/lua/lua_plan.c): the cheapest deployment, or the best by the objective
 *   rehearse.json.encode/decode/read/write, rehearse.csv.write
 *   rehearse.args: key=value pairs from the command line (numbers converted)
 * Errors raise Lua errors; `rehearse run` prints them as file:line: message. */
#ifndef RH_LUA_API_H
#define RH_LUA_API_H

#include <jansson.h>
#include <lua.h>

#include "sim/cost/cost.h"
#include "traces/trace.h"
#include "util/err.h"

/* A trace held by Lua. `path` is the file it is stored in ("" until saved);
 * emitted jobs need a path, so an in-memory trace is saved on demand. */
#define RLUA_TRACE_MT "rehearse.Trace"
typedef struct rlua_trace {
    tr_trace t;
    char *path;
} rlua_trace;
rlua_trace *rlua_check_trace(lua_State *L, int idx);
rlua_trace *rlua_push_new_trace(lua_State *L);                /* empty, owned by Lua */

/* A cost model held by Lua, with the JSON text it came from (for jobs). */
#define RLUA_COST_MT "rehearse.Cost"
typedef struct rlua_cost {
    cost_model *m;
    char *json_text;
    char *path;
} rlua_cost;

typedef struct rlua_options {
    const char *emit_jobs_dir;   /* --emit-jobs DIR: sweeps write jobs instead of running */
    const char *collect_dir;     /* --collect DIR: sweeps read results written by jobs */
    int workers;                 /* 0: one per core */
    const char *self_path;       /* the rehearse binary, for emitted command lines */
} rlua_options;

/* Opens the `rehearse` table in L (as a global and in package.loaded). */
void rlua_open(lua_State *L, const rlua_options *opt);

/* Pieces shared between the binding files. */
void rlua_open_json(lua_State *L);                          /* adds json and csv to the table on top */
void rlua_open_trace(lua_State *L);                         /* adds trace */
void rlua_open_plot(lua_State *L);                          /* adds plot */
void rlua_open_util(lua_State *L);                          /* adds mkdir, exists, shared_traces, log */
void rlua_open_plan(lua_State *L);                          /* adds plan (sim/plan/plan.h) */
void rlua_push_json(lua_State *L, const json_t *j);
json_t *rlua_to_json(lua_State *L, int idx, int depth, rh_err *e);

/* Raised (as a Lua error with this exact message) when --emit-jobs has
 * written a sweep's jobs: the script stops there and `rehearse run` exits 0. */
#define RLUA_JOBS_EMITTED "rehearse: jobs emitted"

#endif
