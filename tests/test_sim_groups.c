/* test_sim_groups.c — clusters of unlike replicas (sim_run_groups, a
 * CLUSTER.json) against two computations of the same thing: under
 * round-robin with no network delay, replica k of a two-replica cluster
 * serves requests k, k + 2, ... and nothing else touches it, so each
 * replica's metrics equal a single server's simulation of just those
 * requests with that replica's own cost model and knobs (a slow GPU and a
 * small batch on one side); a CLUSTER.json of like groups equals the flags
 * that say the same (--replicas, --prefill-replicas) byte for byte; and a
 * file that is wrong is refused with the file, the group and the knob. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include "sim/cluster.h"
#include "sim/sim.h"
#include "testutil.h"
#include "util/rng.h"

static const cost_linear_coef FAST = {0.004, 2e-5, 1e-4, 1e-8, 1e-10};
static const cost_linear_coef SLOW = {0.009, 5e-5, 3e-4, 3e-8, 4e-10};

/* A Poisson trace of n requests; keep(i) says which of them go in. */
static void make_trace(tr_trace *t, uint32_t n, double rate, int parity)
{
    tr_trace_init(t);
    uint64_t rng = 11;
    double at = 0;
    rh_err e;
    for (uint32_t i = 0; i < n; i++) {
        at += -log(1 - rh_splitmix_unit(&rng)) / rate;
        uint32_t in = 100 + (uint32_t)(rh_splitmix_unit(&rng) * 1500), out = 10 + (uint32_t)(rh_splitmix_unit(&rng) * 300);
        if (parity >= 0 && (int)(i % 2) != parity) continue;
        tr_request r = {.id = i + 1, .arrival = at, .input_len = in, .output_len = out};
        CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(t, &r, &e), 0);
    }
}

/* The roofline's presets, from the source tree (as the cost suites read them). */
static int init(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

static void cfg_init(sim_config *c)
{
    sim_config_default(c);
    c->core.max_total_tokens = 1 << 17;
}

static void same_summary(const metrics_summary *a, const metrics_summary *b)
{
    CU_ASSERT_EQUAL(a->completed, b->completed);
    CU_ASSERT_EQUAL(a->steps, b->steps);
    CU_ASSERT_EQUAL(a->retractions, b->retractions);
    CU_ASSERT_DOUBLE_EQUAL(a->ttft_ms.median, b->ttft_ms.median, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(a->ttft_ms.p99, b->ttft_ms.p99, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(a->tpot_ms.median, b->tpot_ms.median, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(a->itl_ms.p99, b->itl_ms.p99, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(a->e2el_ms.p90, b->e2el_ms.p90, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(a->busy_time, b->busy_time, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(a->mean_batch_size, b->mean_batch_size, 1e-9);
}

static void test_each_replica_is_its_own_server(void)
{
    tr_trace all, even, odd;
    make_trace(&all, 1200, 9, -1);
    make_trace(&even, 1200, 9, 0);
    make_trace(&odd, 1200, 9, 1);
    cost_model *fast = cost_linear_new(&FAST), *slow = cost_linear_new(&SLOW);
    sim_config run_cfg;
    cfg_init(&run_cfg);
    sim_group g[2] = {{.count = 1, .cfg = run_cfg, .cost = fast, .name = "fast"},
                      {.count = 1, .cfg = run_cfg, .cost = slow, .name = "slow"}};
    g[1].cfg.core.max_running_requests = 12;  /* and a knob of its own */
    g[1].cfg.max_running_set = true;
    rh_err e = {{0}};
    sim_result cl, a, b;
    int rc = sim_run_groups(&run_cfg, g, 2, &all, &cl, &e);
    if (rc) printf("\n  sim_run_groups: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL_FATAL(cl.n_replicas, 2);
    CU_ASSERT_EQUAL_FATAL(sim_run(&g[0].cfg, &even, fast, &a, &e), 0);
    CU_ASSERT_EQUAL_FATAL(sim_run(&g[1].cfg, &odd, slow, &b, &e), 0);
    same_summary(&cl.replicas[0].summary, &a.summary);
    same_summary(&cl.replicas[1].summary, &b.summary);
    CU_ASSERT_STRING_EQUAL(cl.replicas[1].group_name, "slow");
    CU_ASSERT_EQUAL(cl.replicas[1].group, 1);
    /* the slow side is slower: the test would pass vacuously on like replicas */
    CU_ASSERT(b.summary.ttft_ms.median > 1.5 * a.summary.ttft_ms.median);
    CU_ASSERT(b.summary.max_batch_size <= 12 && a.summary.max_batch_size > 12);
    CU_ASSERT_EQUAL(cl.summary.completed, a.summary.completed + b.summary.completed);
    printf("\n  replica 0 (fast) TTFT p50 %.1f ms, replica 1 (slow, 12 running) %.1f ms: each its own server's ",
           a.summary.ttft_ms.median, b.summary.ttft_ms.median);
    sim_result_free(&cl);
    sim_result_free(&a);
    sim_result_free(&b);
    cost_free(fast);
    cost_free(slow);
    tr_trace_free(&all);
    tr_trace_free(&even);
    tr_trace_free(&odd);
}

/* The same with tensor parallelism: one Llama-3-8B on an H100 at tp 1, one
 * at tp 2 (the roofline prices a tp-2 step faster, all-reduces and all:
 * TPOT 7% lower here), the run's own tp the cost file's (1). Each replica
 * is its own single-server run at its own group's tp, and the two tp runs
 * differ, so a replica priced at the run's tp could not pass. */
static void test_each_replica_has_its_own_tp(void)
{
    tr_trace all, even, odd;
    make_trace(&all, 400, 6, -1);
    make_trace(&even, 400, 6, 0);
    make_trace(&odd, 400, 6, 1);
    rh_err e = {{0}};
    cost_model *m = cost_parse("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\"}",
                               "8b.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    sim_config run_cfg;
    cfg_init(&run_cfg);
    CU_ASSERT_EQUAL_FATAL(run_cfg.tp, 0);
    sim_group g[2] = {{.count = 1, .cfg = run_cfg, .cost = m, .name = "tp1"},
                      {.count = 1, .cfg = run_cfg, .cost = m, .name = "tp2"}};
    g[0].cfg.tp = 1;
    g[1].cfg.tp = 2;
    sim_result cl, a, b, b1;
    int rc = sim_run_groups(&run_cfg, g, 2, &all, &cl, &e);
    if (rc) printf("\n  sim_run_groups: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL_FATAL(cl.n_replicas, 2);
    CU_ASSERT_EQUAL_FATAL(sim_run(&g[0].cfg, &even, m, &a, &e), 0);
    CU_ASSERT_EQUAL_FATAL(sim_run(&g[1].cfg, &odd, m, &b, &e), 0);
    sim_config one = g[1].cfg;
    one.tp = 1;
    CU_ASSERT_EQUAL_FATAL(sim_run(&one, &odd, m, &b1, &e), 0);
    same_summary(&cl.replicas[0].summary, &a.summary);
    same_summary(&cl.replicas[1].summary, &b.summary);
    CU_ASSERT_EQUAL(cl.replicas[0].gpus, 1);
    CU_ASSERT_EQUAL(cl.replicas[1].gpus, 2);
    CU_ASSERT_EQUAL(cl.gpus, 3);
    /* tp matters here: the odd requests at tp 1 are another run */
    CU_ASSERT(b1.summary.tpot_ms.median > 1.05 * b.summary.tpot_ms.median);
    printf("\n  the odd requests' TPOT p50 %.3f ms at tp 2, %.3f ms at tp 1; replica 1 (tp 2) %.3f ms ",
           b.summary.tpot_ms.median, b1.summary.tpot_ms.median, cl.replicas[1].summary.tpot_ms.median);
    sim_result_free(&cl);
    sim_result_free(&a);
    sim_result_free(&b);
    sim_result_free(&b1);
    cost_free(m);
    tr_trace_free(&all);
    tr_trace_free(&even);
    tr_trace_free(&odd);
}

/* The file `json` against the flags `flags` (name, value pairs), both written. */
static void file_equals_flags(const char *json, const char *const *flags, const cost_model *m, const tr_trace *t)
{
    char path[256], out_file[256], out_flags[256];
    tu_tmp_path("groups_cluster.json", path, sizeof path);
    CU_ASSERT_FATAL(tu_write_file(path, json, strlen(json)) == 0);
    sim_config c;
    cfg_init(&c);
    rh_err e = {{0}};
    sim_config f = c;
    for (int i = 0; flags[i]; i += 2) CU_ASSERT_EQUAL_FATAL(sim_config_set(&f, flags[i], flags[i + 1], &e), 1);
    f.out_path = tu_tmp_path("groups_flags.rhtr", out_flags, sizeof out_flags);
    c.out_path = tu_tmp_path("groups_file.rhtr", out_file, sizeof out_file);
    sim_cluster cl;
    int rc = sim_cluster_load(path, &c, m, &cl, &e);
    if (rc) printf("\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    sim_result a, b;
    CU_ASSERT_EQUAL_FATAL(sim_cluster_run(&cl, t, &a, &e), 0);
    CU_ASSERT_EQUAL_FATAL(sim_run(&f, t, m, &b, &e), 0);
    CU_ASSERT(tu_same_file(out_file, out_flags));
    CU_ASSERT_EQUAL(a.n_replicas, b.n_replicas);
    CU_ASSERT_EQUAL(a.pd_prefill, b.pd_prefill);
    CU_ASSERT_EQUAL(a.gpus, b.gpus);
    same_summary(&a.summary, &b.summary);
    CU_ASSERT_DOUBLE_EQUAL(a.kv_transfer_mean_s, b.kv_transfer_mean_s, 0);
    sim_result_free(&a);
    sim_result_free(&b);
    sim_cluster_free(&cl);
    remove(out_file);
    remove(out_flags);
}

static void test_file_equals_flags(void)
{
    tr_trace t;
    make_trace(&t, 900, 20, -1);
    cost_model *m = cost_linear_new(&FAST);
    const char *rr[] = {"replicas", "3", "router", "least-outstanding", "network-delay-ms", "2", "chunked-prefill-size",
                        "512", NULL};
    file_equals_flags("{\"router\": \"least-outstanding\", \"network_delay_ms\": 2, \"chunked-prefill-size\": 512,\n"
                      " \"groups\": [{\"count\": 2}, {\"name\": \"third\"}]}\n",
                      rr, m, &t);
    const char *pd[] = {"prefill-replicas", "2", "decode-replicas", "3", "pd-link", "rdma", "pd-kv-bytes-per-token",
                        "131072", "max-running-requests", "24", NULL};
    file_equals_flags("{\"pd-link\": \"rdma\", \"groups\": [\n"
                      "  {\"role\": \"decode\", \"count\": 3, \"max-running-requests\": 24, \"pd-kv-bytes-per-token\": 1},\n"
                      "  {\"role\": \"prefill\", \"count\": 2, \"max-running-requests\": 24, \"pd_kv_bytes_per_token\": 131072}]}\n",
                      pd, m, &t);
    /* vLLM's names in a file against ours as flags: the same run */
    const char *vllm[] = {"replicas", "2", "scheduler", "vllm", "max-running-requests", "6", "chunked-prefill-size",
                          "256", "page-size", "32", "disable-radix-cache", NULL, NULL};
    file_equals_flags("{\"scheduler\": \"vllm\", \"groups\": [{\"count\": 2, \"max_num_seqs\": 6,\n"
                      "  \"max-num-batched-tokens\": 256, \"block_size\": 32, \"enable_prefix_caching\": false}]}\n",
                      vllm, m, &t);
    /* and on a roofline, where vLLM's max_num_seqs default follows the GPU's memory */
    rh_err e;
    cost_model *rl = cost_parse("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", "
                                "\"gpu\": \"h100-sxm\"}", "rl.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rl);
    file_equals_flags("{\"scheduler\": \"vllm\", \"groups\": [{\"count\": 2, \"max_num_seqs\": 6,\n"
                      "  \"max-num-batched-tokens\": 256, \"block_size\": 32, \"enable_prefix_caching\": false}]}\n",
                      vllm, rl, &t);
    cost_free(rl);
    cost_free(m);
    tr_trace_free(&t);
}

/* String knobs (a router script, a group's policy script, both read
 * beside the file) outlive the loading: the cluster equals the same
 * routing and policy given by flags. */
static void test_file_script(void)
{
    tr_trace t;
    make_trace(&t, 600, 20, -1);
    cost_model *m = cost_linear_new(&FAST);
    char lua[256];
    tu_tmp_path("groups_rr.lua", lua, sizeof lua);
    const char *rr = "local n = 0\nfunction route(q, r) n = n + 1 return 1 + (n - 1) % #r end\n";
    CU_ASSERT_FATAL(tu_write_file(lua, rr, strlen(rr)) == 0);
    char policy[256];
    tu_tmp_path("groups_lof.lua", policy, sizeof policy);
    const char *lof = "function policy(w, s)\n  table.sort(w, function(a, b) return a.output_len > b.output_len or "
                      "(a.output_len == b.output_len and a.index < b.index) end)\n  return w\nend\n";
    CU_ASSERT_FATAL(tu_write_file(policy, lof, strlen(lof)) == 0);
    char json[512];
    snprintf(json, sizeof json,
             "{\"router-script\": \"%s\", \"groups\": [{\"count\": 3, \"policy-script\": \"%s\"}]}\n",
             strrchr(lua, '/') + 1, strrchr(policy, '/') + 1);
    const char *flags[] = {"replicas", "3", "router", "round-robin", "policy-script", policy, NULL};
    file_equals_flags(json, flags, m, &t);
    cost_free(m);
    tr_trace_free(&t);
}

/* sim_cluster_load's message for `json`, which must be refused. */
static void refused(const char *json, const char *want1, const char *want2, bool with_cost)
{
    char path[256];
    tu_tmp_path("groups_bad.json", path, sizeof path);
    CU_ASSERT_FATAL(tu_write_file(path, json, strlen(json)) == 0);
    sim_config c;
    cfg_init(&c);
    cost_model *m = with_cost ? cost_linear_new(&FAST) : NULL;
    sim_cluster cl;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL(sim_cluster_load(path, &c, m, &cl, &e), -1);
    bool ok = strstr(e.msg, path) && strstr(e.msg, want1) && (!want2 || strstr(e.msg, want2));
    if (!ok) printf("\n  for %s: got \"%s\"\n", json, e.msg);
    CU_ASSERT(ok);
    cost_free(m);
}

static void test_bad_files_refused(void)
{
    refused("{\"groups\": [{\"count\": 2}, {\"router\": \"cache-aware\"}]}", "groups[1].router", "top of the file", true);
    refused("{\"groups\": [{\"name\": \"big\", \"max-runing-requests\": 8}]}", "groups[0] (big).max-runing-requests",
            "not a knob", true);
    refused("{\"groups\": [{\"count\": 0}]}", "groups[0].count", NULL, true);
    refused("{\"groups\": [{\"chunked-prefill-size\": \"lots\"}]}", "groups[0].chunked-prefill-size", NULL, true);
    refused("{\"replicas\": 4, \"groups\": [{}]}", "replicas", "groups give", true);
    refused("{\"groups\": []}", "groups", NULL, true);
    refused("{\"groups\": [{\"count\": 2}]", ":1:", NULL, true);
    refused("{\"groups\": [{\"count\": 2}]}", "groups[0]", "no cost model", false);
    refused("{\"groups\": [{\"cost\": \"no-such-cost.json\"}]}", "groups[0].cost", "no-such-cost.json", true);
    refused("{\"groups\": [{\"cost\": 7}]}", "groups[0].cost", NULL, true);
    refused("{\"groups\": [{\"count\": 2, \"count\": 3}]}", "duplicate", NULL, true);
    refused("{\"groups\": [{\"count\": 4096}, {\"count\": 1}]}", "4097 replicas", "at most 4096", true);
}

/* A cluster sim_run_groups refuses: PD with whole servers, a side alone. */
static void test_bad_mixes_refused(void)
{
    tr_trace t;
    make_trace(&t, 10, 5, -1);
    cost_model *m = cost_linear_new(&FAST);
    sim_config c;
    cfg_init(&c);
    sim_group g[2] = {{.count = 1, .cfg = c, .cost = m, .role = SIM_ROLE_BOTH},
                      {.count = 1, .cfg = c, .cost = m, .role = SIM_ROLE_PREFILL}};
    sim_result r;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL(sim_run_groups(&c, g, 2, &t, &r, &e), -1);
    CU_ASSERT(strstr(e.msg, "not both") != NULL);
    CU_ASSERT_EQUAL(sim_run_groups(&c, g + 1, 1, &t, &r, &e), -1);
    CU_ASSERT(strstr(e.msg, "a prefill and a decode group") != NULL);
    g[1].role = SIM_ROLE_DECODE;
    g[0].role = SIM_ROLE_PREFILL;
    g[0].cfg.core.preset = CORE_PRESET_VLLM;
    CU_ASSERT_EQUAL(sim_run_groups(&c, g, 2, &t, &r, &e), -1);
    CU_ASSERT(strstr(e.msg, "SGLang") != NULL);
    cost_free(m);
    tr_trace_free(&t);
}

/* `rehearse sim --cluster` with GPUs that differ, each group's cost model
 * inline (roofline presets): the H100s take the same share and finish
 * their prefills faster than the A100s. */
static void test_cli_mixed_gpus(void)
{
    char path[256], trace[256], cmd[2048], out[16384];
    tu_tmp_path("groups_mixed.json", path, sizeof path);
    tu_tmp_path("groups_mixed.rhtr", trace, sizeof trace);
    const char *json = "{\"router\": \"round-robin\", \"groups\": [\n"
                       " {\"name\": \"h100\", \"count\": 2, \"cost\": {\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", "
                       "\"gpu\": \"h100-sxm\"}},\n"
                       " {\"name\": \"a100\", \"count\": 2, \"cost\": {\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", "
                       "\"gpu\": \"a100-80g\"}}]}\n";
    CU_ASSERT_FATAL(tu_write_file(path, json, strlen(json)) == 0);
    snprintf(cmd, sizeof cmd, "%s trace synth -o %s --requests 400 --rate 20 --input-len 2000 --output-len 100 --seed 3",
             tu_bin(), trace);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n  %s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    snprintf(cmd, sizeof cmd, "%s sim %s --cluster %s --json", tu_bin(), trace, path);
    rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n  %s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    json_t *o = json_loads(strchr(out, '{'), JSON_DISABLE_EOF_CHECK, NULL);
    CU_ASSERT_FATAL(o != NULL);
    json_t *reps = json_object_get(o, "replicas");
    CU_ASSERT_EQUAL_FATAL(json_array_size(reps), 4);
    double ttft[4];
    for (size_t k = 0; k < 4; k++) {
        json_t *x = json_array_get(reps, k);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(x, "group")), k < 2 ? "h100" : "a100");
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(x, "routed")), 100);
        ttft[k] = json_real_value(json_object_get(x, "median_ttft_ms"));
    }
    printf("\n  TTFT p50 on the H100s %.1f, %.1f ms; on the A100s %.1f, %.1f ms ", ttft[0], ttft[1], ttft[2], ttft[3]);
    CU_ASSERT(ttft[2] > 1.3 * ttft[0] && ttft[3] > 1.3 * ttft[1]);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(o, "gpus")), 4);
    json_decref(o);
    /* The same cluster from Lua: sim.run{cluster = FILE} gives the CLI's numbers. */
    char script[256], body[2048];
    tu_tmp_path("groups_mixed.lua", script, sizeof script);
    snprintf(body, sizeof body,
             "local r = rehearse.sim.run{trace = '%s', cost = {kind = 'roofline', version = 1, model = 'llama-3-8b', "
             "gpu = 'h100-sxm'}, cluster = '%s'}\n"
             "assert(#r.replicas == 4 and r.replicas[3].group == 'a100', 'replicas')\n"
             "print(string.format('lua %%.6f %%.6f', r.replicas[1].median_ttft_ms, r.replicas[4].median_ttft_ms))\n",
             trace, path);
    CU_ASSERT_FATAL(tu_write_file(script, body, strlen(body)) == 0);
    snprintf(cmd, sizeof cmd, "%s run %s", tu_bin(), script);
    rc = tu_run(cmd, out, sizeof out);
    char want[128];
    snprintf(want, sizeof want, "lua %.6f %.6f", ttft[0], ttft[3]);
    if (rc || !strstr(out, want)) printf("\n  want %s, got: %s\n", want, out);
    CU_ASSERT(rc == 0 && strstr(out, want) != NULL);
    remove(script);
    snprintf(cmd, sizeof cmd, "%s sim %s --cluster %s --replicas 4", tu_bin(), trace, path);
    CU_ASSERT_NOT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "gives the replicas: drop --replicas") != NULL);
    remove(path);
    remove(trace);
}

void register_test_sim_groups(void)
{
    CU_pSuite s = CU_add_suite("sim_groups", init, NULL);
    CU_add_test(s, "unlike replicas under round-robin: each is its own server", test_each_replica_is_its_own_server);
    CU_add_test(s, "groups at tp 1 and tp 2: each replica is its own server at its own tp", test_each_replica_has_its_own_tp);
    CU_add_test(s, "a CLUSTER.json equals the flags that say the same, byte for byte", test_file_equals_flags);
    CU_add_test(s, "a router script named in the file, beside it, routes as the flags do", test_file_script);
    CU_add_test(s, "bad CLUSTER.json files refused with the file, group and knob", test_bad_files_refused);
    CU_add_test(s, "whole servers with a PD side, a side alone, PD under vLLM: refused", test_bad_mixes_refused);
    CU_add_test(s, "rehearse sim --cluster and sim.run{cluster = FILE}: H100s and A100s, cost models inline",
                test_cli_mixed_gpus);
}
