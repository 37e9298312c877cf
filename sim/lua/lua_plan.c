/* lua_plan.c — rehearse.plan{...}: `rehearse plan` from a script, with a
 * custom objective.
 *
 *   local p = rehearse.plan{trace = t, model = "llama-3-70b", slo_ttft_ms = 2000, slo_tpot_ms = 100,
 *                           gpus = {"h100-sxm", "h200"}, tp = {4, 8}, max_replicas = 4,
 *                           objective = function(c) return c.meets_slos and c.usd_per_hour / c.request_goodput end,
 *                           knobs = {scheduler = "vllm"}}
 *   p.ranked[1].name, p.ranked[1].metrics.p99_ttft_ms, p.per_gpu, ...
 *
 * Keys: trace (a Trace or a path), model, slo_ttft_ms, slo_tpot_ms,
 * slo_quantile, slo_attainment, prices (a path; default the sample beside
 * the binary), gpus, tp, max_replicas, max_gpus, chunked_prefill_sizes,
 * max_running_requests, speculative_steps, speculative_algorithm, routers,
 * pd ({"none", "1:3"}), rungs, eta, keep, min_requests, workers,
 * rate_search, rate_scale, knobs (any `rehearse sim` knob by name) and
 * objective: called with each simulated candidate (its knobs, its cost and
 * its metrics, flat) and returning a number, lower better, or nil or false
 * for one not acceptable. Without it the plan is the cheapest that meets
 * the SLOs. The result is plan.json's table, the objective's score on each
 * ranked candidate. An unknown key is an error naming it. */
#include <lauxlib.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/router/router.h"
#include "sim/lua/lua_api.h"
#include "sim/plan/plan.h"
#include "sim/plan/report.h"
#include "traces/import/import.h"
#include "util/args.h"
#include "util/fs.h"

typedef struct lplan {
    lua_State *L;
    int fn;                  /* registry ref of the objective */
    const plan_slo *slo;
    char err[512];           /* the first error it raised */
} lplan;

static void set_num(lua_State *L, const char *k, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static double objective(void *ctx, const plan_space *sp, const plan_cand *c)
{
    lplan *p = ctx;
    lua_State *L = p->L;
    if (p->err[0]) return NAN;
    lua_rawgeti(L, LUA_REGISTRYINDEX, p->fn);
    lua_createtable(L, 0, 24);
    char name[160];
    plan_cand_name(sp, c, name, sizeof name);
    lua_pushstring(L, name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, sp->gpus[c->gpu].name);
    lua_setfield(L, -2, "gpu");
    lua_pushstring(L, router_policy_name((router_policy)c->router));
    lua_setfield(L, -2, "router");
    set_num(L, "tp", c->tp);
    set_num(L, "replicas", c->replicas);
    set_num(L, "prefill_replicas", c->prefill);
    set_num(L, "chunked_prefill_size", c->chunk);
    set_num(L, "max_running_requests", c->max_running);
    set_num(L, "speculative_num_steps", c->spec_steps);
    lua_pushstring(L, plan_parallel_name(c->parallel));
    lua_setfield(L, -2, "parallel");
    set_num(L, "gpus", c->gpus);
    set_num(L, "usd_per_hour", c->usd_hour);
    set_num(L, "requests", c->ev.requests);
    set_num(L, "p50_ttft_ms", c->ev.ttft_p50);
    set_num(L, "p99_ttft_ms", c->ev.ttft_p99);
    set_num(L, "p50_tpot_ms", c->ev.tpot_p50);
    set_num(L, "p99_tpot_ms", c->ev.tpot_p99);
    set_num(L, "slo_quantile_ttft_ms", c->ev.ttft_q);
    set_num(L, "slo_quantile_tpot_ms", c->ev.tpot_q);
    set_num(L, "slo_attainment", c->ev.attainment);
    set_num(L, "request_goodput", c->ev.goodput);
    set_num(L, "request_throughput", c->ev.throughput);
    lua_pushboolean(L, plan_judge(p->slo, &c->ev).ok);
    lua_setfield(L, -2, "meets_slos");
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        snprintf(p->err, sizeof p->err, "objective: %s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return NAN;
    }
    double v = NAN;
    if (lua_isnumber(L, -1)) v = lua_tonumber(L, -1);
    else if (!lua_isnil(L, -1) && !(lua_isboolean(L, -1) && !lua_toboolean(L, -1)))
        snprintf(p->err, sizeof p->err, "objective: returned a %s (a number, or nil or false for a candidate not "
                                        "acceptable)", luaL_typename(L, -1));
    lua_pop(L, 1);
    return v;
}

/* ------------------------------------------------------------ options -- */

static int list_u32(lua_State *L, int t, const char *key, uint32_t *out, int *n, uint32_t lo, uint32_t hi)
{
    lua_getfield(L, t, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    if (!lua_istable(L, -1)) return luaL_error(L, "plan: '%s' must be a list of numbers", key);
    int len = (int)luaL_len(L, -1);
    if (len < 1 || len > PLAN_MAX_LIST) return luaL_error(L, "plan: '%s' holds 1..%d values", key, PLAN_MAX_LIST);
    for (int i = 0; i < len; i++) {
        lua_rawgeti(L, -1, i + 1);
        lua_Integer v;
        int ok = lua_isinteger(L, -1);
        v = ok ? lua_tointeger(L, -1) : 0;
        lua_pop(L, 1);
        if (!ok || v < (lua_Integer)lo || v > (lua_Integer)hi)
            return luaL_error(L, "plan: %s[%d] must be a whole number in %u..%u", key, i + 1, lo, hi);
        out[i] = (uint32_t)v;
    }
    *n = len;
    lua_pop(L, 1);
    return 0;
}

static const char *const known[] = {"trace", "model", "slo_ttft_ms", "slo_tpot_ms", "slo_quantile", "slo_attainment",
                                    "prices", "gpus", "tp", "max_replicas", "max_gpus", "chunked_prefill_sizes",
                                    "max_running_requests", "speculative_steps", "speculative_algorithm", "routers",
                                    "pd", "parallel", "rungs", "eta", "keep", "min_requests", "workers", "rate_search",
                                    "rate_scale", "knobs", "objective", NULL};

static double num_field(lua_State *L, int t, const char *k, double dflt)
{
    lua_getfield(L, t, k);
    double v = dflt;
    if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1)) luaL_error(L, "plan: '%s' must be a number", k);
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

/* The strings of a list field into names (n set); 0 when absent. */
static int list_str(lua_State *L, int t, const char *key, char names[][48], int max, int *n)
{
    lua_getfield(L, t, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    if (!lua_istable(L, -1)) return luaL_error(L, "plan: '%s' must be a list of strings", key);
    int len = (int)luaL_len(L, -1);
    if (len < 1 || len > max) return luaL_error(L, "plan: '%s' holds 1..%d values", key, max);
    for (int i = 0; i < len; i++) {
        lua_rawgeti(L, -1, i + 1);
        if (!lua_isstring(L, -1)) return luaL_error(L, "plan: %s[%d] must be a string", key, i + 1);
        snprintf(names[i], 48, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    *n = len;
    lua_pop(L, 1);
    return 1;
}

typedef struct lplan_state {
    plan_gpu gpus[64];
    cost_model *costs[64];
    int n_gpus;
    plan_result res;
    tr_trace own;            /* a trace the script named by path */
    int fn;
} lplan_state;

static int state_gc(lua_State *L)
{
    lplan_state *st = lua_touserdata(L, 1);
    for (int g = 0; g < st->n_gpus; g++)
        if (st->costs[g]) cost_free(st->costs[g]);
    st->n_gpus = 0;
    plan_result_free(&st->res);
    tr_trace_free(&st->own);
    if (st->fn != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, st->fn);
    st->fn = LUA_NOREF;
    return 0;
}

static int l_plan(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        int ok = 0;
        for (int i = 0; k && known[i] && !ok; i++) ok = !strcmp(k, known[i]);
        if (!ok) return luaL_error(L, "plan: unknown key '%s'", k ? k : "(not a string)");
    }
    /* Everything freed by the state's __gc, whatever raises below. */
    lplan_state *st = lua_newuserdatauv(L, sizeof *st, 0);
    memset(st, 0, sizeof *st);
    st->fn = LUA_NOREF;
    tr_trace_init(&st->own);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, state_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    int state_idx = lua_gettop(L);

    plan_opts o;
    plan_opts_default(&o);
    o.rate_search = false;
    plan_space sp;
    plan_space_default(&sp);
    lua_getfield(L, 1, "model");
    const char *model = lua_tostring(L, -1);
    lua_pop(L, 1);
    if (!model) return luaL_error(L, "plan: 'model' (a model preset) is required");
    o.slo.ttft_ms = num_field(L, 1, "slo_ttft_ms", 0);
    o.slo.tpot_ms = num_field(L, 1, "slo_tpot_ms", 0);
    o.slo.quantile = num_field(L, 1, "slo_quantile", 0.99);
    o.slo.attainment = num_field(L, 1, "slo_attainment", 0);
    if (!(o.slo.ttft_ms > 0) || !(o.slo.tpot_ms > 0)) return luaL_error(L, "plan: slo_ttft_ms and slo_tpot_ms (> 0) are required");
    if (!(o.slo.quantile > 0 && o.slo.quantile < 1)) return luaL_error(L, "plan: slo_quantile must be in (0, 1)");
    if (!(o.slo.attainment >= 0 && o.slo.attainment <= 1)) return luaL_error(L, "plan: slo_attainment must be in [0, 1]");
    o.base.rate_scale = num_field(L, 1, "rate_scale", 1);
    if (!(o.base.rate_scale > 0)) return luaL_error(L, "plan: rate_scale must be > 0");
    list_u32(L, 1, "tp", sp.tp, &sp.n_tp, 1, 64);
    uint32_t l[PLAN_MAX_LIST];
    int nl = 0;
    if (list_u32(L, 1, "chunked_prefill_sizes", l, &nl, 1, 1u << 24), nl) {
        sp.n_chunk = nl;
        for (int i = 0; i < nl; i++) sp.chunk[i] = (int32_t)l[i];
    }
    list_u32(L, 1, "max_running_requests", sp.max_running, &sp.n_max_running, 1, 1u << 20);
    list_u32(L, 1, "speculative_steps", sp.spec_steps, &sp.n_spec, 0, 64);
    sp.max_replicas = (uint32_t)num_field(L, 1, "max_replicas", sp.max_replicas);
    sp.max_gpus = (uint32_t)num_field(L, 1, "max_gpus", sp.max_gpus);
    if (sp.max_replicas < 1 || sp.max_replicas > 4096) return luaL_error(L, "plan: max_replicas must be 1..4096");
    o.rungs = (uint32_t)num_field(L, 1, "rungs", o.rungs);
    o.eta = (uint32_t)num_field(L, 1, "eta", o.eta);
    o.keep = (uint32_t)num_field(L, 1, "keep", o.keep);
    o.min_requests = (uint32_t)num_field(L, 1, "min_requests", o.min_requests);
    o.workers = (int)num_field(L, 1, "workers", 0);
    if (o.rungs > 8 || o.eta < 2) return luaL_error(L, "plan: rungs must be 0 (as many as needed) to 8 and eta at least 2");
    lua_getfield(L, 1, "rate_search");
    o.rate_search = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 1, "speculative_algorithm");
    if (lua_isstring(L, -1)) snprintf(sp.spec_algorithm, sizeof sp.spec_algorithm, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    char names[64][48];
    int n = 0;
    if (list_str(L, 1, "routers", names, PLAN_MAX_LIST, &n)) {
        sp.n_routers = n;
        for (int i = 0; i < n; i++) {
            int p = router_policy_parse(names[i]);
            if (p < 0 || p == ROUTER_LUA) return luaL_error(L, "plan: routers[%d]: '%s' is not a router policy", i + 1, names[i]);
            sp.routers[i] = p;
        }
    }
    if (list_str(L, 1, "pd", names, PLAN_MAX_LIST, &n)) {
        sp.n_pd = n;
        for (int i = 0; i < n; i++) {
            unsigned p = 0, d = 0;
            char tail;
            if (!strcmp(names[i], "none")) sp.pd[i][0] = sp.pd[i][1] = 0;
            else if (sscanf(names[i], "%u:%u%c", &p, &d, &tail) == 2 && p >= 1 && d >= 1 && p <= 64 && d <= 64)
                sp.pd[i][0] = p, sp.pd[i][1] = d;
            else return luaL_error(L, "plan: pd[%d]: '%s' is neither none nor PREFILL:DECODE", i + 1, names[i]);
        }
    }
    bool parallel_given = list_str(L, 1, "parallel", names, 4, &n);
    if (parallel_given) {
        sp.n_parallel = n;
        for (int i = 0; i < n; i++) {
            int p = plan_parallel_parse(names[i]);
            if (p < 0) return luaL_error(L, "plan: parallel[%d]: '%s' is not tp, ep, dp-attention or ep+dp-attention", i + 1, names[i]);
            sp.parallel[i] = (uint8_t)p;
        }
    }
    /* Knobs every candidate takes. */
    lua_getfield(L, 1, "knobs");
    if (lua_istable(L, -1)) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            char knob[128];
            rh_err e = {{0}};
            const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
            if (!k || rh_knob_name(k, knob, sizeof knob) < 0) return luaL_error(L, "plan: knobs: a key is not a knob name");
            const char *v = lua_isboolean(L, -1) ? (lua_toboolean(L, -1) ? "true" : "false") : lua_tostring(L, -1);
            if (!v) return luaL_error(L, "plan: knobs.%s: a string, number or boolean", k);
            int rc = sim_config_set(&o.base, knob, v, &e);
            if (rc == 0) return luaL_error(L, "plan: knobs.%s: unknown knob", k);
            if (rc < 0) return luaL_error(L, "plan: knobs.%s: %s", k, e.msg);
            lua_pop(L, 1);
        }
    } else if (!lua_isnil(L, -1)) {
        return luaL_error(L, "plan: 'knobs' must be a table of knob = value");
    }
    lua_pop(L, 1);
    /* The GPUs at their prices. */
    char prices[PATH_MAX];
    lua_getfield(L, 1, "prices");
    if (lua_isstring(L, -1)) {
        snprintf(prices, sizeof prices, "%s", lua_tostring(L, -1));
    } else if (rh_scripts_path("prices.json", prices, sizeof prices) < 0) {
        return luaL_error(L, "plan: 'prices' (a PRICES.json) is required: the sample scripts/prices.json is not found");
    }
    lua_pop(L, 1);
    rh_err e = {{0}};
    if (!list_str(L, 1, "gpus", names, 64, &n) && (n = plan_price_names(prices, names, 64, &e)) < 0)
        return luaL_error(L, "plan: %s", e.msg);
    st->n_gpus = n;
    if (plan_gpus_load(model, names, n, prices, st->gpus, st->costs, &e) < 0) return luaL_error(L, "plan: %s", e.msg);
    sp.gpus = st->gpus;
    sp.n_gpus = n;
    if (!parallel_given && plan_model_has_experts(sp.gpus[0].cost)) {   /* as the command's default */
        for (int p = 0; p < 4; p++) sp.parallel[p] = (uint8_t)p;
        sp.n_parallel = 4;
    }
    /* The trace. */
    const tr_trace *t;
    lua_getfield(L, 1, "trace");
    if (lua_isstring(L, -1)) {
        tr_trace_free(&st->own);   /* the load starts it afresh (and leaves it freeable when it fails) */
        if (tr_trace_load(lua_tostring(L, -1), &st->own, &e) < 0) return luaL_error(L, "plan: %s", e.msg);
        t = &st->own;
    } else if (lua_isuserdata(L, -1)) {
        t = &rlua_check_trace(L, -1)->t;
    } else {
        return luaL_error(L, "plan: 'trace' (a Trace or a path) is required");
    }
    lua_pop(L, 1);
    /* The objective. */
    lplan lp = {.L = L, .fn = LUA_NOREF, .slo = &o.slo};
    lua_getfield(L, 1, "objective");
    if (lua_isfunction(L, -1)) {
        st->fn = lp.fn = luaL_ref(L, LUA_REGISTRYINDEX);
        o.objective = objective;
        o.objective_ctx = &lp;
    } else {
        if (!lua_isnil(L, -1)) return luaL_error(L, "plan: 'objective' must be a function(candidate)");
        lua_pop(L, 1);
    }
    o.progress = 1;
    if (plan_run(&o, &sp, t, &st->res, &e) < 0) return luaL_error(L, "plan: %s", e.msg);
    if (lp.err[0]) return luaL_error(L, "plan: %s", lp.err);
    json_t *j = plan_to_json(&o, &sp, &st->res, NULL);
    if (o.objective) {
        json_t *ranked = json_object_get(j, "ranked");
        for (uint32_t i = 0; i < st->res.n_ranked; i++) {
            double sc = st->res.c[st->res.ranked[i]].score;
            json_object_set_new(json_array_get(ranked, i), "score", isfinite(sc) ? json_real(sc) : json_null());
        }
    }
    rlua_push_json(L, j);
    json_decref(j);
    (void)state_idx;
    return 1;
}

void rlua_open_plan(lua_State *L)
{
    lua_pushcfunction(L, l_plan);
    lua_setfield(L, -2, "plan");
}
