/* openai_parse.c — a completions or chat body into an oa_request; see
 * openai.h for what is accepted. Every refusal names the parameter. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/openai.h"
#include "engine/serve/openai_impl.h"
#include "engine/serve/server_text.h"

#define DEFAULT_COMPLETION_TOKENS 16

int oa_fail(oa_error *e, int status, const char *param, const char *code, const char *fmt, ...)
{
    if (!e) return -1;
    e->status = status;
    const char *type = "invalid_request_error";
    if (status == 401) type = "authentication_error";
    else if (status == 404) type = "not_found_error";
    else if (status == 429) type = "rate_limit_error";
    else if (status >= 500) type = "server_error";
    snprintf(e->type, sizeof e->type, "%s", type);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

int oa_bad_type(oa_error *e, const char *param, const char *want)
{
    return oa_fail(e, 400, param, "invalid_type", "'%s' must be %s", param, want);
}

void oa_request_free(oa_request *r)
{
    for (uint32_t i = 0; i < r->n_prompts; i++) free(r->prompts[i].ids);
    free(r->prompts);
    for (uint32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    free((void *)r->rules.bias_ids);
    free((void *)r->rules.bias);
    memset(r, 0, sizeof *r);
}

/* A field that is absent or null counts as not given. */
json_t *oa_field(json_t *root, const char *name)
{
    json_t *v = json_object_get(root, name);
    return json_is_null(v) ? NULL : v;
}

int oa_get_bool(json_t *root, const char *name, bool *out, oa_error *e)
{
    json_t *v = oa_field(root, name);
    if (!v) return 0;
    if (!json_is_boolean(v)) return oa_bad_type(e, name, "a boolean");
    *out = json_is_true(v);
    return 0;
}

int oa_get_number(json_t *root, const char *name, double *out, int *given, oa_error *e)
{
    json_t *v = oa_field(root, name);
    *given = v != NULL;
    if (!v) return 0;
    if (!json_is_number(v)) return oa_bad_type(e, name, "a number");
    *out = json_number_value(v);
    return 0;
}

int oa_get_int(json_t *root, const char *name, long long *out, int *given, oa_error *e)
{
    json_t *v = oa_field(root, name);
    *given = v != NULL;
    if (!v) return 0;
    /* 16.0 is an integer to a JSON client; 16.5 is not. */
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
        *out = (long long)json_real_value(v);
    else if (json_is_integer(v)) *out = json_integer_value(v);
    else return oa_bad_type(e, name, "an integer");
    return 0;
}

/* ---- prompts ---- */
static int add_prompt(oa_request *r, int32_t *ids, uint32_t n)
{
    oa_prompt *p = realloc(r->prompts, (r->n_prompts + 1) * sizeof *p);
    if (!p) return -1;
    r->prompts = p;
    r->prompts[r->n_prompts++] = (oa_prompt){ids, n};
    return 0;
}

/* add_bos: 1 for a raw prompt; 0 for a rendered chat template, which
 * writes its own BOS (vLLM's add_special_tokens=False for chat). */
static int encode_prompt(oa_request *r, const char *s, size_t len, int add_bos, const char *param, const oa_limits *lim,
                         oa_error *e)
{
    if (!lim->tok) return oa_fail(e, 400, param, "invalid_value", "this server has no tokenizer: send '%s' as token ids", param);
    /* Refused by its bytes first: encoding megabytes of one word takes
     * seconds of this thread for a prompt that cannot fit anyway. */
    uint64_t fewest = tok_fewest_tokens(lim->tok, len);
    if (fewest >= lim->context)
        return oa_fail(e, 400, param, "context_length_exceeded",
                       "this model's maximum context length is %u tokens, and '%s' (%zu bytes) takes at least %llu",
                       lim->context, param, len, (unsigned long long)fewest);
    int32_t *ids;
    size_t n;
    rh_err err;
    if (tok_encode(lim->tok, s, len, add_bos, &ids, &n, &err) < 0) return oa_fail(e, 400, param, "invalid_value", "%s", err.msg);
    if (n == 0) {
        free(ids);
        return oa_fail(e, 400, param, "invalid_value", "'%s' is empty", param);
    }
    if (n > UINT32_MAX || add_prompt(r, ids, (uint32_t)n) < 0) {
        free(ids);
        return oa_fail(e, 500, NULL, NULL, "out of memory");
    }
    return 0;
}

static int text_prompt(oa_request *r, const char *s, size_t len, const char *param, const oa_limits *lim, oa_error *e)
{
    return encode_prompt(r, s, len, 1, param, lim, e);
}

/* An array of token ids; `where` names it in messages ("prompt", "prompt[2]"). */
static int id_prompt(oa_request *r, json_t *a, const char *where, const oa_limits *lim, oa_error *e)
{
    size_t n = json_array_size(a);
    if (n == 0) return oa_fail(e, 400, "prompt", "invalid_value", "'%s' is empty", where);
    if (n >= lim->context)   /* refused before reading a million ids */
        return oa_fail(e, 400, "prompt", "context_length_exceeded",
                       "this model's maximum context length is %u tokens, and '%s' alone takes %zu", lim->context,
                       where, n);
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids) return oa_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v)) {
            free(ids);
            return oa_fail(e, 400, "prompt", "invalid_type", "'%s[%zu]' must be a token id (an integer)", where, i);
        }
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= (json_int_t)lim->vocab) {
            free(ids);
            return oa_fail(e, 400, "prompt", "invalid_value", "'%s[%zu]' is %lld, outside the vocabulary of %u ids",
                           where, i, (long long)id, lim->vocab);
        }
        ids[i] = (int32_t)id;
    }
    if (add_prompt(r, ids, (uint32_t)n) < 0) {
        free(ids);
        return oa_fail(e, 500, NULL, NULL, "out of memory");
    }
    return 0;
}

static int parse_prompt(oa_request *r, json_t *root, const oa_limits *lim, oa_error *e)
{
    json_t *p = oa_field(root, "prompt");
    if (!p) return oa_fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    if (json_is_string(p)) return text_prompt(r, json_string_value(p), json_string_length(p), "prompt", lim, e);
    if (!json_is_array(p)) return oa_bad_type(e, "prompt", "a string, an array of token ids, or an array of those");
    size_t n = json_array_size(p);
    if (n == 0) return oa_fail(e, 400, "prompt", "invalid_value", "'prompt' is empty");
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) return id_prompt(r, p, "prompt", lim, e);
    if (n > OA_MAX_PROMPTS)
        return oa_fail(e, 400, "prompt", "invalid_value", "'prompt' holds %zu prompts; at most %d are served at once", n,
                       OA_MAX_PROMPTS);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(p, i);
        char where[32];
        snprintf(where, sizeof where, "prompt[%zu]", i);
        int rc;
        if (json_is_string(v)) rc = text_prompt(r, json_string_value(v), json_string_length(v), "prompt", lim, e);
        else if (json_is_array(v)) rc = id_prompt(r, v, where, lim, e);
        else rc = oa_fail(e, 400, "prompt", "invalid_type", "'%s' must be a string or an array of token ids", where);
        if (rc < 0) return -1;
    }
    return 0;
}

/* ---- chat ---- */
typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

/* A message's content: a string, null, or text parts. 0, -1 refused (e
 * filled), -2 out of memory. */
static int put_content(sbuf *b, json_t *c, size_t i, oa_error *e)
{
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) return sb_put(b, json_string_value(c), json_string_length(c)) < 0 ? -2 : 0;
    if (!json_is_array(c))
        return oa_fail(e, 400, "messages", "invalid_type", "'messages[%zu].content' must be a string or an array of parts", i);
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *part = json_array_get(c, k);
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text"))
            return oa_fail(e, 400, "messages", "invalid_value",
                           "'messages[%zu].content[%zu]': only parts of type \"text\" are supported", i, k);
        if (!json_is_string(text))
            return oa_fail(e, 400, "messages", "invalid_type", "'messages[%zu].content[%zu].text' must be a string", i, k);
        if (sb_put(b, json_string_value(text), json_string_length(text)) < 0) return -2;
    }
    return 0;
}

char *oa_chat_text(const void *messages, size_t *len, oa_error *e)
{
    json_t *m = (json_t *)messages;
    if (!m) {
        oa_fail(e, 400, "messages", "missing_required_parameter", "'messages' is required");
        return NULL;
    }
    if (!json_is_array(m) || json_array_size(m) == 0) {
        oa_fail(e, 400, "messages", "invalid_type", "'messages' must be a non-empty array of messages");
        return NULL;
    }
    sbuf b = {0};
    int rc = 0;
    for (size_t i = 0; i < json_array_size(m) && !rc; i++) {
        json_t *msg = json_array_get(m, i);
        json_t *role = json_object_get(msg, "role");
        if (!json_is_object(msg) || !json_is_string(role) || !json_string_length(role)) {
            rc = oa_fail(e, 400, "messages", "invalid_type", "'messages[%zu]' must be an object with a string 'role'", i);
            break;
        }
        if (sb_put(&b, json_string_value(role), json_string_length(role)) < 0 || sb_put(&b, ": ", 2) < 0) rc = -2;
        if (!rc) rc = put_content(&b, json_object_get(msg, "content"), i, e);
        if (!rc && sb_put(&b, "\n", 1) < 0) rc = -2;
    }
    if (!rc && sb_put(&b, "assistant:", 10) < 0) rc = -2;
    if (rc) {
        if (rc == -2) oa_fail(e, 500, NULL, NULL, "out of memory");
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}

/* The messages as a chat template reads them: each content a string (text
 * parts joined by newlines, as vLLM joins them), every other field as sent. */
static json_t *template_messages(json_t *m, oa_error *e)
{
    json_t *out = json_array();
    if (!out) goto oom;
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *msg = json_array_get(m, i), *c = json_object_get(msg, "content");
        json_t *copy = json_copy(msg);
        if (!copy || json_array_append_new(out, copy)) goto oom;
        if (!json_is_array(c)) continue;
        sbuf b = {0};
        int rc = 0;
        for (size_t k = 0; k < json_array_size(c) && !rc; k++) {
            json_t *one = json_array(), *part = json_array_get(c, k);
            if (!one || json_array_append(one, part)) rc = -2;
            if (!rc && k && sb_put(&b, "\n", 1) < 0) rc = -2;
            if (!rc) rc = put_content(&b, one, i, e);
            json_decref(one);
        }
        if (!rc && json_object_set_new(copy, "content", json_stringn(b.p ? b.p : "", b.n))) rc = -2;
        free(b.p);
        if (rc == -1) {
            json_decref(out);
            return NULL;
        }
        if (rc) goto oom;
    }
    return out;
oom:
    json_decref(out);
    oa_fail(e, 500, NULL, NULL, "out of memory");
    return NULL;
}

/* The tokenizer's Jinja chat template (or the request's chat_template),
 * with add_generation_prompt (default true) and chat_template_kwargs. */
static char *render_template(const oa_limits *lim, json_t *root, size_t *len, oa_error *e)
{
    json_t *agp = oa_field(root, "add_generation_prompt"), *kw = oa_field(root, "chat_template_kwargs");
    json_t *tpl = oa_field(root, "chat_template");
    if (agp && !json_is_boolean(agp)) {
        oa_bad_type(e, "add_generation_prompt", "a boolean");
        return NULL;
    }
    if (kw && !json_is_object(kw)) {
        oa_bad_type(e, "chat_template_kwargs", "an object");
        return NULL;
    }
    if (tpl && !json_is_string(tpl)) {
        oa_bad_type(e, "chat_template", "a string");
        return NULL;
    }
    json_t *msgs = template_messages(oa_field(root, "messages"), e);
    if (!msgs) return NULL;
    rh_err err;
    char *text = tok_apply_chat_template(lim->tok, msgs, !agp || json_is_true(agp), kw,
                                         tpl && json_string_length(tpl) ? json_string_value(tpl) : NULL, len, &err);
    json_decref(msgs);
    if (!text) oa_fail(e, 400, tpl ? "chat_template" : "messages", "invalid_value", "the chat template failed: %s", err.msg);
    return text;
}

static int parse_messages(oa_request *r, json_t *root, const oa_limits *lim, oa_error *e)
{
    size_t len;
    /* The plain rendering checks every message's shape, template or not. */
    char *text = oa_chat_text(oa_field(root, "messages"), &len, e);
    if (!text) return -1;
    int add_bos = 1;
    if (lim->tok && tok_has_chat_template(lim->tok)) {
        free(text);
        if (!(text = render_template(lim, root, &len, e))) return -1;
        add_bos = 0;
    }
    int rc = encode_prompt(r, text, len, add_bos, "messages", lim, e);
    free(text);
    return rc;
}

/* ---- stop ---- */
static int add_stop_id(oa_request *r, json_int_t id, const char *param, const oa_limits *lim, oa_error *e)
{
    if (id < 0 || id >= (json_int_t)lim->vocab)
        return oa_fail(e, 400, param, "invalid_value", "stop token %lld is outside the vocabulary of %u ids",
                       (long long)id, lim->vocab);
    if (r->n_stop_ids == OA_MAX_STOP_IDS)
        return oa_fail(e, 400, param, "invalid_value", "more than %d stop token ids", OA_MAX_STOP_IDS);
    if (!r->stop_ids && !(r->stop_ids = malloc(OA_MAX_STOP_IDS * sizeof *r->stop_ids)))
        return oa_fail(e, 500, NULL, NULL, "out of memory");
    r->stop_ids[r->n_stop_ids++] = (int32_t)id;
    return 0;
}

static int add_stop(oa_request *r, json_t *s, oa_error *e)
{
    size_t n = json_string_length(s);
    if (n == 0) return 0;   /* an empty stop string would stop before the first token: ignored, as OpenAI does */
    if (n > OA_MAX_STOP_LEN) return oa_fail(e, 400, "stop", "invalid_value", "a stop string is longer than %d bytes", OA_MAX_STOP_LEN);
    if (r->n_stop == OA_MAX_STOP) return oa_fail(e, 400, "stop", "invalid_value", "more than %d stop strings", OA_MAX_STOP);
    if (!r->stop && !(r->stop = calloc(OA_MAX_STOP, sizeof *r->stop))) return oa_fail(e, 500, NULL, NULL, "out of memory");
    /* jansson strings may hold NUL; such a stop string is cut there. */
    if (!(r->stop[r->n_stop] = strndup(json_string_value(s), n))) return oa_fail(e, 500, NULL, NULL, "out of memory");
    if (!r->stop[r->n_stop][0]) {
        free(r->stop[r->n_stop]);
        r->stop[r->n_stop] = NULL;
        return 0;
    }
    r->n_stop++;
    return 0;
}

static int parse_stop(oa_request *r, json_t *root, const oa_limits *lim, oa_error *e)
{
    json_t *s = oa_field(root, "stop");
    if (s) {
        if (json_is_string(s)) {
            if (add_stop(r, s, e) < 0) return -1;
        } else if (json_is_array(s)) {
            for (size_t i = 0; i < json_array_size(s); i++) {
                json_t *v = json_array_get(s, i);
                int rc = json_is_string(v) ? add_stop(r, v, e)
                         : json_is_integer(v) ? add_stop_id(r, json_integer_value(v), "stop", lim, e)
                                              : oa_fail(e, 400, "stop", "invalid_type",
                                                        "'stop[%zu]' must be a string or a token id", i);
                if (rc < 0) return -1;
            }
        } else {
            return oa_bad_type(e, "stop", "a string or an array of strings and token ids");
        }
    }
    json_t *ids = oa_field(root, "stop_token_ids");
    if (!ids) return 0;
    if (!json_is_array(ids)) return oa_bad_type(e, "stop_token_ids", "an array of token ids");
    for (size_t i = 0; i < json_array_size(ids); i++) {
        json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v))
            return oa_fail(e, 400, "stop_token_ids", "invalid_type", "'stop_token_ids[%zu]' must be a token id", i);
        if (add_stop_id(r, json_integer_value(v), "stop_token_ids", lim, e) < 0) return -1;
    }
    return 0;
}

static int parse_max_tokens(oa_request *r, json_t *root, const oa_limits *lim, oa_error *e)
{
    long long v = 0;
    int given = 0;
    const char *name = "max_tokens";
    if (oa_get_int(root, name, &v, &given, e) < 0) return -1;
    if (!given && r->kind == OA_CHAT) {
        name = "max_completion_tokens";
        if (oa_get_int(root, name, &v, &given, e) < 0) return -1;
    }
    if (given && v < 1) return oa_fail(e, 400, name, "invalid_value", "'%s' must be at least 1 (got %lld)", name, v);
    uint32_t longest = 0;
    for (uint32_t i = 0; i < r->n_prompts; i++)
        if (r->prompts[i].n > longest) longest = r->prompts[i].n;
    const char *what = r->kind == OA_CHAT ? "messages" : "prompt";
    if (longest >= lim->context)
        return oa_fail(e, 400, what, "context_length_exceeded",
                       "this model's maximum context length is %u tokens, and the %s alone takes %u", lim->context,
                       r->kind == OA_CHAT ? "messages" : "prompt", longest);
    if (!given) v = r->kind == OA_CHAT ? lim->context - longest : DEFAULT_COMPLETION_TOKENS;
    if ((unsigned long long)v + longest > lim->context) {
        if (!given) v = lim->context - longest;   /* the default shrinks to fit; an explicit one is refused */
        else
            return oa_fail(e, 400, what, "context_length_exceeded",
                           "this model's maximum context length is %u tokens, but %llu were requested (%u in the %s, "
                           "%lld for the completion)",
                           lim->context, (unsigned long long)v + longest, longest, what, v);
    }
    r->max_tokens = (uint32_t)v;
    return 0;
}

int oa_parse(oa_kind kind, const char *body, size_t n, const oa_limits *lim, oa_request *out, oa_error *e)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    json_error_t jerr;
    json_t *root = json_loadb(body, n, 0, &jerr);
    if (!root)
        return oa_fail(e, 400, NULL, "invalid_json", "the body is not valid JSON (line %d, column %d): %s", jerr.line,
                       jerr.column, jerr.text);
    int rc = -1;
    if (!json_is_object(root)) {
        oa_fail(e, 400, NULL, "invalid_json", "the body must be a JSON object");
        goto done;
    }
    json_t *model = oa_field(root, "model");
    if (model && !json_is_string(model)) {
        oa_bad_type(e, "model", "a string");
        goto done;
    }
    /* A model other than the base names an adapter: "BASE:NAME" as SGLang
     * splits it (at the first colon; the part before is not checked), or
     * the bare NAME as vLLM takes it; else SGLang's "lora_path". */
    json_t *lora = oa_field(root, "lora_path");
    if (lora && !json_is_null(lora) && !json_is_string(lora)) {
        oa_bad_type(e, "lora_path", "a string (an adapter's name)");
        goto done;
    }
    const char *adapter = lora && json_is_string(lora) ? json_string_value(lora) : "";
    if (model && lim->model && strcmp(json_string_value(model), lim->model)) {
        const char *m = json_string_value(model), *colon = strchr(m, ':');
        adapter = colon ? colon + 1 : m;
    }
    if (strlen(adapter) >= sizeof out->adapter || (*adapter && strchr(adapter, ':'))) {
        oa_fail(e, 404, "model", "model_not_found", "the model '%.200s' does not exist (this server serves '%.200s')",
                model ? json_string_value(model) : adapter, lim->model ? lim->model : "");
        goto done;
    }
    snprintf(out->adapter, sizeof out->adapter, "%s", adapter);
    if (oa_get_bool(root, "stream", &out->stream, e) < 0 || oa_get_bool(root, "ignore_eos", &out->ignore_eos, e) < 0 ||
        oa_get_bool(root, "return_token_ids", &out->return_token_ids, e) < 0)
        goto done;
    long long prio;
    int prio_given;
    if (oa_get_int(root, "priority", &prio, &prio_given, e) < 0) goto done;
    if (prio_given && (prio < INT32_MIN || prio > INT32_MAX)) {
        oa_fail(e, 400, "priority", "invalid_value", "'priority' must fit in 32 bits (got %lld)", prio);
        goto done;
    }
    out->priority = prio_given ? (int32_t)prio : 0;
    json_t *so = oa_field(root, "stream_options");
    if (so) {
        if (!json_is_object(so)) {
            oa_bad_type(e, "stream_options", "an object");
            goto done;
        }
        if (oa_get_bool(so, "include_usage", &out->include_usage, e) < 0) {
            snprintf(e->param, sizeof e->param, "stream_options");
            goto done;
        }
    }
    if (oa_parse_refused(kind, root, lim->tok && tok_has_chat_template(lim->tok), e) < 0 || oa_parse_sampling(out, root, lim, e) < 0) goto done;
    if ((kind == OA_CHAT ? parse_messages(out, root, lim, e) : parse_prompt(out, root, lim, e)) < 0) goto done;
    if (parse_max_tokens(out, root, lim, e) < 0 || parse_stop(out, root, lim, e) < 0) goto done;
    if (oa_parse_choices(out, root, e) < 0) goto done;
    rc = 0;
done:
    json_decref(root);
    if (rc < 0) oa_request_free(out);
    return rc;
}
