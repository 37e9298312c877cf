/* chat_template_lists.c — the filters over sequences: join, first, last,
 * list, reverse, items, dictsort, sort (stable, as Python's), unique, min,
 * max, sum, map, select / reject and selectattr / rejectattr. Jinja makes
 * several of them lazy generators; here they give lists (printing one shows
 * the list, where Jinja would show "<generator object ...>"). */
#include <stdlib.h>
#include <string.h>

#include "engine/model/chat_template_impl.h"

/* Jinja's make_attrgetter: "a.b.0" looks up a, then b, then index 0. */
static int attr_path(ct_ctx *c, const ct_val *item, const char *path, ct_val *out)
{
    ct_val cur = cv_copy(item);
    while (*path) {
        const char *dot = strchr(path, '.');
        size_t len = dot ? (size_t)(dot - path) : strlen(path);
        int digits = len > 0;
        for (size_t k = 0; k < len; k++) digits &= path[k] >= '0' && path[k] <= '9';
        ct_val key, next;
        if (digits)
            key = cv_of(json_integer(atoll(path)));
        else
            key = cv_of(json_stringn_nocheck(path, len));
        int rc = cv_ok(c, &key) || ct_getitem(c, &cur, &key, &next);
        cv_drop(&key);
        cv_drop(&cur);
        if (rc) return -1;
        cur = next;
        path += len + (dot != NULL);
        if (!dot) break;
    }
    *out = cur;
    return 0;
}

/* The elements of v as a new array (undefined: none). */
static int elements(ct_ctx *c, const ct_val *v, json_t **items) { return ct_iter(c, v, items); }

/* ---- sorting (stable, like Python's) ---- */

typedef struct keyed {
    ct_val key;
    json_t *item;
} keyed;

static int sort_key(ct_ctx *c, json_t *item, const char *attr, int case_sensitive, ct_val *key)
{
    ct_val v = cv_elem(c, item);
    if (attr) {
        ct_val k;
        int rc = attr_path(c, &v, attr, &k);
        cv_drop(&v);
        if (rc) return -1;
        v = k;
    }
    if (!case_sensitive && cv_is_str(&v)) {
        ct_val low;
        int rc = ct_case(c, json_string_value(v.j), json_string_length(v.j), CT_CASE_LOWER, &low);
        cv_drop(&v);
        if (rc) return -1;
        v = low;
    }
    *key = v;
    return 0;
}

static int merge_sort(ct_ctx *c, keyed *v, keyed *tmp, size_t n, int reverse)
{
    if (n < 2) return 0;
    size_t h = n / 2;
    if (merge_sort(c, v, tmp, h, reverse) || merge_sort(c, v + h, tmp, n - h, reverse)) return -1;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r;
        if (ct_charge(c, 1) || cv_cmp(c, &v[j].key, &v[i].key, OP_LT, &r)) return -1;
        /* take from the right only when strictly before, which keeps equal items in order */
        int right = reverse ? (r > 0 && r != 2) : r < 0;
        tmp[k++] = right ? v[j++] : v[i++];
    }
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
    return 0;
}

/* Sorts items (an array) by key; a new array. */
static int sorted(ct_ctx *c, json_t *items, const char *attr, int case_sensitive, int reverse, json_t **out)
{
    size_t n = json_array_size(items), made = 0;
    keyed *v = calloc(n + 1, sizeof *v), *tmp = calloc(n + 1, sizeof *tmp);
    int rc = v && tmp ? 0 : ct_fail(c, "out of memory");
    for (; !rc && made < n; made++) {
        v[made].item = json_array_get(items, made);
        rc = sort_key(c, v[made].item, attr, case_sensitive, &v[made].key);
    }
    if (!rc) rc = merge_sort(c, v, tmp, n, reverse);
    json_t *arr = rc ? NULL : json_array();
    if (!rc && !arr) rc = ct_fail(c, "out of memory");
    for (size_t k = 0; !rc && k < n; k++)
        if (json_array_append(arr, v[k].item)) rc = ct_fail(c, "out of memory");
    for (size_t k = 0; v && k < made; k++) cv_drop(&v[k].key);
    free(v);
    free(tmp);
    if (rc) {
        if (arr) json_decref(arr);
        return -1;
    }
    *out = arr;
    return 0;
}

int ctf_join(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("d", "attribute");
    const ct_val *sep, *attr;
    json_t *items;
    if (ct_str_arg(c, a, 0, "d", name, &sep) || ct_str_arg(c, a, 1, "attribute", name, &attr) || elements(c, v, &items))
        return -1;
    ct_buf b = {0};
    int rc = 0;
    for (size_t i = 0; !rc && i < json_array_size(items); i++) {
        ct_val e = cv_elem(c, json_array_get(items, i)), x;
        if (attr) {
            rc = attr_path(c, &e, json_string_value(attr->j), &x);
            cv_drop(&e);
            if (rc) break;
            e = x;
        }
        if (i && sep) rc = ct_buf_put(c, &b, json_string_value(sep->j), json_string_length(sep->j));
        if (!rc) rc = cv_str(c, &e, &b);
        cv_drop(&e);
    }
    json_decref(items);
    if (!rc) rc = cv_string(c, b.p, b.n, out);
    free(b.p);
    return rc;
}

int ctf_first_last(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS(NULL);
    json_t *items;
    if (elements(c, v, &items)) return -1;
    size_t n = json_array_size(items);
    *out = n ? cv_elem(c, json_array_get(items, name[0] == 'f' ? 0 : n - 1)) : cv_undef(NULL, 0);
    json_decref(items);
    return 0;
}

int ctf_list(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS(NULL);
    json_t *items, *arr;
    if (elements(c, v, &items)) return -1;
    arr = json_array();
    if (arr && json_array_extend(arr, items)) json_decref(arr), arr = NULL;
    json_decref(items);
    return ct_set(c, out, arr);
}

int ctf_reverse(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS(NULL);
    if (cv_is_str(v)) {
        ct_val m1 = cv_of(json_integer(-1));
        int rc = cv_ok(c, &m1) || ct_slice(c, v, NULL, NULL, &m1, out);
        cv_drop(&m1);
        return rc ? -1 : 0;
    }
    json_t *items, *arr;
    if (elements(c, v, &items)) return -1;
    arr = json_array();
    for (size_t i = json_array_size(items); arr && i > 0; i--)
        if (json_array_append(arr, json_array_get(items, i - 1))) json_decref(arr), arr = NULL;
    json_decref(items);
    return ct_set(c, out, arr);
}

int ctf_items(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS(NULL);
    if (v->kind == CV_UNDEF) return ct_set(c, out, json_array());
    if (!cv_is(v, JSON_OBJECT))
        return ct_fail(c, "items(): can only get item pairs from a mapping, not %s", cv_type(v));
    int found;
    return ct_method(c, v, "items", a, out, &found);
}

int ctf_dictsort(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("case_sensitive", "by", "reverse");
    const ct_val *by;
    if (ct_str_arg(c, a, 1, "by", name, &by)) return -1;
    if (v->kind == CV_UNDEF) return cv_undef_fail(c, v);
    if (!cv_is(v, JSON_OBJECT)) return ct_fail(c, "dictsort(): %s is not a mapping", cv_type(v));
    int by_value = by && !strcmp(json_string_value(by->j), "value");
    if (by && !by_value && strcmp(json_string_value(by->j), "key"))
        return ct_fail(c, "dictsort(): you can only sort by either \"key\" or \"value\"");
    int found;
    ct_val pairs;
    ct_args none = {0};
    if (ct_method(c, v, "items", &none, &pairs, &found)) return -1;
    json_t *arr;
    int rc = sorted(c, pairs.j, by_value ? "1" : "0", ct_bool_arg(a, 0, "case_sensitive", 0),
                    ct_bool_arg(a, 2, "reverse", 0), &arr);
    cv_drop(&pairs);
    return rc ? -1 : ct_set(c, out, arr);
}

int ctf_sort(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("reverse", "case_sensitive", "attribute");
    const ct_val *attr;
    json_t *items, *arr;
    if (ct_str_arg(c, a, 2, "attribute", name, &attr) || elements(c, v, &items)) return -1;
    int rc = sorted(c, items, attr ? json_string_value(attr->j) : NULL, ct_bool_arg(a, 1, "case_sensitive", 0),
                    ct_bool_arg(a, 0, "reverse", 0), &arr);
    json_decref(items);
    return rc ? -1 : ct_set(c, out, arr);
}

int ctf_unique(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("case_sensitive", "attribute");
    const ct_val *attr;
    json_t *items;
    if (ct_str_arg(c, a, 1, "attribute", name, &attr) || elements(c, v, &items)) return -1;
    int cs = ct_bool_arg(a, 0, "case_sensitive", 0), rc = 0;
    size_t n = json_array_size(items), nk = 0;
    ct_val *keys = calloc(n + 1, sizeof *keys);
    json_t *arr = json_array();
    if (!keys || !arr) rc = ct_fail(c, "out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        ct_val k;
        json_t *item = json_array_get(items, i);
        if ((rc = sort_key(c, item, attr ? json_string_value(attr->j) : NULL, cs, &k))) break;
        int seen = 0;
        for (size_t j = 0; j < nk && !seen; j++) seen = cv_eq(&keys[j], &k);
        if ((rc = ct_charge(c, nk))) {
            cv_drop(&k);
            break;
        }
        if (seen)
            cv_drop(&k);
        else if (json_array_append(arr, item))
            cv_drop(&k), rc = ct_fail(c, "out of memory");
        else
            keys[nk++] = k;
    }
    for (size_t j = 0; j < nk; j++) cv_drop(&keys[j]);
    free(keys);
    json_decref(items);
    if (rc) {
        if (arr) json_decref(arr);
        return -1;
    }
    return ct_set(c, out, arr);
}

int ctf_minmax(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("case_sensitive", "attribute");
    const ct_val *attr;
    json_t *items, *arr;
    if (ct_str_arg(c, a, 1, "attribute", name, &attr) || elements(c, v, &items)) return -1;
    /* a stable sort, descending for max, puts Python's min / max (the first of equals) first */
    int rc = sorted(c, items, attr ? json_string_value(attr->j) : NULL, ct_bool_arg(a, 0, "case_sensitive", 0),
                    !strcmp(name, "max"), &arr);
    json_decref(items);
    if (rc) return -1;
    *out = json_array_size(arr) ? cv_elem(c, json_array_get(arr, 0)) : cv_undef(NULL, 0);
    json_decref(arr);
    return 0;
}

int ctf_sum(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    CT_CHECK_ARGS("attribute", "start");
    const ct_val *attr, *start = ct_arg(a, 1, "start");
    json_t *items;
    if (ct_str_arg(c, a, 0, "attribute", name, &attr) || elements(c, v, &items)) return -1;
    ct_val acc = start ? cv_copy(start) : cv_of(json_integer(0));
    int rc = cv_ok(c, &acc);
    for (size_t i = 0; !rc && i < json_array_size(items); i++) {
        ct_val e = cv_elem(c, json_array_get(items, i)), x, r;
        if (attr) {
            rc = attr_path(c, &e, json_string_value(attr->j), &x);
            cv_drop(&e);
            if (rc) break;
            e = x;
        }
        rc = ct_binop(c, OP_ADD, &acc, &e, &r);
        cv_drop(&e);
        if (!rc) cv_drop(&acc), acc = r;
    }
    json_decref(items);
    if (rc)
        cv_drop(&acc);
    else
        *out = acc;
    return rc;
}

/* The arguments after the first `skip` positional ones. */
static ct_args rest(const ct_args *a, size_t skip)
{
    ct_args r = *a;
    r.pos = a->npos > skip ? a->pos + skip : NULL;
    r.npos = a->npos > skip ? a->npos - skip : 0;
    return r;
}

int ctf_map(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    const ct_val *attr = NULL, *dflt = NULL, *fname = NULL;
    if (a->npos == 0) {
        CT_CHECK_ARGS("attribute", "default");
        if (ct_str_arg(c, a, 0, "attribute", name, &attr)) return -1;
        dflt = ct_arg(a, 1, "default");
        if (!attr) return ct_fail(c, "map() needs a filter name or attribute=");
    } else if (!cv_is_str(fname = &a->pos[0])) {
        return ct_fail(c, "map(): the filter name must be a string");
    } else if (!ct_filter_known(json_string_value(fname->j))) {
        return ct_fail(c, "no filter named '%s'", json_string_value(fname->j));
    }
    json_t *items, *arr;
    if (elements(c, v, &items)) return -1;
    arr = json_array();
    int rc = arr ? 0 : ct_fail(c, "out of memory");
    ct_args fa = rest(a, 1);
    for (size_t i = 0; !rc && i < json_array_size(items); i++) {
        ct_val e = cv_elem(c, json_array_get(items, i)), r;
        if (attr) {
            rc = attr_path(c, &e, json_string_value(attr->j), &r);
            if (!rc && r.kind == CV_UNDEF && dflt) cv_drop(&r), r = cv_copy(dflt);
        } else {
            rc = ct_filter(c, json_string_value(fname->j), &e, &fa, &r);
        }
        cv_drop(&e);
        if (rc) break;
        json_t *s = cv_store(c, &r);
        cv_drop(&r);
        if (!s || json_array_append_new(arr, s)) rc = -1;
    }
    json_decref(items);
    if (rc) {
        if (arr) json_decref(arr);
        return -1;
    }
    return ct_set(c, out, arr);
}

/* select / reject (test on the item) and selectattr / rejectattr (on an attribute) */
int ctf_select(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out)
{
    int by_attr = strstr(name, "attr") != NULL, keep = name[0] == 's';
    size_t skip = (size_t)by_attr;
    if (a->nkw) return ct_fail(c, "%s() takes no keyword arguments", name);
    if (by_attr && (a->npos < 1 || !cv_is_str(&a->pos[0]))) return ct_fail(c, "%s() needs an attribute name", name);
    const ct_val *test = a->npos > skip ? &a->pos[skip] : NULL;
    if (test && !cv_is_str(test)) return ct_fail(c, "%s(): the test name must be a string", name);
    if (test && !ct_test_known(json_string_value(test->j)))
        return ct_fail(c, "no test named '%s'", json_string_value(test->j));
    json_t *items, *arr;
    if (elements(c, v, &items)) return -1;
    arr = json_array();
    int rc = arr ? 0 : ct_fail(c, "out of memory");
    ct_args ta = rest(a, skip + 1);
    for (size_t i = 0; !rc && i < json_array_size(items); i++) {
        ct_val e = cv_elem(c, json_array_get(items, i)), x;
        int r;
        rc = by_attr ? attr_path(c, &e, json_string_value(a->pos[0].j), &x) : (x = cv_copy(&e), 0);
        if (!rc) {
            if (test)
                rc = ct_test(c, json_string_value(test->j), &x, &ta, &r);
            else
                r = cv_truthy(&x);
            cv_drop(&x);
        }
        if (!rc && r == keep && json_array_append(arr, json_array_get(items, i))) rc = ct_fail(c, "out of memory");
        cv_drop(&e);
    }
    json_decref(items);
    if (rc) {
        if (arr) json_decref(arr);
        return -1;
    }
    return ct_set(c, out, arr);
}
