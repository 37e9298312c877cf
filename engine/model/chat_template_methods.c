/* chat_template_methods.c — the Python methods templates call on values
 * (str: startswith, split, strip, replace, find, join, format, ...; dict:
 * items, keys, values, get; list: index, count; loop.cycle), Unicode case
 * mapping through utf8proc, and the globals: range, namespace, dict,
 * raise_exception and strftime_now. Methods that would mutate a value do not
 * exist, as in transformers' immutable sandbox. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "engine/model/chat_template_impl.h"

#define MAX_RANGE 100000 /* Jinja's sandbox refuses longer ranges */

/* ---- case ---- */

static int is_cased(int32_t cp)
{
    if (cp < 0) return 0;
    utf8proc_category_t k = utf8proc_category(cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

/* Jinja's title filter starts a word after any of -, whitespace, (, {, [, < */
static int jinja_word_sep(const char *s, size_t n, size_t i)
{
    return strchr("-({[<", s[i]) != NULL && s[i] != '\0' ? 1 : ct_space_at(s + i, n - i) > 0;
}

int ct_case(ct_ctx *c, const char *s, size_t n, int how, ct_val *out)
{
    ct_buf b = {0};
    int rc = 0, prev_cased = 0, start = 1;
    for (size_t i = 0; i < n && !rc;) {
        size_t next = ct_u8_next(s, n, i);
        int32_t cp = ct_u8_at(s, n, i), m = cp;
        if (cp < 0) {
            rc = ct_buf_put(c, &b, s + i, 1);
            i = next;
            continue;
        }
        switch (how) {
        case CT_CASE_UPPER: m = utf8proc_toupper(cp); break;
        case CT_CASE_LOWER: m = utf8proc_tolower(cp); break;
        case CT_CASE_TITLE: /* Python's str.title: a cased run starts in title case */
            m = prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
            prev_cased = is_cased(cp);
            break;
        case CT_CASE_CAPITALIZE: m = start ? utf8proc_totitle(cp) : utf8proc_tolower(cp); break;
        default: /* CT_CASE_JINJA_TITLE */
            if (jinja_word_sep(s, n, i)) {
                start = 2; /* the next non-separator starts a word */
            } else {
                m = start ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
                start = 0;
            }
            break;
        }
        if (how != CT_CASE_JINJA_TITLE) start = 0;
        char enc[4];
        rc = ct_buf_put(c, &b, enc, ct_u8_put(m, enc));
        i = next;
    }
    if (!rc) rc = cv_string(c, b.p, b.n, out);
    free(b.p);
    return rc;
}

/* ---- str methods ---- */

static const char *sv(const ct_val *v) { return json_string_value(v->j); }
static size_t sl(const ct_val *v) { return json_string_length(v->j); }

static int need_str(ct_ctx *c, const char *name, const ct_val *v, int allow_none)
{
    if (!v || cv_is_str(v) || (allow_none && cv_is(v, JSON_NULL))) return 0;
    return ct_fail(c, "%s() argument must be str%s, not %s", name, allow_none ? " or None" : "", cv_type(v));
}

static int int_arg(ct_ctx *c, const char *name, const ct_val *v, long long dflt, long long *out)
{
    *out = dflt;
    if (!v || cv_is(v, JSON_NULL)) return 0;
    if (!cv_int(v, out)) return ct_fail(c, "%s(): '%s' object cannot be interpreted as an integer", name, cv_type(v));
    return 0;
}

static int push_str(ct_ctx *c, json_t *arr, const char *p, size_t n)
{
    if (ct_charge(c, 1 + n / 64) || json_array_append_new(arr, json_stringn_nocheck(p, n)))
        return c->steps > CT_MAX_STEPS ? -1 : ct_fail(c, "out of memory");
    return 0;
}

/* The start of the code point that ends at byte i. */
static size_t prev_cp(const char *s, size_t n, size_t i)
{
    size_t st = i - 1;
    while (st > 0 && i - st < 4 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
    return ct_u8_next(s, n, st) == i ? st : i - 1;
}

static int ws_before(const char *s, size_t n, size_t i)
{
    size_t st = prev_cp(s, n, i);
    return ct_space_at(s + st, n - st) == i - st;
}

/* The last occurrence of sep ending at or before j. */
static const char *rfind(const char *s, size_t j, const char *sep, size_t m)
{
    for (size_t k = j >= m ? j - m + 1 : 0; k-- > 0;)
        if (!memcmp(s + k, sep, m)) return s + k;
    return NULL;
}

/* Python's str.split / rsplit; sep NULL splits on runs of whitespace. The
 * pieces go into arr (rsplit finds them right to left, then reverses). */
static int split(ct_ctx *c, const char *s, size_t n, const char *sep, size_t m, long long max, int right, json_t *arr)
{
    if (sep && !m) return ct_fail(c, "empty separator");
    long long splits = 0;
    int rc = 0;
    if (!right) {
        size_t i = sep ? 0 : ct_lstrip_len(s, n);
        while (!rc) {
            if (!sep && i >= n) break;
            if (max >= 0 && splits == max) {
                rc = push_str(c, arr, s + i, n - i);
                break;
            }
            size_t j;
            if (sep) {
                const char *hit = memmem(s + i, n - i, sep, m);
                if (!hit) {
                    rc = push_str(c, arr, s + i, n - i);
                    break;
                }
                j = (size_t)(hit - s);
            } else {
                j = i;
                while (j < n && !ct_space_at(s + j, n - j)) j = ct_u8_next(s, n, j);
            }
            rc = push_str(c, arr, s + i, j - i);
            splits++;
            i = sep ? j + m : j + ct_lstrip_len(s + j, n - j);
        }
    } else {
        size_t j = sep ? n : ct_rstrip_len(s, n);
        while (!rc) {
            if (!sep && j == 0) break;
            if (max >= 0 && splits == max) {
                rc = push_str(c, arr, s, j);
                break;
            }
            size_t k;
            if (sep) {
                const char *hit = rfind(s, j, sep, m);
                if (!hit) {
                    rc = push_str(c, arr, s, j);
                    break;
                }
                k = (size_t)(hit - s);
                rc = push_str(c, arr, hit + m, j - k - m);
            } else {
                k = j;
                while (k > 0 && !ws_before(s, n, k)) k = prev_cp(s, n, k);
                rc = push_str(c, arr, s + k, j - k);
                while (k > 0 && ws_before(s, n, k)) k = prev_cp(s, n, k);
            }
            splits++;
            j = k;
        }
        for (size_t a = 0, b = json_array_size(arr); !rc && a + 1 < b; a++, b--) {
            json_t *x = json_incref(json_array_get(arr, a)), *y = json_incref(json_array_get(arr, b - 1));
            json_array_set_new(arr, a, y);
            json_array_set_new(arr, b - 1, x);
        }
    }
    return rc;
}

/* Python's strip family; chars NULL strips whitespace. */
static int strip(ct_ctx *c, const ct_val *s, const ct_val *chars, int left, int right, ct_val *out)
{
    const char *p = sv(s);
    size_t n = sl(s), a = 0, b = n;
    if (!chars || cv_is(chars, JSON_NULL)) {
        if (left) a = ct_lstrip_len(p, n);
        if (right) b = a + ct_rstrip_len(p + a, n - a);
        return cv_string(c, p + a, b - a, out);
    }
    const char *set = sv(chars);
    size_t setn = sl(chars);
    /* whether the code point at i is one of chars */
    for (;;) {
        if (!left || a >= b) break;
        size_t e = ct_u8_next(p, n, a);
        if (!memmem(set, setn, p + a, e - a)) break;
        a = e;
    }
    while (right && b > a) {
        size_t st = prev_cp(p, n, b);
        if (st < a || !memmem(set, setn, p + st, b - st)) break;
        b = st;
    }
    return cv_string(c, p + a, b - a, out);
}

static size_t cp_index(const char *s, size_t byte) { return ct_u8_count(s, byte); }

/* The byte offset of code point index k (clamped), Python-style negative k counts from the end. */
static size_t byte_at(const char *s, size_t n, long long k)
{
    long long count = (long long)ct_u8_count(s, n);
    if (k < 0) k += count;
    if (k <= 0) return 0;
    if (k >= count) return n;
    size_t i = 0;
    for (long long j = 0; j < k; j++) i = ct_u8_next(s, n, i);
    return i;
}

static int str_find(ct_ctx *c, const char *name, const ct_val *s, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("sub", "start", "end");
    const ct_val *sub = ct_arg(a, 0, "sub");
    long long st, en;
    if (!sub || need_str(c, name, sub, 0) || int_arg(c, name, ct_arg(a, 1, "start"), 0, &st) ||
        int_arg(c, name, ct_arg(a, 2, "end"), (long long)ct_u8_count(sv(s), sl(s)), &en))
        return sub ? -1 : ct_fail(c, "%s() needs a substring", name);
    const char *p = sv(s);
    size_t n = sl(s), lo = byte_at(p, n, st), hi = byte_at(p, n, en), m = sl(sub);
    long long found = -1;
    int last = name[0] == 'r';
    if (ct_charge(c, n / 64)) return -1;
    for (size_t i = lo; hi >= lo && i + m <= hi; i = ct_u8_next(p, n, i)) {
        if (!memcmp(p + i, sv(sub), m)) {
            found = (long long)cp_index(p, i);
            if (!last) break;
        }
        if (i == n) break;
    }
    if (found < 0 && strstr(name, "index")) return ct_fail(c, "substring not found");
    return ct_set(c, out, json_integer(found));
}

static int str_replace(ct_ctx *c, const char *name, const ct_val *s, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("old", "new", "count");
    const ct_val *old = ct_arg(a, 0, "old"), *new = ct_arg(a, 1, "new");
    long long count;
    if (!old || !new) return ct_fail(c, "replace() needs old and new");
    if (need_str(c, name, old, 0) || need_str(c, name, new, 0) || int_arg(c, name, ct_arg(a, 2, "count"), -1, &count))
        return -1;
    const char *p = sv(s);
    size_t n = sl(s), on = sl(old);
    ct_buf b = {0};
    int rc = 0;
    long long done = 0;
    for (size_t i = 0; i <= n && !rc;) {
        if (count >= 0 && done >= count) {
            rc = ct_buf_put(c, &b, p + i, n - i);
            break;
        }
        if (!on) {
            /* "" matches before each code point and at the end */
            rc = ct_buf_put(c, &b, sv(new), sl(new));
            done++;
            if (i == n) break;
            size_t e = ct_u8_next(p, n, i);
            if (!rc) rc = ct_buf_put(c, &b, p + i, e - i);
            i = e;
            continue;
        }
        const char *hit = memmem(p + i, n - i, sv(old), on);
        if (!hit) {
            rc = ct_buf_put(c, &b, p + i, n - i);
            break;
        }
        rc = ct_buf_put(c, &b, p + i, (size_t)(hit - (p + i))) || ct_buf_put(c, &b, sv(new), sl(new));
        done++;
        i = (size_t)(hit - p) + on;
    }
    if (!rc) rc = cv_string(c, b.p, b.n, out);
    free(b.p);
    return rc;
}

static int str_count(ct_ctx *c, const char *name, const ct_val *s, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("sub");
    const ct_val *sub = ct_arg(a, 0, "sub");
    if (!sub) return ct_fail(c, "count() needs a substring");
    if (need_str(c, name, sub, 0)) return -1;
    const char *p = sv(s);
    size_t n = sl(s), m = sl(sub);
    long long k = 0;
    if (!m) k = (long long)ct_u8_count(p, n) + 1;
    for (size_t i = 0; m && i + m <= n;) {
        const char *hit = memmem(p + i, n - i, sv(sub), m);
        if (!hit) break;
        k++;
        i = (size_t)(hit - p) + m;
    }
    return ct_set(c, out, json_integer(k));
}

static int str_join(ct_ctx *c, const char *name, const ct_val *s, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("iterable");
    const ct_val *it = ct_arg(a, 0, "iterable");
    json_t *items;
    if (!it) return ct_fail(c, "join() needs an iterable");
    if (ct_iter(c, it, &items)) return -1;
    ct_buf b = {0};
    int rc = 0;
    for (size_t i = 0; !rc && i < json_array_size(items); i++) {
        json_t *x = json_array_get(items, i);
        if (!json_is_string(x)) {
            ct_val e = cv_elem(c, x);
            rc = ct_fail(c, "sequence item %zu: expected str instance, %s found", i, cv_type(&e));
            cv_drop(&e);
            break;
        }
        rc = (i && ct_buf_put(c, &b, sv(s), sl(s))) || ct_buf_put(c, &b, json_string_value(x), json_string_length(x));
    }
    json_decref(items);
    if (!rc) rc = cv_string(c, b.p, b.n, out);
    free(b.p);
    return rc;
}

static int str_affix(ct_ctx *c, const char *name, const ct_val *s, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("prefix", "start", "end");
    const ct_val *pre = ct_arg(a, 0, "prefix");
    if (!pre) return ct_fail(c, "%s() needs an argument", name);
    long long st, en;
    if (int_arg(c, name, ct_arg(a, 1, "start"), 0, &st) ||
        int_arg(c, name, ct_arg(a, 2, "end"), (long long)ct_u8_count(sv(s), sl(s)), &en))
        return -1;
    const char *p = sv(s);
    size_t n = sl(s), lo = byte_at(p, n, st), hi = byte_at(p, n, en);
    if (hi < lo) hi = lo;
    /* a tuple of prefixes is a list here */
    json_t *one = cv_is_str(pre) ? json_incref(pre->j) : NULL;
    json_t *list = cv_is(pre, JSON_ARRAY) ? pre->j : NULL;
    if (!one && !list) return ct_fail(c, "%s first arg must be str or a tuple of str, not %s", name, cv_type(pre));
    int hit = 0, end = name[0] == 'e';
    for (size_t k = 0; !hit && k < (one ? 1 : json_array_size(list)); k++) {
        json_t *x = one ? one : json_array_get(list, k);
        if (!json_is_string(x)) {
            if (one) json_decref(one);
            return ct_fail(c, "tuple for %s must only contain str", name);
        }
        size_t m = json_string_length(x);
        hit = m <= hi - lo && !memcmp(end ? p + hi - m : p + lo, json_string_value(x), m);
    }
    if (one) json_decref(one);
    *out = cv_of(json_boolean(hit));
    return 0;
}

/* Python's str.isdigit, isalpha, isalnum, isspace, islower, isupper */
static int str_is(ct_ctx *c, const char *name, const ct_val *s, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS(NULL);
    const char *p = sv(s);
    size_t n = sl(s);
    int r = n > 0, cased = 0;
    for (size_t i = 0; i < n && r; i = ct_u8_next(p, n, i)) {
        int32_t cp = ct_u8_at(p, n, i);
        utf8proc_category_t k = cp < 0 ? UTF8PROC_CATEGORY_CN : utf8proc_category(cp);
        int letter = k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO, digit = k == UTF8PROC_CATEGORY_ND;
        int number = k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
        if (!strcmp(name, "isdigit") || !strcmp(name, "isdecimal"))
            r = digit;
        else if (!strcmp(name, "isnumeric"))
            r = number;
        else if (!strcmp(name, "isalpha"))
            r = letter;
        else if (!strcmp(name, "isalnum"))
            r = letter || number;
        else if (!strcmp(name, "isspace"))
            r = ct_space_at(p + i, n - i) > 0;
        else if (!strcmp(name, "islower")) {
            if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT) r = 0;
            cased |= k == UTF8PROC_CATEGORY_LL;
        } else { /* isupper */
            if (k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT) r = 0;
            cased |= k == UTF8PROC_CATEGORY_LU;
        }
    }
    if (!strcmp(name, "islower") || !strcmp(name, "isupper")) r = r && cased;
    *out = cv_of(json_boolean(r));
    return 0;
}

/* str.format with {} {0} {name} fields, !s / !r conversions and {{ }}; no format specs. */
static int str_format(ct_ctx *c, const char *name, const ct_val *s, const ct_args *a, ct_val *out)
{
    (void)name;
    const char *p = sv(s);
    size_t n = sl(s), auto_idx = 0;
    ct_buf b = {0};
    int rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        if ((p[i] == '{' || p[i] == '}') && i + 1 < n && p[i + 1] == p[i]) {
            rc = ct_buf_put(c, &b, p + i, 1);
            i += 2;
            continue;
        }
        if (p[i] == '}') {
            rc = ct_fail(c, "single '}' encountered in format string");
            break;
        }
        if (p[i] != '{') {
            rc = ct_buf_put(c, &b, p + i, 1);
            i++;
            continue;
        }
        const char *close = memchr(p + i, '}', n - i);
        if (!close) {
            rc = ct_fail(c, "single '{' encountered in format string");
            break;
        }
        char field[128];
        size_t fl = (size_t)(close - (p + i + 1));
        if (fl >= sizeof field) {
            rc = ct_fail(c, "format field too long");
            break;
        }
        memcpy(field, p + i + 1, fl);
        field[fl] = '\0';
        char conv = 's';
        char *bang = strchr(field, '!');
        if (strchr(field, ':') || strchr(field, '.') || strchr(field, '[')) {
            rc = ct_fail(c, "format specs and field access are not supported in str.format");
            break;
        }
        if (bang) conv = bang[1], *bang = '\0';
        const ct_val *v = NULL;
        if (!field[0])
            v = ct_arg(a, auto_idx++, NULL);
        else if (field[0] >= '0' && field[0] <= '9')
            v = ct_arg(a, (size_t)atoi(field), NULL);
        else
            v = ct_arg(a, (size_t)-1, field);
        if (!v) {
            rc = ct_fail(c, "str.format: no argument for field '{%s}'", field);
            break;
        }
        rc = conv == 'r' ? cv_repr(c, v, &b) : cv_str(c, v, &b);
        i = (size_t)(close - p) + 1;
    }
    if (!rc) rc = cv_string(c, b.p, b.n, out);
    free(b.p);
    return rc;
}

static int str_method(ct_ctx *c, const ct_val *s, const char *name, const ct_args *a, ct_val *out, int *found)
{
    *found = 1;
    const ct_val *x = ct_arg(a, 0, NULL);
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) return str_affix(c, name, s, a, out);
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        CT_CHECK_ARGS("sep", "maxsplit");
        const ct_val *sep = ct_arg(a, 0, "sep");
        long long max;
        if (need_str(c, name, sep, 1) || int_arg(c, name, ct_arg(a, 1, "maxsplit"), -1, &max)) return -1;
        int ws = !sep || cv_is(sep, JSON_NULL);
        json_t *arr = json_array();
        if (!arr) return ct_fail(c, "out of memory");
        if (split(c, sv(s), sl(s), ws ? NULL : sv(sep), ws ? 0 : sl(sep), max, name[0] == 'r', arr)) {
            json_decref(arr);
            return -1;
        }
        return ct_set(c, out, arr);
    }
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        CT_CHECK_ARGS("chars");
        if (need_str(c, name, x, 1)) return -1;
        return strip(c, s, x, name[0] != 'r', name[0] != 'l', out);
    }
    static const struct {
        const char *name;
        int how;
    } cases[] = {{"upper", CT_CASE_UPPER},
                 {"lower", CT_CASE_LOWER},
                 {"title", CT_CASE_TITLE},
                 {"capitalize", CT_CASE_CAPITALIZE}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        if (!strcmp(name, cases[k].name)) {
            CT_CHECK_ARGS(NULL);
            return ct_case(c, sv(s), sl(s), cases[k].how, out);
        }
    if (!strcmp(name, "replace")) return str_replace(c, name, s, a, out);
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") || !strcmp(name, "rindex"))
        return str_find(c, name, s, a, out);
    if (!strcmp(name, "count")) return str_count(c, name, s, a, out);
    if (!strcmp(name, "join")) return str_join(c, name, s, a, out);
    if (!strcmp(name, "format")) return str_format(c, name, s, a, out);
    static const char *const preds[] = {"isdigit", "isdecimal", "isnumeric", "isalpha",
                                        "isalnum", "isspace",   "islower",   "isupper"};
    for (size_t k = 0; k < sizeof preds / sizeof preds[0]; k++)
        if (!strcmp(name, preds[k])) return str_is(c, name, s, a, out);
    *found = 0;
    return 0;
}

/* ---- dict, list, loop ---- */

static int dict_method(ct_ctx *c, const ct_val *d, const char *name, const ct_args *a, ct_val *out, int *found)
{
    *found = 1;
    const char *k;
    json_t *v;
    if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
        CT_CHECK_ARGS(NULL);
        json_t *arr = json_array();
        int bad = !arr || ct_charge(c, json_object_size(d->j));
        json_object_foreach(d->j, k, v)
        {
            if (bad) break;
            json_t *key = json_string_nocheck(k), *e = key;
            if (name[0] == 'v')
                json_decref(key), e = json_incref(v);
            else if (name[0] == 'i')
                e = key ? json_pack("[oO]", key, v) : NULL;
            if (e && name[0] == 'i' && ct_mark_tuple(c, e)) json_decref(e), e = NULL;
            bad = !e || json_array_append_new(arr, e);
        }
        if (bad) {
            if (arr) json_decref(arr);
            return c->steps > CT_MAX_STEPS ? -1 : ct_fail(c, "out of memory");
        }
        return ct_set(c, out, arr);
    }
    if (!strcmp(name, "get")) {
        CT_CHECK_ARGS("key", "default");
        const ct_val *key = ct_arg(a, 0, "key"), *dflt = ct_arg(a, 1, "default");
        if (!key) return ct_fail(c, "get() needs a key");
        json_t *x = cv_is_str(key) ? json_object_getn(d->j, sv(key), sl(key)) : NULL;
        if (x)
            *out = cv_elem(c, x);
        else if (dflt)
            *out = cv_copy(dflt);
        else
            *out = cv_of(json_null());
        return 0;
    }
    *found = 0;
    return 0;
}

static int list_method(ct_ctx *c, const ct_val *l, const char *name, const ct_args *a, ct_val *out, int *found)
{
    *found = 1;
    if (!strcmp(name, "index") || !strcmp(name, "count")) {
        CT_CHECK_ARGS("value");
        const ct_val *x = ct_arg(a, 0, "value");
        if (!x) return ct_fail(c, "%s() needs a value", name);
        long long hits = 0, first = -1;
        for (size_t i = 0; i < json_array_size(l->j); i++) {
            ct_val e = cv_elem(c, json_array_get(l->j, i));
            if (cv_eq(&e, x)) {
                if (first < 0) first = (long long)i;
                hits++;
            }
            cv_drop(&e);
        }
        if (ct_charge(c, json_array_size(l->j))) return -1;
        if (name[0] == 'c') return ct_set(c, out, json_integer(hits));
        if (first < 0) return ct_fail(c, "value is not in list");
        return ct_set(c, out, json_integer(first));
    }
    *found = 0;
    return 0;
}

int ct_method(ct_ctx *c, const ct_val *obj, const char *name, const ct_args *a, ct_val *out, int *found)
{
    *found = 0;
    if (cv_is_str(obj)) return str_method(c, obj, name, a, out, found);
    if (cv_is(obj, JSON_OBJECT)) return dict_method(c, obj, name, a, out, found);
    if (cv_is(obj, JSON_ARRAY)) return list_method(c, obj, name, a, out, found);
    if (obj->kind == CV_LOOP && !strcmp(name, "cycle")) {
        *found = 1;
        if (a->nkw || !a->npos) return ct_fail(c, "loop.cycle() needs positional arguments");
        const ct_loop *l = obj->p;
        *out = cv_copy(&a->pos[l->i % a->npos]);
        return 0;
    }
    return 0;
}

/* ---- globals ---- */

int ct_global_id(const char *name)
{
    static const struct {
        const char *name;
        int id;
    } g[] = {{"range", CT_G_RANGE},
             {"namespace", CT_G_NAMESPACE},
             {"dict", CT_G_DICT},
             {"raise_exception", CT_G_RAISE},
             {"strftime_now", CT_G_STRFTIME}};
    for (size_t k = 0; k < sizeof g / sizeof g[0]; k++)
        if (!strcmp(g[k].name, name)) return g[k].id;
    return CT_G_NONE;
}

static int g_range(ct_ctx *c, const ct_args *a, ct_val *out)
{
    long long v[3] = {0, 0, 1};
    if (a->nkw || a->npos < 1 || a->npos > 3) return ct_fail(c, "range() takes 1 to 3 integer arguments");
    for (size_t k = 0; k < a->npos; k++)
        if (!cv_int(&a->pos[k], &v[k]))
            return ct_fail(c, "'%s' object cannot be interpreted as an integer", cv_type(&a->pos[k]));
    long long start = a->npos == 1 ? 0 : v[0], stop = a->npos == 1 ? v[0] : v[1], step = a->npos == 3 ? v[2] : 1;
    if (step == 0) return ct_fail(c, "range() arg 3 must not be zero");
    /* the count without overflow: ceil((stop - start) / step) when positive */
    long double span = (long double)stop - (long double)start;
    long double count = span / (long double)step;
    long long n = count <= 0 ? 0 : (long long)(count + 0.999999999L);
    if (n > MAX_RANGE)
        return ct_fail(c, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    if (ct_charge(c, (unsigned long long)n)) return -1;
    json_t *arr = json_array();
    for (long long i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, json_integer(start + i * step))) json_decref(arr), arr = NULL;
    return ct_set(c, out, arr);
}

/* namespace(...) and dict(...): an optional mapping, then keywords. */
static int g_mapping(ct_ctx *c, const char *name, const ct_args *a, ct_val *out, int ns)
{
    if (a->npos > 1) return ct_fail(c, "%s() takes at most one positional argument", name);
    if (a->npos && !cv_is(&a->pos[0], JSON_OBJECT))
        return ct_fail(c, "%s(): the positional argument must be a mapping, not %s", name, cv_type(&a->pos[0]));
    json_t *o = a->npos ? json_deep_copy(a->pos[0].j) : json_object();
    if (o && a->npos && json_object_size(o) != json_object_size(a->pos[0].j)) json_decref(o), o = NULL;
    if (!o) return ct_fail(c, "out of memory");
    for (size_t k = 0; k < a->nkw; k++) {
        json_t *v = cv_store(c, &a->kw[k]);
        if (!v || json_object_set_new_nocheck(o, a->kwn[k], v)) {
            json_decref(o);
            return v ? ct_fail(c, "out of memory") : -1;
        }
    }
    *out = cv_of(o);
    if (ns) out->kind = CV_NS;
    return 0;
}

static int g_strftime(ct_ctx *c, const ct_args *a, ct_val *out)
{
    if (a->nkw || a->npos != 1 || !cv_is_str(&a->pos[0])) return ct_fail(c, "strftime_now() takes one format string");
    time_t now = time(NULL);
    struct tm tm;
    char buf[1024];
    if (!localtime_r(&now, &tm)) return ct_fail(c, "strftime_now(): no local time");
    size_t n = strftime(buf, sizeof buf, sv(&a->pos[0]), &tm);
    return cv_string(c, buf, n, out);
}

int ct_call_global(ct_ctx *c, int id, const ct_args *a, ct_val *out)
{
    switch (id) {
    case CT_G_RANGE: return g_range(c, a, out);
    case CT_G_NAMESPACE: return g_mapping(c, "namespace", a, out, 1);
    case CT_G_DICT: return g_mapping(c, "dict", a, out, 0);
    case CT_G_RAISE: {
        /* the template's own message, as transformers raises it */
        ct_buf b = {0};
        const ct_val *m = ct_arg(a, 0, "message");
        int rc = m ? cv_str(c, m, &b) : 0;
        if (!rc) rc = ct_fail(c, "%s", b.p ? b.p : "");
        free(b.p);
        return rc ? -1 : -1;
    }
    case CT_G_STRFTIME: return g_strftime(c, a, out);
    default: return ct_fail(c, "not a function");
    }
}
