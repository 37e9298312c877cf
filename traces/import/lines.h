/* lines.h — reads a text file (or memory) line by line, fast.
 *
 * Internal to traces/import. Lines come back as spans into an internal buffer
 * (valid until the next call), without the "\n" or "\r\n"; the last line
 * needs no newline. Line numbers start at 1. A line longer than 256 MiB is
 * refused (a binary file fed to a text importer). */
#ifndef RH_TRACES_LINES_H
#define RH_TRACES_LINES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"
#include "util/progress.h"

typedef struct tr_lines {
    FILE *f;                    /* owned when opened by path */
    const char *mem;            /* or a memory source */
    size_t mem_n;
    const char *name;
    char *buf;
    size_t pos, len, cap;
    int eof;
    uint64_t line_no;           /* of the line last returned */
    uint64_t bytes;             /* consumed so far */
    rh_progress *progress;      /* optional: updated with bytes read */
} tr_lines;

int tr_lines_open(tr_lines *l, const char *path, rh_err *e);
/* On a stream it then owns (closes), read from where it stands. */
void tr_lines_open_stream(tr_lines *l, FILE *f, const char *name);
void tr_lines_open_mem(tr_lines *l, const void *data, size_t n, const char *name);
/* 1 and a line, 0 at the end, -1 on a read error. */
int tr_lines_next(tr_lines *l, const char **line, size_t *n, rh_err *e);
void tr_lines_close(tr_lines *l);

#endif
