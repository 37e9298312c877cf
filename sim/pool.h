/* pool.h — the KV pool a server sizes from its GPU's memory, when
 * --max-total-tokens does not give it.
 *
 * SGLang (--scheduler sglang): the pool is what --mem-fraction-static f of
 * the memory free before the weights load leaves once they have:
 *     rest = f · free − weights          (per GPU)
 *     tokens = rest / KV bytes per token
 * with f's default SGLang's own (server_args: the GPU's memory less a
 * reserve for activations, CUDA graphs and communication, over the memory).
 * vLLM (--scheduler vllm): --gpu-memory-utilization u of the whole memory,
 * less the weights and the peak of a profile forward at the token budget:
 *     rest = u · memory − weights − activations − non-torch memory
 * Under data-parallel attention every GPU keeps its own requests' KV, so the
 * pool is the GPUs' together. A model that leaves nothing is refused with
 * the numbers. */
#ifndef RH_SIM_POOL_H
#define RH_SIM_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/core.h"
#include "sim/cost/cost.h"
#include "util/err.h"

typedef struct sim_pool_opts {
    double mem_fraction_static;     /* --mem-fraction-static; 0: SGLang's default for the GPU */
    double gpu_memory_utilization;  /* --gpu-memory-utilization; 0: vLLM's default 0.9 */
    bool speculative;               /* drafting with the model's MTP module or a draft model */
} sim_pool_opts;

typedef struct sim_pool {
    uint64_t tokens;                /* the pool, a multiple of the page size */
    double fraction;                /* f or u as used */
    double free_bytes, weight_bytes, reserve_bytes, kv_bytes;   /* per GPU: what the sizing saw */
    double kv_bytes_per_token;      /* per GPU, the drafter's included when speculative */
    char how[256];                  /* one line saying so, for the command's output */
} sim_pool;

/* SGLang's default --mem-fraction-static for a GPU of gpu_bytes (v0.5: the
 * memory less max(512 MB + 1.5 · max(chunk, 2048) MB... , 10 GB on GPUs
 * over 60 GB) over the memory); see pool.c. */
double sim_sglang_mem_fraction(double gpu_bytes, uint32_t tp, int32_t chunked_prefill_size, bool speculative);

/* Sizes the pool of mem's deployment under core's scheduler preset. -1 with
 * the numbers when the weights leave no room. */
int sim_pool_size(const cost_memory *mem, const core_config *core, const sim_pool_opts *o, sim_pool *out,
                  rh_err *e);

#endif
