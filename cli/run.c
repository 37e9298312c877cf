/* run.c — `rehearse run SCRIPT.lua [key=value ...]`: runs an experiment
 * script with the `rehearse` Lua API (sim/lua/lua_api.h). A Lua error prints the
 * script's file:line and exits 1. */
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sim/lua/lua_api.h"
#include "util/args.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: rehearse run SCRIPT.lua [key=value ...] [--workers N]\n"
               "                              [--emit-jobs DIR | --collect DIR]\n\n"
               "Runs an experiment script. key=value pairs reach the script as rehearse.args\n"
               "(numbers converted). The script sees the global table `rehearse`:\n"
               "  rehearse.trace.load/import/synth, t:slice, t:save, t:stats\n"
               "  rehearse.cost.load/new/linear\n"
               "  rehearse.sim.run{trace=, cost=, <knobs by CLI name>, policy=function}\n"
               "  rehearse.sweep(configs [, {workers=N}])  (parallel, in input order)\n"
               "  rehearse.json.read/write/encode/decode, rehearse.csv.write, rehearse.plot.*\n\n"
               "An experiment script is your own program: it runs with the whole Lua standard\n"
               "library (io, os.execute, package.loadlib and require work), so run only scripts\n"
               "you trust. A policy it hands to rehearse.sim.run keeps the instruction budget\n"
               "and time limit. The sandbox is for --policy-script files (sim and serve): no\n"
               "io, os, load, require or debug, a memory cap, an instruction budget and a time\n"
               "limit per call (rehearse sim --help, --policy-*).\n\n"
               "  --workers N        sweep worker processes (default: one per core)\n"
               "  --emit-jobs DIR    sweeps write one `rehearse sim` command per configuration\n"
               "                     to DIR/jobs-K.txt (GNU parallel) and DIR/slurm-K.sbatch\n"
               "  --collect DIR      sweeps read the results those jobs wrote in DIR\n");
}

/* key=value -> rehearse.args.key (a number when it reads as one). */
static void push_args(lua_State *L, int n, const char **pos)
{
    lua_getglobal(L, "rehearse");
    lua_newtable(L);
    for (int i = 1; i < n; i++) {
        const char *eq = strchr(pos[i], '=');
        if (!eq || eq == pos[i]) continue;
        lua_pushlstring(L, pos[i], (size_t)(eq - pos[i]));
        const char *v = eq + 1;
        char *end;
        double d = strtod(v, &end);
        if (*v && *end == '\0') {
            long long ll = strtoll(v, &end, 10);
            if (*end == '\0') lua_pushinteger(L, ll);
            else lua_pushnumber(L, d);
        } else {
            lua_pushstring(L, v);
        }
        lua_settable(L, -3);
    }
    lua_setfield(L, -2, "args");
    lua_pop(L, 1);
}

int run_main(int argc, char **argv)
{
    if (argc < 2 || rh_wants_help(argc, argv)) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    rlua_options opt = {0};
    opt.self_path = "/proc/self/exe";
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl > 0) {
        self[sl] = '\0';
        opt.self_path = self;
    }
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    const char *name;
    while ((name = rh_args_next(&a))) {
        const char *v = rh_args_value(&a, &e);
        if (!v) goto bad;
        if (!strcmp(name, "emit-jobs")) opt.emit_jobs_dir = v;
        else if (!strcmp(name, "collect")) opt.collect_dir = v;
        else if (!strcmp(name, "workers")) {
            long long w;
            if (rh_parse_i64(v, "--workers", &w, &e) < 0) goto bad;
            if (w < 1) {
                rh_fail(&e, "--workers must be >= 1");
                goto bad;
            }
            opt.workers = (int)w;
        } else {
            rh_fail(&e, "unknown flag --%s (see rehearse run --help)", name);
            goto bad;
        }
    }
    if (a.npos < 1) {
        rh_fail(&e, "run needs a SCRIPT.lua");
        goto bad;
    }
    if (opt.emit_jobs_dir && opt.collect_dir) {
        rh_fail(&e, "--emit-jobs and --collect do not go together");
        goto bad;
    }
    lua_State *L = luaL_newstate();
    if (!L) {
        rh_fail(&e, "cannot create a Lua state");
        goto bad;
    }
    luaL_openlibs(L);
    rlua_open(L, &opt);
    push_args(L, a.npos, a.pos);
    /* The standard `arg` table too, as the lua interpreter sets it. */
    lua_createtable(L, a.npos, 1);
    for (int i = 0; i < a.npos; i++) {
        lua_pushstring(L, a.pos[i]);
        lua_rawseti(L, -2, i);
    }
    lua_setglobal(L, "arg");
    /* require() finds modules beside the script (shared experiment helpers). */
    {
        const char *slash = strrchr(a.pos[0], '/');
        int dlen = slash ? (int)(slash - a.pos[0]) : 1;
        const char *dir = slash ? a.pos[0] : ".";
        lua_getglobal(L, "package");
        char buf[4200];
        lua_getfield(L, -1, "path");
        snprintf(buf, sizeof buf, "%.*s/?.lua;%s", dlen, dir, lua_tostring(L, -1));
        lua_pop(L, 1);
        lua_pushstring(L, buf);
        lua_setfield(L, -2, "path");
        lua_pop(L, 1);
    }
    int rc = luaL_loadfile(L, a.pos[0]);
    if (rc == LUA_OK) rc = lua_pcall(L, 0, 0, 0);
    int status = 0;
    if (rc != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        if (msg && strstr(msg, RLUA_JOBS_EMITTED)) {
            status = 0;
        } else {
            fprintf(stderr, "rehearse run: %s\n", msg ? msg : "(error object is not a string)");
            status = 1;
        }
    }
    lua_close(L);
    return status;
bad:
    fprintf(stderr, "rehearse run: %s\n", e.msg);
    return 1;
}
