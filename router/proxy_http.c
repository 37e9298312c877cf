/* proxy_http.c — the router's HTTP side: libmicrohttpd with one thread per
 * connection, each routed request forwarded by that thread with libcurl.
 *
 * A routed request goes: body complete -> prefix read -> the core picks a
 * worker -> the body is sent to it -> its headers awaited (a refused
 * connection: the next pick) -> a stream is answered at once with the
 * worker's status and Content-Type and a reader that moves the worker's
 * bytes as the client takes them, whole events at a time; anything else is
 * read to its end and answered whole. The transfer runs on the connection's
 * thread (its own curl multi handle, polled 10 times a second), so between
 * polls it notices the router stopping and the health poller giving up on
 * its worker. The worker's accounting (outstanding, errors) is settled when
 * its transfer ends, before the client sees the end of the response. */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "router/proxy_impl.h"
#include "util/progress.h"
#include "util/upload.h"

#define STREAM_BLOCK (16u << 10)

enum kind { K_ROUTED = 1, K_MODELS, K_HEALTH, K_METRICS, K_NOT_FOUND, K_BAD_METHOD };

/* One routed request: its transfer to the worker, and what is owed to the
 * client. Every field (conn): only the connection's thread touches it. */
typedef struct fwd {
    rproxy *p;
    atomic_int refs;            /* the request's, and a stream response's (atomic: MHD may
                                   drop a response from its own thread at shutdown) */
    int api;
    uint64_t id;
    double arrival;             /* rh_now() when the body was complete */
    char *body;                 /* owned */
    size_t n_body;
    char path[64];
    char *auth, *accept;        /* the client's headers passed on, or NULL */
    rp_prompt prompt;
    int worker;                 /* -1: none picked (yet) */
    uint64_t epoch;             /* the worker's down_epoch when sent */
    uint32_t attempts;
    int cfd;                    /* the client's socket, watched for its leaving (-1: unknown) */
    bool gone;                  /* the client left: nothing more is sent to it */
    bool pending;               /* the client sent bytes not yet read: its socket is not waited on */
    /* the transfer */
    CURL *easy;
    CURLM *multi;
    struct curl_slist *hdrs;
    char curl_err[CURL_ERROR_SIZE];
    long status;
    char ctype[256];
    bool got_headers, sse;
    bool ended, failed, transport, aborted, accounted, recorded;
    CURLcode rc;
    char why[1400];
    /* bytes from the worker not yet passed on: [pos, n); a stream's whole
     * events end at `cut`; `scan`/`nl` carry the search for the next end */
    char *buf;
    size_t n, pos, cap, cut, scan, ev;
    int nl;
    bool saw_done, error_sent, oversize;
    size_t done_at;             /* saw_done: where the [DONE] event starts; it is held back until the
                                   transfer ended and the request is recorded */
    /* the recording: bench's observer on the bytes */
    bench_config bc;
    bench_result res;
    bench_xfer *obs;
    bool obs_off;
} fwd;

/* One HTTP request from its first call to its completion (conn). */
typedef struct hreq {
    int kind;
    int api;
    rh_upload up;       /* the body */
    fwd *f;
} hreq;

/* ---- answers ---- */
char *rp_error_json(const char *message, const char *type, const char *code, size_t *len)
{
    json_t *j = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", message, "type", type, "param", "code", code);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (s && len) *len = strlen(s);
    return s;
}

static enum MHD_Result send_owned_close(struct MHD_Connection *c, unsigned status, const char *type, char *buf,
                                        size_t n, bool close)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(n, buf, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(buf);
        return MHD_NO;
    }
    if (type && *type) MHD_add_response_header(r, "Content-Type", type);
    if (close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_owned(struct MHD_Connection *c, unsigned status, const char *type, char *buf, size_t n)
{
    return send_owned_close(c, status, type, buf, n, false);
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type, const char *code,
                                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type, const char *code,
                                  const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = 0;
    char *body = rp_error_json(msg, type, code, &n);
    return body ? send_owned(c, status, "application/json", body, n) : MHD_NO;
}

/* ---- the transfer ---- */
static int buf_put(fwd *f, const char *s, size_t n)
{
    if (f->pos == f->n && f->pos) {   /* all passed on: start over */
        f->n = f->pos = f->cut = f->scan = f->ev = 0;
    }
    if (f->n - f->pos + n > f->p->cfg.max_response_bytes) {
        f->oversize = true;
        return -1;
    }
    if (f->n + n > f->cap) {
        if (f->pos > f->cap / 2) {   /* slide what is left to the front */
            memmove(f->buf, f->buf + f->pos, f->n - f->pos);
            f->n -= f->pos;
            f->cut -= f->pos;
            f->scan -= f->pos;
            f->ev = f->ev > f->pos ? f->ev - f->pos : 0;
            f->done_at = f->done_at > f->pos ? f->done_at - f->pos : 0;
            f->pos = 0;
        }
        size_t c = f->cap ? f->cap : 16384;
        while (c < f->n + n) c *= 2;
        if (c != f->cap) {
            char *b = realloc(f->buf, c);
            if (!b) return -1;
            f->buf = b;
            f->cap = c;
        }
    }
    memcpy(f->buf + f->n, s, n);
    f->n += n;
    return 0;
}

/* A stream's events end at a blank line ("\n\n", "\n\r\n"): moves `cut`
 * to the end of the last whole event, noting data: [DONE]. */
static void find_events(fwd *f)
{
    for (; f->scan < f->n; f->scan++) {
        char ch = f->buf[f->scan];
        if (ch == '\n') {
            if (f->nl) {
                size_t s = f->ev, len = f->scan + 1 - s;
                if (!f->saw_done && ((len >= 12 && !memcmp(f->buf + s, "data: [DONE]", 12)) ||
                                     (len >= 11 && !memcmp(f->buf + s, "data:[DONE]", 11)))) {
                    f->saw_done = true;
                    f->done_at = s;
                }
                f->cut = f->ev = f->scan + 1;
                f->nl = 0;
            } else f->nl = 1;
        } else if (ch != '\r') f->nl = 0;
    }
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ctx)
{
    fwd *f = ctx;
    size_t n = size * nmemb;
    if (buf_put(f, ptr, n) < 0) return 0;   /* aborts the transfer */
    if (f->sse) find_events(f);
    if (f->obs && !f->obs_off && bench_xfer_feed(f->obs, f->status, ptr, n) < 0) f->obs_off = true;
    return n;
}

static size_t on_header(char *b, size_t size, size_t nitems, void *ctx)
{
    fwd *f = ctx;
    size_t n = size * nitems;
    if (n >= 5 && !strncmp(b, "HTTP/", 5)) {   /* a status line: a new response (after a 1xx) */
        const char *sp = memchr(b, ' ', n);
        f->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        f->ctype[0] = '\0';
    } else if (n <= 2 && (b[0] == '\r' || b[0] == '\n')) {
        if (f->status >= 200) {
            f->got_headers = true;
            f->sse = !strncasecmp(f->ctype, "text/event-stream", 17);
            f->bc.stream = f->sse;
        }
    } else if (n > 13 && !strncasecmp(b, "content-type:", 13)) {
        const char *v = b + 13;
        size_t k = n - 13;
        while (k && (*v == ' ' || *v == '\t')) v++, k--;
        while (k && (v[k - 1] == '\r' || v[k - 1] == '\n' || v[k - 1] == ' ')) k--;
        snprintf(f->ctype, sizeof f->ctype, "%.*s", (int)k, v);
    }
    return n;
}

static void drop_transfer(fwd *f)
{
    if (f->easy) {
        if (f->multi) curl_multi_remove_handle(f->multi, f->easy);
        curl_easy_cleanup(f->easy);
        f->easy = NULL;
    }
    curl_slist_free_all(f->hdrs);
    f->hdrs = NULL;
}

/* A transfer's failure the worker is to blame for: refused, reset, cut,
 * timed out (not our own write refusing bytes). */
static bool worker_fault(CURLcode rc)
{
    return rc != CURLE_OK && rc != CURLE_WRITE_ERROR && rc != CURLE_OUT_OF_MEMORY && rc != CURLE_ABORTED_BY_CALLBACK;
}

/* The attempt ended: settled with its worker before the client hears. */
static void settle(fwd *f)
{
    if (f->accounted) return;
    f->accounted = true;
    rproxy *p = f->p;
    if (f->transport) rp_worker_down(p, (uint32_t)f->worker, f->why, false);
    rp_finished(p, (uint32_t)f->worker, (f->failed && !f->aborted) || f->status >= 500);
}

static void ended(fwd *f, CURLcode rc)
{
    f->ended = true;
    f->rc = rc;
    drop_transfer(f);
    const char *url = f->p->w[f->worker].url;
    if (f->oversize) {
        f->failed = true;
        snprintf(f->why, sizeof f->why,
                 "worker %s: the %s is larger than the %zu bytes the router holds (--max-response-bytes); "
                 "the worker's connection was closed", url, f->sse ? "event" : "response", f->p->cfg.max_response_bytes);
    } else if (rc != CURLE_OK) {
        f->failed = true;
        f->transport = worker_fault(rc);
        snprintf(f->why, sizeof f->why, "worker %s failed: %s%s%s", url, curl_easy_strerror(rc), f->curl_err[0] ? ": " : "",
                 f->curl_err);
    }
    settle(f);
}

/* We end the transfer ourselves (the router stops, the client left, the
 * poller gave up on the worker). */
static void cut_off(fwd *f, bool aborted, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cut_off(fwd *f, bool aborted, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->why, sizeof f->why, fmt, ap);
    va_end(ap);
    f->ended = f->failed = true;
    f->aborted = aborted;
    f->rc = CURLE_OK;
    drop_transfer(f);
    settle(f);
}

/* The observer's verdict as a trace record, once. */
static void record(fwd *f)
{
    if (f->recorded) return;
    f->recorded = true;
    rproxy *p = f->p;
    if (!p->cfg.record_path) return;
    if (f->obs) {
        if (f->failed && !f->aborted) {   /* our verdict: the observer's own words when it has none */
            if (!f->obs->failed) {
                f->obs->failed = 1;
                snprintf(f->obs->msg, sizeof f->obs->msg, "%.*s", (int)sizeof f->obs->msg - 1, f->why);
            }
        }
        snprintf(f->obs->curl_err, sizeof f->obs->curl_err, "%s", f->curl_err);
    } else {
        free(f->res.error);
        f->res.error = strdup("no healthy worker");
        f->res.finish = TR_FINISH_ERROR;
        f->res.sent = 1;
        f->res.send = f->arrival - p->t0;
        f->res.e2e = rh_now() - f->arrival;
    }
    rp_record(p, f->id, f->worker, &f->prompt, f->obs, &f->res, f->aborted ? CURLE_OK : f->rc, f->aborted);
}

static void fwd_unref(fwd *f)
{
    if (atomic_fetch_sub(&f->refs, 1) > 1) return;
    if (f->worker >= 0 && !f->ended) cut_off(f, true, "the client went away");
    record(f);
    drop_transfer(f);
    if (f->multi) curl_multi_cleanup(f->multi);
    bench_xfer_free(f->obs);
    free(f->res.chunk_times);
    free(f->res.error);
    free(f->res.text);
    rp_prompt_free(&f->prompt);
    free(f->body);
    free(f->auth);
    free(f->accept);
    free(f->buf);
    atomic_fetch_sub(&f->p->live, 1);   /* the client has all it will get */
    free(f);
}

static char *dup_header(struct MHD_Connection *c, const char *name, const char *prefix)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    if (!v) return NULL;
    size_t n = strlen(prefix) + strlen(v) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s", prefix, v);
    return s;
}

/* The next attempt: a worker picked and the body on its way. 0, or -1 when
 * no worker is healthy. */
static int attempt(fwd *f)
{
    rproxy *p = f->p;
    uint64_t epoch = 0;
    int k = rp_pick(p, f->prompt.hashes, f->prompt.n_hashes, &epoch);
    if (k < 0) return -1;
    drop_transfer(f);
    f->worker = k;
    f->epoch = epoch;
    f->attempts++;
    f->status = 0;
    f->ctype[0] = f->curl_err[0] = f->why[0] = '\0';
    f->got_headers = f->sse = f->ended = f->failed = f->transport = f->aborted = f->accounted = false;
    f->n = f->pos = f->cut = f->scan = f->ev = 0;
    f->nl = 0;
    f->saw_done = f->oversize = false;
    f->rc = CURLE_OK;
    /* a fresh observer: what the client is told is this attempt's */
    bench_xfer_free(f->obs);
    free(f->res.chunk_times);
    free(f->res.error);
    free(f->res.text);
    memset(&f->res, 0, sizeof f->res);
    f->obs_off = false;
    f->bc = (bench_config){.base_url = p->w[k].url, .endpoint = f->path, .api = (bench_api)f->api};
    /* the observer only when recording: it keeps a copy of a whole answer */
    if (p->cfg.record_path && (f->obs = bench_xfer_observer(&f->bc, f->prompt.max_tokens, &f->res))) {
        f->obs->t_send = f->arrival;
        f->res.send = f->arrival - p->t0;
        f->res.sent = 1;
    }
    char url[640];
    snprintf(url, sizeof url, "%s%s", p->w[k].url, f->path);
    struct curl_slist *h = NULL, *t;
    const char *fixed[] = {"Content-Type: application/json", "Expect:", f->auth, f->accept};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        if (!fixed[i]) continue;
        if (!(t = curl_slist_append(h, fixed[i]))) break;
        h = t;
    }
    f->hdrs = h;
    CURL *c = f->easy = curl_easy_init();
    if (!c) {
        cut_off(f, false, "worker %s: out of memory starting the transfer", p->w[k].url);
        return 0;
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, f->body ? f->body : "");
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)f->n_body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, f->hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, f);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, f->curl_err);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(p->cfg.connect_timeout_s * 1e3 + 0.5));
    if (p->cfg.request_timeout_s > 0)
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(p->cfg.request_timeout_s * 1e3 + 0.5));
    if (!f->multi && !(f->multi = curl_multi_init())) {
        cut_off(f, false, "worker %s: out of memory starting the transfer", p->w[k].url);
        return 0;
    }
    if (curl_multi_add_handle(f->multi, c) != CURLM_OK) cut_off(f, false, "worker %s: libcurl refused the transfer", p->w[k].url);
    return 0;
}

enum want { W_HEADERS, W_DATA, W_END };

/* Where what a stream may pass on now ends: its whole events, but not its
 * [DONE] before the transfer ended and the request is recorded (a client
 * that has its [DONE] has its completion, and the trace must hold it). */
static size_t passable(const fwd *f)
{
    return f->saw_done && !f->ended && f->done_at < f->cut ? f->done_at : f->cut;
}

static bool satisfied(const fwd *f, int want)
{
    if (want == W_HEADERS) return f->got_headers;
    if (want == W_DATA) return f->sse && passable(f) > f->pos;
    return false;
}

/* Moves the worker's bytes until `want` holds or the transfer ended. */
static void pump(fwd *f, int want)
{
    rproxy *p = f->p;
    rp_worker *w = &p->w[f->worker];
    while (!f->ended) {
        int running = 0;
        curl_multi_perform(f->multi, &running);
        CURLMsg *m;
        int left;
        while (!f->ended && (m = curl_multi_info_read(f->multi, &left)))
            if (m->msg == CURLMSG_DONE) ended(f, m->data.result);
        if (f->ended || satisfied(f, want)) return;
        if (atomic_load(&p->quit)) {
            cut_off(f, true, "the router is shutting down; the request to worker %s was cut off", w->url);
            return;
        }
        if (atomic_load(&w->down_epoch) != f->epoch) {
            cut_off(f, false, "worker %s stopped answering (its health check failed); the request was cut off", w->url);
            return;
        }
        if (rp_client_gone(f->cfd, &f->pending)) {
            /* Closing the worker's connection is the cancel: SGLang and vLLM
             * abort a request whose connection closes, streamed or not. */
            f->gone = true;
            cut_off(f, true, "the client went away; the request to worker %s was cancelled", w->url);
            return;
        }
        /* Woken by the worker's bytes, or by the client's socket (its
         * leaving) unless it holds unread bytes, which would wake us at once. */
        struct curl_waitfd cw = {.fd = f->cfd, .events = CURL_WAIT_POLLIN};
        bool watch = f->cfd >= 0 && !f->pending;
        curl_multi_poll(f->multi, watch ? &cw : NULL, watch ? 1 : 0, 100, NULL);
    }
}

/* ---- a stream, passed on ---- */
static void put_error_event(fwd *f)
{
    f->error_sent = true;
    f->n = f->cut;   /* half an event is never passed on */
    if (f->scan > f->n) f->scan = f->n;
    if (f->saw_done) return;   /* the client already has its end */
    size_t k = 0;
    char *j = rp_error_json(f->why, f->aborted ? "server_shutdown" : "server_error",
                            f->aborted ? "router_shutdown" : "worker_failed", &k);
    if (j) {
        buf_put(f, "data: ", 6);
        buf_put(f, j, k);
        buf_put(f, "\n\n", 2);
        free(j);
    }
    buf_put(f, "data: [DONE]\n\n", 14);
    f->cut = f->n;
}

/* The stream's bytes as the client takes them. The request is recorded
 * once the transfer ended and before the last bytes go (its [DONE], or
 * the error event), so whatever a client has whole is in the trace. */
static ssize_t reader(void *cls, uint64_t at, char *out, size_t max)
{
    (void)at;
    fwd *f = cls;
    for (;;) {
        if (f->gone) {
            record(f);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (f->ended) {
            if (f->failed && !f->error_sent) put_error_event(f);
            else if (!f->failed && f->n > f->cut) f->cut = f->n;   /* a clean end: whatever is left */
            record(f);
        }
        size_t lim = passable(f);
        if (lim > f->pos) {
            size_t k = lim - f->pos < max ? lim - f->pos : max;
            memcpy(out, f->buf + f->pos, k);
            f->pos += k;
            return (ssize_t)k;
        }
        if (f->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        pump(f, W_DATA);
    }
}

static void reader_done(void *cls)
{
    fwd_unref(cls);
}

/* ---- routed requests ---- */
static enum MHD_Result no_worker(rproxy *p, struct MHD_Connection *c, fwd *f)
{
    (void)f;
    char list[2048] = "";
    size_t at = 0;
    for (uint32_t i = 0; i < p->n && at + 1 < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", p->w[i].url);
    return send_error(c, 503, "server_error", "no_healthy_worker", "no healthy worker to route to (of %u: %s)", p->n, list);
}

static enum MHD_Result route(rproxy *p, struct MHD_Connection *c, hreq *h, const char *url)
{
    if (atomic_load(&p->draining))
        return send_error(c, 503, "server_error", "router_shutdown", "the router is shutting down");
    fwd *f = calloc(1, sizeof *f);
    if (!f) return MHD_NO;
    f->p = p;
    atomic_init(&f->refs, 1);
    f->api = h->api;
    f->worker = -1;
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    f->cfd = fd ? fd->connect_fd : -1;
    f->id = atomic_fetch_add(&p->next_id, 1);
    f->arrival = rh_now();
    f->body = h->up.body;
    f->n_body = h->up.n;
    h->up.body = NULL;
    h->f = f;
    atomic_fetch_add(&p->live, 1);
    snprintf(f->path, sizeof f->path, "%s", url);
    f->auth = dup_header(c, MHD_HTTP_HEADER_AUTHORIZATION, "Authorization: ");
    f->accept = dup_header(c, MHD_HTTP_HEADER_ACCEPT, "Accept: ");
    if (rp_prompt_read(f->api, f->body ? f->body : "", f->n_body, p->cfg.prefix_block, &f->prompt) < 0)
        return send_error(c, 500, "server_error", "out_of_memory", "out of memory reading the request");
    /* No idle timeout while a worker works on it (a long prefill sends
     * nothing for a while; pump watches the client instead); completed()
     * restores it. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    for (;;) {
        if (attempt(f) < 0) {
            record(f);
            return no_worker(p, c, f);
        }
        pump(f, W_HEADERS);
        if (f->gone) {   /* nobody to answer: the connection is closed */
            record(f);
            return MHD_NO;
        }
        if (f->got_headers && !(f->ended && f->failed)) break;
        /* Refused: nothing reached the worker, so another may take it. */
        if (f->rc == CURLE_COULDNT_CONNECT && !f->got_headers && f->attempts < p->n && !atomic_load(&p->quit)) continue;
        record(f);
        return send_error(c, 502, "server_error", f->oversize ? "response_too_large" : "worker_failed", "%s", f->why);
    }
    if (f->sse) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, reader, f, reader_done);
        if (!r) return MHD_NO;
        atomic_fetch_add(&f->refs, 1);   /* the response's, dropped by reader_done */
        MHD_add_response_header(r, "Content-Type", f->ctype);
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ok = MHD_queue_response(c, (unsigned)f->status, r);
        MHD_destroy_response(r);
        return ok;
    }
    pump(f, W_END);
    record(f);   /* in the trace before the client has a byte of the answer */
    if (f->gone) return MHD_NO;
    if (f->failed)
        return send_error(c, 502, "server_error", f->oversize ? "response_too_large" : "worker_failed", "%s", f->why);
    size_t n = f->n - f->pos;
    char *body = malloc(n ? n : 1);
    if (!body) return MHD_NO;
    memcpy(body, f->buf + f->pos, n);
    f->pos = f->n;
    return send_owned(c, (unsigned)f->status, f->ctype, body, n);
}

/* ---- plain endpoints ---- */
typedef struct sink {
    char *p;
    size_t n, cap, limit;
    char ctype[256];
    long status;
} sink;

static size_t sink_body(char *ptr, size_t size, size_t nmemb, void *ctx)
{
    sink *s = ctx;
    size_t n = size * nmemb;
    if (s->n + n > s->limit) return 0;
    if (s->n + n + 1 > s->cap) {
        size_t c = s->cap ? s->cap : 4096;
        while (c < s->n + n + 1) c *= 2;
        char *b = realloc(s->p, c);
        if (!b) return 0;
        s->p = b;
        s->cap = c;
    }
    memcpy(s->p + s->n, ptr, n);
    s->n += n;
    return n;
}

/* GET /v1/models (and /v1/models/{id}): the first healthy worker's answer. */
static enum MHD_Result models(rproxy *p, struct MHD_Connection *c, const char *url)
{
    for (int k = rp_first_healthy(p, 0); k >= 0; k = rp_first_healthy(p, (uint32_t)k + 1)) {
        char u[1200], err[CURL_ERROR_SIZE] = "";
        snprintf(u, sizeof u, "%s%s", p->w[k].url, url);
        CURL *h = curl_easy_init();
        if (!h) return MHD_NO;
        sink s = {.limit = p->cfg.max_response_bytes};
        char *auth = dup_header(c, MHD_HTTP_HEADER_AUTHORIZATION, "Authorization: ");
        struct curl_slist *hd = auth ? curl_slist_append(NULL, auth) : NULL;
        curl_easy_setopt(h, CURLOPT_URL, u);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(p->cfg.connect_timeout_s * 1e3 + 0.5));
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
        if (hd) curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
        CURLcode rc = curl_easy_perform(h);
        const char *ct = NULL;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &s.status);
        curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct);
        snprintf(s.ctype, sizeof s.ctype, "%s", ct ? ct : "application/json");
        curl_easy_cleanup(h);
        curl_slist_free_all(hd);
        free(auth);
        if (rc == CURLE_OK) return send_owned(c, (unsigned)s.status, s.ctype, s.p ? s.p : strdup(""), s.n);
        free(s.p);
        char why[CURL_ERROR_SIZE + 1400];
        snprintf(why, sizeof why, "worker %s: GET %s: %s%s%s", p->w[k].url, url, curl_easy_strerror(rc), err[0] ? ": " : "",
                 err);
        if (worker_fault(rc)) rp_worker_down(p, (uint32_t)k, why, false);
    }
    return no_worker(p, c, NULL);
}

static enum MHD_Result health(rproxy *p, struct MHD_Connection *c)
{
    uint32_t k = rp_healthy_workers(p);
    bool draining = atomic_load(&p->draining);
    char body[256];
    snprintf(body, sizeof body, "{\"status\":\"%s\",\"workers\":%u,\"healthy_workers\":%u}",
             draining ? "shutting down" : k ? "ok" : "no healthy worker", p->n, k);
    char *b = strdup(body);
    return b ? send_owned(c, k && !draining ? 200 : 503, "application/json", b, strlen(b)) : MHD_NO;
}

static enum MHD_Result metrics_page(rproxy *p, struct MHD_Connection *c)
{
    size_t n = 0;
    char *t = rp_metrics_text(p, &n);
    return t ? send_owned(c, 200, "text/plain; version=0.0.4", t, n) : MHD_NO;
}

/* ---- the handler ---- */
static int kind_of(const char *url, const char *method, int *api)
{
    *api = rp_api_of_path(url);
    if (*api >= 0) return strcmp(method, "POST") ? K_BAD_METHOD : K_ROUTED;
    bool get = !strcmp(method, "GET");
    if (!strcmp(url, "/v1/models") || (!strncmp(url, "/v1/models/", 11) && url[11])) return get ? K_MODELS : K_BAD_METHOD;
    if (!strcmp(url, "/health")) return get ? K_HEALTH : K_BAD_METHOD;
    if (!strcmp(url, "/metrics")) return get ? K_METRICS : K_BAD_METHOD;
    return K_NOT_FOUND;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *data, size_t *size, void **con_cls)
{
    (void)version;
    rproxy *p = cls;
    hreq *h = *con_cls;
    if (!h) {
        if (!(h = calloc(1, sizeof *h))) return MHD_NO;
        *con_cls = h;
        uint64_t mine = rp_conn_header_in(p, c);
        if (mine) {   /* answered, and this connection closed: one slot back */
            char msg[256];
            snprintf(msg, sizeof msg,
                     "this client holds %llu open connections, more than the %u one client may "
                     "(--max-connections-per-client); try again later",
                     (unsigned long long)mine, p->client_cap);
            size_t n = 0;
            char *body = rp_error_json(msg, "rate_limit_error", "too_many_connections", &n);
            return body ? send_owned_close(c, 429, "application/json", body, n, true) : MHD_NO;
        }
        h->kind = kind_of(url, method, &h->api);
        if (h->kind == K_ROUTED) {
            const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            if (cl && strtoull(cl, NULL, 10) > p->cfg.max_body_bytes)
                return send_error(c, 413, "invalid_request_error", "body_too_large",
                                  "the body is %s bytes, more than the %zu the router accepts (--max-body-bytes)", cl,
                                  p->cfg.max_body_bytes);
        }
        return MHD_YES;
    }
    if (*size) {
        if (rh_upload_feed(&h->up, data, *size, p->cfg.max_body_bytes) < 0) return MHD_NO;
        *size = 0;
        return MHD_YES;
    }
    if (h->up.too_big)
        return send_error(c, 413, "invalid_request_error", "body_too_large",
                          "the body is larger than the %zu bytes the router accepts (--max-body-bytes)",
                          p->cfg.max_body_bytes);
    switch (h->kind) {
    case K_ROUTED: return route(p, c, h, url);
    case K_MODELS: return models(p, c, url);
    case K_HEALTH: return health(p, c);
    case K_METRICS: return metrics_page(p, c);
    case K_BAD_METHOD:
        return send_error(c, 405, "invalid_request_error", "method_not_allowed", "%s is not allowed on %s", method, url);
    default: return send_error(c, 404, "invalid_request_error", "not_found", "no such endpoint: %s %s", method, url);
    }
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    rp_conn_response_done(cls, c);
    hreq *h = *con_cls;
    if (!h) return;
    if (h->f) fwd_unref(h->f);
    free(h->up.body);
    free(h);
    *con_cls = NULL;
}

static void quiet_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    (void)fmt;
    (void)ap;
}

int rp_http_start(rproxy *p, rh_err *e)
{
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons(p->cfg.port);
    const char *host = p->cfg.host ? p->cfg.host : "127.0.0.1";
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return rh_fail(e, "--host %s: not an IPv4 address (127.0.0.1 serves this machine, 0.0.0.0 every interface)", host);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    /* One client holds at most its cap (then 429); libmicrohttpd closes at
     * accept the few past the margin, so one address's flood leaves the
     * others their slots. A header comes under libmicrohttpd's inactivity
     * timeout (header_timeout) and the guard's deadline for the whole. */
    p->client_cap = rh_guard_client_cap(p->cfg.max_connections, p->cfg.max_connections_per_client);
    uint32_t margin = rh_guard_client_margin(p->cfg.max_connections, p->client_cap);
    if (!(p->guard = rh_guard_new(e))) return -1;
    p->d = MHD_start_daemon(flags, p->cfg.port, NULL, NULL, handler, p, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->cfg.max_connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(p->client_cap + margin),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->cfg.header_timeout_s,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, p, MHD_OPTION_NOTIFY_CONNECTION, rp_conn_event, p,
                            MHD_OPTION_EXTERNAL_LOGGER, quiet_log, NULL, MHD_OPTION_END);
    const union MHD_DaemonInfo *info = p->d ? MHD_get_daemon_info(p->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (!info || !info->port) {
        if (p->d) MHD_stop_daemon(p->d);
        p->d = NULL;
        rh_guard_free(p->guard);
        p->guard = NULL;
        return rh_fail(e, "--port %u: cannot listen on %s:%u (is the port in use?)", (unsigned)p->cfg.port, host,
                       (unsigned)p->cfg.port);
    }
    snprintf(p->url, sizeof p->url, "http://%s:%u", host, (unsigned)info->port);
    return 0;
}

void rp_http_stop(rproxy *p)
{
    if (p->d) MHD_stop_daemon(p->d);   /* every connection closed, each taken off the guard */
    p->d = NULL;
    rh_guard_free(p->guard);
    p->guard = NULL;
}
