/* tp.c — a node's tensor-parallel ranks (see tp.h). */
#include "engine/model/tp.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/group.h"
#include "kernels/cuda/cuda.h"

typedef struct tp_rank {
    struct tp_group *g;
    uint32_t local, rank;
    runner *r;
    cuda_comm *cc;
    pthread_t th;
    bool thread;
    int rc;                      /* building, then following: 0 or -1 */
    rh_err err;
} tp_rank;

struct tp_group {
    tp_config t;
    const model *m;
    runner_config rc;
    bool cuda;
    uint32_t local_n;            /* ranks on this node */
    cpu_group *cg;               /* the CPU backend's communicator */
    unsigned char id[128];       /* NCCL's group id */
    /* The gate every local rank passes once built (or failed): ranks start
     * following only when all are built, so one failure stops them all. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t arrived;
    tp_rank *ranks;              /* [local_n]; ranks[0] is rank 0 on node 0 */
};

void tp_config_default(tp_config *t)
{
    *t = (tp_config){.tp_size = 1, .nnodes = 1, .node_rank = 0, .dist_init_addr = NULL};
}

int tp_config_active(const tp_config *t)
{
    return t->tp_size > 1 || t->nnodes > 1;
}

uint32_t tp_ranks_per_node(const tp_config *t)
{
    return t->nnodes ? t->tp_size / t->nnodes : t->tp_size;
}

static bool is_cuda(const kern_table *K)
{
    return K && K->name && !strcmp(K->name, "cuda");
}

int tp_config_check(const tp_config *t, const kern_table *K, rh_err *e)
{
    if (t->tp_size < 1) return rh_fail(e, "--tp-size must be at least 1");
    if (t->nnodes < 1) return rh_fail(e, "--nnodes must be at least 1");
    if (t->node_rank >= t->nnodes) return rh_fail(e, "--node-rank %u must be below --nnodes %u", t->node_rank, t->nnodes);
    if (t->tp_size % t->nnodes)
        return rh_fail(e, "--tp-size %u must be a multiple of --nnodes %u (every node holds as many ranks)", t->tp_size,
                       t->nnodes);
    if (t->nnodes > 1) {
        if (!is_cuda(K)) return rh_fail(e, "--nnodes %u: several nodes need --backend cuda (NCCL)", t->nnodes);
        if (!t->dist_init_addr || !strchr(t->dist_init_addr, ':'))
            return rh_fail(e, "--nnodes %u needs --dist-init-addr HOST:PORT, the same on every node", t->nnodes);
    }
    uint32_t per_node = tp_ranks_per_node(t);
    if (is_cuda(K)) {
        int have = cuda_device_count();
        if ((int)per_node > have)
            return rh_fail(e, "--tp-size %u over %u node%s needs %u GPUs on this node; %d found", t->tp_size, t->nnodes,
                           t->nnodes == 1 ? "" : "s", per_node, have);
    } else if (per_node > CPU_GROUP_MAX_RANKS) {
        return rh_fail(e, "--tp-size %u: the CPU backend runs at most %d ranks", t->tp_size, CPU_GROUP_MAX_RANKS);
    }
    return 0;
}

/* This rank's communicator and runner, on this thread (its GPU). */
static int build_rank(tp_rank *k)
{
    tp_group *g = k->g;
    const kern_comm *comm;
    if (g->cuda) {
        if (cuda_use_device((int)k->local, &k->err) < 0) return -1;
        if (!(k->cc = cuda_comm_new(g->id, k->rank, g->t.tp_size, &k->err))) return -1;
        comm = cuda_comm_kern(k->cc);
    } else {
        comm = cpu_group_comm(g->cg, k->rank);
    }
    if (!(k->r = runner_new_tp(g->m, &g->rc, comm, &k->err))) return -1;
    return 0;
}

/* Frees what build_rank made, on the rank's own thread: CUDA memory belongs
 * to the device the thread is bound to. */
static void drop_rank(tp_rank *k)
{
    runner_free(k->r);
    k->r = NULL;
    if (k->cc) cuda_comm_free(k->cc);
    k->cc = NULL;
    if (k->g->cuda) cuda_thread_release();
}

static bool any_failed(const tp_group *g)
{
    for (uint32_t i = 0; i < g->local_n; i++)
        if (g->ranks[i].rc < 0) return true;
    return false;
}

/* Counts n ranks as arrived; with wait, blocks until every local rank has.
 * The mutex also publishes each rank's rc to the others. */
static void gate(tp_group *g, uint32_t n, bool wait)
{
    pthread_mutex_lock(&g->mu);
    g->arrived += n;
    pthread_cond_broadcast(&g->cv);
    while (wait && g->arrived < g->local_n) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void *follower_main(void *arg)
{
    tp_rank *k = arg;
    tp_group *g = k->g;
    k->rc = build_rank(k);
    gate(g, 1, true);
    if (!any_failed(g)) {
        int rc;
        while ((rc = runner_follow(k->r, &k->err)) == 1) {}
        k->rc = rc;
    }
    drop_rank(k);
    return NULL;
}

static void free_group(tp_group *g)
{
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    cpu_group_free(g->cg);
    free(g->ranks);
    free(g);
}

/* The first failing rank's message, naming it. */
static int first_failure(const tp_group *g, rh_err *e)
{
    for (uint32_t i = 0; i < g->local_n; i++)
        if (g->ranks[i].rc < 0)
            return rh_fail(e, "tensor-parallel rank %u of %u: %s", g->ranks[i].rank, g->t.tp_size, g->ranks[i].err.msg);
    return 0;
}

tp_group *tp_group_start(const model *m, const runner_config *rc, const tp_config *t, rh_err *e)
{
    if (tp_config_check(t, rc->kernels, e) < 0) return NULL;
    tp_group *g = calloc(1, sizeof *g);
    if (!g) return rh_fail(e, "out of memory"), NULL;
    g->t = *t;
    g->m = m;
    g->rc = *rc;
    g->cuda = is_cuda(rc->kernels);
    g->local_n = tp_ranks_per_node(t);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (!(g->ranks = calloc(g->local_n, sizeof *g->ranks))) {
        free_group(g);
        return rh_fail(e, "out of memory"), NULL;
    }
    if (g->cuda ? cuda_comm_id(g->id, t->nnodes > 1 ? t->dist_init_addr : NULL, e) < 0
                : !(g->cg = cpu_group_new(t->tp_size, e))) {
        free_group(g);
        return NULL;
    }
    uint32_t first = t->node_rank * g->local_n;
    bool leads = t->node_rank == 0;
    for (uint32_t i = 0; i < g->local_n; i++) g->ranks[i] = (tp_rank){.g = g, .local = i, .rank = first + i};
    /* Followers first: on NCCL rank 0's init waits for them. Ranks whose
     * thread cannot start arrive at the gate failed, so none waits for them. */
    for (uint32_t i = leads ? 1 : 0; i < g->local_n; i++) {
        if (pthread_create(&g->ranks[i].th, NULL, follower_main, &g->ranks[i])) {
            pthread_mutex_lock(&g->mu);
            for (uint32_t j = i; j < g->local_n; j++) {
                g->ranks[j].rc = -1;
                rh_fail(&g->ranks[j].err, "cannot start its thread");
            }
            pthread_mutex_unlock(&g->mu);
            gate(g, g->local_n - i, false);
            break;
        }
        g->ranks[i].thread = true;
    }
    if (!leads) return g;   /* tp_group_join waits for them */
    tp_rank *lead = &g->ranks[0];
    lead->rc = build_rank(lead);
    gate(g, 1, true);
    if (any_failed(g)) {
        for (uint32_t i = 1; i < g->local_n; i++)
            if (g->ranks[i].thread) pthread_join(g->ranks[i].th, NULL);
        first_failure(g, e);
        runner_free(lead->r);
        if (lead->cc) cuda_comm_free(lead->cc);
        free_group(g);
        return NULL;
    }
    return g;
}

runner *tp_group_leader(tp_group *g)
{
    return g && g->t.node_rank == 0 ? g->ranks[0].r : NULL;
}

int tp_group_join(tp_group *g, rh_err *e)
{
    for (uint32_t i = 0; i < g->local_n; i++)
        if (g->ranks[i].thread) {
            pthread_join(g->ranks[i].th, NULL);
            g->ranks[i].thread = false;
        }
    return first_failure(g, e);
}

void tp_group_free(tp_group *g)
{
    if (!g) return;
    tp_rank *lead = g->t.node_rank == 0 ? &g->ranks[0] : NULL;
    if (lead && lead->r) runner_release_followers(lead->r);
    rh_err ignored;
    tp_group_join(g, &ignored);
    if (lead) {
        runner_free(lead->r);
        if (lead->cc) cuda_comm_free(lead->cc);
    }
    free_group(g);
}
