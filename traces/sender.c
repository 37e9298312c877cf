/* sender.c — see sender.h. */
#include "traces/sender.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "util/hashmap.h"

#define NONE UINT32_MAX

struct tr_sender {
    const tr_trace *t;
    double rate_scale;
    uint32_t clients;
    uint32_t *order;            /* trace indices by arrival */
    uint64_t next;              /* into order */
    uint64_t sent;
    double *free_at;            /* closed loop: when each idle client freed up, oldest first */
    uint32_t free_head, free_n;
    /* closed loop with sessions: a session's later turns go to the client
     * that sent its first, each once the turn before it finished */
    uint32_t *next_turn;        /* per trace index: the session's next request, or NONE */
    uint8_t *later_turn;        /* per trace index: not a session's first request */
    uint32_t *ready;            /* turns whose previous turn finished, in that order (a ring) */
    double *ready_at;
    uint32_t ready_head, ready_n;
};

static int cmp_arrival(const void *a, const void *b, void *ctx)
{
    const tr_trace *t = ctx;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    double x = t->requests[i].arrival, y = t->requests[j].arrival;
    if (x != y) return (x > y) - (x < y);
    return (i > j) - (i < j);     /* stable: trace order among equal arrivals */
}

/* Links each session's requests in send order. Each client holds one
 * session at a time, so at most `clients` turns wait in the ring. */
static int link_sessions(tr_sender *s, rh_err *e)
{
    size_t n = s->t->n_requests;
    s->next_turn = malloc((n ? n : 1) * sizeof *s->next_turn);
    s->later_turn = calloc(n ? n : 1, 1);
    s->ready = malloc((size_t)s->clients * sizeof *s->ready);
    s->ready_at = malloc((size_t)s->clients * sizeof *s->ready_at);
    rh_map64 last = {0};   /* session id -> its latest request so far */
    int rc = 0;
    if (!s->next_turn || !s->later_turn || !s->ready || !s->ready_at) rc = -1;
    for (size_t k = 0; rc == 0 && k < n; k++) {
        uint32_t i = s->order[k];
        s->next_turn[i] = NONE;
        uint64_t sid = s->t->requests[i].session_id;
        if (!sid) continue;
        int fresh;
        uint64_t *prev = rh_map64_slot(&last, sid, i, &fresh);
        if (!prev) {
            rc = -1;
            break;
        }
        if (!fresh) {
            s->next_turn[*prev] = i;
            s->later_turn[i] = 1;
            *prev = i;
        }
    }
    rh_map64_free(&last);
    if (rc < 0) rh_fail(e, "out of memory for %zu requests' sessions", n);
    return rc;
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
    if (clients && link_sessions(s, e) < 0) {
        tr_sender_free(s);
        return NULL;
    }
    return s;
}

int tr_sender_next(tr_sender *s, double now, uint32_t *index, double *sent, double *next)
{
    *next = INFINITY;
    /* closed loop: a first request (or one outside sessions) needs a free
     * client; later turns wait in the ring for the turn before them */
    while (s->next < s->t->n_requests && s->later_turn && s->later_turn[s->order[s->next]]) s->next++;
    double at_new = INFINITY, at_turn = INFINITY;
    uint32_t i_new = NONE, i_turn = NONE;
    if (s->next < s->t->n_requests) {
        i_new = s->order[s->next];
        at_new = s->t->requests[i_new].arrival / s->rate_scale;
        if (s->clients) {
            if (s->free_n == 0) at_new = INFINITY;
            else if (s->free_at[s->free_head] > at_new) at_new = s->free_at[s->free_head];
        }
    }
    if (s->ready_n) {
        i_turn = s->ready[s->ready_head];
        at_turn = s->t->requests[i_turn].arrival / s->rate_scale;
        if (s->ready_at[s->ready_head] > at_turn) at_turn = s->ready_at[s->ready_head];
    }
    bool turn = at_turn <= at_new;   /* ties: the session that is already going */
    double at = turn ? at_turn : at_new;
    if (at > now || at == INFINITY) {
        *next = at;
        return 0;
    }
    if (turn) {
        s->ready_head = (s->ready_head + 1) % s->clients;
        s->ready_n--;
        *index = i_turn;
    } else {
        if (s->clients) {
            s->free_head = (s->free_head + 1) % s->clients;
            s->free_n--;
        }
        s->next++;
        *index = i_new;
    }
    s->sent++;
    *sent = at;
    return 1;
}

void tr_sender_done(tr_sender *s, uint32_t index, double t)
{
    if (!s->clients) return;
    if (s->next_turn && index < s->t->n_requests && s->next_turn[index] != NONE && s->ready_n < s->clients) {
        /* the same client sends the session's next turn */
        uint32_t k = (s->ready_head + s->ready_n++) % s->clients;
        s->ready[k] = s->next_turn[index];
        s->ready_at[k] = t;
        return;
    }
    if (s->free_n == s->clients) return;
    s->free_at[(s->free_head + s->free_n++) % s->clients] = t;
}

uint64_t tr_sender_left(const tr_sender *s)
{
    return s->t->n_requests - s->sent;
}

void tr_sender_free(tr_sender *s)
{
    if (!s) return;
    free(s->order);
    free(s->free_at);
    free(s->next_turn);
    free(s->later_turn);
    free(s->ready);
    free(s->ready_at);
    free(s);
}
