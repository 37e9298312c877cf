/* csv.c — see csv.h. */
#include "util/csv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *s;
    size_t n, cap;
} sbuf;

static int sb_put(sbuf *b, char c)
{
    if (b->n + 1 >= b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        char *s = realloc(b->s, cap);
        if (!s) return -1;
        b->s = s;
        b->cap = cap;
    }
    b->s[b->n++] = c;
    b->s[b->n] = '\0';
    return 0;
}

typedef struct fields {
    char **v;
    int n, cap;
} fields;

static int fields_push(fields *f, const char *s, size_t n)
{
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 16;
        char **v = realloc(f->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        f->v = v;
        f->cap = cap;
    }
    char *c = malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s ? s : "", n);
    c[n] = '\0';
    f->v[f->n++] = c;
    return 0;
}

/* Reads one record into f; returns 1, 0 at EOF, -1 on error. */
static int read_record(FILE *in, fields *f, sbuf *b, size_t *line, const char *path, rh_err *e)
{
    f->n = 0;
    b->n = 0;
    if (b->s) b->s[0] = '\0';
    int c = fgetc(in), quoted = 0, any = 0;
    if (c == EOF) return 0;
    for (;; c = fgetc(in)) {
        if (quoted) {
            if (c == EOF) return rh_fail(e, "%s:%zu: unterminated quoted field", path, *line);
            if (c == '"') {
                int d = fgetc(in);
                if (d == '"') {
                    if (sb_put(b, '"') < 0) return rh_fail(e, "out of memory");
                    continue;
                }
                quoted = 0;
                c = d;
            } else {
                if (c == '\n') (*line)++;
                if (sb_put(b, (char)c) < 0) return rh_fail(e, "out of memory");
                continue;
            }
        }
        if (c == '"' && b->n == 0) {
            quoted = 1;
            any = 1;
            continue;
        }
        if (c == ',' || c == '\n' || c == EOF) {
            if (fields_push(f, b->s, b->n) < 0) return rh_fail(e, "out of memory");
            b->n = 0;
            if (c != ',') {
                (*line)++;
                return 1;
            }
            continue;
        }
        if (c == '\r') continue;
        any = 1;
        if (sb_put(b, (char)c) < 0) return rh_fail(e, "out of memory");
    }
    (void)any;
}

int csv_read(const char *path, csv_table *t, rh_err *e)
{
    memset(t, 0, sizeof *t);
    FILE *in = fopen(path, "rb");
    if (!in) return rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
    fields f = {0};
    sbuf b = {0};
    size_t line = 1, cap = 0;
    int rc = read_record(in, &f, &b, &line, path, e);
    if (rc <= 0) {
        if (rc == 0) rh_fail(e, "%s: empty file (a header row is needed)", path);
        goto fail;
    }
    t->ncol = f.n;
    t->names = f.v;
    f = (fields){0};
    while ((rc = read_record(in, &f, &b, &line, path, e)) == 1) {
        if (f.n == 1 && f.v[0][0] == '\0') {       /* blank line */
            free(f.v[0]);
            continue;
        }
        if (t->nrow == cap) {
            cap = cap ? cap * 2 : 64;
            char **cells = realloc(t->cells, cap * (size_t)t->ncol * sizeof *cells);
            if (!cells) {
                rh_fail(e, "out of memory");
                goto fail;
            }
            t->cells = cells;
        }
        for (int i = 0; i < t->ncol; i++) t->cells[t->nrow * (size_t)t->ncol + (size_t)i] = i < f.n ? f.v[i] : strdup("");
        for (int i = t->ncol; i < f.n; i++) free(f.v[i]);
        t->nrow++;
        f.n = 0;
    }
    if (rc < 0) goto fail;
    free(f.v);
    free(b.s);
    fclose(in);
    return 0;
fail:
    for (int i = 0; i < f.n; i++) free(f.v[i]);
    free(f.v);
    free(b.s);
    fclose(in);
    csv_free(t);
    return -1;
}

int csv_col(const csv_table *t, const char *name)
{
    for (int i = 0; i < t->ncol; i++)
        if (!strcmp(t->names[i], name)) return i;
    return -1;
}

const char *csv_cell(const csv_table *t, size_t row, int col)
{
    return t->cells[row * (size_t)t->ncol + (size_t)col];
}

double csv_num(const csv_table *t, size_t row, int col, int *ok)
{
    const char *s = csv_cell(t, row, col);
    char *end;
    double v = strtod(s, &end);
    *ok = end != s && *end == '\0';
    return *ok ? v : 0;
}

void csv_free(csv_table *t)
{
    for (int i = 0; i < t->ncol; i++) free(t->names ? t->names[i] : NULL);
    free(t->names);
    if (t->cells)
        for (size_t i = 0; i < t->nrow * (size_t)t->ncol; i++) free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof *t);
}
