/* openai_write.c — responses, stream chunks and errors in the OpenAI schema. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/openai.h"
#include "engine/serve/server_text.h"
#include "traces/trace.h"

const char *oa_finish_reason(int finish)
{
    switch (finish) {
    case TR_FINISH_STOP: return "stop";
    case TR_FINISH_LENGTH: return "length";
    case TR_FINISH_ABORT: return "abort";
    case TR_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

/* A JSON string of text that should already be valid UTF-8; anything else
 * is cleaned rather than dropped. */
static json_t *text_value(const char *s, size_t n)
{
    json_t *v = json_stringn(s ? s : "", s ? n : 0);
    if (v) return v;
    size_t m;
    char *clean = sv_utf8_clean(s, n, &m);
    v = clean ? json_stringn(clean, m) : NULL;
    free(clean);
    return v;
}

static json_t *ids_value(const int32_t *ids, uint32_t n)
{
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static json_t *finish_value(int finish)
{
    const char *f = oa_finish_reason(finish);
    return f ? json_string(f) : json_null();
}

static json_t *usage_value(const oa_usage *u)
{
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt, "completion_tokens",
                     (json_int_t)u->completion, "total_tokens", (json_int_t)(u->prompt + u->completion),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)u->cached);
}

static json_t *envelope(const oa_request *r, const oa_ident *id, const char *object)
{
    (void)r;
    return json_pack("{s:s,s:s,s:I,s:s}", "id", id->id, "object", object, "created", (json_int_t)id->created, "model",
                     id->model);
}

static char *dump(json_t *o, const char *prefix, size_t *len)
{
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body) return NULL;
    if (!prefix) {
        if (len) *len = strlen(body);
        return body;
    }
    size_t n = strlen(body), p = strlen(prefix);
    char *out = malloc(p + n + 3);
    if (out) {
        memcpy(out, prefix, p);
        memcpy(out + p, body, n);
        memcpy(out + p + n, "\n\n", 3);
        if (len) *len = p + n + 2;
    }
    free(body);
    return out;
}

/* ---- logprobs ----
 * A token is named by its bytes (special tokens by their own text), as
 * valid UTF-8; chat also gives the raw bytes. Completions (vLLM's and the
 * legacy OpenAI shape): parallel arrays tokens, token_logprobs,
 * top_logprobs (a {token: logprob} object per token, the chosen one among
 * them) and text_offset (characters into the choice's text). Chat:
 * content, one {token, logprob, bytes, top_logprobs: [...]} per token. */
typedef struct token_name {
    char raw[512];
    size_t n_raw;
    json_t *str;
    uint32_t chars;
} token_name;

static void name_token(const tokenizer *tok, int32_t id, token_name *t)
{
    if (!tok) {   /* return_tokens_as_token_ids, or a server without a tokenizer */
        t->n_raw = (size_t)snprintf(t->raw, sizeof t->raw, "token_id:%d", id);
        t->str = json_string(t->raw);
        t->chars = 0;
        return;
    }
    t->n_raw = tok_piece(tok, id, t->raw, sizeof t->raw);
    if (t->n_raw > sizeof t->raw) t->n_raw = sizeof t->raw;
    size_t m = 0;
    char *clean = sv_utf8_clean(t->raw, t->n_raw, &m);
    t->str = clean ? json_stringn(clean, m) : json_string("");
    /* text_offset counts what the token adds to the text: special tokens
     * are left out of it. */
    t->chars = 0;
    for (size_t i = 0; clean && i < m && !tok_is_special(tok, id); i++) t->chars += ((unsigned char)clean[i] & 0xc0) != 0x80;
    free(clean);
}

static json_t *bytes_value(const token_name *t)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < t->n_raw; i++) json_array_append_new(a, json_integer((unsigned char)t->raw[i]));
    return a;
}

static json_t *logprob_value(float lp)
{
    /* -inf (a masked id) has no JSON number; OpenAI writes -9999 for it. */
    if (isnan(lp)) return json_null();
    return json_real(isfinite(lp) ? (double)lp : -9999.0);
}

static void chat_entry(json_t *content, const tokenizer *tok, int32_t id, float lp, const logprob_entry *top,
                       uint32_t k)
{
    token_name t;
    name_token(tok, id, &t);
    json_t *alts = json_array();
    for (uint32_t i = 0; i < k; i++) {
        token_name a;
        name_token(tok, top[i].id, &a);
        json_array_append_new(alts, json_pack("{s:o,s:o,s:o}", "token", a.str, "logprob", logprob_value(top[i].logprob),
                                              "bytes", bytes_value(&a)));
    }
    json_array_append_new(content, json_pack("{s:o,s:o,s:o,s:o}", "token", t.str, "logprob", logprob_value(lp), "bytes",
                                             bytes_value(&t), "top_logprobs", alts));
}

typedef struct completion_lp {
    json_t *tokens, *token_logprobs, *top_logprobs, *text_offset;
} completion_lp;

static void completion_entry(completion_lp *c, const tokenizer *tok, int32_t id, float lp, const logprob_entry *top,
                             uint32_t k, uint32_t *offset)
{
    token_name t;
    name_token(tok, id, &t);
    json_array_append_new(c->text_offset, json_integer(*offset));
    *offset += t.chars;
    json_t *alts = json_null();
    if (!isnan(lp)) {
        alts = json_object();
        for (uint32_t i = 0; i < k; i++) {
            token_name a;
            name_token(tok, top[i].id, &a);
            const char *key = json_string_value(a.str);
            if (key && !json_object_get(alts, key)) json_object_set_new(alts, key, logprob_value(top[i].logprob));
            json_decref(a.str);
        }
        const char *key = json_string_value(t.str);
        if (key && !json_object_get(alts, key)) json_object_set_new(alts, key, logprob_value(lp));
    }
    json_array_append_new(c->tokens, t.str);
    json_array_append_new(c->token_logprobs, logprob_value(lp));
    json_array_append_new(c->top_logprobs, alts);
}

static json_t *logprobs_value(const oa_request *r, const oa_choice_out *c)
{
    if (!r->logprobs || (!c->logprobs && !c->prompt_logprobs)) return json_null();
    uint32_t k = r->top_logprobs;
    if (r->kind == OA_CHAT) {
        json_t *content = json_array();
        for (uint32_t i = 0; content && c->logprobs && i < c->n_ids; i++)
            chat_entry(content, c->tok, c->ids[i], c->logprobs[i], c->top + (size_t)i * k, k);
        return json_pack("{s:o}", "content", content);
    }
    completion_lp v = {json_array(), json_array(), json_array(), json_array()};
    uint32_t zero = 0, *offset = c->text_offset ? c->text_offset : &zero;
    for (uint32_t i = 0; c->prompt_logprobs && i < c->n_prompt; i++)
        completion_entry(&v, c->tok, c->prompt_ids[i], c->prompt_logprobs[i], c->prompt_top + (size_t)i * k, k, offset);
    for (uint32_t i = 0; c->logprobs && i < c->n_ids; i++)
        completion_entry(&v, c->tok, c->ids[i], c->logprobs[i], c->top + (size_t)i * k, k, offset);
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", v.tokens, "token_logprobs", v.token_logprobs, "top_logprobs",
                     v.top_logprobs, "text_offset", v.text_offset);
}

char *oa_response(const oa_request *r, const oa_ident *id, const oa_choice_out *c, uint32_t n, const oa_usage *u,
                  size_t *len)
{
    bool chat = r->kind == OA_CHAT;
    json_t *o = envelope(r, id, chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (uint32_t i = 0; o && choices && i < n; i++) {
        json_t *ch = json_pack("{s:I,s:o,s:o}", "index", (json_int_t)i, "logprobs", logprobs_value(r, &c[i]),
                               "finish_reason", finish_value(c[i].finish));
        if (!ch) break;
        if (chat) json_object_set_new(ch, "message", json_pack("{s:s,s:o}", "role", "assistant", "content", text_value(c[i].text, c[i].len)));
        else json_object_set_new(ch, "text", text_value(c[i].text, c[i].len));
        if (r->return_token_ids) json_object_set_new(ch, "token_ids", ids_value(c[i].ids, c[i].n_ids));
        json_array_append_new(choices, ch);
    }
    if (o) {
        json_object_set_new(o, "choices", choices);
        json_object_set_new(o, "usage", usage_value(u));
    } else {
        json_decref(choices);
    }
    return dump(o, NULL, len);
}

char *oa_chunk(const oa_request *r, const oa_ident *id, uint32_t index, const oa_choice_out *c, bool first, size_t *len)
{
    bool chat = r->kind == OA_CHAT;
    json_t *o = envelope(r, id, chat ? "chat.completion.chunk" : "text_completion");
    json_t *ch = json_pack("{s:I,s:o,s:o}", "index", (json_int_t)index, "logprobs", logprobs_value(r, c), "finish_reason",
                           finish_value(c->finish));
    if (!o || !ch) {
        json_decref(o);
        json_decref(ch);
        return NULL;
    }
    if (chat) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (first || c->len) json_object_set_new(delta, "content", text_value(c->text, c->len));
        json_object_set_new(ch, "delta", delta);
    } else {
        json_object_set_new(ch, "text", text_value(c->text, c->len));
    }
    if (r->return_token_ids) json_object_set_new(ch, "token_ids", ids_value(c->ids, c->n_ids));
    json_object_set_new(o, "choices", json_pack("[o]", ch));
    return dump(o, "data: ", len);
}

char *oa_usage_chunk(const oa_request *r, const oa_ident *id, const oa_usage *u, size_t *len)
{
    json_t *o = envelope(r, id, r->kind == OA_CHAT ? "chat.completion.chunk" : "text_completion");
    if (o) {
        json_object_set_new(o, "choices", json_array());
        json_object_set_new(o, "usage", usage_value(u));
    }
    return dump(o, "data: ", len);
}

static json_t *error_value(const oa_error *e)
{
    json_t *msg = text_value(e->message, strlen(e->message));
    return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", msg, "type", e->type[0] ? e->type : "server_error",
                     "param", e->param[0] ? json_string(e->param) : json_null(), "code",
                     e->code[0] ? json_string(e->code) : json_null());
}

char *oa_error_json(const oa_error *e, size_t *len)
{
    return dump(error_value(e), NULL, len);
}

char *oa_error_event(const oa_error *e, size_t *len)
{
    return dump(error_value(e), "data: ", len);
}
