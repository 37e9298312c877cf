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
#include <stdlib.h>
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
            cj_uint(o, "", "moe_layer_freq", 0, 1, 1, 4096, &mf, src, e) < 0 ||
            cj_uint(o, "", "n_group", 0, 0, 0, m->experts, &m->n_group, src, e) < 0 ||
            cj_uint(o, "", "topk_group", 0, 0, 0, m->n_group, &m->topk_group, src, e) < 0)
            goto out;
        if (m->n_group && (m->experts % m->n_group || !m->topk_group)) {
            cj_fail(src, "", "n_group", e, "%u groups: they must divide the %u experts, with topk_group 1..%u",
                    m->n_group, m->experts, m->n_group);
            goto out;
        }
        if (mf != 1) {
            cj_fail(src, "", "moe_layer_freq", e, "%u: only models whose every layer past the first dense "
                    "ones is a MoE layer are modelled", mf);
            goto out;
        }
    }
    if (cj_uint(o, "", "num_nextn_predict_layers", 0, 0, 0, 16, &m->mtp_layers, src, e) < 0 ||
        cj_uint(o, "", "max_position_embeddings", 0, 0, 0, 1u << 26, &m->max_position, src, e) < 0)
        goto out;
    /* DeepSeek-V3/R1 publish FP8 weights (block-scaled e4m3): a server
     * loads them as they are, where the GPU has FP8 tensor cores */
    json_t *q = json_object_get(o, "quantization_config");
    if (q) {
        const char *method;
        if (!json_is_object(q)) {
            cj_fail(src, "", "quantization_config", e, "must be an object, as in config.json");
            goto out;
        }
        if (cj_string(q, "quantization_config", "quant_method", 1, NULL, &method, src, e) < 0) goto out;
        m->fp8_checkpoint = !strcmp(method, "fp8");
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

/* The "deepep" object of "collectives": DeepEP's dispatch and combine
 * (collective.h); absent fields fall back to the links'. */
static int deepep_from_json(json_t *d, const cost_src *src, rl_links *l, rh_err *e)
{
    static const char *const keys[] = {"normal_latency_s", "normal_nvlink_GBps", "normal_rdma_GBps",
                                       "low_latency_latency_s", "low_latency_nvlink_GBps", "low_latency_rdma_GBps",
                                       "source", "comment", NULL};
    if (!d) return 0;
    const char *at = "collectives.deepep";
    if (!json_is_object(d)) return cj_fail(src, "collectives", "deepep", e, "must be an object (see COST.md)");
    double nn, nr, ln, lr;
    if (cj_only_keys(d, at, keys, src, e) < 0 ||
        cj_number(d, at, "normal_latency_s", 0, 0, 0, 1, &l->ep_normal_latency_s, src, e) < 0 ||
        cj_number(d, at, "normal_nvlink_GBps", 0, 0, 0, 1e7, &nn, src, e) < 0 ||
        cj_number(d, at, "normal_rdma_GBps", 0, 0, 0, 1e7, &nr, src, e) < 0 ||
        cj_number(d, at, "low_latency_latency_s", 0, 0, 0, 1, &l->ep_ll_latency_s, src, e) < 0 ||
        cj_number(d, at, "low_latency_nvlink_GBps", 0, 0, 0, 1e7, &ln, src, e) < 0 ||
        cj_number(d, at, "low_latency_rdma_GBps", 0, 0, 0, 1e7, &lr, src, e) < 0)
        return -1;
    l->ep_normal_nvlink_Bps = nn * 1e9, l->ep_normal_rdma_Bps = nr * 1e9;
    l->ep_ll_nvlink_Bps = ln * 1e9, l->ep_ll_rdma_Bps = lr * 1e9;
    return 0;
}

/* The "collectives" object: measured links (collective.h). Without it, the
 * nominal bandwidths and no latency. */
static int links_from_json(json_t *c, const cost_src *src, rl_gpu *g, rh_err *e)
{
    static const char *const keys[] = {"allreduce_latency_s", "send_recv_latency_s", "ring_step_latency_s",
                                       "slow_hop_latency_s", "nvlink_GBps", "slow_link_GBps",
                                       "allreduce_nvlink_efficiency", "allreduce_slow_efficiency",
                                       "slow_links_per_domain", "nvlink_domain", "custom_allreduce_latency_s",
                                       "custom_allreduce_GBps", "deepep", "source", "comment", "sources", NULL};
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
    double car;
    if (cj_number(c, at, "custom_allreduce_latency_s", 0, 0, 0, 1, &l->custom_allreduce_latency_s, src, e) < 0 ||
        cj_number(c, at, "custom_allreduce_GBps", 0, 0, 0, 1e7, &car, src, e) < 0)
        return -1;
    l->custom_allreduce_Bps = car * 1e9;
    return deepep_from_json(json_object_get(c, "deepep"), src, l, e);
}

static int gpu_from_json(json_t *o, const cost_src *src, rl_gpu *g, int depth, rh_err *e);
static int resolve_gpu(const char *name, const char *key, const cost_src *src, rl_gpu *g, int depth, rh_err *e);

/* "carry_from": the kernels of a GPU measured on another of the same
 * architecture. Efficiencies are shares of each GPU's own peaks, so they
 * carry as they are; a GEMM's ramp (half_rows: the rows a small GEMM costs
 * as, at the compute rate) is where its compute meets its weights' bytes,
 * so it scales with the ridge point, peak FLOP rate over bandwidth. */
static int carry_kernels(const char *from, const cost_src *src, rl_gpu *g, int depth, rh_err *e)
{
    if (depth > 4) return cj_fail(src, "kernels", "carry_from", e, "'%s': a chain of more than 4 presets", from);
    rl_gpu *ref = malloc(sizeof *ref);
    if (!ref) return rh_fail(e, "out of memory");
    int rc = resolve_gpu(from, "kernels.carry_from", src, ref, depth + 1, e);
    if (rc == 0) {
        double ridge = (g->bf16_tflops / g->hbm_GBps) / (ref->bf16_tflops / ref->hbm_GBps);
        for (int i = 0; i < RL_K_N; i++) {
            g->kern[i] = ref->kern[i];
            if (i == RL_K_GEMM || i == RL_K_GEMM_FP8 || i == RL_K_GROUPED || i == RL_K_FUSED_MOE)
                g->kern[i].half_rows *= ridge;
            /* a ceiling is the chip's it was measured on: another SM count
             * is another configuration of the die (the H20's 78 SMs reach
             * 86% of their peak in the same Triton kernel) */
            if (g->sms != ref->sms || !g->sms) g->kern[i].max_tflops = 0;
        }
    }
    free(ref);
    return rc;
}

/* The "kernels" object: per kind of kernel its measured parameters
 * (kernel_time.h), or those carried from another GPU; a kind absent, or the
 * whole object, is the pure roofline's, except the FP8 and grouped GEMMs,
 * which take the plain GEMM's, and the Triton fused MoE, which takes the
 * grouped GEMM's (its fields, where it names only some). */
static int kernels_from_json(json_t *k, const cost_src *src, rl_gpu *g, int depth, rh_err *e)
{
    for (int i = 0; i < RL_K_N; i++) g->kern[i] = rl_kernel_pure();
    if (!k) return 0;
    if (!json_is_object(k)) return cj_fail(src, "", "kernels", e, "must be an object of kernel kinds (see COST.md)");
    const char *allowed[RL_K_N + 4];
    for (int i = 0; i < RL_K_N; i++) allowed[i] = rl_kernel_name(i);
    allowed[RL_K_N] = "source";
    allowed[RL_K_N + 1] = "comment";
    allowed[RL_K_N + 2] = "carry_from";
    allowed[RL_K_N + 3] = NULL;
    if (cj_only_keys(k, "kernels", allowed, src, e) < 0) return -1;
    const char *from;
    if (cj_string(k, "kernels", "carry_from", 0, NULL, &from, src, e) < 0) return -1;
    if (from && carry_kernels(from, src, g, depth, e) < 0) return -1;
    static const char *const fields[] = {"compute_efficiency", "memory_efficiency", "floor_s", "half_rows", "row_s",
                                         "index_s", "max_tflops", "source", NULL};
    bool given[RL_K_N] = {0};
    for (int i = 0; i < RL_K_N; i++) {
        json_t *o = json_object_get(k, rl_kernel_name(i));
        if (!o) continue;
        given[i] = true;
        char at[64];
        snprintf(at, sizeof at, "kernels.%s", rl_kernel_name(i));
        rl_kernel *p = &g->kern[i];
        rl_kernel base = from ? *p : rl_kernel_pure();
        if (!from && i == RL_K_FUSED_MOE) base = g->kern[given[RL_K_GROUPED] ? RL_K_GROUPED : RL_K_GEMM];
        if (!json_is_object(o)) return cj_fail(src, "kernels", rl_kernel_name(i), e, "must be an object");
        if (cj_only_keys(o, at, fields, src, e) < 0 ||
            cj_number(o, at, "compute_efficiency", 0, base.compute_eff, 1e-3, 1, &p->compute_eff, src, e) < 0 ||
            cj_number(o, at, "memory_efficiency", 0, base.memory_eff, 1e-3, 1, &p->memory_eff, src, e) < 0 ||
            cj_number(o, at, "floor_s", 0, base.floor_s, 0, 1, &p->floor_s, src, e) < 0 ||
            cj_number(o, at, "half_rows", 0, base.half_rows, 0, 1e6, &p->half_rows, src, e) < 0 ||
            cj_number(o, at, "row_s", 0, base.row_s, 0, 1, &p->row_s, src, e) < 0 ||
            cj_number(o, at, "index_s", 0, base.index_s, 0, 1, &p->index_s, src, e) < 0 ||
            cj_number(o, at, "max_tflops", 0, base.max_tflops, 0, 1e6, &p->max_tflops, src, e) < 0)
            return -1;
    }
    if (!from) {
        if (!given[RL_K_GEMM_FP8]) g->kern[RL_K_GEMM_FP8] = g->kern[RL_K_GEMM];
        if (!given[RL_K_GROUPED]) g->kern[RL_K_GROUPED] = g->kern[RL_K_GEMM];
        if (!given[RL_K_FUSED_MOE]) g->kern[RL_K_FUSED_MOE] = g->kern[RL_K_GROUPED];
    }
    return 0;
}

int rl_gpu_from_json(json_t *o, const cost_src *src, rl_gpu *g, rh_err *e)
{
    return gpu_from_json(o, src, g, 0, e);
}

static int gpu_from_json(json_t *o, const cost_src *src, rl_gpu *g, int depth, rh_err *e)
{
    static const char *const allowed[] = {"name", "comment", "source", "sources", "memory_GB", "hbm_GBps",
                                          "bf16_tflops", "fp8_tflops", "nvlink_GBps", "ib_GBps",
                                          "gpus_per_node", "sms", "host_link_GBps", "collectives", "kernels",
                                          NULL};
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
        cj_uint(o, "", "gpus_per_node", 1, 0, 1, 1024, &g->gpus_per_node, src, e) < 0 ||
        cj_uint(o, "", "sms", 0, 0, 0, 100000, &g->sms, src, e) < 0 ||
        cj_number(o, "", "host_link_GBps", 0, 0, 0, 1e6, &g->host_link_GBps, src, e) < 0)
        return -1;
    if (g->fp8_tflops > 0 && g->fp8_tflops < 0.001)
        return cj_fail(src, "", "fp8_tflops", e, "must be 0 (no FP8) or at least 0.001");
    if (links_from_json(json_object_get(o, "collectives"), src, g, e) < 0) return -1;
    return kernels_from_json(json_object_get(o, "kernels"), src, g, depth, e);
}

/* Loads the JSON of a found preset; messages name the preset file. */
static json_t *load_preset(const char *path, rh_err *e)
{
    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!o) rh_fail(e, "%s: line %d column %d: %s", path, je.line, je.column, je.text);
    return o;
}

/* "hosts" presets: how a serving framework runs a forward from the host
 * (roofline.h's rl_host; COST.md cites each number). */
static int host_from_json(json_t *o, const cost_src *src, rl_host *h, rh_err *e)
{
    static const char *const allowed[] = {"name", "comment", "source", "sources", "kernel_min_s", "eager_launch_s",
                                          "step_exposed_s", "schedule_s", "per_request_s", "per_token_s",
                                          "arrival_s", "prefill_graph", NULL};
    memset(h, 0, sizeof *h);
    if (!json_is_object(o)) return rh_fail(e, "%s: a host preset is a JSON object", src->label);
    const char *name;
    int pg;
    if (cj_only_keys(o, "", allowed, src, e) < 0 || cj_string(o, "", "name", 0, NULL, &name, src, e) < 0 ||
        cj_number(o, "", "kernel_min_s", 1, 0, 0, 1, &h->kernel_min_s, src, e) < 0 ||
        cj_number(o, "", "eager_launch_s", 1, 0, 0, 1, &h->eager_launch_s, src, e) < 0 ||
        cj_number(o, "", "step_exposed_s", 1, 0, 0, 10, &h->step_exposed_s, src, e) < 0 ||
        cj_number(o, "", "schedule_s", 1, 0, 0, 10, &h->schedule_s, src, e) < 0 ||
        cj_number(o, "", "per_request_s", 1, 0, 0, 1, &h->per_request_s, src, e) < 0 ||
        cj_number(o, "", "per_token_s", 1, 0, 0, 1, &h->per_token_s, src, e) < 0 ||
        cj_number(o, "", "arrival_s", 0, 0, 0, 10, &h->arrival_s, src, e) < 0 ||
        cj_bool(o, "", "prefill_graph", 0, &pg, src, e) < 0)
        return -1;
    h->prefill_graph = pg;
    set_name(h->name, sizeof h->name, name, src->label);
    return 0;
}

static int resolve_any(const char *category, const char *name, const char *key, const cost_src *src, void *out,
                       int depth, rh_err *e)
{
    char path[4096];
    rh_err why;
    if (cost_preset_find(category, name, src ? src->dir : NULL, path, sizeof path, &why) < 0) {
        if (src) return cj_fail(src, "", key, e, "%s", why.msg);
        return rh_fail(e, "%s", why.msg);
    }
    json_t *o = load_preset(path, e);
    if (!o) return -1;
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    cost_src psrc = {path, dir};
    int rc = !strcmp(category, "models") ? rl_model_from_json(o, &psrc, out, e)
             : !strcmp(category, "hosts") ? host_from_json(o, &psrc, out, e)
                                          : gpu_from_json(o, &psrc, out, depth, e);
    json_decref(o);
    return rc;
}

static int resolve(const char *category, const char *name, const char *key, const cost_src *src, void *out,
                   rh_err *e)
{
    return resolve_any(category, name, key, src, out, 0, e);
}

static int resolve_gpu(const char *name, const char *key, const cost_src *src, rl_gpu *g, int depth, rh_err *e)
{
    return resolve_any("gpus", name, key, src, g, depth, e);
}

int rl_model_resolve(const char *name, const char *key, const cost_src *src, rl_model *m, rh_err *e)
{
    return resolve("models", name, key, src, m, e);
}

int rl_gpu_resolve(const char *name, const char *key, const cost_src *src, rl_gpu *g, rh_err *e)
{
    return resolve("gpus", name, key, src, g, e);
}

int rl_host_resolve(const char *name, const char *key, const cost_src *src, rl_host *h, rh_err *e)
{
    return resolve("hosts", name, key, src, h, e);
}

int rl_model_load(const char *name, rl_model *m, rh_err *e)
{
    return resolve("models", name, "model", NULL, m, e);
}

int rl_gpu_load(const char *name, rl_gpu *g, rh_err *e)
{
    return resolve("gpus", name, "gpu", NULL, g, e);
}

int rl_host_load(const char *name, rl_host *h, rh_err *e)
{
    return resolve("hosts", name, "host", NULL, h, e);
}

uint32_t rl_sglang_cuda_graph_max_bs(double gpu_bytes, uint32_t tp)
{
    double gb = gpu_bytes / 1073741824.0;
    if (gb < 20) return 8;
    if (gb < 35) return tp < 4 ? 24 : 80;
    if (gb < 60) return tp < 4 ? 32 : 160;
    if (gb < 160) return tp < 4 ? 256 : 512;
    return 512;
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
