/* vidur.c — vidur / splitwise request traces:
 * arrived_at (seconds), num_prefill_tokens, num_decode_tokens; other columns
 * are ignored. */
#include "traces/import/importers.h"

int tr_import_vidur(tr_lines *l, const tr_import_opts *o, tr_spool *sp, rh_err *e)
{
    (void)o;
    static const char *const names[] = {"arrived_at", "num_prefill_tokens", "num_decode_tokens"};
    int col[3];
    const char *line;
    size_t n;
    if (tr_csv_header(l, names, 3, 3, col, e) < 0) return -1;
    int rc;
    rh_csv_field f[64];
    while ((rc = tr_lines_next(l, &line, &n, e)) > 0) {
        if (n == 0) continue;
        int k = rh_csv_split(line, n, f, 64);
        if (k < 0) return rh_fail(e, "%s: line %llu: too many columns", l->name, (unsigned long long)l->line_no);
        for (int i = 0; i < 3; i++)
            if (col[i] >= k)
                return rh_fail(e, "%s: line %llu: missing field '%s'", l->name, (unsigned long long)l->line_no, names[i]);
        tr_spool_row row = {0};
        if (tr_field_seconds(l, names[0], f[col[0]].s, f[col[0]].n, 9, &row.ns, e) < 0 ||
            tr_field_count(l, names[1], f[col[1]].s, f[col[1]].n, &row.input_len, e) < 0 ||
            tr_field_count(l, names[2], f[col[2]].s, f[col[2]].n, &row.output_len, e) < 0 ||
            tr_spool_add(sp, l, &row, NULL, e) < 0)
            return -1;
    }
    return rc;
}
