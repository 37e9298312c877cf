/* tp.h — the ranks of a tensor-parallel group on this node, started and stopped.
 *
 * --tp-size N splits every layer's heads and MLP width over N ranks (one GPU
 * each on the CUDA backend, one thread each on the CPU backend). Rank 0 runs
 * the scheduler and drives its runner as usual; runner_forward broadcasts each
 * batch to the other ranks, which loop on runner_follow in threads started
 * here. Several nodes follow SGLang: --nnodes M puts N/M ranks on each node,
 * --node-rank says which node this is (node k holds ranks k*N/M ..), and
 * every node meets at --dist-init-addr HOST:PORT through NCCL's bootstrap.
 * A node other than 0 has no scheduler: it runs its ranks until node 0 stops.
 *
 * All ranks of a node are built at the same time (NCCL's init waits for the
 * whole group) and checked together: one failing rank fails the start with
 * its message, and nothing is left running. A rank on another node that never
 * comes blocks the start, as NCCL's does. */
#ifndef RH_MODEL_TP_H
#define RH_MODEL_TP_H

#include <stdint.h>

#include "engine/model/runner.h"
#include "kernels/kernels.h"
#include "util/err.h"

typedef struct tp_config {
    uint32_t tp_size;            /* ranks in the group, over every node (--tp-size, 1) */
    uint32_t nnodes;             /* nodes (--nnodes, 1) */
    uint32_t node_rank;          /* this node (--node-rank, 0) */
    const char *dist_init_addr;  /* HOST:PORT where the nodes meet (--dist-init-addr; nnodes > 1) */
} tp_config;

/* tp_size 1, one node. */
void tp_config_default(tp_config *t);
/* 1 when the config asks for more than one rank or node. */
int tp_config_active(const tp_config *t);
/* Checks sizes against each other and the backend (K NULL: CPU), naming the flag. */
int tp_config_check(const tp_config *t, const kern_table *K, rh_err *e);
/* Ranks on each node. */
uint32_t tp_ranks_per_node(const tp_config *t);

typedef struct tp_group tp_group;

/* Builds this node's ranks, each with its slice of m (which must outlive the
 * group), and starts the followers. */
tp_group *tp_group_start(const model *m, const runner_config *rc, const tp_config *t, rh_err *e);
/* Rank 0's runner (node 0 only, else NULL): drive it from the thread that
 * called tp_group_start. */
runner *tp_group_leader(tp_group *g);
/* A node other than 0: waits until node 0 lets the group go. 0, or -1 with
 * the first failing rank's message. */
int tp_group_join(tp_group *g, rh_err *e);
/* Node 0: lets the followers go and waits for them. Frees every rank. */
void tp_group_free(tp_group *g);

#endif
