/* num.h — number parsing on text spans (not NUL-terminated), for importers.
 *
 * For traces/ and its importers. Timestamps are parsed as exact decimal text into
 * integer nanoseconds (no binary floating point on the way), so "0.1" is
 * 100000000 ns and offsets between rows are exact. */
#ifndef RH_TRACES_NUM_H
#define RH_TRACES_NUM_H

#include <stddef.h>
#include <stdint.h>

/* A token count: digits, optionally ".000" or an exponent that leaves a whole
 * number. 0, or -1 with *why set to a phrase for the message: "is negative",
 * "is not a whole number", "is above the limit of N tokens" (when above
 * `limit`; *out holds the value), "is not a number". */
int tr_parse_count(const char *s, size_t n, uint64_t limit, uint64_t *out, const char **why);
/* A decimal number times 10^pow10, rounded to the nearest integer (ties away
 * from zero): tr_parse_scaled("1.5", 3, 9, &ns) gives 1500000000. Accepts a
 * sign, digits, a fraction and an exponent. 0, or -1 if not a number or out
 * of the int64 range. */
int tr_parse_scaled(const char *s, size_t n, int pow10, int64_t *out);
/* Plain unsigned decimal digits (full uint64 range). */
int tr_parse_u64(const char *s, size_t n, uint64_t *out);
/* A double exactly as strtod reads it; the whole span must be the number. */
int tr_parse_f64(const char *s, size_t n, double *out);

/* Writes the shortest decimal text that reads back as exactly x (finite).
 * Returns the length; buf needs 32 bytes. */
size_t tr_format_f64(char *buf, double x);
size_t tr_format_u64(char *buf, uint64_t v);

#endif
