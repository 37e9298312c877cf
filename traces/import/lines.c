/* lines.c — see lines.h. */
#include "traces/import/lines.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define LINES_CHUNK (1u << 20)
#define LINES_MAX ((size_t)256 << 20)

int tr_lines_open(tr_lines *l, const char *path, rh_err *e)
{
    memset(l, 0, sizeof *l);
    l->name = path;
    errno = 0;
    l->f = fopen(path, "rb");
    if (!l->f) return rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
    return 0;
}

void tr_lines_open_stream(tr_lines *l, FILE *f, const char *name)
{
    memset(l, 0, sizeof *l);
    l->name = name;
    l->f = f;
}

void tr_lines_open_mem(tr_lines *l, const void *data, size_t n, const char *name)
{
    memset(l, 0, sizeof *l);
    l->mem = data;
    l->mem_n = n;
    l->name = name;
}

/* Appends more input after compacting; sets eof when there is no more. */
static int refill(tr_lines *l, rh_err *e)
{
    if (!l->f) {
        /* Memory: one copy of it all (small inputs: tests, fuzzing). */
        if (l->buf || l->mem_n == 0) {
            l->eof = 1;
            return 0;
        }
        if (!(l->buf = malloc(l->mem_n))) return rh_fail(e, "%s: out of memory", l->name);
        memcpy(l->buf, l->mem, l->mem_n);
        l->len = l->cap = l->mem_n;
        return 0;
    }
    if (l->pos) {
        memmove(l->buf, l->buf + l->pos, l->len - l->pos);
        l->len -= l->pos;
        l->pos = 0;
    }
    if (l->cap - l->len < LINES_CHUNK / 2) {
        size_t c = l->cap ? l->cap * 2 : LINES_CHUNK;
        if (c > LINES_MAX + LINES_CHUNK)
            return rh_fail(e, "%s: line %llu: longer than 256 MiB (not a text trace?)", l->name,
                           (unsigned long long)l->line_no + 1);
        char *b = realloc(l->buf, c);
        if (!b) return rh_fail(e, "%s: out of memory", l->name);
        l->buf = b;
        l->cap = c;
    }
    size_t got = fread(l->buf + l->len, 1, l->cap - l->len, l->f);
    if (got == 0 && ferror(l->f)) return rh_fail(e, "%s: read error: %s", l->name, strerror(errno));
    if (got == 0) l->eof = 1;
    l->len += got;
    if (l->progress) rh_progress_update(l->progress, l->bytes);
    return 0;
}

int tr_lines_next(tr_lines *l, const char **line, size_t *n, rh_err *e)
{
    for (;;) {
        char *start = l->buf ? l->buf + l->pos : NULL;
        char *nl = l->len > l->pos ? memchr(start, '\n', l->len - l->pos) : NULL;
        if (nl || (l->eof && l->pos < l->len)) {
            size_t len = nl ? (size_t)(nl - start) : l->len - l->pos;
            l->pos += len + (nl != NULL);
            l->bytes += len + (nl != NULL);
            if (len && start[len - 1] == '\r') len--;
            l->line_no++;
            *line = start;
            *n = len;
            return 1;
        }
        if (l->eof) return 0;
        if (refill(l, e) < 0) return -1;
    }
}

void tr_lines_close(tr_lines *l)
{
    if (l->f) fclose(l->f);
    free(l->buf);
    memset(l, 0, sizeof *l);
}
