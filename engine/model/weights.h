/* weights.h — a model: its config and its f32 weights, seeded or loaded.
 *
 * Two sources, one result:
 *   model_new_dummy  deterministic weights from a seed (the same seed gives
 *                    the same bits on every machine), scaled so activations
 *                    stay O(1) through any depth and greedy output varies;
 *   model_load       Hugging Face safetensors (F32, F16, BF16), one file or a
 *                    sharded model.safetensors.index.json. Files are
 *                    memory-mapped; aligned F32 tensors are used in place,
 *                    the rest converted once to F32.
 * Both refuse, before allocating anything, a model whose f32 weights exceed
 * the memory limit (mem_limit bytes, or what the machine has available when
 * 0). Tensor names are those of transformers' Llama/Mistral/Qwen2 models. */
#ifndef RH_MODEL_WEIGHTS_H
#define RH_MODEL_WEIGHTS_H

#include <stdint.h>

#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "kernels/kernels.h"
#include "util/err.h"

typedef struct model_layer {
    const float *attn_norm;                  /* [hidden] */
    const float *wq, *wk, *wv, *wo;          /* [n_heads*hd][hidden], [n_kv*hd][hidden] x2, [hidden][n_heads*hd] */
    const float *bq, *bk, *bv, *bo;          /* biases or NULL */
    const float *ffn_norm;                   /* [hidden] */
    const float *w_gate, *w_up, *w_down;     /* [inter][hidden] x2, [hidden][inter] */
    const float *b_gate, *b_up, *b_down;     /* biases or NULL */
} model_layer;

typedef struct model_weights {
    const float *embed;                      /* [vocab][hidden] */
    const float *final_norm;                 /* [hidden] */
    const float *lm_head;                    /* [vocab][hidden]; == embed when tied */
    model_layer *layers;                     /* [n_layers] */
} model_weights;

typedef struct model {
    model_config cfg;
    model_weights w;
    float *arena;                            /* owned f32 storage */
    st_file **files;                         /* mapped weight files, kept open */
    size_t n_files;
} model;

model *model_new_dummy(const model_config *c, uint64_t seed, uint64_t mem_limit, rh_err *e);
/* The shapes alone, no weights: for a backend that never runs the model
 * (a priced forward, engine.h's engine_pricer). */
model *model_new_shapes(const model_config *c, rh_err *e);
/* `path`: a directory (config.json plus model.safetensors or
 * model.safetensors.index.json), a .safetensors file or an index .json.
 * cfg NULL reads the config from the directory (or the file's directory). */
model *model_load(const char *path, const model_config *cfg, uint64_t mem_limit, rh_err *e);
/* The weights a MODEL argument names: `weights` when given, else MODEL
 * itself when it is a directory holding model.safetensors or
 * model.safetensors.index.json, else NULL (dummy weights). */
const char *model_weights_of(const char *spec, const char *weights);
/* A MODEL argument as every front reads it (`rehearse model`, serve, replay,
 * a draft model): a preset name, config.json or directory
 * (model_config_resolve), with the weights model_weights_of names, else
 * seeded dummy weights. */
model *model_open(const char *spec, const char *weights, uint64_t seed, uint64_t mem_limit, rh_err *e);
/* Writes dir/config.json and dir/model.safetensors with tensors stored as dtype. */
int model_save(const model *m, const char *dir, st_dtype dtype, rh_err *e);
void model_free(model *m);

/* Fails with a message naming the model when its f32 weights do not fit. */
int model_check_memory(const model_config *c, uint64_t mem_limit, rh_err *e);

/* A model's weights as one backend computes with them: in the backend's
 * memory and weight dtype (matrices; norms and biases stay f32), and for
 * tensor parallel one rank's slice. Rank r of `size` keeps heads
 * [r*H/size, (r+1)*H/size) of Q, the matching K/V heads, and the same slice
 * of the MLP's inner width: rows of Q, K, V, gate and up, columns of O and
 * down. The O and down biases stay with rank 0, which alone adds them.
 * Embedding, norms and LM head are whole on every rank. On a host backend
 * with one rank the model's own weights are used in place. */
typedef struct model_shard {
    model_config cfg;          /* n_heads, n_kv_heads, intermediate_size divided by size */
    model_weights w;           /* backend pointers */
    const kern_table *K;
    void **owned;              /* backend allocations to free */
    size_t n_owned;
    int owns_layers;
} model_shard;

/* Fails (nothing allocated) when heads or inner width do not divide by
 * size, or the backend's memory cannot hold the shard. */
model_shard *model_shard_new(const model *m, const kern_table *K, uint32_t rank, uint32_t size, rh_err *e);
void model_shard_free(model_shard *s);
/* Backend bytes one rank's shard takes. */
uint64_t model_shard_bytes(const model_config *c, const kern_table *K, uint32_t size);

#endif
