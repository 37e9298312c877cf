/* roofline.h — the roofline cost model: FLOPs and bytes of every operator of
 * a transformer forward pass, per GPU, priced on a GPU preset.
 *
 * A cost file {"kind": "roofline", "model": ..., "gpu": ..., "tp": N, ...}
 * (sim/cost/COST.md) names a model preset and a GPU preset (data files found on
 * the preset search path, cost_presets.h). For a batch, each operator —
 * embedding, norms, QKV (or MLA) projections, prefill and decode attention,
 * output projection, dense MLP, MoE router, routed and shared experts, LM
 * head, and the collectives — gets FLOPs and HBM bytes summed over the
 * layers, and a time
 *     compute/memory op: max(flops / (peak · eff), bytes / (hbm · eff))
 *     collective:        calls · (the call's time on the GPU's measured links,
 *                        sim/cost/collective.h, bandwidth scaled by eff)
 *                        + calls · the cost file's collective_latency_s
 * The forward is the sum over operators (kernels run one after another);
 * the overheads of cost.h (the step's CPU time, set here also by the legacy
 * step_overhead_s, and each forward pass's launches) are added once each
 * by cost_step_time. eff is the operator's efficiency factor from the
 * cost file (1 when absent: the pure roofline), which a calibration sets.
 *
 * Parallelism over tp GPUs: with ep 1 everything is tensor-parallel (heads,
 * MLP and expert columns split; two all-reduces per layer plus one for the
 * vocabulary-parallel embedding; the LM head's logits all-gathered). With
 * ep = tp, DeepSeek's layout: attention and dense parts data-parallel (each
 * request on one GPU, which holds every non-expert weight: a batch's
 * sequences are placed on the least loaded rank, largest first, and the
 * step is the slowest rank's; a batch known only by its aggregates, as a
 * step record, is spread evenly), whole experts spread over the GPUs and
 * serving all the batch's tokens, moved by all-to-all dispatch and combine.
 * Routing is taken as uniform. A collective that leaves the node
 * runs at the InfiniBand bandwidth (the slowest link of the ring); an
 * all-to-all splits its traffic between NVLink and InfiniBand by the share
 * of peers on and off the node. */
#ifndef RH_ROOFLINE_H
#define RH_ROOFLINE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/cost/cost.h"
#include "sim/cost/kernel_time.h"
#include "util/err.h"

/* A model preset: the numbers of a Hugging Face config.json (same keys). */
typedef struct rl_model {
    char name[64];
    uint32_t hidden, layers, heads, kv_heads, head_dim, intermediate, vocab;
    bool tie_embeddings, qkv_bias;
    /* MLA attention (DeepSeek) when mla; q_lora_rank 0: no query compression */
    bool mla;
    uint32_t q_lora_rank, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim;
    /* mixture of experts when moe: the first dense_layers layers are dense */
    bool moe;
    uint32_t experts, top_k, moe_intermediate, shared_experts, dense_layers;
    uint32_t mtp_layers;        /* multi-token-prediction modules (DeepSeek's draft) */
    uint32_t max_position;      /* max_position_embeddings: the context length; 0 unknown */
} rl_model;

/* How collectives run on a GPU's links (sim/cost/collective.h): a
 * preset's "collectives" object, measured; without one the nominal
 * bandwidths with no latency (the pure roofline). */
typedef struct rl_links {
    double allreduce_latency_s;     /* per all-reduce or all-gather call */
    double send_recv_latency_s;     /* per send/recv (and all-to-all) call */
    double ring_step_latency_s;     /* per step of a ring over NVLink: 2(n-1) in an all-reduce */
    double slow_hop_latency_s;      /* added where a call leaves the NVLink domain (InfiniBand, PCIe) */
    double nvlink_Bps, slow_Bps;    /* achieved, bytes/s per GPU each direction: inside the domain, between */
    double allreduce_nvlink_eff, allreduce_slow_eff;   /* an all-reduce's bus bandwidth as a share of those */
    double slow_links;              /* slow paths one domain drives at once (NICs) */
    uint32_t nvlink_domain;         /* GPUs one NVLink fabric joins: gpus_per_node, or 2 for bridged pairs */
} rl_links;

/* A GPU preset. Bandwidths per GPU, each direction. fp8_tflops 0: no FP8. */
typedef struct rl_gpu {
    char name[64];
    double memory_GB, hbm_GBps, bf16_tflops, fp8_tflops, nvlink_GBps, ib_GBps;
    uint32_t gpus_per_node;
    rl_links links;
    rl_kernel kern[RL_K_N];   /* the "kernels" object (kernel_time.h); the pure roofline's without one */
} rl_gpu;

enum rl_op {
    RL_EMBED, RL_NORM, RL_QKV_PROJ, RL_MLA_DOWN_PROJ, RL_MLA_UP_PROJ, RL_ATTN_PREFILL, RL_ATTN_DECODE,
    RL_O_PROJ, RL_MLP, RL_MOE_GATE, RL_MOE_EXPERTS, RL_SHARED_EXPERT, RL_MTP_PROJ, RL_LM_HEAD,
    RL_ROPE, RL_ACT, RL_ALLREDUCE, RL_ALLTOALL, RL_LOGITS_GATHER, RL_N_OPS
};
/* "embed", "norm", "qkv_proj", ...: also the keys of the "efficiency" object. */
const char *rl_op_name(int op);

typedef struct rl_op_cost {
    double flops, bytes;  /* per GPU, summed over layers; bytes on the wire for collectives */
    double calls;         /* kernel launches or collectives */
    double msg;           /* collectives: one call's buffer per GPU, bytes (collective.h's S) */
    double compute_s, memory_s;   /* of seconds, the compute-rate and memory-rate parts (for the bound) */
    double seconds;
    const char *bound;    /* "compute", "memory", "link", or "" when unused */
} rl_op_cost;

typedef struct rl_breakdown {
    rl_op_cost op[RL_N_OPS];
    double total_s;       /* Σ op seconds: one forward pass, without the overheads of cost.h */
} rl_breakdown;

/* Loads a preset by name (search path) or by file path. */
int rl_model_load(const char *name, rl_model *m, rh_err *e);
int rl_gpu_load(const char *name, rl_gpu *g, rh_err *e);

/* Parameter counts from the config: the main model's total, those one token
 * activates (routed: top_k experts; the embedding excluded, the LM head
 * included), the MTP modules' own (shared embedding and head excluded), and
 * the routed experts' total. */
typedef struct rl_params {
    double total, active, mtp, experts;
} rl_params;
void rl_model_params(const rl_model *m, rl_params *p);

/* The forward pass of a batch (drafting excluded) on a roofline cost model.
 * -1 when m is not a roofline model or cannot run at b->tp. */
int roofline_breakdown(const cost_model *m, const cost_batch *b, rl_breakdown *out, rh_err *e);
/* One draft forward: the MTP module, or the draft model of the cost file. */
int roofline_draft_breakdown(const cost_model *m, uint32_t n, uint64_t context, uint32_t tp,
                             rl_breakdown *out, rh_err *e);
/* The presets a roofline model was built from (NULL if m is another kind). */
const rl_model *roofline_model(const cost_model *m);
const rl_gpu *roofline_gpu(const cost_model *m);
/* The file's own tensor-parallel size and whether experts are spread (ep). */
uint32_t roofline_tp(const cost_model *m, bool *ep);

#endif
