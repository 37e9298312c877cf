/* err.c — see err.h. */
#include "util/err.h"

#include <stdio.h>
#include <string.h>

int rh_vfail(rh_err *e, const char *fmt, va_list ap)
{
    if (e) vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    return -1;
}

int rh_fail(rh_err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rh_vfail(e, fmt, ap);
    va_end(ap);
    return -1;
}

int rh_prefix(rh_err *e, const char *fmt, ...)
{
    if (!e) return -1;
    char head[512], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    /* Keep as much of both as fits; truncation of a long message is fine. */
    size_t hl = strnlen(head, sizeof e->msg - 3);
    memcpy(e->msg, head, hl);
    memcpy(e->msg + hl, ": ", 2);
    size_t room = sizeof e->msg - hl - 3;
    size_t ol = strnlen(old, room);
    memcpy(e->msg + hl + 2, old, ol);
    e->msg[hl + 2 + ol] = '\0';
    return -1;
}

void rh_err_clear(rh_err *e)
{
    if (e) e->msg[0] = '\0';
}
