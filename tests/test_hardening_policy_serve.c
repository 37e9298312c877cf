/* test_hardening_policy_serve.c — `rehearse serve --policy-script` under
 * every hostile policy of the sandbox's suite: requests that queue behind
 * each other (so the policy runs) are answered, and SIGTERM stops the
 * server within 5 s, whatever the policy does; the errors are counted in
 * /metrics (rehearse:policy_errors_total) and warned about once. */
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "test_hardening_util.h"
#include "testutil.h"
#include "util/progress.h"

/* The port of a URL "http://127.0.0.1:PORT". */
static uint16_t port_of(const char *url)
{
    const char *c = strrchr(url, ':');
    return c ? (uint16_t)atoi(c + 1) : 0;
}

/* One HTTP/1.0 exchange on a fresh connection; the reply's status (0: none). */
static int http(uint16_t port, const char *method, const char *path, const char *body, char *reply, size_t n)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return 0;
    }
    char req[2048];
    int len = snprintf(req, sizeof req,
                       "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                       method, path, body ? strlen(body) : 0, body ? body : "");
    if (write(fd, req, (size_t)len) != len) {
        close(fd);
        return 0;
    }
    size_t got = 0;
    ssize_t k;
    while (got + 1 < n && (k = read(fd, reply + got, n - 1 - got)) > 0) got += (size_t)k;
    reply[got] = '\0';
    close(fd);
    int status = 0;
    sscanf(reply, "HTTP/%*s %d", &status);
    return status;
}

typedef struct asker {
    uint16_t port;
    int status;
    char reply[8192];
} asker;

static void *ask(void *p)
{
    asker *a = p;
    a->status = http(a->port, "POST", "/v1/completions", "{\"prompt\": [1, 2, 3, 4], \"max_tokens\": 3}", a->reply,
                     sizeof a->reply);
    return NULL;
}

#define N_ASK 4

/* extra: more flags (NULL-terminated, at most 4), or NULL; trips: the
 * breaker trips /metrics must show at least (0: not looked at). */
static void serve_hostile_with(const char *name, const char *text, const char *const *extra, double trips)
{
    char path[256], tag[64];
    tu_tmp_path(name, path, sizeof path);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, text, strlen(text)), 0);
    snprintf(tag, sizeof tag, "hostile-%s", name);
    const char *args[12] = {"--policy-script", path, "--max-running-requests", "1", "--policy-max-instructions",
                            "200000", NULL};
    for (int i = 0; extra && extra[i] && i < 4; i++) args[6 + i] = extra[i];
    hu_proc p;
    CU_ASSERT_EQUAL_FATAL(hu_spawn(&p, tag, args, 0), 0);
    uint16_t port = port_of(p.url);
    /* Four at once behind one running slot: three wait, so the policy runs. */
    asker a[N_ASK];
    pthread_t th[N_ASK];
    for (int i = 0; i < N_ASK; i++) {
        a[i].port = port;
        pthread_create(&th[i], NULL, ask, &a[i]);
    }
    int answered = 0;
    for (int i = 0; i < N_ASK; i++) {
        pthread_join(th[i], NULL);
        answered += a[i].status == 200;
    }
    char metrics[1 << 16];
    int mst = http(port, "GET", "/metrics", NULL, metrics, sizeof metrics);
    const char *pe = strstr(metrics, "\nrehearse:policy_errors_total");
    /* One more in flight while the signal arrives. */
    asker late = {.port = port};
    pthread_t lt;
    pthread_create(&lt, NULL, ask, &late);
    hu_nap(0.05);
    double t0 = rh_now();
    kill(p.pid, SIGTERM);
    int st = hu_exit_status(p.pid);
    double took = rh_now() - t0;
    pthread_join(lt, NULL);
    int warned = hu_count(p.err, "Lua policy error");
    const char *tp = strstr(metrics, "\nrehearse:policy_breaker_trips_total");
    const char *tv = tp ? strchr(tp + 1, ' ') : NULL;   /* after the labels */
    double tripped = tv ? atof(tv) : -1;
    int ok = answered == N_ASK && mst == 200 && pe && st == 0 && took < 5 && warned <= 1 && tripped >= trips;
    if (!ok)
        printf("\n    %s: %d of %d answered, /metrics %d %s, exit %d after %.2f s, %d warnings, %g trips\n", name,
               answered, N_ASK, mst, pe ? "with the counter" : "without the counter", st, took, warned, tripped);
    CU_ASSERT(ok);
}

static void serve_hostile(const char *name, const char *text)
{
    serve_hostile_with(name, text, NULL, 0);
}

static void test_hostile_policies_served_and_stopped(void)
{
    hu_watchdog(300);
    serve_hostile("len.lua", "function policy(w, s)\n  return setmetatable({}, {__len = function() while true do end end})\nend\n");
    serve_hostile("index_list.lua",
                  "function policy(w, s)\n  return setmetatable({}, {__index = function() while true do end end})\nend\n");
    serve_hostile("index_entry.lua",
                  "function policy(w, s)\n  return {setmetatable({}, {__index = function() while true do end end})}\nend\n");
    serve_hostile("strmeta.lua",
                  "function policy(w, s)\n  getmetatable('').__index = string.sub\n"
                  "  return table.concat('a', '', 2, math.maxinteger)\nend\n");
    serve_hostile("concat_pcall.lua",
                  "function policy(w, s)\n"
                  "  while true do pcall(table.concat, setmetatable({}, {__index = rawlen}), '', 1, math.maxinteger) end\n"
                  "end\n");
    serve_hostile("spin.lua", "function policy(w, s)\n  while true do end\nend\n");
    serve_hostile("sorts.lua", "local t = {}\nfor i = 1, 3000 do t[i] = -i end\n"
                               "function policy(w, s)\n  while true do table.sort(t, nil) end\nend\n");
    /* Work inside one C call or one instruction: once a completion that
     * never came back and a SIGTERM that never exited. (The 20 MB string
     * is made in the first call: under the sanitizers making it at load
     * would take the load's own time limit.) */
    static const char *const quick[] = {"--policy-max-seconds", "0.2", NULL};
    serve_hostile_with("sort_big.lua",
                       "local t\nfunction policy(w, st)\n"
                       "  if not t then t = {} local s = string.rep('x', 20000000) for i = 1, 2000 do t[i] = s end end\n"
                       "  table.sort(t)\nend\n",
                       quick, 0);
    serve_hostile_with("less_big.lua",
                       "local s\nfunction policy(w, st)\n  s = s or string.rep('x', 20000000)\n  repeat until s < s\nend\n",
                       quick,
                       0);
    /* A script failing every call trips its breaker (counted in /metrics). */
    static const char *const trip[] = {"--policy-max-failures", "1", NULL};
    serve_hostile_with("trips.lua", "function policy(w, s)\n  while true do end\nend\n", trip, 1);
    hu_watchdog(0);
}

void register_test_hardening_policy_serve(void)
{
    CU_pSuite s = CU_add_suite("hardening_policy_serve", NULL, NULL);
    CU_add_test(s, "hostile policies: requests answered, SIGTERM stops the server within 5 s",
                test_hostile_policies_served_and_stopped);
}
