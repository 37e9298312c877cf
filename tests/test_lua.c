/* test_lua.c — `rehearse run` and its Lua API, end to end through the CLI:
 * a Lua policy returning fcfs order equals the built-in fcfs; a parallel
 * sweep equals the same configurations run one by one, in input order;
 * emitted jobs, run as plain `rehearse sim` lines, collect into the same
 * results; CSV and JSON writers; script errors name file:line and exit 1. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static char trace_path[256], cost_path[256];

static int setup(void)
{
    tu_tmp_path("lua-trace.rhtr", trace_path, sizeof trace_path);
    tu_tmp_path("lua-cost.json", cost_path, sizeof cost_path);
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "%s trace synth --requests 300 --rate 20 --input-len 600 --output-len 60 "
                              "--block-size 64 --prefix-groups 4 --prompts-per-group 20 --system-prompt-len 256 "
                              "--seed 5 -o %s", tu_bin(), trace_path);
    if (tu_run(cmd, out, sizeof out) != 0) {
        printf("synth failed: %s\n", out);
        return 1;
    }
    const char *cost = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5,"
                       " \"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}";
    return tu_write_file(cost_path, cost, strlen(cost));
}

/* Writes a script that starts with T and C bound to the test's trace and
 * cost files, and runs it; returns the exit status and fills out. */
static int run_script(const char *name, const char *body, const char *extra, char *out, size_t n)
{
    char path[256];
    tu_tmp_path(name, path, sizeof path);
    char *src = malloc(strlen(body) + 1024);
    sprintf(src, "local T = rehearse.trace.load('%s')\nlocal C = rehearse.cost.load('%s')\n%s", trace_path,
            cost_path, body);
    int rc = tu_write_file(path, src, strlen(src));
    free(src);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s run %s %s", tu_bin(), path, extra ? extra : "");
    return tu_run(cmd, out, n);
}

/* Runs a script that must succeed and print `says`. */
static void expect_script(const char *name, const char *body, const char *says)
{
    char out[8192];
    int rc = run_script(name, body, NULL, out, sizeof out);
    if (rc) printf("\n%s\n", out);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(strstr(out, says) != NULL);
}

static void test_lua_policy_equals_fcfs(void)
{
    const char *body =
        "local a = rehearse.sim.run{trace=T, cost=C, max_running_requests=16, per_request=true}\n"
        "local b = rehearse.sim.run{trace=T, cost=C, max_running_requests=16, per_request=true,\n"
        "                          policy=function(waiting, state) return waiting end}\n"
        "local ja, jb = rehearse.json.encode(a.metrics), rehearse.json.encode(b.metrics)\n"
        "assert(ja == jb, 'lua fcfs differs:\\n' .. ja .. '\\n' .. jb)\n"
        "for i = 1, #a.requests.ttft do assert(a.requests.ttft[i] == b.requests.ttft[i], 'request ' .. i) end\n"
        "assert(a.metrics.completed == 300)\n"
        "assert(a.metrics.cache_hit_rate > 0.1, 'shared system prompts should hit: ' .. a.metrics.cache_hit_rate)\n"
        "-- and under a queue, a policy that reverses it does change the outcome\n"
        "local d = rehearse.sim.run{trace=T, cost=C, max_running_requests=2}\n"
        "local c = rehearse.sim.run{trace=T, cost=C, max_running_requests=2,\n"
        "  policy=function(w, s) local r = {} for i = #w, 1, -1 do r[#r + 1] = w[i] end return r end}\n"
        "assert(c.metrics.max_waiting > 2, 'no queue formed')\n"
        "assert(rehearse.json.encode(c.metrics) ~= rehearse.json.encode(d.metrics))\n"
        "print('ok', a.metrics.p99_ttft_ms)\n";
    expect_script("policy.lua", body, "ok");
}

static const char *SWEEP_BODY =
    "local cfgs = {}\n"
    "for _, chunk in ipairs({512, 2048, -1}) do\n"
    "  for _, mr in ipairs({4, 32}) do\n"
    "    cfgs[#cfgs + 1] = {trace=T, cost=C, chunked_prefill_size=chunk, max_running_requests=mr,\n"
    "                       enable_mixed_chunk=(mr == 32)}\n"
    "  end\n"
    "end\n"
    "local res = rehearse.sweep(cfgs, {workers=2})\n"
    "assert(#res == #cfgs)\n"
    "local rows = {}\n"
    "for i, c in ipairs(cfgs) do\n"
    "  rows[i] = {chunk=c.chunked_prefill_size, mr=c.max_running_requests,\n"
    "             p99_ttft_ms=res[i].metrics.p99_ttft_ms, completed=res[i].metrics.completed}\n"
    "end\n"
    "rehearse.csv.write(OUT .. '.csv', rows, {'chunk', 'mr', 'p99_ttft_ms', 'completed'})\n"
    "rehearse.json.write(OUT .. '.json', rows)\n";

static void test_sweep_equals_runs(void)
{
    char base[256];
    tu_tmp_path("sweep", base, sizeof base);
    char body[4096];
    snprintf(body, sizeof body,
             "OUT = '%s'\n%s"
             "for i, c in ipairs(cfgs) do\n"
             "  local one = rehearse.sim.run(c)\n"
             "  assert(rehearse.json.encode(one.metrics) == rehearse.json.encode(res[i].metrics), 'config ' .. i)\n"
             "end\n"
             "assert(res[1].metrics.p99_ttft_ms ~= res[5].metrics.p99_ttft_ms)\n"
             "print('swept', #res)\n",
             base, SWEEP_BODY);
    expect_script("sweep.lua", body, "swept\t6");
    /* The CSV has a header and six rows in input order. */
    char csv[300], buf[4096];
    snprintf(csv, sizeof csv, "%s.csv", base);
    FILE *f = fopen(csv, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    CU_ASSERT(strncmp(buf, "chunk,mr,p99_ttft_ms,completed\n512,4,", 37) == 0);
    int lines = 0;
    for (char *p = buf; *p; p++) lines += *p == '\n';
    CU_ASSERT_EQUAL(lines, 7);
}

/* --emit-jobs writes one `rehearse sim` line per configuration; running them
 * and collecting gives exactly what the in-process sweep gave. */
static void test_emit_and_collect(void)
{
    char out[8192], direct[256], jobs[256], collected[256], body[4096], cmd[1024];
    tu_tmp_path("direct", direct, sizeof direct);
    tu_tmp_path("jobs'dir", jobs, sizeof jobs);   /* a quote in a path: the job lines quote for the shell */
    tu_tmp_path("collected", collected, sizeof collected);
    snprintf(body, sizeof body, "OUT = rehearse.args.out\n%s", SWEEP_BODY);
    char extra[1024];
    snprintf(extra, sizeof extra, "out=%s", direct);
    int rc = run_script("jobs.lua", body, extra, out, sizeof out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    snprintf(extra, sizeof extra, "out=%s --emit-jobs \"%s\"", collected, jobs);
    rc = run_script("jobs.lua", body, extra, out, sizeof out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT(strstr(out, "wrote 6 jobs") != NULL);
    char json[300];
    snprintf(json, sizeof json, "%s.json", collected);
    CU_ASSERT(!tu_file_exists(json));                 /* the script stopped at the sweep */
    snprintf(cmd, sizeof cmd, "grep -c -- '--enable-mixed-chunk --' \"%s/jobs-1.txt\"", jobs);   /* bare when true */
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT(atoi(out) == 3);
    snprintf(cmd, sizeof cmd, "grep -c -- '--enable-mixed-chunk=false' \"%s/jobs-1.txt\"", jobs);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT(atoi(out) == 3);
    snprintf(cmd, sizeof cmd, "sh \"%s/jobs-1.txt\"", jobs);
    rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    snprintf(extra, sizeof extra, "out=%s --collect \"%s\"", collected, jobs);
    rc = run_script("jobs.lua", body, extra, out, sizeof out);
    if (rc) printf("\n%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    snprintf(cmd, sizeof cmd, "cmp %s.csv %s.csv", direct, collected);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "test -f \"%s/slurm-1.sbatch\"", jobs);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    /* A missing result: --collect names it and fails. */
    snprintf(cmd, sizeof cmd, "rm \"%s/result-1-0003.json\"", jobs);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    rc = run_script("jobs.lua", body, extra, out, sizeof out);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "1 of 6 results missing"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "result-1-0003.json"));
}

static void test_errors_name_the_line(void)
{
    char out[8192];
    int rc = run_script("boom.lua", "local x = 1\nerror('boom here')\n", NULL, out, sizeof out);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT(strstr(out, "boom.lua:4: boom here") != NULL);   /* two preamble lines, then line 2 */
    rc = run_script("key.lua", "rehearse.sim.run{trace=T, cost=C, chunky_prefill=5}\n", NULL, out, sizeof out);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT(strstr(out, "unknown key 'chunky_prefill'") != NULL);
    rc = run_script("val.lua", "rehearse.sim.run{trace=T, cost=C, max_running_requests='many'}\n", NULL, out,
                    sizeof out);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT(strstr(out, "max-running-requests") != NULL);
    rc = run_script("cost.lua", "rehearse.cost.new{kind='linear', version=7}\n", NULL, out, sizeof out);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT(strstr(out, "version") != NULL);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s run build/tmp/no-such-script.lua", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
    CU_ASSERT(strstr(out, "no-such-script.lua") != NULL);
}

/* trace.synth and t:slice take the CLI's options by the same names and give
 * the same requests as `rehearse trace synth` and `trace slice`. */
static void test_synth_and_slice_match_cli(void)
{
    char out[8192], lua_path[256], cli_path[256], cli_slice[256], body[2048], cmd[2048];
    tu_tmp_path("lua-synth.rhtr", lua_path, sizeof lua_path);
    tu_tmp_path("cli-synth.rhtr", cli_path, sizeof cli_path);
    tu_tmp_path("cli-slice.rhtr", cli_slice, sizeof cli_slice);
    snprintf(cmd, sizeof cmd, "%s trace synth --requests 300 --rate 7 --input-len 900 --output-len 80 --seed 9 "
                              "--turns 3 --block-size 128 -o %s && %s trace slice %s --first 120 --length-scale 0.5 -o %s",
             tu_bin(), cli_path, tu_bin(), cli_path, cli_slice);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, out, sizeof out), 0);
    snprintf(body, sizeof body,
             "local s = rehearse.trace.synth{requests=300, rate=7, input_len=900, output_len=80, seed=9, turns=3,\n"
             "                               block_size=128}\n"
             "local c = rehearse.trace.load('%s')\n"
             "assert(#s == #c and #s == 300)\n"
             "for i = 1, #s do\n"
             "  local a, b = s:request(i), c:request(i)\n"
             "  assert(a.arrival == b.arrival and a.input_len == b.input_len and a.output_len == b.output_len\n"
             "         and a.n_hashes == b.n_hashes and a.session_id == b.session_id, 'request ' .. i)\n"
             "end\n"
             "local ls, cs = s:slice{first=120, length_scale=0.5}, rehearse.trace.load('%s')\n"
             "assert(#ls == 120 and #cs == 120)\n"
             "for i = 1, #ls do assert(ls:request(i).input_len == cs:request(i).input_len, 'slice ' .. i) end\n"
             "local ok, err = pcall(rehearse.trace.synth, {requests=5, rat=3})\n"
             "assert(not ok and err:find(\"unknown option 'rat'\"), err)\n"
             "print('same')\n",
             cli_path, cli_slice);
    expect_script("synth.lua", body, "same");
}

/* Priorities from Lua: t:add takes one, t:request gives it back, and
 * rehearse.sim.run's enable_priority_scheduling serves the favoured
 * requests first (SGLang's knob name, with _ for -). */
static void test_priority_from_lua(void)
{
    const char *body =
        "local t = rehearse.trace.new{block_size=16}\n"
        "for i = 1, 200 do t:add{arrival=i * 0.005, input_len=800, output_len=50, priority=(i % 4 == 0) and 9 or 0} end\n"
        "assert(t:request(4).priority == 9 and t:request(5).priority == 0)\n"
        "local function medians(r)\n"
        "  local hi, lo = {}, {}\n"
        "  for i = 1, #r.requests.ttft do\n"
        "    local v = r.requests.ttft[i]\n"
        "    if i % 4 == 0 then hi[#hi + 1] = v else lo[#lo + 1] = v end\n"
        "  end\n"
        "  table.sort(hi) table.sort(lo)\n"
        "  return hi[#hi // 2 + 1], lo[#lo // 2 + 1]\n"
        "end\n"
        "local h0, l0 = medians(rehearse.sim.run{trace=t, cost=C, max_running_requests=4, per_request=true})\n"
        "local h1, l1 = medians(rehearse.sim.run{trace=t, cost=C, max_running_requests=4, per_request=true,\n"
        "                                        enable_priority_scheduling=true})\n"
        "assert(h1 < l1 / 3 and h1 < h0, string.format('%g %g %g %g', h0, l0, h1, l1))\n"
        "print('favoured', h0, h1)\n";
    expect_script("priority.lua", body, "favoured");
}

/* rehearse.plan from a script: the command's plan, candidate for
 * candidate; an objective of its own ranks by it; its errors name it. */
static void test_plan_from_lua(void)
{
    char dir[256], cmd[2048], out[16384];
    tu_tmp_path("lua-plan", dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "%s plan %s --model llama-3-8b --slo-ttft-ms 300 --slo-tpot-ms 40 --gpus h100-sxm,a100-80g --tp 1,2 "
             "--max-replicas 2 --chunked-prefill-sizes 2048 --max-running-requests-list 8,64 --speculative-steps 0 "
             "--no-rate-search --workers 2 -o %s 2>&1",
             tu_bin(), trace_path, dir);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    char body[4096];
    snprintf(body, sizeof body,
             "local q = {trace=T, model='llama-3-8b', slo_ttft_ms=300, slo_tpot_ms=40, gpus={'h100-sxm', 'a100-80g'},\n"
             "           tp={1, 2}, max_replicas=2, chunked_prefill_sizes={2048}, max_running_requests={8, 64},\n"
             "           speculative_steps={0}, workers=2}\n"
             "local p = rehearse.plan(q)\n"
             "local cli = rehearse.json.read('%s/plan.json')\n"
             "assert(#p.ranked == #cli.ranked and #p.ranked > 2, 'ranked ' .. #p.ranked .. ' vs ' .. #cli.ranked)\n"
             "for i = 1, #p.ranked do\n"
             "  assert(p.ranked[i].name == cli.ranked[i].name, i .. ': ' .. p.ranked[i].name .. ' vs ' .. cli.ranked[i].name)\n"
             "  local a, b = p.ranked[i].metrics.p99_ttft_ms, cli.ranked[i].metrics.p99_ttft_ms\n"
             "  assert(math.abs(a - b) <= 1e-8 * a, a .. ' vs ' .. b)   -- plan.json keeps 10 digits\n"
             "end\n"
             "-- the fastest p99 TTFT, whatever it costs\n"
             "q.objective = function(c) return c.meets_slos and c.p99_ttft_ms end\n"
             "local f = rehearse.plan(q)\n"
             "for i = 2, #f.ranked do\n"
             "  local a, b = f.ranked[i - 1], f.ranked[i]\n"
             "  assert(b.score == nil or (a.score ~= nil and a.score <= b.score), 'order at ' .. i)\n"
             "end\n"
             "assert(f.ranked[1].metrics.meets_slos and f.ranked[1].score == f.ranked[1].metrics.p99_ttft_ms)\n"
             "assert(f.ranked[1].usd_per_hour >= p.ranked[1].usd_per_hour)\n"
             "q.objective = function(c) return {} end\n"
             "local ok, err = pcall(rehearse.plan, q)\n"
             "assert(not ok and err:find('objective: returned a table'), err)\n"
             "q.objective = nil; q.colour = 'red'\n"
             "ok, err = pcall(rehearse.plan, q)\n"
             "assert(not ok and err:find(\"unknown key 'colour'\"), err)\n"
             "print('planned', p.ranked[1].name, f.ranked[1].name)\n",
             dir);
    expect_script("plan.lua", body, "planned");
}

void register_test_lua(void)
{
    CU_pSuite s = CU_add_suite("lua", setup, NULL);
    CU_add_test(s, "lua fcfs policy equals built-in fcfs", test_lua_policy_equals_fcfs);
    CU_add_test(s, "sweep equals runs, in order", test_sweep_equals_runs);
    CU_add_test(s, "emitted jobs collect into the same results", test_emit_and_collect);
    CU_add_test(s, "errors name file and line", test_errors_name_the_line);
    CU_add_test(s, "trace.synth and t:slice match the CLI", test_synth_and_slice_match_cli);
    CU_add_test(s, "priorities from Lua: t:add, t:request, enable_priority_scheduling", test_priority_from_lua);
    CU_add_test(s, "rehearse.plan: the command's plan; an objective of its own", test_plan_from_lua);
}
