/* pool.c — sizing the KV pool from GPU memory (see pool.h).
 *
 * The constants are the servers' own rules, restated:
 *   SGLang v0.5 (server_args, _handle_gpu_memory_settings): reserve
 *   512 MB + 1.5 MB per token of max(chunked prefill, 2048) + 2 MB per
 *   CUDA-graph batch size + 1 GB per 8 ranks, at least 10 GB on GPUs over
 *   60 GB, 2 GB more when speculating; f = (memory − reserve) / memory,
 *   in MiB, rounded to 3 digits. The pool is then f · free − weights
 *   (profile_max_num_token: the free memory after the weights load less
 *   (1 − f) of it before), per GPU, divided by the KV bytes per token.
 *   vLLM (determine_available_memory): u · memory less everything a
 *   profile run holds at its peak, the weights included.
 * "free" is the memory less the CUDA context and communicators, taken as
 * 1 GiB (what a process holds before it loads anything). Sizes in the
 * messages are GiB, as the devices report them. */
#include "sim/pool.h"

#include "sim/cost/roofline.h"

#include <math.h>
#include <stdio.h>

#define GIB 1073741824.0
#define MIB 1048576.0
#define CONTEXT_BYTES GIB

/* SGLang's CUDA-graph batch-size bound by GPU memory and tp: the reserve
 * grows with it. */
static double cuda_graph_max_bs(double mib, uint32_t tp)
{
    return rl_sglang_cuda_graph_max_bs(mib * MIB, tp);
}

double sim_sglang_mem_fraction(double gpu_bytes, uint32_t tp, int32_t chunked_prefill_size, bool speculative)
{
    double mib = gpu_bytes / MIB;
    double chunk = chunked_prefill_size > 2048 ? chunked_prefill_size : 2048;
    double reserved = 512 + chunk * 1.5 + cuda_graph_max_bs(mib, tp) * 2 + tp / 8.0 * 1024;
    if (mib > 60 * 1024 && reserved < 10240) reserved = 10240;
    if (speculative) reserved += 2048;
    return round((mib - reserved) / mib * 1000) / 1000;
}

/* vLLM's profile run at the token budget: every layer's activations of
 * one forward (the widest, the MLP's gate and up outputs, with the hidden
 * states around them) in bf16, and the sampled rows' logits in fp32. */
static double vllm_activations(const cost_memory *m, const core_config *c)
{
    double tokens = c->chunked_prefill_size > 0 ? (double)c->chunked_prefill_size : (double)c->max_prefill_tokens;
    return tokens * (4.0 * m->hidden + 3.0 * m->intermediate_per_gpu) * 2 + (double)c->max_running_requests * m->vocab * 4;
}

int sim_pool_size(const cost_memory *mem, const core_config *core, const sim_pool_opts *o, sim_pool *out,
                  rh_err *e)
{
    *out = (sim_pool){0};
    double total = mem->gpu_bytes;
    double weights = mem->weight_bytes + (o->speculative ? mem->draft_weight_bytes : 0);
    double cell = mem->kv_bytes_per_token + (o->speculative ? mem->draft_kv_bytes_per_token : 0);
    double free = total - CONTEXT_BYTES, rest;
    const char *flag;
    if (core->preset == CORE_PRESET_VLLM) {
        flag = "--gpu-memory-utilization";
        out->fraction = o->gpu_memory_utilization > 0 ? o->gpu_memory_utilization : 0.9;
        out->reserve_bytes = vllm_activations(mem, core) + CONTEXT_BYTES / 2;
        rest = out->fraction * total - weights - out->reserve_bytes;
    } else {
        flag = "--mem-fraction-static";
        out->fraction = o->mem_fraction_static > 0
                            ? o->mem_fraction_static
                            : sim_sglang_mem_fraction(total, mem->gpus, core->chunked_prefill_size, o->speculative);
        out->reserve_bytes = (1 - out->fraction) * free;
        rest = out->fraction * free - weights;
    }
    out->free_bytes = free;
    out->weight_bytes = weights;
    out->kv_bytes = rest;
    out->kv_bytes_per_token = cell;
    if (!(rest > 0))
        return rh_fail(e, "%s does not fit %u x %s: its weights take %.1f GiB per GPU of %.1f GiB, and %s %.3f "
                       "leaves %.1f GiB for the KV cache (more GPUs, fp8 weights, or a higher %s)",
                       mem->model_name, mem->gpus, mem->gpu_name, weights / GIB, total / GIB, flag, out->fraction,
                       rest / GIB, flag);
    double tokens = floor(rest / cell) * (mem->kv_per_rank ? mem->gpus : 1);
    uint64_t ps = core->page_size ? core->page_size : 1;
    out->tokens = (uint64_t)(tokens / ps) * ps;
    if (out->tokens < ps)
        return rh_fail(e, "%s on %u x %s: %.2f GiB left for the KV cache hold less than a page of %llu tokens "
                       "(%.0f bytes a token)", mem->model_name, mem->gpus, mem->gpu_name, rest / GIB,
                       (unsigned long long)ps, cell);
    snprintf(out->how, sizeof out->how,
             "KV pool %llu tokens: %s %.3f of %.1f GiB per GPU, less %.1f GiB of weights, at %.0f bytes a token%s",
             (unsigned long long)out->tokens, flag, out->fraction, total / GIB, weights / GIB, cell,
             mem->kv_per_rank ? " on each GPU for its own requests" : "");
    return 0;
}
