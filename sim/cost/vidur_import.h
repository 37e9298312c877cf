/* vidur_import.h — a `table` cost model (cost_table.h) from Vidur's
 * measured operator times (vidur_profile.h), for a GPU this machine does
 * not have: `rehearse cost import vidur PROFILE --model M -o COST`.
 *
 * The profile's rows at one tensor-parallel size give the per-token
 * operators, each as measured: rmsnorm (the mean of the two norms), q_proj
 * and kv_proj (the fused QKV projection split by output width), rope,
 * o_proj and down_proj (each with one of the layer's two residual adds,
 * which they accumulate onto), gate_up_proj (the fused GEMM, half per
 * call), silu_mul, the embedding. What the profiles do not hold comes from
 * the roofline of the model preset on the GPU preset with its fitted
 * kernels and measured collectives: prefill and decode attention, the LM
 * head, the all-reduce. The KV write, RoPE angles, sampling, batch
 * preparation and scheduling are 0 (priced, if at all, by "overheads"). */
#ifndef RH_COST_VIDUR_IMPORT_H
#define RH_COST_VIDUR_IMPORT_H

#include <jansson.h>
#include <stdint.h>

#include "util/err.h"

/* profile: an mlp.csv, or a directory holding one. gpu: a GPU preset (NULL:
 * from the profile's path, compute/h100/... -> h100-sxm, a100 -> a100-80g).
 * The model preset must have the profile's shapes. A new JSON object, or
 * NULL with a message. */
json_t *vidur_import_table(const char *profile, const char *model, const char *gpu, uint32_t tp, rh_err *e);

#endif
