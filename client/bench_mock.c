/* bench_mock.c — see bench_mock.h. */
#include "client/bench_mock.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "util/progress.h"

#define BODY_LIMIT (64u << 20)
#define MAX_TOKENS_LIMIT (1u << 20)

struct bench_mock {
    bench_mock_opts o;
    struct MHD_Daemon *d;
    uint16_t port;
    char url[64];
    volatile int stopping;
    pthread_mutex_t mu;             /* guards everything below */
    bench_mock_request *log;
    size_t n_log, cap_log;
    uint64_t active, max_active;
    uint64_t *seen;                 /* open-addressing set of prefix-block hashes (0 = empty) */
    size_t n_seen, cap_seen;
};

/* One HTTP request, from its first byte to the end of its response. */
typedef struct mreq {
    bench_mock *m;
    char *body;
    size_t n, cap;
    int too_big;
    size_t log;                     /* index into m->log */
    int counted;                    /* counted in m->active */
    int refs;                       /* the connection, plus a streaming response */
    uint32_t max_tokens, sent, prompt_len, cached;
    int chat, phase;
    double t0;
} mreq;

enum { PH_TOKENS, PH_USAGE, PH_DONE, PH_END };

static void sleep_until(bench_mock *m, double deadline)
{
    for (;;) {
        double left = deadline - rh_now();
        if (left <= 0 || m->stopping) return;
        if (left > 0.02) left = 0.02;          /* wake to notice a stop */
        struct timespec ts = {0, (long)(left * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, const char *json)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), (void *)json, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result answer_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
    json_t *o = json_pack("{s:{s:s,s:s,s:i}}", "error", "message", msg, "type", "invalid_request_error", "code",
                          (int)status);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    enum MHD_Result ok = answer(c, status, s ? s : "{}");
    free(s);
    json_decref(o);
    return ok;
}

static void active_add(bench_mock *m, mreq *q)
{
    pthread_mutex_lock(&m->mu);
    if (++m->active > m->max_active) m->max_active = m->active;
    pthread_mutex_unlock(&m->mu);
    q->counted = 1;
}

static void active_drop(bench_mock *m, mreq *q)
{
    if (!q->counted) return;
    pthread_mutex_lock(&m->mu);
    m->active--;
    pthread_mutex_unlock(&m->mu);
    q->counted = 0;
}

static void note_chunk(bench_mock *m, mreq *q)
{
    double t = rh_now();
    pthread_mutex_lock(&m->mu);
    bench_mock_request *l = &m->log[q->log];
    l->chunk_sent[l->n_chunks++] = t;
    pthread_mutex_unlock(&m->mu);
}

/* Whole blocks of `ids` already seen as a prefix, then all of them remembered. */
static uint32_t cache_lookup_insert(bench_mock *m, const int32_t *ids, uint32_t n)
{
    uint32_t bs = m->o.cache_block, blocks = n / bs, hit = 0;
    int prefix = 1;
    uint64_t h = 1;
    pthread_mutex_lock(&m->mu);
    for (uint32_t b = 0; b < blocks; b++) {
        h = XXH3_64bits_withSeed(ids + (size_t)b * bs, (size_t)bs * sizeof *ids, h) | 1;
        if (2 * (m->n_seen + 1) > m->cap_seen) {
            size_t cap = m->cap_seen ? m->cap_seen * 2 : 1024;
            uint64_t *t = calloc(cap, sizeof *t);
            if (!t) break;
            for (size_t i = 0; i < m->cap_seen; i++) {
                if (!m->seen[i]) continue;
                size_t j = m->seen[i] & (cap - 1);
                while (t[j]) j = (j + 1) & (cap - 1);
                t[j] = m->seen[i];
            }
            free(m->seen);
            m->seen = t;
            m->cap_seen = cap;
        }
        size_t j = h & (m->cap_seen - 1);
        while (m->seen[j] && m->seen[j] != h) j = (j + 1) & (m->cap_seen - 1);
        if (m->seen[j]) {
            if (prefix) hit++;
        } else {
            prefix = 0;
            m->seen[j] = h;
            m->n_seen++;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return hit * bs;
}

static int chunk_json(const mreq *q, uint32_t k, uint32_t n, char *buf, size_t max)
{
    char text[256] = "";
    size_t len = 0;
    for (uint32_t i = 0; i < n && len + 8 < sizeof text; i++) len += (size_t)snprintf(text + len, sizeof text - len, " t%u", (k + i) % 1000);
    const char *fin = k + n >= q->max_tokens ? "\"length\"" : "null";
    if (q->chat)
        return snprintf(buf, max,
                        "data: {\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion.chunk\",\"model\":\"mock-model\","
                        "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"},\"finish_reason\":%s}],\"usage\":null}\n\n",
                        text, fin);
    return snprintf(buf, max,
                    "data: {\"id\":\"cmpl-mock\",\"object\":\"text_completion\",\"model\":\"mock-model\","
                    "\"choices\":[{\"index\":0,\"text\":\"%s\",\"logprobs\":null,\"finish_reason\":%s}],\"usage\":null}\n\n",
                    text, fin);
}

static int usage_chunk(const mreq *q, char *buf, size_t max)
{
    return snprintf(buf, max,
                    "data: {\"id\":\"cmpl-mock\",\"model\":\"mock-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":%u,\"completion_tokens\":%u,\"total_tokens\":%u,"
                    "\"prompt_tokens_details\":{\"cached_tokens\":%u}}}\n\n",
                    q->prompt_len, q->max_tokens, q->prompt_len + q->max_tokens, q->cached);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    mreq *q = cls;
    bench_mock *m = q->m;
    const bench_mock_opts *o = &m->o;
    if (m->stopping) return MHD_CONTENT_READER_END_WITH_ERROR;
    int n = 0;
    switch (q->phase) {
    case PH_TOKENS: {
        uint32_t per = o->tokens_per_chunk ? o->tokens_per_chunk : 1, k = q->sent;
        uint32_t take = q->max_tokens - k < per ? q->max_tokens - k : per;
        if (o->malformed_after && k >= o->malformed_after) {
            q->phase = PH_END;
            return snprintf(buf, max, "data: {\"choices\": [oops\n\n");
        }
        if (o->error_after && k >= o->error_after) {
            q->phase = PH_END;
            return snprintf(buf, max, "data: {\"error\":{\"message\":\"mock error event\",\"code\":500}}\n\n");
        }
        /* A chunk leaves when its last token is due, on an absolute clock. */
        sleep_until(m, q->t0 + o->first_token_s + (double)(k + take - 1) * o->itl_s);
        if (m->stopping) return MHD_CONTENT_READER_END_WITH_ERROR;
        n = chunk_json(q, k, take, buf, max);
        q->sent += take;
        if (q->sent >= q->max_tokens) q->phase = o->no_usage ? PH_DONE : PH_USAGE;
        note_chunk(m, q);
        return n;
    }
    case PH_USAGE:
        q->phase = PH_DONE;
        return usage_chunk(q, buf, max);
    case PH_DONE:
        q->phase = PH_END;
        return snprintf(buf, max, "data: [DONE]\n\n");
    default:
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
}

/* MHD ends a request (request_done) before it destroys a streaming
 * response that still reads from it: whichever comes last frees it. */
static void mreq_release(mreq *q)
{
    bench_mock *m = q->m;
    active_drop(m, q);
    pthread_mutex_lock(&m->mu);
    int last = --q->refs == 0;
    pthread_mutex_unlock(&m->mu);
    if (!last) return;
    free(q->body);
    free(q);
}

static void stream_free(void *cls)
{
    mreq_release(cls);
}

/* The prompt as ids (completions with a token array), or its word count. */
static int read_prompt(json_t *req, int chat, int32_t **ids, uint32_t *len, uint64_t *hash)
{
    *ids = NULL;
    json_t *p;
    if (chat) {
        json_t *msgs = json_object_get(req, "messages");
        p = json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "content");
    } else {
        p = json_object_get(req, "prompt");
    }
    if (json_is_string(p)) {
        const char *s = json_string_value(p);
        uint32_t words = 0;
        for (const char *c = s; *c; c++)
            if (*c != ' ' && (c == s || c[-1] == ' ')) words++;
        *len = words;
        *hash = XXH3_64bits(s, strlen(s));
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0) return -1;
    size_t n = json_array_size(p);
    int32_t *v = malloc(n * sizeof *v);
    if (!v) return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(p, i);
        if (!json_is_integer(x)) {
            free(v);
            return -1;
        }
        v[i] = (int32_t)json_integer_value(x);
    }
    *ids = v;
    *len = (uint32_t)n;
    *hash = bench_mock_prompt_hash(v, (uint32_t)n);
    return 0;
}

uint64_t bench_mock_prompt_hash(const int32_t *ids, uint32_t n)
{
    return XXH3_64bits(ids, (size_t)n * sizeof *ids);
}

static int log_request(bench_mock *m, mreq *q, uint64_t hash, int stream, unsigned status, size_t *index)
{
    uint32_t chunks = q->max_tokens;
    double *times = calloc(chunks ? chunks : 1, sizeof *times);
    if (!times) return -1;
    pthread_mutex_lock(&m->mu);
    if (m->n_log == m->cap_log) {
        size_t cap = m->cap_log ? m->cap_log * 2 : 64;
        bench_mock_request *l = realloc(m->log, cap * sizeof *l);
        if (!l) {
            pthread_mutex_unlock(&m->mu);
            free(times);
            return -1;
        }
        m->log = l;
        m->cap_log = cap;
    }
    *index = m->n_log++;
    m->log[*index] = (bench_mock_request){q->t0, hash, q->prompt_len, q->max_tokens, q->cached, q->chat, stream,
                                          (int)status, 0, times};
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* The non-streamed answer: all tokens at once, with usage. */
static enum MHD_Result answer_whole(struct MHD_Connection *c, const mreq *q)
{
    char *text = malloc((size_t)q->max_tokens * 6 + 1);
    if (!text) return MHD_NO;
    size_t len = 0;
    text[0] = '\0';
    for (uint32_t k = 0; k < q->max_tokens; k++) len += (size_t)sprintf(text + len, " t%u", k % 1000);
    json_t *choice = q->chat ? json_pack("{s:i,s:{s:s,s:s},s:s}", "index", 0, "message", "role", "assistant",
                                         "content", text, "finish_reason", "length")
                             : json_pack("{s:i,s:s,s:s}", "index", 0, "text", text, "finish_reason", "length");
    json_t *o = json_pack("{s:s,s:[o],s:{s:i,s:i,s:i,s:{s:i}}}", "model", "mock-model", "choices", choice, "usage",
                          "prompt_tokens", (int)q->prompt_len, "completion_tokens", (int)q->max_tokens, "total_tokens",
                          (int)(q->prompt_len + q->max_tokens), "prompt_tokens_details", "cached_tokens", (int)q->cached);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    enum MHD_Result ok = s ? answer(c, MHD_HTTP_OK, s) : MHD_NO;
    free(s);
    free(text);
    json_decref(o);
    return ok;
}

static enum MHD_Result complete_post(bench_mock *m, struct MHD_Connection *c, mreq *q, int chat)
{
    q->t0 = rh_now();
    q->chat = chat;
    if (q->too_big) return answer_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large");
    json_t *req = json_loadb(q->body ? q->body : "", q->n, 0, NULL);
    if (!json_is_object(req)) {
        json_decref(req);
        return answer_error(c, MHD_HTTP_BAD_REQUEST, "malformed JSON body");
    }
    json_t *mt = json_object_get(req, "max_tokens");
    int stream = json_is_true(json_object_get(req, "stream"));
    int32_t *ids = NULL;
    uint64_t hash = 0;
    enum MHD_Result ok;
    char msg[128];
    if (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > MAX_TOKENS_LIMIT) {
        ok = answer_error(c, MHD_HTTP_BAD_REQUEST, "max_tokens must be a positive integer");
        goto out;
    }
    q->max_tokens = (uint32_t)json_integer_value(mt);
    if (read_prompt(req, chat, &ids, &q->prompt_len, &hash) < 0) {
        ok = answer_error(c, MHD_HTTP_BAD_REQUEST, "prompt must be text or a non-empty array of token ids");
        goto out;
    }
    if (m->o.max_prompt && q->prompt_len > m->o.max_prompt) {
        snprintf(msg, sizeof msg, "prompt of %u tokens is longer than the context (%u)", q->prompt_len, m->o.max_prompt);
        ok = answer_error(c, MHD_HTTP_BAD_REQUEST, msg);
        goto out;
    }
    pthread_mutex_lock(&m->mu);
    size_t nth = m->n_log + 1;
    pthread_mutex_unlock(&m->mu);
    if ((m->o.fail_every && nth % m->o.fail_every == 0) || (m->o.fail_from && nth >= m->o.fail_from)) {
        log_request(m, q, hash, stream, 500, &q->log);
        snprintf(msg, sizeof msg, "mock failure on request %zu", nth);
        json_t *o = json_pack("{s:s,s:s,s:i}", "object", "error", "message", msg, "code", 500);
        char *s = json_dumps(o, JSON_COMPACT);
        ok = answer(c, MHD_HTTP_INTERNAL_SERVER_ERROR, s ? s : "{}");
        free(s);
        json_decref(o);
        goto out;
    }
    if (ids && m->o.cache_block) q->cached = cache_lookup_insert(m, ids, q->prompt_len);
    if (log_request(m, q, hash, stream, 200, &q->log) < 0) {
        ok = MHD_NO;
        goto out;
    }
    active_add(m, q);
    if (stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, q, stream_free);
        if (!r) {
            active_drop(m, q);
            ok = MHD_NO;
            goto out;
        }
        pthread_mutex_lock(&m->mu);
        q->refs++;
        pthread_mutex_unlock(&m->mu);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        ok = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        goto out;
    }
    sleep_until(m, q->t0 + m->o.first_token_s + (double)(q->max_tokens - 1) * m->o.itl_s);
    ok = answer_whole(c, q);
    note_chunk(m, q);
    active_drop(m, q);
out:
    free(ids);
    json_decref(req);
    return ok;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    bench_mock *m = cls;
    mreq *q = *con_cls;
    if (!q) {
        if (!(q = calloc(1, sizeof *q))) return MHD_NO;
        q->m = m;
        q->refs = 1;
        *con_cls = q;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (q->too_big || q->n + n > BODY_LIMIT) {
            q->too_big = 1;
            return MHD_YES;
        }
        if (q->n + n + 1 > q->cap) {
            size_t cap = q->cap ? q->cap * 2 : 4096;
            while (q->n + n + 1 > cap) cap *= 2;
            char *b = realloc(q->body, cap);
            if (!b) return MHD_NO;
            q->body = b;
            q->cap = cap;
        }
        memcpy(q->body + q->n, upload, n);
        q->n += n;
        return MHD_YES;
    }
    if (!strcmp(method, "GET") && !strcmp(url, "/v1/models")) {
        char list[160];
        if (m->o.vocab_size)
            snprintf(list, sizeof list,
                     "{\"object\":\"list\",\"data\":[{\"id\":\"mock-model\",\"object\":\"model\",\"vocab_size\":%u}]}",
                     m->o.vocab_size);
        else snprintf(list, sizeof list, "{\"object\":\"list\",\"data\":[{\"id\":\"mock-model\",\"object\":\"model\"}]}");
        return answer(c, MHD_HTTP_OK, list);
    }
    if (!strcmp(method, "GET") && !strcmp(url, "/health")) return answer(c, MHD_HTTP_OK, "{}");
    if (!strcmp(method, "POST") && m->o.api_key) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (!auth || strncmp(auth, "Bearer ", 7) || strcmp(auth + 7, m->o.api_key))
            return answer_error(c, MHD_HTTP_UNAUTHORIZED, "invalid api key");
    }
    if (!strcmp(method, "POST") && !strcmp(url, "/v1/completions")) return complete_post(m, c, q, 0);
    if (!strcmp(method, "POST") && !strcmp(url, "/v1/chat/completions")) return complete_post(m, c, q, 1);
    return answer_error(c, MHD_HTTP_NOT_FOUND, "no such route");
}

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
    (void)c;
    (void)t;
    (void)cls;
    mreq *q = *con_cls;
    if (!q) return;
    *con_cls = NULL;
    mreq_release(q);
}

bench_mock *bench_mock_start(const bench_mock_opts *o, rh_err *e)
{
    bench_mock *m = calloc(1, sizeof *m);
    if (!m) {
        rh_fail(e, "out of memory starting the mock server");
        return NULL;
    }
    m->o = *o;
    pthread_mutex_init(&m->mu, NULL);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    m->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handler, m,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, request_done, m,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_END);
    const union MHD_DaemonInfo *info = m->d ? MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (!info || !info->port) {
        if (m->d) MHD_stop_daemon(m->d);
        pthread_mutex_destroy(&m->mu);
        free(m);
        rh_fail(e, "the mock server could not listen on a loopback port");
        return NULL;
    }
    m->port = info->port;
    snprintf(m->url, sizeof m->url, "http://127.0.0.1:%u", (unsigned)m->port);
    return m;
}

uint16_t bench_mock_port(const bench_mock *m)
{
    return m->port;
}

const char *bench_mock_url(const bench_mock *m)
{
    return m->url;
}

uint64_t bench_mock_max_concurrent(bench_mock *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t v = m->max_active;
    pthread_mutex_unlock(&m->mu);
    return v;
}

size_t bench_mock_requests(bench_mock *m, const bench_mock_request **out)
{
    pthread_mutex_lock(&m->mu);
    *out = m->log;
    size_t n = m->n_log;
    pthread_mutex_unlock(&m->mu);
    return n;
}

void bench_mock_stop(bench_mock *m)
{
    if (!m) return;
    m->stopping = 1;
    MHD_stop_daemon(m->d);
    for (size_t i = 0; i < m->n_log; i++) free(m->log[i].chunk_sent);
    free(m->log);
    free(m->seen);
    pthread_mutex_destroy(&m->mu);
    free(m);
}
