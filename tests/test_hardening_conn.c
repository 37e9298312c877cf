/* test_hardening_conn.c — connection slots cannot be exhausted by one
 * client. `rehearse serve --max-connections 50 --header-timeout 2`: a client
 * (127.0.0.2) holding 1,000 idle sockets keeps at most its cap plus a
 * margin, while a client on another address is answered within a second;
 * the server closes the idle ones after the header timeout; a client's
 * requests over its cap get 503 with a message naming the flag.
 * `--header-timeout 1 --idle-timeout 1`: a header dripped one byte every
 * 100 ms is closed at its deadline, not kept for ever (the first request's:
 * 1 s after the connection opened; a kept-alive one's next: 1 + 1 s after
 * the answer), and never before it. */
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "test_hardening_util.h"
#include "testutil.h"
#include "util/progress.h"

#define FLOOD 1000

/* A completion on a fresh connection from src: the status and, in body, the reply. */
static int ask(const char *src, uint16_t port, char *reply, size_t n)
{
    int fd = hu_connect_from(src, port);
    if (fd < 0) return 0;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const char *body = "{\"prompt\": [1, 2, 3], \"max_tokens\": 2}";
    char req[512];
    int len = snprintf(req, sizeof req,
                       "POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: %zu\r\n\r\n%s",
                       strlen(body), body);
    int status = 0;
    if (write(fd, req, (size_t)len) == len) {
        size_t got = 0;
        ssize_t k;
        while (got + 1 < n && (k = read(fd, reply + got, n - 1 - got)) > 0) got += (size_t)k;
        reply[got] = '\0';
        sscanf(reply, "HTTP/%*s %d", &status);
    }
    close(fd);
    return status;
}

static void test_idle_flood_cannot_take_the_slots(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < FLOOD + 256) {
        rl.rlim_cur = rl.rlim_max < FLOOD + 256 ? rl.rlim_max : FLOOD + 256;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < FLOOD + 128) {
        printf("\n    SKIPPED: %llu file descriptors, the flood needs %d\n", (unsigned long long)rl.rlim_cur, FLOOD + 128);
        return;
    }
    hu_watchdog(120);
    const char *args[] = {"--max-connections", "50", "--header-timeout", "2", NULL};
    hu_proc p;
    CU_ASSERT_EQUAL_FATAL(hu_spawn(&p, "conn-flood", args, 0), 0);
    const char *colon = strrchr(p.url, ':');
    uint16_t port = (uint16_t)atoi(colon + 1);
    static int fds[FLOOD];
    int opened = 0;
    for (int i = 0; i < FLOOD; i++)
        if ((fds[i] = hu_connect_from("127.0.0.2", port)) >= 0) opened++;
    hu_nap(0.5);   /* the server accepts, counts and sheds */
    char reply[8192];
    double t0 = rh_now();
    int status = ask("127.0.0.1", port, reply, sizeof reply);
    double took = rh_now() - t0;
    int held = 0;
    for (int i = 0; i < FLOOD; i++)
        if (fds[i] >= 0 && !hu_closed_by_server(fds[i])) held++;
    printf("(%d of %d idle sockets opened, %d held by the server; another client answered %d in %.3f s) ", opened, FLOOD,
           held, status, took);
    CU_ASSERT_EQUAL(status, 200);
    CU_ASSERT(took < 1.0);
    CU_ASSERT(held <= 25 + 12);   /* its cap, and half of what that leaves the others */
    /* Idle past the header timeout: every one of them closed. */
    hu_nap(3.5);
    int left = 0;
    for (int i = 0; i < FLOOD; i++)
        if (fds[i] >= 0) {
            left += !hu_closed_by_server(fds[i]);
            close(fds[i]);
        }
    CU_ASSERT_EQUAL(left, 0);

    /* A client over its cap (25 of 50) gets 503 on its next request. */
    int mine[30], n_mine = 0;
    for (int i = 0; i < 30; i++)
        if ((mine[i] = hu_connect_from("127.0.0.3", port)) >= 0) n_mine++;
    hu_nap(0.3);
    status = ask("127.0.0.3", port, reply, sizeof reply);
    CU_ASSERT_EQUAL(status, 503);
    CU_ASSERT_PTR_NOT_NULL(strstr(reply, "too_many_connections"));
    CU_ASSERT_PTR_NOT_NULL(strstr(reply, "--max-connections-per-client"));
    status = ask("127.0.0.1", port, reply, sizeof reply);   /* others are still served */
    CU_ASSERT_EQUAL(status, 200);
    for (int i = 0; i < 30; i++)
        if (mine[i] >= 0) close(mine[i]);
    kill(p.pid, SIGTERM);
    CU_ASSERT_EQUAL(hu_exit_status(p.pid), 0);
    hu_watchdog(0);
}

static void test_dripping_header_closed(void)
{
    hu_watchdog(120);
    const char *args[] = {"--header-timeout", "1", "--idle-timeout", "1", NULL};
    hu_proc p;
    CU_ASSERT_EQUAL_FATAL(hu_spawn(&p, "conn-drip", args, 0), 0);
    hu_check_header_deadline(hu_port(p.url));
    char reply[8192];
    CU_ASSERT_EQUAL(ask("127.0.0.1", hu_port(p.url), reply, sizeof reply), 200);   /* serving on */
    kill(p.pid, SIGTERM);
    CU_ASSERT_EQUAL(hu_exit_status(p.pid), 0);
    hu_watchdog(0);
}

void register_test_hardening_conn(void)
{
    CU_pSuite s = CU_add_suite("hardening_conn", NULL, NULL);
    CU_add_test(s, "1,000 idle sockets from one client: others answered, the idle closed", test_idle_flood_cannot_take_the_slots);
    CU_add_test(s, "a header dripped a byte every 100 ms: closed at --header-timeout, first and kept-alive",
                test_dripping_header_closed);
}
