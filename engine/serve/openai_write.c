/* openai_write.c — responses, stream chunks and errors in the OpenAI schema. */
#include <jansson.h>
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

char *oa_response(const oa_request *r, const oa_ident *id, const oa_choice_out *c, uint32_t n, const oa_usage *u,
                  size_t *len)
{
    bool chat = r->kind == OA_CHAT;
    json_t *o = envelope(r, id, chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (uint32_t i = 0; o && choices && i < n; i++) {
        json_t *ch = json_pack("{s:I,s:n,s:o}", "index", (json_int_t)i, "logprobs", "finish_reason", finish_value(c[i].finish));
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
    json_t *ch = json_pack("{s:I,s:n,s:o}", "index", (json_int_t)index, "logprobs", "finish_reason", finish_value(c->finish));
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
