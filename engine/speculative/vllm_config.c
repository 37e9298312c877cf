/* vllm_config.c — vLLM's --speculative-config: see vllm_config.h. Field
 * names and methods as vLLM's SpeculativeConfig (vllm/config/speculative.py). */
#include "engine/speculative/vllm_config.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/core.h"

#define FLAG "--speculative-config"

static int u32_field(json_t *root, const char *key, uint32_t lo, uint32_t hi, uint32_t *out, rh_err *e)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return rh_fail(e, FLAG ": \"%s\" must be an integer %u..%u", key, lo, hi);
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

int spec_vllm_parse(const char *text, spec_vllm *out, rh_err *e)
{
    static const char *const methods[] = {"ngram", "draft_model", "eagle", "eagle3", "mtp", "deepseek_mtp"};
    static const char *const known[] = {"method", "num_speculative_tokens", "model", "prompt_lookup_min",
                                        "prompt_lookup_max", "draft_tensor_parallel_size", "quantization",
                                        "max_model_len", "revision", "code_revision", "disable_by_batch_size",
                                        "disable_padded_drafter_batch", "speculative_token_tree"};
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loads(text ? text : "", 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return rh_fail(e, FLAG ": not a JSON object (%s)", root ? "another JSON value" : je.text);
    }
    int rc = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        size_t i = 0;
        while (i < sizeof known / sizeof known[0] && strcmp(key, known[i])) i++;
        if (i == sizeof known / sizeof known[0]) {
            rc = rh_fail(e, FLAG ": unknown field \"%s\" (rehearse reads method, num_speculative_tokens, model, "
                            "prompt_lookup_min, prompt_lookup_max)", key);
            break;
        }
    }
    json_t *model = json_object_get(root, "model"), *method = json_object_get(root, "method");
    if (rc == 0 && model && !json_is_null(model)) {
        if (!json_is_string(model) || !json_string_length(model) || json_string_length(model) >= sizeof out->model)
            rc = rh_fail(e, FLAG ": \"model\" must be a path or name");
        else snprintf(out->model, sizeof out->model, "%s", json_string_value(model));
    }
    if (rc == 0 && method && !json_is_null(method)) {
        if (!json_is_string(method) || json_string_length(method) >= sizeof out->method) {
            rc = rh_fail(e, FLAG ": \"method\" must be a string");
        } else {
            const char *m = json_string_value(method);
            for (size_t i = 0; m[i]; i++) out->method[i] = (char)tolower((unsigned char)m[i]);
        }
    } else if (rc == 0) {
        if (!out->model[0]) rc = rh_fail(e, FLAG ": give \"method\" (ngram, eagle, ...) or a draft \"model\"");
        else snprintf(out->method, sizeof out->method, "draft_model");   /* vLLM's reading of a bare model */
    }
    if (rc == 0) {
        size_t i = 0;
        while (i < sizeof methods / sizeof methods[0] && strcmp(out->method, methods[i])) i++;
        if (i == sizeof methods / sizeof methods[0])
            rc = rh_fail(e, FLAG ": method \"%s\" is not one of ngram, draft_model, eagle, eagle3, mtp, deepseek_mtp",
                         out->method);
    }
    if (rc == 0 && !json_object_get(root, "num_speculative_tokens"))
        rc = rh_fail(e, FLAG ": \"num_speculative_tokens\" is needed (the drafts per decode)");
    if (rc == 0) rc = u32_field(root, "num_speculative_tokens", 1, 64, &out->num_tokens, e);
    if (rc == 0) rc = u32_field(root, "prompt_lookup_min", 1, 1024, &out->lookup_min, e);
    if (rc == 0) rc = u32_field(root, "prompt_lookup_max", 1, 1024, &out->lookup_max, e);
    if (rc == 0 && out->lookup_min && out->lookup_max && out->lookup_min > out->lookup_max)
        rc = rh_fail(e, FLAG ": prompt_lookup_min %u exceeds prompt_lookup_max %u", out->lookup_min, out->lookup_max);
    out->drafts_by_model = strcmp(out->method, "ngram") != 0;
    if (rc == 0 && !strcmp(out->method, "draft_model") && !out->model[0])
        rc = rh_fail(e, FLAG ": method draft_model needs \"model\"");
    json_decref(root);
    return rc;
}

int spec_vllm_apply(const spec_vllm *v, spec_config *spec, core_config *core, rh_err *e)
{
    if (!strcmp(v->method, "ngram")) {
        spec->algorithm = SPEC_NGRAM;
        if (v->lookup_min) spec->ngram_min = v->lookup_min;
        if (v->lookup_max) spec->ngram_max = v->lookup_max;
    } else if (!strcmp(v->method, "draft_model")) {
        spec->algorithm = SPEC_DRAFT;
        spec->draft_model = v->model;
    } else {
        return rh_fail(e, FLAG ": method %s drafts with a trained head the engine does not run; it drafts by ngram "
                          "or with a draft model (rehearse sim prices %s)", v->method, v->method);
    }
    core->spec_steps = v->num_tokens;
    return 0;
}
