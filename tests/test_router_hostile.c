/* test_router_hostile.c — `rehearse router` under hostile clients and a
 * hostile worker, the worker a fake one in this process (so what it saw
 * can be counted: every POST it took in, and each whose connection the
 * router closed):
 *   - 200 silent and dripping sockets from one address (127.0.0.2) with the
 *     header deadline far off: a client on another address is answered
 *     while they are still held (the per-client cap, not a timeout, lets it
 *     in), the flood keeps at most its cap plus the margin, and a client
 *     over its cap gets 429 naming --max-connections-per-client;
 *   - a header dripped one byte every 100 ms is closed by --header-timeout
 *     (the first request's, and a kept-alive connection's next), counted
 *     in /metrics;
 *   - clients that drop non-streaming and streaming requests: the worker
 *     sees each of its connections closed, the router's outstanding count
 *     drops to 0 and its descriptors come back to where they were;
 *   - a worker whose body never ends: 502 response_too_large (a final
 *     error event in a stream) and the router's peak memory stays within a
 *     few caps (--max-response-bytes 1 MiB), not hundreds of MiB.
 * No verdict rests on speed: waits poll for the state they need under
 * limits (seconds) far above what it takes, and the only times compared
 * are lower bounds a deadline cannot beat. */
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "test_hardening_util.h"
#include "test_router_util.h"
#include "testutil.h"

/* ---- a fake worker ----
 * GET /health, /metrics and /v1/models answered; a POST (body read whole):
 *   FW_ANSWER   a completion, Content-Length, closed;
 *   FW_HOLD     a stream's headers and one event (a plain request: nothing),
 *               then held until the router closes the connection;
 *   FW_ENDLESS  200 and a body that never ends (a stream: one event that
 *               never ends), until the router closes the connection. */
enum { FW_ANSWER, FW_HOLD, FW_ENDLESS };
#define FW_MAX 256

typedef struct fake_worker {
    int mode, lfd;
    char url[64];
    pthread_t acceptor;
    atomic_bool quit;
    atomic_int posts, posts_closed;
    pthread_mutex_t mu;
    int fds[FW_MAX];
    pthread_t th[FW_MAX];
    int n;
} fake_worker;

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

#define FW_BUF (1u << 16)

/* One POST's answer, by the worker's mode. */
static void fw_post(fake_worker *w, int fd, char *buf, bool stream)
{
    atomic_fetch_add(&w->posts, 1);
    if (w->mode == FW_ANSWER) {
        const char *body = "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":\"fake\",\"choices\":"
                           "[{\"index\":0,\"text\":\"ok\",\"finish_reason\":\"length\",\"logprobs\":null}],"
                           "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}";
        int len = snprintf(buf, FW_BUF,
                           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                           "Connection: close\r\n\r\n%s",
                           strlen(body), body);
        send_all(fd, buf, (size_t)len);
        return;
    }
    if (w->mode == FW_HOLD) {
        const char *h = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                        "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n";
        if (stream) send_all(fd, h, strlen(h));
        char c;
        while (recv(fd, &c, 1, 0) > 0) {}   /* until the router lets go */
    } else {
        const char *h = stream ? "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                                 "data: {\"x\": \""
                               : "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                                 "{\"x\": \"";
        memset(buf, 'a', FW_BUF);
        if (send_all(fd, h, strlen(h)) == 0)
            while (!atomic_load(&w->quit) && send_all(fd, buf, FW_BUF) == 0) {}
    }
    atomic_fetch_add(&w->posts_closed, 1);
}

typedef struct fw_conn {
    fake_worker *w;
    int slot;
} fw_conn;

static void *fw_conn_main(void *arg)
{
    fw_conn cn = *(fw_conn *)arg;
    free(arg);
    fake_worker *w = cn.w;
    pthread_mutex_lock(&w->mu);
    int fd = w->fds[cn.slot];
    pthread_mutex_unlock(&w->mu);
    char *buf = malloc(FW_BUF + 1);
    size_t n = 0;
    char *end = NULL;
    while (buf && !end && n < FW_BUF) {
        ssize_t k = recv(fd, buf + n, FW_BUF - n, 0);
        if (k <= 0) break;
        n += (size_t)k;
        buf[n] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (end && !strncmp(buf, "GET ", 4)) {
        const char *body = !strncmp(buf + 4, "/v1/models", 10)
                               ? "{\"object\":\"list\",\"data\":[{\"id\":\"fake\",\"object\":\"model\"}]}"
                               : "ok";
        char out[512];
        int len = snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                           strlen(body), body);
        send_all(fd, out, (size_t)len);
    } else if (end) {
        const char *cl = strcasestr(buf, "content-length:");
        size_t head = (size_t)(end + 4 - buf), want = cl ? strtoul(cl + 15, NULL, 10) : 0;
        while (n - head < want && n < FW_BUF) {   /* the rest of the body (the tests' are small) */
            ssize_t k = recv(fd, buf + n, FW_BUF - n, 0);
            if (k <= 0) break;
            n += (size_t)k;
            buf[n] = '\0';
        }
        bool stream = strstr(buf + head, "\"stream\": true") || strstr(buf + head, "\"stream\":true");
        if (n - head >= want) fw_post(w, fd, buf, stream);
    }
    free(buf);
    pthread_mutex_lock(&w->mu);
    w->fds[cn.slot] = -1;
    pthread_mutex_unlock(&w->mu);
    close(fd);
    return NULL;
}

static void *fw_accept_main(void *arg)
{
    fake_worker *w = arg;
    while (!atomic_load(&w->quit)) {
        struct pollfd q = {.fd = w->lfd, .events = POLLIN};
        if (poll(&q, 1, 50) <= 0) continue;
        int fd = accept(w->lfd, NULL, NULL);
        if (fd < 0) continue;
        fw_conn *cn = malloc(sizeof *cn);
        pthread_mutex_lock(&w->mu);
        bool room = cn && w->n < FW_MAX;
        if (room) {
            *cn = (fw_conn){w, w->n};
            w->fds[w->n] = fd;
            if (pthread_create(&w->th[w->n], NULL, fw_conn_main, cn) == 0) w->n++;
            else room = false;
        }
        pthread_mutex_unlock(&w->mu);
        if (!room) {
            free(cn);
            close(fd);
        }
    }
    return NULL;
}

static int fw_start(fake_worker *w, int mode)
{
    memset(w, 0, sizeof *w);
    w->mode = mode;
    pthread_mutex_init(&w->mu, NULL);
    w->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t len = sizeof a;
    if (w->lfd < 0 || bind(w->lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(w->lfd, 512) < 0 ||
        getsockname(w->lfd, (struct sockaddr *)&a, &len) < 0)
        return -1;
    snprintf(w->url, sizeof w->url, "http://127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
    return pthread_create(&w->acceptor, NULL, fw_accept_main, w) == 0 ? 0 : -1;
}

/* Every connection cut, every thread joined. */
static void fw_stop(fake_worker *w)
{
    atomic_store(&w->quit, true);
    pthread_join(w->acceptor, NULL);
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < w->n; i++)
        if (w->fds[i] >= 0) shutdown(w->fds[i], SHUT_RDWR);
    int n = w->n;
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < n; i++) pthread_join(w->th[i], NULL);
    close(w->lfd);
    pthread_mutex_destroy(&w->mu);
}

/* ---- sockets and the router process ---- */
/* A request on a fresh connection from src; the status (0: none) and the reply. */
static int ask_from(const char *src, const char *url, const char *req, char *reply, size_t n)
{
    int fd = hu_connect_from(src, hu_port(url));
    if (fd < 0) return 0;
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int status = 0;
    reply[0] = '\0';
    if (send_all(fd, req, strlen(req)) == 0) {
        size_t got = 0;
        ssize_t k;
        while (got + 1 < n && (k = recv(fd, reply + got, n - 1 - got, 0)) > 0) got += (size_t)k;
        reply[got] = '\0';
        sscanf(reply, "HTTP/%*s %d", &status);
    }
    close(fd);
    return status;
}

static const char *completion_request(void)
{
    return "POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 36\r\n\r\n"
           "{\"prompt\": [1, 2, 3], \"max_tokens\": 2}";
}

/* A value of the router's /metrics (-1: absent). */
static double router_metric(const char *url, const char *name)
{
    ts_resp m = ts_request_at(url, "GET", "/metrics", NULL, NULL);
    double v = m.status == 200 ? ts_metric(m.body, name) : -1;
    ts_resp_free(&m);
    return v;
}

/* The router's open descriptors. */
static int fd_count(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Its peak resident memory (VmHWM), kB; -1 when unknown. */
static long peak_kb(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb;
}

static void raise_fd_limit(rlim_t want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* ---- 1. a flood from one address ---- */
#define FLOOD 200

typedef struct dripper {
    int *fds, n;
    atomic_bool stop;
} dripper;

/* One more header byte to each socket every 50 ms: a header that never ends. */
static void *drip_main(void *arg)
{
    dripper *d = arg;
    static const char head[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Pad: ";
    for (size_t k = 0; !atomic_load(&d->stop); k++) {
        char c = k < sizeof head - 1 ? head[k] : 'a';
        for (int i = 0; i < d->n; i++)
            if (d->fds[i] >= 0) send(d->fds[i], &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        hu_nap(0.05);
    }
    return NULL;
}

static void test_flood_one_address(void)
{
    raise_fd_limit(FLOOD + 512);
    hu_watchdog(120);
    fake_worker fw;
    CU_ASSERT_FATAL(fw_start(&fw, FW_ANSWER) == 0);
    /* The header deadline is a minute away: only the per-client cap can
     * let another client in while the flood holds its sockets. Cap: half
     * of 64; margin: half of what that leaves, 16. */
    tu_server r;
    const char *urls[] = {fw.url};
    char *extra[] = {"--max-connections", "64", "--header-timeout", "60", NULL};
    if (ru_start_router(&r, urls, 1, "flood", extra) < 0) {
        fw_stop(&fw);
        CU_FAIL_FATAL("router");
    }
    /* Half silent, half dripping; connected before the others, so accepted
     * before them (the listen queue is first come, first served). */
    static int fds[FLOOD];
    int opened = 0;
    for (int i = 0; i < FLOOD; i++) opened += (fds[i] = hu_connect_from("127.0.0.2", hu_port(r.url))) >= 0;
    dripper d = {.fds = fds + FLOOD / 2, .n = FLOOD / 2};
    atomic_init(&d.stop, false);
    pthread_t dt;
    CU_ASSERT_FATAL(pthread_create(&dt, NULL, drip_main, &d) == 0);
    hu_nap(0.2);
    char reply[4096];
    double t0 = rh_now();
    int status = ask_from("127.0.0.1", r.url, completion_request(), reply, sizeof reply);
    double took = rh_now() - t0;
    int held = 0;
    for (int i = 0; i < FLOOD; i++) held += fds[i] >= 0 && !hu_closed_by_server(fds[i]);
    printf("(%d of %d flood sockets opened, %d held; another client answered %d in %.3f s) ", opened, FLOOD, held,
           status, took);
    CU_ASSERT_EQUAL(opened, FLOOD);
    CU_ASSERT_EQUAL(status, 200);
    CU_ASSERT(took < 30);        /* half the header deadline: no timeout freed the slot */
    CU_ASSERT(held >= 1);        /* the flood was still there */
    CU_ASSERT(held <= 32 + 16);  /* its cap and the margin */
    atomic_store(&d.stop, true);
    pthread_join(dt, NULL);
    for (int i = 0; i < FLOOD; i++)
        if (fds[i] >= 0) close(fds[i]);
    /* Over its cap, a client is told so by name (the flood gone first: the
     * router's 64 slots would not hold both). */
    double end = rh_now() + 20;
    while (router_metric(r.url, "rehearse_router_client_connections") > 1 && rh_now() < end) hu_nap(0.02);
    int mine[40], n_mine = 0;
    for (int i = 0; i < 40; i++) n_mine += (mine[i] = hu_connect_from("127.0.0.3", hu_port(r.url))) >= 0;
    CU_ASSERT_EQUAL(n_mine, 40);
    status = ask_from("127.0.0.3", r.url, completion_request(), reply, sizeof reply);
    CU_ASSERT_EQUAL(status, 429);
    CU_ASSERT_PTR_NOT_NULL(strstr(reply, "too_many_connections"));
    CU_ASSERT_PTR_NOT_NULL(strstr(reply, "--max-connections-per-client"));
    for (int i = 0; i < 40; i++)
        if (mine[i] >= 0) close(mine[i]);
    CU_ASSERT_EQUAL(tu_server_stop(&r), 0);
    fw_stop(&fw);
    hu_watchdog(0);
}

/* ---- 2. a header dripped for ever ---- */
static void test_dripping_header(void)
{
    hu_watchdog(120);
    fake_worker fw;
    CU_ASSERT_FATAL(fw_start(&fw, FW_ANSWER) == 0);
    tu_server r;
    const char *urls[] = {fw.url};
    char *extra[] = {"--header-timeout", "1", "--idle-timeout", "1", NULL};
    if (ru_start_router(&r, urls, 1, "drip", extra) < 0) {
        fw_stop(&fw);
        CU_FAIL_FATAL("router");
    }
    hu_check_header_deadline(hu_port(r.url));
    CU_ASSERT(router_metric(r.url, "rehearse_router_header_timeouts_total") >= 2);
    /* and the router serves on */
    ts_resp a = ts_request_at(r.url, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 1}", NULL);
    CU_ASSERT_EQUAL(a.status, 200);
    ts_resp_free(&a);
    CU_ASSERT_EQUAL(tu_server_stop(&r), 0);
    fw_stop(&fw);
    hu_watchdog(0);
}

/* ---- 3. clients that drop their requests ---- */
static void test_dropped_requests_cancelled(void)
{
    hu_watchdog(120);
    fake_worker fw;
    CU_ASSERT_FATAL(fw_start(&fw, FW_HOLD) == 0);
    tu_server r;
    const char *urls[] = {fw.url};
    if (ru_start_router(&r, urls, 1, "drop", NULL) < 0) {
        fw_stop(&fw);
        CU_FAIL_FATAL("router");
    }
    enum { PLAIN = 16, STREAMS = 4, N = PLAIN + STREAMS };
    ts_resp warm = ts_request_at(r.url, "GET", "/metrics", NULL, NULL);   /* the router's own fds settle */
    ts_resp_free(&warm);
    int before = fd_count(r.pid);
    int fds[N];
    for (int i = 0; i < N; i++) {
        const char *body = i < PLAIN ? "{\"prompt\": [1, 2, 3], \"max_tokens\": 2000}"
                                     : "{\"prompt\": [1, 2, 3], \"max_tokens\": 2000, \"stream\": true}";
        char req[512];
        snprintf(req, sizeof req,
                 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\n\r\n%s",
                 strlen(body), body);
        fds[i] = hu_connect_from("127.0.0.1", hu_port(r.url));
        CU_ASSERT(fds[i] >= 0 && send_all(fds[i], req, strlen(req)) == 0);
    }
    double end = rh_now() + 20;
    while (atomic_load(&fw.posts) < N && rh_now() < end) hu_nap(0.01);
    CU_ASSERT_EQUAL_FATAL(atomic_load(&fw.posts), N);
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_outstanding", fw.url), N);
    for (int i = 0; i < N; i++) close(fds[i]);   /* every client gives up */
    end = rh_now() + 20;
    while ((atomic_load(&fw.posts_closed) < N || ru_worker_metric(r.url, "rehearse_router_outstanding", fw.url) != 0 ||
            fd_count(r.pid) > before) &&
           rh_now() < end)
        hu_nap(0.02);
    int after = fd_count(r.pid);
    printf("(worker saw %d of %d requests closed; router fds %d before, %d after) ", atomic_load(&fw.posts_closed), N,
           before, after);
    CU_ASSERT_EQUAL(atomic_load(&fw.posts_closed), N);
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_outstanding", fw.url), 0);
    CU_ASSERT_EQUAL(ru_worker_metric(r.url, "rehearse_router_errors_total", fw.url), 0);   /* the client's doing */
    CU_ASSERT(after <= before);
    CU_ASSERT_EQUAL(tu_server_stop(&r), 0);
    fw_stop(&fw);
    hu_watchdog(0);
}

/* ---- 4. a worker whose body never ends ---- */
typedef struct endless_client {
    const char *url;
    int stream;
    ts_resp resp;
    ts_stream st;
} endless_client;

static void *endless_main(void *arg)
{
    endless_client *c = arg;
    if (c->stream)
        c->st = ts_stream_at(c->url, "/v1/completions", "{\"prompt\": \"x\", \"stream\": true}", 0, NULL);
    else c->resp = ts_request_at(c->url, "POST", "/v1/completions", "{\"prompt\": \"x\"}", NULL);
    return NULL;
}

static void test_endless_worker_body(void)
{
    hu_watchdog(120);
    fake_worker fw;
    CU_ASSERT_FATAL(fw_start(&fw, FW_ENDLESS) == 0);
    tu_server r;
    const char *urls[] = {fw.url};
    char *extra[] = {"--max-response-bytes", "1048576", NULL};
    if (ru_start_router(&r, urls, 1, "endless", extra) < 0) {
        fw_stop(&fw);
        CU_FAIL_FATAL("router");
    }
    ts_resp warm = ts_request_at(r.url, "GET", "/v1/models", NULL, NULL);
    ts_resp_free(&warm);
    long base = peak_kb(r.pid);
    enum { PLAIN = 4, STREAMS = 2, N = PLAIN + STREAMS };
    endless_client c[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        c[i] = (endless_client){.url = r.url, .stream = i >= PLAIN};
        CU_ASSERT_FATAL(pthread_create(&th[i], NULL, endless_main, &c[i]) == 0);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    long peak = peak_kb(r.pid);
    printf("(router peak memory %ld kB before, %ld kB after %d endless answers at a 1 MiB cap) ", base, peak, N);
    for (int i = 0; i < PLAIN; i++) {
        CU_ASSERT_EQUAL(c[i].resp.status, 502);
        json_t *err = json_object_get(c[i].resp.json, "error");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "code")), "response_too_large");
        const char *msg = json_string_value(json_object_get(err, "message"));
        CU_ASSERT(msg && strstr(msg, "--max-response-bytes") && strstr(msg, fw.url));
        ts_resp_free(&c[i].resp);
    }
    for (int i = PLAIN; i < N; i++) {
        /* A stream: its end is an error event, then [DONE]; or, when the
         * cap was passed before the router answered at all, a 502 (its
         * body as the plain requests' above). */
        if (c[i].st.status == 200) {
            size_t ne = json_array_size(c[i].st.events);
            json_t *err = json_object_get(json_array_get(c[i].st.events, ne ? ne - 1 : 0), "error");
            const char *msg = json_string_value(json_object_get(err, "message"));
            CU_ASSERT(c[i].st.done);
            CU_ASSERT(msg && strstr(msg, "--max-response-bytes"));
        } else CU_ASSERT_EQUAL(c[i].st.status, 502);
        ts_stream_free(&c[i].st);
    }
    /* a few caps at most (each answer is held up to 1 MiB, and grows by
     * doubling), never the hundreds of MiB of an uncapped buffer */
    CU_ASSERT(base > 0 && peak - base < 64 * 1024);
    double end = rh_now() + 20;   /* the worker's connections were closed */
    while (atomic_load(&fw.posts_closed) < N && rh_now() < end) hu_nap(0.02);
    CU_ASSERT_EQUAL(atomic_load(&fw.posts_closed), N);
    CU_ASSERT_EQUAL(tu_server_stop(&r), 0);
    fw_stop(&fw);
    hu_watchdog(0);
}

void register_test_router_hostile(void)
{
    CU_pSuite s = CU_add_suite("router_hostile", NULL, NULL);
    CU_add_test(s, "200 silent and dripping sockets from one address: another client answered, 429 past the cap",
                test_flood_one_address);
    CU_add_test(s, "a header dripped a byte every 100 ms: closed at --header-timeout, first and kept-alive",
                test_dripping_header);
    CU_add_test(s, "clients that drop their requests: the worker's connections closed, nothing piles up",
                test_dropped_requests_cancelled);
    CU_add_test(s, "a worker whose body never ends: 502 response_too_large, the router's memory small",
                test_endless_worker_body);
}
