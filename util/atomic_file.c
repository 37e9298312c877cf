/* atomic_file.c — see atomic_file.h. */
#include "util/atomic_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void release(rh_atomic_file *a)
{
    free(a->path);
    free(a->tmp);
    a->path = a->tmp = NULL;
    a->f = NULL;
}

int rh_atomic_open(rh_atomic_file *a, const char *path, rh_err *e)
{
    memset(a, 0, sizeof *a);
    struct stat st;
    int special = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
    size_t n = strlen(path) + 32;
    if (!(a->path = strdup(path)) || (!special && !(a->tmp = malloc(n)))) {
        release(a);
        return rh_fail(e, "%s: out of memory", path);
    }
    if (a->tmp) snprintf(a->tmp, n, "%s.%d.tmp", path, (int)getpid());
    errno = 0;
    if (!(a->f = fopen(a->tmp ? a->tmp : path, "wb"))) {
        int err = errno;
        release(a);
        return rh_fail(e, "%s: cannot create: %s", path, strerror(err ? err : EIO));
    }
    return 0;
}

int rh_atomic_commit(rh_atomic_file *a, rh_err *e)
{
    errno = 0;
    int bad = ferror(a->f);
    int err = errno;
    if (fclose(a->f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    a->f = NULL;
    if (!bad && a->tmp && rename(a->tmp, a->path) != 0) {
        bad = 1;
        err = errno;
    }
    if (bad) {
        if (a->tmp) unlink(a->tmp);
        rh_fail(e, "%s: write failed: %s", a->path, strerror(err ? err : EIO));
    }
    release(a);
    return bad ? -1 : 0;
}

void rh_atomic_abort(rh_atomic_file *a)
{
    if (a->f) fclose(a->f);
    if (a->tmp) unlink(a->tmp);
    release(a);
}

int rh_write_file_atomic(const char *path, const void *data, size_t n, rh_err *e)
{
    rh_atomic_file a;
    if (rh_atomic_open(&a, path, e) < 0) return -1;
    if (n && fwrite(data, 1, n, a.f) != n) {
        int err = errno;
        rh_atomic_abort(&a);
        return rh_fail(e, "%s: write failed: %s", path, strerror(err ? err : EIO));
    }
    return rh_atomic_commit(&a, e);
}
