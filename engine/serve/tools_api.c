/* tools_api.c — see tools_api.h. /tokenize goes through oa_parse with a
 * one-token completion around the prompt, so the ids it shows are the ids
 * a completion of that prompt would compute on, never a second tokenizing
 * path that could drift from the first. */
#include "engine/serve/tools_api.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/tokenizer.h"
#include "util/version.h"

static char *dump(json_t *o, size_t *n, oa_error *e)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) {
        oa_fail(e, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    *n = strlen(s);
    return s;
}

char *ta_version(size_t *n)
{
    oa_error e;
    return dump(json_pack("{s:s}", "version", REHEARSE_VERSION), n, &e);
}

static json_t *load_object(const char *body, size_t len, oa_error *e)
{
    json_error_t jerr;
    json_t *root = json_loadb(body ? body : "", len, 0, &jerr);
    if (!root) {
        oa_fail(e, 400, NULL, "invalid_json", "the body is not valid JSON (line %d, column %d): %s", jerr.line,
                jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        oa_fail(e, 400, NULL, "invalid_json", "the body must be a JSON object");
        return NULL;
    }
    return root;
}

char *ta_tokenize(const char *body, size_t len, const oa_limits *lim, size_t *n, oa_error *e)
{
    json_t *root = load_object(body, len, e);
    if (!root) return NULL;
    json_t *prompt = json_object_get(root, "prompt"), *messages = json_object_get(root, "messages");
    if (!!prompt == !!messages) {
        json_decref(root);
        oa_fail(e, 400, "prompt", prompt ? "invalid_value" : "missing_required_parameter",
                "give either 'prompt' (a string) or 'messages' (a chat)");
        return NULL;
    }
    if (prompt && !json_is_string(prompt)) {
        json_decref(root);
        oa_fail(e, 400, "prompt", "invalid_type", "'prompt' must be a string");
        return NULL;
    }
    json_t *special = json_object_get(root, "add_special_tokens");
    if (special && !json_is_boolean(special)) {
        json_decref(root);
        oa_fail(e, 400, "add_special_tokens", "invalid_type", "'add_special_tokens' must be true or false");
        return NULL;
    }
    /* The completion it amounts to: its prompt (or chat), one token. */
    json_t *as = json_object();
    json_object_set(as, prompt ? "prompt" : "messages", prompt ? prompt : messages);
    json_t *model = json_object_get(root, "model");
    if (model) json_object_set(as, "model", model);
    json_object_set_new(as, "max_tokens", json_integer(1));
    bool add_special = !special || json_is_true(special);
    json_decref(root);
    char *text = json_dumps(as, JSON_COMPACT);
    json_decref(as);
    if (!text) {
        oa_fail(e, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    oa_request rq;
    int rc = oa_parse(prompt ? OA_COMPLETIONS : OA_CHAT, text, strlen(text), lim, &rq, e);
    free(text);
    if (rc < 0) return NULL;
    const oa_prompt *p = &rq.prompts[0];
    uint32_t skip = 0;   /* without special tokens: the BOS the parse added, as vLLM leaves it out */
    int32_t bos = lim->tok ? tok_bos(lim->tok) : -1;
    if (!add_special && p->n && bos >= 0 && p->ids[0] == bos) skip = 1;
    json_t *ids = json_array();
    for (uint32_t i = skip; ids && i < p->n; i++) json_array_append_new(ids, json_integer(p->ids[i]));
    json_t *o = json_pack("{s:I,s:I,s:o,s:n}", "count", (json_int_t)(p->n - skip), "max_model_len",
                          (json_int_t)lim->context, "tokens", ids, "token_strs");
    oa_request_free(&rq);
    return dump(o, n, e);
}

char *ta_detokenize(const char *body, size_t len, const oa_limits *lim, size_t *n, oa_error *e)
{
    json_t *root = load_object(body, len, e);
    if (!root) return NULL;
    json_t *tokens = json_object_get(root, "tokens");
    if (!json_is_array(tokens)) {
        json_decref(root);
        oa_fail(e, 400, "tokens", tokens ? "invalid_type" : "missing_required_parameter",
                "'tokens' must be a list of token ids");
        return NULL;
    }
    if (!lim->tok) {
        json_decref(root);
        oa_fail(e, 400, NULL, "no_tokenizer", "this server has no tokenizer: it takes and gives token ids only");
        return NULL;
    }
    size_t k = json_array_size(tokens);
    int32_t *ids = malloc((k ? k : 1) * sizeof *ids);
    if (!ids) {
        json_decref(root);
        oa_fail(e, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < k; i++) {
        json_t *v = json_array_get(tokens, i);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || (uint64_t)id >= lim->vocab) {
            oa_fail(e, 400, "tokens", "invalid_value", "'tokens[%zu]' must be a token id from 0 to %u", i,
                    lim->vocab - 1);
            free(ids);
            json_decref(root);
            return NULL;
        }
        ids[i] = (int32_t)id;
    }
    json_decref(root);
    size_t tl = 0;
    char *text = tok_decode(lim->tok, ids, k, 0, &tl);
    free(ids);
    if (!text) {
        oa_fail(e, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    json_t *o = json_object();
    json_object_set_new(o, "prompt", json_stringn(text, tl));
    free(text);
    return dump(o, n, e);
}

int ta_parse_abort(const char *body, size_t len, char *rid, size_t rid_cap, bool *all, oa_error *e)
{
    json_t *root = load_object(body, len, e);
    if (!root) return -1;
    json_t *r = json_object_get(root, "rid"), *a = json_object_get(root, "abort_all");
    *all = json_is_true(a);
    rid[0] = '\0';
    int rc = 0;
    if (a && !json_is_boolean(a)) rc = oa_fail(e, 400, "abort_all", "invalid_type", "'abort_all' must be true or false");
    else if (!*all && !json_is_string(r))
        rc = oa_fail(e, 400, "rid", r ? "invalid_type" : "missing_required_parameter",
                     "'rid' (the id of the request to abort) or \"abort_all\": true is required");
    else if (!*all && strlen(json_string_value(r)) >= rid_cap)
        rc = oa_fail(e, 400, "rid", "invalid_value", "'rid' is longer than any request id here");
    else if (!*all) memcpy(rid, json_string_value(r), strlen(json_string_value(r)) + 1);
    json_decref(root);
    return rc;
}
