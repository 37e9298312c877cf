/* cost_table.h — the `table` cost kind: per-operator times measured on this
 * machine's kernels (`rehearse calibrate`), interpolated.
 *
 * A step is priced from the same operator decomposition the engine's forward
 * pass runs (engine/model/forward.c): per layer two RMSNorms, the Q, K, V, O,
 * gate, up and down GEMMs over all the batch's rows, RoPE, the KV write,
 * attention per prefill chunk and per decode, SiLU·mul (and two all-reduces
 * under tensor parallel); per step the embedding, the RoPE angles, the LM
 * head over the rows that want logits, sampling, and the CPU overhead of
 * batch preparation and scheduling. Each operator is a grid of measured
 * times over one or two axes (sim/cost/COST.md lists them). Between grid points a
 * time is interpolated piecewise-linearly (in the operator's natural scaling:
 * prefill attention along new tokens in causal pairs); beyond the grid it
 * follows a least-squares line through the last points, never a constant.
 *
 * The model reads only a batch's aggregates, so it prices step records as
 * well as simulated batches (see COST.md for how unknown chunk shapes are
 * bounded). This header is the one description of the file's operators:
 * sim/calibrate writes what it lists, cost_table.c reads it. */
#ifndef RH_COST_TABLE_H
#define RH_COST_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/cost/cost.h"

#define COST_TABLE_VERSION 1

enum cost_table_op {
    CT_EMBEDDING = 0,    /* step:  tokens */
    CT_ROPE_ANGLES,      /* step:  tokens */
    CT_RMSNORM,          /* layer: tokens, 2 calls (attention and MLP norms) */
    CT_Q_PROJ,           /* layer: tokens */
    CT_KV_PROJ,          /* layer: tokens, 2 calls (K and V) */
    CT_ROPE,             /* layer: tokens (Q and K rotated: one measurement of both calls) */
    CT_KV_WRITE,         /* layer: tokens */
    CT_PREFILL_ATTN,     /* layer: one chunk of new_tokens at context */
    CT_DECODE_ATTN,      /* layer: seqs decodes whose contexts sum to context */
    CT_O_PROJ,           /* layer: tokens (accumulates onto the residual) */
    CT_GATE_UP_PROJ,     /* layer: tokens, 2 calls (gate and up) */
    CT_SILU_MUL,         /* layer: tokens */
    CT_DOWN_PROJ,        /* layer: tokens (accumulates onto the residual) */
    CT_ALLREDUCE,        /* layer: bytes, 2 calls under tensor parallel; optional */
    CT_LM_HEAD,          /* step:  rows wanting logits (final norm + vocabulary GEMM) */
    CT_SAMPLE,           /* step:  rows sampled */
    CT_BATCH_PREP,       /* step:  seqs (runner time outside the kernels) */
    CT_SCHEDULE,         /* step:  seqs (scheduler core: core_schedule) */
    /* Whole forward passes (runner_forward, every kernel and the runner's
     * own work, no sampling or scheduling), optional: where they are, a
     * step's kernel sum is scaled by whole / kernel sum at its shape, so
     * what isolated kernels miss (caches warm or cold between operators,
     * the runner's layout) is priced as it ran. */
    CT_STEP_PREFILL,     /* step:  one chunk of new_tokens at context */
    CT_STEP_DECODE,      /* step:  seqs decodes at context each */
    /* LoRA (optional; `rehearse calibrate --lora-rank R`): the shrink and
     * expand GEMMs of all seven modules of one layer, tokens split into
     * `adapters` segments of adapters of rank R (the file's lora_rank);
     * and loading adapters into the backend's memory. */
    CT_LORA,             /* layer: tokens under adapters, distinct adapters */
    CT_LORA_LOAD,        /* step:  adapters loaded */
    /* The host KV tier (optional): tokens' K and V of every layer copied
     * between the KV pool and host memory, one way, as the engine copies
     * them before a forward (loads, write-backs and backups alike). */
    CT_KV_COPY,          /* step:  tokens copied */
    CT_N_OPS
};

typedef struct cost_table_op_info {
    const char *name;        /* key in the file's "operators" object */
    bool per_layer;          /* priced once per layer, else once per step */
    uint32_t calls;          /* kernel calls per layer (or step) the measured time is for */
    uint32_t dims;           /* 1 or 2 */
    const char *axes[2];     /* axis names, in the order of the seconds array */
    bool optional;
} cost_table_op_info;

extern const cost_table_op_info cost_table_ops[CT_N_OPS];

/* One operator's measured or interpolated time per call at (x, y) (y is
 * ignored for one-axis operators); 0 for an optional operator the file does
 * not have; NAN when m is not a table model. For tests, benchmarks and
 * `cost show`. */
double cost_table_op_time(const cost_model *m, int op, double x, double y);

/* The layer count the file was calibrated for (0 when m is not a table
 * model). */
uint32_t cost_table_layers(const cost_model *m);

#endif
