/* cluster.h — a CLUSTER.json: replicas that differ, for sim_run_groups.
 *
 *   {
 *     "router": "cache-aware",            run-wide knobs, by their flag names
 *     "network-delay-ms": 0.5,
 *     "cost": "h100.json",                the groups' cost model unless they name one
 *     "max-running-requests": 128,        a server knob here is every group's default
 *     "groups": [
 *       {"name": "h100", "count": 2, "tp": 2},
 *       {"name": "a100", "count": 4, "cost": {"kind": "roofline", "version": 1, "model": "llama-3-8b",
 *                                              "gpu": "a100-80g"},
 *        "chunked-prefill-size": 4096}
 *     ]
 *   }
 *
 * Each group is `count` like replicas (default 1) with its own cost model (a
 * file, relative to the CLUSTER.json's folder, or the model itself inline)
 * and its server knobs (tp, the scheduler's, speculation, memory), laid
 * over the command line's and the file's top level (a file a knob names, a
 * script, is read beside the CLUSTER.json too). "role": "prefill" or
 * "decode" makes a prefill-decode cluster (every group one or the other).
 * The run-wide knobs (arrivals, router, network, PD link, SLOs, seed of the
 * draws) belong at the top; a group that sets one, a top level that sets
 * the replica counts the groups already give, an unknown knob or a bad
 * value is refused with the file, the group and the knob. */
#ifndef RH_SIM_CLUSTER_H
#define RH_SIM_CLUSTER_H

#include "sim/cost/cost.h"
#include "sim/sim.h"
#include "util/err.h"

typedef struct sim_cluster {
    sim_config run;          /* the base knobs with the file's top level over them */
    sim_group *groups;
    uint32_t n_groups;
    uint32_t n_replicas;     /* summed over the groups */
    cost_model **owned;      /* the cost models the file loaded, one per group at most */
    char **names;            /* the groups' names, "groups[i]" for an unnamed one (the groups borrow them) */
    char **kept;             /* string knobs' values (the configs point into them) */
    size_t n_kept, cap_kept;
    char *path;              /* the file, for messages */
} sim_cluster;

/* Reads PATH over `base` (the command line's knobs). default_cost (may be
 * NULL) prices the groups that name none when the file's top level names
 * none either; it is borrowed and must outlive the cluster. 0, or -1 with a
 * message naming PATH. */
int sim_cluster_load(const char *path, const sim_config *base, const cost_model *default_cost, sim_cluster *out,
                     rh_err *e);
void sim_cluster_free(sim_cluster *c);

/* Runs it: sim_run_groups with the cluster's own run knobs. */
int sim_cluster_run(const sim_cluster *c, const tr_trace *trace, sim_result *out, rh_err *e);

#endif
