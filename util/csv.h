/* csv.h — the CSV reader: one splitter for a record, and a whole-table
 * reader built on it.
 *
 * rh_csv_split cuts one record (a line, or a span whose quoted fields may
 * hold newlines) on commas. A field that starts with '"' runs to its closing
 * quote and may hold commas and doubled quotes (""); what follows the closing
 * quote up to the next comma is dropped. Fields come back as spans into the
 * record, quotes removed, "" still doubled (a field's `quoted` says so), so
 * an importer streaming millions of rows copies nothing.
 *
 * rh_csv_read reads a whole file of results (plots, experiment tables): a
 * header row, then rows; LF or CRLF; quoted fields may hold newlines; ""
 * inside them reads as one quote; blank lines are skipped; a row shorter
 * than the header gets "" for the rest, a longer one loses the extra. */
#ifndef RH_UTIL_CSV_H
#define RH_UTIL_CSV_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

typedef struct rh_csv_field {
    const char *s;
    size_t n;
    bool quoted;
} rh_csv_field;

/* The field count, or -1 when the record has more than max fields. */
int rh_csv_split(const char *rec, size_t n, rh_csv_field *f, int max);

typedef struct rh_csv_table {
    int ncol;
    char **names;
    size_t nrow;
    char **cells;      /* nrow * ncol, row-major; missing fields are "" */
} rh_csv_table;

/* -1 with "PATH: ..." (or "PATH:LINE: ..." for a bad record) on failure. */
int rh_csv_read(const char *path, rh_csv_table *t, rh_err *e);
int rh_csv_col(const rh_csv_table *t, const char *name);             /* index, or -1 */
const char *rh_csv_cell(const rh_csv_table *t, size_t row, int col);
/* The cell as a number; 0 and *ok = 0 when it is not one. */
double rh_csv_num(const rh_csv_table *t, size_t row, int col, int *ok);
void rh_csv_free(rh_csv_table *t);

#endif
