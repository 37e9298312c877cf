/* jsonline.c — see jsonline.h. */
#include "traces/import/jsonline.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jl_init(jl_obj *o)
{
    memset(o, 0, sizeof *o);
}

void jl_free(jl_obj *o)
{
    free(o->pool);
    free(o->fields);
    free(o->members);
    free(o->elems);
    memset(o, 0, sizeof *o);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 32;
    while (c < need) c *= 2;
    void *n = realloc(*p, c * elem);
    if (!n) return -1;
    *p = n;
    *cap = c;
    return 0;
}

static jl_field *push_field(jl_obj *o, int member)
{
    if (member) {
        if (grow((void **)&o->members, &o->members_cap, o->n_members + 1, sizeof *o->members) < 0) return NULL;
        return memset(&o->members[o->n_members++], 0, sizeof(jl_field));
    }
    if (grow((void **)&o->fields, &o->fields_cap, o->n_fields + 1, sizeof *o->fields) < 0) return NULL;
    return memset(&o->fields[o->n_fields++], 0, sizeof(jl_field));
}

static int push_elem(jl_obj *o, jl_span s)
{
    if (grow((void **)&o->elems, &o->elems_cap, o->n_elems + 1, sizeof *o->elems) < 0) return -1;
    o->elems[o->n_elems++] = s;
    return 0;
}

/* Copies text into the pool, NUL-terminated; returns its span. */
static int pool_add(jl_obj *o, const char *s, size_t n, jl_span *out)
{
    if (grow((void **)&o->pool, &o->pool_cap, o->pool_len + n + 1, 1) < 0) return -1;
    memcpy(o->pool + o->pool_len, s, n);
    o->pool[o->pool_len + n] = '\0';
    *out = (jl_span){(uint32_t)o->pool_len, (uint32_t)n, 1};
    o->pool_len += n + 1;
    return 0;
}

const char *jl_text(const jl_obj *o, jl_span s)
{
    return (s.pooled ? o->pool : o->line) + s.off;
}

int jl_key_is(const jl_obj *o, const jl_field *f, const char *key)
{
    size_t n = strlen(key);
    return f->key.len == n && !memcmp(jl_text(o, f->key), key, n);
}

const jl_field *jl_get(const jl_obj *o, const char *key)
{
    for (size_t i = 0; i < o->n_fields; i++)
        if (jl_key_is(o, &o->fields[i], key)) return &o->fields[i];
    return NULL;
}

/* ---------------- fast path ---------------- */

typedef struct scan {
    const char *s;
    size_t i, n;
} scan;

static void ws(scan *c)
{
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\r')) c->i++;
}

/* A string with no escapes or control characters; its contents' span. */
static int fast_string(scan *c, jl_span *out)
{
    if (c->i >= c->n || c->s[c->i] != '"') return -1;
    size_t start = ++c->i;
    while (c->i < c->n) {
        unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == '"') {
            *out = (jl_span){(uint32_t)start, (uint32_t)(c->i - start), 0};
            c->i++;
            return 0;
        }
        if (ch == '\\' || ch < 0x20) return -1;
        c->i++;
    }
    return -1;
}

/* JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int fast_number(scan *c, jl_span *out)
{
    size_t start = c->i, i = c->i;
    const char *s = c->s;
    if (i < c->n && s[i] == '-') i++;
    if (i >= c->n) return -1;
    if (s[i] == '0') i++;
    else if (s[i] >= '1' && s[i] <= '9')
        while (i < c->n && s[i] >= '0' && s[i] <= '9') i++;
    else return -1;
    if (i < c->n && s[i] == '.') {
        size_t d = ++i;
        while (i < c->n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return -1;
    }
    if (i < c->n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < c->n && (s[i] == '+' || s[i] == '-')) i++;
        size_t d = i;
        while (i < c->n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return -1;
    }
    *out = (jl_span){(uint32_t)start, (uint32_t)(i - start), 0};
    c->i = i;
    return 0;
}

static int fast_literal(scan *c, const char *word, int type, jl_field *f)
{
    size_t n = strlen(word);
    if (c->n - c->i < n || memcmp(c->s + c->i, word, n)) return -1;
    c->i += n;
    f->type = (uint8_t)type;
    return 0;
}

static int fast_value(jl_obj *o, scan *c, jl_field *f, int depth)
{
    ws(c);
    if (c->i >= c->n) return -1;
    char ch = c->s[c->i];
    if (ch == '"') {
        f->type = JL_STR;
        return fast_string(c, &f->text);
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        f->type = JL_NUM;
        return fast_number(c, &f->text);
    }
    if (ch == 't') return fast_literal(c, "true", JL_TRUE, f);
    if (ch == 'f') return fast_literal(c, "false", JL_FALSE, f);
    if (ch == 'n') return fast_literal(c, "null", JL_NULL, f);
    if (ch == '[') {
        f->type = JL_ARR;
        f->first = (uint32_t)o->n_elems;
        c->i++;
        ws(c);
        if (c->i < c->n && c->s[c->i] == ']') {
            c->i++;
            return 0;
        }
        for (;;) {
            jl_span sp;
            ws(c);
            if (fast_number(c, &sp) < 0 || push_elem(o, sp) < 0) return -1;
            f->count++;
            ws(c);
            if (c->i >= c->n) return -1;
            if (c->s[c->i] == ']') {
                c->i++;
                return 0;
            }
            if (c->s[c->i++] != ',') return -1;
        }
    }
    if (ch == '{' && depth == 0) {
        /* One nested level with scalar members (the header's config). */
        f->type = JL_OBJ;
        f->first = (uint32_t)o->n_members;
        c->i++;
        ws(c);
        if (c->i < c->n && c->s[c->i] == '}') {
            c->i++;
            return 0;
        }
        for (;;) {
            ws(c);
            jl_field *m = push_field(o, 1);
            if (!m || fast_string(c, &m->key) < 0) return -1;
            ws(c);
            if (c->i >= c->n || c->s[c->i++] != ':') return -1;
            if (fast_value(o, c, m, depth + 1) < 0 || m->type == JL_ARR) return -1;
            f->count++;
            ws(c);
            if (c->i >= c->n) return -1;
            if (c->s[c->i] == '}') {
                c->i++;
                return 0;
            }
            if (c->s[c->i++] != ',') return -1;
        }
    }
    return -1;
}

static int fast_parse(jl_obj *o, const char *line, size_t n)
{
    scan c = {line, 0, n};
    ws(&c);
    if (c.i >= n || line[c.i] != '{') return -1;
    c.i++;
    ws(&c);
    if (c.i < n && line[c.i] == '}') {
        c.i++;
    } else {
        for (;;) {
            ws(&c);
            jl_field *f = push_field(o, 0);
            if (!f || fast_string(&c, &f->key) < 0) return -1;
            ws(&c);
            if (c.i >= n || line[c.i++] != ':') return -1;
            if (fast_value(o, &c, f, 0) < 0) return -1;
            ws(&c);
            if (c.i >= n) return -1;
            if (line[c.i] == '}') {
                c.i++;
                break;
            }
            if (line[c.i++] != ',') return -1;
        }
    }
    ws(&c);
    return c.i == n ? 0 : -1;
}

/* ---------------- jansson fallback ---------------- */

static int number_text(jl_obj *o, json_t *v, jl_span *out)
{
    char buf[40];
    int n;
    if (json_is_integer(v)) n = snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else n = snprintf(buf, sizeof buf, "%.17g", json_real_value(v));
    return pool_add(o, buf, (size_t)n, out);
}

static int slow_value(jl_obj *o, json_t *v, jl_field *f, int depth, rh_err *e)
{
    if (json_is_number(v)) {
        f->type = JL_NUM;
        return number_text(o, v, &f->text) < 0 ? rh_fail(e, "out of memory") : 0;
    }
    if (json_is_string(v)) {
        f->type = JL_STR;
        const char *s = json_string_value(v);
        return pool_add(o, s, json_string_length(v), &f->text) < 0 ? rh_fail(e, "out of memory") : 0;
    }
    if (json_is_true(v)) f->type = JL_TRUE;
    else if (json_is_false(v)) f->type = JL_FALSE;
    else if (json_is_null(v)) f->type = JL_NULL;
    else if (json_is_array(v)) {
        f->type = JL_ARR;
        f->first = (uint32_t)o->n_elems;
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            if (!json_is_number(x)) {
                f->type = JL_OTHER;
                f->count = 0;
                return 0;
            }
            jl_span sp;
            if (number_text(o, x, &sp) < 0 || push_elem(o, sp) < 0) return rh_fail(e, "out of memory");
            f->count++;
        }
    } else if (json_is_object(v) && depth == 0) {
        f->type = JL_OBJ;
        /* Members are appended after any earlier object's, so indices hold. */
        f->first = (uint32_t)o->n_members;
        const char *k;
        json_t *x;
        size_t count = json_object_size(v), base = o->n_members;
        for (size_t i = 0; i < count; i++)
            if (!push_field(o, 1)) return rh_fail(e, "out of memory");
        size_t i = 0;
        json_object_foreach(v, k, x) {
            jl_field *m = &o->members[base + i++];
            if (pool_add(o, k, strlen(k), &m->key) < 0) return rh_fail(e, "out of memory");
            if (json_is_array(x) || json_is_object(x)) m->type = JL_OTHER;
            else if (slow_value(o, x, m, depth + 1, e) < 0) return -1;
        }
        f->count = (uint32_t)count;
    } else {
        f->type = JL_OTHER;
    }
    return 0;
}

static int slow_parse(jl_obj *o, const char *line, size_t n, uint64_t line_no, rh_err *e)
{
    json_error_t je;
    json_t *root = json_loadb(line, n, 0, &je);
    if (!root)
        return rh_fail(e, "line %llu, column %d: invalid JSON: %s", (unsigned long long)line_no, je.column, je.text);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = rh_fail(e, "line %llu: expected a JSON object", (unsigned long long)line_no);
    } else {
        const char *k;
        json_t *v;
        json_object_foreach(root, k, v) {
            jl_field *f = push_field(o, 0);
            if (!f) {
                rc = rh_fail(e, "out of memory");
                break;
            }
            jl_span key;
            if (pool_add(o, k, strlen(k), &key) < 0) {
                rc = rh_fail(e, "out of memory");
                break;
            }
            f = &o->fields[o->n_fields - 1];
            f->key = key;
            if ((rc = slow_value(o, v, f, 0, e)) < 0) break;
        }
    }
    json_decref(root);
    return rc;
}

int jl_parse(jl_obj *o, const char *line, size_t n, uint64_t line_no, rh_err *e)
{
    o->line = line;
    o->n_fields = o->n_members = o->n_elems = o->pool_len = 0;
    if (n > UINT32_MAX) return rh_fail(e, "line %llu: longer than 4 GiB", (unsigned long long)line_no);
    if (fast_parse(o, line, n) == 0) return 0;
    o->n_fields = o->n_members = o->n_elems = o->pool_len = 0;
    o->slow_lines++;
    return slow_parse(o, line, n, line_no, e);
}
