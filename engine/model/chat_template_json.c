/* chat_template_json.c — Python's json.dumps(v, ensure_ascii, indent,
 * separators, sort_keys) as transformers' tojson filter calls it: ", " and
 * ": " by default ("," between items once indented), floats as Python's
 * repr, non-ASCII kept unless ensure_ascii, NaN and Infinity as Python
 * writes them; an undefined value is not serializable. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/chat_template_impl.h"

#define JSON_MAX_DEPTH 4096 /* deeper values are refused, not recursed into */

static int json_str(ct_ctx *c, const char *s, size_t n, int ascii, ct_buf *b)
{
    if (ct_buf_puts(c, b, "\"")) return -1;
    size_t run = 0; /* bytes copied as they are, flushed before each escape */
    for (size_t i = 0; i < n;) {
        size_t next = ct_u8_next(s, n, i);
        int32_t cp = ct_u8_at(s, n, i);
        char esc[16];
        size_t len = 0;
        if (cp == '"' || cp == '\\')
            len = (size_t)snprintf(esc, sizeof esc, "\\%c", cp);
        else if (cp == '\n')
            len = (size_t)snprintf(esc, sizeof esc, "\\n");
        else if (cp == '\r')
            len = (size_t)snprintf(esc, sizeof esc, "\\r");
        else if (cp == '\t')
            len = (size_t)snprintf(esc, sizeof esc, "\\t");
        else if (cp == '\b')
            len = (size_t)snprintf(esc, sizeof esc, "\\b");
        else if (cp == '\f')
            len = (size_t)snprintf(esc, sizeof esc, "\\f");
        else if (cp >= 0 && cp < 0x20)
            len = (size_t)snprintf(esc, sizeof esc, "\\u%04x", cp);
        else if (ascii && (cp < 0 || cp >= 0x7F)) {
            if (cp < 0) cp = 0xFFFD;
            if (cp >= 0x10000)
                len = (size_t)snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                                       0xDC00 + ((cp - 0x10000) & 0x3FF));
            else
                len = (size_t)snprintf(esc, sizeof esc, "\\u%04x", cp);
        }
        if (len) {
            if (ct_buf_put(c, b, s + i - run, run) || ct_buf_put(c, b, esc, len)) return -1;
            run = 0;
        } else {
            run += next - i;
        }
        i = next;
    }
    return ct_buf_put(c, b, s + n - run, run) || ct_buf_puts(c, b, "\"");
}

static int json_newline(ct_ctx *c, const ct_json_opts *o, int level, ct_buf *b)
{
    if (ct_buf_puts(c, b, "\n")) return -1;
    for (int k = 0; k < level; k++)
        if (ct_buf_put(c, b, o->indent, o->indent_len)) return -1;
    return 0;
}

static int key_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static int json_dump(ct_ctx *c, const json_t *j, const ct_json_opts *o, int level, ct_buf *b)
{
    char num[48];
    if (level > JSON_MAX_DEPTH) return ct_fail(c, "a value nested too deeply for tojson");
    if (j == c->undef) return ct_fail(c, "Object of type Undefined is not JSON serializable");
    if (ct_charge(c, 1)) return -1;
    const char *isep = o->item_sep ? o->item_sep : o->indent ? "," : ", ";
    size_t isep_len = o->item_sep ? o->item_sep_len : strlen(isep);
    const char *ksep = o->key_sep ? o->key_sep : ": ";
    size_t ksep_len = o->key_sep ? o->key_sep_len : 2;
    switch (json_typeof(j)) {
    case JSON_STRING: return json_str(c, json_string_value(j), json_string_length(j), o->ensure_ascii, b);
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(j));
        return ct_buf_puts(c, b, num);
    case JSON_REAL: {
        double d = json_real_value(j);
        if (isnan(d)) return ct_buf_puts(c, b, "NaN");
        if (isinf(d)) return ct_buf_puts(c, b, d < 0 ? "-Infinity" : "Infinity");
        ct_fmt_float(d, num, sizeof num);
        return ct_buf_puts(c, b, num);
    }
    case JSON_TRUE: return ct_buf_puts(c, b, "true");
    case JSON_FALSE: return ct_buf_puts(c, b, "false");
    case JSON_NULL: return ct_buf_puts(c, b, "null");
    case JSON_ARRAY: {
        if (!json_array_size(j)) return ct_buf_puts(c, b, "[]");
        if (ct_buf_puts(c, b, "[") || (o->indent && json_newline(c, o, level + 1, b))) return -1;
        for (size_t i = 0; i < json_array_size(j); i++) {
            if (i && (ct_buf_put(c, b, isep, isep_len) || (o->indent && json_newline(c, o, level + 1, b)))) return -1;
            if (json_dump(c, json_array_get(j, i), o, level + 1, b)) return -1;
        }
        return (o->indent && json_newline(c, o, level, b)) || ct_buf_puts(c, b, "]");
    }
    default: {
        size_t n = json_object_size(j), k = 0;
        if (!n) return ct_buf_puts(c, b, "{}");
        const char **keys = malloc(n * sizeof *keys);
        if (!keys) return ct_fail(c, "out of memory");
        const char *key;
        json_t *x;
        json_object_foreach((json_t *)j, key, x) keys[k++] = key;
        if (o->sort_keys) qsort(keys, n, sizeof *keys, key_cmp);
        int rc = ct_buf_puts(c, b, "{") || (o->indent && json_newline(c, o, level + 1, b));
        for (size_t i = 0; i < n && !rc; i++) {
            rc = (i && (ct_buf_put(c, b, isep, isep_len) || (o->indent && json_newline(c, o, level + 1, b)))) ||
                 json_str(c, keys[i], strlen(keys[i]), o->ensure_ascii, b) || ct_buf_put(c, b, ksep, ksep_len) ||
                 json_dump(c, json_object_get(j, keys[i]), o, level + 1, b);
        }
        free(keys);
        return rc ? -1 : (o->indent && json_newline(c, o, level, b)) || ct_buf_puts(c, b, "}");
    }
    }
}

int ct_tojson(ct_ctx *c, const ct_val *v, const ct_json_opts *o, ct_buf *b)
{
    if (v->kind != CV_JSON) return ct_fail(c, "Object of type %s is not JSON serializable", cv_type(v));
    return json_dump(c, v->j, o, 0, b) ? -1 : 0;
}
