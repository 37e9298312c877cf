/* atomic_file.h — a file written whole or not at all.
 *
 * What is written goes to PATH.PID.tmp beside PATH (the same file system)
 * and is renamed over PATH on commit, so a reader finds the old file or the
 * new one, never half of one, and a failure anywhere (a full disk, a killed
 * process, a caller that gives up) leaves PATH as it was and nothing at the
 * temporary path. A PATH that exists and is not a regular file (/dev/stdout,
 * /dev/null, a FIFO) is written in place and never renamed over or removed:
 * as root, a temporary file renamed onto /dev/null would replace the device. */
#ifndef RH_UTIL_ATOMIC_FILE_H
#define RH_UTIL_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "util/err.h"

typedef struct rh_atomic_file {
    FILE *f;            /* write here */
    char *path;         /* the destination */
    char *tmp;          /* renamed onto path by commit; NULL: path is written in place */
} rh_atomic_file;

/* Opens PATH for writing ("wb"). 0, or -1 with "PATH: cannot create: why". */
int rh_atomic_open(rh_atomic_file *a, const char *path, rh_err *e);
/* Checks every write, closes and renames into place. 0, or -1 with
 * "PATH: write failed: why" (the temporary file removed). Either way the
 * file is finished: no other call on it may follow. */
int rh_atomic_commit(rh_atomic_file *a, rh_err *e);
/* Closes and removes the temporary file; PATH keeps what it held. */
void rh_atomic_abort(rh_atomic_file *a);
/* The n bytes of data as the whole of PATH. */
int rh_write_file_atomic(const char *path, const void *data, size_t n, rh_err *e);

#endif
