/* roofline.h — the roofline cost model: a transformer forward priced
 * kernel by kernel as a serving framework runs it, on a GPU preset.
 *
 * A cost file {"kind": "roofline", "model": ..., "gpu": ..., "tp": N, ...}
 * (sim/cost/COST.md) names a model preset, a GPU preset and a host preset
 * (data files found on the preset search path, cost_presets.h). A forward
 * is the list of kernels SGLang's model code launches for the family
 * (roofline_forward.c: dense GQA, Mixtral-style MoE, DeepSeek's MLA and
 * MoE with FP8 and DeepEP, the MTP module), each with its FLOPs and bytes
 * per GPU and a time as real kernels run (kernel_time.h, the GPU's fitted
 * parameters, scaled by the cost file's per-operator efficiency), the
 * collectives on the GPU's measured links (collective.h), and the least
 * time a tiny kernel takes. A step adds the host's time (rl_host): eager
 * launches where the forward is not a CUDA graph, the per-step time on the
 * critical path, and the scheduling an overlap scheduler hides (cost.h's
 * cost_parts).
 *
 * Parallelism over tp GPUs as cost.h's cost_serving says: tensor parallel
 * by default; experts spread (ep); data-parallel attention (each request on
 * one attention group, the slowest group's forward the step's, the MLPs
 * and experts fed every group's tokens); DeepEP's dispatch and combine;
 * two-batch overlap. Routing is uniform, the busiest expert GPU's load the
 * statistical maximum unless the serving says otherwise. */
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
    uint32_t n_group, topk_group;   /* group-limited routing (DeepSeek-V3: 8, 4); 0: none */
    uint32_t mtp_layers;        /* multi-token-prediction modules (DeepSeek's draft) */
    uint32_t max_position;      /* max_position_embeddings: the context length; 0 unknown */
    bool fp8_checkpoint;        /* quantization_config.quant_method "fp8": the weights are published in FP8 */
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
    /* The serving frameworks' custom all-reduce inside one NVLink domain
     * (one kernel over peer memory): latency + buffer / bandwidth; a
     * framework takes it or NCCL's, whichever is faster. 0: none. */
    double custom_allreduce_latency_s, custom_allreduce_Bps;
    /* DeepEP's dispatch and combine (normal: prefill; low latency: decode):
     * a latency per call and the bandwidth of the share sent inside the
     * NVLink domain and of the share sent over RDMA; 0: the links'. */
    double ep_normal_latency_s, ep_normal_nvlink_Bps, ep_normal_rdma_Bps;
    double ep_ll_latency_s, ep_ll_nvlink_Bps, ep_ll_rdma_Bps;
} rl_links;

/* A GPU preset. Bandwidths per GPU, each direction. fp8_tflops 0: no FP8. */
typedef struct rl_gpu {
    char name[64];
    double memory_GB, hbm_GBps, bf16_tflops, fp8_tflops, nvlink_GBps, ib_GBps;
    uint32_t gpus_per_node;
    uint32_t sms;             /* streaming multiprocessors (0: not given): DeepEP's kernels take some */
    double host_link_GBps;    /* host memory to this GPU, achieved (pinned, copy engine); 0: not given */
    rl_links links;
    rl_kernel kern[RL_K_N];   /* the "kernels" object (kernel_time.h); the pure roofline's without one */
} rl_gpu;

/* How a serving framework runs a forward from the host (a "hosts"
 * preset: sglang.json, vllm.json; COST.md gives each number's source).
 * Every kernel takes at least kernel_min_s on the GPU, however little it
 * does (the next kernel's start included). A decode batch of at most the
 * CUDA-graph size runs as one graph replay; any other forward is launched
 * kernel by kernel, eager_launch_s of host time each, and the GPU waits
 * where the launches fall behind its kernels. Every step
 * costs step_exposed_s on the critical path; the scheduling (schedule_s,
 * per request, per new token) is what an overlap scheduler hides under the
 * previous step's GPU time. */
typedef struct rl_host {
    char name[64];
    double kernel_min_s, eager_launch_s, step_exposed_s;
    double schedule_s, per_request_s, per_token_s;
    double arrival_s;           /* a request's way to its first token outside the steps (cost.h's overheads.arrival_s) */
    bool prefill_graph;         /* prefill and extend forwards run as graphs too */
} rl_host;

/* What one forward costs, by operator (the "efficiency" keys: several
 * kernels may share one) and by kernel (what `rehearse cost show` lists). */
enum rl_op {
    RL_EMBED, RL_NORM, RL_QKV_PROJ, RL_MLA_DOWN_PROJ, RL_MLA_UP_PROJ, RL_ATTN_PREFILL, RL_ATTN_DECODE,
    RL_O_PROJ, RL_MLP, RL_MOE_GATE, RL_MOE_EXPERTS, RL_SHARED_EXPERT, RL_MTP_PROJ, RL_LM_HEAD,
    RL_ROPE, RL_ACT, RL_ALLREDUCE, RL_ALLTOALL, RL_LOGITS_GATHER,
    RL_QUANT,       /* FP8 per-token-group quantisation before each FP8 GEMM */
    RL_KV_STORE,    /* writing the new tokens' K and V (or MLA latent) into the cache */
    RL_COPY,        /* layout copies the model code makes (q.contiguous, q_pe into q, concat_k) */
    RL_MOE_ROUTE,   /* top-k selection, the expert sort (moe_align), the weighted sum of expert outputs */
    RL_ATTN_META,   /* attention's per-layer scheduling kernels (prepare, split-KV combine) */
    RL_SAMPLE,      /* sampling the next token (outside a CUDA graph) */
    RL_LORA,        /* LoRA's segmented shrink and expand GEMMs (SGLang's sgemm_lora_a, qkv_lora_b, ...) */
    RL_LORA_LOAD,   /* adapter weights copied from host memory into a GPU slot */
    RL_N_OPS
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

/* One kernel of the forward as the serving framework launches it, summed
 * over its calls (every layer's, both micro-batches'). */
#define RL_MAX_KERNELS 64
typedef struct rl_kernel_cost {
    const char *name;     /* "qkv_a_proj", "moe_w13", "allreduce", ... (static) */
    int op;               /* the operator it is charged to */
    double calls, flops, bytes, seconds;
    double compute_s, memory_s;
    const char *bound;
} rl_kernel_cost;

typedef struct rl_breakdown {
    rl_op_cost op[RL_N_OPS];
    rl_kernel_cost k[RL_MAX_KERNELS];   /* in the order the forward first launches them */
    int nk;
    double kernels_s;     /* Σ kernel seconds (collectives included) */
    double launches;      /* kernels one forward launches, collectives included */
    double gaps_s;        /* what the kernels shorter than the host's kernel_min_s take beyond their own time */
    bool graph;           /* the forward is one CUDA-graph replay */
    double overlap_saved_s;   /* two-batch overlap: communication hidden under the other micro-batch */
    double sm_share_s;        /* ... and what the kernels it hides under lose to the SMs DeepEP's normal kernels take */
    double total_s;       /* the forward's GPU time: kernels + gaps - what two-batch overlap hides + its SM share */
} rl_breakdown;

/* Loads a preset by name (search path) or by file path. */
int rl_model_load(const char *name, rl_model *m, rh_err *e);
int rl_gpu_load(const char *name, rl_gpu *g, rh_err *e);
int rl_host_load(const char *name, rl_host *h, rh_err *e);
/* SGLang's default --cuda-graph-max-bs for a GPU of this much memory and tp
 * (server_args' _handle_gpu_memory_settings). */
uint32_t rl_sglang_cuda_graph_max_bs(double gpu_bytes, uint32_t tp);

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
/* One draft forward of n sequences carrying `tokens` tokens (n: one each;
 * more: an extend pass over each sequence's verified tokens) at summed
 * context: the MTP module, or the draft model of the cost file. */
int roofline_draft_breakdown(const cost_model *m, uint32_t n, uint32_t tokens, uint64_t context, uint32_t tp,
                             rl_breakdown *out, rh_err *e);
/* The presets a roofline model was built from (NULL if m is another kind). */
const rl_model *roofline_model(const cost_model *m);
const rl_gpu *roofline_gpu(const cost_model *m);
/* Bytes of one LoRA adapter of rank r on the modules of `targets`
 * (COST_LORA_*) that one of g GPUs holds (column-parallel modules: A whole,
 * B split; row-parallel: A split, B whole), every layer, bf16; *copies:
 * the host-to-GPU copies SGLang makes to load it (A and B of qkv, o,
 * gate_up and down per layer, those present). */
double rl_lora_bytes(const rl_model *md, double g, double r, uint32_t targets, double *copies);
/* The file's own tensor-parallel size and whether experts are spread (ep). */
uint32_t roofline_tp(const cost_model *m, bool *ep);

#endif
