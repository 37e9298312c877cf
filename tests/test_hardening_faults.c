/* test_hardening_faults.c — the server under faults it must survive:
 *   - SIGKILL in the middle of a busy run: the recording reads back up to
 *     its last flushed frame (every request answered before it is there) and
 *     `rehearse trace stats` says it was cut short;
 *   - a disk that fills while recording (a file-size limit on the server
 *     process): one message, the recording stops at a whole frame and stays
 *     readable, and serving goes on; a disk full from the start refuses to
 *     start; and no writer ever renames over or removes a device;
 *   - a Lua policy that raises, loops for ever or allocates without bound:
 *     every step falls back to fcfs, one warning, and every answer is still
 *     the one its prompt gets alone. */
#include <pthread.h>
#include <sys/stat.h>

#include "test_hardening_util.h"
#include "test_serve_util.h"
#include "testutil.h"

#define VOCAB 512

static model *tiny;

static const model *the_model(void)
{
    if (!tiny) tiny = eh_tiny_model();
    return tiny;
}

/* Reads a trace to its end: records, whether it was cut short, rc of the
 * last read (0 at a clean or cut end). */
typedef struct readback {
    int rc, truncated, opened;
    int requests, steps;
    uint64_t max_id;
} readback;

static readback read_trace(const char *path)
{
    readback b = {0};
    rh_err e = {{0}};
    tr_reader *rd = tr_reader_open(path, &e);
    if (!rd) {
        printf("\n    %s\n", e.msg);
        b.rc = -1;
        return b;
    }
    b.opened = 1;
    tr_record r;
    while ((b.rc = tr_reader_next(rd, &r, &e)) == 1) {
        if (r.kind == TR_REQUEST) {
            b.requests++;
            if (r.req.id > b.max_id) b.max_id = r.req.id;
        } else {
            b.steps++;
        }
    }
    if (b.rc < 0) printf("\n    %s\n", e.msg);
    b.truncated = tr_reader_truncated(rd);
    tr_reader_close(rd);
    return b;
}

/* `rehearse trace stats PATH` (and --json): exit status and output. */
static int trace_stats(const char *path, const char *flags, char *out, size_t n)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s trace stats %s %s", tu_bin(), path, flags);
    return tu_run(cmd, out, n);
}

/* ---- SIGKILL under load: nothing a client got is lost ---- */
enum { KL_CLIENTS = 32, KL_MAX = 4096 };

typedef struct kl_client {
    const char *url;
    int k;
    atomic_int *stop;
    uint32_t got[KL_MAX];       /* (input_len << 16 | output_len) of every completion received whole */
    int n_got;
} kl_client;

/* Closed loop: each request a unique (prompt length, max_tokens) pair, every
 * other one streamed; a completion counts once its whole body (or [DONE])
 * arrived. Quiet when the server is gone. */
static void *kl_run(void *arg)
{
    kl_client *c = arg;
    for (int m = 0; !atomic_load(c->stop) && c->n_got < KL_MAX; m++) {
        uint32_t u = (uint32_t)(c->k + KL_CLIENTS * m), in = 4 + u % 64, out = 1 + u / 64;
        char body[1024];
        int len = snprintf(body, sizeof body, "{\"prompt\":[");
        for (uint32_t i = 0; i < in; i++) len += snprintf(body + len, sizeof body - (size_t)len, "%s%u", i ? "," : "", 7 + (u * 31 + i * 17) % 400);
        snprintf(body + len, sizeof body - (size_t)len, "],\"max_tokens\":%u,\"ignore_eos\":true,\"stream\":%s}", out,
                 m % 2 ? "true" : "false");
        char url[256];
        snprintf(url, sizeof url, "%s/v1/completions", c->url);
        CURL *h = curl_easy_init();
        ts_buf b = {0};
        struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ts_collect);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
        CURLcode rc = curl_easy_perform(h);
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_slist_free_all(hd);
        curl_easy_cleanup(h);
        int whole = 0;
        if (rc == CURLE_OK && status == 200 && b.p) {
            if (m % 2) {
                whole = strstr(b.p, "data: [DONE]") != NULL;
            } else {
                json_t *j = json_loads(b.p, 0, NULL);
                whole = j && json_array_size(json_object_get(j, "choices")) == 1;
                json_decref(j);
            }
        }
        free(b.p);
        if (whole) c->got[c->n_got++] = in << 16 | out;
        if (rc != CURLE_OK) break;   /* the server is gone */
    }
    return NULL;
}

static int kl_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* 32 closed-loop clients, then SIGKILL: every completion a client received
 * whole is in the recording (its record reached the kernel before its last
 * byte left), and the recording reads back, cut short. */
static void test_sigkill_under_load(void)
{
    hu_watchdog(180);
    char rec[256];
    tu_tmp_path("kill-load.rhtr", rec, sizeof rec);
    const char *args[] = {"--max-total-tokens", "65536", "--record-trace", rec, NULL};
    hu_proc p;
    CU_ASSERT_FATAL(hu_spawn(&p, "kill-load", args, 0) == 0);
    static kl_client cl[KL_CLIENTS];
    pthread_t t[KL_CLIENTS];
    atomic_int stop = 0;
    for (int k = 0; k < KL_CLIENTS; k++) {
        cl[k] = (kl_client){.url = p.url, .k = k, .stop = &stop};
        pthread_create(&t[k], NULL, kl_run, &cl[k]);
    }
    /* until a few hundred are done, or 20 s */
    for (int i = 0; i < 2000; i++) {
        int n = 0;
        for (int k = 0; k < KL_CLIENTS; k++) n += cl[k].n_got;
        if (n >= 300) break;
        hu_nap(0.01);
    }
    kill(p.pid, SIGKILL);
    CU_ASSERT_EQUAL(hu_exit_status(p.pid), 128 + SIGKILL);
    atomic_store(&stop, 1);
    int received = 0;
    for (int k = 0; k < KL_CLIENTS; k++) {
        pthread_join(t[k], NULL);
        received += cl[k].n_got;
    }

    static uint32_t recorded[KL_CLIENTS * KL_MAX];
    int n_rec = 0;
    rh_err e = {{0}};
    tr_reader *rd = tr_reader_open(rec, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rd);
    tr_record r;
    int rc;
    while ((rc = tr_reader_next(rd, &r, &e)) == 1)
        if (r.kind == TR_REQUEST && n_rec < KL_CLIENTS * KL_MAX) recorded[n_rec++] = r.req.input_len << 16 | r.req.output_len;
    CU_ASSERT_EQUAL(rc, 0);
    tr_reader_close(rd);
    qsort(recorded, (size_t)n_rec, sizeof *recorded, kl_cmp);
    int lost = 0;
    for (int k = 0; k < KL_CLIENTS; k++)
        for (int i = 0; i < cl[k].n_got; i++)
            lost += !bsearch(&cl[k].got[i], recorded, (size_t)n_rec, sizeof *recorded, kl_cmp);
    printf("\n    SIGKILL under %d closed-loop clients: %d completions received, %d recorded, %d lost\n", KL_CLIENTS,
           received, n_rec, lost);
    CU_ASSERT(received >= 100);
    CU_ASSERT_EQUAL(lost, 0);
    hu_watchdog(0);
}

/* ---- SIGKILL mid-run ---- */
typedef struct streamer {
    const char *url;
    const char *body;
    ts_stream st;
} streamer;

static void *stream_one(void *arg)
{
    streamer *s = arg;
    s->st = ts_stream_at(s->url, "/v1/completions", s->body, 0, NULL);
    return NULL;
}

static double metric(const char *url, const char *name)
{
    ts_resp r = ts_request_at(url, "GET", "/metrics", NULL, NULL);
    double v = r.status == 200 ? ts_metric(r.body, name) : -1;
    ts_resp_free(&r);
    return v;
}

static void test_sigkill_mid_run(void)
{
    hu_watchdog(180);
    char rec[256];
    tu_tmp_path("kill-busy.rhtr", rec, sizeof rec);
    const char *args[] = {"--max-total-tokens", "16384", "--record-trace", rec, NULL};
    hu_proc p;
    CU_ASSERT_FATAL(hu_spawn(&p, "kill-busy", args, 0) == 0);

    /* Answered, then given the recorder's flush period: these must survive. */
    enum { ANSWERED = 12, IN_FLIGHT = 6 };
    int ok = 0;
    for (int i = 0; i < ANSWERED; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"prompt\":[%d,%d,%d],\"max_tokens\":%d,\"ignore_eos\":true}", 1 + i, 2 + i, 3 + i,
                 4 + i % 5);
        ts_resp r = ts_request_at(p.url, "POST", "/v1/completions", body, NULL);
        ok += r.status == 200;
        ts_resp_free(&r);
    }
    CU_ASSERT_EQUAL(ok, ANSWERED);
    hu_nap(1.3);
    /* Then the server is busy: streams running, steps being recorded. */
    streamer s[IN_FLIGHT];
    pthread_t t[IN_FLIGHT];
    for (int i = 0; i < IN_FLIGHT; i++) {
        s[i] = (streamer){.url = p.url,
                          .body = "{\"prompt\":[9,8,7,6],\"max_tokens\":1900,\"ignore_eos\":true,\"stream\":true}"};
        pthread_create(&t[i], NULL, stream_one, &s[i]);
    }
    for (int i = 0; i < 1000 && metric(p.url, "vllm:num_requests_running") < IN_FLIGHT; i++) hu_nap(0.01);
    hu_nap(0.3);
    kill(p.pid, SIGKILL);
    CU_ASSERT_EQUAL(hu_exit_status(p.pid), 128 + SIGKILL);
    int cut_streams = 0;
    for (int i = 0; i < IN_FLIGHT; i++) {
        pthread_join(t[i], NULL);
        cut_streams += !s[i].st.done;   /* none could finish: 1900 tokens */
        ts_stream_free(&s[i].st);
    }
    CU_ASSERT_EQUAL(cut_streams, IN_FLIGHT);

    readback b = read_trace(rec);
    CU_ASSERT_EQUAL(b.rc, 0);
    CU_ASSERT_EQUAL(b.truncated, 1);
    CU_ASSERT_EQUAL(b.requests, ANSWERED);   /* the killed streams never finished: not recorded */
    CU_ASSERT(b.steps > ANSWERED);
    printf("\n    SIGKILL with %d streams running: %d of %d answered requests recovered, %d steps, cut short: %s\n",
           IN_FLIGHT, b.requests, ANSWERED, b.steps, b.truncated ? "yes" : "no");

    char out[8192];
    CU_ASSERT_EQUAL(trace_stats(rec, "", out, sizeof out), 0);
    if (!strstr(out, "cut short")) printf("\n    trace stats said: %s\n", out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "cut short"));
    CU_ASSERT_EQUAL(trace_stats(rec, "--json", out, sizeof out), 0);
    json_t *j = json_loads(out, 0, NULL);
    CU_ASSERT(json_is_true(json_object_get(j, "truncated")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "requests")), ANSWERED);
    json_decref(j);
}

/* ---- a disk that fills up ---- */
static void test_disk_fills_while_recording(void)
{
    hu_watchdog(180);
    char rec[256];
    tu_tmp_path("full-disk.rhtr", rec, sizeof rec);
    /* The header and a few requests fit (about 1 KB); thirty requests of 64
     * tokens do not (about 12 KB). */
    const long long limit = 4096;
    const char *args[] = {"--max-total-tokens", "16384", "--record-trace", rec, NULL};
    hu_proc p;
    CU_ASSERT_FATAL(hu_spawn(&p, "full-disk", args, limit) == 0);
    enum { BEFORE = 3, FILL = 30, AFTER = 8 };
    int ok = 0;
    for (int i = 0; i < BEFORE; i++) {
        ts_resp r = ts_request_at(p.url, "POST", "/v1/completions", "{\"prompt\":[5,6,7],\"max_tokens\":4}", NULL);
        ok += r.status == 200;
        ts_resp_free(&r);
    }
    hu_nap(1.3);   /* flushed */
    for (int i = 0; i < FILL; i++) {
        ts_resp r = ts_request_at(p.url, "POST", "/v1/completions",
                                  "{\"prompt\":[5,6,7,8],\"max_tokens\":64,\"ignore_eos\":true}", NULL);
        ok += r.status == 200;
        ts_resp_free(&r);
    }
    int stopped = hu_wait_for(p.err, "the recording stopped", 10);
    CU_ASSERT(stopped);
    /* Serving goes on. */
    for (int i = 0; i < AFTER; i++) {
        ts_resp r = ts_request_at(p.url, "POST", "/v1/completions",
                                  "{\"prompt\":[1,2],\"max_tokens\":16,\"ignore_eos\":true,\"stream\":true}", NULL);
        ok += r.status == 200 && strstr(r.body, "data: [DONE]") != NULL;
        ts_resp_free(&r);
    }
    CU_ASSERT_EQUAL(ok, BEFORE + FILL + AFTER);
    ts_resp h = ts_request_at(p.url, "GET", "/health", NULL, NULL);
    CU_ASSERT_EQUAL(h.status, 200);
    ts_resp_free(&h);
    kill(p.pid, SIGTERM);
    int status = hu_exit_status(p.pid);
    /* The recording is incomplete, so the exit says so; the message came
     * once, when it happened. */
    CU_ASSERT_EQUAL(status, 1);
    CU_ASSERT_EQUAL(hu_count(p.err, "the recording stopped"), 1);
    CU_ASSERT(hu_count(p.err, "File too large") >= 1);

    struct stat st;
    CU_ASSERT_FATAL(stat(rec, &st) == 0);
    CU_ASSERT(st.st_size <= limit);
    readback b = read_trace(rec);
    CU_ASSERT_EQUAL(b.rc, 0);   /* ends at a whole frame */
    CU_ASSERT_EQUAL(b.truncated, 1);
    CU_ASSERT(b.requests >= BEFORE && b.requests < BEFORE + FILL);
    printf("\n    disk full at %lld bytes: %d of %d requests recorded, %d served\n", limit, b.requests,
           BEFORE + FILL + AFTER, ok);
    char out[8192];
    CU_ASSERT_EQUAL(trace_stats(rec, "", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "cut short"));
}

/* A disk full from the start: the server refuses to start, with the reason;
 * the device it was pointed at is still a device. Written through a link,
 * so a regression could only ever remove the link. */
static void test_disk_full_at_start(void)
{
    hu_watchdog(180);
    struct stat st;
    if (stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode)) {
        printf("\n    SKIPPED: no /dev/full\n");
        return;
    }
    char link[256];
    tu_tmp_path("to-dev-full.rhtr", link, sizeof link);
    CU_ASSERT_FATAL(symlink("/dev/full", link) == 0);
    server_config c = ts_config(the_model());
    c.record_path = link;
    rh_err e = {{0}};
    server *s = server_start(&c, &e);
    CU_ASSERT_PTR_NULL(s);
    if (s) server_stop(s, &e);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "No space left on device"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, link));
    CU_ASSERT(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    CU_ASSERT(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode));

    /* An offline writer aimed at a device writes in place: no temporary
     * file renamed over it. */
    char null_link[256], cmd[1024], out[4096];
    tu_tmp_path("to-dev-null.rhtr", null_link, sizeof null_link);
    CU_ASSERT_FATAL(symlink("/dev/null", null_link) == 0);
    snprintf(cmd, sizeof cmd, "%s trace synth --requests 50 --seed 3 -o %s", tu_bin(), null_link);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n    %s\n", out);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(lstat(null_link, &st) == 0 && S_ISLNK(st.st_mode));
    CU_ASSERT(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    unlink(link);
    unlink(null_link);
}

/* ---- Lua policies that fail inside the server ---- */
typedef struct asker {
    const char *url;
    int k;
    int32_t prompt[32];
    uint32_t n;
    int32_t got[64];
    uint32_t n_got;
    long status;
} asker;

#define ASK_TOKENS 20

static void *ask(void *arg)
{
    asker *a = arg;
    char *ids = ts_ids_json(a->prompt, a->n);
    char body[1024];
    snprintf(body, sizeof body,
             "{\"prompt\":%s,\"max_tokens\":%d,\"temperature\":0.7,\"seed\":%d,\"ignore_eos\":true,"
             "\"return_token_ids\":true,\"stream\":%s}",
             ids, ASK_TOKENS, 50 + a->k, a->k % 2 ? "true" : "false");
    free(ids);
    if (a->k % 2) {
        ts_stream st = ts_stream_at(a->url, "/v1/completions", body, 0, NULL);
        a->status = st.done ? st.status : 0;
        for (size_t i = 0; i < json_array_size(st.events); i++) {
            json_t *ch = json_array_get(json_object_get(json_array_get(st.events, i), "choices"), 0);
            a->n_got += ts_ids_of(json_object_get(ch, "token_ids"), a->got + a->n_got, 64 - a->n_got);
        }
        ts_stream_free(&st);
    } else {
        ts_resp r = ts_request_at(a->url, "POST", "/v1/completions", body, NULL);
        a->status = r.status;
        json_t *ch = json_array_get(json_object_get(r.json, "choices"), 0);
        a->n_got = ts_ids_of(json_object_get(ch, "token_ids"), a->got, 64);
        ts_resp_free(&r);
    }
    return NULL;
}

/* Sixteen requests at once under the policy: every one answered with the
 * tokens its prompt gets alone; the policy failed and was reported once. */
/* Each call under a budget of `instructions` (the bytes a script allocates
 * count: reaching a memory cap takes a budget of a few times the cap). */
static void serve_under_policy_budget(const char *name, const char *text, const char *says, uint64_t instructions)
{
    char path[256];
    tu_tmp_path(name, path, sizeof path);
    CU_ASSERT_FATAL(tu_write_file(path, text, strlen(text)) == 0);
    server_config c = ts_config(the_model());
    c.engine.core.policy = CORE_POLICY_LUA;
    c.engine.core.lua_policy_path = path;
    c.engine.core.policy_max_instructions = instructions;
    c.engine.core.policy_max_memory = 4u << 20;
    c.engine.core.max_running_requests = 4;   /* a queue, so the policy has work */
    c.engine.core.policy_max_failures = 0;    /* every call made (the breaker: test_hardening_policy_serve) */
    hu_stderr cap;
    hu_stderr_catch(&cap, "policy-stderr.txt");
    server *s = ts_start(&c);
    enum { N = 16 };
    asker a[N];
    pthread_t t[N];
    for (int k = 0; k < N; k++) {
        a[k] = (asker){.url = server_url(s), .k = k, .n = 6 + (uint32_t)k};
        eh_random_prompt(700 + (uint64_t)k, VOCAB, a[k].prompt, a[k].n);
        pthread_create(&t[k], NULL, ask, &a[k]);
    }
    for (int k = 0; k < N; k++) pthread_join(t[k], NULL);
    core_stats st;
    server_core_stats(s, &st);
    ts_stop(s);
    hu_stderr_release(&cap);

    int same = 0;
    for (int k = 0; k < N; k++) {
        int32_t want[ASK_TOKENS];
        kern_sampling sp = {.temperature = 0.7f, .top_p = 1.0f, .top_k = 0};
        int64_t nw = eh_reference(the_model(), a[k].prompt, a[k].n, sp, 50 + (uint64_t)k, ASK_TOKENS, want);
        same += a[k].status == 200 && nw == ASK_TOKENS && a[k].n_got == ASK_TOKENS &&
                !memcmp(a[k].got, want, sizeof want);
    }
    int warnings = hu_count(cap.path, "Lua policy error");
    if (same != N || warnings != 1 || !st.policy_errors || hu_count(cap.path, says) != 1)
        printf("\n    %s: %d of %d as alone, %llu policy errors, %d warnings (%s)\n", name, same, N,
               (unsigned long long)st.policy_errors, warnings, says);
    CU_ASSERT_EQUAL(same, N);
    CU_ASSERT(st.policy_errors > 0);
    CU_ASSERT_EQUAL(st.finished, N);
    CU_ASSERT_EQUAL(warnings, 1);
    CU_ASSERT_EQUAL(hu_count(cap.path, says), 1);
}

static void serve_under_policy(const char *name, const char *text, const char *says)
{
    serve_under_policy_budget(name, text, says, 200000);
}

static void test_failing_policies_in_the_server(void)
{
    hu_watchdog(180);
    serve_under_policy("raise.lua", "function policy(waiting, state)\n  error('no order today')\nend\n",
                       "raise.lua:2: no order today");
    serve_under_policy("spin.lua", "function policy(waiting, state)\n  while true do end\nend\n",
                       "budget of 200000 instructions");
    serve_under_policy_budget("grab.lua",
                              "held = {}\n"
                              "function policy(waiting, state)\n"
                              "  while true do held[#held + 1] = ('x'):rep(4096) .. #held end\n"
                              "end\n",
                              "memory limit of 4194304 bytes", 20000000);
}

static int cleanup(void)
{
    hu_watchdog(0);
    model_free(tiny);
    tiny = NULL;
    return 0;
}

void register_test_hardening_faults(void)
{
    CU_pSuite s = CU_add_suite("hardening_faults", NULL, cleanup);
    CU_add_test(s, "SIGKILL under 32 closed-loop clients: every completion received is recorded",
                test_sigkill_under_load);
    CU_add_test(s, "SIGKILL mid-run: the recording reads back to its last flush; trace stats says cut short",
                test_sigkill_mid_run);
    CU_add_test(s, "a disk that fills: one message, a readable recording, serving goes on",
                test_disk_fills_while_recording);
    CU_add_test(s, "a disk full from the start refuses to start; devices are never replaced", test_disk_full_at_start);
    CU_add_test(s, "Lua policies that raise, spin or grab memory inside the server: fcfs, one warning",
                test_failing_policies_in_the_server);
}
