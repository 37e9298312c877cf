/* test_serve_util.h — shared by the test_serve*.c suites: a server on a free
 * loopback port serving the tiny model, and libcurl requests against it
 * (plain, streamed with every event kept, or cut off after k events). */
#ifndef RH_TEST_SERVE_UTIL_H
#define RH_TEST_SERVE_UTIL_H

#include <CUnit/CUnit.h>
#include <curl/curl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/bench_sse.h"
#include "engine/serve/server.h"
#include "engine_helpers.h"
#include "util/progress.h"

#define TS_POOL_TOKENS 16384

/* A config serving m (owned by the caller) on a free port. */
static inline server_config ts_config(const model *m)
{
    server_config c;
    server_config_default(&c);
    c.engine.m = m;
    c.engine.core.max_total_tokens = TS_POOL_TOKENS;
    c.port = 0;
    c.http_threads = 2;
    return c;
}

static inline server *ts_start(const server_config *c)
{
    rh_err e = {{0}};
    server *s = server_start(c, &e);
    if (!s) printf("\n  server_start: %s\n", e.msg);
    CU_ASSERT_FATAL(s != NULL);
    return s;
}

static inline void ts_stop(server *s)
{
    rh_err e = {{0}};
    int rc = server_stop(s, &e);
    if (rc < 0) printf("\n  server_stop: %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
}

/* A server on the tiny model shared by a suite's tests: started on first
 * use (tweak, when given, adjusts the config), stopped by ts_shared_stop in
 * the suite's cleanup (outside a test: no assertions there). */
typedef struct ts_shared {
    model *m;
    server *s;
} ts_shared;

static inline server *ts_shared_server(ts_shared *sh, void (*tweak)(server_config *c))
{
    if (!sh->s) {
        if (!sh->m) sh->m = eh_tiny_model();
        server_config c = ts_config(sh->m);
        if (tweak) tweak(&c);
        sh->s = ts_start(&c);
    }
    return sh->s;
}

static inline int ts_shared_stop(ts_shared *sh)
{
    rh_err e;
    if (sh->s && server_stop(sh->s, &e) < 0) printf("\n  server_stop: %s\n", e.msg);
    model_free(sh->m);
    sh->s = NULL;
    sh->m = NULL;
    return 0;
}

typedef struct ts_buf {
    char *p;
    size_t n;
} ts_buf;

static size_t ts_collect(char *p, size_t size, size_t nmemb, void *ctx)
{
    ts_buf *b = ctx;
    size_t n = size * nmemb;
    char *q = realloc(b->p, b->n + n + 1);
    if (!q) return 0;
    memcpy(q + b->n, p, n);
    b->n += n;
    q[b->n] = '\0';
    b->p = q;
    return n;
}

typedef struct ts_resp {
    long status;
    char *body;                 /* NUL-terminated, "" when none */
    size_t n;
    json_t *json;               /* the body parsed, or NULL */
} ts_resp;

static inline void ts_resp_free(ts_resp *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

/* base: "http://host:port"; extra: one more header (e.g.
 * "Authorization: Bearer k"), or NULL. */
static inline ts_resp ts_request_at(const char *base, const char *method, const char *path, const char *body,
                                    const char *extra)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *c = curl_easy_init();
    ts_buf b = {0};
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (extra) h = curl_slist_append(h, extra);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, ts_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    ts_resp r = {0};
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK) printf("\n  %s %s: %s\n", method, path, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    r.body = b.p ? b.p : strdup("");
    r.n = b.n;
    r.json = json_loads(r.body, 0, NULL);
    return r;
}

static inline ts_resp ts_request(const server *s, const char *method, const char *path, const char *body,
                                 const char *extra)
{
    return ts_request_at(server_url(s), method, path, body, extra);
}

static inline ts_resp ts_post(const server *s, const char *path, const char *body)
{
    return ts_request(s, "POST", path, body, NULL);
}

/* A stream's events, parsed; stops reading after `cut` events when cut > 0. */
typedef struct ts_stream {
    long status;
    json_t *events;             /* array of the JSON events, in order */
    int done;                   /* saw data: [DONE] */
    int cut;
    int n_events;
    bench_sse sse;
    int bad;                    /* an event that was not JSON */
    atomic_int *hangup;         /* non-NULL: hang up once it turns non-zero */
} ts_stream;

static int ts_on_event(void *ctx, const char *data, size_t n)
{
    ts_stream *s = ctx;
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        s->done = 1;
        return 0;
    }
    json_t *j = json_loadb(data, n, 0, NULL);
    if (!j) s->bad++;
    else json_array_append_new(s->events, j);
    s->n_events++;
    return 0;
}

static size_t ts_on_stream(char *p, size_t size, size_t nmemb, void *ctx)
{
    ts_stream *s = ctx;
    size_t n = size * nmemb;
    rh_err e;
    bench_sse_feed(&s->sse, p, n, ts_on_event, s, &e);
    if (s->cut && s->n_events >= s->cut) return 0;   /* hang up */
    if (s->hangup && atomic_load(s->hangup)) return 0;
    return n;
}

/* Progress of a transfer that waits for a hang-up flag: curl calls it even
 * when no data comes, so a queued request can be given up too. */
static int ts_progress(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a;
    (void)b;
    (void)c;
    (void)d;
    const ts_stream *s = ctx;
    return s->hangup && atomic_load(s->hangup);
}

static inline ts_stream ts_stream_at(const char *base, const char *path, const char *body, int cut,
                                     atomic_int *hangup)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", base, path);
    ts_stream st;
    memset(&st, 0, sizeof st);
    st.events = json_array();
    st.cut = cut;
    st.hangup = hangup;
    bench_sse_init(&st.sse);
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, ts_on_stream);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &st);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    if (hangup) {
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, ts_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &st);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    }
    curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st.status);
    rh_err e;
    if (!cut && !hangup) bench_sse_finish(&st.sse, ts_on_event, &st, &e);
    bench_sse_free(&st.sse);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return st;
}

static inline ts_stream ts_stream_until(const server *s, const char *path, const char *body, int cut,
                                        atomic_int *hangup)
{
    return ts_stream_at(server_url(s), path, body, cut, hangup);
}

static inline ts_stream ts_stream_post(const server *s, const char *path, const char *body, int cut)
{
    return ts_stream_at(server_url(s), path, body, cut, NULL);
}

static inline void ts_stream_free(ts_stream *s)
{
    json_decref(s->events);
    s->events = NULL;
}

/* "[1,2,3]" for a prompt of ids. */
static inline char *ts_ids_json(const int32_t *ids, uint32_t n)
{
    json_t *a = json_array();
    for (uint32_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return s;
}

/* The ids of a JSON array into out (at most cap); returns how many. */
static inline uint32_t ts_ids_of(json_t *a, int32_t *out, uint32_t cap)
{
    uint32_t n = 0;
    for (size_t i = 0; i < json_array_size(a) && n < cap; i++) out[n++] = (int32_t)json_integer_value(json_array_get(a, i));
    return n;
}

/* Polls the server's core stats until pred holds or `seconds` pass. */
static inline int ts_wait_stats(server *s, int (*pred)(const core_stats *, void *), void *ctx, double seconds)
{
    double end = rh_now() + seconds;
    core_stats st;
    for (;;) {
        server_core_stats(s, &st);
        if (pred(&st, ctx)) return 1;
        if (rh_now() > end) return 0;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

/* The value of one sample in Prometheus text: the first line that starts
 * with `prefix` (a name, with as much of its labels as tells it apart),
 * followed by a space, '{' or ','. -1 when absent. */
static inline double ts_metric(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, '\n');
        if (!end) end = p + strlen(p);
        if (!strncmp(p, prefix, n) && (p[n] == ' ' || p[n] == '{' || p[n] == ',')) {
            const char *v = end;
            while (v > p && v[-1] != ' ') v--;
            return strtod(v, NULL);
        }
        p = *end ? end + 1 : NULL;
    }
    return -1;
}

#endif
