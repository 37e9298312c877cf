/* test_router_proxy.c — `rehearse router` as a process, in front of real
 * `rehearse serve` workers (cheap `--backend sim` ones, and one computing
 * tiny-llama on the CPU):
 *   - its choices are the router core's for the same requests and states:
 *     round-robin over 3 workers gives 3, 3, 3 in /metrics and the worker
 *     sequence 0,1,2,... in its trace; cache-aware sends prompts sharing a
 *     long prefix to one worker, exactly as router_pick fed the same hashes
 *     (rp_prompt_hashes) decides;
 *   - streams and answers pass through unchanged (text, events, errors);
 *   - a worker SIGKILLed mid-stream: the client gets an error event naming
 *     it and [DONE], the worker leaves routing (its counter stops, /health
 *     stays 200, /metrics says unhealthy) and comes back once it answers;
 *   - bad flags and URLs: one clear message, exit 1;
 *   - --policy-script: the script's picks; a failed call goes to the least
 *     outstanding worker, counted in /metrics, the first on stderr. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/router/router.h"
#include "router/proxy.h"
#include "test_router_util.h"
#include "test_serve_util.h"
#include "testutil.h"

static char fast_cost[256], slow_cost[256];

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int suite_init(void)
{
    /* the presets from the source tree, wherever the binary under test sits */
    setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
    return ru_cost_file("router-fast.json", 0.001, fast_cost, sizeof fast_cost) ||
           ru_cost_file("router-slow.json", 0.01, slow_cost, sizeof slow_cost);
}

/* `rehearse router --worker W0 ... --port 0 EXTRA...` */
static int start_router(tu_server *r, const tu_server *w, int n, const char *tag, char *const extra[])
{
    const char *urls[16];
    for (int i = 0; i < n && i < 16; i++) urls[i] = w[i].url;
    return ru_start_router(r, urls, n < 16 ? n : 16, tag, extra);
}

/* The worker index of every request the trace holds, in order (and its
 * header's worker URLs checked against w). */
static int trace_workers(const char *path, const tu_server *w, int n, int *out, int cap, tr_request *last)
{
    rh_err e = {{0}};
    tr_reader *r = tr_reader_open(path, &e);
    if (!r) printf("\n    %s: %s\n", path, e.msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    const tr_header *h = tr_reader_header(r);
    CU_ASSERT_STRING_EQUAL(tr_header_get(h, "source"), "rehearse router");
    for (int i = 0; i < n; i++) {
        char key[48];
        snprintf(key, sizeof key, "router.worker.%d", i);
        const char *u = tr_header_get(h, key);
        CU_ASSERT_PTR_NOT_NULL(u);
        if (u) CU_ASSERT_STRING_EQUAL(u, w[i].url);
    }
    int k = 0;
    tr_record rec;
    while (tr_reader_next(r, &rec, &e) == 1) {
        if (rec.kind != TR_REQUEST) continue;
        if (k < cap) out[k] = rp_trace_worker(&rec.req);
        k++;
        if (last) *last = rec.req;
        CU_ASSERT(rec.req.flags & TR_REQ_MEASURED);
    }
    tr_reader_close(r);
    return k;
}

/* ---- 1. the router core's choices ---- */
static void test_round_robin(void)
{
    tu_server w[3], r;
    CU_ASSERT_FATAL(ru_start_workers(w, 3, fast_cost, "rr") == 0);
    char trace[256];
    tu_tmp_path("router-rr.rhtr", trace, sizeof trace);
    char *extra[] = {"--policy", "round-robin", "--record-trace", trace, NULL};
    if (start_router(&r, w, 3, "rr", extra) < 0) {
        ru_stop_workers(w, 3);
        CU_FAIL_FATAL("router");
    }
    /* 9 sequential requests over the three routed endpoints, streamed and not */
    static const char *paths[] = {"/v1/completions", "/v1/chat/completions", "/generate"};
    for (int k = 0; k < 9; k++) {
        char body[512];
        int stream = (k / 3) % 2;
        if (k % 3 == 0)
            snprintf(body, sizeof body, "{\"prompt\": \"request %d\", \"max_tokens\": 4, \"stream\": %s}", k,
                     stream ? "true" : "false");
        else if (k % 3 == 1)
            snprintf(body, sizeof body,
                     "{\"messages\": [{\"role\": \"user\", \"content\": \"request %d\"}], \"max_tokens\": 4, "
                     "\"stream\": %s}", k, stream ? "true" : "false");
        else
            snprintf(body, sizeof body,
                     "{\"text\": \"request %d\", \"sampling_params\": {\"max_new_tokens\": 4}, \"stream\": %s}", k,
                     stream ? "true" : "false");
        if (stream) {
            ts_stream st = ts_stream_at(r.url, paths[k % 3], body, 0, NULL);
            CU_ASSERT_EQUAL(st.status, 200);
            CU_ASSERT(st.done);
            CU_ASSERT(st.n_events >= 1);
            ts_stream_free(&st);
        } else {
            ts_resp a = ts_request_at(r.url, "POST", paths[k % 3], body, NULL);
            if (a.status != 200) printf("\n    %s: %ld %s\n", paths[k % 3], a.status, a.body);
            CU_ASSERT_EQUAL(a.status, 200);
            CU_ASSERT_PTR_NOT_NULL(a.json);
            ts_resp_free(&a);
        }
    }
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_requests_total", w[i].url), 3);
        CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_outstanding", w[i].url), 0);
        CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_errors_total", w[i].url), 0);
        CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_worker_healthy", w[i].url), 1);
    }
    CU_ASSERT_EQUAL(tu_server_stop(&r), 0);
    ru_stop_workers(w, 3);

    /* the core itself, told the same states: every worker healthy, none busy */
    router_config rc;
    router_config_default(&rc);
    rc.policy = ROUTER_ROUND_ROBIN;
    rc.n_replicas = 3;
    rh_err e = {{0}};
    router *core = router_new(&rc, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(core);
    router_replica st[3] = {{true, 0, 0}, {true, 0, 0}, {true, 0, 0}};
    int seq[16];
    tr_request last;
    int n = trace_workers(trace, w, 3, seq, 16, &last);
    CU_ASSERT_EQUAL(n, 9);
    for (int k = 0; k < n && k < 9; k++) {
        int want = router_pick(core, st, NULL, 0);
        if (seq[k] != want) printf("\n    request %d went to worker %d, the core says %d\n", k, seq[k], want);
        CU_ASSERT_EQUAL(seq[k], want);
        CU_ASSERT_EQUAL(seq[k], k % 3);
    }
    CU_ASSERT_EQUAL(last.finish, TR_FINISH_LENGTH);
    CU_ASSERT_EQUAL(last.output_len, 4);
    router_free(core);
}

/* Three groups sharing long prefixes (text, token ids, chat), interleaved,
 * and a few short prompts: the router's picks against router_pick's. */
static void test_cache_aware(void)
{
    tu_server w[3], r;
    CU_ASSERT_FATAL(ru_start_workers(w, 3, fast_cost, "ca") == 0);
    char trace[256];
    tu_tmp_path("router-ca.rhtr", trace, sizeof trace);
    char *extra[] = {"--policy", "cache-aware", "--prefix-block", "32", "--record-trace", trace, NULL};
    if (start_router(&r, w, 3, "ca", extra) < 0) {
        ru_stop_workers(w, 3);
        CU_FAIL_FATAL("router");
    }
    char shared[700];
    size_t at = 0;
    while (at + 60 < sizeof shared)
        at += (size_t)snprintf(shared + at, sizeof shared - at, "the quick brown fox %03zu jumps over the lazy dog. ", at);
    enum { ROUNDS = 3, N = ROUNDS * 3 + 2 };
    char *bodies[N], *ids_bodies[N];
    int apis[N], group[N];
    int k = 0;
    for (int round = 0; round < ROUNDS; round++) {
        char *b = NULL;
        /* A: a text prompt */
        if (asprintf(&b, "{\"prompt\": \"%s question %d\", \"max_tokens\": 4}", shared, round) < 0) b = NULL;
        bodies[k] = b, apis[k] = RP_COMPLETIONS, group[k++] = 0;
        /* B: token ids, 200 shared then 10 of its own */
        char ids[4096];
        size_t n = 0;
        for (int j = 0; j < 210; j++)
            n += (size_t)snprintf(ids + n, sizeof ids - n, "%s%d", j ? "," : "", j < 200 ? (j * 7) % 500 : (round * 31 + j) % 500);
        if (asprintf(&b, "{\"prompt\": [%s], \"max_tokens\": 4}", ids) < 0) b = NULL;
        bodies[k] = b, apis[k] = RP_COMPLETIONS, group[k++] = 1;
        /* C: chat, a long system message */
        if (asprintf(&b, "{\"messages\": [{\"role\": \"system\", \"content\": \"%s\"}, {\"role\": \"user\", \"content\": "
                         "\"question %d\"}], \"max_tokens\": 4}", shared, round) < 0)
            b = NULL;
        bodies[k] = b, apis[k] = RP_CHAT, group[k++] = 2;
    }
    for (int j = 0; j < 2; j++) {
        char *b = NULL;
        if (asprintf(&b, "{\"prompt\": \"hi %d\", \"max_tokens\": 4}", j) < 0) b = NULL;
        bodies[k] = b, apis[k] = RP_COMPLETIONS, group[k++] = -1;
    }
    for (int i = 0; i < N; i++) {
        CU_ASSERT_PTR_NOT_NULL_FATAL(bodies[i]);
        ts_resp a = ts_request_at(r.url, "POST", apis[i] == RP_CHAT ? "/v1/chat/completions" : "/v1/completions",
                                  bodies[i], NULL);
        if (a.status != 200) printf("\n    request %d: %ld %s\n", i, a.status, a.body);
        CU_ASSERT_EQUAL(a.status, 200);
        ts_resp_free(&a);
    }
    CU_ASSERT_EQUAL(tu_server_stop(&r), 0);
    ru_stop_workers(w, 3);

    int seq[N + 4];
    int got = trace_workers(trace, w, 3, seq, N + 4, NULL);
    CU_ASSERT_EQUAL_FATAL(got, N);
    /* the core, given the same hashes and states */
    router_config rc;
    router_config_default(&rc);
    rc.policy = ROUTER_CACHE_AWARE;
    rc.n_replicas = 3;
    rh_err e = {{0}};
    router *core = router_new(&rc, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(core);
    router_replica st[3] = {{true, 0, 0}, {true, 0, 0}, {true, 0, 0}};
    int of_group[3] = {-1, -1, -1};
    for (int i = 0; i < N; i++) {
        uint64_t h[64];
        uint32_t nh = rp_prompt_hashes(apis[i], bodies[i], strlen(bodies[i]), 32, h, 64);
        if (group[i] >= 0) CU_ASSERT(nh >= 6);   /* the long prefix spans many blocks */
        int want = router_pick(core, st, h, nh);
        if (seq[i] != want) printf("\n    request %d went to worker %d, the core says %d\n", i, seq[i], want);
        CU_ASSERT_EQUAL(seq[i], want);
        if (group[i] >= 0) {
            if (of_group[group[i]] < 0) of_group[group[i]] = seq[i];
            CU_ASSERT_EQUAL(seq[i], of_group[group[i]]);   /* a shared prefix stays on its worker */
        }
        ids_bodies[i] = bodies[i];   /* kept for the trace's check below */
    }
    /* ... and the three groups went to three different workers */
    CU_ASSERT(of_group[0] != of_group[1] && of_group[1] != of_group[2] && of_group[0] != of_group[2]);
    router_free(core);
    /* the token-id prompts' records carry the very hashes the router routed on */
    tr_reader *tr = tr_reader_open(trace, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tr);
    CU_ASSERT_EQUAL(tr_reader_header(tr)->block_size, 32);
    tr_record rec;
    int i = 0, checked = 0;
    while (tr_reader_next(tr, &rec, &e) == 1) {
        if (rec.kind != TR_REQUEST) continue;
        if (i < N && group[i] == 1) {
            uint64_t h[64];
            uint32_t nh = rp_prompt_hashes(apis[i], ids_bodies[i], strlen(ids_bodies[i]), 32, h, 64);
            CU_ASSERT_EQUAL(nh, 6);   /* 210 ids: 6 whole blocks of 32 */
            CU_ASSERT_EQUAL(rec.req.n_hashes, nh);
            for (uint32_t j = 0; j < nh && j < rec.req.n_hashes; j++) CU_ASSERT_EQUAL(rec.req.hashes[j], h[j]);
            checked++;
        } else CU_ASSERT_EQUAL(rec.req.n_hashes, 0);   /* text prompts: no token blocks to claim */
        i++;
    }
    tr_reader_close(tr);
    CU_ASSERT_EQUAL(checked, ROUNDS);
    for (int j = 0; j < N; j++) free(ids_bodies[j]);
}

/* ---- 2. pass-through ---- */
static void stream_text(ts_stream *st, int chat, char *out, size_t cap, int *events)
{
    size_t n = 0;
    *events = (int)json_array_size(st->events);
    for (size_t i = 0; i < json_array_size(st->events); i++) {
        json_t *c0 = json_array_get(json_object_get(json_array_get(st->events, i), "choices"), 0);
        const char *t = chat ? json_string_value(json_object_get(json_object_get(c0, "delta"), "content"))
                             : json_string_value(json_object_get(c0, "text"));
        if (t) n += (size_t)snprintf(out + n, cap > n ? cap - n : 0, "%s", t);
    }
}

static void test_pass_through(void)
{
    tu_server w, r;
    char *args[] = {"--model", "tiny-llama", "--port", "0", "--max-total-tokens", "16384", NULL};
    CU_ASSERT_FATAL(tu_server_start(&w, "router-pt-w", args) == 0);
    if (start_router(&r, &w, 1, "pt", NULL) < 0) {
        tu_server_stop(&w);
        CU_FAIL_FATAL("router");
    }
    struct {
        const char *path, *body;
        int chat;
    } cases[] = {
        {"/v1/completions",
         "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"temperature\": 0, \"seed\": 7, \"stream\": true}", 0},
        {"/v1/chat/completions",
         "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story\"}], \"max_tokens\": 16, "
         "\"temperature\": 0, \"seed\": 7, \"stream\": true, \"stream_options\": {\"include_usage\": true}}", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ts_stream a = ts_stream_at(r.url, cases[i].path, cases[i].body, 0, NULL);
        ts_stream b = ts_stream_at(w.url, cases[i].path, cases[i].body, 0, NULL);
        char ta[4096], tb[4096];
        int na = 0, nb = 0;
        stream_text(&a, cases[i].chat, ta, sizeof ta, &na);
        stream_text(&b, cases[i].chat, tb, sizeof tb, &nb);
        CU_ASSERT_EQUAL(a.status, 200);
        CU_ASSERT(a.done && b.done);
        CU_ASSERT_EQUAL(a.bad, 0);
        CU_ASSERT(na > 3);
        CU_ASSERT_EQUAL(na, nb);
        CU_ASSERT_STRING_EQUAL(ta, tb);
        if (na != nb || strcmp(ta, tb)) printf("\n    %s: router %d events '%s', worker %d events '%s'\n", cases[i].path, na, ta, nb, tb);
        ts_stream_free(&a);
        ts_stream_free(&b);
    }
    /* a whole answer: the same text and usage */
    const char *plain = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"temperature\": 0}";
    ts_resp a = ts_request_at(r.url, "POST", "/v1/completions", plain, NULL);
    ts_resp b = ts_request_at(w.url, "POST", "/v1/completions", plain, NULL);
    CU_ASSERT_EQUAL(a.status, 200);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a.json);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.json);
    json_t *ua = json_object_get(a.json, "usage"), *ub = json_object_get(b.json, "usage");
    CU_ASSERT(json_equal(ua, ub));
    CU_ASSERT(json_equal(json_object_get(json_array_get(json_object_get(a.json, "choices"), 0), "text"),
                         json_object_get(json_array_get(json_object_get(b.json, "choices"), 0), "text")));
    ts_resp_free(&a);
    ts_resp_free(&b);
    /* a refusal: the worker's status and body, byte for byte */
    const char *refused = "{\"prompt\": \"x\", \"max_tokens\": 4, \"tools\": [{\"type\": \"function\"}]}";
    a = ts_request_at(r.url, "POST", "/v1/completions", refused, NULL);
    b = ts_request_at(w.url, "POST", "/v1/completions", refused, NULL);
    CU_ASSERT_EQUAL(b.status, 400);
    CU_ASSERT_EQUAL(a.status, b.status);
    CU_ASSERT_STRING_EQUAL(a.body, b.body);
    ts_resp_free(&a);
    ts_resp_free(&b);
    /* the worker's models; the router's own health and metrics */
    a = ts_request_at(r.url, "GET", "/v1/models", NULL, NULL);
    b = ts_request_at(w.url, "GET", "/v1/models", NULL, NULL);
    CU_ASSERT_EQUAL(a.status, 200);
    CU_ASSERT_STRING_EQUAL(a.body, b.body);
    ts_resp_free(&a);
    ts_resp_free(&b);
    a = ts_request_at(r.url, "GET", "/health", NULL, NULL);
    CU_ASSERT_EQUAL(a.status, 200);
    ts_resp_free(&a);
    a = ts_request_at(r.url, "GET", "/nowhere", NULL, NULL);
    CU_ASSERT_EQUAL(a.status, 404);
    CU_ASSERT_PTR_NOT_NULL(json_object_get(json_object_get(a.json, "error"), "message"));
    ts_resp_free(&a);
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_requests_total", w.url), 4);   /* 2 streams, 1 answer, 1 refusal */
    CU_ASSERT_EQUAL(tu_server_stop(&r), 0);
    tu_server_stop(&w);
}

/* ---- 3. a worker killed mid-stream ---- */
typedef struct long_stream {
    const char *url;
    ts_stream st;
    double took;
} long_stream;

static void *run_long_stream(void *arg)
{
    long_stream *ls = arg;
    double t = rh_now();
    ls->st = ts_stream_at(ls->url, "/v1/completions",
                          "{\"prompt\": \"a long story\", \"max_tokens\": 2000, \"ignore_eos\": true, \"stream\": true}", 0,
                          NULL);
    ls->took = rh_now() - t;
    return NULL;
}

static void test_worker_killed(void)
{
    tu_server w[3], r;
    CU_ASSERT_FATAL(ru_start_workers(w, 3, slow_cost, "kill") == 0);
    char *extra[] = {"--policy", "round-robin", "--health-interval", "0.2", NULL};
    if (start_router(&r, w, 3, "kill", extra) < 0) {
        ru_stop_workers(w, 3);
        CU_FAIL_FATAL("router");
    }
    /* round-robin: the first request lands on worker 0 */
    long_stream ls = {.url = r.url};
    pthread_t th;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, run_long_stream, &ls) == 0);
    double end = rh_now() + 10;
    while (ru_worker_metric(r.url, "rehearse_router_outstanding", w[0].url) != 1 && rh_now() < end) nap(0.02);
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_outstanding", w[0].url), 1);
    nap(0.5);   /* tokens are flowing: 2000 at 10 ms would take 20 s */
    kill((pid_t)w[0].pid, SIGKILL);
    waitpid((pid_t)w[0].pid, NULL, 0);
    w[0].pid = 0;
    pthread_join(th, NULL);
    /* a clean end: an error event naming the worker, then [DONE] */
    CU_ASSERT(ls.took < 15);
    CU_ASSERT_EQUAL(ls.st.status, 200);
    CU_ASSERT(ls.st.done);
    CU_ASSERT_EQUAL(ls.st.bad, 0);
    size_t ne = json_array_size(ls.st.events);
    CU_ASSERT(ne > 5);   /* tokens came before the kill */
    json_t *err = json_object_get(json_array_get(ls.st.events, ne ? ne - 1 : 0), "error");
    CU_ASSERT_PTR_NOT_NULL(err);
    const char *msg = json_string_value(json_object_get(err, "message"));
    CU_ASSERT(msg && strstr(msg, w[0].url));
    CU_ASSERT_PTR_NOT_NULL(json_object_get(err, "type"));
    CU_ASSERT(json_object_get(err, "param") && json_object_get(err, "code"));
    for (size_t i = 0; i + 1 < ne; i++) CU_ASSERT_PTR_NULL(json_object_get(json_array_get(ls.st.events, i), "error"));
    ts_stream_free(&ls.st);

    /* out of routing: the others take every request */
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_worker_healthy", w[0].url), 0);
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_errors_total", w[0].url), 1);
    double before = ru_worker_metric(r.url, "rehearse_router_requests_total", w[0].url);
    double others = ru_worker_metric(r.url, "rehearse_router_requests_total", w[1].url) +
                    ru_worker_metric(r.url, "rehearse_router_requests_total", w[2].url);
    for (int k = 0; k < 6; k++) {
        ts_resp a = ts_request_at(r.url, "POST", "/v1/completions", "{\"prompt\": \"after\", \"max_tokens\": 2}", NULL);
        CU_ASSERT_EQUAL(a.status, 200);
        ts_resp_free(&a);
    }
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_requests_total", w[0].url), before);
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_requests_total", w[1].url) +
                        ru_worker_metric(r.url, "rehearse_router_requests_total", w[2].url),
                    others + 6);
    ts_resp h = ts_request_at(r.url, "GET", "/health", NULL, NULL);
    CU_ASSERT_EQUAL(h.status, 200);
    ts_resp_free(&h);
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_worker_healthy", w[0].url), 0);

    /* back on its port: the poller brings it back into routing */
    const char *port = strrchr(w[0].url, ':') + 1;
    char *args[] = {"--backend", "sim", "--cost", fast_cost, "--model", "tiny-llama", "--port", (char *)port, NULL};
    char url0[128];
    snprintf(url0, sizeof url0, "%s", w[0].url);
    CU_ASSERT_FATAL(tu_server_start(&w[0], "router-kill-w0b", args) == 0);
    end = rh_now() + 10;
    while (ru_worker_metric(r.url, "rehearse_router_worker_healthy", url0) != 1 && rh_now() < end) nap(0.05);
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_worker_healthy", url0), 1);
    for (int k = 0; k < 3; k++) {
        ts_resp a = ts_request_at(r.url, "POST", "/v1/completions", "{\"prompt\": \"again\", \"max_tokens\": 2}", NULL);
        CU_ASSERT_EQUAL(a.status, 200);
        ts_resp_free(&a);
    }
    CU_ASSERT(ru_worker_metric(r.url, "rehearse_router_requests_total", url0) > before);
    CU_ASSERT_EQUAL(tu_server_stop(&r), 0);   /* no crash: a clean exit */
    ru_stop_workers(w, 3);
}

/* ---- 4. bad input ---- */
static void test_bad_input(void)
{
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"--worker http://127.0.0.1:1 --bogus", "unknown flag --bogus"},
        {"--port 0", "no --worker"},
        {"", "no --worker"},
        {"--worker localhost:8000", "--worker 'localhost:8000'"},
        {"--worker ftp://h:1", "http://"},
        {"--worker http://:80", "no host"},
        {"--worker http://h:99999", "port"},
        {"--worker http://h:", "port"},
        {"--worker 'http://h x:1'", "spaces"},
        {"--worker http://u@h:1", "user info"},
        {"--worker http://h:1?x=1", "query"},
        {"--worker http://h:1 --worker http://h:1/", "given twice"},
        {"--worker http://h:1 --policy fastest", "--policy"},
        {"--worker http://h:1 --cache-threshold 2", "--cache-threshold"},
        {"--worker http://h:1 --port 70000", "--port"},
        {"--worker http://127.0.0.1:1 --port 0 --host nothost", "--host nothost"},
        {"--worker http://h:1 extra", "positional"},
        {"--worker", "--worker"},
        {"--worker http://127.0.0.1:1 --record-trace /no/such/dir/t.rhtr", "--record-trace /no/such/dir/t.rhtr"},
        {"--worker http://h:1 --header-timeout 0", "--header-timeout"},
        {"--worker http://h:1 --idle-timeout soon", "--idle-timeout"},
        {"--worker http://h:1 --max-connections-per-client 0", "--max-connections-per-client"},
        {"--worker http://h:1 --max-response-bytes 10", "--max-response-bytes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[1024], out[4096];
        /* a router that wrongly starts is stopped by timeout (exit 124), not left to hang the suite */
        snprintf(cmd, sizeof cmd, "timeout 20 %s router %s --health-timeout 0.2", tu_bin(), bad[i].args);
        if (!strcmp(bad[i].args, "--worker")) snprintf(cmd, sizeof cmd, "timeout 20 %s router --worker", tu_bin());
        int rc = tu_run(cmd, out, sizeof out);
        int lines = 0;
        for (const char *p = out; *p; p++) lines += *p == '\n';
        if (rc != 1 || !strstr(out, bad[i].says) || lines != 1)
            printf("\n    router %s: exit %d, %d lines: %s\n", bad[i].args, rc, lines, out);
        CU_ASSERT_EQUAL(rc, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i].says));
        CU_ASSERT_EQUAL(lines, 1);   /* one message */
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "rehearse router: "));
    }
    char cmd[512], out[8192];
    snprintf(cmd, sizeof cmd, "%s router --help", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--record-trace"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "cache-aware"));
}

/* --policy lua: a script sending everything to the second worker but each
 * third request, which it fails, so that one goes to the least outstanding
 * (the first, all being idle between sequential requests). */
/* A route() that does the sandbox's worst inside one C call or one
 * instruction (sorting references to a 20 MB string; comparing it with
 * itself for ever) or fails on every call: every request is still
 * answered, /health and /metrics answer while such picks are made, the
 * first SIGTERM stops the router, and a script failing each call trips
 * its breaker (counted in /metrics). The 20 MB string is made in the
 * first call: made at load, a busy machine could take the load's own
 * 0.2 s over it. */
typedef struct lua_asker {
    const char *url;
    int status;
} lua_asker;

static void *lua_ask(void *arg)
{
    lua_asker *a = arg;
    ts_resp r = ts_request_at(a->url, "POST", "/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 2}", NULL);
    a->status = (int)r.status;
    ts_resp_free(&r);
    return NULL;
}

static void hostile_route(const char *name, const char *lua, char *const more[], double want_trips)
{
    char path[256];
    tu_tmp_path(name, path, sizeof path);
    CU_ASSERT_FATAL(tu_write_file(path, lua, strlen(lua)) == 0);
    tu_server w, r;
    CU_ASSERT_FATAL(ru_start_workers(&w, 1, fast_cost, name) == 0);
    char *extra[12] = {"--policy-script", path, "--policy-max-seconds", "0.2"};
    for (int i = 0; more && more[i] && i < 6; i++) extra[4 + i] = more[i];
    if (start_router(&r, &w, 1, name, extra) < 0) {
        ru_stop_workers(&w, 1);
        CU_FAIL_FATAL("router");
    }
    enum { N = 4 };
    lua_asker a[N];
    pthread_t t[N];
    for (int k = 0; k < N; k++) {
        a[k] = (lua_asker){.url = r.url};
        pthread_create(&t[k], NULL, lua_ask, &a[k]);
    }
    ts_resp h = ts_request_at(r.url, "GET", "/health", NULL, NULL);
    int answered = 0;
    for (int k = 0; k < N; k++) {
        pthread_join(t[k], NULL);
        answered += a[k].status == 200;
    }
    ts_resp m = ts_request_at(r.url, "GET", "/metrics", NULL, NULL);
    double trips = m.status == 200 ? ts_metric(m.body, "rehearse_router_policy_breaker_trips_total") : -1;
    double t0 = rh_now();
    int st = tu_server_stop(&r);
    double took = rh_now() - t0;
    ru_stop_workers(&w, 1);
    int ok = answered == N && h.status == 200 && m.status == 200 && st == 0 && took < 5 && trips >= want_trips;
    if (!ok)
        printf("\n    %s: %d of %d answered, /health %ld, /metrics %ld, %g trips, exit %d after %.2f s\n", name, answered,
               N, h.status, m.status, trips, st, took);
    CU_ASSERT(ok);
    ts_resp_free(&h);
    ts_resp_free(&m);
}

static void test_hostile_lua_policy(void)
{
    hostile_route("router-sort-big.lua",
                  "local t\nfunction route(q, r)\n"
                  "  if not t then t = {} local s = string.rep('x', 20000000) for i = 1, 2000 do t[i] = s end end\n"
                  "  table.sort(t)\n  return 1\nend\n",
                  NULL, 0);
    hostile_route("router-less-big.lua",
                  "local s\nfunction route(q, r)\n  s = s or string.rep('x', 20000000)\n  repeat until s < s\nend\n",
                  NULL, 0);
    char *trip[] = {"--policy-max-failures", "1", NULL};
    hostile_route("router-spin.lua", "function route(q, r)\n  while true do end\nend\n", trip, 1);
}

static void test_lua_policy(void)
{
    char path[256];
    tu_tmp_path("router-second.lua", path, sizeof path);
    const char *lua = "function route(request, replicas)\n"
                      "  if request.seq % 3 == 0 then error('every third') end\n"
                      "  return 2\n"
                      "end\n";
    CU_ASSERT_FATAL(tu_write_file(path, lua, strlen(lua)) == 0);
    tu_server w[2], r;
    CU_ASSERT_FATAL(ru_start_workers(w, 2, fast_cost, "lua") == 0);
    char *extra[] = {"--policy-script", path, NULL};
    if (start_router(&r, w, 2, "lua", extra) < 0) {
        ru_stop_workers(w, 2);
        CU_FAIL_FATAL("router");
    }
    for (int k = 0; k < 6; k++) {
        ts_resp a = ts_request_at(r.url, "POST", "/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 2}", NULL);
        CU_ASSERT_EQUAL(a.status, 200);
        ts_resp_free(&a);
    }
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_requests_total", w[0].url), 2);
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_requests_total", w[1].url), 4);
    ts_resp m = ts_request_at(r.url, "GET", "/metrics", NULL, NULL);
    CU_ASSERT_EQUAL(m.status == 200 ? ts_metric(m.body, "rehearse_router_policy_errors_total") : -1, 2);
    ts_resp_free(&m);
    CU_ASSERT_EQUAL(tu_server_stop(&r), 0);
    ru_stop_workers(w, 2);
    char cmd[1536], out[4096];
    snprintf(cmd, sizeof cmd, "grep -c 'Lua policy error' %s; grep -o 'router-second.lua:2: every third' %s", r.err,
             r.err);
    tu_run(cmd, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "1\nrouter-second.lua:2: every third\n");   /* the first error only, file:line */

    /* a script that does not load, or limits out of range: one message, exit 1 */
    char broken[256];
    tu_tmp_path("router-broken.lua", broken, sizeof broken);
    CU_ASSERT_FATAL(tu_write_file(broken, "function route(\n", 16) == 0);
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"--policy lua", "needs a script"},
        {"--policy-script build/tmp/router-no-such.lua", "router-no-such.lua"},
        {"--policy-script BROKEN", "router-broken.lua:2:"},
        {"--policy-script BROKEN --policy-max-instructions 5", "--policy-max-instructions"},
        {"--policy-script BROKEN --policy-max-memory 1000", "--policy-max-memory"},
        {"--policy-script BROKEN --policy-max-seconds 0", "--policy-max-seconds"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[512];
        const char *at = strstr(bad[i].args, "BROKEN");
        if (at) snprintf(args, sizeof args, "%.*s%s%s", (int)(at - bad[i].args), bad[i].args, broken, at + 6);
        else snprintf(args, sizeof args, "%s", bad[i].args);
        snprintf(cmd, sizeof cmd, "timeout 20 %s router --worker http://127.0.0.1:1 --health-timeout 0.2 %s",
                 tu_bin(), args);
        int rc = tu_run(cmd, out, sizeof out);
        int lines = 0;
        for (const char *p = out; *p; p++) lines += *p == '\n';
        if (rc != 1 || !strstr(out, bad[i].says) || lines != 1)
            printf("\n    router %s: exit %d, %d lines: %s\n", args, rc, lines, out);
        CU_ASSERT_EQUAL(rc, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i].says));
        CU_ASSERT_EQUAL(lines, 1);
    }
}

/* A worker that never answers: the router starts, says so, and answers 503. */
static void test_no_healthy_worker(void)
{
    tu_server dead = {.pid = 0}, r;
    snprintf(dead.url, sizeof dead.url, "http://127.0.0.1:1");
    char *extra[] = {"--health-timeout", "0.5", NULL};
    CU_ASSERT_FATAL(start_router(&r, &dead, 1, "dead", extra) == 0);
    ts_resp h = ts_request_at(r.url, "GET", "/health", NULL, NULL);
    CU_ASSERT_EQUAL(h.status, 503);
    ts_resp_free(&h);
    ts_resp a = ts_request_at(r.url, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}", NULL);
    CU_ASSERT_EQUAL(a.status, 503);
    json_t *err = json_object_get(a.json, "error");
    const char *msg = json_string_value(json_object_get(err, "message"));
    CU_ASSERT(msg && strstr(msg, "127.0.0.1:1"));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "code")), "no_healthy_worker");
    ts_resp_free(&a);
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_worker_healthy", dead.url), 0);
    CU_ASSERT_EQUAL(tu_server_stop(&r), 0);
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "cat %s", r.err);
    tu_run(cmd, out, sizeof out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "starting without worker http://127.0.0.1:1"));
}

/* The prefix hashes themselves: chained, full blocks only, by their kind. */
static void test_prefix_hashes(void)
{
    uint64_t a[8], b[8];
    const char *s1 = "0123456789abcdef0123456789abcdefXYZ", *s2 = "0123456789abcdef0123456789abcdeQXYZ";
    CU_ASSERT_EQUAL(rp_hash_text(s1, strlen(s1), 16, a, 8), 2);
    CU_ASSERT_EQUAL(rp_hash_text(s2, strlen(s2), 16, b, 8), 2);
    CU_ASSERT_EQUAL(a[0], b[0]);
    CU_ASSERT_NOT_EQUAL(a[1], b[1]);
    /* a text prompt and a chat of it hash differently; a batch hashes as its first */
    const char *t = "{\"prompt\": \"0123456789abcdef0123456789abcdef\"}";
    const char *batch = "{\"prompt\": [\"0123456789abcdef0123456789abcdef\", \"zzzz\"]}";
    CU_ASSERT_EQUAL(rp_prompt_hashes(RP_COMPLETIONS, t, strlen(t), 16, a, 8), 2);
    CU_ASSERT_EQUAL(rp_prompt_hashes(RP_COMPLETIONS, batch, strlen(batch), 16, b, 8), 2);
    CU_ASSERT(a[0] == b[0] && a[1] == b[1]);
    const char *ids = "{\"prompt\": [1,2,3,4,5,6,7,8,9]}", *gen = "{\"input_ids\": [1,2,3,4,5,6,7,8]}";
    CU_ASSERT_EQUAL(rp_prompt_hashes(RP_COMPLETIONS, ids, strlen(ids), 4, a, 8), 2);
    CU_ASSERT_EQUAL(rp_prompt_hashes(RP_GENERATE, gen, strlen(gen), 4, b, 8), 2);
    CU_ASSERT(a[0] == b[0] && a[1] == b[1]);
    const char *junk = "not json";
    CU_ASSERT_EQUAL(rp_prompt_hashes(RP_COMPLETIONS, junk, strlen(junk), 4, a, 8), 0);
}

void register_test_router_proxy(void)
{
    CU_pSuite s = CU_add_suite("router_proxy", suite_init, NULL);
    CU_add_test(s, "prefix hashes: chained blocks of text or ids", test_prefix_hashes);
    CU_add_test(s, "round-robin: 3,3,3 in /metrics, 0,1,2,... in the trace, as the core picks", test_round_robin);
    CU_add_test(s, "cache-aware: shared prefixes stay on one worker, as router_pick decides", test_cache_aware);
    CU_add_test(s, "streams, answers and refusals pass through unchanged", test_pass_through);
    CU_add_test(s, "a worker killed mid-stream: error event and [DONE], out of routing, back later",
                test_worker_killed);
    CU_add_test(s, "bad flags and URLs: one message, exit 1", test_bad_input);
    CU_add_test(s, "no healthy worker: 503 naming it", test_no_healthy_worker);
    CU_add_test(s, "lua: the script's picks, its errors least-outstanding's and counted", test_lua_policy);
    CU_add_test(s, "--policy-script doing its worst in C: answered, /health answers, SIGTERM stops it, the breaker trips",
                test_hostile_lua_policy);
}
