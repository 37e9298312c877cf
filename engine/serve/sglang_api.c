/* sglang_api.c — SGLang's /generate: its body turned into the completions
 * body it amounts to (so one parser checks both), and its responses. See
 * sglang_api.h for the shapes. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/sglang_api.h"
#include "engine/serve/server_text.h"
#include "traces/trace.h"

#define SG_DEFAULT_MAX_NEW_TOKENS 128   /* SGLang's SamplingParams default */

/* /generate's name of a completions field, for messages. */
static const struct {
    const char *completions, *generate;
} RENAMED[] = {
    {"prompt", "text"},
    {"max_tokens", "sampling_params.max_new_tokens"},
    {"min_tokens", "sampling_params.min_new_tokens"},
};

static const char *SAMPLING_SAME[] = {"temperature",        "top_p",          "top_k",      "min_p",
                                      "frequency_penalty",  "presence_penalty", "repetition_penalty",
                                      "stop",               "stop_token_ids", "ignore_eos", "n",
                                      "logit_bias",         "skip_special_tokens"};

/* Parameters of /generate that would change the output and are not done. */
static const char *SAMPLING_REFUSED[] = {"regex", "json_schema", "ebnf", "structural_tag", "custom_params"};

static int refused(oa_error *e, const char *name, const char *why)
{
    return oa_fail(e, 400, name, "unsupported_parameter", "'%s' is not supported by this server: %s", name, why);
}

/* Names the field as /generate spells it, in the parameter and the message. */
static void rename_fields(oa_error *e)
{
    for (size_t i = 0; i < sizeof RENAMED / sizeof *RENAMED; i++) {
        if (strcmp(e->param, RENAMED[i].completions)) continue;
        snprintf(e->param, sizeof e->param, "%s", RENAMED[i].generate);
        char quoted[48], *at;
        snprintf(quoted, sizeof quoted, "'%s'", RENAMED[i].completions);
        if ((at = strstr(e->message, quoted))) {
            char rest[sizeof e->message];
            snprintf(rest, sizeof rest, "%s", at + strlen(quoted));
            snprintf(at, sizeof e->message - (size_t)(at - e->message), "'%s'%s", RENAMED[i].generate, rest);
        }
    }
}

static bool is_set(json_t *v)
{
    if (!v || json_is_null(v) || json_is_false(v)) return false;
    if (json_is_string(v)) return json_string_length(v) > 0;
    if (json_is_array(v)) return json_array_size(v) > 0;
    return true;
}

/* The completions body /generate's body amounts to, or NULL with e filled. */
static json_t *as_completions(json_t *root, oa_error *e)
{
    if (!json_is_object(root)) return oa_fail(e, 400, NULL, "invalid_json", "the body must be a JSON object"), NULL;
    json_t *text = json_object_get(root, "text"), *ids = json_object_get(root, "input_ids");
    if (is_set(text) && is_set(ids))
        return oa_fail(e, 400, "text", "invalid_value", "give either 'text' or 'input_ids', not both"), NULL;
    /* input_ids are ids: a list of them, or a batch of such lists; text
     * under that name would be tokenized as a prompt */
    if (is_set(ids)) {
        bool batch = json_is_array(ids) && json_is_array(json_array_get(ids, 0));
        for (size_t i = 0; json_is_array(ids) && i < json_array_size(ids); i++) {
            json_t *v = json_array_get(ids, i);
            if (batch ? !json_is_array(v) : !json_is_integer(v))
                return oa_fail(e, 400, "input_ids", "invalid_type",
                               "'input_ids[%zu]' must be %s; text goes in 'text'", i,
                               batch ? "a list of token ids" : "a token id (an integer)"),
                       NULL;
        }
        if (!json_is_array(ids))
            return oa_fail(e, 400, "input_ids", "invalid_type",
                           "'input_ids' must be a list of token ids (or of such lists); text goes in 'text'"),
                   NULL;
    }
    json_t *prompt = is_set(ids) ? ids : text;
    if (!prompt || json_is_null(prompt))
        return oa_fail(e, 400, "text", "missing_required_parameter", "'text' or 'input_ids' is required"), NULL;
    if (is_set(json_object_get(root, "return_logprob")))
        return refused(e, "return_logprob", "logprobs come from /v1/completions (logprobs, echo)"), NULL;
    json_t *lora = json_object_get(root, "lora_path");
    if (is_set(lora) && !json_is_string(lora))
        return refused(e, "lora_path", "one adapter a request (a name); a list per prompt is not taken"), NULL;
    if (is_set(json_object_get(root, "image_data"))) return refused(e, "image_data", "the models here take text"), NULL;
    json_t *sp = json_object_get(root, "sampling_params");
    if (sp && !json_is_null(sp) && !json_is_object(sp))
        return oa_fail(e, 400, "sampling_params", "invalid_type", "'sampling_params' must be an object"), NULL;
    json_t *out = json_object();
    if (!out) return oa_fail(e, 500, NULL, NULL, "out of memory"), NULL;
    json_object_set(out, "prompt", prompt);
    json_t *stream = json_object_get(root, "stream"), *priority = json_object_get(root, "priority");
    if (stream) json_object_set(out, "stream", stream);
    if (priority) json_object_set(out, "priority", priority);
    if (is_set(lora)) json_object_set(out, "lora_path", lora);
    json_t *max_new = json_is_object(sp) ? json_object_get(sp, "max_new_tokens") : NULL;
    json_object_set_new(out, "max_tokens", max_new && !json_is_null(max_new) ? json_incref(max_new)
                                                                                : json_integer(SG_DEFAULT_MAX_NEW_TOKENS));
    if (json_is_object(sp)) {
        json_t *v = json_object_get(sp, "min_new_tokens");
        if (v) json_object_set(out, "min_tokens", v);
        for (size_t i = 0; i < sizeof SAMPLING_SAME / sizeof *SAMPLING_SAME; i++)
            if ((v = json_object_get(sp, SAMPLING_SAME[i]))) json_object_set(out, SAMPLING_SAME[i], v);
        for (size_t i = 0; i < sizeof SAMPLING_REFUSED / sizeof *SAMPLING_REFUSED; i++)
            if (is_set(json_object_get(sp, SAMPLING_REFUSED[i]))) {
                json_decref(out);
                char name[64];
                snprintf(name, sizeof name, "sampling_params.%s", SAMPLING_REFUSED[i]);
                return refused(e, name, "constrained decoding is not supported"), NULL;
            }
        if (is_set(json_object_get(sp, "no_stop_trim"))) {
            json_decref(out);
            return refused(e, "sampling_params.no_stop_trim", "the stop string is never kept in the text"), NULL;
        }
    }
    return out;
}

int sg_parse_generate(const char *body, size_t n, const oa_limits *lim, oa_request *out, oa_error *e)
{
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = json_loadb(body, n, 0, &jerr);
    if (!root)
        return oa_fail(e, 400, NULL, "invalid_json", "the body is not valid JSON (line %d, column %d): %s", jerr.line,
                       jerr.column, jerr.text);
    json_t *rid = json_object_get(root, "rid");
    char rid_text[sizeof out->rid] = "";
    if (is_set(rid)) {
        const char *r = json_string_value(rid);
        size_t len = r ? strlen(r) : 0;
        if (!r || !len || len >= sizeof rid_text || strspn(r, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789-_.:") != len) {
            json_decref(root);
            return oa_fail(e, 400, "rid", "invalid_value",
                           "'rid' must be a string of 1 to %zu letters, digits and -_.: (a batch's rids are not taken)",
                           sizeof rid_text - 1);
        }
        memcpy(rid_text, r, len + 1);
    }
    json_t *c = as_completions(root, e);
    json_decref(root);
    if (!c) return -1;
    char *text = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    if (!text) return oa_fail(e, 500, NULL, NULL, "out of memory");
    oa_limits l = *lim;
    l.model = NULL;   /* /generate names no model */
    int rc = oa_parse(OA_COMPLETIONS, text, strlen(text), &l, out, e);
    free(text);
    if (rc < 0) {
        rename_fields(e);
        return -1;
    }
    out->kind = OA_GENERATE;
    memcpy(out->rid, rid_text, sizeof out->rid);
    return 0;
}

/* ---- writing ---- */
static json_t *finish_value(const sg_choice *c)
{
    switch (c->finish) {
    case TR_FINISH_LENGTH: return json_pack("{s:s,s:I}", "type", "length", "length", (json_int_t)c->n_ids);
    case TR_FINISH_STOP:
        return c->matched >= 0 ? json_pack("{s:s,s:I}", "type", "stop", "matched", (json_int_t)c->matched)
                               : json_pack("{s:s}", "type", "stop");
    case TR_FINISH_ABORT:
    case TR_FINISH_ERROR: return json_pack("{s:s}", "type", "abort");
    default: return json_null();
    }
}

static json_t *choice_value(const oa_ident *id, const sg_choice *c, bool with_ids)
{
    size_t m = 0;
    char *clean = sv_utf8_clean(c->text ? c->text : "", c->text ? c->len : 0, &m);
    json_t *text = clean ? json_stringn(clean, m) : NULL;
    free(clean);
    json_t *meta = json_pack("{s:s,s:o,s:I,s:I,s:I,s:f}", "id", id->id, "finish_reason", finish_value(c),
                             "prompt_tokens", (json_int_t)c->prompt_tokens, "completion_tokens", (json_int_t)c->n_ids,
                             "cached_tokens", (json_int_t)c->cached_tokens, "e2e_latency", c->e2e_latency);
    if (meta && c->tiers)
        json_object_set_new(meta, "cached_tokens_details",
                            json_pack("{s:I,s:I}", "device", (json_int_t)(c->cached_tokens - c->cached_host), "host",
                                      (json_int_t)c->cached_host));
    json_t *o = json_pack("{s:o,s:o}", "text", text ? text : json_string(""), "meta_info", meta);
    if (o && with_ids) {
        json_t *a = json_array();
        for (uint32_t i = 0; a && i < c->n_ids; i++) json_array_append_new(a, json_integer(c->ids[i]));
        json_object_set_new(o, "output_ids", a);
    }
    return o;
}

static char *dump(json_t *o, bool event, size_t *len)
{
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body || !event) {
        if (body && len) *len = strlen(body);
        return body;
    }
    size_t n = strlen(body);
    char *out = malloc(n + 9);
    if (out) {
        memcpy(out, "data: ", 6);
        memcpy(out + 6, body, n);
        memcpy(out + 6 + n, "\n\n", 3);
        if (len) *len = n + 8;
    }
    free(body);
    return out;
}

char *sg_response(const oa_ident *id, const sg_choice *c, uint32_t n, size_t *len)
{
    if (n == 1) return dump(choice_value(id, c, true), false, len);
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < n; i++) json_array_append_new(a, choice_value(id, &c[i], true));
    return dump(a, false, len);
}

char *sg_event(const oa_ident *id, uint32_t index, bool batch, const sg_choice *c, size_t *len)
{
    json_t *o = choice_value(id, c, false);
    if (o && batch) json_object_set_new(o, "index", json_integer(index));
    return dump(o, true, len);
}
