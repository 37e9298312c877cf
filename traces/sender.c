/* sender.c — see sender.h. */
#include "traces/sender.h"

#include <math.h>
#include <stdlib.h>

struct tr_sender {
    const tr_trace *t;
    double rate_scale;
    uint32_t clients;
    uint32_t *order;            /* trace indices by arrival */
    uint64_t next;              /* into order */
    double *free_at;            /* closed loop: when each idle client freed up, oldest first */
    uint32_t free_head, free_n;
};

static int cmp_arrival(const void *a, const void *b, void *ctx)
{
    const tr_trace *t = ctx;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    double x = t->requests[i].arrival, y = t->requests[j].arrival;
    if (x != y) return (x > y) - (x < y);
    return (i > j) - (i < j);     /* stable: trace order among equal arrivals */
}

tr_sender *tr_sender_new(const tr_trace *t, double rate_scale, uint32_t clients, rh_err *e)
{
    tr_sender *s = calloc(1, sizeof *s);
    size_t n = t->n_requests;
    if (s) {
        s->order = malloc((n ? n : 1) * sizeof *s->order);
        s->free_at = clients ? calloc(clients, sizeof *s->free_at) : NULL;
    }
    if (!s || !s->order || (clients && !s->free_at)) {
        tr_sender_free(s);
        rh_fail(e, "out of memory for %zu requests", n);
        return NULL;
    }
    s->t = t;
    s->rate_scale = rate_scale;
    s->clients = clients;
    s->free_n = clients;          /* every client idle from the start */
    for (size_t i = 0; i < n; i++) s->order[i] = (uint32_t)i;
    qsort_r(s->order, n, sizeof *s->order, cmp_arrival, (void *)t);
    return s;
}

int tr_sender_next(tr_sender *s, double now, uint32_t *index, double *sent, double *next)
{
    *next = INFINITY;
    if (s->next >= s->t->n_requests) return 0;
    uint32_t i = s->order[s->next];
    double at = s->t->requests[i].arrival / s->rate_scale;
    if (s->clients) {
        if (s->free_n == 0) return 0;
        double freed = s->free_at[s->free_head];
        if (freed > at) at = freed;
    }
    if (at > now) {
        *next = at;
        return 0;
    }
    if (s->clients) {
        s->free_head = (s->free_head + 1) % s->clients;
        s->free_n--;
    }
    s->next++;
    *index = i;
    *sent = at;
    return 1;
}

void tr_sender_done(tr_sender *s, double t)
{
    if (!s->clients || s->free_n == s->clients) return;
    s->free_at[(s->free_head + s->free_n++) % s->clients] = t;
}

uint64_t tr_sender_left(const tr_sender *s)
{
    return s->t->n_requests - s->next;
}

void tr_sender_free(tr_sender *s)
{
    if (!s) return;
    free(s->order);
    free(s->free_at);
    free(s);
}
