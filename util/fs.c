/* fs.c — see fs.h. */
#include "util/fs.h"

#include <errno.h>
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
