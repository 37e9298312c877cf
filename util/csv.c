/* csv.c — see csv.h. */
#include "util/csv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rh_csv_split(const char *rec, size_t n, rh_csv_field *f, int max)
{
    int k = 0;
    size_t i = 0;
    for (;;) {
        if (k == max) return -1;
        if (i < n && rec[i] == '"') {
            size_t start = ++i;
            while (i < n && !(rec[i] == '"' && (i + 1 >= n || rec[i + 1] != '"'))) i += (rec[i] == '"') ? 2 : 1;
            f[k++] = (rh_csv_field){rec + start, (i < n ? i : n) - start, true};
            if (i < n) i++;   /* closing quote */
            while (i < n && rec[i] != ',') i++;
        } else {
            const char *c = i < n ? memchr(rec + i, ',', n - i) : NULL;
            size_t end = c ? (size_t)(c - rec) : n;
            f[k++] = (rh_csv_field){rec + i, end - i, false};
            i = end;
        }
        if (i >= n) return k;
        i++;   /* the comma */
    }
}

/* The whole file, NUL-terminated. */
static char *slurp(const char *path, size_t *len, rh_err *e)
{
    FILE *in = fopen(path, "rb");
    if (!in) {
        rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        n += fread(buf + n, 1, cap - n - 1, in);
        if (n < cap - 1) break;
        char *b = realloc(buf, cap * 2);
        if (!b) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = b;
        cap *= 2;
    }
    int bad = ferror(in);
    fclose(in);
    if (!buf || bad) {
        free(buf);
        rh_fail(e, bad ? "%s: read failed" : "%s: out of memory", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* The end of the record starting at p (a newline outside quotes, or the
 * end); -1 in *open when a quoted field never closes. */
static size_t record_end(const char *s, size_t p, size_t n, size_t *newlines, int *open)
{
    int quoted = 0;
    for (; p < n; p++) {
        if (s[p] == '"') quoted = !quoted;
        else if (s[p] == '\n') {
            if (!quoted) break;
            (*newlines)++;
        }
    }
    *open = quoted;
    return p;
}

/* A field as its own string: "" inside a quoted field reads as one quote. */
static char *field_copy(const rh_csv_field *f)
{
    char *c = malloc(f->n + 1);
    if (!c) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < f->n; i++) {
        c[k++] = f->s[i];
        if (f->quoted && f->s[i] == '"' && i + 1 < f->n && f->s[i + 1] == '"') i++;
    }
    c[k] = '\0';
    return c;
}

int rh_csv_read(const char *path, rh_csv_table *t, rh_err *e)
{
    memset(t, 0, sizeof *t);
    size_t n;
    char *s = slurp(path, &n, e);
    if (!s) return -1;
    rh_csv_field *f = NULL;
    size_t fcap = 0, cap = 0, line = 1, p = 0;
    int rc = 0;
    while (p < n && rc == 0) {
        size_t start = p, first_line = line;
        int open;
        size_t end = record_end(s, p, n, &line, &open);
        if (open) {
            rc = rh_fail(e, "%s:%zu: unterminated quoted field", path, first_line);
            break;
        }
        p = end + 1;
        line++;
        size_t len = end - start;
        if (len && s[start + len - 1] == '\r') len--;
        if (len == 0) continue;                       /* a blank line */
        size_t fields = 1;
        for (size_t i = start; i < start + len; i++) fields += s[i] == ',';
        if (fields > fcap) {
            rh_csv_field *g = realloc(f, fields * sizeof *g);
            if (!g) {
                rc = rh_fail(e, "out of memory");
                break;
            }
            f = g;
            fcap = fields;
        }
        int k = rh_csv_split(s + start, len, f, (int)fields);
        if (!t->names) {
            if (!(t->names = calloc((size_t)k, sizeof *t->names))) {
                rc = rh_fail(e, "out of memory");
                break;
            }
            t->ncol = k;
            for (int i = 0; i < k && rc == 0; i++)
                if (!(t->names[i] = field_copy(&f[i]))) rc = rh_fail(e, "out of memory");
            continue;
        }
        if (t->nrow == cap) {
            cap = cap ? cap * 2 : 64;
            char **cells = realloc(t->cells, cap * (size_t)t->ncol * sizeof *cells);
            if (!cells) {
                rc = rh_fail(e, "out of memory");
                break;
            }
            t->cells = cells;
        }
        char **row = t->cells + t->nrow * (size_t)t->ncol;
        for (int i = 0; i < t->ncol; i++) row[i] = NULL;
        t->nrow++;
        for (int i = 0; i < t->ncol && rc == 0; i++)
            if (!(row[i] = i < k ? field_copy(&f[i]) : strdup(""))) rc = rh_fail(e, "out of memory");
    }
    if (rc == 0 && !t->names) rc = rh_fail(e, "%s: empty file (a header row is needed)", path);
    free(f);
    free(s);
    if (rc < 0) rh_csv_free(t);
    return rc;
}

int rh_csv_col(const rh_csv_table *t, const char *name)
{
    for (int i = 0; i < t->ncol; i++)
        if (!strcmp(t->names[i], name)) return i;
    return -1;
}

const char *rh_csv_cell(const rh_csv_table *t, size_t row, int col)
{
    return t->cells[row * (size_t)t->ncol + (size_t)col];
}

double rh_csv_num(const rh_csv_table *t, size_t row, int col, int *ok)
{
    const char *s = rh_csv_cell(t, row, col);
    char *end;
    double v = strtod(s, &end);
    *ok = end != s && *end == '\0';
    return *ok ? v : 0;
}

void rh_csv_free(rh_csv_table *t)
{
    for (int i = 0; i < t->ncol; i++) free(t->names ? t->names[i] : NULL);
    free(t->names);
    if (t->cells)
        for (size_t i = 0; i < t->nrow * (size_t)t->ncol; i++) free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof *t);
}
