/* fs.c — see fs.h. */
#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rh_mkdir_p(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        buf[i] = c;
    }
    return 0;
}

int rh_exe_dir(char *buf, size_t n)
{
    if (n < 2) return -1;
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    if (len <= 0 || (size_t)len >= n - 1) return -1;
    buf[len] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash) *slash = '\0';   /* "/rehearse" gives "": paths built as DIR/x stay right */
    return 0;
}

int rh_scripts_path(const char *rel, char *buf, size_t n)
{
    const char *env = getenv("REHEARSE_SCRIPTS");
    if (env && *env) {
        snprintf(buf, n, "%s/%s", env, rel);
        if (access(buf, R_OK) == 0) return 0;
    }
    char exe[PATH_MAX];
    if (rh_exe_dir(exe, sizeof exe) == 0) {
        const char *tries[] = {"%s/scripts/%s", "%s/../scripts/%s", "%s/../share/rehearse/scripts/%s"};
        for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
            snprintf(buf, n, tries[i], exe, rel);
            if (access(buf, R_OK) == 0) return 0;
        }
    }
    return -1;
}

static const char *kind_of(mode_t m)
{
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a plain file";
}

FILE *rh_fopen_regular(const char *path, const char *what, rh_err *e)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return rh_fail(e, "%s: cannot open %s: %s", path, what, strerror(errno)), NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rh_fail(e, "%s: cannot open %s: %s", path, what, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        rh_fail(e, "%s: %s is %s, not a regular file", path, what, kind_of(st.st_mode));
        close(fd);
        return NULL;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        rh_fail(e, "%s: cannot open %s: %s", path, what, strerror(errno));
        close(fd);
    }
    return f;
}

char *rh_read_regular(const char *path, const char *what, size_t max, size_t *n, rh_err *e)
{
    FILE *f = rh_fopen_regular(path, what, e);
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *b = malloc(cap);
    while (b) {
        if (len + 1 == cap) {
            if (len > max) break;
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
        size_t got = fread(b + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0) break;
    }
    int failed = ferror(f);
    fclose(f);
    if (!b) return rh_fail(e, "%s: out of memory reading %s", path, what), NULL;
    if (len > max) {
        free(b);
        return rh_fail(e, "%s: %s is larger than %zu bytes", path, what, max), NULL;
    }
    if (failed) {
        free(b);
        return rh_fail(e, "%s: cannot read %s", path, what), NULL;
    }
    b[len] = '\0';
    *n = len;
    return b;
}
