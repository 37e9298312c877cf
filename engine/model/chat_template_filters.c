/* chat_template_filters.c — the filter table and the filters on single
 * values (default, int, float, round, abs, length, string and case filters,
 * trim, replace, escape, indent, wordcount, attr, safe) with Jinja's
 * semantics (jinja2/filters.py), including how each treats an undefined
 * value, and transformers' tojson (json.dumps with ensure_ascii=False, no
 * HTML escaping); the sequence filters are chat_template_lists.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "engine/model/chat_template_impl.h"

const ct_val *ct_arg(const ct_args *a, size_t i, const char *name)
{
    if (i < a->npos) return &a->pos[i];
    for (size_t k = 0; name && k < a->nkw; k++)
        if (!strcmp(a->kwn[k], name)) return &a->kw[k];
    return NULL;
}

int ct_args_check(ct_ctx *c, const ct_args *a, const char *fname, const char *const *params)
{
    size_t np = 0;
    while (params[np]) np++;
    if (a->npos > np) return ct_fail(c, "%s() takes at most %zu argument(s) (%zu given)", fname, np, a->npos);
    for (size_t k = 0; k < a->nkw; k++) {
        size_t p = 0;
        while (p < np && strcmp(params[p], a->kwn[k])) p++;
        if (p == np) return ct_fail(c, "%s() got an unexpected keyword argument '%s'", fname, a->kwn[k]);
        if (p < a->npos) return ct_fail(c, "%s() got multiple values for argument '%s'", fname, a->kwn[k]);
    }
    return 0;
}

/* ---- arguments ---- */

int ct_set(ct_ctx *c, ct_val *out, json_t *j)
{
    *out = cv_of(j);
    return cv_ok(c, out);
}

int ct_bool_arg(const ct_args *a, size_t i, const char *name, int dflt)
{
    const ct_val *v = ct_arg(a, i, name);
    return v ? cv_truthy(v) : dflt;
}

int ct_str_arg(ct_ctx *c, const ct_args *a, size_t i, const char *name, const char *fname, const ct_val **out)
{
    *out = ct_arg(a, i, name);
    if (*out && !cv_is_str(*out)) return ct_fail(c, "%s(): '%s' must be a string, not %s", fname, name, cv_type(*out));
    return 0;
}

/* ---- filters ---- */

static int f_default(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("default_value", "boolean");
    const ct_val *d = ct_arg(a, 0, "default_value");
    int use = v->kind == CV_UNDEF || (ct_bool_arg(a, 1, "boolean", 0) && !cv_truthy(v));
    if (!use)
        *out = cv_copy(v);
    else if (d)
        *out = cv_copy(d);
    else
        return cv_string(c, "", 0, out);
    return 0;
}

static int f_tojson(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("ensure_ascii", "indent", "separators", "sort_keys");
    ct_json_opts o = {.ensure_ascii = ct_bool_arg(a, 0, "ensure_ascii", 0),
                      .sort_keys = ct_bool_arg(a, 3, "sort_keys", 0)};
    const ct_val *ind = ct_arg(a, 1, "indent"), *sep = ct_arg(a, 2, "separators");
    char spaces[257];
    long long n;
    if (ind && cv_is_str(ind)) {
        o.indent = json_string_value(ind->j);
        o.indent_len = json_string_length(ind->j);
    } else if (ind && cv_int(ind, &n) && !cv_is(ind, JSON_TRUE) && !cv_is(ind, JSON_FALSE)) {
        if (n > 256) return ct_fail(c, "tojson(): indent over 256");
        if (n < 0) n = 0;
        memset(spaces, ' ', (size_t)n);
        o.indent = spaces;
        o.indent_len = (size_t)n;
    } else if (ind && !cv_is(ind, JSON_NULL)) {
        return ct_fail(c, "tojson(): indent must be an integer or a string");
    }
    if (sep && !cv_is(sep, JSON_NULL)) {
        json_t *i0, *i1;
        if (!cv_is(sep, JSON_ARRAY) || json_array_size(sep->j) != 2 ||
            !json_is_string(i0 = json_array_get(sep->j, 0)) || !json_is_string(i1 = json_array_get(sep->j, 1)))
            return ct_fail(c, "tojson(): separators must be two strings");
        o.item_sep = json_string_value(i0), o.item_sep_len = json_string_length(i0);
        o.key_sep = json_string_value(i1), o.key_sep_len = json_string_length(i1);
    }
    ct_buf b = {0};
    int rc = ct_tojson(c, v, &o, &b) || cv_string(c, b.p, b.n, out) ? -1 : 0;
    free(b.p);
    return rc;
}

static int f_int(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("default", "base");
    const ct_val *d = ct_arg(a, 0, "default"), *bv = ct_arg(a, 1, "base");
    long long i, base = 10;
    if (v->kind == CV_UNDEF) return cv_undef_fail(c, v);
    if (bv && !cv_int(bv, &base)) return ct_fail(c, "int(): base must be an integer");
    if (cv_int(v, &i)) return ct_set(c, out, json_integer(i));
    if (cv_is(v, JSON_REAL)) {
        double x = json_real_value(v->j);
        if (isfinite(x) && fabs(x) < 9.2e18) return ct_set(c, out, json_integer((long long)x));
    } else if (cv_is_str(v) && base >= 2 && base <= 36) {
        /* int(s, base), else int(float(s)), as Jinja's do_int */
        char buf[128];
        size_t n = 0;
        const char *s = json_string_value(v->j);
        size_t len = json_string_length(v->j), st = ct_lstrip_len(s, len), en = ct_rstrip_len(s, len);
        for (size_t k = st; k < en && n + 1 < sizeof buf; k++)
            if (s[k] != '_' || (k > st && k + 1 < en)) buf[n++] = s[k];
        buf[n] = '\0';
        if (n && en > st && en - st < sizeof buf) {
            char *end;
            int b = (int)base;
            const char *p = buf + (buf[0] == '-' || buf[0] == '+');
            if (b == 16 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) b = 16;
            long long r = strtoll(buf, &end, b);
            if (!*end) return ct_set(c, out, json_integer(r));
            double x = strtod(buf, &end);
            if (!*end && isfinite(x) && fabs(x) < 9.2e18 && strchr(buf, 'x') == NULL && strchr(buf, 'X') == NULL)
                return ct_set(c, out, json_integer((long long)x));
        }
    }
    if (d)
        *out = cv_copy(d);
    else
        return ct_set(c, out, json_integer(0));
    return 0;
}

static int f_float(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("default");
    const ct_val *d = ct_arg(a, 0, "default");
    if (v->kind == CV_UNDEF) return cv_undef_fail(c, v);
    if (cv_is_num(v)) return ct_set(c, out, json_real(cv_float(v)));
    if (cv_is_str(v)) {
        const char *s = json_string_value(v->j);
        size_t len = json_string_length(v->j), st = ct_lstrip_len(s, len), en = ct_rstrip_len(s, len);
        char buf[128];
        if (en > st && en - st < sizeof buf) {
            memcpy(buf, s + st, en - st);
            buf[en - st] = '\0';
            char *end;
            double x = strtod(buf, &end);
            int hex = strchr(buf, 'x') || strchr(buf, 'X');
            if (!*end && !hex) return ct_set(c, out, json_real(x));
        }
    }
    if (d)
        *out = cv_copy(d);
    else
        return ct_set(c, out, json_real(0));
    return 0;
}

static int f_round(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("precision", "method");
    const ct_val *pv = ct_arg(a, 0, "precision"), *mv;
    long long prec = 0, i;
    if (pv && !cv_int(pv, &prec)) return ct_fail(c, "round(): precision must be an integer");
    if (ct_str_arg(c, a, 1, "method", name, &mv)) return -1;
    const char *method = mv ? json_string_value(mv->j) : "common";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return ct_fail(c, "round(): method must be common, ceil or floor");
    if (!cv_is_num(v)) return ct_fail(c, "type %s doesn't define __round__ method", cv_type(v));
    if (!strcmp(method, "common") && cv_int(v, &i) && prec >= 0) return ct_set(c, out, json_integer(i));
    double x = cv_float(v), r;
    if (prec > 300) prec = 300;
    if (prec < -300) prec = -300;
    if (!strcmp(method, "common")) {
        /* Python's round: correctly rounded, ties to even; glibc's printf rounds the same way */
        char buf[512];
        if (prec > 22 || fabs(x) >= 1e22 || !isfinite(x)) {
            r = x; /* no digits to round away */
        } else if (prec >= 0) {
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            r = strtod(buf, NULL);
        } else {
            double m = pow(10, (double)-prec);
            r = nearbyint(x / m) * m;
        }
        if (x != 0 && r == 0) r = copysign(0.0, x);
    } else {
        double m = pow(10, (double)prec);
        r = (method[0] == 'c' ? ceil(x * m) : floor(x * m)) / m;
    }
    return ct_set(c, out, json_real(r));
}

static int f_length(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS(NULL);
    long long n;
    if (ct_length(c, v, &n)) return -1;
    return ct_set(c, out, json_integer(n));
}

static int f_abs(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS(NULL);
    long long i;
    if (cv_int(v, &i)) {
        if (i == (long long)(-9223372036854775807LL - 1)) return ct_fail(c, "integer overflow (beyond 64 bits)");
        return ct_set(c, out, json_integer(i < 0 ? -i : i));
    }
    if (cv_is(v, JSON_REAL)) return ct_set(c, out, json_real(fabs(json_real_value(v->j))));
    return ct_fail(c, "bad operand type for abs(): '%s'", cv_type(v));
}

/* filters that work on str(value) */
static int f_text(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    ct_val s;
    if (!strcmp(name, "trim"))
        CT_CHECK_ARGS("chars");
    else if (!strcmp(name, "replace"))
        CT_CHECK_ARGS("old", "new", "count");
    else
        CT_CHECK_ARGS(NULL);
    if (cv_to_string(c, v, &s)) return -1;
    const char *p = json_string_value(s.j);
    size_t n = json_string_length(s.j);
    int rc;
    if (!strcmp(name, "upper"))
        rc = ct_case(c, p, n, CT_CASE_UPPER, out);
    else if (!strcmp(name, "lower"))
        rc = ct_case(c, p, n, CT_CASE_LOWER, out);
    else if (!strcmp(name, "capitalize"))
        rc = ct_case(c, p, n, CT_CASE_CAPITALIZE, out);
    else if (!strcmp(name, "title"))
        rc = ct_case(c, p, n, CT_CASE_JINJA_TITLE, out);
    else if (!strcmp(name, "string"))
        *out = cv_copy(&s), rc = 0;
    else if (!strcmp(name, "trim")) {
        int found;
        ct_args m = {.pos = (ct_val *)ct_arg(a, 0, "chars"), .npos = ct_arg(a, 0, "chars") != NULL};
        rc = ct_method(c, &s, "strip", &m, out, &found);
    } else if (!strcmp(name, "replace")) {
        int found;
        const ct_val *args[3] = {ct_arg(a, 0, "old"), ct_arg(a, 1, "new"), ct_arg(a, 2, "count")};
        ct_val pos[3];
        size_t np = 0;
        for (; np < 3 && args[np]; np++) pos[np] = *args[np];
        ct_args m = {.pos = pos, .npos = np};
        rc = np < 2 ? ct_fail(c, "replace() needs old and new") : ct_method(c, &s, "replace", &m, out, &found);
    } else { /* escape, e, forceescape */
        ct_buf b = {0};
        rc = 0;
        for (size_t i = 0; i < n && !rc; i++) {
            const char *r = p[i] == '&'    ? "&amp;"
                            : p[i] == '<'  ? "&lt;"
                            : p[i] == '>'  ? "&gt;"
                            : p[i] == '"'  ? "&#34;"
                            : p[i] == '\'' ? "&#39;"
                                           : NULL;
            rc = r ? ct_buf_puts(c, &b, r) : ct_buf_put(c, &b, p + i, 1);
        }
        if (!rc) rc = cv_string(c, b.p, b.n, out);
        free(b.p);
    }
    cv_drop(&s);
    return rc;
}

/* Python's str.splitlines line ends */
static size_t line_end(const char *s, size_t n, size_t i, size_t *next)
{
    while (i < n) {
        unsigned char b = (unsigned char)s[i];
        if (b == '\n' || b == '\v' || b == '\f' || (b >= 0x1C && b <= 0x1E)) {
            *next = i + 1;
            return i;
        }
        if (b == '\r') {
            *next = i + 1 < n && s[i + 1] == '\n' ? i + 2 : i + 1;
            return i;
        }
        int32_t cp = b >= 0x80 ? ct_u8_at(s, n, i) : 0;
        if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
            *next = ct_u8_next(s, n, i);
            return i;
        }
        i = b >= 0x80 ? ct_u8_next(s, n, i) : i + 1;
    }
    *next = n;
    return n;
}

static int f_indent(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("width", "first", "blank");
    const ct_val *w = ct_arg(a, 0, "width");
    char spaces[257];
    const char *ind = spaces;
    size_t ilen = 4;
    long long k;
    memset(spaces, ' ', 4);
    if (w && cv_is_str(w))
        ind = json_string_value(w->j), ilen = json_string_length(w->j);
    else if (w && cv_int(w, &k)) {
        if (k > 256) return ct_fail(c, "indent(): width over 256");
        ilen = k < 0 ? 0 : (size_t)k;
        memset(spaces, ' ', ilen);
    } else if (w)
        return ct_fail(c, "indent(): width must be an integer or a string");
    int first = ct_bool_arg(a, 1, "first", 0), blank = ct_bool_arg(a, 2, "blank", 0);
    if (v->kind == CV_UNDEF) return cv_undef_fail(c, v);
    /* Jinja's do_indent starts with s += "\n": only a string works */
    if (!cv_is_str(v)) return ct_fail(c, "unsupported operand type(s) for +=: '%s' and 'str'", cv_type(v));
    ct_val s = cv_copy(v);
    const char *p = json_string_value(s.j);
    size_t n = json_string_length(s.j);
    ct_buf b = {0};
    int rc = first ? ct_buf_put(c, &b, ind, ilen) : 0;
    /* Jinja appends "\n" and joins s.splitlines(): the last line end is dropped */
    size_t i = 0, nl = 0;
    for (int line = 0; !rc && i <= n; line++) {
        size_t next, e = line_end(p, n, i, &next);
        if (e == n && i == n && line > 0) break;
        if (line) {
            rc = ct_buf_puts(c, &b, "\n");
            if (!rc && (blank || e > i)) rc = ct_buf_put(c, &b, ind, ilen);
        }
        if (!rc) rc = ct_buf_put(c, &b, p + i, e - i);
        nl++;
        if (e == n) break;
        i = next;
    }
    if (!rc) rc = cv_string(c, b.p, b.n, out);
    free(b.p);
    cv_drop(&s);
    return rc;
}

static int is_word_cp(int32_t cp)
{
    if (cp == '_') return 1;
    if (cp < 0) return 0;
    utf8proc_category_t k = utf8proc_category(cp);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

static int f_wordcount(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS(NULL);
    ct_val s;
    if (cv_to_string(c, v, &s)) return -1;
    const char *p = json_string_value(s.j);
    size_t n = json_string_length(s.j);
    long long words = 0;
    int in = 0;
    for (size_t i = 0; i < n; i = ct_u8_next(p, n, i)) {
        int w = is_word_cp(ct_u8_at(p, n, i));
        words += w && !in;
        in = w;
    }
    cv_drop(&s);
    return ct_set(c, out, json_integer(words));
}

static int f_attr(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("name");
    const ct_val *n;
    if (ct_str_arg(c, a, 0, "name", name, &n)) return -1;
    if (!n) return ct_fail(c, "attr() needs a name");
    return ct_getattr(c, v, json_string_value(n->j), out);
}

/* safe: Jinja's Markup(value), a string (whose escaping we never apply) */
static int f_safe(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS(NULL);
    return cv_to_string(c, v, out);
}

static const struct {
    const char *name;
    ct_filter_fn fn;
} FILTERS[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"capitalize", f_text},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", ctf_dictsort},
    {"e", f_text},
    {"escape", f_text},
    {"first", ctf_first_last},
    {"float", f_float},
    {"forceescape", f_text},
    {"indent", f_indent},
    {"int", f_int},
    {"items", ctf_items},
    {"join", ctf_join},
    {"last", ctf_first_last},
    {"length", f_length},
    {"list", ctf_list},
    {"lower", f_text},
    {"map", ctf_map},
    {"max", ctf_minmax},
    {"min", ctf_minmax},
    {"reject", ctf_select},
    {"rejectattr", ctf_select},
    {"replace", f_text},
    {"reverse", ctf_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", ctf_select},
    {"selectattr", ctf_select},
    {"sort", ctf_sort},
    {"string", f_text},
    {"sum", ctf_sum},
    {"title", f_text},
    {"tojson", f_tojson},
    {"trim", f_text},
    {"unique", ctf_unique},
    {"upper", f_text},
    {"wordcount", f_wordcount},
};

static ct_filter_fn find_filter(const char *name)
{
    for (size_t k = 0; k < sizeof FILTERS / sizeof FILTERS[0]; k++)
        if (!strcmp(FILTERS[k].name, name)) return FILTERS[k].fn;
    return NULL;
}

int ct_filter_known(const char *name) { return find_filter(name) != NULL; }

int ct_filter(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    ct_filter_fn fn = find_filter(name);
    if (!fn) return ct_fail(c, "no filter named '%s'", name);
    if (ct_charge(c, 1)) return -1;
    return fn(c, name, v, a, out);
}
