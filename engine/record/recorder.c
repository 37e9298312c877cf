/* recorder.c — see recorder.h.
 *
 * The threaded mode is a ring of copied records between the producer (the
 * engine's thread) and one writer thread. The writer takes everything queued
 * at once, writes it without holding the lock, and flushes a frame when a
 * second has passed since the last flush, when asked, or at close. */
#include "engine/record/recorder.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/progress.h"

#define REC_QUEUE 1024         /* records in flight between the threads */
#define REC_FLUSH_S 1.0        /* longest time a written record stays unflushed */

typedef struct rec_item {
    tr_record rec;             /* arrays point at the owned copies below */
    uint64_t *hashes;
    double *times;
} rec_item;

struct recorder {
    tr_writer *w;
    char *path;                /* for messages */
    uint32_t block_size;
    bool threaded;

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;       /* to the writer: records queued, flush asked, closing */
    pthread_cond_t room;       /* to the producer: queue space, or a flush done */
    rec_item *ring, *batch;    /* [REC_QUEUE] each */
    uint32_t head, n;
    uint64_t flush_asked, flush_done;
    bool closing, discard, failed;
    rh_err err;                /* the writer thread's first error */
    void (*on_error)(void *ctx, const char *msg);
    void *on_error_ctx;
};

static void item_free(rec_item *it)
{
    free(it->hashes);
    free(it->times);
    it->hashes = NULL;
    it->times = NULL;
}

static int write_item(tr_writer *w, const rec_item *it, rh_err *e)
{
    return tr_write(w, &it->rec, e);
}

static void deadline_after(struct timespec *ts, double s)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    if (!(s > 0)) s = 0;
    long ns = ts->tv_nsec + (long)(s * 1e9);
    ts->tv_sec += ns / 1000000000L;
    ts->tv_nsec = ns % 1000000000L;
}

static void *writer_main(void *arg)
{
    recorder *r = arg;
    bool dirty = false;
    double last_flush = rh_now();
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->n == 0 && !r->closing && r->flush_asked == r->flush_done) {
            if (!dirty) {
                pthread_cond_wait(&r->wake, &r->mu);
                continue;
            }
            struct timespec ts;
            deadline_after(&ts, last_flush + REC_FLUSH_S - rh_now());
            if (pthread_cond_timedwait(&r->wake, &r->mu, &ts) != 0) break;   /* timed out: flush */
        }
        uint32_t n = r->n;
        for (uint32_t i = 0; i < n; i++) r->batch[i] = r->ring[(r->head + i) % REC_QUEUE];
        r->head = (r->head + n) % REC_QUEUE;
        r->n = 0;
        uint64_t asked = r->flush_asked;
        bool closing = r->closing, discard = r->discard, failed = r->failed;
        pthread_cond_broadcast(&r->room);
        pthread_mutex_unlock(&r->mu);

        rh_err e = {{0}};
        int rc = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (rc == 0 && !failed && !discard) rc = write_item(r->w, &r->batch[i], &e);
            item_free(&r->batch[i]);
        }
        dirty |= n > 0;
        if (rc == 0 && !failed && !discard && dirty &&
            (closing || asked != r->flush_done || rh_now() - last_flush >= REC_FLUSH_S)) {
            rc = tr_writer_flush(r->w, &e);
            dirty = false;
            last_flush = rh_now();
        }

        pthread_mutex_lock(&r->mu);
        if (rc < 0 && !r->failed) {
            r->failed = true;
            r->err = e;
            if (r->on_error) r->on_error(r->on_error_ctx, e.msg);
        }
        r->flush_done = asked;
        pthread_cond_broadcast(&r->room);
        if (closing && r->n == 0) break;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void rec_free(recorder *r)
{
    if (r->threaded) {
        for (uint32_t i = 0; i < r->n; i++) item_free(&r->ring[(r->head + i) % REC_QUEUE]);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->wake);
        pthread_cond_destroy(&r->room);
    }
    free(r->ring);
    free(r->batch);
    free(r->path);
    free(r);
}

recorder *rec_open(const char *path, const tr_header *h, unsigned flags, rh_err *e)
{
    recorder *r = calloc(1, sizeof *r);
    if (!r) return rh_fail(e, "%s: out of memory", path), NULL;
    r->block_size = h->block_size;
    r->threaded = flags & REC_THREAD;
    r->path = strdup(path);
    if (r->threaded) {
        r->ring = calloc(REC_QUEUE, sizeof *r->ring);
        r->batch = calloc(REC_QUEUE, sizeof *r->batch);
    }
    if (!r->path || (r->threaded && (!r->ring || !r->batch))) {
        r->threaded = false;
        rec_free(r);
        return rh_fail(e, "%s: out of memory", path), NULL;
    }
    if (!(r->w = tr_writer_open(path, h, r->threaded ? TR_WRITE_LIVE : 0, e))) {
        r->threaded = false;
        rec_free(r);
        return NULL;
    }
    if (!r->threaded) return r;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->wake, &ca);
    pthread_cond_init(&r->room, NULL);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&r->thread, NULL, writer_main, r) != 0) {
        tr_writer_abort(r->w);
        rec_free(r);
        return rh_fail(e, "%s: cannot start the writer thread", path), NULL;
    }
    return r;
}

void rec_on_error(recorder *r, void (*fn)(void *ctx, const char *msg), void *ctx)
{
    if (!r->threaded) return;
    pthread_mutex_lock(&r->mu);
    r->on_error = fn;
    r->on_error_ctx = ctx;
    pthread_mutex_unlock(&r->mu);
}

/* Hands an item to the writer; takes ownership of its arrays. */
static int enqueue(recorder *r, rec_item *it, rh_err *e)
{
    pthread_mutex_lock(&r->mu);
    while (r->n == REC_QUEUE && !r->failed) pthread_cond_wait(&r->room, &r->mu);
    if (r->failed) {
        if (e) *e = r->err;
        pthread_mutex_unlock(&r->mu);
        item_free(it);
        return -1;
    }
    r->ring[(r->head + r->n) % REC_QUEUE] = *it;
    r->n++;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

int rec_request(recorder *r, const tr_request *q, rh_err *e)
{
    if (!r->threaded) return tr_write_request(r->w, q, e);
    if (tr_check_request(q, r->block_size, e) < 0)
        return rh_prefix(e, "%s: request %llu", r->path, (unsigned long long)q->id);
    rec_item it = {.rec = {.kind = TR_REQUEST, .req = *q}};
    if ((q->n_hashes && !(it.hashes = malloc(q->n_hashes * sizeof *it.hashes))) ||
        (q->n_times && !(it.times = malloc(q->n_times * sizeof *it.times)))) {
        item_free(&it);
        return rh_fail(e, "request %llu: out of memory recording it", (unsigned long long)q->id);
    }
    if (q->n_hashes) memcpy(it.hashes, q->hashes, q->n_hashes * sizeof *it.hashes);
    if (q->n_times) memcpy(it.times, q->token_times, q->n_times * sizeof *it.times);
    it.rec.req.hashes = it.hashes;
    it.rec.req.token_times = it.times;
    return enqueue(r, &it, e);
}

int rec_step(recorder *r, const tr_step *s, rh_err *e)
{
    if (!r->threaded) return tr_write_step(r->w, s, e);
    if (tr_check_step(s, e) < 0) return rh_prefix(e, "%s: step %llu", r->path, (unsigned long long)s->index);
    rec_item it = {.rec = {.kind = TR_STEP, .step = *s}};
    return enqueue(r, &it, e);
}

int rec_flush(recorder *r, rh_err *e)
{
    if (!r->threaded) return tr_writer_flush(r->w, e);
    pthread_mutex_lock(&r->mu);
    uint64_t want = ++r->flush_asked;
    pthread_cond_signal(&r->wake);
    while (r->flush_done < want && !r->failed) pthread_cond_wait(&r->room, &r->mu);
    int rc = r->failed ? -1 : 0;
    if (rc < 0 && e) *e = r->err;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static bool stop_thread(recorder *r, bool discard, rh_err *e)
{
    pthread_mutex_lock(&r->mu);
    r->closing = true;
    r->discard = discard;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    if (r->failed && e) *e = r->err;
    return r->failed;
}

int rec_close(recorder *r, rh_err *e)
{
    int rc = 0;
    if (r->threaded && stop_thread(r, false, e)) rc = -1;
    /* After a write error the file still holds every frame flushed before
     * it: a live recording keeps what it has. */
    if (tr_writer_close(r->w, rc < 0 ? NULL : e) < 0) rc = -1;
    rec_free(r);
    return rc;
}

void rec_abort(recorder *r)
{
    if (!r) return;
    if (r->threaded) stop_thread(r, true, NULL);
    tr_writer_abort(r->w);
    rec_free(r);
}
