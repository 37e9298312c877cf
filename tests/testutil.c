/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

const char *tu_shared_traces(const char *why_needed)
{
    const char *d = getenv("REHEARSE_SHARED_TRACES");
    if (!d || !*d) d = "../shared/traces";
    struct stat st;
    if (stat(d, &st) == 0 && S_ISDIR(st.st_mode)) return d;
    printf("\n  SKIPPED %s: %s is absent (set REHEARSE_SHARED_TRACES)\n", why_needed ? why_needed : "", d);
    return NULL;
}

const char *tu_shared_file(const char *name, char *buf, size_t n)
{
    const char *d = tu_shared_traces(name);
    if (!d) return NULL;
    snprintf(buf, n, "%s/%s", d, name);
    if (access(buf, R_OK) != 0) {
        printf("\n  SKIPPED: %s is absent\n", buf);
        return NULL;
    }
    return buf;
}

const char *tu_gpu_profiles(const char *why_needed)
{
    const char *d = getenv("REHEARSE_GPU_PROFILES");
    if (!d || !*d) d = "../shared/gpu-profiles";
    struct stat st;
    if (stat(d, &st) == 0 && S_ISDIR(st.st_mode)) return d;
    printf("\n  SKIPPED %s: %s is absent (set REHEARSE_GPU_PROFILES)\n", why_needed ? why_needed : "", d);
    return NULL;
}

const char *tu_tmp_path(const char *name, char *buf, size_t n)
{
    mkdir("build", 0755);
    mkdir("build/tmp", 0755);
    snprintf(buf, n, "build/tmp/%d-%s", (int)getpid(), name);
    unlink(buf);
    return buf;
}

const char *tu_bin(void)
{
    const char *b = getenv("REHEARSE_BIN");
    return (b && *b) ? b : "./rehearse";
}

/* Every command runs under timeout(1): a command that never ends (a server
 * started where the test expected a refusal) fails its test with exit 124
 * instead of holding the whole suite until CI's limit kills it unread. */
int tu_run(const char *cmd, char *out, size_t n)
{
    char quoted[12288], full[16384];
    size_t q = 0;
    for (const char *c = cmd; *c && q + 5 < sizeof quoted; c++) {
        if (*c == '\'') { memcpy(quoted + q, "'\\''", 4); q += 4; }
        else quoted[q++] = *c;
    }
    quoted[q] = '\0';
    const char *lim = getenv("REHEARSE_TEST_CMD_TIMEOUT");
    snprintf(full, sizeof full, "timeout -k 10 %s sh -c '%s' 2>&1", lim && *lim ? lim : "900", quoted);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t got = 0;
    if (out && n) {
        int ch;
        while ((ch = fgetc(p)) != EOF)
            if (got + 1 < n) out[got++] = (char)ch;
        out[got] = '\0';
    } else {
        char tmp[4096];
        while (fread(tmp, 1, sizeof tmp, p) > 0) {}
    }
    int st = pclose(p);
    if (st == -1) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int tu_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

int tu_file_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

int tu_server_start(tu_server *s, const char *name, char *const args[])
{
    return tu_command_start(s, name, "serve", args);
}

int tu_command_start(tu_server *s, const char *name, const char *command, char *const args[])
{
    char n1[96], n2[96];
    snprintf(n1, sizeof n1, "%s.out", name);
    snprintf(n2, sizeof n2, "%s.err", name);
    tu_tmp_path(n1, s->out, sizeof s->out);
    tu_tmp_path(n2, s->err, sizeof s->err);
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)tu_bin();
    argv[n++] = (char *)command;
    for (int i = 0; args[i] && n < 62; i++) argv[n++] = args[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, s->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, s->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, tu_bin(), &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) return -1;
    s->pid = (int)pid;
    for (int i = 0; i < 3000; i++) {   /* up to 30 s to load and listen */
        FILE *f = fopen(s->out, "r");
        char line[256] = "";
        if (f) {
            if (!fgets(line, sizeof line, f)) line[0] = '\0';
            fclose(f);
        }
        if (!strncmp(line, "listening on ", 13)) {
            snprintf(s->url, sizeof s->url, "%.*s", (int)strcspn(line + 13, "\n"), line + 13);
            return 0;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) return -1;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

int tu_server_stop(tu_server *s)
{
    int st;
    kill((pid_t)s->pid, SIGTERM);
    if (waitpid((pid_t)s->pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int tu_same_file(const char *a, const char *b)
{
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    int same = x && y;
    while (same) {
        int p = fgetc(x), q = fgetc(y);
        if (p != q) same = 0;
        if (p == EOF || q == EOF) break;
    }
    if (x) fclose(x);
    if (y) fclose(y);
    return same;
}

int tu_close_rel(double got, double want, double rel, const char *what, int line)
{
    int ok = fabs(got - want) <= rel * fmax(fabs(got), fabs(want)) + 1e-300;
    if (!ok) printf("\n  line %d: %s = %.17g, want %.17g\n", line, what, got, want);
    CU_ASSERT(ok);
    return ok;
}
