/* sglang_lex.h — one line of an SGLang server log, taken apart (internal to
 * traces/import; sglang_log.c gives the lines their meaning).
 *
 * A line SGLang's logger wrote is "[YYYY-MM-DD HH:MM:SS[.mmm] TAGS] MESSAGE",
 * TAGS naming the rank ("TP0", "DP1 TP4", "PP0 TP0 EP0", or none); whatever
 * precedes the bracket (a docker or journald prefix) is skipped. Scheduler
 * messages carry "key: value" fields separated by commas; startup messages
 * carry "key=value" pairs. Nothing here allocates, and every span points
 * into the line. */
#ifndef RH_TRACES_SGLANG_LEX_H
#define RH_TRACES_SGLANG_LEX_H

#include <stddef.h>
#include <stdint.h>

#define SG_MAX_TAGS 63      /* bytes of TAGS; a longer bracket is not a stamp */
#define SG_MAX_FIELDS 64

typedef struct sg_span {
    const char *s;
    size_t n;
} sg_span;

typedef struct sg_stamp {
    int64_t ns;             /* the local time read as UTC: only differences matter */
    int ms;                 /* the time had a fraction (SGLANG_LOG_MS) */
    sg_span tags, msg;      /* trimmed */
} sg_stamp;

typedef struct sg_fields {
    sg_span k[SG_MAX_FIELDS], v[SG_MAX_FIELDS];
    int n;
} sg_fields;

/* The first stamp in the line's first 256 bytes: 1, or 0 when there is none. */
int sg_parse_stamp(const char *line, size_t n, sg_stamp *st);
int sg_starts(sg_span s, const char *word);
/* `word` anywhere in s: its position, or NULL. */
const char *sg_find(sg_span s, const char *word);
/* The message after a marker such as "Prefill batch": an optional forward
 * counter " [N]" (SGLANG_LOG_FORWARD_ITERS; *ctr = -1 when absent) is
 * taken off, the fields after it split. */
void sg_split_after(sg_span msg, const char *marker, int64_t *ctr, sg_fields *f);
/* "key: value, ..." split at commas (items without a colon are skipped). */
void sg_split_fields(sg_span s, sg_fields *f);
/* The value of the last field named exactly `key`, or NULL. */
const sg_span *sg_field(const sg_fields *f, const char *key);
/* The tags hold the token "TP0", or there are none (a single rank). */
int sg_tags_tp0(sg_span tags);
/* The highest "TPn" among the tags, or -1. */
int64_t sg_tags_max_tp(sg_span tags);
/* "key=VALUE" in a startup message, the key preceded by '(' or a space:
 * VALUE up to the next ',' or ')', trimmed; 1 found, 0 absent. */
int sg_startup_value(sg_span msg, const char *key, sg_span *value);
/* The same for key='TEXT': TEXT without its quotes. */
int sg_startup_quoted(sg_span msg, const char *key, sg_span *value);

#endif
