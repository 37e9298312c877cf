/* num.c — see num.h. */
#include "traces/num.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tr_parse_u64(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > 20) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (d > 9) return -1;
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int tr_parse_f64(const char *s, size_t n, double *out)
{
    char tmp[80];
    if (n == 0 || n >= sizeof tmp) return -1;
    /* strtod accepts "inf", "nan", hex and leading spaces: JSON and CSV do not. */
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')) return -1;
    }
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    char *end;
    errno = 0;
    double v = strtod(tmp, &end);
    if (end != tmp + n || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int tr_parse_scaled(const char *s, size_t n, int pow10, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
    /* Collect significant digits as an integer mantissa and a decimal exponent. */
    uint64_t mant = 0;
    int exp10 = pow10, digits = 0, first_dropped = -1;
    size_t start = i;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        if (mant < 100000000000000000ULL) mant = mant * 10 + (unsigned)(s[i] - '0');
        else return -1;   /* over 1e17 before the point: beyond any timestamp we need */
    }
    if (i < n && s[i] == '.') {
        i++;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
            if (mant < 100000000000000000ULL) {
                mant = mant * 10 + (unsigned)(s[i] - '0');
                exp10--;
            } else {
                if (first_dropped < 0) first_dropped = s[i] - '0';
            }
        }
    }
    if (digits == 0 || i == start) return -1;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = 0, ev = 0, ed = 0;
        if (i < n && (s[i] == '-' || s[i] == '+')) eneg = s[i++] == '-';
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, ed++)
            if (ev < 10000) ev = ev * 10 + (s[i] - '0');
        if (!ed) return -1;
        exp10 += eneg ? -ev : ev;
    }
    if (i != n) return -1;
    /* mant * 10^exp10, rounded half away from zero. Digits dropped above for
     * lack of room only matter through the first of them. */
    if (mant == 0) exp10 = 0;
    while (exp10 > 0) {
        if (mant > (uint64_t)INT64_MAX / 10) return -1;
        mant *= 10;
        exp10--;
    }
    int round_up = 0;
    if (first_dropped >= 0) round_up = first_dropped >= 5;
    while (exp10 < 0) {
        if (mant == 0) {
            round_up = 0;
            break;
        }
        unsigned last = (unsigned)(mant % 10);
        mant /= 10;
        round_up = last >= 5;
        exp10++;
    }
    if (round_up) mant++;
    if (mant > (uint64_t)INT64_MAX) return -1;
    *out = neg ? -(int64_t)mant : (int64_t)mant;
    return 0;
}

int tr_parse_count(const char *s, size_t n, uint64_t limit, uint64_t *out, const char **why)
{
    *why = "is not a number";
    if (n == 0) {
        *why = "is empty";
        return -1;
    }
    if (tr_parse_u64(s, n, out) == 0) {
        if (*out > limit) {
            *why = "is above the limit";
            return -1;
        }
        return 0;
    }
    /* Slow path: "-3", "12.0", "1e3", or garbage. */
    double v;
    if (tr_parse_f64(s, n, &v) < 0) {
        if (s[0] == '-' && n > 1 && s[1] >= '0' && s[1] <= '9') *why = "is negative";
        return -1;
    }
    if (v < 0) {
        *why = "is negative";
        return -1;
    }
    if (v != floor(v)) {
        *why = "is not a whole number";
        return -1;
    }
    if (v > (double)limit) {
        *out = v > 1.8e19 ? UINT64_MAX : (uint64_t)v;
        *why = "is above the limit";
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

size_t tr_format_u64(char *buf, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
    buf[n] = '\0';
    return n;
}

size_t tr_format_f64(char *buf, double x)
{
    /* Whole nanoseconds below 2^53 ns: the exact decimal of ns / 1e9 reads
     * back as the same double, because both are the correctly rounded value
     * of one rational number. Fast, and what most of our times are. */
    if (fabs(x) < 9.0e6) {
        int64_t ns = llround(x * 1e9);
        if ((double)ns / 1e9 == x && !(x == 0 && signbit(x))) {
            size_t n = 0;
            uint64_t a = ns < 0 ? (uint64_t)(-ns) : (uint64_t)ns;
            if (ns < 0) buf[n++] = '-';
            n += tr_format_u64(buf + n, a / 1000000000u);
            uint64_t frac = a % 1000000000u;
            if (frac) {
                char f[10];
                for (int i = 8; i >= 0; i--) {
                    f[i] = (char)('0' + frac % 10);
                    frac /= 10;
                }
                int len = 9;
                while (f[len - 1] == '0') len--;
                buf[n++] = '.';
                memcpy(buf + n, f, (size_t)len);
                n += (size_t)len;
            }
            buf[n] = '\0';
            return n;
        }
    }
    for (int prec = 15; prec <= 17; prec++) {
        int n = snprintf(buf, 32, "%.*g", prec, x);
        if (prec == 17 || strtod(buf, NULL) == x) return (size_t)n;
    }
    return strlen(buf);
}
