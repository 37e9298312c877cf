/* group.h — a tensor-parallel group inside one process, for the CPU backend.
 *
 * Ranks are threads of this process and share memory, so a collective is two
 * barriers around pointers the ranks publish: all_reduce sums every rank's
 * buffer in rank order (so every rank ends with the same bits) and broadcast
 * copies rank 0's buffer. It plays the part NCCL plays between GPUs, which
 * lets tensor parallel run, and be tested, on any machine. Every rank must
 * call the collectives in the same order, each from its own thread. */
#ifndef RH_KERNELS_CPU_GROUP_H
#define RH_KERNELS_CPU_GROUP_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "util/err.h"

typedef struct cpu_group cpu_group;

/* A group of `size` ranks (1 .. CPU_GROUP_MAX_RANKS). */
#define CPU_GROUP_MAX_RANKS 64
cpu_group *cpu_group_new(uint32_t size, rh_err *e);
/* Rank `rank`'s communicator, valid until cpu_group_free. */
const kern_comm *cpu_group_comm(cpu_group *g, uint32_t rank);
/* After every rank has stopped calling collectives. */
void cpu_group_free(cpu_group *g);

#endif
