/* bench_client.c — sends a dataset's requests on schedule and times them.
 *
 * One thread drives every transfer through libcurl's multi interface: it
 * admits requests whose arrival has come (respecting the concurrency cap and
 * session order), lets curl move bytes, and stamps each content chunk with the
 * monotonic clock inside the write callback, which curl calls as soon as the
 * bytes are read. A single thread keeps the timestamps honest: no lock or
 * scheduler hop sits between a chunk's arrival and its stamp. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/bench.h"
#include "client/bench_body.h"
#include "client/bench_xfer.h"
#include "util/progress.h"

static volatile sig_atomic_t stop_requested;

void bench_stop(void)
{
    stop_requested = 1;
}

typedef struct run {
    const bench_config *cfg;
    const bench_dataset *d;
    bench_result *out;
    CURLM *multi;
    char *url;
    char *model_json;
    int32_t *tokens;                /* scratch: the longest prompt */
    size_t *heap, n_heap;           /* arrived, unblocked, not yet sent: a min-heap of indices */
    int64_t *succ;                  /* the next turn of an item's session, or -1 */
    uint8_t *state;                 /* per item, below */
    bench_xfer **live;              /* per item: its transfer while in flight */
    uint64_t inflight, done, failed;
} run;

enum { ST_FUTURE = 0, ST_BLOCKED, ST_QUEUED, ST_SENT, ST_DONE };

static int launch(run *R, size_t i, double t0, rh_err *e)
{
    bench_xfer *x = bench_xfer_new(R->cfg, R->d, i, R->url, R->model_json, R->tokens, &R->out[i]);
    if (!x) return rh_fail(e, "out of memory building request %zu", i);
    bench_xfer_sent(x, t0);
    if (curl_multi_add_handle(R->multi, x->easy) != CURLM_OK) {
        bench_xfer_free(x);
        return rh_fail(e, "libcurl refused request %zu", i);
    }
    R->state[i] = ST_SENT;
    R->live[i] = x;
    R->inflight++;
    return 0;
}

/* Waiting requests leave in arrival order (items are sorted by arrival, so
 * by index). A heap rather than a FIFO because a session's next turn joins
 * late, when its previous turn finishes, yet is due before anything that
 * arrived after it — and in a closed-loop trace (all arrivals 0) that keeps
 * file order, as the trace's clients would. */
static void enqueue(run *R, size_t i)
{
    R->state[i] = ST_QUEUED;
    size_t k = R->n_heap++;
    while (k > 0 && R->heap[(k - 1) / 2] > i) {
        R->heap[k] = R->heap[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    R->heap[k] = i;
}

static size_t dequeue(run *R)
{
    size_t top = R->heap[0], last = R->heap[--R->n_heap], k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= R->n_heap) break;
        if (c + 1 < R->n_heap && R->heap[c + 1] < R->heap[c]) c++;
        if (R->heap[c] >= last) break;
        R->heap[k] = R->heap[c];
        k = c;
    }
    if (R->n_heap) R->heap[k] = last;
    return top;
}

static void complete(run *R, bench_xfer *x, CURLcode rc, int aborted)
{
    bench_xfer_conclude(x, rc, aborted, R->d);
    size_t i = x->item;
    curl_multi_remove_handle(R->multi, x->easy);
    if (R->out[i].error) {
        R->failed++;
        if (R->cfg->log)
            fprintf(R->cfg->log, "request %llu failed: %s\n", (unsigned long long)R->d->items[i].id, R->out[i].error);
    }
    bench_xfer_free(x);
    R->live[i] = NULL;
    R->state[i] = ST_DONE;
    R->inflight--;
    R->done++;
    int64_t s = R->succ[i];
    if (s >= 0 && R->state[s] == ST_BLOCKED) enqueue(R, (size_t)s);
}

static int drain(run *R)
{
    int got = 0, left;
    CURLMsg *m;
    while ((m = curl_multi_info_read(R->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        bench_xfer *x = NULL;
        CURL *h = m->easy_handle;
        CURLcode rc = m->data.result;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&x);
        complete(R, x, rc, 0);
        got++;
    }
    return got;
}

/* Stopped: everything in flight is aborted and recorded as such. */
static void abort_inflight(run *R)
{
    for (size_t i = 0; i < R->d->n; i++)
        if (R->live[i]) complete(R, R->live[i], CURLE_OK, 1);
}

static void run_free(run *R)
{
    if (R->multi) curl_multi_cleanup(R->multi);
    free(R->url);
    free(R->model_json);
    free(R->tokens);
    free(R->heap);
    free(R->succ);
    free(R->state);
    free(R->live);
}

static int run_init(run *R, const bench_config *c, const bench_dataset *d, bench_result *out, rh_err *e)
{
    memset(R, 0, sizeof *R);
    R->cfg = c;
    R->d = d;
    R->out = out;
    uint32_t longest = 1;
    for (size_t i = 0; i < d->n; i++)
        if (d->items[i].input_len > longest) longest = d->items[i].input_len;
    R->multi = curl_multi_init();
    R->url = bench_join_url(c->base_url, c->endpoint);
    R->tokens = malloc((size_t)longest * sizeof *R->tokens);
    R->heap = malloc((d->n ? d->n : 1) * sizeof *R->heap);
    R->succ = malloc((d->n ? d->n : 1) * sizeof *R->succ);
    R->state = calloc(d->n ? d->n : 1, 1);
    R->live = calloc(d->n ? d->n : 1, sizeof *R->live);
    R->model_json = bench_json_string(c->model ? c->model : "");
    if (!R->model_json) {
        run_free(R);
        return rh_fail(e, "the model name is not valid UTF-8");
    }
    if (!R->multi || !R->url || !R->tokens || !R->heap || !R->succ || !R->state || !R->live) {
        run_free(R);
        return rh_fail(e, "out of memory starting a run of %zu requests", d->n);
    }
    for (size_t i = 0; i < d->n; i++) R->succ[i] = -1;
    /* Only a link to an earlier item can be honoured without deadlock. */
    for (size_t i = 0; i < d->n; i++) {
        int64_t a = d->items[i].after;
        if (a >= 0 && (size_t)a < i) R->succ[a] = (int64_t)i;
    }
    memset(out, 0, d->n * sizeof *out);
    return 0;
}

/* Milliseconds to wait for the next event: curl's own timers shorten the wait
 * inside curl_multi_poll; the next arrival and the stop check are ours. The
 * wait is rounded up, so a request is sent at most ~1 ms after its arrival. */
static int wait_ms(const run *R, double now, size_t next)
{
    double ms = 100;
    int slot = !R->cfg->max_concurrency || R->inflight < R->cfg->max_concurrency;
    if (slot && R->n_heap) return 0;
    if (next < R->d->n) {
        double until = (R->d->items[next].arrival - now) * 1e3;
        if (until < ms) ms = until;
    }
    return ms <= 0 ? 0 : (int)ceil(ms);
}

int bench_run(const bench_config *c, const bench_dataset *d, bench_result *out, bench_run_info *info, rh_err *e)
{
    memset(info, 0, sizeof *info);
    if (bench_curl_init(e) < 0) return -1;
    run R;
    if (run_init(&R, c, d, out, e) < 0) return -1;
    rh_progress bar;
    if (c->progress) rh_progress_begin(&bar, "bench", d->n);
    double t0 = rh_now(), last = 0;
    info->t0 = t0;
    size_t next = 0;
    int rc = 0;
    while (R.done < d->n) {
        if (stop_requested) {
            abort_inflight(&R);
            info->interrupted = 1;
            break;
        }
        double now = rh_now() - t0;
        for (; next < d->n && d->items[next].arrival <= now; next++) {
            int64_t a = d->items[next].after;
            if (a >= 0 && (size_t)a < next && R.state[a] != ST_DONE) R.state[next] = ST_BLOCKED;
            else enqueue(&R, next);
        }
        while (R.n_heap && (!c->max_concurrency || R.inflight < c->max_concurrency)) {
            if (launch(&R, dequeue(&R), t0, e) < 0) {
                abort_inflight(&R);
                rc = -1;
                goto out;
            }
            if (R.inflight > info->max_inflight) info->max_inflight = R.inflight;
        }
        int running;
        curl_multi_perform(R.multi, &running);
        if (drain(&R)) {
            last = rh_now() - t0;
            continue;               /* freed slots: send what waits before sleeping */
        }
        curl_multi_poll(R.multi, NULL, 0, wait_ms(&R, rh_now() - t0, next), NULL);
        if (c->progress) {
            snprintf(bar.extra, sizeof bar.extra, "%llu in flight, %llu failed", (unsigned long long)R.inflight,
                     (unsigned long long)R.failed);
            rh_progress_update(&bar, R.done);
        }
    }
    if (!info->interrupted) last = rh_now() - t0;
out:
    if (c->progress) {
        rh_progress_update(&bar, R.done);
        rh_progress_end(&bar);
    }
    info->wall = last;
    stop_requested = 0;             /* a stop ends one run, not the next */
    run_free(&R);
    return rc;
}

void bench_results_free(bench_result *r, size_t n)
{
    if (!r) return;
    for (size_t i = 0; i < n; i++) {
        free(r[i].chunk_times);
        free(r[i].error);
        free(r[i].text);
    }
    free(r);
}
