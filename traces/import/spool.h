/* spool.h — rows of a public trace held compactly until they are sorted.
 *
 * Internal to traces/import. Public traces may list rows out of order (Azure 2024)
 * and start at an arbitrary clock (epoch dates, BurstGPT's seconds since the
 * service started), so importers add rows here (40 bytes each plus block
 * hashes) and tr_spool_emit sorts them by arrival, keeping file order on
 * ties, numbers them 0..n-1, turns arrivals into offsets from the first
 * request, numbers each session's turns in arrival order, and hands them on
 * as requests. */
#ifndef RH_TRACES_SPOOL_H
#define RH_TRACES_SPOOL_H

#include "traces/import/import.h"
#include "traces/import/lines.h"

typedef struct tr_spool_row {
    int64_t ns;                 /* arrival on the source's clock, in ns */
    uint32_t input_len, output_len;
    uint64_t session;           /* 0 or 1..n_sessions */
    uint32_t flags, n_hashes;
    uint64_t hash_off;          /* into hashes */
} tr_spool_row;

typedef struct tr_spool {
    tr_header header;
    tr_spool_row *rows;
    size_t n, cap;
    uint64_t *hashes;
    size_t n_hashes, hashes_cap;
    uint64_t n_sessions;
} tr_spool;

void tr_spool_init(tr_spool *sp);
void tr_spool_free(tr_spool *sp);
/* Adds the row read at l's current line. A row with neither input nor output
 * tokens (and not flagged failed) is refused there: nothing to serve, and a
 * simulation would count it completed in no time. */
int tr_spool_add(tr_spool *sp, const tr_lines *l, const tr_spool_row *row, const uint64_t *hashes, rh_err *e);
int tr_spool_emit(tr_spool *sp, const tr_sink *s, rh_err *e);

#endif
