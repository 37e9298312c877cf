/* spool.c — see spool.h. */
#include "traces/import/spool.h"

#include <stdlib.h>
#include <string.h>

void tr_spool_init(tr_spool *sp)
{
    memset(sp, 0, sizeof *sp);
    tr_header_init(&sp->header);
}

void tr_spool_free(tr_spool *sp)
{
    tr_header_free(&sp->header);
    free(sp->rows);
    free(sp->hashes);
    memset(sp, 0, sizeof *sp);
}

int tr_spool_add(tr_spool *sp, const tr_lines *l, const tr_spool_row *row, const uint64_t *hashes, rh_err *e)
{
    if (!row->input_len && !row->output_len && !(row->flags & TR_REQ_FAILED))
        return rh_fail(e, "%s: line %llu: a request with no input and no output tokens: nothing to serve", l->name,
                       (unsigned long long)l->line_no);
    if (sp->n == sp->cap) {
        size_t c = sp->cap ? sp->cap * 2 : 4096;
        tr_spool_row *r = realloc(sp->rows, c * sizeof *r);
        if (!r) return rh_fail(e, "out of memory after %zu rows", sp->n);
        sp->rows = r;
        sp->cap = c;
    }
    tr_spool_row *r = &sp->rows[sp->n++];
    *r = *row;
    r->hash_off = sp->n_hashes;
    if (row->n_hashes) {
        if (sp->n_hashes + row->n_hashes > sp->hashes_cap) {
            size_t c = sp->hashes_cap ? sp->hashes_cap * 2 : 65536;
            while (c < sp->n_hashes + row->n_hashes) c *= 2;
            uint64_t *h = realloc(sp->hashes, c * sizeof *h);
            if (!h) return rh_fail(e, "out of memory after %zu rows", sp->n);
            sp->hashes = h;
            sp->hashes_cap = c;
        }
        memcpy(sp->hashes + sp->n_hashes, hashes, row->n_hashes * sizeof *hashes);
        sp->n_hashes += row->n_hashes;
    }
    return 0;
}

/* Sort keys carry their row index, so ties keep file order without a
 * stable sort or a global for the comparator. */
typedef struct sort_key {
    int64_t ns;
    uint64_t row;
} sort_key;

static int by_arrival(const void *a, const void *b)
{
    const sort_key *x = a, *y = b;
    if (x->ns != y->ns) return x->ns < y->ns ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

int tr_spool_emit(tr_spool *sp, const tr_sink *s, rh_err *e)
{
    if (s->header && s->header(s->ctx, &sp->header, e) < 0) return -1;
    if (sp->n == 0) return 0;
    sort_key *order = NULL;   /* only when the file is out of order */
    for (size_t i = 1; i < sp->n; i++) {
        if (sp->rows[i].ns >= sp->rows[i - 1].ns) continue;
        order = malloc(sp->n * sizeof *order);
        if (!order) return rh_fail(e, "out of memory sorting %zu rows", sp->n);
        for (size_t k = 0; k < sp->n; k++) order[k] = (sort_key){sp->rows[k].ns, k};
        qsort(order, sp->n, sizeof *order, by_arrival);
        break;
    }
    uint32_t *turns = NULL;
    if (sp->n_sessions) {
        turns = calloc(sp->n_sessions + 1, sizeof *turns);
        if (!turns) {
            free(order);
            return rh_fail(e, "out of memory numbering %llu sessions", (unsigned long long)sp->n_sessions);
        }
    }
    int64_t t0 = sp->rows[order ? order[0].row : 0].ns;
    int rc = 0;
    for (size_t k = 0; k < sp->n && rc == 0; k++) {
        const tr_spool_row *row = &sp->rows[order ? order[k].row : k];
        tr_record rec;
        memset(&rec, 0, sizeof rec);
        rec.kind = TR_REQUEST;
        tr_request *r = &rec.req;
        r->id = k;
        r->arrival = (double)(row->ns - t0) / 1e9;
        r->input_len = row->input_len;
        r->output_len = row->output_len;
        r->flags = row->flags;
        r->session_id = row->session;
        if (row->session && turns) r->turn = turns[row->session]++;
        r->n_hashes = row->n_hashes;
        r->hashes = row->n_hashes ? sp->hashes + row->hash_off : NULL;
        rc = s->record(s->ctx, &rec, e);
    }
    free(order);
    free(turns);
    return rc < 0 ? -1 : 0;
}
