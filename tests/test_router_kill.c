/* test_router_kill.c — nothing a client got is lost when `rehearse router
 * --record-trace` is killed: 16 closed-loop clients (half their requests
 * streamed) through the router to an emulated worker, SIGKILL once they
 * have 400 completions, and every completion a client received whole (a
 * 200 answer; a stream's [DONE]) is in the trace, read back with the
 * project's reader (cut short, which the reader says; or ending inside the
 * frame the kill cut, whose requests no client had). Each request asks
 * for its own (prompt, output) length pair, so a record names its request.
 * The kill comes after a count of completions, not after a time. */
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "test_hardening_util.h"
#include "test_router_util.h"
#include "testutil.h"

#define IN_SPAN 61          /* request j: 1 + j % IN_SPAN prompt ids, 1 + j / IN_SPAN output tokens */
#define MAX_REQ 20000
#define CLIENTS 16
#define ENOUGH 400

typedef struct load {
    const char *url;
    atomic_int next, received;
    atomic_bool stop;
    atomic_uchar got[MAX_REQ];   /* 1: the client has request j's completion whole */
} load;

typedef struct body_buf {
    char p[1 << 16];
    size_t n;
} body_buf;

static size_t keep(char *p, size_t size, size_t nmemb, void *ctx)
{
    body_buf *b = ctx;
    size_t n = size * nmemb, room = sizeof b->p - 1 - b->n;
    memcpy(b->p + b->n, p, n < room ? n : room);
    b->n += n < room ? n : room;
    b->p[b->n] = '\0';
    return n;
}

static void *client_main(void *arg)
{
    load *l = arg;
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    char url[256];
    snprintf(url, sizeof url, "%s/v1/completions", l->url);
    static _Thread_local body_buf b;
    while (!atomic_load(&l->stop)) {
        int j = atomic_fetch_add(&l->next, 1);
        if (j >= MAX_REQ) break;
        int n_in = 1 + j % IN_SPAN, n_out = 1 + j / IN_SPAN, stream = j % 2;
        char body[1024];
        size_t at = (size_t)snprintf(body, sizeof body, "{\"prompt\": [");
        for (int i = 0; i < n_in; i++) at += (size_t)snprintf(body + at, sizeof body - at, "%s%d", i ? "," : "", 1 + i);
        snprintf(body + at, sizeof body - at, "], \"max_tokens\": %d, \"ignore_eos\": true%s}", n_out,
                 stream ? ", \"stream\": true, \"stream_options\": {\"include_usage\": true}" : "");
        b.n = 0;
        b.p[0] = '\0';
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
        long status = 0;
        if (curl_easy_perform(c) != CURLE_OK) continue;   /* cut by the kill: not received */
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        bool whole = status == 200 && (stream ? strstr(b.p, "data: [DONE]") && !strstr(b.p, "\"error\"")
                                              : strstr(b.p, "\"choices\"") != NULL);
        if (whole) {
            atomic_store(&l->got[j], 1);
            atomic_fetch_add(&l->received, 1);
        }
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return NULL;
}

static void test_sigkill_keeps_every_answer(void)
{
    hu_watchdog(180);
    setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
    char cost[256], trace[256];
    CU_ASSERT_FATAL(ru_cost_file("router-kill-cost.json", 0.001, cost, sizeof cost) == 0);
    tu_tmp_path("router-kill.rhtr", trace, sizeof trace);
    tu_server w, r;
    CU_ASSERT_FATAL(ru_start_workers(&w, 1, cost, "sigkill") == 0);
    const char *urls[] = {w.url};
    char *extra[] = {"--record-trace", trace, NULL};
    if (ru_start_router(&r, urls, 1, "sigkill", extra) < 0) {
        ru_stop_workers(&w, 1);
        CU_FAIL_FATAL("router");
    }
    static load l;
    memset(&l, 0, sizeof l);
    l.url = r.url;
    pthread_t th[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) CU_ASSERT_FATAL(pthread_create(&th[i], NULL, client_main, &l) == 0);
    double end = rh_now() + 60;
    while (atomic_load(&l.received) < ENOUGH && rh_now() < end) hu_nap(0.005);
    kill((pid_t)r.pid, SIGKILL);
    int st = hu_exit_status((pid_t)r.pid);
    r.pid = 0;
    atomic_store(&l.stop, true);
    for (int i = 0; i < CLIENTS; i++) pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(st, 128 + SIGKILL);
    CU_ASSERT(atomic_load(&l.received) >= ENOUGH);

    /* The trace, read back: which requests it holds. */
    static unsigned char in_trace[MAX_REQ];
    memset(in_trace, 0, sizeof in_trace);
    rh_err e = {{0}};
    tr_reader *rd = tr_reader_open(trace, &e);
    if (!rd) printf("\n    %s\n", e.msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rd);
    tr_record rec;
    int rc, records = 0;
    while ((rc = tr_reader_next(rd, &rec, &e)) == 1) {
        if (rec.kind != TR_REQUEST) continue;
        records++;
        uint32_t in = rec.req.input_len, out = rec.req.output_len;
        long j = (long)(out - 1) * IN_SPAN + (long)(in - 1);
        if (in >= 1 && in <= IN_SPAN && out >= 1 && j < MAX_REQ) in_trace[j] = 1;
    }
    int cut = tr_reader_truncated(rd);
    tr_reader_close(rd);
    if (rc < 0) printf("\n    the trace ends: %s\n", e.msg);
    /* cut short at a frame boundary, or inside the frame the kill cut */
    CU_ASSERT(rc == 0 ? cut == 1 : strstr(e.msg, "inside a frame") != NULL);
    int missing = 0, first = -1;
    for (int j = 0; j < MAX_REQ; j++)
        if (atomic_load(&l.got[j]) && !in_trace[j]) {
            missing++;
            if (first < 0) first = j;
        }
    printf("(%d completions received, %d records read back, %d received but not in the trace) ",
           atomic_load(&l.received), records, missing);
    if (missing) printf("\n    the first: request %d (prompt %d, output %d)\n", first, 1 + first % IN_SPAN, 1 + first / IN_SPAN);
    CU_ASSERT_EQUAL(missing, 0);
    ru_stop_workers(&w, 1);
    hu_watchdog(0);
}

void register_test_router_kill(void)
{
    CU_pSuite s = CU_add_suite("router_kill", NULL, NULL);
    CU_add_test(s, "SIGKILL under 16 closed-loop clients: every completion a client received is in the trace",
                test_sigkill_keeps_every_answer);
}
