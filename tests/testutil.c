/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

int tu_run(const char *cmd, char *out, size_t n)
{
    char full[8192];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
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
