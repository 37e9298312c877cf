/* bench_xfer.c — see bench_xfer.h. */
#include "client/bench_xfer.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/bench_body.h"
#include "util/progress.h"

/* Error bodies and non-streamed answers are kept up to this size. */
#define BODY_LIMIT (8u << 20)

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int bench_curl_init(rh_err *e)
{
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) return rh_fail(e, "libcurl failed to start: %s", curl_easy_strerror(curl_init_rc));
    return 0;
}

/* The event's text onto the request's (keep_text): appended, or for
 * /generate, whose events repeat the whole text, in its place. */
static void keep_text(bench_xfer *x, const char *data, size_t n)
{
    size_t k = 0;
    char *t = bench_chunk_text(data, n, (int)x->cfg->api, &k);
    if (!t) {
        x->text_oom = 1;
        return;
    }
    if (x->cfg->api == BENCH_API_GENERATE) x->n_text = 0;
    if (x->n_text + k + 1 > x->cap_text) {
        size_t cap = x->cap_text ? x->cap_text : 256;
        while (cap < x->n_text + k + 1) cap *= 2;
        char *b = realloc(x->text, cap);
        if (!b) {
            free(t);
            x->text_oom = 1;
            return;
        }
        x->text = b;
        x->cap_text = cap;
    }
    memcpy(x->text + x->n_text, t, k);
    x->n_text += k;
    x->text[x->n_text] = '\0';
    free(t);
}

static int on_event(void *ctx, const char *data, size_t n)
{
    bench_xfer *x = ctx;
    bench_chunk c;
    rh_err e;
    x->events++;
    if (bench_parse_chunk(data, n, (int)x->cfg->api, &c, &e) < 0) {
        x->failed = 1;
        snprintf(x->msg, sizeof x->msg, "%s", e.msg);
        return -1;
    }
    if (c.error[0]) {
        x->failed = 1;
        snprintf(x->msg, sizeof x->msg, "error event: %s", c.error);
        return -1;
    }
    /* /generate repeats the whole text: an event is a chunk when it brought
     * tokens (sglang.bench_serving skips the others). */
    if (c.content && x->cfg->api == BENCH_API_GENERATE && c.has_usage &&
        c.completion_tokens <= x->usage.completion_tokens)
        c.content = 0;
    if (c.content && x->cfg->keep_text) keep_text(x, data, n);
    if (c.content) {
        double t = x->now - x->t_send;
        if (x->times.n == 0) x->res->ttft = t;
        if (rh_dvec_push(&x->times, t) < 0) {
            x->failed = 1;
            snprintf(x->msg, sizeof x->msg, "out of memory recording token times");
            return -1;
        }
    }
    if (c.finish >= 0) x->finish = c.finish;
    if (c.has_usage) x->usage = c;
    return 0;
}

static int keep_body(bench_xfer *x, const char *p, size_t n)
{
    if (x->n_resp + n > BODY_LIMIT) return 0;       /* keep the head; the rest is not needed */
    if (x->n_resp + n + 1 > x->cap_resp) {
        size_t c = x->cap_resp ? x->cap_resp : 4096;
        while (x->n_resp + n + 1 > c) c *= 2;
        char *b = realloc(x->resp, c);
        if (!b) return -1;
        x->resp = b;
        x->cap_resp = c;
    }
    memcpy(x->resp + x->n_resp, p, n);
    x->n_resp += n;
    x->resp[x->n_resp] = '\0';
    return 0;
}

int bench_xfer_feed(bench_xfer *x, long status, const char *p, size_t n)
{
    x->now = rh_now();
    if (x->status == 0) x->status = status;
    if (x->status >= 300 || !x->cfg->stream) return keep_body(x, p, n);
    rh_err e;
    if (bench_sse_feed(&x->sse, p, n, on_event, x, &e) < 0) {
        if (!x->failed) {
            x->failed = 1;
            snprintf(x->msg, sizeof x->msg, "%s", e.msg);
        }
        return -1;
    }
    return 0;
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *ctx)
{
    bench_xfer *x = ctx;
    size_t n = size * nmemb;
    long status = x->status;
    if (status == 0) curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    /* a stream that cannot be read aborts the transfer */
    return bench_xfer_feed(x, status, p, n) < 0 ? 0 : n;
}

static void fail(bench_result *r, int finish, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(bench_result *r, int finish, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(r->error);
    r->error = strdup(buf);
    r->finish = finish;
}

void bench_xfer_conclude(bench_xfer *x, CURLcode rc, int aborted, const bench_dataset *d)
{
    bench_result *r = x->res;
    const bench_item *it = &d->items[x->item];
    r->e2e = rh_now() - x->t_send;
    r->http_status = x->status;
    r->input_len = it->input_len;
    if (aborted) {
        fail(r, TR_FINISH_ABORT, "interrupted before the response ended");
    } else if (x->failed) {
        fail(r, TR_FINISH_ERROR, "%s", x->msg);
    } else if (rc != CURLE_OK) {
        fail(r, TR_FINISH_ERROR, "%s: %s", curl_easy_strerror(rc), x->curl_err[0] ? x->curl_err : "no detail");
    } else if (x->status >= 300) {
        char msg[600];
        bench_error_message(x->resp ? x->resp : "", x->n_resp, msg, sizeof msg);
        fail(r, TR_FINISH_ERROR, "HTTP %ld: %s", x->status, msg[0] ? msg : "(empty body)");
    } else {
        rh_err e;
        if (x->cfg->stream) {
            if (bench_sse_finish(&x->sse, on_event, x, &e) < 0 && !x->failed) {
                x->failed = 1;
                snprintf(x->msg, sizeof x->msg, "%s", e.msg);
            }
        } else {
            bench_chunk c;
            if (bench_parse_chunk(x->resp ? x->resp : "", x->n_resp, (int)x->cfg->api, &c, &e) < 0) {
                x->failed = 1;
                snprintf(x->msg, sizeof x->msg, "%s", e.msg);
            } else if (c.error[0]) {
                x->failed = 1;
                snprintf(x->msg, sizeof x->msg, "error response: %s", c.error);
            } else if (c.content) {
                /* One answer: the first token is seen when the whole is (SGLang's rule). */
                if (x->cfg->keep_text) keep_text(x, x->resp ? x->resp : "", x->n_resp);
                r->ttft = r->e2e;
                x->finish = c.finish;
                if (c.has_usage) x->usage = c;
                if (rh_dvec_push(&x->times, r->e2e) < 0) {
                    x->failed = 1;
                    snprintf(x->msg, sizeof x->msg, "out of memory");
                }
            }
        }
        if (x->failed) fail(r, TR_FINISH_ERROR, "%s", x->msg);
        else if (x->cfg->stream && x->events == 0)
            fail(r, TR_FINISH_ERROR, "the response held no server-sent events (does the server stream?)");
        else if (x->times.n == 0) fail(r, TR_FINISH_ERROR, "the response held no content");
        else if (x->finish == TR_FINISH_ABORT || x->finish == TR_FINISH_ERROR)
            fail(r, x->finish, "the server ended the request (finish_reason %s)",
                 x->finish == TR_FINISH_ABORT ? "abort" : "error");
    }
    if (x->cfg->keep_text && !x->text_oom) {
        r->text = x->text ? x->text : strdup("");
        x->text = NULL;
    }
    r->n_chunks = (uint32_t)x->times.n;
    r->chunk_times = x->times.v;
    x->times.v = NULL;
    x->times.n = x->times.cap = 0;
    if (r->error) return;
    if (x->usage.has_usage) {
        if (x->usage.prompt_tokens) r->input_len = x->usage.prompt_tokens;
        r->cached_tokens = x->usage.cached_tokens;
        r->has_cached = x->usage.has_cached;
    }
    if (x->usage.has_usage && x->usage.completion_tokens) r->output_len = x->usage.completion_tokens;
    else if (x->cfg->stream) r->output_len = r->n_chunks;
    else r->output_len = x->max_tokens;       /* no usage, no stream: all we know is what was asked */
    if (x->finish == TR_FINISH_LENGTH || x->finish == TR_FINISH_STOP) r->finish = x->finish;
    else r->finish = r->output_len >= x->max_tokens ? TR_FINISH_LENGTH : TR_FINISH_STOP;
}

void bench_xfer_free(bench_xfer *x)
{
    if (!x) return;
    if (x->easy) curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->headers);
    free(x->body);
    free(x->resp);
    bench_sse_free(&x->sse);
    rh_dvec_free(&x->times);
    free(x->text);
    free(x);
}

struct curl_slist *bench_headers(const bench_config *c)
{
    struct curl_slist *h = NULL, *t;
    /* "Expect:" stops curl from waiting up to a second for 100-continue before
     * sending a large prompt, which would land in every TTFT. */
    const char *fixed[] = {"Content-Type: application/json", "Expect:", NULL};
    for (int i = 0; fixed[i]; i++) {
        if (!(t = curl_slist_append(h, fixed[i]))) goto oom;
        h = t;
    }
    if (c->api_key && *c->api_key) {
        size_t n = strlen(c->api_key) + 32;
        char *auth = malloc(n);
        if (!auth) goto oom;
        snprintf(auth, n, "Authorization: Bearer %s", c->api_key);
        t = curl_slist_append(h, auth);
        free(auth);
        if (!t) goto oom;
        h = t;
    }
    for (size_t i = 0; i < c->n_headers; i++) {
        if (!(t = curl_slist_append(h, c->headers[i]))) goto oom;
        h = t;
    }
    return h;
oom:
    curl_slist_free_all(h);
    return NULL;
}

bench_xfer *bench_xfer_new(const bench_config *c, const bench_dataset *d, size_t i, const char *url,
                           const char *model_json, int32_t *scratch, bench_result *res)
{
    const bench_item *it = &d->items[i];
    bench_xfer *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->item = i;
    x->res = res;
    x->cfg = c;
    x->max_tokens = it->output_len;
    x->finish = -1;
    bench_sse_init(&x->sse);
    if (!it->text) bench_item_tokens(d, i, scratch);
    bench_body_opts bo = {.model_json = model_json, .chat = c->api == BENCH_API_CHAT, .stream = c->stream,
                          .generate = c->api == BENCH_API_GENERATE, .keep_eos = c->keep_eos, .sampling = c->sampling,
                          .extra = c->extra_body, .priority = it->priority};
    /* A LoRA adapter: /generate's lora_path, or the model named as the API takes it. */
    char *adapter_json = NULL;
    if (it->adapter) {
        char name[600];
        if (c->api != BENCH_API_GENERATE && c->lora_prefix && c->model && *c->model)
            snprintf(name, sizeof name, "%s:%s", c->model, it->adapter);
        else snprintf(name, sizeof name, "%s", it->adapter);
        if (!(adapter_json = bench_json_string(name))) {
            bench_xfer_free(x);
            return NULL;
        }
        if (c->api == BENCH_API_GENERATE) bo.lora_path = adapter_json;
        else bo.model_json = adapter_json;
    }
    size_t len = 0;
    x->body = bench_request_body(&bo, scratch, it->input_len, it->text, it->output_len, &len);
    free(adapter_json);
    x->headers = bench_headers(c);
    x->easy = curl_easy_init();
    if (!x->body || !x->headers || !x->easy) {
        bench_xfer_free(x);
        return NULL;
    }
    CURL *h = x->easy;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, x->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_PRIVATE, x);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->curl_err);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    if (c->request_timeout > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)ceil(c->request_timeout * 1e3));
    return x;
}

bench_xfer *bench_xfer_observer(const bench_config *c, uint32_t max_tokens, bench_result *res)
{
    bench_xfer *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->res = res;
    x->cfg = c;
    x->max_tokens = max_tokens;
    x->finish = -1;
    bench_sse_init(&x->sse);
    return x;
}

void bench_xfer_sent(bench_xfer *x, double t0)
{
    x->t_send = rh_now();
    x->res->send = x->t_send - t0;
    x->res->sent = 1;
}

char *bench_join_url(const char *base, const char *path)
{
    size_t nb = strlen(base);
    while (nb && base[nb - 1] == '/') nb--;
    size_t n = nb + strlen(path) + 2;
    char *u = malloc(n);
    if (u) snprintf(u, n, "%.*s%s%s", (int)nb, base, path[0] == '/' ? "" : "/", path);
    return u;
}
