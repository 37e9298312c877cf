/* err.h — one error message, carried up to whoever prints it.
 *
 * Every function that can fail on outside input takes an `rh_err *` and, on
 * failure, fills it with one sentence naming the file, line or record, and
 * field, then returns -1 (or NULL). Callers add no text of their own unless
 * they know more context; the CLI prints "rehearse: <msg>" and exits 1.
 * A NULL `rh_err *` is allowed: the message is then dropped. */
#ifndef RH_ERR_H
#define RH_ERR_H

#include <stdarg.h>

typedef struct rh_err {
    char msg[1024];
} rh_err;

/* Sets the message (printf-style) and returns -1, so `return rh_fail(e, ...)`. */
int rh_fail(rh_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rh_vfail(rh_err *e, const char *fmt, va_list ap);

/* Prepends "prefix: " to an existing message (e.g. a file name) and returns -1. */
int rh_prefix(rh_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the message. */
void rh_err_clear(rh_err *e);

#endif
