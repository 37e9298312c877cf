/* test_sim_cluster.c — the simulated cluster against two computations of
 * the same thing: one replica behind any router is the single server, byte
 * for byte (the written run and every metric); N replicas fed by
 * round-robin with each request sent N times at once are N copies of the
 * single server, so every latency metric equals the single run's and every
 * throughput is N times it (within 2%, the bound; here exact); and
 * cache-aware routing keeps prefix groups together, so its hit rate beats
 * round-robin's on a trace of shared system prompts; and under
 * prefill-decode disaggregation one request's TTFT and E2E are the single
 * server's plus its KV transfer worked out by hand (latency + tokens x
 * bytes per token / bandwidth), transfers queue on a prefill replica's
 * link, and a pool too small for a request refuses it alone. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "testutil.h"
#include "util/rng.h"

static const cost_linear_coef K = {0.004, 2e-5, 1e-4, 1e-8, 1e-10};

/* A Poisson trace; with `copies` > 1 each request is sent that many times at
 * once (ids differ). With groups > 0, prompts open with one of `groups`
 * shared 4-block prefixes (block size 64), then a block of their own. */
static void make_trace(tr_trace *t, uint32_t n, double rate, uint32_t copies, uint32_t groups)
{
    tr_trace_init(t);
    t->header.block_size = groups ? 64 : 0;
    uint64_t rng = 7;
    double at = 0;
    rh_err e;
    for (uint32_t i = 0; i < n; i++) {
        at += -log(1 - rh_splitmix_unit(&rng)) / rate;
        uint32_t in = 100 + (uint32_t)(rh_splitmix_unit(&rng) * 900), out = 10 + (uint32_t)(rh_splitmix_unit(&rng) * 200);
        uint64_t hashes[5];
        uint32_t g = (uint32_t)(rh_splitmix_unit(&rng) * (groups ? groups : 1));
        if (groups) {
            in = 5 * 64;
            for (int k = 0; k < 4; k++) hashes[k] = 1000003ull * (g + 1) + (uint64_t)k;
            hashes[4] = 0x9e3779b97f4a7c15ull ^ i;
        }
        for (uint32_t c = 0; c < copies; c++) {
            tr_request r = {.id = (uint64_t)i * copies + c + 1, .arrival = at, .input_len = in, .output_len = out,
                            .hashes = groups ? hashes : NULL, .n_hashes = groups ? 5 : 0};
            CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(t, &r, &e), 0);
        }
    }
}

static void run(sim_config *c, const tr_trace *t, const cost_model *m, sim_result *res)
{
    rh_err e = {{0}};
    int rc = sim_run(c, t, m, res, &e);
    if (rc) printf("\n  sim_run: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

static void cfg_init(sim_config *c)
{
    sim_config_default(c);
    c->core.max_total_tokens = 1 << 18;
}

static void test_one_replica_is_the_server(void)
{
    tr_trace t;
    make_trace(&t, 800, 6, 1, 6);
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    char plain[256], routed[256];
    c.out_path = tu_tmp_path("cluster_plain.rhtr", plain, sizeof plain);
    sim_result base;
    run(&c, &t, m, &base);
    CU_ASSERT_EQUAL(base.n_replicas, 0);
    char script[256];
    const char *route_one = "function route(request, replicas) return 1 end\n";
    CU_ASSERT_FATAL(tu_write_file(tu_tmp_path("cluster_one.lua", script, sizeof script), route_one,
                                  strlen(route_one)) == 0);
    for (int p = 0; p < ROUTER_N_POLICIES; p++) {
        sim_config one = c;
        one.replicas = 1;
        one.router.policy = (router_policy)p;
        if (p == ROUTER_LUA) one.router.lua_script = script;
        one.out_path = tu_tmp_path("cluster_one.rhtr", routed, sizeof routed);
        sim_result r;
        run(&one, &t, m, &r);
        CU_ASSERT(tu_same_file(plain, routed));
        CU_ASSERT_EQUAL(r.summary.completed, base.summary.completed);
        CU_ASSERT_EQUAL(r.summary.steps, base.summary.steps);
        CU_ASSERT_DOUBLE_EQUAL(r.summary.ttft_ms.p99, base.summary.ttft_ms.p99, 0);
        CU_ASSERT_DOUBLE_EQUAL(r.summary.cache_hit_rate, base.summary.cache_hit_rate, 0);
        sim_result_free(&r);
        remove(routed);
    }
    remove(plain);
    sim_result_free(&base);
    cost_free(m);
    tr_trace_free(&t);
}

static double rel(double got, double want)
{
    return want ? fabs(got - want) / fabs(want) : fabs(got);
}

static void test_round_robin_copies(void)
{
    const uint32_t N = 4;
    tr_trace one, many;
    make_trace(&one, 1500, 8, 1, 0);
    make_trace(&many, 1500, 8, N, 0);
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    sim_result base, cl;
    run(&c, &one, m, &base);
    c.replicas = N;
    c.router.policy = ROUTER_ROUND_ROBIN;
    run(&c, &many, m, &cl);
    CU_ASSERT_EQUAL_FATAL(cl.n_replicas, N);
    CU_ASSERT_EQUAL(cl.summary.completed, N * base.summary.completed);
    const rh_summary *lat[][2] = {{&cl.summary.ttft_ms, &base.summary.ttft_ms}, {&cl.summary.tpot_ms, &base.summary.tpot_ms},
                                  {&cl.summary.itl_ms, &base.summary.itl_ms}, {&cl.summary.e2el_ms, &base.summary.e2el_ms}};
    double worst = 0;
    for (int k = 0; k < 4; k++) {
        worst = fmax(worst, rel(lat[k][0]->mean, lat[k][1]->mean));
        worst = fmax(worst, rel(lat[k][0]->median, lat[k][1]->median));
        worst = fmax(worst, rel(lat[k][0]->p99, lat[k][1]->p99));
    }
    worst = fmax(worst, rel(cl.summary.request_throughput, N * base.summary.request_throughput));
    worst = fmax(worst, rel(cl.summary.output_throughput, N * base.summary.output_throughput));
    printf("\n  %u replicas, each request sent %u times, round-robin: worst metric error %.2e ", N, N, worst);
    CU_ASSERT(worst < 0.02);
    CU_ASSERT_DOUBLE_EQUAL(cl.imbalance_requests, 1.0, 1e-12);
    for (uint32_t k = 0; k < N; k++) {
        CU_ASSERT_EQUAL(cl.replicas[k].routed, one.n_requests);
        CU_ASSERT_EQUAL(cl.replicas[k].steps, base.summary.steps);
        CU_ASSERT(rel(cl.replicas[k].summary.ttft_ms.p99, base.summary.ttft_ms.p99) < 1e-9);
    }
    sim_result_free(&base);
    sim_result_free(&cl);
    cost_free(m);
    tr_trace_free(&one);
    tr_trace_free(&many);
}

static void test_cache_aware_keeps_prefixes_together(void)
{
    tr_trace t;
    make_trace(&t, 3000, 30, 1, 96);
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    c.core.max_total_tokens = 12000;   /* a quarter of the groups' prefixes, and room to run */
    c.replicas = 4;
    sim_result rr, ca;
    c.router.policy = ROUTER_ROUND_ROBIN;
    run(&c, &t, m, &rr);
    c.router.policy = ROUTER_CACHE_AWARE;
    run(&c, &t, m, &ca);
    printf("\n  96 prefix groups on 4 replicas: hit rate round-robin %.3f, cache-aware %.3f; TTFT p50 %.1f vs %.1f ms ",
           rr.summary.cache_hit_rate, ca.summary.cache_hit_rate, rr.summary.ttft_ms.median, ca.summary.ttft_ms.median);
    /* Four of five blocks are shared, and each pool holds about a quarter of
     * the groups' prefixes: kept together a group stays cached on its
     * replica; sent round the replicas, every group competes for every pool. */
    CU_ASSERT(ca.summary.cache_hit_rate > rr.summary.cache_hit_rate + 0.3);
    CU_ASSERT(ca.summary.cache_hit_rate > 0.7);
    CU_ASSERT_EQUAL(ca.summary.completed, 3000);
    sim_result_free(&rr);
    sim_result_free(&ca);
    cost_free(m);
    tr_trace_free(&t);
}

/* A step as the series reads it (sim.c keeps the same fields as floats). */
typedef struct ref_row {
    float t, dur, batch, prefill, decode, kv, waiting, running;
} ref_row;

static int by_start(const void *a, const void *b)
{
    float x = ((const ref_row *)a)->t, y = ((const ref_row *)b)->t;
    return (x > y) - (x < y);
}

/* The cluster's series against one binned from a sorted copy of every step
 * the run wrote. Five replicas at a load that leaves some idle now and then
 * (so a replica's next step can come before every other head of the merge),
 * steps of 60 ms and more, about one bin per step (series_points above the
 * step count): bins with several steps (their mean) and bins inside a long
 * step (that step's values: the latest started before the bin, whichever
 * replica ran it), so the merge of the replicas' steps must be in start
 * order for the two to agree. */
static void test_cluster_series_is_the_sorted_steps(void)
{
    tr_trace t;
    make_trace(&t, 80, 1, 1, 0);
    const cost_linear_coef slow = {0.06, 1e-4, 1e-3, 0, 0};
    cost_model *m = cost_linear_new(&slow);
    sim_config c;
    cfg_init(&c);
    c.replicas = 5;
    c.series_points = 8000;
    c.router.policy = ROUTER_LEAST_OUTSTANDING;
    char path[256];
    c.out_path = tu_tmp_path("cluster_series.rhtr", path, sizeof path);
    sim_result res;
    run(&c, &t, m, &res);
    tr_step *st = NULL;
    size_t ns = 0;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(tr_read_steps(path, &st, &ns, NULL, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ns, res.summary.steps);
    const sim_series *s = &res.series;
    CU_ASSERT_EQUAL_FATAL(s->n, ns < 8000 ? ns : 8000);
    CU_ASSERT_FATAL(s->n > 1);
    ref_row *rows = malloc(ns * sizeof *rows);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rows);
    for (size_t i = 0; i < ns; i++)
        rows[i] = (ref_row){(float)st[i].start, (float)st[i].duration, (float)(st[i].prefill_seqs + st[i].decode_seqs),
                            (float)st[i].prefill_tokens, (float)st[i].decode_tokens,
                            st[i].pages_total ? (float)st[i].pages_used / (float)st[i].pages_total : 0,
                            (float)st[i].waiting, (float)st[i].running};
    qsort(rows, ns, sizeof *rows, by_start);
    /* no two replicas start a step at the same instant here, so the sorted
     * order is the merge's, ties to the lower replica or not */
    size_t ties = 0;
    for (size_t i = 1; i < ns; i++) ties += rows[i].t == rows[i - 1].t;
    CU_ASSERT_EQUAL_FATAL(ties, 0);
    /* every replica served, and their steps interleave */
    for (uint32_t k = 0; k < 5; k++) CU_ASSERT(res.replicas[k].steps > 100);

    uint32_t n = s->n;
    double width = s->t[1];   /* bin b starts at b * width */
    double *sum = calloc(7 * (size_t)n, sizeof *sum);
    uint32_t *cnt = calloc(n, sizeof *cnt);
    CU_ASSERT_FATAL(sum && cnt);
    for (size_t i = 0; i < ns; i++) {
        uint32_t b = (uint32_t)(rows[i].t / width);
        if (b >= n) b = n - 1;
        cnt[b]++;
        const float v[6] = {rows[i].batch, rows[i].prefill, rows[i].decode, rows[i].kv, rows[i].waiting, rows[i].running};
        for (int k = 0; k < 6; k++) sum[(size_t)k * n + b] += v[k];
    }
    const double *got[6] = {s->batch_size, s->prefill_tokens, s->decode_tokens, s->kv_use, s->waiting, s->running};
    size_t last = 0, bad = 0, crowded = 0, inside = 0, idle = 0;   /* last: the latest step started before the bin */
    for (uint32_t b = 0; b < n; b++) {
        double want[6] = {0};
        CU_ASSERT_DOUBLE_EQUAL(s->t[b], b * width, 1e-12);
        if (cnt[b]) {
            for (int k = 0; k < 6; k++) want[k] = sum[(size_t)k * n + b] / cnt[b];
            crowded += cnt[b] > 1;
            while (last + 1 < ns && rows[last + 1].t < (b + 1) * width) last++;
        } else if (rows[last].t <= b * width && rows[last].t + rows[last].dur > b * width) {
            const ref_row *x = &rows[last];
            const float v[6] = {x->batch, x->prefill, x->decode, x->kv, x->waiting, x->running};
            for (int k = 0; k < 6; k++) want[k] = v[k];
            inside++;
        } else {
            idle++;
        }
        for (int k = 0; k < 6; k++)
            if (fabs(got[k][b] - want[k]) > 1e-9 * fmax(1, fabs(want[k]))) {
                if (bad++ < 5)
                    printf("\n  bin %u (t %.4f s) column %d: series %.6g, sorted steps %.6g", b, b * width, k + 1,
                           got[k][b], want[k]);
            }
    }
    printf("\n  %zu steps of 5 replicas in %u bins: %zu with several steps, %zu inside a long one, %zu idle; %zu "
           "values differ ",
           ns, n, crowded, inside, idle, bad);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(crowded > 500 && inside > 1000);
    free(sum);
    free(cnt);
    free(rows);
    free(st);
    sim_result_free(&res);
    cost_free(m);
    tr_trace_free(&t);
}

static void add(tr_trace *t, uint64_t id, double at, uint32_t in, uint32_t out)
{
    tr_request r = {.id = id, .arrival = at, .input_len = in, .output_len = out};
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(t, &r, &e), 0);
}

static void pd_config(sim_config *c)
{
    cfg_init(c);
    c->pd_prefill = 1;
    c->replicas = 1;
    c->pd_kv_bytes_per_token = 1e5;
    c->pd_link_Bps = 10e9;
    c->pd_link_latency_s = 50e-6;
}

static void test_pd_transfer_by_hand(void)
{
    cost_model *m = cost_linear_new(&K);
    tr_trace t;
    tr_trace_init(&t);
    add(&t, 1, 0, 1000, 10);
    sim_config c;
    cfg_init(&c);
    sim_result one, pd;
    run(&c, &t, m, &one);
    pd_config(&c);
    run(&c, &t, m, &pd);
    double xfer = 50e-6 + 1000 * 1e5 / 10e9;   /* 10.05 ms */
    CU_ASSERT_EQUAL_FATAL(pd.summary.completed, 1);
    CU_ASSERT_DOUBLE_EQUAL(pd.requests[0].kv_transfer_s, xfer, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(pd.requests[0].ttft, one.requests[0].ttft + xfer, 1e-9);
    /* The decode side runs the same nine decodes at the same contexts. */
    CU_ASSERT_DOUBLE_EQUAL(pd.requests[0].e2e, one.requests[0].e2e + xfer, 1e-9);
    CU_ASSERT_EQUAL(pd.requests[0].output_len, 10);
    CU_ASSERT_EQUAL(pd.requests[0].replica, 1);   /* the decode replica */
    CU_ASSERT_EQUAL(pd.gpus, 2);
    printf("\n  TTFT %.3f ms alone, %.3f ms with a %.3f ms transfer ", 1e3 * one.requests[0].ttft,
           1e3 * pd.requests[0].ttft, 1e3 * xfer);
    sim_result_free(&one);
    sim_result_free(&pd);

    /* Two prompts prefilled in one step leave together: the second's KV
     * waits for the first's on the link. */
    add(&t, 2, 0, 1000, 10);
    run(&c, &t, m, &pd);
    CU_ASSERT_EQUAL(pd.summary.completed, 2);
    double a = pd.requests[0].kv_transfer_s, b = pd.requests[1].kv_transfer_s;
    CU_ASSERT_DOUBLE_EQUAL(fmin(a, b), xfer, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(fmax(a, b), 2 * xfer, 1e-12);
    sim_result_free(&pd);

    /* A decode pool too small for a request: that one fails, the rest run. */
    tr_trace_free(&t);
    tr_trace_init(&t);
    add(&t, 1, 0, 3000, 10);
    add(&t, 2, 0.1, 200, 10);
    pd_config(&c);
    sim_config small = c;
    small.core.max_total_tokens = 4096;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL(sim_run(&small, &t, m, &pd, &e), 0);
    CU_ASSERT_EQUAL(pd.summary.completed, 2);   /* 3010 tokens fit 4096 */
    sim_result_free(&pd);
    small.core.max_total_tokens = 2048;
    CU_ASSERT_EQUAL(sim_run(&small, &t, m, &pd, &e), 0);
    CU_ASSERT_EQUAL(pd.summary.completed, 1);
    CU_ASSERT_EQUAL(pd.summary.failed_kv_pool + pd.summary.failed_context_length, 1);
    sim_result_free(&pd);
    cost_free(m);
    tr_trace_free(&t);
}

/* With every pool big enough, disaggregation moves work but loses none. */
static void test_pd_serves_everything(void)
{
    tr_trace t;
    make_trace(&t, 1200, 10, 1, 6);
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    pd_config(&c);
    c.pd_prefill = 2;
    c.replicas = 3;
    c.router.policy = ROUTER_CACHE_AWARE;
    sim_result r;
    run(&c, &t, m, &r);
    CU_ASSERT_EQUAL(r.summary.completed, 1200);
    CU_ASSERT_EQUAL(r.n_replicas, 5);
    CU_ASSERT_EQUAL(r.pd_prefill, 2);
    uint64_t decoded = 0;
    for (uint32_t k = 2; k < 5; k++) decoded += r.replicas[k].routed;
    CU_ASSERT_EQUAL(decoded, 1200);   /* every request has output > 1 here */
    CU_ASSERT_EQUAL(r.replicas[0].routed + r.replicas[1].routed, 1200);
    CU_ASSERT(r.summary.cache_hit_rate > 0.5);   /* the prefill pool's cache */
    CU_ASSERT(r.kv_transfer_mean_s > 50e-6);
    sim_result_free(&r);
    cost_free(m);
    tr_trace_free(&t);
}

void register_test_sim_cluster(void)
{
    CU_pSuite s = CU_add_suite("sim_cluster", NULL, NULL);
    CU_add_test(s, "one replica behind any router is the single server, byte for byte", test_one_replica_is_the_server);
    CU_add_test(s, "round-robin over N replicas at N copies equals one replica", test_round_robin_copies);
    CU_add_test(s, "a cluster's time series is its replicas' steps binned in start order", test_cluster_series_is_the_sorted_steps);
    CU_add_test(s, "cache-aware routing beats round-robin on shared prefixes", test_cache_aware_keeps_prefixes_together);
    CU_add_test(s, "prefill-decode: one request's KV transfer by hand, transfers queue, pools refuse alone",
                test_pd_transfer_by_hand);
    CU_add_test(s, "prefill-decode: two prefill and three decode replicas serve every request", test_pd_serves_everything);
}
