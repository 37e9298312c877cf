/* sglang_lex.c — see sglang_lex.h. */
#include "traces/import/sglang_lex.h"
#include "traces/import/importers.h"

#include <string.h>

static void trim(sg_span *s)
{
    while (s->n && (s->s[0] == ' ' || s->s[0] == '\t')) s->s++, s->n--;
    while (s->n && (s->s[s->n - 1] == ' ' || s->s[s->n - 1] == '\t')) s->n--;
}

int sg_starts(sg_span s, const char *word)
{
    size_t n = strlen(word);
    return s.n >= n && !memcmp(s.s, word, n);
}

const char *sg_find(sg_span s, const char *word)
{
    return memmem(s.s, s.n, word, strlen(word));
}

int sg_parse_stamp(const char *line, size_t n, sg_stamp *st)
{
    for (size_t i = 0; i < n && i < 256; i++) {
        if (line[i] != '[' || n - i < 21) continue;
        const char *p = line + i + 1;
        size_t rest = n - i - 1, k = 19;
        if (tr_parse_datetime(p, 19, &st->ns) < 0) continue;
        st->ms = 0;
        if (k < rest && (p[k] == '.' || p[k] == ',')) {
            int64_t frac = 0, scale = 1000000000;
            for (k++; k < rest && p[k] >= '0' && p[k] <= '9'; k++)
                if (scale > 1) {
                    frac = frac * 10 + (p[k] - '0');
                    scale /= 10;
                }
            st->ns += frac * scale;
            st->ms = 1;
        }
        size_t t0 = k;
        while (k < rest && k - t0 < SG_MAX_TAGS && p[k] != ']' && p[k] != '[') k++;
        if (k >= rest || p[k] != ']') continue;
        st->tags = (sg_span){p + t0, k - t0};
        trim(&st->tags);
        st->msg = (sg_span){p + k + 1, rest - k - 1};
        trim(&st->msg);
        return 1;
    }
    return 0;
}

void sg_split_fields(sg_span s, sg_fields *f)
{
    f->n = 0;
    while (s.n && f->n < SG_MAX_FIELDS) {
        const char *c = memchr(s.s, ',', s.n);
        sg_span item = {s.s, c ? (size_t)(c - s.s) : s.n};
        s.s += item.n + (c != NULL);
        s.n -= item.n + (c != NULL);
        const char *colon = memchr(item.s, ':', item.n);
        if (!colon) continue;
        sg_span k = {item.s, (size_t)(colon - item.s)}, v = {colon + 1, item.n - k.n - 1};
        trim(&k);
        trim(&v);
        f->k[f->n] = k;
        f->v[f->n++] = v;
    }
}

void sg_split_after(sg_span msg, const char *marker, int64_t *ctr, sg_fields *f)
{
    size_t len = strlen(marker);
    sg_span r = {msg.s + len, msg.n - len};
    *ctr = -1;
    if (r.n > 2 && r.s[0] == ' ' && r.s[1] == '[') {
        int64_t v = 0;
        size_t k = 2;
        for (; k < r.n && r.s[k] >= '0' && r.s[k] <= '9' && v < ((int64_t)1 << 50); k++) v = v * 10 + (r.s[k] - '0');
        if (k > 2 && k < r.n && r.s[k] == ']') {
            *ctr = v;
            r.s += k + 1;
            r.n -= k + 1;
        }
    }
    /* "Prefill batch. #new-seq: ..." (older) or "Prefill batch, ..." */
    if (r.n && (r.s[0] == '.' || r.s[0] == ',')) r.s++, r.n--;
    sg_split_fields(r, f);
}

const sg_span *sg_field(const sg_fields *f, const char *key)
{
    size_t n = strlen(key);
    for (int i = f->n - 1; i >= 0; i--)
        if (f->k[i].n == n && !memcmp(f->k[i].s, key, n)) return &f->v[i];
    return NULL;
}

/* Each "TPn" token of the tags in turn; -1 when there are no more. */
static int64_t next_tp(sg_span tags, size_t *i)
{
    for (; *i + 2 < tags.n; (*i)++) {
        if (memcmp(tags.s + *i, "TP", 2) || (*i && tags.s[*i - 1] != ' ')) continue;
        int64_t v = 0;
        size_t k = *i + 2;
        for (; k < tags.n && tags.s[k] >= '0' && tags.s[k] <= '9' && v < 1000000; k++) v = v * 10 + (tags.s[k] - '0');
        if (k == *i + 2 || (k < tags.n && tags.s[k] != ' ')) continue;
        *i = k;
        return v;
    }
    return -1;
}

int sg_tags_tp0(sg_span tags)
{
    if (tags.n == 0) return 1;
    size_t i = 0;
    int64_t v;
    while ((v = next_tp(tags, &i)) >= 0)
        if (v == 0) return 1;
    return 0;
}

int64_t sg_tags_max_tp(sg_span tags)
{
    size_t i = 0;
    int64_t v, max = -1;
    while ((v = next_tp(tags, &i)) >= 0)
        if (v > max) max = v;
    return max;
}

/* Where "key=" starts a pair in the message, or NULL. */
static const char *pair(sg_span m, const char *key)
{
    size_t kn = strlen(key);
    for (size_t i = 0; i + kn < m.n; i++)
        if (!memcmp(m.s + i, key, kn) && m.s[i + kn] == '=' && (i == 0 || m.s[i - 1] == ' ' || m.s[i - 1] == '('))
            return m.s + i + kn + 1;
    return NULL;
}

int sg_startup_value(sg_span m, const char *key, sg_span *value)
{
    const char *v = pair(m, key), *end = m.s + m.n;
    if (!v) return 0;
    sg_span r = {v, 0};
    while (v + r.n < end && v[r.n] != ',' && v[r.n] != ')') r.n++;
    trim(&r);
    *value = r;
    return 1;
}

int sg_startup_quoted(sg_span m, const char *key, sg_span *value)
{
    const char *v = pair(m, key), *end = m.s + m.n;
    if (!v || v >= end || *v != '\'') return 0;
    const char *q = memchr(v + 1, '\'', (size_t)(end - v - 1));
    if (!q) return 0;
    *value = (sg_span){v + 1, (size_t)(q - v - 1)};
    return 1;
}
