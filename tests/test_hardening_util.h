/* test_hardening_util.h — shared by the test_hardening*.c suites (and
 * test_router_hostile.c): `rehearse serve` as a child process (optionally
 * under a file-size limit, the portable stand-in for a disk that fills
 * up), its exit status, its stderr searched, stderr of this process caught
 * in a file for a while, and raw sockets: one from a chosen loopback
 * address, whether the server closed it, a header dripped into it. */
#ifndef RH_TEST_HARDENING_UTIL_H
#define RH_TEST_HARDENING_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "util/progress.h"

static inline void hu_nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* A test that would hang (the fault it guards against came back) ends the
 * run with a message instead: hu_watchdog(s) before, hu_watchdog(0) after. */
static inline void hu_watchdog_fired(int sig)
{
    (void)sig;
    static const char msg[] = "\n    WATCHDOG: a hardening test is still running past its limit: it hangs\n";
    if (write(2, msg, sizeof msg - 1) < 0) {}
    _exit(124);
}

static inline void hu_watchdog(unsigned seconds)
{
    signal(SIGALRM, hu_watchdog_fired);
    alarm(seconds);
}

/* A whole file, NUL-terminated (NULL when it cannot be read). */
static inline char *hu_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    fclose(f);
    if (b) b[len] = '\0';
    if (n) *n = len;
    return b;
}

/* Non-overlapping occurrences of needle in a file (0 when unreadable). */
static inline int hu_count(const char *path, const char *needle)
{
    char *s = hu_slurp(path, NULL);
    int k = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p += strlen(needle)) k++;
    free(s);
    return k;
}

typedef struct hu_proc {
    pid_t pid;
    char url[128];
    char out[256], err[256];
} hu_proc;

/* Starts `rehearse serve --model tiny-llama --port 0 ARGS...` (args ends
 * with NULL) with stdout and stderr in files under build/tmp named after
 * `tag`, and waits for its "listening on" line. fsize > 0 limits the size of
 * every file it writes (RLIMIT_FSIZE, with SIGXFSZ ignored so a write past
 * it fails with EFBIG as one past a full disk fails with ENOSPC). */
static inline int hu_spawn(hu_proc *p, const char *tag, const char *const *args, long long fsize)
{
    char name[128];
    snprintf(name, sizeof name, "%s.out", tag);
    tu_tmp_path(name, p->out, sizeof p->out);
    snprintf(name, sizeof name, "%s.err", tag);
    tu_tmp_path(name, p->err, sizeof p->err);
    const char *argv[64] = {tu_bin(), "serve", "--model", "tiny-llama", "--port", "0"};
    int n = 6;
    for (int i = 0; args && args[i] && n < 63; i++) argv[n++] = args[i];
    argv[n] = NULL;
    int out = open(p->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(p->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) return -1;
    p->pid = fork();
    if (p->pid == 0) {
        /* Only async-signal-safe calls between fork and exec. */
        if (fsize > 0) {
            struct rlimit rl = {(rlim_t)fsize, (rlim_t)fsize};
            setrlimit(RLIMIT_FSIZE, &rl);
            signal(SIGXFSZ, SIG_IGN);   /* stays ignored across exec */
        }
        dup2(out, 1);
        dup2(err, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(out);
    close(err);
    if (p->pid < 0) return -1;
    for (int i = 0; i < 3000; i++) {   /* up to 30 s to load and listen (sanitizer builds are slow) */
        char *s = hu_slurp(p->out, NULL);
        const char *l = s ? strstr(s, "listening on ") : NULL;
        if (l && strchr(l, '\n')) {
            snprintf(p->url, sizeof p->url, "%.*s", (int)strcspn(l + 13, "\n"), l + 13);
            free(s);
            return 0;
        }
        free(s);
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) return -1;   /* it gave up */
        hu_nap(0.01);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    return -1;
}

/* Exit status, or 128 + the signal that ended it. */
static inline int hu_exit_status(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Polls a file until it holds needle, up to `seconds`; 1 when it did. */
static inline int hu_wait_for(const char *path, const char *needle, double seconds)
{
    for (double waited = 0; waited < seconds; waited += 0.02) {
        if (hu_count(path, needle) > 0) return 1;
        hu_nap(0.02);
    }
    return hu_count(path, needle) > 0;
}

/* This process's stderr into a file, and back. */
typedef struct hu_stderr {
    int saved;
    char path[256];
} hu_stderr;

static inline void hu_stderr_catch(hu_stderr *c, const char *tag)
{
    tu_tmp_path(tag, c->path, sizeof c->path);
    fflush(stderr);
    c->saved = dup(2);
    int fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
}

static inline void hu_stderr_release(hu_stderr *c)
{
    fflush(stderr);
    if (c->saved >= 0) {
        dup2(c->saved, 2);
        close(c->saved);
    }
    c->saved = -1;
}

/* A socket from src (any 127.x.y.z: Linux routes them all to this
 * machine, each a client address of its own) to 127.0.0.1:port; -1 when it
 * cannot connect. */
static inline int hu_connect_from(const char *src, uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in from = {.sin_family = AF_INET}, to = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, src, &from.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (bind(fd, (struct sockaddr *)&from, sizeof from) < 0 || connect(fd, (struct sockaddr *)&to, sizeof to) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The port of a "http://host:port" URL. */
static inline uint16_t hu_port(const char *url)
{
    const char *colon = strrchr(url, ':');
    return colon ? (uint16_t)atoi(colon + 1) : 0;
}

/* A socket the server has closed reads end-of-file (or a reset); bytes it
 * sent first are read past. */
static inline int hu_closed_by_server(int fd)
{
    char c[512];
    for (;;) {
        ssize_t k = recv(fd, c, sizeof c, MSG_DONTWAIT);
        if (k > 0) continue;
        return k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
}

/* Drips a request header into fd one byte every `gap` s until the server
 * closes it: the seconds that took, or -1 after `limit` s with the socket
 * still open. */
static inline double hu_drip_until_closed(int fd, double gap, double limit)
{
    double t0 = rh_now();
    static const char head[] = "GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ";
    for (size_t k = 0; rh_now() - t0 < limit; k++) {
        char c = k < sizeof head - 1 ? head[k] : 'a';
        if (send(fd, &c, 1, MSG_NOSIGNAL) != 1) return rh_now() - t0;
        struct pollfd q = {.fd = fd, .events = POLLIN};
        if (poll(&q, 1, (int)(gap * 1000)) > 0 && hu_closed_by_server(fd)) return rh_now() - t0;
    }
    return -1;
}

/* A kept-alive connection's first request: GET /health on fd, read until
 * its JSON body is in. 1 when it answered 200. */
static inline int hu_health_kept_alive(int fd)
{
    const char *get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    char reply[2048] = "";
    size_t got = 0;
    if (send(fd, get, strlen(get), MSG_NOSIGNAL) != (ssize_t)strlen(get)) return 0;
    while (!strchr(reply, '}') && got + 1 < sizeof reply) {
        ssize_t k = recv(fd, reply + got, sizeof reply - 1 - got, 0);
        if (k <= 0) break;
        reply[got += (size_t)k] = '\0';
    }
    return strstr(reply, " 200 ") != NULL;
}

/* A server started with --header-timeout 1 --idle-timeout 1 on port:
 * a dripped first header is cut at its deadline (1 s after the connection
 * opened) and a kept-alive connection's next one 1 + 1 s after its answer,
 * never before. Asserts both and prints when each came. */
static inline void hu_check_header_deadline(uint16_t port)
{
    int fd = hu_connect_from("127.0.0.1", port);
    CU_ASSERT_FATAL(fd >= 0);
    double first = hu_drip_until_closed(fd, 0.1, 20);
    close(fd);
    fd = hu_connect_from("127.0.0.1", port);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT(hu_health_kept_alive(fd));
    double next = hu_drip_until_closed(fd, 0.1, 20);
    close(fd);
    printf("(closed %.2f s into the first header, %.2f s after an answer) ", first, next);
    CU_ASSERT(first >= 0.9);   /* never before its deadline */
    CU_ASSERT(next >= 1.9);
    CU_ASSERT(first > 0 && next > 0);   /* -1: still open after 20 s */
}

#endif
