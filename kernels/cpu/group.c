/* group.c — an in-process tensor-parallel group (see group.h). */
#include "kernels/cpu/group.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct cpu_rank {
    cpu_group *g;
    kern_comm comm;
    float *sum;          /* this rank's result, copied over x after the second barrier */
    size_t sum_cap;
} cpu_rank;

struct cpu_group {
    uint32_t size;
    pthread_barrier_t bar;
    const float **bufs;  /* what each rank published for the collective under way */
    cpu_rank *ranks;
};

/* Each rank sums all buffers itself, in rank order: no rank writes another's
 * memory, and the result is bit-identical everywhere. The second barrier
 * keeps every buffer unchanged until the last rank has read it. */
static void all_reduce(void *ctx, float *x, size_t n)
{
    cpu_rank *r = ctx;
    cpu_group *g = r->g;
    if (g->size == 1 || !n) return;
    if (r->sum_cap < n) {
        float *p = realloc(r->sum, n * sizeof *p);
        if (!p) abort();   /* a collective cannot fail half-way without hanging its peers */
        r->sum = p;
        r->sum_cap = n;
    }
    g->bufs[r->comm.rank] = x;
    pthread_barrier_wait(&g->bar);
    for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (uint32_t k = 0; k < g->size; k++) s += g->bufs[k][i];
        r->sum[i] = s;
    }
    pthread_barrier_wait(&g->bar);
    memcpy(x, r->sum, n * sizeof *x);
}

static void broadcast(void *ctx, void *buf, size_t bytes)
{
    cpu_rank *r = ctx;
    cpu_group *g = r->g;
    if (g->size == 1) return;
    g->bufs[r->comm.rank] = buf;
    pthread_barrier_wait(&g->bar);
    if (r->comm.rank != 0 && bytes) memcpy(buf, g->bufs[0], bytes);
    pthread_barrier_wait(&g->bar);
}

cpu_group *cpu_group_new(uint32_t size, rh_err *e)
{
    if (size < 1 || size > CPU_GROUP_MAX_RANKS)
        return rh_fail(e, "a CPU tensor-parallel group has 1 to %d ranks (asked for %u)", CPU_GROUP_MAX_RANKS, size),
               NULL;
    cpu_group *g = calloc(1, sizeof *g);
    if (!g || !(g->bufs = calloc(size, sizeof *g->bufs)) || !(g->ranks = calloc(size, sizeof *g->ranks))) {
        if (g) free(g->bufs);
        free(g);
        return rh_fail(e, "out of memory"), NULL;
    }
    g->size = size;
    pthread_barrier_init(&g->bar, NULL, size);
    for (uint32_t k = 0; k < size; k++) {
        g->ranks[k].g = g;
        g->ranks[k].comm = (kern_comm){k, size, &g->ranks[k], all_reduce, broadcast};
    }
    return g;
}

const kern_comm *cpu_group_comm(cpu_group *g, uint32_t rank)
{
    return rank < g->size ? &g->ranks[rank].comm : NULL;
}

void cpu_group_free(cpu_group *g)
{
    if (!g) return;
    for (uint32_t k = 0; k < g->size; k++) free(g->ranks[k].sum);
    pthread_barrier_destroy(&g->bar);
    free(g->ranks);
    free(g->bufs);
    free(g);
}
