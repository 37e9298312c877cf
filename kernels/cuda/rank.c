/* rank.c — a tensor-parallel rank from SGLang's multi-node layout (plain
 * arithmetic, built with or without CUDA). */
#include "kernels/cuda/cuda.h"

int cuda_tp_rank(uint32_t nnodes, uint32_t node_rank, uint32_t gpus_per_node, uint32_t local, uint32_t *rank,
                 uint32_t *size, rh_err *e)
{
    if (!nnodes || !gpus_per_node) return rh_fail(e, "--nnodes and the GPUs per node must be at least 1");
    if (node_rank >= nnodes) return rh_fail(e, "--node-rank %u must be below --nnodes %u", node_rank, nnodes);
    if (local >= gpus_per_node) return rh_fail(e, "local GPU %u: a node has %u", local, gpus_per_node);
    if ((uint64_t)nnodes * gpus_per_node > 4096)
        return rh_fail(e, "%u nodes x %u GPUs is larger than a group can be (4096)", nnodes, gpus_per_node);
    *size = nnodes * gpus_per_node;
    *rank = node_rank * gpus_per_node + local;
    return 0;
}
