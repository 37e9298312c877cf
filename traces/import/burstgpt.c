/* burstgpt.c — BurstGPT traces.
 *
 * Two layouts, told apart by their header: "Timestamp,Model,Request tokens,
 * Response tokens,Total tokens,Log Type" and the release that adds
 * "Session ID" and "Elapsed time". Timestamps are seconds on the service's
 * clock. A row with 0 response tokens is a failed request: kept, flagged
 * TR_REQ_FAILED. Session IDs (UUIDs) become session numbers 1, 2, ... in
 * order of first appearance and turns are numbered in arrival order.
 * "Elapsed time" and "Log Type" are not kept. */
#include "util/hashmap.h"
#include "traces/import/importers.h"

#include <string.h>
#include <strings.h>

enum { C_TS, C_MODEL, C_REQ, C_RESP, C_SESSION };

int tr_import_burstgpt(tr_lines *l, const tr_import_opts *o, tr_spool *sp, rh_err *e)
{
    static const char *const names[] = {"Timestamp", "Model", "Request tokens", "Response tokens", "Session ID"};
    int col[5];
    const char *line;
    size_t n;
    if (tr_csv_header(l, names, 5, 4, col, e) < 0) return -1;
    int rc;
    if (o->model && (tr_header_set_model(&sp->header, o->model) < 0 ||
                     tr_header_set(&sp->header, "model_filter", o->model) < 0))
        return rh_fail(e, "out of memory");
    rh_strmap sessions = {0};
    rh_csv_field f[64];
    size_t model_len = o->model ? strlen(o->model) : 0;
    while ((rc = tr_lines_next(l, &line, &n, e)) > 0) {
        if (n == 0) continue;
        int k = rh_csv_split(line, n, f, 64);
        if (k < 0) {
            rc = rh_fail(e, "%s: line %llu: too many columns", l->name, (unsigned long long)l->line_no);
            break;
        }
        int missing = -1;
        for (int i = 0; i < 5 && missing < 0; i++)
            if (col[i] >= k) missing = i;
        if (missing >= 0) {
            rc = rh_fail(e, "%s: line %llu: missing field '%s'", l->name, (unsigned long long)l->line_no,
                         names[missing]);
            break;
        }
        const rh_csv_field *model = &f[col[C_MODEL]];
        if (o->model && (model->n != model_len || strncasecmp(model->s, o->model, model_len))) continue;
        tr_spool_row row = {0};
        if (tr_field_seconds(l, names[C_TS], f[col[C_TS]].s, f[col[C_TS]].n, 9, &row.ns, e) < 0 ||
            tr_field_count(l, names[C_REQ], f[col[C_REQ]].s, f[col[C_REQ]].n, &row.input_len, e) < 0 ||
            tr_field_count(l, names[C_RESP], f[col[C_RESP]].s, f[col[C_RESP]].n, &row.output_len, e) < 0) {
            rc = -1;
            break;
        }
        if (row.output_len == 0) row.flags |= TR_REQ_FAILED;
        if (col[C_SESSION] >= 0 && f[col[C_SESSION]].n) {
            int fresh;
            int64_t *id = rh_strmap_slot(&sessions, f[col[C_SESSION]].s, f[col[C_SESSION]].n, (int64_t)sessions.n + 1, &fresh);
            if (!id) {
                rc = rh_fail(e, "out of memory");
                break;
            }
            row.session = (uint64_t)*id;
        }
        if (tr_spool_add(sp, l, &row, NULL, e) < 0) {
            rc = -1;
            break;
        }
    }
    sp->n_sessions = sessions.n;
    rh_strmap_free(&sessions);
    return rc < 0 ? -1 : 0;
}
