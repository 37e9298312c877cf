/* json_file.c — see json_file.h. */
#include "util/json_file.h"

#include <stdio.h>

int rh_json_save(const json_t *o, const char *path, size_t flags, const char *what, rh_err *e)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return rh_fail(e, "%s: path too long", path);
    if (json_dump_file(o, tmp, flags) != 0) {
        remove(tmp);
        return rh_fail(e, "%s: cannot write %s (does its directory exist? is the disk full?)", path, what);
    }
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return rh_fail(e, "%s: cannot write %s (rename into place failed)", path, what);
    }
    return 0;
}
