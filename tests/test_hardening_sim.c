/* test_hardening_sim.c — a study never reports fcfs numbers under a
 * policy's name: `rehearse sim` and rehearse.sim.run stop at a policy's
 * first error with its file and line (exit 1, nothing on stdout), or, with
 * --policy-fallback, run on and count the errors as policy_errors; a
 * policy's print goes to stderr, so `sim --json` stays JSON; the hostile
 * policies of the sandbox's tests end a simulation cleanly. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_hardening_util.h"
#include "testutil.h"
#include "traces/trace.h"

static char trace[256], cost[256], out_path[256], err_path[256];
static char out[1 << 16];

static int setup(void)
{
    tu_tmp_path("hsim.rhtr", trace, sizeof trace);
    tu_tmp_path("hsim-cost.json", cost, sizeof cost);
    tu_tmp_path("hsim.out", out_path, sizeof out_path);
    tu_tmp_path("hsim.err", err_path, sizeof err_path);
    tr_trace t;
    tr_trace_init(&t);
    rh_err e;
    for (uint32_t i = 0; i < 60; i++) {
        tr_request r = {.id = i, .arrival = 0.001 * i, .input_len = 50 + 7 * i, .output_len = 4 + i % 5};
        if (tr_trace_add_request(&t, &r, &e) < 0) return -1;
    }
    int rc = tr_trace_save(&t, trace, &e);
    tr_trace_free(&t);
    const char *lin = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5, "
                      "\"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}";
    return rc < 0 || tu_write_file(cost, lin, strlen(lin)) != 0 ? -1 : 0;
}

/* `rehearse sim` under a policy script; stdout and stderr apart. */
static int sim(const char *policy_name, const char *policy, const char *flags, char **stdout_text,
               char **stderr_text)
{
    char path[256], cmd[2048];
    tu_tmp_path(policy_name, path, sizeof path);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, policy, strlen(policy)), 0);
    snprintf(cmd, sizeof cmd, "%s sim %s --cost %s --policy-script %s --max-running-requests 4 --json %s >%s 2>%s",
             tu_bin(), trace, cost, path, flags, out_path, err_path);
    int rc = tu_run(cmd, NULL, 0);
    size_t n;
    *stdout_text = hu_slurp(out_path, &n);
    *stderr_text = hu_slurp(err_path, &n);
    return rc;
}

static void test_sim_stops_at_a_policy_error(void)
{
    hu_watchdog(120);
    static const struct { const char *name, *text, *says; } bad[] = {
        {"raise.lua", "function policy(w, s)\n  error('no order today')\nend\n", "raise.lua:2: no order today"},
        {"os.lua", "function policy(w, s)\n  os.execute('true')\nend\n", "os.lua:2:"},
        {"spin.lua", "function policy(w, s)\n  while true do end\nend\n", "budget of"},
        {"len.lua", "function policy(w, s)\n  return 'x'\nend\n", "policy() returned a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *so, *se;
        int rc = sim(bad[i].name, bad[i].text, "", &so, &se);
        int ok = rc == 1 && so && so[0] == '\0' && se && strstr(se, bad[i].says) && strstr(se, "policy error");
        if (!ok) printf("\n    %s: exit %d, stdout '%.80s', stderr '%.300s'\n", bad[i].name, rc, so ? so : "", se ? se : "");
        CU_ASSERT(ok);
        free(so);
        free(se);
        /* With --policy-fallback the run goes on, fcfs for those steps, and says how often. */
        rc = sim(bad[i].name, bad[i].text, "--policy-fallback", &so, &se);
        json_error_t je;
        json_t *j = so ? json_loads(so, 0, &je) : NULL;
        long long errors = j ? json_integer_value(json_object_get(j, "policy_errors")) : -1;
        long long completed = j ? json_integer_value(json_object_get(j, "completed")) : -1;
        ok = rc == 0 && errors > 0 && completed == 60;
        if (!ok) printf("\n    %s fallback: exit %d, %lld errors, %lld completed: %.300s\n", bad[i].name, rc, errors,
                        completed, se ? se : "");
        CU_ASSERT(ok);
        json_decref(j);
        free(so);
        free(se);
    }
    /* A policy that works reports no errors. */
    char *so, *se;
    int rc = sim("fine.lua", "function policy(w, s)\n  return w\nend\n", "", &so, &se);
    json_error_t je;
    json_t *j = so ? json_loads(so, 0, &je) : NULL;
    CU_ASSERT(rc == 0 && j && json_integer_value(json_object_get(j, "policy_errors")) == 0);
    json_decref(j);
    free(so);
    free(se);
    hu_watchdog(0);
}

/* print inside a policy writes to stderr: stdout is the command's own. */
static void test_policy_print_goes_to_stderr(void)
{
    char *so, *se;
    int rc = sim("chatty.lua", "print('top level says hi')\nfunction policy(w, s)\n  print('step', s.step, #w)\n  return w\nend\n",
                 "", &so, &se);
    CU_ASSERT_EQUAL(rc, 0);
    json_error_t je;
    json_t *j = so ? json_loads(so, 0, &je) : NULL;
    CU_ASSERT_PTR_NOT_NULL(j);
    if (!j) printf("\n    stdout is not JSON: %.200s\n", so ? so : "");
    CU_ASSERT(se && strstr(se, "top level says hi") && strstr(se, "step\t"));
    json_decref(j);
    free(so);
    free(se);
}

/* The Lua API: a function policy that raises stops sim.run with its line;
 * policy_fallback counts instead. */
static void test_lua_sim_run_stops_at_a_policy_error(void)
{
    char script[256], cmd[1024];
    tu_tmp_path("hsim-run.lua", script, sizeof script);
    snprintf(out, sizeof out,
             "local t = rehearse.trace.load('%s')\n"
             "local c = rehearse.cost.load('%s')\n"
             "local ok, err = pcall(rehearse.sim.run, {trace = t, cost = c, max_running_requests = 4,\n"
             "  policy = function(w, s) error('boom') end})\n"
             "assert(not ok and err:find('boom') and err:find('hsim%%-run.lua:4:'), tostring(err))\n"
             "local r = rehearse.sim.run{trace = t, cost = c, max_running_requests = 4, policy_fallback = true,\n"
             "  policy = function(w, s) error('boom') end}\n"
             "assert(r.metrics.policy_errors > 0 and r.metrics.completed == 60, 'fallback counted')\n"
             "print('ok', r.metrics.policy_errors)\n",
             trace, cost);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(script, out, strlen(out)), 0);
    snprintf(cmd, sizeof cmd, "%s run %s", tu_bin(), script);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc || !strstr(out, "ok\t")) printf("\n    %s\n", out);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "ok\t"));
}

static void test_setup_failed(void)
{
    CU_FAIL("could not write the suite's trace and cost file under build/tmp");
}

/* Inputs that are not regular files — a FIFO nobody writes, a device —
 * as --cost, --policy-script, --router-script, --cluster or a script a
 * CLUSTER.json names: each refused at once with a message naming the
 * path and what it is (the open of a FIFO used to block for ever). A
 * compiled Lua chunk as a script is refused too: Lua does not check
 * binary chunks. */
static void test_not_regular_files_refused(void)
{
    hu_watchdog(60);
    char fifo[256], cluster[256], lua[256], chunk[256];
    tu_tmp_path("hsim-fifo", fifo, sizeof fifo);
    tu_tmp_path("hsim-cluster.json", cluster, sizeof cluster);
    tu_tmp_path("hsim-ok.lua", lua, sizeof lua);
    tu_tmp_path("hsim-chunk.lua", chunk, sizeof chunk);
    remove(fifo);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    const char *ok = "function policy(w, s) return nil end\n";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(lua, ok, strlen(ok)), 0);
    char text[16384], abs_cost[4096], abs_fifo[4096];
    CU_ASSERT_FATAL(realpath(cost, abs_cost) && realpath(fifo, abs_fifo));   /* a CLUSTER.json's paths are its own */
    snprintf(text, sizeof text, "{\"groups\": [{\"count\": 2, \"cost\": \"%s\"}], \"router-script\": \"%s\"}",
             abs_cost, abs_fifo);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(cluster, text, strlen(text)), 0);
    /* "\x1bLua" opens a binary chunk */
    CU_ASSERT_EQUAL_FATAL(tu_write_file(chunk, "\x1bLuaT\x00\x19\x93\r\n\x1a\n", 12), 0);
    struct {
        char flags[1024];
        const char *says;
    } bad[6];
    snprintf(bad[0].flags, sizeof bad[0].flags, "--cost %s", fifo);
    snprintf(bad[1].flags, sizeof bad[1].flags, "--cost %s --policy-script %s", cost, fifo);
    snprintf(bad[2].flags, sizeof bad[2].flags, "--cost %s --replicas 2 --router-script %s", cost, fifo);
    snprintf(bad[3].flags, sizeof bad[3].flags, "--cost %s --cluster %s", cost, fifo);
    snprintf(bad[4].flags, sizeof bad[4].flags, "--cost %s --cluster %s", cost, cluster);
    snprintf(bad[5].flags, sizeof bad[5].flags, "--cost %s --cost /dev/zero", cost);
    for (int i = 0; i < 6; i++) bad[i].says = i == 5 ? "a device, not a regular file" : "a FIFO, not a regular file";
    for (int i = 0; i < 6; i++) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "%s sim %s %s >%s 2>%s", tu_bin(), trace, bad[i].flags, out_path, err_path);
        double t0 = rh_now();
        int rc = tu_run(cmd, NULL, 0);
        double took = rh_now() - t0;
        size_t n;
        char *err = hu_slurp(err_path, &n);
        int fine = rc != 0 && err && strstr(err, bad[i].says) && took < 20;
        if (!fine) printf("\n    %s: exit %d after %.1f s: %s", bad[i].flags, rc, took, err ? err : "");
        CU_ASSERT(fine);
        free(err);
    }
    char *o, *e;
    CU_ASSERT_NOT_EQUAL(sim("hsim-chunk.lua", "\x1bLua", "", &o, &e), 0);
    CU_ASSERT_PTR_NOT_NULL(e ? strstr(e, "binary chunk") : NULL);
    if (e && !strstr(e, "binary chunk")) printf("\n    binary chunk: %s", e);
    free(o);
    free(e);
    /* a first line "#!..." is skipped, the line numbers kept */
    CU_ASSERT_NOT_EQUAL(sim("hsim-shebang.lua", "#!/usr/bin/env lua\nfunction policy(w, s)\n  error('two')\nend\n", "",
                            &o, &e), 0);
    CU_ASSERT_PTR_NOT_NULL(e ? strstr(e, "hsim-shebang.lua:3: two") : NULL);
    free(o);
    free(e);
    remove(fifo);
    hu_watchdog(0);
}

/* A CLUSTER.json of 4096 replicas (the most allowed) with a handful of
 * requests: each replica's core (its KV pool, prefix cache, script) is
 * made when it first gets work, so the run fits in 1 GB of address space
 * (every core up front took 5 GB for 4096 replicas of 16384 pages). */
static void test_idle_replicas_cost_nothing(void)
{
#if defined(__SANITIZE_ADDRESS__)
    printf("(skipped: an address-space limit and AddressSanitizer's shadow memory do not mix) ");
    return;
#endif
    hu_watchdog(120);
    char cluster[256];
    tu_tmp_path("hsim-4096.json", cluster, sizeof cluster);
    char abs_cost[4096], text[8192];
    CU_ASSERT_FATAL(realpath(cost, abs_cost) != NULL);
    snprintf(text, sizeof text, "{\"groups\": [{\"count\": 4096, \"cost\": \"%s\"}]}", abs_cost);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(cluster, text, strlen(text)), 0);
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "ulimit -v 1000000; %s sim %s --cluster %s --json >%s 2>%s", tu_bin(), trace, cluster,
             out_path, err_path);
    int rc = tu_run(cmd, NULL, 0);
    size_t n;
    char *o = hu_slurp(out_path, &n), *e = hu_slurp(err_path, &n);
    json_t *j = o ? json_loads(o, 0, NULL) : NULL;
    int completed = j ? (int)json_integer_value(json_object_get(j, "completed")) : -1;
    if (rc != 0 || completed != 60) printf("\n    4096 replicas: exit %d, %d completed: %s", rc, completed, e ? e : "");
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(completed, 60);
    json_decref(j);
    free(o);
    free(e);
    hu_watchdog(0);
}

void register_test_hardening_sim(void)
{
    CU_pSuite s = CU_add_suite("hardening_sim", NULL, NULL);
    if (setup() < 0) {
        CU_add_test(s, "setup", test_setup_failed);
        return;
    }
    CU_add_test(s, "sim stops at a policy error; --policy-fallback counts it", test_sim_stops_at_a_policy_error);
    CU_add_test(s, "a policy's print goes to stderr", test_policy_print_goes_to_stderr);
    CU_add_test(s, "FIFOs, devices and binary chunks as inputs: refused at once", test_not_regular_files_refused);
    CU_add_test(s, "4096 replicas, few requests: idle replicas hold no core (1 GB of address space)",
                test_idle_replicas_cost_nothing);
    CU_add_test(s, "sim.run stops at a policy error; policy_fallback counts it", test_lua_sim_run_stops_at_a_policy_error);
}
