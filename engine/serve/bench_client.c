/* bench_client.c — sends a dataset's requests on schedule and times them.
 *
 * One thread drives every transfer through libcurl's multi interface: it
 * admits requests whose arrival has come (respecting the concurrency cap and
 * session order), lets curl move bytes, and stamps each content chunk with the
 * monotonic clock inside the write callback, which curl calls as soon as the
 * bytes are read. A single thread keeps the timestamps honest: no lock or
 * scheduler hop sits between a chunk's arrival and its stamp. */
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/bench.h"
#include "engine/serve/bench_body.h"
#include "engine/serve/bench_sse.h"
#include "util/progress.h"

/* Error bodies and non-streamed answers are kept up to this size. */
#define BODY_LIMIT (8u << 20)

static volatile sig_atomic_t stop_requested;

void bench_stop(void)
{
    stop_requested = 1;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int ensure_curl(rh_err *e)
{
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) return rh_fail(e, "libcurl failed to start: %s", curl_easy_strerror(curl_init_rc));
    return 0;
}

/* One request in flight. */
typedef struct xfer {
    size_t item;
    bench_result *res;
    const bench_config *cfg;
    uint32_t max_tokens;
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    double t_send;                  /* absolute, rh_now() */
    double now;                     /* stamp of the bytes being parsed */
    long status;                    /* 0 until the headers are in */
    bench_sse sse;
    char *resp;                     /* error body or non-streamed answer */
    size_t n_resp, cap_resp;
    rh_dvec times;                  /* content chunks, s from send */
    int failed;                     /* our own verdict (malformed event, error event) */
    char msg[1100];
    int finish;                     /* from finish_reason, -1 when none seen */
    bench_chunk usage;              /* the last usage seen */
    char curl_err[CURL_ERROR_SIZE];
} xfer;

static int on_event(void *ctx, const char *data, size_t n)
{
    xfer *x = ctx;
    bench_chunk c;
    rh_err e;
    if (bench_parse_chunk(data, n, x->cfg->api == BENCH_API_CHAT, &c, &e) < 0) {
        x->failed = 1;
        snprintf(x->msg, sizeof x->msg, "%s", e.msg);
        return -1;
    }
    if (c.error[0]) {
        x->failed = 1;
        snprintf(x->msg, sizeof x->msg, "error event: %s", c.error);
        return -1;
    }
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

static int keep_body(xfer *x, const char *p, size_t n)
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

static size_t on_data(char *p, size_t size, size_t nmemb, void *ctx)
{
    xfer *x = ctx;
    size_t n = size * nmemb;
    x->now = rh_now();
    if (x->status == 0) curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status >= 300 || !x->cfg->stream) return keep_body(x, p, n) < 0 ? 0 : n;
    rh_err e;
    if (bench_sse_feed(&x->sse, p, n, on_event, x, &e) < 0) {
        if (!x->failed) {
            x->failed = 1;
            snprintf(x->msg, sizeof x->msg, "%s", e.msg);
        }
        return 0;                   /* aborts the transfer: the stream is unusable */
    }
    return n;
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

/* The verdict on a finished transfer. `rc` is curl's result; `aborted` is set
 * when the run was stopped and took the request down with it. */
static void conclude(xfer *x, CURLcode rc, int aborted, const bench_dataset *d)
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
            if (bench_parse_chunk(x->resp ? x->resp : "", x->n_resp, x->cfg->api == BENCH_API_CHAT, &c, &e) < 0) {
                x->failed = 1;
                snprintf(x->msg, sizeof x->msg, "%s", e.msg);
            } else if (c.error[0]) {
                x->failed = 1;
                snprintf(x->msg, sizeof x->msg, "error response: %s", c.error);
            } else if (c.content) {
                /* One answer: the first token is seen when the whole is (SGLang's rule). */
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
        else if (x->times.n == 0) fail(r, TR_FINISH_ERROR, "the response held no content");
        else if (x->finish == TR_FINISH_ABORT || x->finish == TR_FINISH_ERROR)
            fail(r, x->finish, "the server ended the request (finish_reason %s)",
                 x->finish == TR_FINISH_ABORT ? "abort" : "error");
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

static void xfer_free(xfer *x)
{
    if (!x) return;
    if (x->easy) curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->headers);
    free(x->body);
    free(x->resp);
    bench_sse_free(&x->sse);
    rh_dvec_free(&x->times);
    free(x);
}

static struct curl_slist *make_headers(const bench_config *c)
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
    return h;
oom:
    curl_slist_free_all(h);
    return NULL;
}

typedef struct run {
    const bench_config *cfg;
    const bench_dataset *d;
    bench_result *out;
    CURLM *multi;
    char *url;
    char *model_json;
    int32_t *tokens;                /* scratch: the longest prompt */
    size_t *heap, n_heap;           /* arrived, unblocked, not yet sent: a min-heap of indices */
    int64_t *succ;                  /* the next turn of an item's session, or -1 */
    uint8_t *state;                 /* per item, below */
    xfer **live;                    /* per item: its transfer while in flight */
    uint64_t inflight, done, failed;
} run;

enum { ST_FUTURE = 0, ST_BLOCKED, ST_QUEUED, ST_SENT, ST_DONE };

static int launch(run *R, size_t i, double t0, rh_err *e)
{
    const bench_item *it = &R->d->items[i];
    xfer *x = calloc(1, sizeof *x);
    if (!x) return rh_fail(e, "out of memory sending request %zu", i);
    x->item = i;
    x->res = &R->out[i];
    x->cfg = R->cfg;
    x->max_tokens = it->output_len;
    x->finish = -1;
    bench_sse_init(&x->sse);
    bench_item_tokens(R->d, i, R->tokens);
    bench_body_opts bo = {R->model_json, R->cfg->api == BENCH_API_CHAT, R->cfg->stream};
    size_t len = 0;
    x->body = bench_request_body(&bo, R->tokens, it->input_len, it->output_len, &len);
    x->headers = make_headers(R->cfg);
    x->easy = curl_easy_init();
    if (!x->body || !x->headers || !x->easy) {
        xfer_free(x);
        return rh_fail(e, "out of memory building request %zu", i);
    }
    CURL *h = x->easy;
    curl_easy_setopt(h, CURLOPT_URL, R->url);
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
    if (R->cfg->request_timeout > 0)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)ceil(R->cfg->request_timeout * 1e3));
    x->t_send = rh_now();
    x->res->send = x->t_send - t0;
    x->res->sent = 1;
    if (curl_multi_add_handle(R->multi, h) != CURLM_OK) {
        xfer_free(x);
        return rh_fail(e, "libcurl refused request %zu", i);
    }
    R->state[i] = ST_SENT;
    R->live[i] = x;
    R->inflight++;
    return 0;
}

/* Waiting requests leave in arrival order (items are sorted by arrival, so
 * by index). A heap rather than a FIFO because a session's next turn joins
 * late, when its previous turn finishes, yet is due before anything that
 * arrived after it — and in a closed-loop trace (all arrivals 0) that keeps
 * file order, as the trace's clients would. */
static void enqueue(run *R, size_t i)
{
    R->state[i] = ST_QUEUED;
    size_t k = R->n_heap++;
    while (k > 0 && R->heap[(k - 1) / 2] > i) {
        R->heap[k] = R->heap[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    R->heap[k] = i;
}

static size_t dequeue(run *R)
{
    size_t top = R->heap[0], last = R->heap[--R->n_heap], k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= R->n_heap) break;
        if (c + 1 < R->n_heap && R->heap[c + 1] < R->heap[c]) c++;
        if (R->heap[c] >= last) break;
        R->heap[k] = R->heap[c];
        k = c;
    }
    if (R->n_heap) R->heap[k] = last;
    return top;
}

static void complete(run *R, xfer *x, CURLcode rc, int aborted)
{
    conclude(x, rc, aborted, R->d);
    size_t i = x->item;
    curl_multi_remove_handle(R->multi, x->easy);
    if (R->out[i].error) {
        R->failed++;
        if (R->cfg->log)
            fprintf(R->cfg->log, "request %llu failed: %s\n", (unsigned long long)R->d->items[i].id, R->out[i].error);
    }
    xfer_free(x);
    R->live[i] = NULL;
    R->state[i] = ST_DONE;
    R->inflight--;
    R->done++;
    int64_t s = R->succ[i];
    if (s >= 0 && R->state[s] == ST_BLOCKED) enqueue(R, (size_t)s);
}

static int drain(run *R)
{
    int got = 0, left;
    CURLMsg *m;
    while ((m = curl_multi_info_read(R->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        xfer *x = NULL;
        CURL *h = m->easy_handle;
        CURLcode rc = m->data.result;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&x);
        complete(R, x, rc, 0);
        got++;
    }
    return got;
}

/* Stopped: everything in flight is aborted and recorded as such. */
static void abort_inflight(run *R)
{
    for (size_t i = 0; i < R->d->n; i++)
        if (R->live[i]) complete(R, R->live[i], CURLE_OK, 1);
}

static void run_free(run *R)
{
    if (R->multi) curl_multi_cleanup(R->multi);
    free(R->url);
    free(R->model_json);
    free(R->tokens);
    free(R->heap);
    free(R->succ);
    free(R->state);
    free(R->live);
}

static char *join_url(const char *base, const char *path)
{
    size_t nb = strlen(base);
    while (nb && base[nb - 1] == '/') nb--;
    size_t n = nb + strlen(path) + 2;
    char *u = malloc(n);
    if (u) snprintf(u, n, "%.*s%s%s", (int)nb, base, path[0] == '/' ? "" : "/", path);
    return u;
}

static int run_init(run *R, const bench_config *c, const bench_dataset *d, bench_result *out, rh_err *e)
{
    memset(R, 0, sizeof *R);
    R->cfg = c;
    R->d = d;
    R->out = out;
    uint32_t longest = 1;
    for (size_t i = 0; i < d->n; i++)
        if (d->items[i].input_len > longest) longest = d->items[i].input_len;
    R->multi = curl_multi_init();
    R->url = join_url(c->base_url, c->endpoint);
    R->tokens = malloc((size_t)longest * sizeof *R->tokens);
    R->heap = malloc((d->n ? d->n : 1) * sizeof *R->heap);
    R->succ = malloc((d->n ? d->n : 1) * sizeof *R->succ);
    R->state = calloc(d->n ? d->n : 1, 1);
    R->live = calloc(d->n ? d->n : 1, sizeof *R->live);
    R->model_json = bench_json_string(c->model ? c->model : "");
    if (!R->model_json) {
        run_free(R);
        return rh_fail(e, "the model name is not valid UTF-8");
    }
    if (!R->multi || !R->url || !R->tokens || !R->heap || !R->succ || !R->state || !R->live) {
        run_free(R);
        return rh_fail(e, "out of memory starting a run of %zu requests", d->n);
    }
    for (size_t i = 0; i < d->n; i++) R->succ[i] = -1;
    /* Only a link to an earlier item can be honoured without deadlock. */
    for (size_t i = 0; i < d->n; i++) {
        int64_t a = d->items[i].after;
        if (a >= 0 && (size_t)a < i) R->succ[a] = (int64_t)i;
    }
    memset(out, 0, d->n * sizeof *out);
    return 0;
}

/* Milliseconds to wait for the next event: curl's own timers shorten the wait
 * inside curl_multi_poll; the next arrival and the stop check are ours. The
 * wait is rounded up, so a request is sent at most ~1 ms after its arrival. */
static int wait_ms(const run *R, double now, size_t next)
{
    double ms = 100;
    int slot = !R->cfg->max_concurrency || R->inflight < R->cfg->max_concurrency;
    if (slot && R->n_heap) return 0;
    if (next < R->d->n) {
        double until = (R->d->items[next].arrival - now) * 1e3;
        if (until < ms) ms = until;
    }
    return ms <= 0 ? 0 : (int)ceil(ms);
}

int bench_run(const bench_config *c, const bench_dataset *d, bench_result *out, bench_run_info *info, rh_err *e)
{
    memset(info, 0, sizeof *info);
    if (ensure_curl(e) < 0) return -1;
    run R;
    if (run_init(&R, c, d, out, e) < 0) return -1;
    rh_progress bar;
    if (c->progress) rh_progress_begin(&bar, "bench", d->n);
    double t0 = rh_now(), last = 0;
    info->t0 = t0;
    size_t next = 0;
    int rc = 0;
    while (R.done < d->n) {
        if (stop_requested) {
            abort_inflight(&R);
            info->interrupted = 1;
            break;
        }
        double now = rh_now() - t0;
        for (; next < d->n && d->items[next].arrival <= now; next++) {
            int64_t a = d->items[next].after;
            if (a >= 0 && (size_t)a < next && R.state[a] != ST_DONE) R.state[next] = ST_BLOCKED;
            else enqueue(&R, next);
        }
        while (R.n_heap && (!c->max_concurrency || R.inflight < c->max_concurrency)) {
            if (launch(&R, dequeue(&R), t0, e) < 0) {
                abort_inflight(&R);
                rc = -1;
                goto out;
            }
            if (R.inflight > info->max_inflight) info->max_inflight = R.inflight;
        }
        int running;
        curl_multi_perform(R.multi, &running);
        if (drain(&R)) {
            last = rh_now() - t0;
            continue;               /* freed slots: send what waits before sleeping */
        }
        curl_multi_poll(R.multi, NULL, 0, wait_ms(&R, rh_now() - t0, next), NULL);
        if (c->progress) {
            snprintf(bar.extra, sizeof bar.extra, "%llu in flight, %llu failed", (unsigned long long)R.inflight,
                     (unsigned long long)R.failed);
            rh_progress_update(&bar, R.done);
        }
    }
    if (!info->interrupted) last = rh_now() - t0;
out:
    if (c->progress) {
        rh_progress_update(&bar, R.done);
        rh_progress_end(&bar);
    }
    info->wall = last;
    stop_requested = 0;             /* a stop ends one run, not the next */
    run_free(&R);
    return rc;
}

void bench_results_free(bench_result *r, size_t n)
{
    if (!r) return;
    for (size_t i = 0; i < n; i++) {
        free(r[i].chunk_times);
        free(r[i].error);
    }
    free(r);
}

static size_t on_probe_data(char *p, size_t size, size_t nmemb, void *ctx)
{
    xfer *x = ctx;
    return keep_body(x, p, size * nmemb) < 0 ? 0 : size * nmemb;
}

/* The first model id of an OpenAI /v1/models answer, malloc'd, or NULL. */
static char *first_model(const char *body, size_t n)
{
    json_error_t je;
    json_t *root = json_loadb(body, n, 0, &je);
    json_t *data = json_object_get(root, "data");
    json_t *id = json_object_get(json_array_get(data, 0), "id");
    char *m = json_is_string(id) ? strdup(json_string_value(id)) : NULL;
    json_decref(root);
    return m;
}

int bench_probe(const bench_config *c, char **model, rh_err *e)
{
    if (model) *model = NULL;
    if (ensure_curl(e) < 0) return -1;
    char *url = join_url(c->base_url, "/v1/models");
    struct curl_slist *h = make_headers(c);
    xfer x;
    memset(&x, 0, sizeof x);
    x.easy = curl_easy_init();
    if (!url || !h || !x.easy) {
        free(url);
        curl_slist_free_all(h);
        if (x.easy) curl_easy_cleanup(x.easy);
        return rh_fail(e, "out of memory");
    }
    curl_easy_setopt(x.easy, CURLOPT_URL, url);
    curl_easy_setopt(x.easy, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(x.easy, CURLOPT_WRITEFUNCTION, on_probe_data);
    curl_easy_setopt(x.easy, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(x.easy, CURLOPT_ERRORBUFFER, x.curl_err);
    curl_easy_setopt(x.easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x.easy, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(x.easy, CURLOPT_TIMEOUT_MS, 60000L);
    CURLcode rc = curl_easy_perform(x.easy);
    long status = 0;
    curl_easy_getinfo(x.easy, CURLINFO_RESPONSE_CODE, &status);
    int ret = 0;
    if (rc != CURLE_OK) {
        ret = rh_fail(e, "cannot reach the server at %s: %s", c->base_url, x.curl_err[0] ? x.curl_err : curl_easy_strerror(rc));
    } else if (model) {
        char msg[600];
        if (status >= 300) {
            bench_error_message(x.resp ? x.resp : "", x.n_resp, msg, sizeof msg);
            ret = rh_fail(e, "%s answered HTTP %ld (%s) and --model was not given", url, status, msg);
        } else if (!(*model = first_model(x.resp ? x.resp : "", x.n_resp))) {
            ret = rh_fail(e, "%s lists no model id and --model was not given", url);
        }
    }
    free(url);
    free(x.resp);
    curl_slist_free_all(h);
    curl_easy_cleanup(x.easy);
    return ret;
}
