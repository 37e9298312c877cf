/* config.c — presets, config.json reading and writing, and the derived sizes. */
#include "engine/model/config.h"
#include "util/json_file.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* ---- presets ---------------------------------------------------------- */

typedef struct preset {
    const char *name, *arch;
    uint32_t vocab, hidden, inter, layers, heads, kv_heads, max_pos, window;
    float eps;
    double theta;
    bool tied;
    int32_t bos, eos;
    double llama3_factor;   /* 0: no scaling; else llama3 rope with Llama 3.1's bands */
} preset;

/* tiny-llama uses the byte tokenizer's ids (bos 256, eos 257): its 512-id
 * vocabulary keeps the test suite's forward passes cheap. llama-100m has
 * Llama 3's vocabulary and special ids, so it speaks the Llama 3 tokenizer
 * when that is installed (real text in, real text out) and the byte
 * tokenizer otherwise; its 512-wide layers keep it near 100M parameters and
 * its per-token work near the 768-wide, 32k-vocabulary shape it had before.
 * The published models' shapes are copied from their config.json files. */
static const preset presets[] = {
    {"tiny-llama", "llama", 512, 256, 768, 4, 8, 4, 2048, 0, 1e-5f, 10000.0, true, 256, 257, 0},
    {"llama-100m", "llama", 128256, 512, 1536, 12, 8, 4, 4096, 0, 1e-5f, 500000.0, true, 128000, 128001, 0},
    {"llama-2-7b", "llama", 32000, 4096, 11008, 32, 32, 32, 4096, 0, 1e-5f, 10000.0, false, 1, 2, 0},
    {"mistral-7b", "mistral", 32000, 4096, 14336, 32, 32, 8, 32768, 4096, 1e-5f, 10000.0, false, 1, 2, 0},
    {"llama-3-8b", "llama", 128256, 4096, 14336, 32, 32, 8, 8192, 0, 1e-5f, 500000.0, false, 128000, 128001, 0},
    {"llama-3.1-8b", "llama", 128256, 4096, 14336, 32, 32, 8, 131072, 0, 1e-5f, 500000.0, false, 128000, 128001, 8.0},
    {"qwen2.5-7b", "qwen2", 152064, 3584, 18944, 28, 28, 4, 32768, 0, 1e-6f, 1000000.0, false, 151643, 151643, 0},
    {"llama-3-70b", "llama", 128256, 8192, 28672, 80, 64, 8, 8192, 0, 1e-5f, 500000.0, false, 128000, 128001, 0},
    {"qwen2.5-72b", "qwen2", 152064, 8192, 29568, 80, 64, 8, 32768, 0, 1e-6f, 1000000.0, false, 151643, 151643, 0},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

const char *model_preset_names(void)
{
    static char buf[512];
    if (!buf[0]) {
        size_t at = 0;
        for (size_t i = 0; i < N_PRESETS; i++)
            at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%s", i ? ", " : "", presets[i].name);
    }
    return buf;
}

static void set_defaults(model_config *c)
{
    memset(c, 0, sizeof *c);
    c->rms_norm_eps = 1e-6f;
    c->rope_theta = 10000.0;
    c->rope_factor = 1.0;
    c->bos_token_id = c->eos_token_id = -1;
}

int model_preset(const char *name, model_config *c, rh_err *e)
{
    for (size_t i = 0; i < N_PRESETS; i++) {
        const preset *p = &presets[i];
        if (strcmp(p->name, name)) continue;
        set_defaults(c);
        snprintf(c->name, sizeof c->name, "%s", p->name);
        snprintf(c->arch, sizeof c->arch, "%s", p->arch);
        c->vocab_size = p->vocab;
        c->hidden_size = p->hidden;
        c->intermediate_size = p->inter;
        c->n_layers = p->layers;
        c->n_heads = p->heads;
        c->n_kv_heads = p->kv_heads;
        c->head_dim = p->hidden / p->heads;
        c->max_position = p->max_pos;
        c->sliding_window = p->window;
        c->rms_norm_eps = p->eps;
        c->rope_theta = p->theta;
        c->tie_embeddings = p->tied;
        c->qkv_bias = !strcmp(p->arch, "qwen2");
        c->bos_token_id = p->bos;
        c->eos_token_id = p->eos;
        if (p->llama3_factor > 0) {
            c->rope_type = MODEL_ROPE_LLAMA3;
            c->rope_factor = p->llama3_factor;
            c->rope_low_freq_factor = 1.0;
            c->rope_high_freq_factor = 4.0;
            c->rope_original_max_position = 8192;
        }
        return model_config_validate(c, name, e);
    }
    return rh_fail(e, "unknown model preset '%s' (presets: %s)", name, model_preset_names());
}

/* ---- config.json ------------------------------------------------------ */

/* Reads an optional non-negative integer field; integral reals are accepted
 * because some exporters write 4096.0. 1 if present, 0 if absent or null. */
static int get_uint(json_t *o, const char *path, const char *key, uint64_t max, uint32_t *out, rh_err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    double d;
    if (json_is_integer(v)) d = (double)json_integer_value(v);
    else if (json_is_real(v)) d = json_real_value(v);
    else return rh_fail(e, "%s: field '%s': expected an integer", path, key);
    if (d < 0 || d != floor(d) || d > (double)max)
        return rh_fail(e, "%s: field '%s': %g is not an integer in [0, %llu]", path, key, d,
                       (unsigned long long)max);
    *out = (uint32_t)d;
    return 1;
}

static int need_uint(json_t *o, const char *path, const char *key, uint64_t max, uint32_t *out, rh_err *e)
{
    int r = get_uint(o, path, key, max, out, e);
    if (r == 0) return rh_fail(e, "%s: field '%s' is missing", path, key);
    return r < 0 ? -1 : 0;
}

static int get_real(json_t *o, const char *path, const char *key, double *out, rh_err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return rh_fail(e, "%s: field '%s': expected a number", path, key);
    *out = json_number_value(v);
    return 1;
}

static int get_bool(json_t *o, const char *path, const char *key, bool *out, rh_err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return rh_fail(e, "%s: field '%s': expected true or false", path, key);
    *out = json_is_true(v);
    return 1;
}

/* bos/eos ids: an integer, null, or (Llama 3.1's eos) a list whose first entry is used. */
static int get_token_id(json_t *o, const char *path, const char *key, int32_t *out, rh_err *e)
{
    json_t *v = json_object_get(o, key);
    if (v && json_is_array(v)) v = json_array_size(v) ? json_array_get(v, 0) : NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        return rh_fail(e, "%s: field '%s': expected a token id", path, key);
    *out = (int32_t)json_integer_value(v);
    return 1;
}

static int parse_rope_scaling(json_t *o, const char *path, model_config *c, rh_err *e)
{
    json_t *rs = json_object_get(o, "rope_scaling");
    if (!rs || json_is_null(rs)) return 0;
    if (!json_is_object(rs)) return rh_fail(e, "%s: field 'rope_scaling': expected an object or null", path);
    json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");
    if (!t || !json_is_string(t))
        return rh_fail(e, "%s: field 'rope_scaling.rope_type': expected a string", path);
    const char *type = json_string_value(t);
    char sub[4200];
    if (!strcmp(type, "default")) return 0;
    snprintf(sub, sizeof sub, "%s (rope_scaling)", path);
    if (!strcmp(type, "linear")) c->rope_type = MODEL_ROPE_LINEAR;
    else if (!strcmp(type, "llama3")) c->rope_type = MODEL_ROPE_LLAMA3;
    else
        return rh_fail(e, "%s: field 'rope_scaling.rope_type': '%s' is not supported (default, linear, llama3)",
                       path, type);
    if (get_real(rs, sub, "factor", &c->rope_factor, e) <= 0)
        return rh_fail(e, "%s: field 'rope_scaling.factor' is missing or not a number", path);
    if (c->rope_type == MODEL_ROPE_LLAMA3) {
        if (get_real(rs, sub, "low_freq_factor", &c->rope_low_freq_factor, e) <= 0 ||
            get_real(rs, sub, "high_freq_factor", &c->rope_high_freq_factor, e) <= 0)
            return rh_fail(e, "%s: field 'rope_scaling.low_freq_factor/high_freq_factor' is missing or not a number",
                           path);
        int r = get_uint(rs, sub, "original_max_position_embeddings", 1u << 24, &c->rope_original_max_position, e);
        if (r < 0) return -1;
        if (r == 0)
            return rh_fail(e, "%s: field 'rope_scaling.original_max_position_embeddings' is missing", path);
    }
    return 0;
}

static int parse_config(json_t *o, const char *path, model_config *c, rh_err *e)
{
    if (!json_is_object(o)) return rh_fail(e, "%s: expected a JSON object", path);
    set_defaults(c);
    json_t *mt = json_object_get(o, "model_type");
    if (!mt) return rh_fail(e, "%s: field 'model_type' is missing", path);
    if (!json_is_string(mt)) return rh_fail(e, "%s: field 'model_type': expected a string", path);
    const char *type = json_string_value(mt);
    if (strcmp(type, "llama") && strcmp(type, "mistral") && strcmp(type, "qwen2"))
        return rh_fail(e, "%s: field 'model_type': '%s' is not a supported Llama-family model (llama, mistral, qwen2)",
                       path, type);
    snprintf(c->name, sizeof c->name, "%s", type);
    snprintf(c->arch, sizeof c->arch, "%s", type);
    /* The model's own name when the file records one (the last path part). */
    const char *np = json_string_value(json_object_get(o, "_name_or_path"));
    if (np && *np) {
        const char *base = strrchr(np, '/');
        base = base && base[1] ? base + 1 : np;
        snprintf(c->name, sizeof c->name, "%s", base);
    }

    json_t *act = json_object_get(o, "hidden_act");
    if (act && !json_is_null(act) && (!json_is_string(act) || strcmp(json_string_value(act), "silu")))
        return rh_fail(e, "%s: field 'hidden_act': only \"silu\" is supported", path);

    const uint64_t big = 1u << 24;
    if (need_uint(o, path, "vocab_size", big, &c->vocab_size, e) || need_uint(o, path, "hidden_size", big, &c->hidden_size, e) ||
        need_uint(o, path, "intermediate_size", big, &c->intermediate_size, e) ||
        need_uint(o, path, "num_hidden_layers", big, &c->n_layers, e) ||
        need_uint(o, path, "num_attention_heads", big, &c->n_heads, e))
        return -1;
    c->n_kv_heads = c->n_heads;
    if (get_uint(o, path, "num_key_value_heads", big, &c->n_kv_heads, e) < 0) return -1;
    c->head_dim = 0;
    if (get_uint(o, path, "head_dim", big, &c->head_dim, e) < 0) return -1;
    if (!c->head_dim) {
        if (!c->n_heads || c->hidden_size % c->n_heads)
            return rh_fail(e, "%s: field 'num_attention_heads': %u does not divide hidden_size %u (give head_dim)",
                           path, c->n_heads, c->hidden_size);
        c->head_dim = c->hidden_size / c->n_heads;
    }
    /* The transformers library's defaults when the field is absent. */
    c->max_position = !strcmp(type, "llama") ? 2048 : !strcmp(type, "mistral") ? 131072 : 32768;
    if (get_uint(o, path, "max_position_embeddings", big, &c->max_position, e) < 0) return -1;

    double eps = c->rms_norm_eps;
    if (get_real(o, path, "rms_norm_eps", &eps, e) < 0) return -1;
    c->rms_norm_eps = (float)eps;
    if (get_real(o, path, "rope_theta", &c->rope_theta, e) < 0) return -1;
    if (parse_rope_scaling(o, path, c, e)) return -1;
    if (get_bool(o, path, "tie_word_embeddings", &c->tie_embeddings, e) < 0) return -1;

    if (!strcmp(type, "qwen2")) {
        c->qkv_bias = true;
        bool sw = false;
        if (get_bool(o, path, "use_sliding_window", &sw, e) < 0) return -1;
        if (sw) return rh_fail(e, "%s: field 'use_sliding_window': sliding windows on some layers are not supported", path);
    } else {
        bool ab = false;
        if (get_bool(o, path, "attention_bias", &ab, e) < 0) return -1;
        c->qkv_bias = c->o_bias = ab;
        if (get_bool(o, path, "mlp_bias", &c->mlp_bias, e) < 0) return -1;
        if (!strcmp(type, "mistral") && get_uint(o, path, "sliding_window", big, &c->sliding_window, e) < 0) return -1;
    }
    if (get_token_id(o, path, "bos_token_id", &c->bos_token_id, e) < 0 ||
        get_token_id(o, path, "eos_token_id", &c->eos_token_id, e) < 0)
        return -1;
    return model_config_validate(c, path, e);
}

int model_config_load(const char *path, model_config *c, rh_err *e)
{
    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        if (je.line < 0) return rh_fail(e, "%s: %s", path, je.text);
        return rh_fail(e, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    }
    int r = parse_config(o, path, c, e);
    json_decref(o);
    return r;
}

int model_config_resolve(const char *spec, model_config *c, rh_err *e)
{
    struct stat st;
    if (stat(spec, &st) != 0) {
        if (strchr(spec, '/') || strstr(spec, ".json"))
            return rh_fail(e, "%s: no such file or directory", spec);
        return model_preset(spec, c, e);
    }
    if (S_ISDIR(st.st_mode)) {
        char path[4096];
        snprintf(path, sizeof path, "%s/config.json", spec);
        return model_config_load(path, c, e);
    }
    return model_config_load(spec, c, e);
}

int model_config_save(const model_config *c, const char *path, rh_err *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", !strcmp(c->arch, "qwen2") ? "Qwen2ForCausalLM"
                                                                : !strcmp(c->arch, "mistral") ? "MistralForCausalLM"
                                                                                              : "LlamaForCausalLM"));
    json_object_set_new(o, "_name_or_path", json_string(c->name));
    json_object_set_new(o, "model_type", json_string(c->arch));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(o, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_position));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "rms_norm_eps", json_real(c->rms_norm_eps));
    json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    if (c->rope_type == MODEL_ROPE_LINEAR) {
        json_object_set_new(o, "rope_scaling", json_pack("{s:s,s:f}", "rope_type", "linear", "factor", c->rope_factor));
    } else if (c->rope_type == MODEL_ROPE_LLAMA3) {
        json_object_set_new(o, "rope_scaling",
                            json_pack("{s:s,s:f,s:f,s:f,s:i}", "rope_type", "llama3", "factor", c->rope_factor,
                                      "low_freq_factor", c->rope_low_freq_factor, "high_freq_factor",
                                      c->rope_high_freq_factor, "original_max_position_embeddings",
                                      (json_int_t)c->rope_original_max_position));
    } else {
        json_object_set_new(o, "rope_scaling", json_null());
    }
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    if (!strcmp(c->arch, "qwen2")) {
        json_object_set_new(o, "use_sliding_window", json_false());
    } else {
        json_object_set_new(o, "attention_bias", json_boolean(c->qkv_bias));
        json_object_set_new(o, "mlp_bias", json_boolean(c->mlp_bias));
        if (!strcmp(c->arch, "mistral"))
            json_object_set_new(o, "sliding_window", c->sliding_window ? json_integer(c->sliding_window) : json_null());
    }
    json_object_set_new(o, "bos_token_id", c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
    json_object_set_new(o, "eos_token_id", c->eos_token_id >= 0 ? json_integer(c->eos_token_id) : json_null());
    json_object_set_new(o, "torch_dtype", json_string("float32"));

    int r = rh_json_save(o, path, JSON_INDENT(2), "the config", e);
    json_decref(o);
    return r;
}

/* ---- checks and derived sizes ---------------------------------------- */

int model_config_validate(const model_config *c, const char *where, rh_err *e)
{
    /* Bounds keep every size product of the engine far inside 64 bits and
     * every per-dimension index inside 32 bits. */
    struct { const char *field; uint32_t v, max; } dims[] = {
        {"vocab_size", c->vocab_size, 1u << 22},
        {"hidden_size", c->hidden_size, 1u << 16},
        {"intermediate_size", c->intermediate_size, 1u << 18},
        {"num_hidden_layers", c->n_layers, 1024},
        {"num_attention_heads", c->n_heads, 1024},
        {"num_key_value_heads", c->n_kv_heads, 1024},
        {"head_dim", c->head_dim, 1024},
        {"max_position_embeddings", c->max_position, 1u << 24},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v == 0 || dims[i].v > dims[i].max)
            return rh_fail(e, "%s: field '%s': %u is outside [1, %u]", where, dims[i].field, dims[i].v, dims[i].max);
    if (c->n_heads % c->n_kv_heads)
        return rh_fail(e, "%s: field 'num_key_value_heads': %u does not divide num_attention_heads %u", where,
                       c->n_kv_heads, c->n_heads);
    if (c->head_dim % 2) return rh_fail(e, "%s: field 'head_dim': %u is odd (RoPE rotates pairs)", where, c->head_dim);
    if ((uint64_t)c->n_heads * c->head_dim > (1u << 16))
        return rh_fail(e, "%s: field 'num_attention_heads': %u heads of %u are too wide", where, c->n_heads,
                       c->head_dim);
    if (!(c->rms_norm_eps > 0) || !isfinite(c->rms_norm_eps) || c->rms_norm_eps > 1)
        return rh_fail(e, "%s: field 'rms_norm_eps': %g is not in (0, 1]", where, (double)c->rms_norm_eps);
    if (!(c->rope_theta > 1) || !isfinite(c->rope_theta))
        return rh_fail(e, "%s: field 'rope_theta': %g must be a finite number above 1", where, c->rope_theta);
    if (c->rope_type != MODEL_ROPE_DEFAULT && (!(c->rope_factor >= 1) || !isfinite(c->rope_factor)))
        return rh_fail(e, "%s: field 'rope_scaling.factor': %g must be at least 1", where, c->rope_factor);
    if (c->rope_type == MODEL_ROPE_LLAMA3) {
        if (!(c->rope_low_freq_factor > 0) || !(c->rope_high_freq_factor > c->rope_low_freq_factor) ||
            !isfinite(c->rope_high_freq_factor))
            return rh_fail(e, "%s: field 'rope_scaling.high_freq_factor': need 0 < low_freq_factor < high_freq_factor",
                           where);
        if (!c->rope_original_max_position)
            return rh_fail(e, "%s: field 'rope_scaling.original_max_position_embeddings' must be positive", where);
    }
    /* Biases as each architecture's config.json can express them, so every
     * valid config round-trips through model_config_save. */
    if (!strcmp(c->arch, "qwen2")) {
        if (!c->qkv_bias || c->o_bias || c->mlp_bias)
            return rh_fail(e, "%s: qwen2 models have biases on Q, K and V only", where);
    } else if (c->qkv_bias != c->o_bias) {
        return rh_fail(e, "%s: field 'attention_bias': Llama and Mistral put biases on Q, K, V and O alike", where);
    }
    if (strcmp(c->arch, "llama") && strcmp(c->arch, "mistral") && strcmp(c->arch, "qwen2"))
        return rh_fail(e, "%s: architecture '%s' is not llama, mistral or qwen2", where, c->arch);
    if (c->bos_token_id >= (int64_t)c->vocab_size)
        return rh_fail(e, "%s: field 'bos_token_id': %d is outside the vocabulary of %u", where, c->bos_token_id,
                       c->vocab_size);
    if (c->eos_token_id >= (int64_t)c->vocab_size)
        return rh_fail(e, "%s: field 'eos_token_id': %d is outside the vocabulary of %u", where, c->eos_token_id,
                       c->vocab_size);
    return 0;
}

uint64_t model_param_count(const model_config *c)
{
    uint64_t d = c->hidden_size, f = c->intermediate_size, v = c->vocab_size;
    uint64_t qd = (uint64_t)c->n_heads * c->head_dim, kvd = (uint64_t)c->n_kv_heads * c->head_dim;
    uint64_t layer = 2 * d                       /* the two norms */
                     + d * qd + 2 * d * kvd + qd * d + 3 * d * f;
    if (c->qkv_bias) layer += qd + 2 * kvd;
    if (c->o_bias) layer += d;
    if (c->mlp_bias) layer += 2 * f + d;
    return v * d * (c->tie_embeddings ? 1 : 2) + layer * c->n_layers + d;
}

uint64_t model_kv_bytes_per_token(const model_config *c)
{
    return 2ull * c->n_layers * c->n_kv_heads * c->head_dim * sizeof(float);
}

void model_rope_inv_freq(const model_config *c, float *inv_freq)
{
    uint32_t half = c->head_dim / 2;
    for (uint32_t i = 0; i < half; i++) {
        double f = 1.0 / pow(c->rope_theta, (double)(2 * i) / c->head_dim);
        if (c->rope_type == MODEL_ROPE_LINEAR) {
            f /= c->rope_factor;
        } else if (c->rope_type == MODEL_ROPE_LLAMA3) {
            /* Long wavelengths (past the original context / low_freq_factor)
             * are slowed by the factor, short ones (under original context /
             * high_freq_factor) are kept, and the band between is blended. */
            double old_ctx = c->rope_original_max_position;
            double wavelen = 2.0 * M_PI / f;
            double low_wavelen = old_ctx / c->rope_low_freq_factor;
            double high_wavelen = old_ctx / c->rope_high_freq_factor;
            if (wavelen > low_wavelen) {
                f /= c->rope_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (old_ctx / wavelen - c->rope_low_freq_factor) /
                                (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1.0 - smooth) * f / c->rope_factor + smooth * f;
            }
        }
        inv_freq[i] = (float)f;
    }
}
