/* jsonline.h — one JSON object per line, flattened for the JSONL importers.
 *
 * Internal to traces/import. A hand-written scanner handles the shapes trace lines
 * have (numbers, strings without escapes, true/false/null, arrays of numbers,
 * one level of nested object with scalar values) at memory speed; any other
 * line goes to jansson, which either reads it or gives the error message.
 * Numbers are kept as their text so each field is read at the precision it
 * needs (uint64 hashes beyond 2^63, exact decimal timestamps, doubles). */
#ifndef RH_TRACES_JSONLINE_H
#define RH_TRACES_JSONLINE_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* JL_OTHER: a value of a shape trace lines never need (nested deeper, an
 * array of non-numbers); a field of that shape is only an error if read. */
enum jl_type { JL_NUM, JL_STR, JL_TRUE, JL_FALSE, JL_NULL, JL_ARR, JL_OBJ, JL_OTHER };

typedef struct jl_span {
    uint32_t off, len;
    uint8_t pooled;             /* text lives in the pool, not in the line */
} jl_span;

typedef struct jl_field {
    jl_span key;
    uint8_t type;               /* enum jl_type */
    jl_span text;               /* JL_NUM: the number; JL_STR: the decoded string */
    uint32_t first, count;      /* JL_ARR: elems[first..]; JL_OBJ: members[first..] */
} jl_field;

typedef struct jl_obj {
    const char *line;
    char *pool;                 /* decoded strings and numbers from jansson */
    size_t pool_len, pool_cap;
    jl_field *fields, *members;
    size_t n_fields, n_members, fields_cap, members_cap;
    jl_span *elems;             /* array elements: number texts */
    size_t n_elems, elems_cap;
    uint64_t slow_lines;        /* lines that needed jansson (for the curious) */
} jl_obj;

void jl_init(jl_obj *o);
void jl_free(jl_obj *o);
/* Parses a line. On error: -1 and "line N: invalid JSON: ..." style text
 * (the caller prefixes the file name). */
int jl_parse(jl_obj *o, const char *line, size_t n, uint64_t line_no, rh_err *e);

const jl_field *jl_get(const jl_obj *o, const char *key);
/* The text of a span (not NUL-terminated unless it is a JL_STR). */
const char *jl_text(const jl_obj *o, jl_span s);
int jl_key_is(const jl_obj *o, const jl_field *f, const char *key);

#endif
