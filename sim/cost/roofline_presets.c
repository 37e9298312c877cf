/* roofline_presets.c — model and GPU presets from their JSON files.
 *
 * Model files use the keys of a Hugging Face config.json, so a downloaded
 * config.json is itself a model preset: its other keys are ignored, and a
 * null (config.json writes "q_lora_rank": null) counts as absent. GPU files
 * are ours, so an unknown key there is an error (a typo would otherwise be a
 * silently ignored bandwidth). The ranges keep every product of the roofline
 * finite. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sim/cost/cost_impl.h"
#include "sim/cost/cost_presets.h"
#include "sim/cost/roofline.h"

static void set_name(char *dst, size_t n, const char *name, const char *path)
{
    if (name) {
        snprintf(dst, n, "%s", name);
        return;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    if (len > 5 && !strcmp(base + len - 5, ".json")) len -= 5;
    snprintf(dst, n, "%.*s", (int)len, base);
}

int rl_model_from_json(json_t *in, const cost_src *src, rl_model *m, rh_err *e)
{
    memset(m, 0, sizeof *m);
    if (!json_is_object(in)) return rh_fail(e, "%s: a model preset is a JSON object", src->label);
    json_t *o = json_copy(in);
    if (!o) return rh_fail(e, "%s: out of memory", src->label);
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(o, tmp, key, v) if (json_is_null(v)) json_object_del(o, key);

    int rc = -1, tie, bias, attn_bias;
    const char *name;
    uint32_t mf;
    const uint32_t DIM = 1u << 20;
    if (cj_string(o, "", "name", 0, NULL, &name, src, e) < 0) goto out;
    set_name(m->name, sizeof m->name, name, src->label);
    if (cj_uint(o, "", "hidden_size", 1, 0, 1, DIM, &m->hidden, src, e) < 0 ||
        cj_uint(o, "", "num_hidden_layers", 1, 0, 1, 4096, &m->layers, src, e) < 0 ||
        cj_uint(o, "", "num_attention_heads", 1, 0, 1, 65536, &m->heads, src, e) < 0 ||
        cj_uint(o, "", "num_key_value_heads", 0, m->heads, 1, m->heads, &m->kv_heads, src, e) < 0 ||
        cj_uint(o, "", "intermediate_size", 1, 0, 1, 1u << 22, &m->intermediate, src, e) < 0 ||
        cj_uint(o, "", "vocab_size", 1, 0, 1, 1u << 24, &m->vocab, src, e) < 0 ||
        cj_bool(o, "", "tie_word_embeddings", 0, &tie, src, e) < 0 ||
        cj_bool(o, "", "attention_bias", 0, &attn_bias, src, e) < 0 ||
        cj_bool(o, "", "qkv_bias", attn_bias, &bias, src, e) < 0)
        goto out;
    m->tie_embeddings = tie;
    m->qkv_bias = bias;
    if (!json_object_get(o, "head_dim") && m->hidden % m->heads) {
        cj_fail(src, "", "head_dim", e, "missing, and hidden_size %u is not a multiple of num_attention_heads %u",
                m->hidden, m->heads);
        goto out;
    }
    if (cj_uint(o, "", "head_dim", 0, m->hidden / m->heads, 1, 1u << 16, &m->head_dim, src, e) < 0) goto out;

    m->mla = json_object_get(o, "kv_lora_rank") != NULL;
    if (m->mla && (cj_uint(o, "", "kv_lora_rank", 1, 0, 1, DIM, &m->kv_lora_rank, src, e) < 0 ||
                   cj_uint(o, "", "q_lora_rank", 0, 0, 0, DIM, &m->q_lora_rank, src, e) < 0 ||
                   cj_uint(o, "", "qk_nope_head_dim", 1, 0, 1, 1u << 16, &m->qk_nope_dim, src, e) < 0 ||
                   cj_uint(o, "", "qk_rope_head_dim", 1, 0, 0, 1u << 16, &m->qk_rope_dim, src, e) < 0 ||
                   cj_uint(o, "", "v_head_dim", 1, 0, 1, 1u << 16, &m->v_head_dim, src, e) < 0))
        goto out;

    /* Mixtral's config says num_local_experts, DeepSeek's n_routed_experts. */
    const char *ekey = json_object_get(o, "n_routed_experts") ? "n_routed_experts" : "num_local_experts";
    m->moe = json_object_get(o, ekey) != NULL;
    if (m->moe) {
        if (cj_uint(o, "", ekey, 1, 0, 1, 65536, &m->experts, src, e) < 0 ||
            cj_uint(o, "", "num_experts_per_tok", 1, 0, 1, m->experts, &m->top_k, src, e) < 0 ||
            cj_uint(o, "", "moe_intermediate_size", 0, m->intermediate, 1, 1u << 22, &m->moe_intermediate, src,
                    e) < 0 ||
            cj_uint(o, "", "n_shared_experts", 0, 0, 0, 1024, &m->shared_experts, src, e) < 0 ||
            cj_uint(o, "", "first_k_dense_replace", 0, 0, 0, m->layers, &m->dense_layers, src, e) < 0 ||
            cj_uint(o, "", "moe_layer_freq", 0, 1, 1, 4096, &mf, src, e) < 0)
            goto out;
        if (mf != 1) {
            cj_fail(src, "", "moe_layer_freq", e, "%u: only models whose every layer past the first dense "
                    "ones is a MoE layer are modelled", mf);
            goto out;
        }
    }
    if (cj_uint(o, "", "num_nextn_predict_layers", 0, 0, 0, 16, &m->mtp_layers, src, e) < 0 ||
        cj_uint(o, "", "max_position_embeddings", 0, 0, 0, 1u << 26, &m->max_position, src, e) < 0)
        goto out;
    rc = 0;
out:
    json_decref(o);
    return rc;
}

/* The "collectives" object: measured links (collective.h). Without it, the
 * nominal bandwidths and no latency. */
static int links_from_json(json_t *c, const cost_src *src, rl_gpu *g, rh_err *e)
{
    static const char *const keys[] = {"allreduce_latency_s", "send_recv_latency_s", "ring_step_latency_s",
                                       "slow_hop_latency_s", "nvlink_GBps", "slow_link_GBps",
                                       "allreduce_nvlink_efficiency", "allreduce_slow_efficiency",
                                       "slow_links_per_domain", "nvlink_domain", "source", "comment", NULL};
    rl_links *l = &g->links;
    *l = (rl_links){.nvlink_Bps = g->nvlink_GBps * 1e9, .slow_Bps = g->ib_GBps * 1e9, .allreduce_nvlink_eff = 1,
                    .allreduce_slow_eff = 1, .slow_links = g->gpus_per_node, .nvlink_domain = g->gpus_per_node};
    if (!c) return 0;
    if (!json_is_object(c)) return cj_fail(src, "", "collectives", e, "must be an object (see COST.md)");
    const char *at = "collectives";
    double nvl, slow;
    if (cj_only_keys(c, at, keys, src, e) < 0 ||
        cj_number(c, at, "allreduce_latency_s", 0, 0, 0, 1, &l->allreduce_latency_s, src, e) < 0 ||
        cj_number(c, at, "send_recv_latency_s", 0, 0, 0, 1, &l->send_recv_latency_s, src, e) < 0 ||
        cj_number(c, at, "ring_step_latency_s", 0, 0, 0, 1, &l->ring_step_latency_s, src, e) < 0 ||
        cj_number(c, at, "slow_hop_latency_s", 0, 0, 0, 1, &l->slow_hop_latency_s, src, e) < 0 ||
        cj_number(c, at, "nvlink_GBps", 0, g->nvlink_GBps, 0.001, 1e7, &nvl, src, e) < 0 ||
        cj_number(c, at, "slow_link_GBps", 0, g->ib_GBps, 0.001, 1e7, &slow, src, e) < 0 ||
        cj_number(c, at, "allreduce_nvlink_efficiency", 0, 1, 1e-3, 1, &l->allreduce_nvlink_eff, src, e) < 0 ||
        cj_number(c, at, "allreduce_slow_efficiency", 0, 1, 1e-3, 1, &l->allreduce_slow_eff, src, e) < 0 ||
        cj_number(c, at, "slow_links_per_domain", 0, g->gpus_per_node, 1, 1024, &l->slow_links, src, e) < 0 ||
        cj_uint(c, at, "nvlink_domain", 0, g->gpus_per_node, 1, g->gpus_per_node, &l->nvlink_domain, src, e) < 0)
        return -1;
    l->nvlink_Bps = nvl * 1e9;
    l->slow_Bps = slow * 1e9;
    return 0;
}

/* The "kernels" object: per kind of kernel its measured parameters
 * (kernel_time.h); a kind absent, or the whole object, is the pure
 * roofline's. */
static int kernels_from_json(json_t *k, const cost_src *src, rl_gpu *g, rh_err *e)
{
    for (int i = 0; i < RL_K_N; i++) g->kern[i] = rl_kernel_pure();
    if (!k) return 0;
    if (!json_is_object(k)) return cj_fail(src, "", "kernels", e, "must be an object of kernel kinds (see COST.md)");
    const char *allowed[RL_K_N + 3];
    for (int i = 0; i < RL_K_N; i++) allowed[i] = rl_kernel_name(i);
    allowed[RL_K_N] = "source";
    allowed[RL_K_N + 1] = "comment";
    allowed[RL_K_N + 2] = NULL;
    if (cj_only_keys(k, "kernels", allowed, src, e) < 0) return -1;
    static const char *const fields[] = {"compute_efficiency", "memory_efficiency", "floor_s", "half_rows", "row_s",
                                         "index_s", NULL};
    for (int i = 0; i < RL_K_N; i++) {
        json_t *o = json_object_get(k, rl_kernel_name(i));
        if (!o) continue;
        char at[64];
        snprintf(at, sizeof at, "kernels.%s", rl_kernel_name(i));
        rl_kernel *p = &g->kern[i];
        if (!json_is_object(o)) return cj_fail(src, "kernels", rl_kernel_name(i), e, "must be an object");
        if (cj_only_keys(o, at, fields, src, e) < 0 ||
            cj_number(o, at, "compute_efficiency", 0, 1, 1e-3, 1, &p->compute_eff, src, e) < 0 ||
            cj_number(o, at, "memory_efficiency", 0, 1, 1e-3, 1, &p->memory_eff, src, e) < 0 ||
            cj_number(o, at, "floor_s", 0, 0, 0, 1, &p->floor_s, src, e) < 0 ||
            cj_number(o, at, "half_rows", 0, 0, 0, 1e6, &p->half_rows, src, e) < 0 ||
            cj_number(o, at, "row_s", 0, 0, 0, 1, &p->row_s, src, e) < 0 ||
            cj_number(o, at, "index_s", 0, 0, 0, 1, &p->index_s, src, e) < 0)
            return -1;
    }
    return 0;
}

int rl_gpu_from_json(json_t *o, const cost_src *src, rl_gpu *g, rh_err *e)
{
    static const char *const allowed[] = {"name", "comment", "source", "sources", "memory_GB", "hbm_GBps",
                                          "bf16_tflops", "fp8_tflops", "nvlink_GBps", "ib_GBps",
                                          "gpus_per_node", "collectives", "kernels", NULL};
    memset(g, 0, sizeof *g);
    if (!json_is_object(o)) return rh_fail(e, "%s: a GPU preset is a JSON object", src->label);
    const char *name;
    if (cj_only_keys(o, "", allowed, src, e) < 0 || cj_string(o, "", "name", 0, NULL, &name, src, e) < 0)
        return -1;
    set_name(g->name, sizeof g->name, name, src->label);
    if (cj_number(o, "", "memory_GB", 1, 0, 0.001, 1e6, &g->memory_GB, src, e) < 0 ||
        cj_number(o, "", "hbm_GBps", 1, 0, 0.001, 1e7, &g->hbm_GBps, src, e) < 0 ||
        cj_number(o, "", "bf16_tflops", 1, 0, 0.001, 1e6, &g->bf16_tflops, src, e) < 0 ||
        cj_number(o, "", "fp8_tflops", 1, 0, 0, 1e6, &g->fp8_tflops, src, e) < 0 ||
        cj_number(o, "", "nvlink_GBps", 1, 0, 0.001, 1e7, &g->nvlink_GBps, src, e) < 0 ||
        cj_number(o, "", "ib_GBps", 1, 0, 0.001, 1e7, &g->ib_GBps, src, e) < 0 ||
        cj_uint(o, "", "gpus_per_node", 1, 0, 1, 1024, &g->gpus_per_node, src, e) < 0)
        return -1;
    if (g->fp8_tflops > 0 && g->fp8_tflops < 0.001)
        return cj_fail(src, "", "fp8_tflops", e, "must be 0 (no FP8) or at least 0.001");
    if (links_from_json(json_object_get(o, "collectives"), src, g, e) < 0) return -1;
    return kernels_from_json(json_object_get(o, "kernels"), src, g, e);
}

/* Loads the JSON of a found preset; messages name the preset file. */
static json_t *load_preset(const char *path, rh_err *e)
{
    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!o) rh_fail(e, "%s: line %d column %d: %s", path, je.line, je.column, je.text);
    return o;
}

static int resolve(const char *category, const char *name, const char *key, const cost_src *src, void *out,
                   rh_err *e)
{
    char path[4096];
    rh_err why;
    if (cost_preset_find(category, name, src ? src->dir : NULL, path, sizeof path, &why) < 0) {
        if (src) return cj_fail(src, "", key, e, "%s", why.msg);
        return rh_fail(e, "%s", why.msg);
    }
    json_t *o = load_preset(path, e);
    if (!o) return -1;
    cost_src psrc = {path, "."};
    int rc = !strcmp(category, "models") ? rl_model_from_json(o, &psrc, out, e)
                                         : rl_gpu_from_json(o, &psrc, out, e);
    json_decref(o);
    return rc;
}

int rl_model_resolve(const char *name, const char *key, const cost_src *src, rl_model *m, rh_err *e)
{
    return resolve("models", name, key, src, m, e);
}

int rl_gpu_resolve(const char *name, const char *key, const cost_src *src, rl_gpu *g, rh_err *e)
{
    return resolve("gpus", name, key, src, g, e);
}

int rl_model_load(const char *name, rl_model *m, rh_err *e)
{
    return resolve("models", name, "model", NULL, m, e);
}

int rl_gpu_load(const char *name, rl_gpu *g, rh_err *e)
{
    return resolve("gpus", name, "gpu", NULL, g, e);
}

void rl_model_params(const rl_model *m, rl_params *p)
{
    double h = m->hidden, L = m->layers, V = m->vocab;
    double attn;
    if (m->mla) {
        double qr = m->q_lora_rank, kr = m->kv_lora_rank, rope = m->qk_rope_dim, nope = m->qk_nope_dim;
        double qk = nope + rope, vd = m->v_head_dim, nh = m->heads;
        double q = qr > 0 ? h * qr + qr + qr * nh * qk : h * nh * qk;   /* q_a, its norm, q_b */
        attn = q + h * (kr + rope) + kr + kr * nh * (nope + vd) + nh * vd * h;
    } else {
        double qkv = (m->heads + 2.0 * m->kv_heads) * m->head_dim;
        attn = h * qkv + (m->qkv_bias ? qkv : 0) + (double)m->heads * m->head_dim * h;
    }
    double norms = 2 * h;
    double dense_mlp = 3 * h * m->intermediate;
    double Ld = m->moe ? m->dense_layers : L, Lm = L - Ld;
    double expert = 3 * h * m->moe_intermediate;
    double router = m->moe ? h * m->experts : 0;
    double moe_layer_shared = m->moe ? m->shared_experts * expert + router : 0;
    double embed = V * h, head = m->tie_embeddings ? 0 : V * h;

    p->experts = Lm * m->experts * expert;
    p->total = embed + head + h + L * (attn + norms) + Ld * dense_mlp + p->experts + Lm * moe_layer_shared;
    p->active = (m->tie_embeddings ? embed : head) + h + L * (attn + norms) + Ld * dense_mlp +
                Lm * (m->top_k * expert + moe_layer_shared);
    /* An MTP module: enorm, hnorm, eh_proj and one decoder layer (a MoE
     * layer in a MoE model) plus the norm before the shared head. */
    double layer = attn + norms + (m->moe ? m->experts * expert + moe_layer_shared : dense_mlp);
    p->mtp = m->mtp_layers * (2 * h + 2 * h * h + layer + h);
}
