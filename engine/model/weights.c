/* weights.c — see weights.h.
 *
 * Every path goes through one list of the model's tensors (name, shape, the
 * slot it fills, how a dummy value is drawn), so seeding, loading and saving
 * can never disagree on names or shapes. */
#include "engine/model/weights.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "util/half.h"
#include "util/hash.h"
#include "util/mem.h"
#include "util/progress.h"

/* Dummy weights must keep activations O(1) at any depth and also make the
 * model's greedy output vary, because tests and benchmarks decode with them.
 * With every matrix at std 1/sqrt(fan_in), attention scores have std 1, a
 * near-uniform average over the context: after a few steps the context is
 * the model's own last token and greedy decoding repeats it forever. Q and K
 * at twice that scale give scores of std ~4, so each head attends to a few
 * positions that change with RoPE's rotation, and greedy output wanders
 * (tiny-llama: ~230 distinct ids in 500 steps instead of 5). */
enum init_kind {
    INIT_NORM,       /* 1 +- 0.1: near identity, yet every norm weight distinct */
    INIT_EMBED,      /* std 1/sqrt(hidden): logits O(1) when tied as the LM head */
    INIT_QK,         /* std 2/sqrt(fan_in): attention scores of std ~4, see below */
    INIT_IN,         /* std 1/sqrt(fan_in): unit-variance outputs */
    INIT_OUT,        /* std 1/sqrt(fan_in * 2 * layers): the residual grows O(1) over all layers */
    INIT_BIAS,       /* +- 0.02 */
};

typedef struct tensor_spec {
    char name[96];
    uint32_t ndim;
    uint64_t shape[2];
    const float **slot;
    int kind;
} tensor_spec;

static uint64_t spec_numel(const tensor_spec *t)
{
    return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

/* Lists the model's tensors into out (NULL: count them). */
static size_t list_tensors(const model_config *c, model_weights *w, tensor_spec *out)
{
    size_t n = 0;
    uint64_t d = c->hidden_size, f = c->intermediate_size, v = c->vocab_size;
    uint64_t qd = (uint64_t)c->n_heads * c->head_dim, kvd = (uint64_t)c->n_kv_heads * c->head_dim;
#define T1(nm, a, sl, k)                                                            \
    do {                                                                            \
        if (out) out[n] = (tensor_spec){"", 1, {a, 0}, sl, k};                   \
        if (out) snprintf(out[n].name, sizeof out[n].name, "%s", nm);               \
        n++;                                                                        \
    } while (0)
#define T2(nm, a, b, sl, k)                                                         \
    do {                                                                            \
        if (out) out[n] = (tensor_spec){"", 2, {a, b}, sl, k};                   \
        if (out) snprintf(out[n].name, sizeof out[n].name, "%s", nm);               \
        n++;                                                                        \
    } while (0)
    T2("model.embed_tokens.weight", v, d, out ? &w->embed : NULL, INIT_EMBED);
    char nm[96];
    for (uint32_t l = 0; l < c->n_layers; l++) {
        model_layer *L = out ? &w->layers[l] : NULL;
#define P(suffix) (snprintf(nm, sizeof nm, "model.layers.%u.%s", l, suffix), nm)
#define S(field) (L ? &L->field : NULL)
        T1(P("input_layernorm.weight"), d, S(attn_norm), INIT_NORM);
        T2(P("self_attn.q_proj.weight"), qd, d, S(wq), INIT_QK);
        T2(P("self_attn.k_proj.weight"), kvd, d, S(wk), INIT_QK);
        T2(P("self_attn.v_proj.weight"), kvd, d, S(wv), INIT_IN);
        if (c->qkv_bias) {
            T1(P("self_attn.q_proj.bias"), qd, S(bq), INIT_BIAS);
            T1(P("self_attn.k_proj.bias"), kvd, S(bk), INIT_BIAS);
            T1(P("self_attn.v_proj.bias"), kvd, S(bv), INIT_BIAS);
        }
        T2(P("self_attn.o_proj.weight"), d, qd, S(wo), INIT_OUT);
        if (c->o_bias) T1(P("self_attn.o_proj.bias"), d, S(bo), INIT_BIAS);
        T1(P("post_attention_layernorm.weight"), d, S(ffn_norm), INIT_NORM);
        T2(P("mlp.gate_proj.weight"), f, d, S(w_gate), INIT_IN);
        T2(P("mlp.up_proj.weight"), f, d, S(w_up), INIT_IN);
        T2(P("mlp.down_proj.weight"), d, f, S(w_down), INIT_OUT);
        if (c->mlp_bias) {
            T1(P("mlp.gate_proj.bias"), f, S(b_gate), INIT_BIAS);
            T1(P("mlp.up_proj.bias"), f, S(b_up), INIT_BIAS);
            T1(P("mlp.down_proj.bias"), d, S(b_down), INIT_BIAS);
        }
#undef P
#undef S
    }
    T1("model.norm.weight", d, out ? &w->final_norm : NULL, INIT_NORM);
    if (!c->tie_embeddings) T2("lm_head.weight", v, d, out ? &w->lm_head : NULL, INIT_IN);
#undef T1
#undef T2
    return n;
}

int model_check_memory(const model_config *c, uint64_t mem_limit, rh_err *e)
{
    uint64_t need = model_param_count(c) * sizeof(float);
    uint64_t have = mem_limit ? mem_limit : rh_mem_available();
    if (have && need > have) {
        char a[32], b[32];
        return rh_fail(e, "model '%s' needs %s for its f32 weights (%.2f B parameters) but only %s of memory is %s",
                       c->name, rh_fmt_bytes(need, a, sizeof a), (double)model_param_count(c) / 1e9,
                       rh_fmt_bytes(have, b, sizeof b), mem_limit ? "allowed" : "available");
    }
    return 0;
}

/* Allocates the model shell and its tensor list; weights not yet placed. */
static model *model_shell(const model_config *c, tensor_spec **specs, size_t *n, rh_err *e)
{
    model *m = calloc(1, sizeof *m);
    if (!m) {
        rh_fail(e, "out of memory");
        return NULL;
    }
    m->cfg = *c;
    m->w.layers = calloc(c->n_layers, sizeof *m->w.layers);
    *n = list_tensors(c, NULL, NULL);
    *specs = calloc(*n, sizeof **specs);
    if (!m->w.layers || !*specs) {
        free(*specs);
        model_free(m);
        rh_fail(e, "out of memory");
        return NULL;
    }
    list_tensors(c, &m->w, *specs);
    return m;
}

/* Offsets into the arena round up to 16 floats so every tensor starts on a
 * 64-byte line, as vector loads in the kernels prefer. */
static uint64_t round16(uint64_t n)
{
    return (n + 15) & ~(uint64_t)15;
}

static float uniform_at(uint64_t key, uint64_t i)
{
    /* Counter-based (splitmix64 of key + i): element i's value depends only
     * on the seed, the tensor's name and i, never on fill order. */
    uint64_t z = rh_mix64(key + (i + 1) * RH_GOLDEN_GAMMA);
    return (float)((double)(z >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;   /* [-1, 1) */
}

static void fill_dummy(const model_config *c, const tensor_spec *t, uint64_t seed, float *out)
{
    uint64_t key = XXH64(t->name, strlen(t->name), seed);
    uint64_t n = spec_numel(t);
    double fan_in = t->ndim == 2 ? (double)t->shape[1] : 1.0;
    const double sqrt3 = 1.7320508075688772;   /* uniform [-a, a] has std a / sqrt 3 */
    double amp;
    switch (t->kind) {
    case INIT_NORM:
        for (uint64_t i = 0; i < n; i++) out[i] = 1.0f + 0.1f * uniform_at(key, i);
        return;
    case INIT_EMBED: amp = sqrt3 / sqrt((double)c->hidden_size); break;
    case INIT_QK: amp = 2.0 * sqrt3 / sqrt(fan_in); break;
    case INIT_IN: amp = sqrt3 / sqrt(fan_in); break;
    case INIT_OUT: amp = sqrt3 / sqrt(fan_in * 2.0 * c->n_layers); break;
    default: amp = 0.02; break;
    }
    for (uint64_t i = 0; i < n; i++) out[i] = (float)amp * uniform_at(key, i);
}

model *model_new_dummy(const model_config *c, uint64_t seed, uint64_t mem_limit, rh_err *e)
{
    if (model_config_validate(c, c->name, e) || model_check_memory(c, mem_limit, e)) return NULL;
    tensor_spec *specs;
    size_t n;
    model *m = model_shell(c, &specs, &n, e);
    if (!m) return NULL;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += round16(spec_numel(&specs[i]));
    m->arena = aligned_alloc(64, total * sizeof(float));
    if (!m->arena) {
        char a[32];
        rh_fail(e, "model '%s': cannot allocate %s of weights", c->name, rh_fmt_bytes(total * 4, a, sizeof a));
        free(specs);
        model_free(m);
        return NULL;
    }
    uint64_t at = 0;
    rh_progress pg;   /* seconds for a 7B shape */
    rh_progress_begin(&pg, "seeding weights", n);
    for (size_t i = 0; i < n; i++) {
        fill_dummy(c, &specs[i], seed, m->arena + at);
        *specs[i].slot = m->arena + at;
        at += round16(spec_numel(&specs[i]));
        rh_progress_update(&pg, i + 1);
    }
    rh_progress_end(&pg);
    if (c->tie_embeddings) m->w.lm_head = m->w.embed;
    free(specs);
    return m;
}

model *model_new_shapes(const model_config *c, rh_err *e)
{
    if (model_config_validate(c, c->name, e)) return NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) return rh_fail(e, "model '%s': out of memory", c->name), NULL;
    m->cfg = *c;
    return m;
}

void model_free(model *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n_files; i++) st_close(m->files[i]);
    free(m->files);
    free(m->arena);
    free(m->w.layers);
    free(m);
}

/* ---- loading ---------------------------------------------------------- */

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void dir_of(const char *path, char *out, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, n, ".");
    else snprintf(out, n, "%.*s", (int)(slash - path), path);
}

static int add_file(model *m, const char *path, rh_err *e)
{
    for (size_t i = 0; i < m->n_files; i++)
        if (!strcmp(m->files[i]->path, path)) return 0;
    st_file **nf = realloc(m->files, (m->n_files + 1) * sizeof *nf);
    if (!nf) return rh_fail(e, "out of memory");
    m->files = nf;
    st_file *f = st_open(path, e);
    if (!f) return -1;
    m->files[m->n_files++] = f;
    return 0;
}

/* Opens the files of a sharded model named by its index's weight_map. */
static int open_index(model *m, const char *index, rh_err *e)
{
    json_error_t je;
    json_t *o = json_load_file(index, 0, &je);
    if (!o) {
        if (je.line < 0) return rh_fail(e, "%s: %s", index, je.text);
        return rh_fail(e, "%s:%d:%d: %s", index, je.line, je.column, je.text);
    }
    json_t *map = json_object_get(o, "weight_map");
    if (!json_is_object(map)) {
        json_decref(o);
        return rh_fail(e, "%s: field 'weight_map' is missing or not an object", index);
    }
    char dir[4096], path[8300];
    dir_of(index, dir, sizeof dir);
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        if (!json_is_string(v) || strchr(json_string_value(v), '/')) {
            rh_fail(e, "%s: field 'weight_map.%s': expected a file name in the same directory", index, key);
            json_decref(o);   /* after the message: key lives in o */
            return -1;
        }
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(v));
        if (add_file(m, path, e)) {
            json_decref(o);
            return -1;
        }
    }
    json_decref(o);
    return 0;
}

static const st_tensor *find_tensor(const model *m, const char *name, const char **file)
{
    for (size_t i = 0; i < m->n_files; i++) {
        const st_tensor *t = st_find(m->files[i], name);
        if (t) {
            *file = m->files[i]->path;
            return t;
        }
    }
    return NULL;
}

static void shape_text(const uint64_t *s, uint32_t nd, char *buf, size_t n)
{
    size_t at = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < nd && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%llu", i ? ", " : "", (unsigned long long)s[i]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

/* Checks that a stored tensor is the one the config expects. */
static int check_tensor(const char *file, const tensor_spec *s, const st_tensor *t, rh_err *e)
{
    if (t->dtype == ST_OTHER)
        return rh_fail(e, "%s: tensor '%s': dtype %s is not supported (F32, F16 or BF16)", file, s->name,
                       t->dtype_name);
    int same = t->ndim == s->ndim;
    for (uint32_t i = 0; same && i < s->ndim; i++) same = t->shape[i] == s->shape[i];
    if (!same) {
        char got[128], want[128];
        shape_text(t->shape, t->ndim, got, sizeof got);
        shape_text(s->shape, s->ndim, want, sizeof want);
        return rh_fail(e, "%s: tensor '%s': shape %s but the config needs %s", file, s->name, got, want);
    }
    return 0;
}

static int open_weights(model *m, const char *path, rh_err *e)
{
    char p[4200];
    if (is_dir(path)) {
        snprintf(p, sizeof p, "%s/model.safetensors", path);
        if (exists(p)) return add_file(m, p, e);
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", path);
        if (exists(p)) return open_index(m, p, e);
        return rh_fail(e, "%s: holds neither model.safetensors nor model.safetensors.index.json", path);
    }
    size_t len = strlen(path);
    if (len > 5 && !strcmp(path + len - 5, ".json")) return open_index(m, path, e);
    return add_file(m, path, e);
}

model *model_load(const char *path, const model_config *cfg, uint64_t mem_limit, rh_err *e)
{
    model_config c;
    if (cfg) {
        c = *cfg;
    } else {
        char dir[4096], cp[4200];
        if (is_dir(path)) snprintf(dir, sizeof dir, "%s", path);
        else dir_of(path, dir, sizeof dir);
        snprintf(cp, sizeof cp, "%s/config.json", dir);
        if (model_config_load(cp, &c, e)) return NULL;
    }
    if (model_config_validate(&c, c.name, e) || model_check_memory(&c, mem_limit, e)) return NULL;
    tensor_spec *specs;
    size_t n;
    model *m = model_shell(&c, &specs, &n, e);
    if (!m) return NULL;
    if (open_weights(m, path, e)) goto fail;

    /* Pass 1: find and check every tensor; size the arena for the ones
     * that cannot be used in place (not F32, or not 4-byte aligned). */
    const st_tensor **found = calloc(n, sizeof *found);
    if (!found) {
        rh_fail(e, "out of memory");
        goto fail;
    }
    uint64_t arena = 0;
    for (size_t i = 0; i < n; i++) {
        const char *file = path;
        found[i] = find_tensor(m, specs[i].name, &file);
        if (!found[i]) {
            rh_fail(e, "%s: tensor '%s' is missing", path, specs[i].name);
            free(found);
            goto fail;
        }
        if (check_tensor(file, &specs[i], found[i], e)) {
            free(found);
            goto fail;
        }
        if (found[i]->dtype != ST_F32 || ((uintptr_t)found[i]->data & 3)) arena += round16(found[i]->numel);
    }
    if (arena && !(m->arena = aligned_alloc(64, arena * sizeof(float)))) {
        char a[32];
        rh_fail(e, "%s: cannot allocate %s to convert the weights to f32", path, rh_fmt_bytes(arena * 4, a, sizeof a));
        free(found);
        goto fail;
    }
    /* Pass 2: place them. */
    uint64_t at = 0;
    rh_progress pg;   /* converting a 7B bf16 model reads 15 GB */
    rh_progress_begin(&pg, "loading weights", n);
    for (size_t i = 0; i < n; i++) {
        rh_progress_update(&pg, i);
        const st_tensor *t = found[i];
        if (t->dtype == ST_F32 && !((uintptr_t)t->data & 3)) {
            *specs[i].slot = t->data;
        } else {
            st_read_f32(t, m->arena + at);
            *specs[i].slot = m->arena + at;
            at += round16(t->numel);
        }
    }
    rh_progress_end(&pg);
    if (c.tie_embeddings) m->w.lm_head = m->w.embed;
    free(found);
    free(specs);
    return m;
fail:
    free(specs);
    model_free(m);
    return NULL;
}

/* ---- saving ----------------------------------------------------------- */

int model_save(const model *m, const char *dir, st_dtype dtype, rh_err *e)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return rh_fail(e, "%s: cannot create the directory: %s", dir, strerror(errno));
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (model_config_save(&m->cfg, path, e)) return -1;

    size_t n = list_tensors(&m->cfg, NULL, NULL);
    tensor_spec *specs = calloc(n, sizeof *specs);
    st_out *outs = calloc(n, sizeof *outs);
    if (!specs || !outs) {
        free(specs);
        free(outs);
        return rh_fail(e, "out of memory");
    }
    /* The list only reads through the slots here; the model is not changed. */
    list_tensors(&m->cfg, (model_weights *)&m->w, specs);
    for (size_t i = 0; i < n; i++)
        outs[i] = (st_out){specs[i].name, dtype, specs[i].ndim, {specs[i].shape[0], specs[i].shape[1]}, *specs[i].slot};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int r = st_write(path, outs, n, e);
    free(specs);
    free(outs);
    return r;
}

/* ---- a backend's copy: dtype, memory and tensor-parallel slice -------- */

/* How a tensor is divided among tensor-parallel ranks. Q, K, V, gate and up
 * produce per-head (per-column) outputs, so each rank keeps its rows; O and
 * down consume them, so each rank keeps the matching columns and produces a
 * partial sum. */
enum shard_kind { SHARD_WHOLE, SHARD_ROWS, SHARD_COLS, SHARD_LEAD };

static enum shard_kind shard_kind_of(const char *name)
{
    static const char *const rows[] = {"q_proj.", "k_proj.", "v_proj.", "gate_proj.", "up_proj."};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (strstr(name, rows[i])) return SHARD_ROWS;
    if (strstr(name, "o_proj.weight") || strstr(name, "down_proj.weight")) return SHARD_COLS;
    if (strstr(name, "o_proj.bias") || strstr(name, "down_proj.bias")) return SHARD_LEAD;
    return SHARD_WHOLE;
}

uint64_t model_shard_bytes(const model_config *c, const kern_table *K, uint32_t size)
{
    size_t n = list_tensors(c, NULL, NULL);
    tensor_spec *specs = calloc(n, sizeof *specs);
    model_weights w = {0};
    w.layers = calloc(c->n_layers ? c->n_layers : 1, sizeof *w.layers);
    uint64_t total = 0;
    if (specs && w.layers) {
        list_tensors(c, &w, specs);
        for (size_t i = 0; i < n; i++) {
            enum shard_kind k = shard_kind_of(specs[i].name);
            uint64_t numel = spec_numel(&specs[i]);
            if (k == SHARD_ROWS || k == SHARD_COLS) numel /= size;
            total += numel * (specs[i].ndim == 2 ? kern_dtype_size(K->weight_dtype) : sizeof(float));
        }
    }
    free(specs);
    free(w.layers);
    return total;
}

void model_shard_free(model_shard *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n_owned; i++) s->K->free(s->owned[i]);
    free(s->owned);
    if (s->owns_layers) free(s->w.layers);
    free(s);
}

/* Copies `rows` runs of `run` floats, `stride` apart from src, into new
 * backend memory as one contiguous block in dtype `dt`. Goes through a
 * bounded host buffer, so a 1 GB embedding never needs a second 1 GB. */
static void *upload_runs(model_shard *s, const float *src, uint64_t rows, uint64_t run, uint64_t stride,
                         kern_dtype dt)
{
    const kern_table *K = s->K;
    size_t es = kern_dtype_size(dt);
    void *dst = K->alloc((size_t)(rows * run * es));
    if (!dst) return NULL;
    void **no = realloc(s->owned, (s->n_owned + 1) * sizeof *no);
    if (!no) {
        K->free(dst);
        return NULL;
    }
    s->owned = no;
    s->owned[s->n_owned++] = dst;
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK * 4);
    if (!buf) return NULL;
    size_t fill = 0, at = 0;   /* elements in buf; bytes written to dst */
    for (uint64_t r = 0; r < rows; r++) {
        const float *p = src + r * stride;
        for (uint64_t i = 0; i < run;) {
            uint64_t take = run - i < CHUNK - fill ? run - i : CHUNK - fill;
            if (dt == KERN_BF16)
                for (uint64_t j = 0; j < take; j++) ((uint16_t *)buf)[fill + j] = rh_f32_to_bf16(p[i + j]);
            else
                memcpy(buf + fill * 4, p + i, take * 4);
            fill += take;
            i += take;
            if (fill == CHUNK) {
                K->copy_in((char *)dst + at, buf, fill * es);
                at += fill * es;
                fill = 0;
            }
        }
    }
    if (fill) K->copy_in((char *)dst + at, buf, fill * es);
    free(buf);
    return dst;
}

model_shard *model_shard_new(const model *m, const kern_table *K, uint32_t rank, uint32_t size, rh_err *e)
{
    const model_config *c = &m->cfg;
    if (!size || rank >= size) return rh_fail(e, "tensor parallel: rank %u of a group of %u", rank, size), NULL;
    if (c->n_heads % size || c->n_kv_heads % size || c->intermediate_size % size)
        return rh_fail(e, "tensor parallel: --tp-size %u must divide '%s''s %u heads, %u KV heads and MLP width %u",
                       size, c->name, c->n_heads, c->n_kv_heads, c->intermediate_size),
               NULL;
    uint64_t need = model_shard_bytes(c, K, size);
    uint64_t have = K->mem_available ? K->mem_available() : 0;
    if (!K->host_memory && have && need > have) {
        char a[32], b[32];
        return rh_fail(e, "model '%s' needs %s of %s memory for its weights but only %s is free", c->name,
                       rh_fmt_bytes(need, a, sizeof a), K->name, rh_fmt_bytes(have, b, sizeof b)),
               NULL;
    }
    model_shard *s = calloc(1, sizeof *s);
    if (!s) return rh_fail(e, "out of memory"), NULL;
    s->K = K;
    s->cfg = *c;
    s->cfg.n_heads /= size;
    s->cfg.n_kv_heads /= size;
    s->cfg.intermediate_size /= size;
    if (K->host_memory && K->weight_dtype == KERN_F32 && size == 1) {
        s->w = m->w;   /* in place */
        return s;
    }
    size_t n = list_tensors(c, NULL, NULL);
    tensor_spec *src = calloc(n, sizeof *src), *dst = calloc(n, sizeof *dst);
    s->w.layers = calloc(c->n_layers, sizeof *s->w.layers);
    s->owns_layers = 1;
    if (!src || !dst || !s->w.layers) {
        rh_fail(e, "out of memory");
        goto fail;
    }
    /* The same list twice: slots into the model's weights and into ours. */
    list_tensors(c, (model_weights *)&m->w, src);
    list_tensors(c, &s->w, dst);
    rh_progress pg;   /* seconds for a 7B model: every weight is converted */
    rh_progress_begin(&pg, "uploading weights", n);
    for (size_t i = 0; i < n; i++) {
        const tensor_spec *t = &src[i];
        const float *from = *t->slot;
        enum shard_kind k = shard_kind_of(t->name);
        kern_dtype dt = t->ndim == 2 ? K->weight_dtype : KERN_F32;
        uint64_t d0 = t->shape[0], d1 = t->ndim == 2 ? t->shape[1] : 1;
        void *p = NULL;
        if (k == SHARD_LEAD && rank != 0) {
            *dst[i].slot = NULL;
            rh_progress_update(&pg, i + 1);
            continue;
        }
        if (k == SHARD_ROWS)
            p = upload_runs(s, from + rank * (d0 / size) * d1, 1, d0 / size * d1, 0, dt);
        else if (k == SHARD_COLS)
            p = upload_runs(s, from + rank * (d1 / size), d0, d1 / size, d1, dt);
        else
            p = upload_runs(s, from, 1, d0 * d1, 0, dt);
        if (!p) {
            rh_progress_end(&pg);
            char a[32];
            rh_fail(e, "model '%s': out of %s memory uploading tensor '%s' (the weights need %s)", c->name, K->name,
                    t->name, rh_fmt_bytes(need, a, sizeof a));
            goto fail;
        }
        *dst[i].slot = p;
        rh_progress_update(&pg, i + 1);
    }
    rh_progress_end(&pg);
    if (c->tie_embeddings) s->w.lm_head = s->w.embed;
    free(src);
    free(dst);
    return s;
fail:
    free(src);
    free(dst);
    model_shard_free(s);
    return NULL;
}

static int dir_has(const char *dir, const char *name)
{
    char p[4200];
    struct stat st;
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
    return stat(p, &st) == 0;
}

const char *model_weights_of(const char *spec, const char *weights)
{
    struct stat st;
    if (weights) return weights;
    if (spec && stat(spec, &st) == 0 && S_ISDIR(st.st_mode) &&
        (dir_has(spec, "model.safetensors") || dir_has(spec, "model.safetensors.index.json")))
        return spec;
    return NULL;
}

model *model_open(const char *spec, const char *weights, uint64_t seed, uint64_t mem_limit, rh_err *e)
{
    model_config c;
    if (model_config_resolve(spec, &c, e)) return NULL;
    const char *w = model_weights_of(spec, weights);
    return w ? model_load(w, &c, mem_limit, e) : model_new_dummy(&c, seed, mem_limit, e);
}
