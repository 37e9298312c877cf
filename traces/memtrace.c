/* memtrace.c — a whole trace in memory (see trace.h).
 *
 * Hashes and token times are copied into an arena of chunks that are never
 * reallocated: growing the trace must not move arrays that requests already
 * point at. */
#include "traces/trace.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_CHUNK_WORDS ((size_t)1 << 17)   /* 1 MiB */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;            /* in 8-byte words */
    uint64_t words[];
} arena_chunk;

struct tr_arena {
    arena_chunk *head;
};

static void *arena_alloc(tr_trace *t, size_t words)
{
    if (!t->arena) {
        t->arena = calloc(1, sizeof *t->arena);
        if (!t->arena) return NULL;
    }
    arena_chunk *c = t->arena->head;
    if (!c || c->cap - c->used < words) {
        size_t cap = words > ARENA_CHUNK_WORDS ? words : ARENA_CHUNK_WORDS;
        arena_chunk *n = malloc(sizeof *n + cap * sizeof(uint64_t));
        if (!n) return NULL;
        n->used = 0;
        n->cap = cap;
        /* A large one-off block goes behind the head so the head's free
         * space is not wasted. */
        if (c && cap > ARENA_CHUNK_WORDS) {
            n->next = c->next;
            c->next = n;
        } else {
            n->next = c;
            t->arena->head = n;
        }
        c = n;
    }
    void *p = c->words + c->used;
    c->used += words;
    return p;
}

void tr_trace_init(tr_trace *t)
{
    memset(t, 0, sizeof *t);
    tr_header_init(&t->header);
}

void tr_trace_free(tr_trace *t)
{
    tr_header_free(&t->header);
    free(t->requests);
    free(t->steps);
    if (t->arena) {
        arena_chunk *c = t->arena->head;
        while (c) {
            arena_chunk *n = c->next;
            free(c);
            c = n;
        }
        free(t->arena);
    }
    memset(t, 0, sizeof *t);
}

int tr_trace_add_request(tr_trace *t, const tr_request *r, rh_err *e)
{
    if (t->n_requests == t->cap_requests) {
        size_t c = t->cap_requests ? t->cap_requests * 2 : 1024;
        tr_request *n = realloc(t->requests, c * sizeof *n);
        if (!n) return rh_fail(e, "out of memory after %zu requests", t->n_requests);
        t->requests = n;
        t->cap_requests = c;
    }
    tr_request c = *r;
    if (r->n_hashes) {
        uint64_t *h = arena_alloc(t, r->n_hashes);
        if (!h) return rh_fail(e, "out of memory after %zu requests", t->n_requests);
        memcpy(h, r->hashes, r->n_hashes * sizeof *h);
        c.hashes = h;
    } else {
        c.hashes = NULL;
    }
    if (r->n_times) {
        double *d = arena_alloc(t, r->n_times);
        if (!d) return rh_fail(e, "out of memory after %zu requests", t->n_requests);
        memcpy(d, r->token_times, r->n_times * sizeof *d);
        c.token_times = d;
    } else {
        c.token_times = NULL;
    }
    t->requests[t->n_requests++] = c;
    return 0;
}

int tr_trace_add_step(tr_trace *t, const tr_step *s, rh_err *e)
{
    if (t->n_steps == t->cap_steps) {
        size_t c = t->cap_steps ? t->cap_steps * 2 : 1024;
        tr_step *n = realloc(t->steps, c * sizeof *n);
        if (!n) return rh_fail(e, "out of memory after %zu steps", t->n_steps);
        t->steps = n;
        t->cap_steps = c;
    }
    t->steps[t->n_steps++] = *s;
    return 0;
}

/* Merge sort: stable, and qsort has no stable guarantee. */
static void merge_sort(tr_request *a, tr_request *tmp, size_t n)
{
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(a, tmp, h);
    merge_sort(a + h, tmp, n - h);
    if (a[h - 1].arrival <= a[h].arrival) return;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = a[j].arrival < a[i].arrival ? a[j++] : a[i++];
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
}

void tr_trace_sort_requests(tr_trace *t)
{
    if (t->n_requests < 2) return;
    tr_request *tmp = malloc(t->n_requests * sizeof *tmp);
    if (!tmp) {
        /* Insertion sort needs no memory; only reached when memory is gone. */
        for (size_t i = 1; i < t->n_requests; i++) {
            tr_request x = t->requests[i];
            size_t j = i;
            while (j > 0 && t->requests[j - 1].arrival > x.arrival) {
                t->requests[j] = t->requests[j - 1];
                j--;
            }
            t->requests[j] = x;
        }
        return;
    }
    merge_sort(t->requests, tmp, t->n_requests);
    free(tmp);
}

static int load_header(void *ctx, const tr_header *h, rh_err *e)
{
    tr_trace *t = ctx;
    tr_header_free(&t->header);
    if (tr_header_copy(&t->header, h) < 0) return rh_fail(e, "out of memory");
    return 0;
}

static int load_record(void *ctx, const tr_record *r, rh_err *e)
{
    tr_trace *t = ctx;
    return r->kind == TR_REQUEST ? tr_trace_add_request(t, &r->req, e) : tr_trace_add_step(t, &r->step, e);
}

tr_sink tr_trace_sink(tr_trace *t)
{
    return (tr_sink){t, load_header, load_record};
}

int tr_trace_save(const tr_trace *t, const char *path, rh_err *e)
{
    tr_writer *w = tr_writer_open(path, &t->header, 0, e);
    if (!w) return -1;
    for (size_t i = 0; i < t->n_requests; i++)
        if (tr_write_request(w, &t->requests[i], e) < 0) goto fail;
    for (size_t i = 0; i < t->n_steps; i++)
        if (tr_write_step(w, &t->steps[i], e) < 0) goto fail;
    return tr_writer_close(w, e);
fail:
    tr_writer_abort(w);
    return -1;
}
