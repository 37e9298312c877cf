/* json_file.c — see json_file.h. */
#include "util/json_file.h"

#include "util/atomic_file.h"

int rh_json_save(const json_t *o, const char *path, size_t flags, const char *what, rh_err *e)
{
    rh_atomic_file a;
    rh_err why;
    if (rh_atomic_open(&a, path, &why) < 0)
        return rh_fail(e, "%s: cannot write %s (does its directory exist? is the disk full?)", path, what);
    if (json_dumpf(o, a.f, flags) != 0) {
        rh_atomic_abort(&a);
        return rh_fail(e, "%s: cannot write %s (is the disk full?)", path, what);
    }
    if (rh_atomic_commit(&a, &why) < 0) return rh_fail(e, "%s: cannot write %s (%s)", path, what, why.msg);
    return 0;
}
