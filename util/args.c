/* args.c — see args.h. */
#include "util/args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void rh_args_init(rh_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->argc = argc;
    a->argv = argv;
}

const char *rh_args_next(rh_args *a)
{
    static char namebuf[128];
    while (a->i < a->argc) {
        const char *s = a->argv[a->i++];
        if (!a->after_dashdash && strcmp(s, "--") == 0) {
            a->after_dashdash = 1;
            continue;
        }
        if (a->after_dashdash || s[0] != '-' || s[1] == '\0' || (s[1] >= '0' && s[1] <= '9')) {
            if (a->npos < (int)(sizeof a->pos / sizeof a->pos[0])) a->pos[a->npos++] = s;
            continue;
        }
        s += (s[1] == '-') ? 2 : 1;
        const char *eq = strchr(s, '=');
        size_t len = eq ? (size_t)(eq - s) : strlen(s);
        if (len >= sizeof namebuf) len = sizeof namebuf - 1;
        memcpy(namebuf, s, len);
        namebuf[len] = '\0';
        a->name = namebuf;
        a->inline_val = eq ? eq + 1 : NULL;
        a->consumed_inline = 0;
        return a->name;
    }
    return NULL;
}

const char *rh_args_value(rh_args *a, rh_err *e)
{
    if (a->inline_val) {
        a->consumed_inline = 1;
        return a->inline_val;
    }
    if (a->i >= a->argc) {
        rh_fail(e, "flag --%s needs a value", a->name);
        return NULL;
    }
    return a->argv[a->i++];
}

int rh_args_no_value(rh_args *a, rh_err *e)
{
    if (a->inline_val && !a->consumed_inline)
        return rh_fail(e, "flag --%s takes no value (got '%s')", a->name, a->inline_val);
    return 0;
}

int rh_parse_double(const char *s, const char *what, double *out, rh_err *e)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v))
        return rh_fail(e, "%s: '%s' is not a number", what, s);
    *out = v;
    return 0;
}

int rh_parse_i64(const char *s, const char *what, long long *out, rh_err *e)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE)
        return rh_fail(e, "%s: '%s' is not an integer", what, s);
    *out = v;
    return 0;
}

int rh_parse_u64(const char *s, const char *what, unsigned long long *out, rh_err *e)
{
    long long v;
    if (rh_parse_i64(s, what, &v, e) < 0) return -1;
    if (v < 0) return rh_fail(e, "%s: '%s' must not be negative", what, s);
    *out = (unsigned long long)v;
    return 0;
}

int rh_parse_u32(const char *s, const char *what, uint32_t lo, uint32_t hi, uint32_t *out, rh_err *e)
{
    unsigned long long v = 0;
    if (rh_parse_u64(s, what, &v, e) < 0) return -1;
    if (v < lo || v > hi) return rh_fail(e, "%s: %llu is outside [%u, %u]", what, v, lo, hi);
    *out = (uint32_t)v;
    return 0;
}

int rh_wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) return 0;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
    }
    return 0;
}

int rh_knob_name(const char *in, char *out, size_t n)
{
    size_t i = 0;
    for (; in[i] && i + 1 < n; i++) out[i] = in[i] == '_' ? '-' : in[i];
    if (n) out[i] = '\0';
    return in[i] ? -1 : 0;
}

char *rh_shell_quote(const char *s)
{
    char *q = malloc(4 * strlen(s) + 3), *p = q;
    if (!q) return NULL;
    *p++ = '\'';
    for (; *s; s++) {
        if (*s == '\'') {
            memcpy(p, "'\\''", 4);
            p += 4;
        } else {
            *p++ = *s;
        }
    }
    *p++ = '\'';
    *p = '\0';
    return q;
}
