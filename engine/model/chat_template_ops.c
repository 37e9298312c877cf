/* chat_template_ops.c — Python's operators on template values (+ - * / //
 * % ** ~, unary -, in), attribute and subscript access as Jinja's getattr /
 * getitem do them (a missing key or index gives undefined; only an undefined
 * object raises), slices, iteration and len(). Strings index, slice and
 * count by code point, as Python's str does. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/chat_template_impl.h"

static int type_error(ct_ctx *c, int op, const ct_val *a, const ct_val *b)
{
    return ct_fail(c, "unsupported operand type(s) for %s: '%s' and '%s'", ct_op_name(op), cv_type(a), cv_type(b));
}

static int new_int(ct_ctx *c, long long i, ct_val *out)
{
    *out = cv_of(json_integer(i));
    return cv_ok(c, out);
}

static int new_float(ct_ctx *c, double d, ct_val *out)
{
    *out = cv_of(json_real(d));
    return cv_ok(c, out);
}

static int overflow(ct_ctx *c) { return ct_fail(c, "integer overflow (beyond 64 bits)"); }

/* Python's floor division and modulo, for ints and for floats. */
static int int_divmod(ct_ctx *c, long long x, long long y, long long *q, long long *r)
{
    if (y == 0) return ct_fail(c, "integer division or modulo by zero");
    if (x == LLONG_MIN && y == -1) return overflow(c);
    long long qq = x / y, rr = x % y;
    if (rr && ((rr < 0) != (y < 0))) qq--, rr += y;
    *q = qq;
    *r = rr;
    return 0;
}

static int float_divmod(ct_ctx *c, double x, double y, double *q, double *r)
{
    if (y == 0) return ct_fail(c, "float division by zero");
    /* CPython's float_divmod */
    double mod = fmod(x, y), div = (x - mod) / y;
    if (mod) {
        if ((y < 0) != (mod < 0)) mod += y, div -= 1.0;
    } else {
        mod = copysign(0.0, y);
    }
    double fdiv;
    if (div) {
        fdiv = floor(div);
        if (div - fdiv > 0.5) fdiv += 1.0;
    } else {
        fdiv = copysign(0.0, x / y);
    }
    *q = fdiv;
    *r = mod;
    return 0;
}

static int ipow(ct_ctx *c, long long base, long long e, long long *out)
{
    long long r = 1;
    while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return overflow(c);
        e >>= 1;
        if (e && __builtin_mul_overflow(base, base, &base)) return overflow(c);
    }
    *out = r;
    return 0;
}

static int arith(ct_ctx *c, int op, const ct_val *a, const ct_val *b, ct_val *out)
{
    long long x, y, r;
    int ints = cv_int(a, &x) && cv_int(b, &y);
    double p = cv_float(a), q = cv_float(b), d, m;
    switch (op) {
    case OP_ADD:
        if (ints) return __builtin_add_overflow(x, y, &r) ? overflow(c) : new_int(c, r, out);
        return new_float(c, p + q, out);
    case OP_SUB:
        if (ints) return __builtin_sub_overflow(x, y, &r) ? overflow(c) : new_int(c, r, out);
        return new_float(c, p - q, out);
    case OP_MUL:
        if (ints) return __builtin_mul_overflow(x, y, &r) ? overflow(c) : new_int(c, r, out);
        return new_float(c, p * q, out);
    case OP_DIV:
        if (q == 0) return ct_fail(c, "division by zero");
        return new_float(c, p / q, out);
    case OP_FLOORDIV:
        if (ints) return int_divmod(c, x, y, &r, &x) ? -1 : new_int(c, r, out);
        return float_divmod(c, p, q, &d, &m) ? -1 : new_float(c, d, out);
    case OP_MOD:
        if (ints) return int_divmod(c, x, y, &x, &r) ? -1 : new_int(c, r, out);
        return float_divmod(c, p, q, &d, &m) ? -1 : new_float(c, m, out);
    default: /* OP_POW */
        if (ints && y >= 0) return ipow(c, x, y, &r) ? -1 : new_int(c, r, out);
        if (p == 0 && q < 0) return ct_fail(c, "0.0 cannot be raised to a negative power");
        if (p < 0 && q != floor(q)) return ct_fail(c, "a negative number to a fractional power is complex");
        d = pow(p, q);
        if (isinf(d) && !isinf(p) && !isinf(q)) return ct_fail(c, "numerical result out of range");
        return new_float(c, d, out);
    }
}

/* str * n, list * n */
static int repeat(ct_ctx *c, const ct_val *seq, long long n, ct_val *out)
{
    if (n < 0) n = 0;
    if (cv_is_str(seq)) {
        size_t len = json_string_length(seq->j);
        if (len && (unsigned long long)n > CHAT_TEMPLATE_MAX_OUTPUT / len)
            return ct_fail(c, "string over %u bytes", CHAT_TEMPLATE_MAX_OUTPUT);
        size_t total = len * (size_t)n;
        char *buf = malloc(total + 1);
        if (!buf) return ct_fail(c, "out of memory");
        for (long long k = 0; k < n; k++) memcpy(buf + (size_t)k * len, json_string_value(seq->j), len);
        int rc = cv_string(c, buf, total, out);
        free(buf);
        return rc;
    }
    size_t len = json_array_size(seq->j);
    if (len && (unsigned long long)n > CT_MAX_ITEMS / len) return ct_fail(c, "a list over %u items", CT_MAX_ITEMS);
    if (ct_charge(c, len * (size_t)n)) return -1;
    json_t *arr = json_array();
    for (long long k = 0; arr && k < n; k++)
        if (json_array_extend(arr, seq->j)) json_decref(arr), arr = NULL;
    *out = cv_of(arr);
    return cv_ok(c, out);
}

static int concat(ct_ctx *c, const ct_val *a, const ct_val *b, ct_val *out)
{
    if (cv_is_str(a)) {
        size_t la = json_string_length(a->j), lb = json_string_length(b->j);
        if (la + lb > CHAT_TEMPLATE_MAX_OUTPUT) return ct_fail(c, "string over %u bytes", CHAT_TEMPLATE_MAX_OUTPUT);
        char *buf = malloc(la + lb + 1);
        if (!buf) return ct_fail(c, "out of memory");
        memcpy(buf, json_string_value(a->j), la);
        memcpy(buf + la, json_string_value(b->j), lb);
        int rc = cv_string(c, buf, la + lb, out);
        free(buf);
        return rc;
    }
    size_t n = json_array_size(a->j) + json_array_size(b->j);
    if (n > CT_MAX_ITEMS) return ct_fail(c, "a list over %u items", CT_MAX_ITEMS);
    if (ct_charge(c, n)) return -1;
    json_t *arr = json_array();
    if (arr && (json_array_extend(arr, a->j) || json_array_extend(arr, b->j))) json_decref(arr), arr = NULL;
    *out = cv_of(arr);
    return cv_ok(c, out);
}

int ct_binop(ct_ctx *c, int op, const ct_val *a, const ct_val *b, ct_val *out)
{
    if (op == OP_TILDE) {
        ct_buf buf = {0};
        int rc = cv_str(c, a, &buf) || cv_str(c, b, &buf) || cv_string(c, buf.p, buf.n, out) ? -1 : 0;
        free(buf.p);
        return rc;
    }
    if (a->kind == CV_UNDEF) return cv_undef_fail(c, a);
    if (b->kind == CV_UNDEF) return cv_undef_fail(c, b);
    if (cv_is_num(a) && cv_is_num(b)) return arith(c, op, a, b, out);
    long long n;
    if (op == OP_ADD) {
        if ((cv_is_str(a) && cv_is_str(b)) || (cv_is(a, JSON_ARRAY) && cv_is(b, JSON_ARRAY)))
            return concat(c, a, b, out);
        if (cv_is_str(a)) return ct_fail(c, "can only concatenate str (not \"%s\") to str", cv_type(b));
        if (cv_is(a, JSON_ARRAY)) return ct_fail(c, "can only concatenate list (not \"%s\") to list", cv_type(b));
    }
    if (op == OP_MUL) {
        if ((cv_is_str(a) || cv_is(a, JSON_ARRAY)) && cv_int(b, &n)) return repeat(c, a, n, out);
        if ((cv_is_str(b) || cv_is(b, JSON_ARRAY)) && cv_int(a, &n)) return repeat(c, b, n, out);
    }
    if (op == OP_MOD && cv_is_str(a)) return ct_fail(c, "printf-style string formatting (str %% x) is not supported");
    return type_error(c, op, a, b);
}

int ct_neg(ct_ctx *c, const ct_val *a, int plus, ct_val *out)
{
    long long i;
    if (a->kind == CV_UNDEF) return cv_undef_fail(c, a);
    if (cv_int(a, &i)) {
        if (!plus && i == LLONG_MIN) return overflow(c);
        return new_int(c, plus ? i : -i, out);
    }
    if (cv_is(a, JSON_REAL)) return new_float(c, plus ? json_real_value(a->j) : -json_real_value(a->j), out);
    return ct_fail(c, "bad operand type for unary %c: '%s'", plus ? '+' : '-', cv_type(a));
}

int ct_contains(ct_ctx *c, const ct_val *item, const ct_val *seq, int *r)
{
    *r = 0;
    if (seq->kind == CV_UNDEF) return 0; /* Jinja's Undefined iterates as empty */
    if (cv_is_str(seq)) {
        if (!cv_is_str(item)) return ct_fail(c, "'in <string>' requires string as left operand, not %s", cv_type(item));
        size_t ln = json_string_length(item->j);
        *r = ln == 0 || memmem(json_string_value(seq->j), json_string_length(seq->j), json_string_value(item->j), ln);
        return ct_charge(c, json_string_length(seq->j) / 64);
    }
    if (cv_is(seq, JSON_ARRAY)) {
        size_t i;
        json_t *x;
        json_array_foreach(seq->j, i, x)
        {
            ct_val e = cv_elem(c, x);
            *r = cv_eq(&e, item);
            cv_drop(&e);
            if (*r) break;
        }
        return ct_charge(c, json_array_size(seq->j));
    }
    if (cv_is(seq, JSON_OBJECT)) {
        if (cv_is_str(item))
            *r = json_object_getn(seq->j, json_string_value(item->j), json_string_length(item->j)) != NULL;
        return 0;
    }
    return ct_fail(c, "argument of type '%s' is not iterable", cv_type(seq));
}

static int loop_attr(ct_ctx *c, const ct_loop *l, const char *name, ct_val *out)
{
    static const char *const ints[] = {"index", "index0", "revindex", "revindex0", "length", "depth", "depth0"};
    long long v[] = {(long long)l->i + 1,
                     (long long)l->i,
                     (long long)(l->n - l->i),
                     (long long)(l->n - l->i - 1),
                     (long long)l->n,
                     1,
                     0};
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
        if (!strcmp(name, ints[k])) return new_int(c, v[k], out);
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        *out = cv_of(json_boolean(name[0] == 'f' ? l->i == 0 : l->i + 1 == l->n));
        return 0;
    }
    if (!strcmp(name, "previtem")) {
        *out = l->i ? cv_elem(c, json_array_get(l->items, l->i - 1)) : cv_undef(name, 9);
        return 0;
    }
    if (!strcmp(name, "nextitem")) {
        *out = l->i + 1 < l->n ? cv_elem(c, json_array_get(l->items, l->i + 1)) : cv_undef(name, 9);
        return 0;
    }
    *out = cv_undef(name, 9);
    return 0;
}

int ct_getattr(ct_ctx *c, const ct_val *obj, const char *name, ct_val *out)
{
    if (obj->kind == CV_UNDEF) return cv_undef_fail(c, obj);
    if (obj->kind == CV_LOOP) return loop_attr(c, obj->p, name, out);
    if (obj->kind == CV_NS || cv_is(obj, JSON_OBJECT)) {
        json_t *x = json_object_get(obj->j, name);
        *out = x ? cv_elem(c, x) : cv_undef(name, cv_owner(obj));
        return 0;
    }
    *out = cv_undef(name, cv_owner(obj));
    return 0;
}

/* Byte offsets of every code point of s, and of its end: (*offs)[0..*n]. */
static int cp_offsets(ct_ctx *c, const char *s, size_t len, size_t **offs, size_t *n)
{
    size_t count = ct_u8_count(s, len);
    if (ct_charge(c, count / 16)) return -1;
    size_t *o = malloc((count + 1) * sizeof *o);
    if (!o) return ct_fail(c, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < len; i = ct_u8_next(s, len, i)) o[k++] = i;
    o[k] = len;
    *offs = o;
    *n = count;
    return 0;
}

int ct_getitem(ct_ctx *c, const ct_val *obj, const ct_val *key, ct_val *out)
{
    long long i;
    if (obj->kind == CV_UNDEF) return cv_undef_fail(c, obj);
    if (key->kind == CV_UNDEF) return cv_undef_fail(c, key);
    *out = cv_undef(NULL, cv_owner(obj));
    if ((cv_is(obj, JSON_ARRAY) || cv_is_str(obj)) && cv_int(key, &i)) {
        if (cv_is(obj, JSON_ARRAY)) {
            long long n = (long long)json_array_size(obj->j);
            if (i < 0) i += n;
            if (i >= 0 && i < n) *out = cv_elem(c, json_array_get(obj->j, (size_t)i));
            return 0;
        }
        const char *s = json_string_value(obj->j);
        size_t *offs, n;
        if (cp_offsets(c, s, json_string_length(obj->j), &offs, &n)) return -1;
        if (i < 0) i += (long long)n;
        int rc = 0;
        if (i >= 0 && i < (long long)n) rc = cv_string(c, s + offs[i], offs[i + 1] - offs[i], out);
        free(offs);
        return rc;
    }
    if (cv_is_str(key) && (obj->kind == CV_NS || obj->kind == CV_LOOP || cv_is(obj, JSON_OBJECT))) {
        if (obj->kind == CV_LOOP) return loop_attr(c, obj->p, json_string_value(key->j), out);
        json_t *x = json_object_getn(obj->j, json_string_value(key->j), json_string_length(key->j));
        if (x) *out = cv_elem(c, x);
    }
    return 0;
}

/* Python's slice.indices(). */
static int slice_index(ct_ctx *c, const ct_val *v, long long *out)
{
    if (!v || cv_is(v, JSON_NULL)) return 0;
    if (!cv_int(v, out)) return ct_fail(c, "slice indices must be integers or None");
    return 1;
}

int ct_slice(ct_ctx *c, const ct_val *obj, const ct_val *start, const ct_val *stop, const ct_val *step, ct_val *out)
{
    if (obj->kind == CV_UNDEF) return cv_undef_fail(c, obj);
    long long a = 0, b = 0, st = 1;
    int ha, hb, hs;
    if ((ha = slice_index(c, start, &a)) < 0 || (hb = slice_index(c, stop, &b)) < 0 ||
        (hs = slice_index(c, step, &st)) < 0)
        return -1;
    /* Jinja compiles a slice to Python's own subscript, so a slice of anything else fails */
    if (cv_is(obj, JSON_OBJECT)) return ct_fail(c, "unhashable type: 'slice'");
    if (!cv_is(obj, JSON_ARRAY) && !cv_is_str(obj)) return ct_fail(c, "'%s' object is not subscriptable", cv_type(obj));
    if (hs && st == 0) return ct_fail(c, "slice step cannot be zero");
    if (st == LLONG_MIN) st = -LLONG_MAX;
    int is_str = cv_is_str(obj);
    size_t *offs = NULL, count;
    const char *s = is_str ? json_string_value(obj->j) : NULL;
    if (is_str) {
        if (cp_offsets(c, s, json_string_length(obj->j), &offs, &count)) return -1;
    } else {
        count = json_array_size(obj->j);
    }
    long long n = (long long)count, lower = st > 0 ? 0 : -1, upper = st > 0 ? n : n - 1;
    if (!ha)
        a = st < 0 ? upper : lower;
    else if (a < 0)
        a = a + n < lower ? lower : a + n;
    else if (a > upper)
        a = upper;
    if (!hb)
        b = st < 0 ? lower : upper;
    else if (b < 0)
        b = b + n < lower ? lower : b + n;
    else if (b > upper)
        b = upper;
    int rc = 0;
    if (is_str) {
        ct_buf buf = {0};
        for (long long i = a; !rc && (st > 0 ? i < b : i > b); i += st)
            rc = ct_buf_put(c, &buf, s + offs[i], offs[i + 1] - offs[i]);
        if (!rc) rc = cv_string(c, buf.p, buf.n, out);
        free(buf.p);
        free(offs);
        return rc;
    }
    if (ct_charge(c, count)) return -1;
    json_t *arr = json_array();
    for (long long i = a; arr && (st > 0 ? i < b : i > b); i += st)
        if (json_array_append(arr, json_array_get(obj->j, (size_t)i))) json_decref(arr), arr = NULL;
    if (arr && ct_is_tuple(c, obj->j) && ct_mark_tuple(c, arr))
        json_decref(arr), arr = NULL; /* a tuple's slice is one */
    *out = cv_of(arr);
    return cv_ok(c, out);
}

int ct_iter(ct_ctx *c, const ct_val *v, json_t **items)
{
    *items = NULL;
    if (cv_is(v, JSON_ARRAY)) {
        if (ct_charge(c, json_array_size(v->j))) return -1;
        *items = json_incref(v->j);
        return 0;
    }
    json_t *arr = json_array();
    if (!arr) return ct_fail(c, "out of memory");
    int bad = 0;
    if (v->kind == CV_UNDEF) {
        /* iterates as empty, as Jinja's Undefined does */
    } else if (cv_is(v, JSON_OBJECT)) {
        const char *k;
        json_t *x;
        json_object_foreach(v->j, k, x) bad |= json_array_append_new(arr, json_string_nocheck(k));
    } else if (cv_is_str(v)) {
        const char *s = json_string_value(v->j);
        size_t n = json_string_length(v->j);
        for (size_t i = 0; i < n && !bad;) {
            size_t e = ct_u8_next(s, n, i);
            bad |= json_array_append_new(arr, json_stringn_nocheck(s + i, e - i));
            i = e;
        }
    } else {
        json_decref(arr);
        return ct_fail(c, "'%s' object is not iterable", cv_type(v));
    }
    if (bad) {
        json_decref(arr);
        return ct_fail(c, "out of memory");
    }
    if (ct_charge(c, json_array_size(arr))) {
        json_decref(arr);
        return -1;
    }
    *items = arr;
    return 0;
}

int ct_length(ct_ctx *c, const ct_val *v, long long *n)
{
    if (v->kind == CV_UNDEF)
        *n = 0;
    else if (cv_is_str(v))
        *n = (long long)ct_u8_count(json_string_value(v->j), json_string_length(v->j));
    else if (cv_is(v, JSON_ARRAY))
        *n = (long long)json_array_size(v->j);
    else if (cv_is(v, JSON_OBJECT))
        *n = (long long)json_object_size(v->j);
    else if (v->kind == CV_LOOP)
        *n = (long long)((const ct_loop *)v->p)->n;
    else
        return ct_fail(c, "object of type '%s' has no len()", cv_type(v));
    return 0;
}
