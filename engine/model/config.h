/* config.h — the shape of a Llama-family model (Llama 2 and 3, Mistral,
 * Qwen2 and 2.5): named presets, or a Hugging Face config.json.
 *
 * A model_config is plain data: the engine instantiates it (weights.h), the
 * cost models read its shape (parameter count, KV bytes per token). Every
 * config, preset or file, passes model_config_validate before use, so the
 * rest of the engine may trust its sizes (all products fit in 64 bits, heads
 * divide evenly, head_dim is even). */
#ifndef RH_MODEL_CONFIG_H
#define RH_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

typedef enum model_rope_type {
    MODEL_ROPE_DEFAULT = 0,
    MODEL_ROPE_LINEAR,       /* positions divided by factor */
    MODEL_ROPE_LLAMA3,       /* Llama 3.1's frequency-band rescaling */
} model_rope_type;

typedef struct model_config {
    char name[64];                    /* preset name, or the config file's model_type */
    char arch[16];                    /* "llama", "mistral" or "qwen2" */
    uint32_t vocab_size;
    uint32_t hidden_size;
    uint32_t intermediate_size;       /* SwiGLU inner width */
    uint32_t n_layers;
    uint32_t n_heads;
    uint32_t n_kv_heads;              /* grouped-query attention: n_heads / n_kv_heads queries share a K/V head */
    uint32_t head_dim;
    uint32_t max_position;            /* context length (max_position_embeddings) */
    uint32_t sliding_window;          /* attend to the last this many tokens; 0: all */
    float rms_norm_eps;
    double rope_theta;
    model_rope_type rope_type;
    double rope_factor;
    double rope_low_freq_factor, rope_high_freq_factor;   /* llama3 */
    uint32_t rope_original_max_position;                  /* llama3 */
    bool tie_embeddings;              /* the LM head is the embedding table */
    bool qkv_bias;                    /* Qwen2, or Llama's attention_bias */
    bool o_bias;                      /* Llama's attention_bias */
    bool mlp_bias;                    /* Llama's mlp_bias */
    int32_t bos_token_id, eos_token_id;   /* -1: not given */
} model_config;

/* Fills c from a preset name. -1 and the list of names when unknown. */
int model_preset(const char *name, model_config *c, rh_err *e);
/* "tiny-llama, llama-100m, ..." for help texts and messages. */
const char *model_preset_names(void);

/* Reads a Hugging Face config.json; errors name the file and the field. */
int model_config_load(const char *path, model_config *c, rh_err *e);
/* A preset name, a config.json path, or a directory holding config.json. */
int model_config_resolve(const char *spec, model_config *c, rh_err *e);
/* Writes c as a Hugging Face config.json (temp file, then rename). */
int model_config_save(const model_config *c, const char *path, rh_err *e);
/* Checks every size and combination; `where` names the source in messages. */
int model_config_validate(const model_config *c, const char *where, rh_err *e);

uint64_t model_param_count(const model_config *c);
/* f32 bytes of K and V for one token across all layers. */
uint64_t model_kv_bytes_per_token(const model_config *c);
/* RoPE inverse frequencies with the config's scaling: head_dim / 2 floats. */
void model_rope_inv_freq(const model_config *c, float *inv_freq);

#endif
