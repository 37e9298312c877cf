/* fuzz_cluster.c — a CLUSTER.json is outside input: any bytes either load
 * as a cluster or fail with a message, and a loaded cluster either runs a
 * three-request trace or fails with a message (its groups' TP, pools and
 * roles are checked when it runs). Presets come from sim/cost/presets (run
 * from the repository root); a cost file the input names is looked for in
 * /tmp, beside the input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/cluster.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("REHEARSE_PRESETS", "sim/cost/presets", 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz-cluster-%d.json", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    static const cost_linear_coef K = {0.004, 2e-5, 1e-4, 1e-8, 1e-10};
    cost_model *m = cost_linear_new(&K);
    sim_config base;
    sim_config_default(&base);
    base.core.max_total_tokens = 1 << 16;
    sim_cluster c;
    rh_err e = {{0}};
    if (sim_cluster_load(path, &base, m, &c, &e) < 0) {
        if (!e.msg[0]) abort();   /* every failure says why */
    } else if (c.n_replicas <= 16) {
        tr_trace t;
        tr_trace_init(&t);
        for (uint32_t i = 0; i < 3; i++) {
            tr_request r = {.id = i + 1, .arrival = 0.1 * i, .input_len = 100 + 50 * i, .output_len = 5};
            if (tr_trace_add_request(&t, &r, &e) < 0) abort();
        }
        sim_result res;
        e.msg[0] = 0;
        if (sim_cluster_run(&c, &t, &res, &e) == 0) sim_result_free(&res);
        else if (!e.msg[0]) abort();
        tr_trace_free(&t);
    }
    sim_cluster_free(&c);   /* zeroed by a failed load */
    cost_free(m);
    unlink(path);
    return 0;
}
