/* vidur.c — vidur / splitwise request traces:
 * arrived_at (seconds), num_prefill_tokens, num_decode_tokens; other columns
 * are ignored. Vidur's processed length-only traces (arxiv-summarization,
 * LMSYS-Chat: num_prefill_tokens and num_decode_tokens, no arrived_at) read
 * as an offline batch: every request at 0, header "arrivals" = "none", for
 * `trace synth --lengths-from` to give them arrivals. */
#include "traces/import/importers.h"

int tr_import_vidur(tr_lines *l, const tr_import_opts *o, tr_spool *sp, rh_err *e)
{
    (void)o;
    static const char *const names[] = {"num_prefill_tokens", "num_decode_tokens", "arrived_at"};
    int col[3];
    const char *line;
    size_t n;
    if (tr_csv_header(l, names, 3, 2, col, e) < 0) return -1;
    int timed = col[2] >= 0;
    if (!timed && tr_header_set(&sp->header, "arrivals", "none: a length-only trace, every request at 0") < 0)
        return rh_fail(e, "out of memory");
    int rc;
    rh_csv_field f[64];
    while ((rc = tr_lines_next(l, &line, &n, e)) > 0) {
        if (n == 0) continue;
        int k = rh_csv_split(line, n, f, 64);
        if (k < 0) return rh_fail(e, "%s: line %llu: too many columns", l->name, (unsigned long long)l->line_no);
        for (int i = 0; i < 2 + timed; i++)
            if (col[i] >= k)
                return rh_fail(e, "%s: line %llu: missing field '%s'", l->name, (unsigned long long)l->line_no, names[i]);
        tr_spool_row row = {0};
        if ((timed && tr_field_seconds(l, names[2], f[col[2]].s, f[col[2]].n, 9, &row.ns, e) < 0) ||
            tr_field_count(l, names[0], f[col[0]].s, f[col[0]].n, &row.input_len, e) < 0 ||
            tr_field_count(l, names[1], f[col[1]].s, f[col[1]].n, &row.output_len, e) < 0 ||
            tr_spool_add(sp, l, &row, NULL, e) < 0)
            return -1;
    }
    return rc;
}
