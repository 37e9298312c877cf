/* chat_template_tests.c — Jinja's tests ("x is defined", "x is not none",
 * "x is divisibleby 3", ...) with jinja2/tests.py's semantics: number counts
 * bool, integer does not; an undefined value is iterable, a sequence and
 * callable, as Jinja's Undefined is. */
#include <string.h>

#include <utf8proc.h>

#include "engine/model/chat_template_impl.h"

static const char *const TESTS[] = {
    "defined", "undefined", "none",        "boolean",  "false",    "true",     "integer", "float",
    "number",  "string",    "mapping",     "iterable", "sequence", "callable", "sameas",  "escaped",
    "odd",     "even",      "divisibleby", "eq",       "equalto",  "==",       "ne",      "!=",
    "lt",      "<",         "lessthan",    "le",       "<=",       "gt",       ">",       "greaterthan",
    "ge",      ">=",        "in",          "lower",    "upper",    "filter",   "test",
};

int ct_test_known(const char *name)
{
    for (size_t k = 0; k < sizeof TESTS / sizeof TESTS[0]; k++)
        if (!strcmp(TESTS[k], name)) return 1;
    return 0;
}

/* value % m == want, as tests.py writes odd, even and divisibleby (2.5 is neither odd nor even) */
static int mod_is(ct_ctx *c, const ct_val *v, const ct_val *m, long long want, int *r)
{
    ct_val rem, w = cv_of(json_integer(want));
    if (cv_ok(c, &w)) return -1;
    int rc = ct_binop(c, OP_MOD, v, m, &rem);
    if (!rc) *r = cv_eq(&rem, &w), cv_drop(&rem);
    cv_drop(&w);
    return rc;
}

/* Python's str.islower / isupper: some cased character, none of the other case. */
static int case_test(const ct_val *v, int upper)
{
    if (!cv_is_str(v)) return 0;
    const char *s = json_string_value(v->j);
    size_t n = json_string_length(v->j);
    int cased = 0;
    for (size_t i = 0; i < n; i = ct_u8_next(s, n, i)) {
        int32_t cp = ct_u8_at(s, n, i);
        if (cp < 0) continue;
        utf8proc_category_t k = utf8proc_category(cp);
        if (k == UTF8PROC_CATEGORY_LT || (upper ? k == UTF8PROC_CATEGORY_LL : k == UTF8PROC_CATEGORY_LU)) return 0;
        cased |= upper ? k == UTF8PROC_CATEGORY_LU : k == UTF8PROC_CATEGORY_LL;
    }
    return cased;
}

int ct_test(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, int *r)
{
    if (!ct_test_known(name)) return ct_fail(c, "no test named '%s'", name);
    if (ct_charge(c, 1)) return -1;
    const ct_val *o = ct_arg(a, 0, NULL);
    long long i;
    *r = 0;
    if (!strcmp(name, "defined"))
        *r = v->kind != CV_UNDEF;
    else if (!strcmp(name, "undefined"))
        *r = v->kind == CV_UNDEF;
    else if (!strcmp(name, "none"))
        *r = cv_is(v, JSON_NULL);
    else if (!strcmp(name, "boolean"))
        *r = cv_is(v, JSON_TRUE) || cv_is(v, JSON_FALSE);
    else if (!strcmp(name, "true"))
        *r = cv_is(v, JSON_TRUE);
    else if (!strcmp(name, "false"))
        *r = cv_is(v, JSON_FALSE);
    else if (!strcmp(name, "integer"))
        *r = cv_is(v, JSON_INTEGER);
    else if (!strcmp(name, "float"))
        *r = cv_is(v, JSON_REAL);
    else if (!strcmp(name, "number"))
        *r = cv_is_num(v);
    else if (!strcmp(name, "string"))
        *r = cv_is_str(v);
    else if (!strcmp(name, "mapping"))
        *r = cv_is(v, JSON_OBJECT);
    else if (!strcmp(name, "iterable"))
        *r = cv_is_str(v) || cv_is(v, JSON_ARRAY) || cv_is(v, JSON_OBJECT) || v->kind == CV_UNDEF || v->kind == CV_LOOP;
    else if (!strcmp(name, "sequence"))
        *r = cv_is_str(v) || cv_is(v, JSON_ARRAY) || cv_is(v, JSON_OBJECT) || v->kind == CV_UNDEF;
    else if (!strcmp(name, "callable")) /* Jinja's Undefined has __call__ (it raises) */
        *r = v->kind == CV_MACRO || v->kind == CV_FUNC || v->kind == CV_UNDEF;
    else if (!strcmp(name, "escaped"))
        *r = 0;
    else if (!strcmp(name, "lower"))
        *r = case_test(v, 0);
    else if (!strcmp(name, "upper"))
        *r = case_test(v, 1);
    else if (!strcmp(name, "filter"))
        *r = cv_is_str(v) && ct_filter_known(json_string_value(v->j));
    else if (!strcmp(name, "test"))
        *r = cv_is_str(v) && ct_test_known(json_string_value(v->j));
    else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        if (v->kind == CV_UNDEF) return cv_undef_fail(c, v);
        ct_val two = cv_of(json_integer(2));
        const ct_val *m = name[0] == 'd' ? o : &two;
        int rc = cv_ok(c, &two) || (!m ? ct_fail(c, "divisibleby needs a number") : mod_is(c, v, m, name[0] == 'o', r));
        cv_drop(&two);
        if (rc) return -1;
    } else if (!strcmp(name, "sameas")) {
        /* Python's "is": singletons, the same object, small ints CPython caches */
        if (!o) return ct_fail(c, "sameas needs a value");
        if (v->kind != o->kind)
            *r = 0;
        else if (v->kind != CV_JSON)
            *r = cv_eq(v, o) && v->kind != CV_UNDEF;
        else if (v->j == o->j || (cv_is(v, JSON_NULL) && cv_is(o, JSON_NULL)))
            *r = 1;
        else if (cv_is(v, JSON_INTEGER) && cv_is(o, JSON_INTEGER))
            *r = cv_int(v, &i) && cv_eq(v, o) && i >= -5 && i <= 256;
        else
            *r = 0;
    } else {
        if (!o) return ct_fail(c, "the test '%s' needs a value", name);
        if (!strcmp(name, "in")) return ct_contains(c, v, o, r);
        int op = !strcmp(name, "ne") || !strcmp(name, "!=")                                  ? OP_NE
                 : !strcmp(name, "lt") || !strcmp(name, "<") || !strcmp(name, "lessthan")    ? OP_LT
                 : !strcmp(name, "le") || !strcmp(name, "<=")                                ? OP_LE
                 : !strcmp(name, "gt") || !strcmp(name, ">") || !strcmp(name, "greaterthan") ? OP_GT
                 : !strcmp(name, "ge") || !strcmp(name, ">=")                                ? OP_GE
                                                                                             : OP_EQ;
        if (op == OP_EQ || op == OP_NE) {
            *r = cv_eq(v, o) == (op == OP_EQ);
            return 0;
        }
        int k;
        if (cv_cmp(c, v, o, op, &k)) return -1;
        *r = k == 2 ? 0 : op == OP_LT ? k < 0 : op == OP_LE ? k <= 0 : op == OP_GT ? k > 0 : k >= 0;
    }
    return 0;
}
