/* importers.h — one reader per text format (internal to traces/import).
 *
 * Each takes a line source. Our JSONL goes straight to the sink; the public
 * formats fill a spool that import.c sorts and emits. Messages name the
 * file (l->name), the line and the field. */
#ifndef RH_TRACES_IMPORTERS_H
#define RH_TRACES_IMPORTERS_H

#include "traces/import/import.h"
#include "traces/import/lines.h"
#include "traces/import/spool.h"
#include "util/csv.h"

int tr_import_jsonl(tr_lines *l, const tr_import_opts *o, const tr_sink *s, rh_err *e);
int tr_import_mooncake(tr_lines *l, const tr_import_opts *o, tr_spool *sp, rh_err *e);
int tr_import_azure(tr_lines *l, const tr_import_opts *o, tr_spool *sp, rh_err *e);
int tr_import_burstgpt(tr_lines *l, const tr_import_opts *o, tr_spool *sp, rh_err *e);
int tr_import_vidur(tr_lines *l, const tr_import_opts *o, tr_spool *sp, rh_err *e);
int tr_import_sglang_log(tr_lines *l, const tr_import_opts *o, tr_trace *t, rh_err *e);
int tr_import_sglang_fpm(tr_lines *l, const tr_import_opts *o, tr_trace *t, rh_err *e);

/* ---- shared CSV helpers (records split by util/csv.h) ---- */
/* Finds the named columns in a header line (case-insensitive, spaces and a
 * UTF-8 byte-order mark ignored). idx[i] = -1 when names[i] is absent;
 * -1 with "line 1: missing column 'X'" when a required one (the first
 * `n_required`) is absent. */
int tr_csv_columns(tr_lines *l, const char *line, size_t n, const char *const *names, int n_names,
                   int n_required, int *idx, rh_err *e);
/* The same for the file's first line: "empty file: no header line" when
 * there is none. */
int tr_csv_header(tr_lines *l, const char *const *names, int n_names, int n_required, int *idx, rh_err *e);
/* A token count from a CSV/JSON field, with the file/line/field message. */
int tr_field_count(tr_lines *l, const char *field, const char *s, size_t n, uint32_t *out, rh_err *e);
/* Seconds (decimal text) to ns, within +-126 years. */
int tr_field_seconds(tr_lines *l, const char *field, const char *s, size_t n, int pow10, int64_t *ns, rh_err *e);
/* "YYYY-MM-DD[ T]HH:MM:SS[.f][Z|+HH:MM]" (the whole span) -> ns since 1970,
 * UTC after the offset; -1 if it is not one (azure.c). */
int tr_parse_datetime(const char *s, size_t n, int64_t *ns);
/* Header keys every importer sets: source (format name) and source_file. */
int tr_spool_source(tr_spool *sp, tr_format f, const char *path, rh_err *e);

#endif
