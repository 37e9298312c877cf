/* cost_json.c — field readers for cost files and presets (see cost_impl.h).
 *
 * Every reader names the field with its full dotted path, so a mistake deep
 * in a file ("efficiency.mlp") is found without reading the loader. */
#include "sim/cost/cost_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int cj_fail(const cost_src *src, const char *at, const char *key, rh_err *e, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return rh_fail(e, "%s: field '%s%s%s': %s", src->label, at ? at : "", (at && *at) ? "." : "",
                   key, what);
}

/* Describes a JSON value briefly for messages: a string shows itself. */
static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

int cj_number(json_t *obj, const char *at, const char *key, int required, double def,
              double lo, double hi, double *out, const cost_src *src, rh_err *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required) return cj_fail(src, at, key, e, "missing (a number is required)");
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return cj_fail(src, at, key, e, "must be a number, got %s", json_kind(v));
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return cj_fail(src, at, key, e, "%g is out of range [%g, %g]", x, lo, hi);
    *out = x;
    return 0;
}

int cj_uint(json_t *obj, const char *at, const char *key, int required, uint32_t def,
            uint32_t lo, uint32_t hi, uint32_t *out, const cost_src *src, rh_err *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required) return cj_fail(src, at, key, e, "missing (an integer is required)");
        *out = def;
        return 0;
    }
    if (!json_is_integer(v)) {
        /* 8.0 is still eight: accept reals that are whole numbers. */
        if (!json_is_real(v) || json_real_value(v) != floor(json_real_value(v)))
            return cj_fail(src, at, key, e, "must be an integer, got %s", json_kind(v));
    }
    double x = json_number_value(v);
    if (!(x >= (double)lo && x <= (double)hi))
        return cj_fail(src, at, key, e, "%.0f is out of range [%u, %u]", x, lo, hi);
    *out = (uint32_t)x;
    return 0;
}

int cj_string(json_t *obj, const char *at, const char *key, int required, const char *def,
              const char **out, const cost_src *src, rh_err *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required) return cj_fail(src, at, key, e, "missing (a string is required)");
        *out = def;
        return 0;
    }
    if (!json_is_string(v)) return cj_fail(src, at, key, e, "must be a string, got %s", json_kind(v));
    *out = json_string_value(v);
    return 0;
}

int cj_bool(json_t *obj, const char *at, const char *key, int def, int *out, const cost_src *src, rh_err *e)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return cj_fail(src, at, key, e, "must be true or false, got %s", json_kind(v));
    *out = json_is_true(v);
    return 0;
}

int cj_only_keys(json_t *obj, const char *at, const char *const *allowed, const cost_src *src, rh_err *e)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(*a, key);
        if (!ok) return cj_fail(src, at, key, e, "unknown field (a typo?)");
    }
    return 0;
}
