/* conn_guard.c — see conn_guard.h.
 *
 * The connections are one doubly linked list under g->mu; the thread scans
 * it whenever it wakes (at the earliest deadline, or when a connection gets
 * one earlier than that), so its work is one pass per deadline that passes:
 * a flood of a thousand silent sockets costs a million cheap comparisons in
 * all. It never cuts before a deadline: the wait ends at the earliest one
 * or after it (pthread_cond_timedwait on the same monotonic clock). */
#include "util/conn_guard.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "util/hashmap.h"
#include "util/progress.h"

struct rh_guard_conn {
    rh_guard_conn *prev, *next;
    int fd;
    uint32_t ip;
    double deadline;    /* 0: none */
    bool cut;           /* shut down: its deadline never changes again */
};

struct rh_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* on CLOCK_MONOTONIC, rh_now's clock */
    pthread_t thread;
    bool quit;
    double wake_at;         /* the thread sleeps until then (INFINITY: until told) */
    rh_guard_conn *head;
    uint64_t open, cut;
    rh_map64 per_ip;        /* ip -> open connections */
};

static void *guard_main(void *arg)
{
    rh_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->quit) {
        double now = rh_now(), next = INFINITY;
        for (rh_guard_conn *c = g->head; c; c = c->next) {
            if (c->cut || c->deadline <= 0) continue;
            if (c->deadline <= now) {
                /* The owner's next read sees the end; errors (a socket the
                 * client already reset) change nothing. */
                shutdown(c->fd, SHUT_RDWR);
                c->cut = true;
                g->cut++;
            } else if (c->deadline < next) next = c->deadline;
        }
        g->wake_at = next;
        if (isinf(next)) {
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double at = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (next - now);
        ts.tv_sec = (time_t)at;
        ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

rh_guard *rh_guard_new(rh_err *e)
{
    rh_guard *g = calloc(1, sizeof *g);
    if (!g) return rh_fail(e, "out of memory starting the connection guard"), NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&g->mu, NULL);
    g->wake_at = INFINITY;
    if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return rh_fail(e, "cannot start the connection guard's thread"), NULL;
    }
    return g;
}

void rh_guard_free(rh_guard *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->quit = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    for (rh_guard_conn *c = g->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    rh_map64_free(&g->per_ip);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* Under g->mu: the thread told when d is earlier than it would wake. */
static void arm(rh_guard *g, double d)
{
    if (d > 0 && d < g->wake_at) {
        g->wake_at = d;
        pthread_cond_signal(&g->cv);
    }
}

rh_guard_conn *rh_guard_open(rh_guard *g, int fd, uint32_t ip, double deadline)
{
    rh_guard_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    c->deadline = deadline;
    pthread_mutex_lock(&g->mu);
    if (ip) {
        uint64_t *n = rh_map64_slot(&g->per_ip, ip, 0, NULL);
        if (n) {
            (*n)++;
            c->ip = ip;   /* else uncounted: out of memory */
        }
    }
    c->next = g->head;
    if (g->head) g->head->prev = c;
    g->head = c;
    g->open++;
    arm(g, deadline);
    pthread_mutex_unlock(&g->mu);
    return c;
}

void rh_guard_deadline(rh_guard *g, rh_guard_conn *c, double deadline)
{
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (!c->cut) {
        c->deadline = deadline;
        arm(g, deadline);
    }
    pthread_mutex_unlock(&g->mu);
}

void rh_guard_close(rh_guard *g, rh_guard_conn *c)
{
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->prev) c->prev->next = c->next;
    else g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    g->open--;
    if (c->ip) {
        uint64_t *n = rh_map64_slot(&g->per_ip, c->ip, 0, NULL);
        if (n && *n) (*n)--;
    }
    pthread_mutex_unlock(&g->mu);
    free(c);
}

uint64_t rh_guard_open_total(rh_guard *g)
{
    pthread_mutex_lock(&g->mu);
    uint64_t n = g->open;
    pthread_mutex_unlock(&g->mu);
    return n;
}

uint64_t rh_guard_open_from(rh_guard *g, uint32_t ip)
{
    uint64_t n = 0;
    pthread_mutex_lock(&g->mu);
    rh_map64_get(&g->per_ip, ip, &n);
    pthread_mutex_unlock(&g->mu);
    return n;
}

uint64_t rh_guard_cut_total(rh_guard *g)
{
    pthread_mutex_lock(&g->mu);
    uint64_t n = g->cut;
    pthread_mutex_unlock(&g->mu);
    return n;
}

uint32_t rh_guard_client_cap(uint32_t max_total, uint32_t per_client)
{
    return per_client ? per_client : (uint32_t)(((uint64_t)max_total + 1) / 2);
}

uint32_t rh_guard_client_margin(uint32_t max_total, uint32_t cap)
{
    uint32_t m = cap >= max_total ? 64 : (max_total - cap) / 2;
    return m > 64 ? 64 : m;
}
