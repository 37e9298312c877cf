/* bench_sse.c — see bench_sse.h. */
#include "client/bench_sse.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/trace.h"

void bench_sse_init(bench_sse *s)
{
    memset(s, 0, sizeof *s);
}

void bench_sse_free(bench_sse *s)
{
    free(s->line);
    free(s->data);
    memset(s, 0, sizeof *s);
}

static int append(char **buf, size_t *n, size_t *cap, const char *src, size_t len)
{
    if (*n + len + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (*n + len + 1 > c) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *n, src, len);
    *n += len;
    (*buf)[*n] = '\0';
    return 0;
}

static int dispatch(bench_sse *s, bench_sse_fn fn, void *ctx)
{
    if (!s->has_data) return 0;
    s->has_data = 0;
    size_t n = s->n_data;
    s->n_data = 0;
    return fn(ctx, s->data, n);
}

/* One complete line (without its terminator). */
static int take_line(bench_sse *s, const char *l, size_t n, bench_sse_fn fn, void *ctx, rh_err *e)
{
    if (n == 0) {
        if (dispatch(s, fn, ctx) < 0) return rh_fail(e, "stopped by the event handler");
        return 0;
    }
    if (n < 5 || memcmp(l, "data:", 5) != 0) return 0;    /* comment, event:, id:, retry: */
    l += 5;
    n -= 5;
    if (n && *l == ' ') {
        l++;
        n--;
    }
    if (s->has_data && append(&s->data, &s->n_data, &s->cap_data, "\n", 1) < 0) goto oom;
    if (append(&s->data, &s->n_data, &s->cap_data, l, n) < 0) goto oom;
    s->has_data = 1;
    return 0;
oom:
    return rh_fail(e, "out of memory reading an event stream");
}

int bench_sse_feed(bench_sse *s, const char *buf, size_t n, bench_sse_fn fn, void *ctx, rh_err *e)
{
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != '\n') continue;
        size_t end = i;
        int rc;
        if (s->n_line) {
            /* The line began in an earlier feed: finish it in the carry buffer. */
            if (append(&s->line, &s->n_line, &s->cap_line, buf + start, end - start) < 0)
                return rh_fail(e, "out of memory reading an event stream");
            size_t len = s->n_line;
            if (len && s->line[len - 1] == '\r') len--;
            s->n_line = 0;
            rc = take_line(s, s->line, len, fn, ctx, e);
        } else {
            if (end > start && buf[end - 1] == '\r') end--;
            rc = take_line(s, buf + start, end - start, fn, ctx, e);
        }
        if (rc < 0) return -1;
        start = i + 1;
    }
    if (start < n && append(&s->line, &s->n_line, &s->cap_line, buf + start, n - start) < 0)
        return rh_fail(e, "out of memory reading an event stream");
    return 0;
}

int bench_sse_finish(bench_sse *s, bench_sse_fn fn, void *ctx, rh_err *e)
{
    if (s->n_line) {
        size_t len = s->n_line;
        if (s->line[len - 1] == '\r') len--;
        s->n_line = 0;
        if (take_line(s, s->line, len, fn, ctx, e) < 0) return -1;
    }
    if (dispatch(s, fn, ctx) < 0) return rh_fail(e, "stopped by the event handler");
    return 0;
}

static int finish_of(const char *r)
{
    if (!strcmp(r, "length")) return TR_FINISH_LENGTH;
    if (!strcmp(r, "abort")) return TR_FINISH_ABORT;
    if (!strcmp(r, "error")) return TR_FINISH_ERROR;
    return TR_FINISH_STOP;      /* stop, eos, tool_calls, content_filter: a normal end */
}

static int nonempty_string(json_t *v)
{
    return json_is_string(v) && json_string_length(v) > 0;
}

static uint32_t count_of(json_t *v)
{
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : 0;
    return x < 0 ? 0 : x > (json_int_t)UINT32_MAX ? UINT32_MAX : (uint32_t)x;
}

/* An error object in any of the shapes servers use; 1 if one was found. */
static int error_text(json_t *root, char *out, size_t cap)
{
    json_t *err = json_object_get(root, "error");
    json_t *msg = NULL;
    if (json_is_object(err)) msg = json_object_get(err, "message");
    else if (json_is_string(err)) msg = err;
    else if (json_is_string(json_object_get(root, "object")) &&
             !strcmp(json_string_value(json_object_get(root, "object")), "error"))
        msg = json_object_get(root, "message");
    else if (json_is_string(json_object_get(root, "detail")))
        msg = json_object_get(root, "detail");
    if (!err && !msg) return 0;
    if (json_is_string(msg)) snprintf(out, cap, "%s", json_string_value(msg));
    else {
        char *dump = json_dumps(err ? err : root, JSON_COMPACT);
        snprintf(out, cap, "%s", dump ? dump : "error");
        free(dump);
    }
    if (!*out) snprintf(out, cap, "error");
    return 1;
}

/* SGLang's /generate: {"text": whole text so far, "meta_info": {...}}. */
static void parse_generate(json_t *root, bench_chunk *c)
{
    c->content = nonempty_string(json_object_get(root, "text"));
    json_t *m = json_object_get(root, "meta_info");
    if (!json_is_object(m)) return;
    c->has_usage = 1;
    c->prompt_tokens = count_of(json_object_get(m, "prompt_tokens"));
    c->completion_tokens = count_of(json_object_get(m, "completion_tokens"));
    json_t *cached = json_object_get(m, "cached_tokens");
    if (json_is_integer(cached)) {
        c->has_cached = 1;
        c->cached_tokens = count_of(cached);
    }
    json_t *fr = json_object_get(m, "finish_reason");
    json_t *type = json_is_object(fr) ? json_object_get(fr, "type") : fr;
    if (json_is_string(type)) c->finish = finish_of(json_string_value(type));
}

int bench_parse_chunk(const char *data, size_t n, int api, bench_chunk *c, rh_err *e)
{
    int chat = api == 1;
    memset(c, 0, sizeof *c);
    c->finish = -1;
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        c->done = 1;
        return 0;
    }
    json_error_t je;
    json_t *root = json_loadb(data, n, 0, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        int shown = n > 80 ? 80 : (int)n;
        return rh_fail(e, "malformed event (not a JSON object: %s): '%.*s%s'", root ? "other JSON" : je.text, shown,
                       data, n > 80 ? "..." : "");
    }
    if (error_text(root, c->error, sizeof c->error)) {
        json_decref(root);
        return 0;
    }
    if (api == 2) {
        /* a batch answer is an array; bench sends one prompt per request */
        parse_generate(root, c);
        json_decref(root);
        return 0;
    }
    json_t *choices = json_object_get(root, "choices");
    json_t *ch = json_is_array(choices) ? json_array_get(choices, 0) : NULL;
    if (json_is_object(ch)) {
        if (chat) {
            json_t *msg = json_object_get(ch, "delta");
            if (!json_is_object(msg)) msg = json_object_get(ch, "message");
            c->content = nonempty_string(json_object_get(msg, "content")) ||
                         nonempty_string(json_object_get(msg, "reasoning_content"));
        } else {
            c->content = nonempty_string(json_object_get(ch, "text"));
        }
        json_t *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(fr)) c->finish = finish_of(json_string_value(fr));
    }
    json_t *usage = json_object_get(root, "usage");
    if (json_is_object(usage)) {
        c->has_usage = 1;
        c->prompt_tokens = count_of(json_object_get(usage, "prompt_tokens"));
        c->completion_tokens = count_of(json_object_get(usage, "completion_tokens"));
        json_t *det = json_object_get(usage, "prompt_tokens_details");
        json_t *cached = json_is_object(det) ? json_object_get(det, "cached_tokens") : NULL;
        if (json_is_integer(cached)) {
            c->has_cached = 1;
            c->cached_tokens = count_of(cached);
        }
    }
    json_decref(root);
    return 0;
}

char *bench_chunk_text(const char *data, size_t n, int api, size_t *len)
{
    json_t *root = json_loadb(data, n, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return NULL;
    }
    json_t *t = NULL;
    if (api == 2) {
        t = json_object_get(root, "text");
    } else {
        json_t *ch = json_array_get(json_object_get(root, "choices"), 0);
        if (api == 1) {
            json_t *msg = json_object_get(ch, "delta");
            if (!json_is_object(msg)) msg = json_object_get(ch, "message");
            t = json_object_get(msg, "content");
        } else {
            t = json_object_get(ch, "text");
        }
    }
    size_t k = json_is_string(t) ? json_string_length(t) : 0;
    char *out = malloc(k + 1);
    if (out) {
        if (k) memcpy(out, json_string_value(t), k);
        out[k] = '\0';
        *len = k;
    }
    json_decref(root);
    return out;
}

void bench_error_message(const char *body, size_t n, char *out, size_t cap)
{
    if (cap == 0) return;
    out[0] = '\0';
    json_t *root = n ? json_loadb(body, n, 0, NULL) : NULL;
    int found = json_is_object(root) && error_text(root, out, cap);
    json_decref(root);
    if (found) return;
    /* Not JSON: the body's first line, without control characters. */
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap && body[i] != '\n'; i++)
        out[k++] = (unsigned char)body[i] < 0x20 ? ' ' : body[i];
    out[k] = '\0';
}
