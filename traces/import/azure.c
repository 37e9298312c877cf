/* azure.c — Azure LLM inference traces (2023 and 2024).
 *
 * TIMESTAMP,ContextTokens,GeneratedTokens. 2023 files: "2023-11-16
 * 18:17:03.9799600" (seven fractional digits, CRLF, no final newline).
 * 2024 week-long files: "2024-05-10 00:00:00.0085280+00:00", the fraction
 * sometimes absent. Timestamps are parsed exactly into ns since the epoch
 * (UTC after the offset), so offsets between rows are exact. */
#include "traces/import/importers.h"

#include <string.h>

static int digits(const char *s, size_t n, size_t at, int count, int *out)
{
    if (at + (size_t)count > n) return -1;
    int v = 0;
    for (int i = 0; i < count; i++) {
        unsigned d = (unsigned)(s[at + i] - '0');
        if (d > 9) return -1;
        v = v * 10 + (int)d;
    }
    *out = v;
    return 0;
}

static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m)
{
    static const int dm[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return dm[m - 1] + (m == 2 && leap);
}

/* "YYYY-MM-DD[ T]HH:MM:SS[.f{1,}][Z|+HH:MM|-HH:MM|+HHMM]" -> ns since 1970 (UTC). */
int tr_parse_datetime(const char *s, size_t n, int64_t *ns)
{
    int Y, M, D, h, m, sec;
    if (digits(s, n, 0, 4, &Y) || n < 19 || s[4] != '-' || digits(s, n, 5, 2, &M) || s[7] != '-' ||
        digits(s, n, 8, 2, &D) || (s[10] != ' ' && s[10] != 'T') || digits(s, n, 11, 2, &h) || s[13] != ':' ||
        digits(s, n, 14, 2, &m) || s[16] != ':' || digits(s, n, 17, 2, &sec))
        return -1;
    if (Y < 1970 || Y > 2200 || M < 1 || M > 12 || D < 1 || D > days_in_month(Y, M) || h > 23 || m > 59 || sec > 60)
        return -1;
    size_t i = 19;
    int64_t frac = 0;
    if (i < n && s[i] == '.') {
        i++;
        int nd = 0;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, nd++)
            if (nd < 9) frac = frac * 10 + (s[i] - '0');
        if (nd == 0) return -1;
        for (; nd < 9; nd++) frac *= 10;
    }
    int64_t offset = 0;
    if (i < n && s[i] == 'Z') {
        i++;
    } else if (i < n && (s[i] == '+' || s[i] == '-')) {
        int sign = s[i] == '-' ? -1 : 1, oh, om;
        i++;
        if (digits(s, n, i, 2, &oh)) return -1;
        i += 2;
        if (i < n && s[i] == ':') i++;
        if (digits(s, n, i, 2, &om)) return -1;
        i += 2;
        if (oh > 23 || om > 59) return -1;
        offset = sign * (oh * 3600 + om * 60);
    }
    if (i != n) return -1;
    int64_t secs = days_from_civil(Y, M, D) * 86400 + h * 3600 + m * 60 + sec - offset;
    *ns = secs * 1000000000 + frac;
    return 0;
}

int tr_import_azure(tr_lines *l, const tr_import_opts *o, tr_spool *sp, rh_err *e)
{
    (void)o;
    static const char *const names[] = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"};
    int col[3];
    const char *line;
    size_t n;
    if (tr_csv_header(l, names, 3, 3, col, e) < 0) return -1;
    int rc;
    int need = col[0] > col[1] ? col[0] : col[1];
    need = need > col[2] ? need : col[2];
    rh_csv_field f[16];
    while ((rc = tr_lines_next(l, &line, &n, e)) > 0) {
        if (n == 0) continue;
        int k = rh_csv_split(line, n, f, 16);
        if (k < 0) return rh_fail(e, "%s: line %llu: too many columns", l->name, (unsigned long long)l->line_no);
        if (k <= need)
            return rh_fail(e, "%s: line %llu: missing field '%s' (%d columns)", l->name, (unsigned long long)l->line_no,
                           names[col[0] >= k ? 0 : col[1] >= k ? 1 : 2], k);
        tr_spool_row row = {0};
        if (tr_parse_datetime(f[col[0]].s, f[col[0]].n, &row.ns) < 0)
            return rh_fail(e, "%s: line %llu: field 'TIMESTAMP' is not a date and time ('%.*s')", l->name,
                           (unsigned long long)l->line_no, (int)(f[col[0]].n > 40 ? 40 : f[col[0]].n), f[col[0]].s);
        if (tr_field_count(l, "ContextTokens", f[col[1]].s, f[col[1]].n, &row.input_len, e) < 0 ||
            tr_field_count(l, "GeneratedTokens", f[col[2]].s, f[col[2]].n, &row.output_len, e) < 0 ||
            tr_spool_add(sp, l, &row, NULL, e) < 0)
            return -1;
    }
    return rc;
}
