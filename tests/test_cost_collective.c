/* test_cost_collective.c — the collective model (sim/cost/collective.h)
 * with the GPU presets' measured links against every row of the NCCL
 * timings in ../shared/gpu-profiles/vidur/network: all-reduce on DGX H100
 * and A100 (2 to 16 GPUs, one or two nodes) and on NVLink-bridged pairs,
 * send/recv inside a node and across; 2 KB to 64 MB (512 MB for the A100
 * pairs). Target: median relative error at most 15% per file. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/collective.h"
#include "testutil.h"
#include "util/csv.h"
#include "util/stats.h"

static int init(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Relative errors of every row of one file; prints median, p90, max and
 * returns the median (NAN when the file is absent). */
static double file_error(const char *dir, const char *file, const char *preset)
{
    char path[512];
    snprintf(path, sizeof path, "%s/vidur/network/%s", dir, file);
    rh_csv_table t;
    rh_err e;
    if (rh_csv_read(path, &t, &e) < 0) {
        printf("\n  SKIPPED %s: %s", file, e.msg);
        return NAN;
    }
    rl_gpu g;
    CU_ASSERT_EQUAL_FATAL(rl_gpu_load(preset, &g, &e), 0);
    int send = strstr(file, "send_recv") != NULL;
    int c_time = rh_csv_col(&t, send ? "time_stats.send_recv.median" : "time_stats.all_reduce.median");
    int c_n = rh_csv_col(&t, "num_workers"), c_d = rh_csv_col(&t, "devices_per_node"), c_s = rh_csv_col(&t, "size");
    CU_ASSERT_FATAL(c_time >= 0 && c_n >= 0 && c_d >= 0 && c_s >= 0);
    double *err = malloc(t.nrow * sizeof *err);
    size_t n = 0;
    for (size_t i = 0; i < t.nrow; i++) {
        int ok[4];
        double ms = rh_csv_num(&t, i, c_time, &ok[0]), workers = rh_csv_num(&t, i, c_n, &ok[1]);
        double per_node = rh_csv_num(&t, i, c_d, &ok[2]), bytes = rh_csv_num(&t, i, c_s, &ok[3]);
        if (!ok[0] || !ok[1] || !ok[2] || !ok[3] || !(ms > 0)) continue;
        double pred = send ? rl_send_recv_s(&g, per_node < 2, bytes, 1)
                           : rl_allreduce_s(&g, (uint32_t)workers, (uint32_t)per_node, bytes, 1);
        err[n++] = fabs(pred - ms * 1e-3) / (ms * 1e-3);
    }
    qsort(err, n, sizeof *err, cmp);
    double med = n ? err[n / 2] : NAN, p90 = n ? err[(size_t)(0.9 * (n - 1))] : NAN, max = n ? err[n - 1] : NAN;
    printf("\n  %-40s %-14s %5zu rows: median %5.1f%%  p90 %5.1f%%  max %6.1f%%", file, preset, n, 100 * med,
           100 * p90, 100 * max);
    free(err);
    rh_csv_free(&t);
    return med;
}

static void test_measured_collectives(void)
{
    const char *dir = tu_gpu_profiles("collectives against measured NCCL times");
    if (!dir) return;
    static const char *const files[][2] = {
        {"h100_dgx/all_reduce.csv", "h100-sxm"},
        {"h100_dgx/send_recv.csv", "h100-sxm"},
        {"a100_dgx/all_reduce.csv", "a100-80g"},
        {"a100_dgx/send_recv.csv", "a100-80g"},
        {"h100_pairwise_nvlink/all_reduce.csv", "h100-nvl"},
        {"a100_pairwise_nvlink/all_reduce.csv", "a100-80g-pcie"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        double med = file_error(dir, files[i][0], files[i][1]);
        if (isnan(med)) continue;
        CU_ASSERT(med <= 0.15);
    }
    printf("\n  ");
}

/* The model's shape, by hand: a one-node ring, the same ring across two
 * nodes (slower, and twice the slow hop), send/recv both ways. */
static void test_shape_by_hand(void)
{
    rl_gpu g;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(rl_gpu_load("h100-sxm", &g, &e), 0);
    const rl_links *l = &g.links;
    double S = 64e6;
    CU_ASSERT_DOUBLE_EQUAL(rl_allreduce_s(&g, 8, 8, S, 1), l->allreduce_latency_s + 1.75 * S / l->nvlink_Bps, 1e-12);
    double cross = l->allreduce_latency_s + 2 * l->slow_hop_latency_s +
                   2 * 15.0 / 16 * S / fmin(l->nvlink_Bps, l->slow_Bps * 8);
    CU_ASSERT_DOUBLE_EQUAL(rl_allreduce_s(&g, 16, 8, S, 1), cross, 1e-12);
    CU_ASSERT(rl_allreduce_s(&g, 16, 8, S, 1) > rl_allreduce_s(&g, 8, 8, S, 1));
    CU_ASSERT_DOUBLE_EQUAL(rl_send_recv_s(&g, false, S, 1), l->send_recv_latency_s + S / l->nvlink_Bps, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(rl_send_recv_s(&g, true, S, 1),
                           l->send_recv_latency_s + l->slow_hop_latency_s + S / l->slow_Bps, 1e-12);
    /* halving the efficiency doubles only the bandwidth term */
    CU_ASSERT_DOUBLE_EQUAL(rl_allreduce_s(&g, 8, 8, S, 0.5), l->allreduce_latency_s + 3.5 * S / l->nvlink_Bps, 1e-12);
    CU_ASSERT_EQUAL(rl_allreduce_s(&g, 1, 1, S, 1), 0);
}

/* The all-gather by hand, as the all-reduce above: the second half of the
 * ring, (n-1) steps moving (n-1)/n of the buffer, and across two nodes one
 * slow hop (the all-reduce crosses twice). On the A100 preset every term
 * counts: a ring-step latency, efficiencies below 1 and 2.745 NICs. */
static void test_allgather_by_hand(void)
{
    rl_gpu g;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(rl_gpu_load("a100-80g", &g, &e), 0);
    const rl_links *l = &g.links;
    CU_ASSERT_FATAL(l->ring_step_latency_s > 0 && l->slow_hop_latency_s > 0 && l->allreduce_slow_eff < 1);
    CU_ASSERT_EQUAL_FATAL(g.gpus_per_node, 8);
    for (int k = 0; k < 2; k++) {
        double S = k ? 64e6 : 16e3;   /* a bandwidth-bound and a latency-bound buffer */
        double one = l->allreduce_latency_s + 7 * l->ring_step_latency_s +
                     7.0 / 8 * S / (l->allreduce_nvlink_eff * l->nvlink_Bps);
        CU_ASSERT_DOUBLE_EQUAL(rl_allgather_s(&g, 8, 8, S, 1), one, 1e-12);
        double ring = l->allreduce_slow_eff * fmin(l->nvlink_Bps, l->slow_Bps * fmin(8, l->slow_links));
        double two = l->allreduce_latency_s + 15 * l->ring_step_latency_s + l->slow_hop_latency_s +
                     15.0 / 16 * S / ring;
        CU_ASSERT_DOUBLE_EQUAL(rl_allgather_s(&g, 16, 8, S, 1), two, 1e-12);
        /* the same GPUs as one all-reduce: the all-gather is its second half
         * plus the call's latency once */
        double ar = rl_allreduce_s(&g, 16, 8, S, 1);
        CU_ASSERT_DOUBLE_EQUAL(2 * rl_allgather_s(&g, 16, 8, S, 1) - l->allreduce_latency_s, ar, 1e-12);
    }
    /* 4 GPUs on each of 4 nodes: the ring still crosses the slow link once
     * per gather, over min(4, 2.745) NICs per node */
    double S = 1e6, ring = l->allreduce_slow_eff * fmin(l->nvlink_Bps, l->slow_Bps * fmin(4, l->slow_links));
    CU_ASSERT_DOUBLE_EQUAL(rl_allgather_s(&g, 16, 4, S, 1),
                           l->allreduce_latency_s + 15 * l->ring_step_latency_s + l->slow_hop_latency_s +
                               15.0 / 16 * S / ring,
                           1e-12);
    CU_ASSERT_EQUAL(rl_allgather_s(&g, 1, 1, S, 1), 0);
}

void register_test_cost_collective(void)
{
    CU_pSuite s = CU_add_suite("cost_collective", init, NULL);
    CU_add_test(s, "the collective model by hand", test_shape_by_hand);
    CU_add_test(s, "the all-gather by hand: one node, two nodes, four", test_allgather_by_hand);
    CU_add_test(s, "every measured NCCL row: median error <= 15% per file", test_measured_collectives);
}
