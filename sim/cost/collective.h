/* collective.h — NCCL collectives priced as latency plus bytes over the
 * link that bounds them, with a GPU preset's measured links (rl_links).
 *
 * n GPUs take part, per_node of them on each node; q = min(per_node,
 * nvlink_domain) share an NVLink fabric, so the call spans m = n / q
 * domains. For a buffer of S bytes per GPU:
 *   send/recv   t = a_p2p + S / B_nvl               (one domain)
 *               t = a_p2p + λ + S / B_slow          (across)
 *   all-reduce  a ring of 2(n-1) steps moving 2(n-1)/n · S per GPU:
 *               t = a_ar + 2(n-1)·β + [m > 1]·2λ + 2(n-1)/n · S / B_ring
 *               B_ring = η_nvl · B_nvl                       (m = 1)
 *                      = η_slow · min(B_nvl, B_slow · min(q, k))   (m > 1:
 *                        the slowest hop bounds the ring, k slow paths at once)
 *   all-gather  the all-reduce's second half: (n-1) steps, (n-1)/n · S
 *   all-to-all  each GPU sends (n-1)/n of S, to its domain over NVLink and
 *               to the others over the slow link: a_p2p (+ λ) + the slower
 * `eff` scales the bandwidth (a cost file's efficiency for the operator).
 * Fitted to NCCL's times on H100 and A100 (the presets' "collectives"
 * objects say where from; tests/test_cost_collective.c holds them to the
 * measurements). */
#ifndef RH_COST_COLLECTIVE_H
#define RH_COST_COLLECTIVE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/cost/roofline.h"

double rl_send_recv_s(const rl_gpu *g, bool across, double bytes, double eff);
double rl_allreduce_s(const rl_gpu *g, uint32_t n, uint32_t per_node, double bytes, double eff);
double rl_allgather_s(const rl_gpu *g, uint32_t n, uint32_t per_node, double bytes, double eff);
double rl_alltoall_s(const rl_gpu *g, uint32_t n, uint32_t per_node, double bytes, double eff);
/* The custom all-reduce of a buffer inside one NVLink domain:
 * latency + bytes / bandwidth (INFINITY without one in the preset). */
double rl_custom_allreduce_s(const rl_gpu *g, double bytes, double eff);
/* DeepEP's dispatch or combine of `bytes` sent per GPU to n GPUs, per_node
 * on each node: latency + the slower of the NVLink share over its
 * bandwidth and the RDMA share over its (normal or low-latency kernels). */
double rl_deepep_s(const rl_gpu *g, bool low_latency, uint32_t n, uint32_t per_node, double bytes, double eff);
/* The same with the bytes over each link given: nvlink_bytes inside the
 * node, rdma_bytes to other nodes (crossing adds the slow hop's latency
 * where the preset gives no DeepEP latency). */
double rl_deepep_split_s(const rl_gpu *g, bool low_latency, double nvlink_bytes, double rdma_bytes, double eff);

#endif
