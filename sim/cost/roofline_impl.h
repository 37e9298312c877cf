/* roofline_impl.h — what the roofline's files share (cost_roofline.c parses
 * and prices, roofline_forward.c lists a forward's kernels, roofline_comm.c
 * prices its collectives), not for other modules.
 *
 * A forward is counted kernel by kernel as the serving framework launches
 * it (SGLang's model code; COST.md lists every kernel and cites the files):
 * each kernel call gets its FLOPs and bytes, and a time from kernel_time.h
 * with the GPU preset's parameters. A collective is counted by its calls
 * and its buffer and priced by roofline_comm.c. */
#ifndef RH_ROOFLINE_IMPL_H
#define RH_ROOFLINE_IMPL_H

#include <stdbool.h>

#include "sim/cost/cost.h"
#include "sim/cost/roofline.h"

#define AB 2.0   /* bytes of a bf16 activation */

typedef struct cost_roofline {
    cost_model base;
    rl_model model, draft;
    bool has_draft;          /* a draft_model preset was named */
    rl_gpu gpu;
    rl_host host;            /* all zero with "host": "none" */
    uint32_t tp;             /* the file's own size */
    cost_serving serving;    /* the file's own (ep, dp attention, DeepEP, ...) at its own tp */
    bool graph_bs_given;     /* cuda_graph_max_bs from the file, else SGLang's default for the GPU and tp */
    bool fp8;
    double kv_bytes;         /* per element of the KV cache */
    double eff[RL_N_OPS];
    rl_kernel kern[RL_K_N];  /* the GPU preset's kernel parameters, or the pure roofline's */
    double latency_s;
} cost_roofline;

/* How a forward is laid out on g GPUs (sim/cost/COST.md, "Parallel
 * layouts"). Attention runs dp data-parallel groups of atp = g / dp GPUs
 * each (heads split atp ways); the routed experts are spread over the g
 * GPUs (ep) or split like the MLP; the dense MLPs and the LM head are split
 * g ways over every rank's tokens. */
typedef struct rl_layout {
    double g, dp, atp;       /* GPUs; attention groups; GPUs per group */
    double qh, kvh;          /* query and KV heads per GPU (attention) */
    bool ep, deepep, low_latency, tbo;
    double imbalance;        /* busiest expert GPU's routed rows over the mean */
    bool fused_shared;       /* the shared expert runs as one more routed expert (SGLang, ep 1) */
    bool fused_ar_norm;      /* all-reduce, residual add and RMSNorm in one kernel (one node, few tokens) */
    bool dense_dp;           /* under DP attention the dense MLPs run whole on each group's own tokens */
    double redundant;        /* redundant expert copies spread with the experts */
    bool per_node_split;     /* the GPUs span nodes */
} rl_layout;

/* The batch as one rank's forward reads it. */
typedef struct rl_shape {
    double Tp, Sp, Td, Sd;   /* prefill tokens and chunks, decode tokens and sequences (this rank's) */
    double pctx, pairs_p;    /* Σ prefill context; causal (query, key) pairs of the chunks */
    double dctx, pairs_d;    /* Σ decode context; pairs of the decodes' 1 + k queries */
    double T_all;            /* every rank's tokens: what the gathered dense parts and the experts serve */
    double R_all;            /* every rank's rows that want logits */
    double lora_T, lora_k;   /* tokens under a LoRA adapter, distinct adapters (0: none) */
    double lora_r;           /* their rank */
    uint32_t lora_targets;   /* COST_LORA_* */
} rl_shape;

/* One forward's counting and timing into out. */
#define RL_KERNEL_INDEX (2 * RL_MAX_KERNELS)   /* at most half full */

typedef struct rl_counter {
    const cost_roofline *r;
    rl_breakdown *out;
    double hbm;
    double scale;            /* calls multiply by this (2 for each micro-batch of two-batch overlap) */
    double compute_s, comm_s;   /* of the kernels counted: compute and communication seconds */
    /* Where each kernel's slot is (slot + 1, 0: empty), open-addressed: by
     * its name's pointer, and by its name's text for a literal the
     * compiler did not merge. A step prices ~25 kernels ~50 times. */
    uint8_t by_pointer[RL_KERNEL_INDEX], by_text[RL_KERNEL_INDEX];
    uint32_t n_pointers;
} rl_counter;

void rl_counter_init(rl_counter *c, const cost_roofline *r, rl_breakdown *out);

/* Kernels. name is a static string; op the operator it is charged to;
 * kind (rl_grouped) the kernel kind whose parameters price it. */
void rl_gemm(rl_counter *c, const char *name, int op, double calls, double M, double K, double N, double wbytes,
             bool fp8);
void rl_grouped(rl_counter *c, const char *name, int op, int kind, double calls, double rows, double experts,
                double K, double N, double wbytes, bool fp8);
void rl_attention(rl_counter *c, const char *name, int op, double calls, double flops, double bytes);
/* A kernel streaming bytes that walks each token's row of `row` elements. */
void rl_stream(rl_counter *c, const char *name, int op, int kind, double calls, double flops, double bytes,
               double row);
void rl_embedding(rl_counter *c, double rows, double h);
/* A collective of one call's buffer `msg` (bytes per GPU) over `n` GPUs;
 * kind RL_COMM_*. */
enum { RL_COMM_ALLREDUCE, RL_COMM_ALLGATHER, RL_COMM_REDUCE_SCATTER, RL_COMM_DISPATCH, RL_COMM_COMBINE };
void rl_collective(rl_counter *c, const char *name, int op, int kind, double calls, double msg, double n,
                   const rl_layout *l);

/* The forward of a model over Ld dense and Lm MoE layers (plus the MTP
 * module's own kernels when mtp) for shape s laid out as l. */
void rl_count_forward(rl_counter *c, const rl_model *md, double Ld, double Lm, bool mtp, const rl_shape *s,
                      const rl_layout *l);

/* One collective call's time on r's GPU (roofline_comm.c): n GPUs, of
 * which per_node on each node. */
double rl_comm_call_s(const cost_roofline *r, int kind, double msg, double n, const rl_layout *l, double eff);

#endif
