/* chat_template_value.c — values as Python sees them: truthiness, str() and
 * repr(), ==, ordering, and the UTF-8 and whitespace helpers the other files
 * share. JSON values are jansson's; the kinds JSON lacks
 * (undefined, namespace, loop, macro, function) are ct_val's own. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "engine/model/chat_template_impl.h"

#define REPR_MAX_DEPTH 4096 /* json values nested deeper are refused, not recursed into */

int ct_fail(ct_ctx *c, const char *fmt, ...)
{
    char msg[sizeof c->e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rh_fail(c->e, "chat template line %d: %s", c->line, msg);
}

int ct_charge(ct_ctx *c, unsigned long long n)
{
    c->steps += n;
    if (c->steps > CT_MAX_STEPS) return ct_fail(c, "the template does too much work (over %llu steps)", CT_MAX_STEPS);
    return 0;
}

int ct_buf_put(ct_ctx *c, ct_buf *b, const char *p, size_t n)
{
    if (n > CHAT_TEMPLATE_MAX_OUTPUT - b->n)
        return ct_fail(c, "output over %u bytes (CHAT_TEMPLATE_MAX_OUTPUT)", CHAT_TEMPLATE_MAX_OUTPUT);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return ct_fail(c, "out of memory");
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

int ct_buf_puts(ct_ctx *c, ct_buf *b, const char *s) { return ct_buf_put(c, b, s, strlen(s)); }

/* ---- value kinds ---- */

ct_val cv_undef(const char *name, int owner)
{
    ct_val v = {.kind = CV_UNDEF, .owner = (uint8_t)owner, .name = name};
    return v;
}

ct_val cv_of(json_t *stolen)
{
    ct_val v = {.kind = CV_JSON, .j = stolen};
    return v;
}

int cv_ok(ct_ctx *c, ct_val *v)
{
    if ((v->kind == CV_JSON || v->kind == CV_NS) && !v->j) return ct_fail(c, "out of memory");
    return 0;
}

ct_val cv_copy(const ct_val *v)
{
    ct_val r = *v;
    if (r.j) json_incref(r.j);
    return r;
}

void cv_drop(ct_val *v)
{
    if (v->j) json_decref(v->j);
    v->j = NULL;
    v->kind = CV_UNDEF;
}

int cv_string(ct_ctx *c, const char *p, size_t n, ct_val *out)
{
    if (n > CHAT_TEMPLATE_MAX_OUTPUT) return ct_fail(c, "string over %u bytes", CHAT_TEMPLATE_MAX_OUTPUT);
    if (ct_charge(c, n / 64)) return -1;
    /* nocheck: template text may hold bytes that are not UTF-8; they pass through. */
    *out = cv_of(json_stringn_nocheck(p ? p : "", n));
    return cv_ok(c, out);
}

ct_val cv_elem(ct_ctx *c, json_t *borrowed)
{
    if (!borrowed || borrowed == c->undef) return cv_undef(NULL, 0);
    return cv_of(json_incref(borrowed));
}

/* Whether j nests deeper than limit (charging the nodes looked at). */
static int too_deep(ct_ctx *c, const json_t *j, int limit)
{
    if (!json_is_array(j) && !json_is_object(j)) return 0;
    if (limit <= 0) return 1;
    c->steps++;
    if (json_is_array(j)) {
        size_t i;
        json_t *x;
        json_array_foreach(j, i, x) if (too_deep(c, x, limit - 1)) return 1;
    } else {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)j, k, x) if (too_deep(c, x, limit - 1)) return 1;
    }
    return 0;
}

json_t *cv_store(ct_ctx *c, const ct_val *v)
{
    switch (v->kind) {
    case CV_UNDEF: return json_incref(c->undef);
    case CV_JSON:
        /* Bounded nesting keeps printing, comparing and freeing off deep recursion. */
        if (too_deep(c, v->j, CT_MAX_NEST * 2)) {
            ct_fail(c, "a list or dict nested over %d deep", CT_MAX_NEST * 2);
            return NULL;
        }
        return json_incref(v->j);
    default: ct_fail(c, "a %s cannot be stored in a list, dict or namespace", cv_type(v)); return NULL;
    }
}

int cv_is(const ct_val *v, int json_type) { return v->kind == CV_JSON && (int)json_typeof(v->j) == json_type; }
int cv_is_str(const ct_val *v) { return cv_is(v, JSON_STRING); }

int cv_is_num(const ct_val *v)
{
    return v->kind == CV_JSON && (json_is_integer(v->j) || json_is_real(v->j) || json_is_boolean(v->j));
}

int cv_int(const ct_val *v, long long *i)
{
    if (v->kind != CV_JSON) return 0;
    if (json_is_integer(v->j))
        *i = json_integer_value(v->j);
    else if (json_is_boolean(v->j))
        *i = json_is_true(v->j);
    else
        return 0;
    return 1;
}

double cv_float(const ct_val *v)
{
    long long i;
    if (cv_int(v, &i)) return (double)i;
    return v->kind == CV_JSON ? json_real_value(v->j) : 0;
}

int cv_truthy(const ct_val *v)
{
    switch (v->kind) {
    case CV_UNDEF: return 0;
    case CV_JSON:
        switch (json_typeof(v->j)) {
        case JSON_STRING: return json_string_length(v->j) > 0;
        case JSON_INTEGER: return json_integer_value(v->j) != 0;
        case JSON_REAL: return json_real_value(v->j) != 0;
        case JSON_TRUE: return 1;
        case JSON_ARRAY: return json_array_size(v->j) > 0;
        case JSON_OBJECT: return json_object_size(v->j) > 0;
        default: return 0;
        }
    default: return 1;
    }
}

static const char *json_type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_STRING: return "str";
    case JSON_INTEGER: return "int";
    case JSON_REAL: return "float";
    case JSON_TRUE:
    case JSON_FALSE: return "bool";
    case JSON_ARRAY: return "list";
    case JSON_OBJECT: return "dict";
    default: return "NoneType";
    }
}

const char *cv_type(const ct_val *v)
{
    switch (v->kind) {
    case CV_UNDEF: return "Undefined";
    case CV_JSON: return json_type_name(v->j);
    case CV_NS: return "Namespace";
    case CV_LOOP: return "LoopContext";
    case CV_MACRO: return "Macro";
    default: return "function";
    }
}

static const char *const owners[] = {"str", "int", "float", "bool", "list", "dict", "None", "Namespace", "LoopContext"};

int cv_owner(const ct_val *v)
{
    if (v->kind == CV_NS) return 8;
    if (v->kind == CV_LOOP) return 9;
    if (v->kind != CV_JSON) return 0;
    const char *t = json_type_name(v->j);
    for (int k = 0; k < 6; k++)
        if (!strcmp(owners[k], t)) return k + 1;
    return 7;
}

int cv_undef_fail(ct_ctx *c, const ct_val *v)
{
    if (!v->name) return ct_fail(c, "an undefined value was used");
    if (!v->owner) return ct_fail(c, "'%s' is undefined", v->name);
    const char *o = v->owner - 1 < (int)(sizeof owners / sizeof owners[0]) ? owners[v->owner - 1] : "value";
    return ct_fail(c, "'%s%s' has no attribute '%s'", o, strcmp(o, "None") ? " object" : "", v->name);
}

/* ---- tuples ---- */

static size_t ptr_slot(const json_t *p, size_t cap) { return ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull & (cap - 1); }

int ct_mark_tuple(ct_ctx *c, json_t *arr)
{
    if (ct_is_tuple(c, arr)) return 0;
    if ((c->ntuples + 1) * 2 > c->tuples_cap) {
        size_t cap = c->tuples_cap ? c->tuples_cap * 2 : 64;
        json_t **t = calloc(cap, sizeof *t);
        if (!t) return ct_fail(c, "out of memory");
        for (size_t i = 0; i < c->tuples_cap; i++) {
            json_t *p = c->tuples[i];
            if (!p) continue;
            size_t k = ptr_slot(p, cap);
            while (t[k]) k = (k + 1) & (cap - 1);
            t[k] = p;
        }
        free(c->tuples);
        c->tuples = t;
        c->tuples_cap = cap;
    }
    size_t k = ptr_slot(arr, c->tuples_cap);
    while (c->tuples[k]) k = (k + 1) & (c->tuples_cap - 1);
    /* the reference keeps the address from being reused by another array */
    c->tuples[k] = json_incref(arr);
    c->ntuples++;
    return 0;
}

int ct_is_tuple(const ct_ctx *c, const json_t *arr)
{
    if (!c->tuples_cap) return 0;
    for (size_t k = ptr_slot(arr, c->tuples_cap); c->tuples[k]; k = (k + 1) & (c->tuples_cap - 1))
        if (c->tuples[k] == arr) return 1;
    return 0;
}

void ct_tuples_free(ct_ctx *c)
{
    for (size_t i = 0; i < c->tuples_cap; i++)
        if (c->tuples[i]) json_decref(c->tuples[i]);
    free(c->tuples);
    c->tuples = NULL;
    c->ntuples = c->tuples_cap = 0;
}

/* ---- UTF-8 and whitespace ---- */

size_t ct_u8_next(const char *s, size_t n, size_t i)
{
    unsigned char b = (unsigned char)s[i];
    size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    if (len == 1 || i + len > n) return i + 1;
    for (size_t k = 1; k < len; k++)
        if (((unsigned char)s[i + k] & 0xC0) != 0x80) return i + 1;
    return i + len;
}

int32_t ct_u8_at(const char *s, size_t n, size_t i)
{
    size_t end = ct_u8_next(s, n, i);
    unsigned char b = (unsigned char)s[i];
    if (end == i + 1) return b < 0x80 ? b : -1;
    int32_t cp = b & (0x7F >> (end - i));
    for (size_t k = i + 1; k < end; k++) cp = (cp << 6) | ((unsigned char)s[k] & 0x3F);
    return cp;
}

size_t ct_u8_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i = ct_u8_next(s, n, i)) k++;
    return k;
}

size_t ct_u8_put(int32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int is_space_cp(int32_t c)
{
    if (c < 0x80) return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t ct_space_at(const char *s, size_t n)
{
    if (!n) return 0;
    if ((unsigned char)s[0] < 0x80) return is_space_cp((unsigned char)s[0]) ? 1 : 0;
    size_t end = ct_u8_next(s, n, 0);
    return is_space_cp(ct_u8_at(s, n, 0)) ? end : 0;
}

size_t ct_lstrip_len(const char *s, size_t n)
{
    size_t i = 0, w;
    while (i < n && (w = ct_space_at(s + i, n - i)) > 0) i += w;
    return i;
}

size_t ct_rstrip_len(const char *s, size_t n)
{
    size_t keep = 0;
    for (size_t i = 0; i < n;) {
        size_t w = ct_space_at(s + i, n - i);
        i = w ? i + w : ct_u8_next(s, n, i);
        if (!w) keep = i;
    }
    return keep;
}

/* ---- printing ---- */

void ct_fmt_float(double d, char *buf, size_t n)
{
    if (isnan(d)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(buf, n, d < 0 ? "-inf" : "inf");
        return;
    }
    /* Python's repr: the shortest digits that read back as d ... */
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    char dig[24];
    int nd = 0, exp10;
    const char *p = tmp + (tmp[0] == '-');
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') dig[nd++] = *p;
    exp10 = atoi(p + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    dig[nd] = '\0';
    /* ... written plainly for exponents -4..15, else as 1e-05, 1.5e+16. */
    char *o = buf;
    size_t room = n;
#define EMIT(...)                                                                                                      \
    do {                                                                                                               \
        int w_ = snprintf(o, room, __VA_ARGS__);                                                                       \
        if (w_ < 0 || (size_t)w_ >= room) return;                                                                      \
        o += w_;                                                                                                       \
        room -= (size_t)w_;                                                                                            \
    } while (0)
    if (signbit(d)) EMIT("-");
    if (exp10 < -4 || exp10 >= 16) {
        EMIT("%c", dig[0]);
        if (nd > 1) EMIT(".%s", dig + 1);
        EMIT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        EMIT("0.");
        for (int k = 0; k < -exp10 - 1; k++) EMIT("0");
        EMIT("%s", dig);
    } else {
        for (int k = 0; k <= exp10; k++) EMIT("%c", k < nd ? dig[k] : '0');
        EMIT(".");
        EMIT("%s", nd > exp10 + 1 ? dig + exp10 + 1 : "0");
    }
#undef EMIT
}

/* Python's repr of a str: quotes chosen as Python does, escapes for the unprintable. */
static int repr_str(ct_ctx *c, const char *s, size_t n, ct_buf *b)
{
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (ct_buf_put(c, b, &q, 1)) return -1;
    for (size_t i = 0; i < n;) {
        size_t next = ct_u8_next(s, n, i);
        int32_t cp = ct_u8_at(s, n, i);
        char esc[16];
        const char *out = s + i;
        size_t len = next - i;
        if (cp == '\\' || cp == q) {
            esc[0] = '\\', esc[1] = (char)cp, out = esc, len = 2;
        } else if (cp == '\n' || cp == '\r' || cp == '\t') {
            snprintf(esc, sizeof esc, "\\%c", cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't'), out = esc, len = 2;
        } else if (cp < 0) {
            /* a byte that is not UTF-8 (Python would hold a surrogate escape) */
            len = (size_t)snprintf(esc, sizeof esc, "\\x%02x", (unsigned char)s[i]), out = esc;
        } else if (cp < 0x20 || cp == 0x7F) {
            len = (size_t)snprintf(esc, sizeof esc, "\\x%02x", cp), out = esc;
        } else if (cp >= 0x80) {
            utf8proc_category_t cat = utf8proc_category(cp);
            int printable =
                !(cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CS ||
                  cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_ZL ||
                  cat == UTF8PROC_CATEGORY_ZP || cat == UTF8PROC_CATEGORY_ZS);
            if (!printable)
                len = (size_t)snprintf(esc, sizeof esc,
                                       cp < 0x100     ? "\\x%02x"
                                       : cp < 0x10000 ? "\\u%04x"
                                                      : "\\U%08x",
                                       cp),
                out = esc;
        }
        if (ct_buf_put(c, b, out, len)) return -1;
        i = next;
    }
    return ct_buf_put(c, b, &q, 1);
}

static int repr_json(ct_ctx *c, const json_t *j, ct_buf *b, int depth);

static int str_json(ct_ctx *c, const json_t *j, ct_buf *b, int depth)
{
    char num[48];
    switch (json_typeof(j)) {
    case JSON_STRING: return ct_buf_put(c, b, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(j));
        return ct_buf_puts(c, b, num);
    case JSON_REAL: ct_fmt_float(json_real_value(j), num, sizeof num); return ct_buf_puts(c, b, num);
    case JSON_TRUE: return ct_buf_puts(c, b, "True");
    case JSON_FALSE: return ct_buf_puts(c, b, "False");
    case JSON_NULL: return ct_buf_puts(c, b, "None");
    default: return repr_json(c, j, b, depth);
    }
}

static int repr_json(ct_ctx *c, const json_t *j, ct_buf *b, int depth)
{
    if (depth > REPR_MAX_DEPTH) return ct_fail(c, "a value nested too deeply to print");
    if (j == c->undef) return ct_buf_puts(c, b, "Undefined");
    if (ct_charge(c, 1)) return -1;
    if (json_is_string(j)) return repr_str(c, json_string_value(j), json_string_length(j), b);
    if (json_is_array(j)) {
        size_t i;
        json_t *x;
        int tuple = ct_is_tuple(c, j);
        if (ct_buf_puts(c, b, tuple ? "(" : "[")) return -1;
        json_array_foreach(j, i, x) if ((i && ct_buf_puts(c, b, ", ")) || repr_json(c, x, b, depth + 1)) return -1;
        if (tuple && json_array_size(j) == 1 && ct_buf_puts(c, b, ",")) return -1;
        return ct_buf_puts(c, b, tuple ? ")" : "]");
    }
    if (json_is_object(j)) {
        const char *k;
        json_t *x;
        int first = 1;
        if (ct_buf_puts(c, b, "{")) return -1;
        json_object_foreach((json_t *)j, k, x)
        {
            if ((!first && ct_buf_puts(c, b, ", ")) || repr_str(c, k, strlen(k), b) || ct_buf_puts(c, b, ": ") ||
                repr_json(c, x, b, depth + 1))
                return -1;
            first = 0;
        }
        return ct_buf_puts(c, b, "}");
    }
    return str_json(c, j, b, depth);
}

static int str_or_repr(ct_ctx *c, const ct_val *v, ct_buf *b, int repr)
{
    char tmp[64];
    switch (v->kind) {
    case CV_UNDEF: return repr ? ct_buf_puts(c, b, "Undefined") : 0;
    case CV_JSON: return repr ? repr_json(c, v->j, b, 0) : str_json(c, v->j, b, 0);
    case CV_NS: return ct_buf_puts(c, b, "<Namespace ") || repr_json(c, v->j, b, 0) || ct_buf_puts(c, b, ">");
    case CV_LOOP: {
        const ct_loop *l = v->p;
        snprintf(tmp, sizeof tmp, "<LoopContext %zu/%zu>", l->i + 1, l->n);
        return ct_buf_puts(c, b, tmp);
    }
    case CV_MACRO: {
        const ct_node *m = v->p;
        return ct_buf_puts(c, b, "<Macro '") || ct_buf_puts(c, b, m->str) || ct_buf_puts(c, b, "'>");
    }
    default: return ct_buf_puts(c, b, "<function>");
    }
}

int cv_str(ct_ctx *c, const ct_val *v, ct_buf *b) { return str_or_repr(c, v, b, 0); }
int cv_repr(ct_ctx *c, const ct_val *v, ct_buf *b) { return str_or_repr(c, v, b, 1); }

int cv_to_string(ct_ctx *c, const ct_val *v, ct_val *out)
{
    if (cv_is_str(v)) {
        *out = cv_copy(v);
        return 0;
    }
    ct_buf b = {0};
    int rc = cv_str(c, v, &b);
    if (rc == 0) rc = cv_string(c, b.p, b.n, out);
    free(b.p);
    return rc;
}

/* ---- comparison ---- */

static int num_eq(const json_t *a, const json_t *b)
{
    ct_val va = cv_of((json_t *)a), vb = cv_of((json_t *)b);
    long long x, y;
    if (cv_int(&va, &x) && cv_int(&vb, &y)) return x == y;
    return cv_float(&va) == cv_float(&vb);
}

static int is_num_json(const json_t *j) { return json_is_integer(j) || json_is_real(j) || json_is_boolean(j); }

static int json_eq(const json_t *a, const json_t *b, int depth)
{
    if (a == b) return 1;
    if (depth > REPR_MAX_DEPTH) return 0;
    if (is_num_json(a) && is_num_json(b)) return num_eq(a, b);
    if (json_typeof(a) != json_typeof(b)) return 0;
    switch (json_typeof(a)) {
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b) &&
               !memcmp(json_string_value(a), json_string_value(b), json_string_length(a));
    case JSON_ARRAY:
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!json_eq(json_array_get(a, i), json_array_get(b, i), depth + 1)) return 0;
        return 1;
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b)) return 0;
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)a, k, x)
        {
            json_t *y = json_object_get(b, k);
            if (!y || !json_eq(x, y, depth + 1)) return 0;
        }
        return 1;
    }
    default: return 1; /* null */
    }
}

int cv_eq(const ct_val *a, const ct_val *b)
{
    if (a->kind != b->kind) return 0;
    switch (a->kind) {
    case CV_UNDEF: return 1; /* Jinja: every Undefined equals every other */
    case CV_JSON: return json_eq(a->j, b->j, 0);
    case CV_NS: return a->j == b->j;
    case CV_FUNC: return a->id == b->id;
    default: return a->p == b->p;
    }
}

static int order_json(ct_ctx *c, const json_t *a, const json_t *b, int op, int *r, int depth)
{
    if (depth > REPR_MAX_DEPTH) return ct_fail(c, "values nested too deeply to compare");
    if (is_num_json(a) && is_num_json(b)) {
        ct_val va = cv_of((json_t *)a), vb = cv_of((json_t *)b);
        long long x, y;
        if (cv_int(&va, &x) && cv_int(&vb, &y))
            *r = (x > y) - (x < y);
        else {
            double p = cv_float(&va), q = cv_float(&vb);
            *r = (p > q) - (p < q);
            if (isnan(p) || isnan(q)) *r = 2; /* every ordering test is false */
        }
        return 0;
    }
    if (json_is_string(a) && json_is_string(b)) {
        size_t la = json_string_length(a), lb = json_string_length(b);
        int m = memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);
        *r = m ? (m > 0) - (m < 0) : (la > lb) - (la < lb);
        return 0;
    }
    if (json_is_array(a) && json_is_array(b)) {
        size_t la = json_array_size(a), lb = json_array_size(b);
        for (size_t i = 0; i < la && i < lb; i++) {
            json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
            if (!json_eq(x, y, depth + 1)) return order_json(c, x, y, op, r, depth + 1);
        }
        *r = (la > lb) - (la < lb);
        return 0;
    }
    return ct_fail(c, "'%s' not supported between instances of '%s' and '%s'", ct_op_name(op), json_type_name(a),
                   json_type_name(b));
}

int cv_cmp(ct_ctx *c, const ct_val *a, const ct_val *b, int op, int *r)
{
    if (a->kind == CV_UNDEF) return cv_undef_fail(c, a);
    if (b->kind == CV_UNDEF) return cv_undef_fail(c, b);
    if (a->kind != CV_JSON || b->kind != CV_JSON)
        return ct_fail(c, "'%s' not supported between instances of '%s' and '%s'", ct_op_name(op), cv_type(a),
                       cv_type(b));
    return order_json(c, a->j, b->j, op, r, 0);
}
