/* peft.h — LoRA adapters in PEFT's format: loading, writing seeded ones,
 * and merging one into a copy of the base weights.
 *
 * A PEFT adapter is a folder: adapter_config.json (r, lora_alpha,
 * target_modules, use_rslora, ...) and adapter_model.safetensors holding,
 * for each target module m of each layer N,
 *   base_model.model.model.layers.N.self_attn.{q,k,v,o}_proj.lora_A.weight  [r][in]
 *   base_model.model.model.layers.N.mlp.{gate,up,down}_proj.lora_B.weight    [out][r]
 * (nn.Linear's layout). A module computes y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ with
 * s = lora_alpha / r (lora_alpha / sqrt(r) under use_rslora); the loader
 * folds s into B, as Punica's and SGLang's kernels take it, so the forward
 * is two plain GEMMs a module. What serving cannot do is refused with one
 * message naming the file and field: DoRA, modules_to_save, biases,
 * fan_in_fan_out, per-module rank or alpha patterns, a shape that does not
 * match the base model, a rank above the one allowed. */
#ifndef RH_MODEL_PEFT_H
#define RH_MODEL_PEFT_H

#include <stdint.h>

#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "util/err.h"

enum lora_module { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_N_MODULES };
#define LORA_ALL_MODULES ((1u << LORA_N_MODULES) - 1)

/* "q_proj", ... "down_proj" */
const char *lora_module_name(int m);
/* "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" (commas or
 * spaces; "all" or "all-linear" for every one) into 1 << lora_module bits;
 * -1 naming the module it does not know. */
int lora_targets_parse(const char *list, uint32_t *bits, rh_err *e);
/* A module's input and output widths in the base model. */
void lora_module_dims(const model_config *c, int m, uint32_t *in, uint32_t *out);

typedef struct model_lora {
    char name[128];
    char path[512];
    uint32_t rank;
    uint32_t targets;           /* 1 << enum lora_module */
    float scale;                /* s, already folded into every B */
    /* per layer l and module m, [l * LORA_N_MODULES + m]: A [rank][in] and
     * B [out][rank] (scaled), host memory; NULL for a module not targeted */
    float **a, **b;
    uint32_t n_layers;
    float *arena;
} model_lora;

/* Loads the adapter in folder `dir` for base model c; max_rank 0: any. */
model_lora *model_lora_load(const char *dir, const char *name, const model_config *c, uint32_t max_rank, rh_err *e);
void model_lora_free(model_lora *l);
/* Writes a PEFT folder with seeded A and B (both nonzero, so the adapter
 * changes the output) for base model c: rank r, lora_alpha alpha, the
 * modules of `targets`, tensors stored as dtype. */
int model_lora_save_seeded(const char *dir, const model_config *c, uint32_t rank, double alpha, uint32_t targets,
                     uint64_t seed, st_dtype dtype, rh_err *e);
/* A copy of m with the adapter merged: W' = W + B·A (s folded in B). */
model *model_lora_merged(const model *m, const model_lora *l, rh_err *e);

#endif
