/* fs.h — small file-system helpers. */
#ifndef RH_FS_H
#define RH_FS_H

#include <stddef.h>
#include <stdio.h>

#include "util/err.h"

/* Creates `path` and any missing parents (mkdir -p). 0, or -1 with errno. */
int rh_mkdir_p(const char *path);

/* The running binary's directory (from /proc/self/exe), so data beside a
 * checkout's or an installed binary is found wherever the current
 * directory is. 0, or -1 when unreadable or longer than n. */
int rh_exe_dir(char *buf, size_t n);

/* A file or folder of the project's scripts/ (plot templates, the sample
 * prices), wherever the binary runs from: $REHEARSE_SCRIPTS/rel, else
 * beside the binary (a checkout), one folder up (build-san/), or
 * ../share/rehearse/scripts (installed). 0 with the first that exists in
 * buf, -1 when none does. */
int rh_scripts_path(const char *rel, char *buf, size_t n);

/* Opens an input file (a cost model, a script, a CLUSTER.json) for
 * reading, refusing at once what is not a regular file: a FIFO or a
 * device would block the open or the read for ever, a directory reads as
 * nothing. Opened without blocking, checked on the open descriptor (no
 * race with a rename), then read as usual. NULL with "PATH: cannot open
 * WHAT: why" or "PATH: WHAT is a FIFO, not a regular file". */
FILE *rh_fopen_regular(const char *path, const char *what, rh_err *e);

/* The whole of such a file, NUL-terminated, at most max bytes: malloc'd,
 * *n its length; NULL with a message as rh_fopen_regular's, or "is larger
 * than MAX bytes". */
char *rh_read_regular(const char *path, const char *what, size_t max, size_t *n, rh_err *e);

#endif
