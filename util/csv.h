/* csv.h — a small CSV table reader for plots and result files: a header row,
 * then rows of fields; quoted fields with "" escapes; CRLF or LF. Whole file
 * in memory: meant for results, not traces. */
#ifndef RH_CSV_H
#define RH_CSV_H

#include <stddef.h>

#include "util/err.h"

typedef struct csv_table {
    int ncol;
    char **names;
    size_t nrow;
    char **cells;      /* nrow * ncol, row-major; missing fields are "" */
} csv_table;

int csv_read(const char *path, csv_table *t, rh_err *e);
int csv_col(const csv_table *t, const char *name);             /* index, or -1 */
const char *csv_cell(const csv_table *t, size_t row, int col);
/* The cell as a number; 0 and *ok = 0 when it is not one. */
double csv_num(const csv_table *t, size_t row, int col, int *ok);
void csv_free(csv_table *t);

#endif
