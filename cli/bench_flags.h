/* bench_flags.h — the flags of `rehearse bench` that vLLM's and SGLang's
 * clients take in their own shapes: several words after one flag
 * (--header A=1 B=2, --metadata k=v ...), the sampling parameters sent in
 * every request, and the table of flags that take a value (so an unknown
 * switch is named unknown, not short of a value). Each returns 0, or -1
 * with a message naming the flag and the word. */
#ifndef RH_CLI_BENCH_FLAGS_H
#define RH_CLI_BENCH_FLAGS_H

#include <jansson.h>
#include <stddef.h>

#include "util/args.h"
#include "util/err.h"

/* 1 when --NAME takes one value. */
int bench_takes_value(const char *name);
/* 1 when --dataset NAME reads a file (which may follow as the next word). */
int bench_takes_file(const char *name);
/* --header NAME=VALUE [NAME=VALUE ...] (or "NAME: VALUE"): each appended to
 * headers as a malloc'd "Name: value", at most max in all. */
int bench_take_headers(rh_args *a, char **headers, size_t *n, size_t max, rh_err *e);
/* --metadata KEY=VALUE [KEY=VALUE ...]: string members of *meta (made when
 * NULL), written as keys of the result file, as vLLM records them. */
int bench_take_metadata(rh_args *a, json_t **meta, rh_err *e);
/* --temperature, --top-p, --top-k, --min-p, --presence-penalty,
 * --frequency-penalty, --repetition-penalty with its value, checked, as a
 * member of *sampling (made when NULL) under the API's name (top_p, ...);
 * 1 when NAME is none of them. */
int bench_take_sampling(const char *name, const char *value, json_t **sampling, rh_err *e);
/* A JSON object's members as text, braces off ("a":1,"b":2), malloc'd; the
 * body writer appends them to a request. NULL with a message: out of memory. */
char *bench_json_members(const json_t *obj, rh_err *e);

#endif
