/* fields.c — the field parsers the importers share (CSV columns, counts,
 * times), each failure naming the file, the line and the field. */
#include "traces/import/importers.h"
#include "traces/num.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

static void trim(const char **s, size_t *n)
{
    if (*n >= 3 && !memcmp(*s, "\xEF\xBB\xBF", 3)) *s += 3, *n -= 3;
    while (*n && isspace((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

int tr_csv_columns(tr_lines *l, const char *line, size_t n, const char *const *names, int n_names,
                   int n_required, int *idx, rh_err *e)
{
    rh_csv_field f[64];
    int k = rh_csv_split(line, n, f, 64);
    if (k < 0) return rh_fail(e, "%s: line %llu: more than 64 columns", l->name, (unsigned long long)l->line_no);
    for (int i = 0; i < n_names; i++) {
        idx[i] = -1;
        for (int j = 0; j < k; j++) {
            const char *s = f[j].s;
            size_t len = f[j].n;
            trim(&s, &len);
            if (len == strlen(names[i]) && !strncasecmp(s, names[i], len)) {
                idx[i] = j;
                break;
            }
        }
        if (idx[i] < 0 && i < n_required)
            return rh_fail(e, "%s: line %llu: missing column '%s' in the header", l->name,
                           (unsigned long long)l->line_no, names[i]);
    }
    return 0;
}

int tr_csv_header(tr_lines *l, const char *const *names, int n_names, int n_required, int *idx, rh_err *e)
{
    const char *line;
    size_t n;
    int rc = tr_lines_next(l, &line, &n, e);
    if (rc < 0) return -1;
    if (rc == 0) return rh_fail(e, "%s: empty file: no header line", l->name);
    return tr_csv_columns(l, line, n, names, n_names, n_required, idx, e);
}

int tr_field_count(tr_lines *l, const char *field, const char *s, size_t n, uint32_t *out, rh_err *e)
{
    uint64_t v = 0;
    const char *why;
    trim(&s, &n);
    if (tr_parse_count(s, n, TR_MAX_TOKENS, &v, &why) == 0) {
        *out = (uint32_t)v;
        return 0;
    }
    if (!strcmp(why, "is above the limit"))
        return rh_fail(e, "%s: line %llu: field '%s' is %llu, above the limit of %u tokens (absurd)", l->name,
                       (unsigned long long)l->line_no, field, (unsigned long long)v, TR_MAX_TOKENS);
    return rh_fail(e, "%s: line %llu: field '%s' %s ('%.*s')", l->name, (unsigned long long)l->line_no, field, why,
                   (int)(n > 40 ? 40 : n), s);
}

#define SECONDS_LIMIT_NS 4000000000000000000LL

int tr_field_seconds(tr_lines *l, const char *field, const char *s, size_t n, int pow10, int64_t *ns, rh_err *e)
{
    trim(&s, &n);
    if (tr_parse_scaled(s, n, pow10, ns) < 0 || *ns > SECONDS_LIMIT_NS || *ns < -SECONDS_LIMIT_NS)
        return rh_fail(e, "%s: line %llu: field '%s' is not a time ('%.*s')", l->name, (unsigned long long)l->line_no,
                       field, (int)(n > 40 ? 40 : n), s);
    return 0;
}

int tr_spool_source(tr_spool *sp, tr_format f, const char *path, rh_err *e)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (tr_header_set(&sp->header, "source", tr_format_name(f)) < 0 ||
        tr_header_set(&sp->header, "source_file", base) < 0)
        return rh_fail(e, "out of memory");
    return 0;
}
