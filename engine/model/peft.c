/* peft.c — see peft.h. */
#include "engine/model/peft.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/atomic_file.h"
#include "util/rng.h"

static const char *const module_names[LORA_N_MODULES] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                         "gate_proj", "up_proj", "down_proj"};

const char *lora_module_name(int m)
{
    return m >= 0 && m < LORA_N_MODULES ? module_names[m] : "?";
}

int lora_targets_parse(const char *list, uint32_t *bits, rh_err *e)
{
    uint32_t out = 0;
    const char *p = list;
    while (*p) {
        size_t n = strcspn(p, ", ");
        if (n) {
            int found = -1;
            if ((n == 3 && !strncmp(p, "all", 3)) || (n == 10 && !strncmp(p, "all-linear", 10))) {
                out |= LORA_ALL_MODULES;
                found = 0;
            }
            for (int i = 0; i < 7 && found < 0; i++)
                if (strlen(module_names[i]) == n && !strncmp(p, module_names[i], n)) out |= 1u << i, found = i;
            if (found < 0)
                return rh_fail(e, "LoRA target modules: '%.*s' is not q_proj, k_proj, v_proj, o_proj, gate_proj, "
                                  "up_proj, down_proj or all", (int)n, p);
        }
        p += n;
        p += strspn(p, ", ");
    }
    if (!out) return rh_fail(e, "LoRA target modules: none named");
    *bits = out;
    return 0;
}

void lora_module_dims(const model_config *c, int m, uint32_t *in, uint32_t *out)
{
    uint32_t d = c->hidden_size, q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    uint32_t f = c->intermediate_size;
    switch (m) {
    case LORA_Q: *in = d, *out = q; break;
    case LORA_K:
    case LORA_V: *in = d, *out = kv; break;
    case LORA_O: *in = q, *out = d; break;
    case LORA_GATE:
    case LORA_UP: *in = d, *out = f; break;
    default: *in = f, *out = d; break;
    }
}

/* The tensor name PEFT gives A (ab 'A') or B of module m in layer l. */
static void tensor_name(char *buf, size_t n, uint32_t l, int m, char ab)
{
    snprintf(buf, n, "base_model.model.model.layers.%u.%s.%s.lora_%c.weight", l, m <= LORA_O ? "self_attn" : "mlp",
             module_names[m], ab);
}

void model_lora_free(model_lora *l)
{
    if (!l) return;
    free(l->a);
    free(l->b);
    free(l->arena);
    free(l);
}

/* target_modules: a list of module names (or of longer names ending in one),
 * or "all-linear". */
static int parse_targets(json_t *t, const char *file, uint32_t *out, rh_err *e)
{
    *out = 0;
    if (json_is_string(t) && !strcmp(json_string_value(t), "all-linear")) {
        *out = LORA_ALL_MODULES;
        return 0;
    }
    if (!json_is_array(t) || json_array_size(t) == 0)
        return rh_fail(e, "%s: field 'target_modules' must be a list of module names or \"all-linear\"", file);
    size_t i;
    json_t *v;
    json_array_foreach(t, i, v) {
        const char *s = json_string_value(v);
        int found = -1;
        for (int m = 0; s && m < LORA_N_MODULES && found < 0; m++) {
            size_t ls = strlen(s), lm = strlen(module_names[m]);
            if (ls >= lm && !strcmp(s + ls - lm, module_names[m]) && (ls == lm || s[ls - lm - 1] == '.')) found = m;
        }
        if (found < 0)
            return rh_fail(e, "%s: field 'target_modules': '%s' is not one of q_proj, k_proj, v_proj, o_proj, "
                              "gate_proj, up_proj, down_proj", file, s ? s : "(not a string)");
        *out |= 1u << found;
    }
    return 0;
}

/* A field that must be absent, null, false, empty or equal to `ok`. */
static int refuse_field(json_t *root, const char *key, const char *ok, const char *why, const char *file, rh_err *e)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v) || json_is_false(v)) return 0;
    if ((json_is_object(v) && json_object_size(v) == 0) || (json_is_array(v) && json_array_size(v) == 0)) return 0;
    if (ok && json_is_string(v) && !strcmp(json_string_value(v), ok)) return 0;
    return rh_fail(e, "%s: field '%s': %s", file, key, why);
}

static int read_config(const char *dir, const model_config *c, model_lora *l, double *alpha, rh_err *e)
{
    char file[600];
    snprintf(file, sizeof file, "%s/adapter_config.json", dir);
    json_error_t je;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (je.line < 0 || errno == ENOENT) return rh_fail(e, "%s: cannot read (%s)", file, je.text);
        return rh_fail(e, "%s: line %d column %d: %s", file, je.line, je.column, je.text);
    }
    int rc = -1;
    json_t *pt = json_object_get(root, "peft_type"), *r = json_object_get(root, "r"),
           *a = json_object_get(root, "lora_alpha"), *rs = json_object_get(root, "use_rslora");
    if (pt && (!json_is_string(pt) || strcmp(json_string_value(pt), "LORA"))) {
        rh_fail(e, "%s: field 'peft_type' is not \"LORA\"", file);
    } else if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 4096) {
        rh_fail(e, "%s: field 'r' must be an integer rank 1..4096", file);
    } else if (a && !json_is_number(a)) {
        rh_fail(e, "%s: field 'lora_alpha' must be a number", file);
    } else if (rs && !json_is_boolean(rs)) {
        rh_fail(e, "%s: field 'use_rslora' must be true or false", file);
    } else if (refuse_field(root, "use_dora", NULL, "DoRA adapters are not served", file, e) < 0 ||
               refuse_field(root, "modules_to_save", NULL, "adapters replacing whole modules are not served (as in vLLM)",
                            file, e) < 0 ||
               refuse_field(root, "bias", "none", "only bias \"none\" is served", file, e) < 0 ||
               refuse_field(root, "fan_in_fan_out", NULL, "Conv1D-layout (GPT-2) adapters are not served", file, e) < 0 ||
               refuse_field(root, "rank_pattern", NULL, "per-module ranks are not served", file, e) < 0 ||
               refuse_field(root, "alpha_pattern", NULL, "per-module alphas are not served", file, e) < 0 ||
               refuse_field(root, "layers_to_transform", NULL, "adapters on some layers only are not served", file,
                            e) < 0 ||
               parse_targets(json_object_get(root, "target_modules"), file, &l->targets, e) < 0) {
        /* message set */
    } else {
        l->rank = (uint32_t)json_integer_value(r);
        *alpha = a ? json_number_value(a) : 8;   /* PEFT's default lora_alpha */
        l->scale = (float)(rs && json_is_true(rs) ? *alpha / sqrt(l->rank) : *alpha / l->rank);
        rc = 0;
    }
    json_decref(root);
    (void)c;
    return rc;
}

model_lora *model_lora_load(const char *dir, const char *name, const model_config *c, uint32_t max_rank, rh_err *e)
{
    model_lora *l = calloc(1, sizeof *l);
    if (!l) return rh_fail(e, "adapter %s: out of memory", name), NULL;
    snprintf(l->name, sizeof l->name, "%s", name);
    snprintf(l->path, sizeof l->path, "%s", dir);
    double alpha;
    if (read_config(dir, c, l, &alpha, e) < 0) goto fail;
    if (max_rank && l->rank > max_rank) {
        rh_fail(e, "%s/adapter_config.json: field 'r' is %u, above --max-lora-rank %u", dir, l->rank, max_rank);
        goto fail;
    }
    char file[600];
    snprintf(file, sizeof file, "%s/adapter_model.safetensors", dir);
    st_file *st = st_open(file, e);
    if (!st) goto fail;
    l->n_layers = c->n_layers;
    size_t slots = (size_t)c->n_layers * LORA_N_MODULES, total = 0;
    l->a = calloc(slots, sizeof *l->a);
    l->b = calloc(slots, sizeof *l->b);
    for (int m = 0; m < LORA_N_MODULES; m++)
        if (l->targets & (1u << m)) {
            uint32_t in, out;
            lora_module_dims(c, m, &in, &out);
            total += (size_t)c->n_layers * l->rank * ((size_t)in + out);
        }
    l->arena = malloc((total ? total : 1) * sizeof *l->arena);
    if (!l->a || !l->b || !l->arena) {
        rh_fail(e, "adapter %s: out of memory", name);
        st_close(st);
        goto fail;
    }
    float *at = l->arena;
    for (uint32_t layer = 0; layer < c->n_layers; layer++)
        for (int m = 0; m < LORA_N_MODULES; m++) {
            if (!(l->targets & (1u << m))) continue;
            uint32_t in, out;
            lora_module_dims(c, m, &in, &out);
            for (int k = 0; k < 2; k++) {
                char tn[160];
                tensor_name(tn, sizeof tn, layer, m, k ? 'B' : 'A');
                const st_tensor *t = st_find(st, tn);
                uint64_t rows = k ? out : l->rank, cols = k ? l->rank : in;
                if (!t) {
                    rh_fail(e, "%s: tensor '%s' is missing (target_modules names %s)", file, tn, module_names[m]);
                    st_close(st);
                    goto fail;
                }
                if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols) {
                    rh_fail(e, "%s: tensor '%s' has shape [%llu, %llu]; rank %u on this model needs [%llu, %llu]", file,
                            tn, (unsigned long long)t->shape[0], (unsigned long long)(t->ndim > 1 ? t->shape[1] : 0),
                            l->rank, (unsigned long long)rows, (unsigned long long)cols);
                    st_close(st);
                    goto fail;
                }
                if (st_read_f32(t, at) < 0) {
                    rh_fail(e, "%s: tensor '%s' has dtype %s (f32, f16 or bf16 are read)", file, tn, t->dtype_name);
                    st_close(st);
                    goto fail;
                }
                if (k) {
                    for (uint64_t i = 0; i < rows * cols; i++) at[i] *= l->scale;
                    l->b[(size_t)layer * LORA_N_MODULES + m] = at;
                } else {
                    l->a[(size_t)layer * LORA_N_MODULES + m] = at;
                }
                at += rows * cols;
            }
        }
    st_close(st);
    return l;
fail:
    model_lora_free(l);
    return NULL;
}

int model_lora_save_seeded(const char *dir, const model_config *c, uint32_t rank, double alpha, uint32_t targets,
                     uint64_t seed, st_dtype dtype, rh_err *e)
{
    if (rank < 1 || rank > 4096) return rh_fail(e, "--rank %u: must be 1..4096", rank);
    if (!targets) return rh_fail(e, "--target-modules: no module named");
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) return rh_fail(e, "%s: cannot create (%s)", dir, strerror(errno));
    size_t n = 0, total = 0;
    for (int m = 0; m < LORA_N_MODULES; m++)
        if (targets & (1u << m)) {
            uint32_t in, out;
            lora_module_dims(c, m, &in, &out);
            n += 2 * (size_t)c->n_layers;
            total += (size_t)c->n_layers * rank * ((size_t)in + out);
        }
    st_out *t = calloc(n, sizeof *t);
    float *data = malloc(total * sizeof *data);
    char (*names)[160] = calloc(n, sizeof *names);
    int rc = -1;
    if (!t || !data || !names) {
        rh_fail(e, "%s: out of memory", dir);
        goto done;
    }
    /* Uniform in ±1/sqrt(in) for A, ±1/sqrt(rank) for B, scaled so the
     * adapter moves each module's output by a few percent. */
    rh_rng rng;
    rh_rng_seed(&rng, rh_hash64(seed ^ 0x4c6f5241ull));
    size_t k = 0;
    float *at = data;
    for (uint32_t layer = 0; layer < c->n_layers; layer++)
        for (int m = 0; m < LORA_N_MODULES; m++) {
            if (!(targets & (1u << m))) continue;
            uint32_t in, out;
            lora_module_dims(c, m, &in, &out);
            for (int ab = 0; ab < 2; ab++) {
                uint64_t rows = ab ? out : rank, cols = ab ? rank : in;
                double bound = ab ? 0.2 / sqrt(rank) : 1 / sqrt(in);
                for (uint64_t i = 0; i < rows * cols; i++) at[i] = (float)((2 * rh_rng_uniform(&rng) - 1) * bound);
                tensor_name(names[k], sizeof names[k], layer, m, ab ? 'B' : 'A');
                t[k] = (st_out){.name = names[k], .dtype = dtype, .ndim = 2, .shape = {rows, cols}, .data = at};
                at += rows * cols;
                k++;
            }
        }
    char file[600];
    snprintf(file, sizeof file, "%s/adapter_model.safetensors", dir);
    if (st_write(file, t, n, e) < 0) goto done;
    json_t *mods = json_array();
    for (int m = 0; m < LORA_N_MODULES; m++)
        if (targets & (1u << m)) json_array_append_new(mods, json_string(module_names[m]));
    json_t *cfg = json_pack("{s:s, s:s, s:i, s:f, s:o, s:f, s:s, s:b, s:b, s:b, s:n}", "peft_type", "LORA",
                            "base_model_name_or_path", c->name, "r", (int)rank, "lora_alpha", alpha, "target_modules",
                            mods, "lora_dropout", 0.0, "bias", "none", "use_rslora", 0, "use_dora", 0,
                            "fan_in_fan_out", 0, "modules_to_save");
    char *text = cfg ? json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(cfg);
    snprintf(file, sizeof file, "%s/adapter_config.json", dir);
    if (!text) rh_fail(e, "%s: out of memory", file);
    else if (rh_write_file_atomic(file, text, strlen(text), e) == 0) rc = 0;
    free(text);
done:
    free(t);
    free(data);
    free(names);
    return rc;
}

/* dst += B·A over [out][in]: B [out][r], A [r][in] */
static void add_product(float *dst, const float *B, const float *A, uint32_t out, uint32_t r, uint32_t in)
{
    for (uint32_t o = 0; o < out; o++)
        for (uint32_t i = 0; i < in; i++) {
            double s = 0;
            for (uint32_t k = 0; k < r; k++) s += (double)B[(size_t)o * r + k] * A[(size_t)k * in + i];
            dst[(size_t)o * in + i] += (float)s;
        }
}

static void copy_into(const float *dst, const float *src, size_t n)
{
    if (dst && src && dst != src) memcpy((float *)dst, src, n * sizeof *src);
}

model *model_lora_merged(const model *m, const model_lora *l, rh_err *e)
{
    const model_config *c = &m->cfg;
    model *out = model_new_dummy(c, 0, 0, e);
    if (!out) return NULL;
    uint32_t d = c->hidden_size, f = c->intermediate_size, q = c->n_heads * c->head_dim;
    uint32_t kv = c->n_kv_heads * c->head_dim;
    copy_into(out->w.embed, m->w.embed, (size_t)c->vocab_size * d);
    copy_into(out->w.final_norm, m->w.final_norm, d);
    if (!c->tie_embeddings) copy_into(out->w.lm_head, m->w.lm_head, (size_t)c->vocab_size * d);
    for (uint32_t i = 0; i < c->n_layers; i++) {
        const model_layer *s = &m->w.layers[i];
        model_layer *t = &out->w.layers[i];
        copy_into(t->attn_norm, s->attn_norm, d);
        copy_into(t->ffn_norm, s->ffn_norm, d);
        const float *src[LORA_N_MODULES] = {s->wq, s->wk, s->wv, s->wo, s->w_gate, s->w_up, s->w_down};
        const float *dst[LORA_N_MODULES] = {t->wq, t->wk, t->wv, t->wo, t->w_gate, t->w_up, t->w_down};
        for (int mo = 0; mo < LORA_N_MODULES; mo++) {
            uint32_t in, o;
            lora_module_dims(c, mo, &in, &o);
            copy_into(dst[mo], src[mo], (size_t)in * o);
            const float *A = l->a[(size_t)i * LORA_N_MODULES + mo], *B = l->b[(size_t)i * LORA_N_MODULES + mo];
            if (A && B) add_product((float *)dst[mo], B, A, o, l->rank, in);
        }
        copy_into(t->bq, s->bq, q), copy_into(t->bk, s->bk, kv), copy_into(t->bv, s->bv, kv);
        copy_into(t->bo, s->bo, d), copy_into(t->b_gate, s->b_gate, f), copy_into(t->b_up, s->b_up, f);
        copy_into(t->b_down, s->b_down, d);
    }
    return out;
}
