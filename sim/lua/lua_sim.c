/* lua_sim.c — rehearse.cost, rehearse.sim.run and rehearse.sweep.
 *
 * A configuration is a Lua table: `trace` and `cost` (objects or file paths),
 * an optional `policy` function, `per_request` (keep per-request outcomes),
 * `label` (free text, ignored), and every simulator or scheduler knob under
 * its CLI name ("chunked_prefill_size" or ["chunked-prefill-size"]). An
 * unknown key is an error naming it.
 *
 * sweep() runs configurations in forked worker processes (copy-on-write
 * shares traces and cost models), each writing its result as JSON to a
 * temporary file; results come back in input order. With --emit-jobs the
 * same configurations become plain `rehearse sim` command lines instead, and
 * --collect reads what those jobs wrote. */
#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/lua/lua_api.h"
#include "sim/cluster.h"
#include "sim/result.h"
#include "sim/sim.h"
#include "traces/import/import.h"
#include "util/args.h"
#include "util/progress.h"
#include "util/atomic_file.h"
#include "util/fork_pool.h"

static rlua_options g_opt;
static int g_sweep_ordinal;

/* ---------------------------------------------------------------- cost -- */

static rlua_cost *check_cost(lua_State *L, int idx)
{
    return luaL_checkudata(L, idx, RLUA_COST_MT);
}

static int cost_gc(lua_State *L)
{
    rlua_cost *c = check_cost(L, 1);
    if (c->m) cost_free(c->m);
    free(c->json_text);
    free(c->path);
    c->m = NULL;
    c->json_text = c->path = NULL;
    return 0;
}

static rlua_cost *push_cost(lua_State *L)
{
    rlua_cost *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    luaL_setmetatable(L, RLUA_COST_MT);
    return c;
}

static char *slurp(const char *path, rh_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *b2 = realloc(buf, cap * 2);
            if (!b2) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b2;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) {
        rh_fail(e, "%s: out of memory", path);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static int l_cost_load(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    rh_err e;
    char *text = slurp(path, &e);
    if (!text) return luaL_error(L, "cost.load: %s", e.msg);
    cost_model *m = cost_parse(text, path, &e);
    if (!m) {
        free(text);
        return luaL_error(L, "cost.load: %s", e.msg);
    }
    rlua_cost *c = push_cost(L);
    c->m = m;
    c->json_text = text;
    c->path = strdup(path);
    return 1;
}

/* cost.new{kind=..., ...}: any kind, from a table shaped like its file. */
static int l_cost_new(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    rh_err e;
    json_t *j = rlua_to_json(L, 1, 0, &e);
    if (!j) return luaL_error(L, "cost.new: %s", e.msg);
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(j);
    if (!text) return luaL_error(L, "cost.new: out of memory");
    cost_model *m = cost_parse(text, "cost table", &e);
    if (!m) {
        free(text);
        return luaL_error(L, "cost.new: %s", e.msg);
    }
    rlua_cost *c = push_cost(L);
    c->m = m;
    c->json_text = text;
    return 1;
}

/* cost.linear{base_s=..., ...}: cost.new with kind and version filled in. */
static int l_cost_linear(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_pushstring(L, "linear");
    lua_setfield(L, 1, "kind");
    lua_getfield(L, 1, "version");
    if (lua_isnil(L, -1)) {
        lua_pushinteger(L, 1);
        lua_setfield(L, 1, "version");
    }
    lua_pop(L, 1);
    return l_cost_new(L);
}

/* The sequences of a batch table (its array part) into a userdata left on
 * the stack. */
static cost_seq *batch_seqs(lua_State *L, int t, lua_Integer *count)
{
    lua_Integer n = luaL_len(L, t);
    cost_seq *seqs = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *seqs, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, t, i);
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_getfield(L, -1, "n_new");
        lua_getfield(L, -2, "context");
        lua_getfield(L, -3, "prefill");
        seqs[i - 1] = (cost_seq){.n_new = (uint32_t)luaL_optinteger(L, -3, 1),
                                 .context = (uint32_t)luaL_optinteger(L, -2, 0),
                                 .prefill = lua_toboolean(L, -1)};
        lua_pop(L, 4);
    }
    *count = n;
    return seqs;
}

/* c:step_time{batch = { {n_new=, context=, prefill=}, ... }, tp = N, knob = value, ...}
 * -> seconds: one step of that batch as a server with those knobs (the
 * simulator's names: ep_size, enable_dp_attention, moe_a2a_backend,
 * speculative_num_steps, ...) runs it after a step of the same shape (the
 * overlap scheduler's steady state). With speculative_num_steps, each
 * decode's n_new is its verified tokens and the drafter's passes are
 * priced. */
static int l_cost_step_time(lua_State *L)
{
    rlua_cost *c = check_cost(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "batch");
    luaL_checktype(L, -1, LUA_TTABLE);
    int bt = lua_gettop(L);
    lua_Integer n;
    cost_seq *seqs = batch_seqs(L, bt, &n);
    sim_config cfg;
    sim_config_default(&cfg);
    rh_err e;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        if (lua_type(L, -2) == LUA_TSTRING && strcmp(lua_tostring(L, -2), "batch")) {
            const char *k = lua_tostring(L, -2);
            char v[64];
            if (lua_isboolean(L, -1)) snprintf(v, sizeof v, "%s", lua_toboolean(L, -1) ? "true" : "false");
            else if (lua_isnumber(L, -1)) snprintf(v, sizeof v, "%.17g", lua_tonumber(L, -1));
            else if (lua_type(L, -1) == LUA_TSTRING) snprintf(v, sizeof v, "%s", lua_tostring(L, -1));
            else return luaL_error(L, "step_time: knob '%s' has a %s value", k, luaL_typename(L, -1));
            int rc = sim_config_set(&cfg, k, v, &e);
            if (rc < 0) return luaL_error(L, "step_time: %s", e.msg);
            if (rc == 0) return luaL_error(L, "step_time: unknown knob '%s'", k);
        }
        lua_pop(L, 1);
    }
    if (sim_serving_resolve(&cfg, c->m, &e) < 0) return luaL_error(L, "step_time: %s", e.msg);
    cost_batch b = {.seqs = seqs, .n = (uint32_t)n, .tp = cfg.tp, .serving = &cfg.serving};
    cost_batch_summarize(&b);
    if (cfg.core.spec_steps && cfg.spec_draft_model && b.decode_seqs) {
        b.draft_steps = cfg.core.spec_steps;
        b.draft_seqs = b.decode_seqs;
        b.draft_width = cfg.spec_topk;
    }
    cost_parts p;
    cost_step_parts(c->m, &b, &p);
    lua_pushnumber(L, cost_parts_duration(&p, cfg.serving.overlap, p.forward_s + p.draft_s));
    return 1;
}

/* c:time{ {n_new=, context=, prefill=}, ... , tp=} -> seconds */
static int l_cost_time(lua_State *L)
{
    rlua_cost *c = check_cost(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n;
    cost_seq *seqs = batch_seqs(L, 2, &n);
    lua_getfield(L, 2, "tp");
    cost_batch b = {.seqs = seqs, .n = (uint32_t)n, .tp = (uint32_t)luaL_optinteger(L, -1, 0)};
    lua_pop(L, 1);
    cost_batch_summarize(&b);
    lua_pushnumber(L, cost_step_time(c->m, &b));
    return 1;
}

/* ----------------------------------------------------------- the jobs -- */

typedef struct rlua_job {
    sim_config cfg;
    rlua_trace *trace;
    rlua_cost *cost;
    int per_request;
    int policy_ref;         /* LUA_NOREF when none */
    const char *cluster;    /* a CLUSTER.json (owned[]), read over the job's knobs when it runs; NULL: none */
    char *args;             /* knobs as CLI flags, for emitted jobs (malloc'd, "" when none) */
    size_t args_len;
    char *owned[64];        /* strings the config points into */
    int n_owned;
} rlua_job;

/* Jobs live in a userdata whose __gc frees what they own, so a Lua error
 * raised half-way through parsing or running leaks nothing. */
#define RLUA_JOBS_MT "rehearse.Jobs"
typedef struct rlua_jobs {
    int n;
    rlua_job *jobs;
    json_t **out;
} rlua_jobs;

static void job_free(lua_State *L, rlua_job *j)
{
    if (j->policy_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, j->policy_ref);
    for (int i = 0; i < j->n_owned; i++) free(j->owned[i]);
    j->n_owned = 0;
    j->policy_ref = LUA_NOREF;
    free(j->args);
    j->args = NULL;
    j->args_len = 0;
}

static int jobs_gc(lua_State *L)
{
    rlua_jobs *h = luaL_checkudata(L, 1, RLUA_JOBS_MT);
    for (int i = 0; i < h->n; i++) {
        if (h->jobs) job_free(L, &h->jobs[i]);
        if (h->out) json_decref(h->out[i]);
    }
    free(h->jobs);
    free(h->out);
    h->jobs = NULL;
    h->out = NULL;
    h->n = 0;
    return 0;
}

static rlua_jobs *push_jobs(lua_State *L, int n)
{
    rlua_jobs *h = lua_newuserdatauv(L, sizeof *h, 0);
    memset(h, 0, sizeof *h);
    luaL_setmetatable(L, RLUA_JOBS_MT);
    h->jobs = calloc((size_t)(n ? n : 1), sizeof *h->jobs);
    h->out = calloc((size_t)(n ? n : 1), sizeof *h->out);
    if (!h->jobs || !h->out) luaL_error(L, "out of memory");
    for (int i = 0; i < n; i++) h->jobs[i].policy_ref = LUA_NOREF;
    h->n = n;
    return h;
}

static const char *own(rlua_job *j, const char *s)
{
    if (j->n_owned >= (int)(sizeof j->owned / sizeof j->owned[0])) return NULL;
    return j->owned[j->n_owned++] = strdup(s);
}

/* Appends the knob as the command line takes it: " --name 'value'", the
 * name in CLI spelling and the value quoted for the shell; a boolean knob
 * bare when true, "--name=false" when false (a job line must parse as
 * `rehearse sim` parses it). -1 out of memory. */
static int add_arg(rlua_job *j, const char *name, const char *value)
{
    char flag[128];
    rh_knob_name(name, flag, sizeof flag);
    int boolean = sim_config_takes_value(flag) == 0;
    char *quoted = boolean ? NULL : rh_shell_quote(value);
    if (!boolean && !quoted) return -1;
    size_t need = strlen(flag) + (quoted ? strlen(quoted) : 0) + 16;
    char *grown = realloc(j->args, j->args_len + need);
    if (!grown) {
        free(quoted);
        return -1;
    }
    j->args = grown;
    if (boolean)
        j->args_len += (size_t)sprintf(j->args + j->args_len, " --%s%s", flag,
                                       strcmp(value, "false") && strcmp(value, "0") ? "" : "=false");
    else
        j->args_len += (size_t)sprintf(j->args + j->args_len, " --%s %s", flag, quoted);
    free(quoted);
    return 0;
}

/* The trace of a config: a Trace object, or a path loaded now (and stored
 * back into the config so it stays alive while the config does). */
static rlua_trace *config_trace(lua_State *L, int cfg, const char *who)
{
    lua_getfield(L, cfg, "trace");
    if (lua_type(L, -1) == LUA_TSTRING) {
        const char *path = lua_tostring(L, -1);
        rlua_trace *t = rlua_push_new_trace(L);
        rh_err e;
        tr_trace_free(&t->t);   /* tr_trace_load initializes it afresh */
        if (tr_trace_load(path, &t->t, &e) < 0) luaL_error(L, "%s: %s", who, e.msg);
        t->path = strdup(path);
        lua_setfield(L, cfg, "trace");
        lua_pop(L, 1);
        lua_getfield(L, cfg, "trace");
    }
    rlua_trace *t = luaL_testudata(L, -1, RLUA_TRACE_MT);
    lua_pop(L, 1);
    if (!t) luaL_error(L, "%s: 'trace' must be a Trace or a file path", who);
    return t;
}

static rlua_cost *config_cost(lua_State *L, int cfg, const char *who)
{
    lua_getfield(L, cfg, "cost");
    if (lua_type(L, -1) == LUA_TSTRING) {
        lua_pushcfunction(L, l_cost_load);
        lua_insert(L, -2);
        lua_call(L, 1, 1);
        lua_setfield(L, cfg, "cost");
        lua_getfield(L, cfg, "cost");
    } else if (lua_istable(L, -1)) {
        lua_pushcfunction(L, l_cost_new);
        lua_insert(L, -2);
        lua_call(L, 1, 1);
        lua_setfield(L, cfg, "cost");
        lua_getfield(L, cfg, "cost");
    }
    rlua_cost *c = luaL_testudata(L, -1, RLUA_COST_MT);
    lua_pop(L, 1);
    if (!c) luaL_error(L, "%s: 'cost' must be a Cost, a cost file path or a cost table", who);
    return c;
}

static char *abs_path(const char *p);

/* The knob k = the value on the stack's top (left there), set on the job. */
static void set_knob(lua_State *L, rlua_job *j, const char *who, const char *k, int *concurrency_given)
{
    char buf[64];
    const char *v;
    switch (lua_type(L, -1)) {
    case LUA_TBOOLEAN:
        v = lua_toboolean(L, -1) ? "true" : "false";
        break;
    case LUA_TNUMBER:
        if (lua_isinteger(L, -1)) snprintf(buf, sizeof buf, "%lld", (long long)lua_tointeger(L, -1));
        else snprintf(buf, sizeof buf, "%.17g", lua_tonumber(L, -1));
        v = buf;
        break;
    case LUA_TSTRING:
        v = lua_tostring(L, -1);
        break;
    default:
        luaL_error(L, "%s: knob '%s' has a %s value", who, k, luaL_typename(L, -1));
        return;
    }
    if (!strcmp(k, "output") || !strcmp(k, "o")) {
        j->cfg.out_path = own(j, v);
        return;
    }
    const char *kept = own(j, v);
    rh_err e;
    int rc = kept ? sim_config_set(&j->cfg, k, kept, &e) : -1;
    if (!kept) snprintf(e.msg, sizeof e.msg, "too many knobs");
    if (rc == 0) luaL_error(L, "%s: unknown key '%s'", who, k);
    if (rc < 0) luaL_error(L, "%s: %s", who, e.msg);
    if (!strcmp(k, "max_concurrency") || !strcmp(k, "max-concurrency")) *concurrency_given = 1;
    if (add_arg(j, k, v) < 0) luaL_error(L, "%s: out of memory", who);
}

/* Fills `j` from the config table at `cfg`; raises a Lua error naming the
 * key on anything wrong. */
static void parse_job(lua_State *L, int cfg, rlua_job *j, const char *who)
{
    cfg = lua_absindex(L, cfg);
    luaL_checktype(L, cfg, LUA_TTABLE);
    memset(j, 0, sizeof *j);
    j->policy_ref = LUA_NOREF;
    sim_config_default(&j->cfg);
    j->trace = config_trace(L, cfg, who);
    j->cost = config_cost(L, cfg, who);
    int concurrency_given = 0;
    lua_pushnil(L);
    while (lua_next(L, cfg)) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            lua_pop(L, 2);
            luaL_error(L, "%s: keys must be knob names (got a %s key)", who, luaL_typename(L, -1));
        }
        const char *k = lua_tostring(L, -2);
        if (!strcmp(k, "trace") || !strcmp(k, "cost") || !strcmp(k, "label")) {
            lua_pop(L, 1);
            continue;
        }
        if (!strcmp(k, "per_request")) {
            j->per_request = lua_toboolean(L, -1);
            lua_pop(L, 1);
            continue;
        }
        if (!strcmp(k, "policy")) {
            if (!lua_isfunction(L, -1)) luaL_error(L, "%s: 'policy' must be a function(waiting, state)", who);
            lua_pushvalue(L, -1);
            j->policy_ref = luaL_ref(L, LUA_REGISTRYINDEX);
            j->cfg.core.policy = CORE_POLICY_LUA;
            j->cfg.core.lua_state = L;
            j->cfg.core.lua_policy_ref = j->policy_ref;
            lua_pop(L, 1);
            continue;
        }
        if (!strcmp(k, "cluster") && lua_type(L, -1) == LUA_TSTRING) {
            /* sim.run{cluster = "cluster.json"}: replicas that differ (sim/cluster.h). */
            const char *path = lua_tostring(L, -1);
            char *abs = abs_path(path);   /* an emitted job may run from another folder */
            int bad = !abs || !(j->cluster = own(j, abs)) || add_arg(j, "cluster", abs) < 0;
            free(abs);
            if (bad) luaL_error(L, "%s: out of memory", who);
            lua_pop(L, 1);
            continue;
        }
        if (!strcmp(k, "cluster")) {
            /* sim.run{cluster = {replicas = 4, router = "cache-aware", ...}}:
             * the cluster's knobs, the same names as flat keys. */
            if (!lua_istable(L, -1))
                luaL_error(L, "%s: 'cluster' must be a CLUSTER.json path or a table of knobs (replicas, router, ...)", who);
            lua_pushnil(L);
            while (lua_next(L, -2)) {
                if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "%s: cluster keys must be knob names", who);
                set_knob(L, j, who, lua_tostring(L, -2), &concurrency_given);
                lua_pop(L, 1);
            }
            lua_pop(L, 1);
            continue;
        }
        set_knob(L, j, who, k, &concurrency_given);
        lua_pop(L, 1);
    }
    const char *clients = tr_header_get(&j->trace->t.header, "clients");
    if (!concurrency_given && clients && atol(clients) > 0) j->cfg.max_concurrency = (uint32_t)atol(clients);
    rh_err e;
    if (core_config_validate(&j->cfg.core, &e) < 0) luaL_error(L, "%s: %s", who, e.msg);
}

/* Runs one job in this process; the result as JSON, or NULL and e. */
static json_t *run_job(rlua_job *j, rh_err *e)
{
    sim_result res;
    sim_cluster cl = {0};
    int rc = j->cluster ? sim_cluster_load(j->cluster, &j->cfg, j->cost->m, &cl, e) : 0;
    if (rc == 0)
        rc = j->cluster ? sim_cluster_run(&cl, &j->trace->t, &res, e)
                        : sim_run(&j->cfg, &j->trace->t, j->cost->m, &res, e);
    if (rc < 0) {
        sim_cluster_free(&cl);
        return NULL;
    }
    json_t *o = sim_result_to_json(&res, j->per_request);
    sim_result_free(&res);
    sim_cluster_free(&cl);
    return o;
}

static int l_sim_run(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    rlua_jobs *h = push_jobs(L, 1);
    parse_job(L, 1, &h->jobs[0], "sim.run");
    rh_err e;
    json_t *o = run_job(&h->jobs[0], &e);
    if (!o) return luaL_error(L, "sim.run: %s", e.msg);
    rlua_push_json(L, o);
    json_decref(o);
    return 1;
}

/* ---------------------------------------------------------- sweep ---- */

static int default_workers(void)
{
    return g_opt.workers > 0 ? g_opt.workers : rh_fork_pool_default_workers();
}

typedef struct sweep_ctx {
    rlua_job *jobs;
    json_t **out;
} sweep_ctx;

/* In a worker: the job's result, or {"error": message}, as JSON. */
static int sweep_job(void *ctx, int i, FILE *f)
{
    sweep_ctx *c = ctx;
    rh_err ce = {{0}};
    c->jobs[i].cfg.progress = 0;
    json_t *o = run_job(&c->jobs[i], &ce);
    if (!o) {
        o = json_object();
        json_object_set_new(o, "error", json_string(ce.msg));
    }
    return json_dumpf(o, f, JSON_COMPACT | JSON_REAL_PRECISION(17)) == 0 ? 0 : -1;
}

static int sweep_done(void *ctx, int i, FILE *f, int ok, const char *why, rh_err *e)
{
    sweep_ctx *c = ctx;
    if (!ok || !f) return rh_fail(e, "config %d: worker died (%s)", i + 1, why);
    json_error_t je;
    json_t *o = json_loadf(f, 0, &je);
    if (!o) return rh_fail(e, "config %d: worker result unreadable: %s", i + 1, je.text);
    if (json_object_get(o, "error")) {
        rh_fail(e, "config %d: %s", i + 1, json_string_value(json_object_get(o, "error")));
        json_decref(o);
        return -1;
    }
    c->out[i] = o;
    return 0;
}

/* Runs every job in up to `workers` child processes; fills out[i]. */
static int run_parallel(rlua_job *jobs, int n, int workers, json_t **out, rh_err *e)
{
    sweep_ctx c = {jobs, out};
    return rh_fork_pool(n, workers, "sweep", sweep_job, sweep_done, &c, e);
}

static char *abs_path(const char *p)
{
    char buf[PATH_MAX];
    return realpath(p, buf) ? strdup(buf) : strdup(p);
}

static char *quoted_abs(const char *p)
{
    char *a = abs_path(p), *q = a ? rh_shell_quote(a) : NULL;
    free(a);
    return q;
}

/* Gives a trace or cost without a file one inside the jobs folder. */
static int ensure_files(lua_State *L, rlua_job *j, int ordinal, int index, rh_err *e)
{
    (void)L;
    char path[PATH_MAX];
    if (!j->trace->path || !*j->trace->path) {
        snprintf(path, sizeof path, "%s/trace-%d-%04d.rhtr", g_opt.emit_jobs_dir, ordinal, index);
        if (tr_trace_save(&j->trace->t, path, e) < 0) return -1;
        free(j->trace->path);
        j->trace->path = strdup(path);
    }
    if (!j->cost->path || !*j->cost->path) {
        snprintf(path, sizeof path, "%s/cost-%d-%04d.json", g_opt.emit_jobs_dir, ordinal, index);
        if (rh_write_file_atomic(path, j->cost->json_text, strlen(j->cost->json_text), e) < 0) return -1;
        free(j->cost->path);
        j->cost->path = strdup(path);
    }
    return 0;
}

static int emit_jobs(lua_State *L, rlua_job *jobs, int n, int ordinal, rh_err *e)
{
    const char *dir = g_opt.emit_jobs_dir;
    mkdir(dir, 0755);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/jobs-%d.txt", dir, ordinal);
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    if (!text) return rh_fail(e, "out of memory");
    text[0] = '\0';
    for (int i = 0; i < n; i++) {
        rlua_job *j = &jobs[i];
        if (j->policy_ref != LUA_NOREF) {
            free(text);
            return rh_fail(e, "config %d: a Lua policy function cannot run as a job; "
                              "put it in a file and use policy_script", i + 1);
        }
        if (ensure_files(L, j, ordinal, i + 1, e) < 0) {
            free(text);
            return -1;
        }
        char *self = quoted_abs(g_opt.self_path), *tp = quoted_abs(j->trace->path), *cp = quoted_abs(j->cost->path);
        char result[PATH_MAX + 64];
        {
            char *dabs = abs_path(dir);
            snprintf(result, sizeof result, "%s/result-%d-%04d.json", dabs ? dabs : dir, ordinal, i + 1);
            free(dabs);
        }
        char *res = rh_shell_quote(result), *out = j->cfg.out_path ? rh_shell_quote(j->cfg.out_path) : NULL;
        char *line = NULL;
        if (self && tp && cp && res && (out || !j->cfg.out_path) &&
            asprintf(&line, "%s sim %s --cost %s%s%s%s%s --result %s\n", self, tp, cp, j->args ? j->args : "",
                     j->per_request ? " --per-request" : "", out ? " -o " : "", out ? out : "", res) < 0)
            line = NULL;
        free(self);
        free(tp);
        free(cp);
        free(res);
        free(out);
        if (!line) {
            free(text);
            return rh_fail(e, "out of memory");
        }
        size_t l = strlen(line);
        if (len + l + 1 > cap) {
            char *t2 = realloc(text, cap * 2 + l);
            if (!t2) {
                free(text);
                free(line);
                return rh_fail(e, "out of memory");
            }
            text = t2;
            cap = cap * 2 + l;
        }
        memcpy(text + len, line, l + 1);
        len += l;
        free(line);
    }
    int rc = rh_write_file_atomic(path, text, len, e);
    free(text);
    if (rc < 0) return -1;
    char sb[PATH_MAX + 512], sbpath[PATH_MAX];
    snprintf(sbpath, sizeof sbpath, "%s/slurm-%d.sbatch", dir, ordinal);
    char *jabs = abs_path(path);
    snprintf(sb, sizeof sb,
             "#!/bin/bash\n#SBATCH --array=1-%d\n#SBATCH --job-name=rehearse-sweep-%d\n"
             "sed -n \"${SLURM_ARRAY_TASK_ID}p\" '%s' | bash\n", n, ordinal, jabs);
    free(jabs);
    if (rh_write_file_atomic(sbpath, sb, strlen(sb), e) < 0) return -1;
    fprintf(stderr,
            "rehearse: sweep %d: wrote %d jobs to %s (one `rehearse sim` per line)\n"
            "  run them:  parallel < %s     or: sbatch %s\n"
            "  then:      rehearse run SCRIPT --collect %s\n",
            ordinal, n, path, path, sbpath, dir);
    return 0;
}

/* Reads the results of sweep `ordinal` from the jobs folder; 1 if all were
 * there, 0 if any is missing (e says how many and names the first), -1 on
 * a broken file. */
static int collect(int ordinal, int n, json_t **out, rh_err *e)
{
    char path[PATH_MAX], first[PATH_MAX] = "";
    int missing = 0;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/result-%d-%04d.json", g_opt.collect_dir, ordinal, i + 1);
        if (access(path, R_OK) != 0) {
            if (!missing++) snprintf(first, sizeof first, "%s", path);
            continue;
        }
        json_error_t je;
        if (!missing && !(out[i] = json_load_file(path, 0, &je))) return rh_fail(e, "%s:%d: %s", path, je.line, je.text);
    }
    if (!missing) return 1;
    for (int k = 0; k < n; k++) {
        json_decref(out[k]);
        out[k] = NULL;
    }
    rh_fail(e, "sweep %d: %d of %d results missing in %s (the first: %s); run the jobs of jobs-%d.txt first",
            ordinal, missing, n, g_opt.collect_dir, first, ordinal);
    return 0;
}

static int l_sweep(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    int n = (int)luaL_len(L, 1);
    int workers = default_workers();
    if (lua_istable(L, 2)) {
        lua_getfield(L, 2, "workers");
        if (!lua_isnil(L, -1)) workers = (int)luaL_checkinteger(L, -1);
        lua_pop(L, 1);
        if (workers < 1) return luaL_error(L, "sweep: workers must be >= 1");
    }
    int ordinal = ++g_sweep_ordinal;
    rlua_jobs *h = push_jobs(L, n);
    for (int i = 0; i < n; i++) {
        char who[64];
        snprintf(who, sizeof who, "sweep config %d", i + 1);
        lua_rawgeti(L, 1, i + 1);
        parse_job(L, -1, &h->jobs[i], who);
        lua_pop(L, 1);
    }
    rh_err e = {{0}};
    int have = 0;
    if (g_opt.collect_dir && (have = collect(ordinal, n, h->out, &e)) < 0) return luaL_error(L, "sweep: %s", e.msg);
    if (!have && g_opt.collect_dir) return luaL_error(L, "%s", e.msg);
    if (!have && g_opt.emit_jobs_dir) {
        if (emit_jobs(L, h->jobs, n, ordinal, &e) < 0) return luaL_error(L, "sweep: %s", e.msg);
        return luaL_error(L, RLUA_JOBS_EMITTED);
    }
    if (!have && n > 0 && run_parallel(h->jobs, n, workers < n ? workers : n, h->out, &e) < 0)
        return luaL_error(L, "sweep: %s", e.msg);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        rlua_push_json(L, h->out[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* ---------------------------------------------------------- opening -- */

void rlua_open(lua_State *L, const rlua_options *opt)
{
    if (opt) g_opt = *opt;
    g_sweep_ordinal = 0;
    if (luaL_newmetatable(L, RLUA_COST_MT)) {
        lua_pushcfunction(L, cost_gc);
        lua_setfield(L, -2, "__gc");
        lua_newtable(L);
        lua_pushcfunction(L, l_cost_time);
        lua_setfield(L, -2, "time");
        lua_pushcfunction(L, l_cost_step_time);
        lua_setfield(L, -2, "step_time");
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);

    if (luaL_newmetatable(L, RLUA_JOBS_MT)) {
        lua_pushcfunction(L, jobs_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);

    lua_newtable(L);    /* rehearse */
    static const luaL_Reg cost_fns[] = {
        {"load", l_cost_load}, {"new", l_cost_new}, {"linear", l_cost_linear}, {NULL, NULL}};
    luaL_newlib(L, cost_fns);
    lua_setfield(L, -2, "cost");
    static const luaL_Reg sim_fns[] = {{"run", l_sim_run}, {NULL, NULL}};
    luaL_newlib(L, sim_fns);
    lua_setfield(L, -2, "sim");
    lua_pushcfunction(L, l_sweep);
    lua_setfield(L, -2, "sweep");
    rlua_open_json(L);
    rlua_open_trace(L);
    rlua_open_plot(L);
    rlua_open_util(L);
    rlua_open_plan(L);

    lua_pushvalue(L, -1);
    lua_setglobal(L, "rehearse");
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, "rehearse");
    lua_pop(L, 2);
}
