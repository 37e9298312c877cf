/* args.h — a small command-line walker shared by every subcommand front.
 *
 * Accepts `--name value`, `--name=value`, `-o value` and positional
 * arguments in any order; `--` ends options. Each front decides which names
 * take a value, so core knobs can be parsed by engine/core's own table and
 * the remaining flags by the front, without one global option list.
 *
 *   rh_args a; rh_args_init(&a, argc, argv);
 *   const char *name;
 *   while ((name = rh_args_next(&a))) {
 *       if (!strcmp(name, "json")) json = 1;
 *       else if (!strcmp(name, "o")) { if (!(out = rh_args_value(&a, &err))) ... }
 *       else return unknown flag
 *   }
 *   positional: a.pos[0..a.npos)
 */
#ifndef RH_ARGS_H
#define RH_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct rh_args {
    int argc, i;
    char **argv;
    const char *name;        /* current option name, without dashes */
    const char *inline_val;  /* value after '=' when given that way */
    int consumed_inline;
    int npos;
    const char *pos[64];     /* positional arguments, in order */
    int after_dashdash;
} rh_args;

void rh_args_init(rh_args *a, int argc, char **argv);
/* Next option name, or NULL when done. Positionals are collected on the way. */
const char *rh_args_next(rh_args *a);
/* The value of the current option; NULL and a message naming the flag if absent. */
const char *rh_args_value(rh_args *a, rh_err *e);
/* The current option has a value given as `--name=value` that was not consumed:
 * fails with a message (a boolean flag given a value). */
int rh_args_no_value(rh_args *a, rh_err *e);

/* Number parsing with messages that name the flag. */
int rh_parse_double(const char *s, const char *what, double *out, rh_err *e);
int rh_parse_i64(const char *s, const char *what, long long *out, rh_err *e);
int rh_parse_u64(const char *s, const char *what, unsigned long long *out, rh_err *e);
/* A whole number in [lo, hi]; out of range: "WHAT: N is outside [lo, hi]". */
int rh_parse_u32(const char *s, const char *what, uint32_t lo, uint32_t hi, uint32_t *out, rh_err *e);

/* A knob's name in command-line spelling: '_' read as '-' (Lua keys cannot
 * hold '-'), so "max_running_requests" and "max-running-requests" name the
 * same knob. 0, or -1 when it does not fit in n (out is then cut short and
 * names no knob). */
int rh_knob_name(const char *in, char *out, size_t n);

/* True if argv holds -h or --help. */
int rh_wants_help(int argc, char **argv);

/* s single-quoted for a POSIX shell (a quote inside becomes '\''), so an
 * emitted command line runs the argument as given: malloc'd, NULL out of memory. */
char *rh_shell_quote(const char *s);

#endif
