/* proxy_record.c — the router's trace (--record-trace): one measured
 * request per routed request, timed client-side by bench's own observer
 * (client/bench_xfer.h) and turned into a record by bench's own
 * bench_result_request, so a router trace and a `rehearse bench
 * --record-trace` trace mean the same thing. The worker rides in the flags
 * (proxy.h).
 *
 * Written live, and each record handed to the kernel before its client
 * has the end of its answer: rp_record ends a zstd frame with it
 * (tr_writer_flush: the whole frame in one write(2)), so a router killed
 * by SIGKILL leaves every record whose response went out in the page
 * cache, and the file readable up to its last whole frame (a frame the
 * kill itself cut holds a record whose response never left). Concurrent
 * requests share a frame when one flush covers records others wrote
 * meanwhile. No fsync: the page cache outlives the process; a power cut
 * is not what this guards against. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/proxy_impl.h"

int rp_record_open(rproxy *p, const char *model, rh_err *e)
{
    tr_header h;
    tr_header_init(&h);
    h.block_size = p->cfg.prefix_block;
    char buf[64];
    int bad = tr_header_set_model(&h, model ? model : "") < 0;
    bad |= tr_header_set(&h, "source", "rehearse router") < 0;
    bad |= tr_header_set(&h, "router.policy", router_policy_name(p->cfg.core.policy)) < 0;
    snprintf(buf, sizeof buf, "%d", RP_TRACE_WORKER_SHIFT);
    bad |= tr_header_set(&h, "router.worker_flags_shift", buf) < 0;
    snprintf(buf, sizeof buf, "%u", p->cfg.prefix_block);
    bad |= tr_header_set(&h, "router.prefix_block", buf) < 0;
    size_t len = 1;
    for (uint32_t i = 0; i < p->n; i++) len += strlen(p->w[i].url) + 1;
    char *all = calloc(1, len);
    bad |= !all;
    for (uint32_t i = 0; all && i < p->n; i++) {
        if (i) strcat(all, " ");
        strcat(all, p->w[i].url);
        char key[48];
        snprintf(key, sizeof key, "router.worker.%u", i);
        bad |= tr_header_set(&h, key, p->w[i].url) < 0;
    }
    if (all) bad |= tr_header_set(&h, "router.workers", all) < 0;
    free(all);
    if (bad) {
        tr_header_free(&h);
        return rh_fail(e, "out of memory building the trace header");
    }
    p->rec = tr_writer_open(p->cfg.record_path, &h, TR_WRITE_LIVE, e);
    tr_header_free(&h);
    if (!p->rec) return rh_prefix(e, "--record-trace");
    return 0;
}

void rp_record(rproxy *p, uint64_t id, int worker, const rp_prompt *prompt, bench_xfer *obs, bench_result *res,
               CURLcode rc, bool aborted)
{
    bench_item it = {.id = id, .input_len = prompt->length, .output_len = prompt->max_tokens, .after = -1};
    bench_dataset d = {.items = &it, .n = 1};
    if (obs) bench_xfer_conclude(obs, rc, aborted ? 1 : 0, &d);
    uint32_t need = res->output_len > it.output_len ? res->output_len : it.output_len;
    double *times = malloc((need ? need : 1) * sizeof *times);
    if (!times) return;   /* out of memory: the record is lost, the router goes on */
    tr_request q;
    bench_result_request(&d, 0, res, &q, times);
    q.flags |= (uint32_t)(worker + 1) << RP_TRACE_WORKER_SHIFT;
    uint32_t bs = p->cfg.prefix_block;
    if (prompt->by_ids && prompt->n_hashes && bs) {
        uint32_t span = tr_blocks(q.input_len, bs);
        q.hashes = prompt->hashes;
        q.n_hashes = prompt->n_hashes < span ? prompt->n_hashes : span;
    }
    rh_err e = {{0}};
    pthread_mutex_lock(&p->rec_mu);
    uint64_t mine = 0;
    if (p->rec && !p->rec_failed) {
        if (tr_write_request(p->rec, &q, &e) < 0) {
            p->rec_failed = true;
            p->rec_err = e;
            fprintf(stderr, "rehearse router: the recording stopped: %s\n", e.msg);
        } else mine = ++p->rec_written;
    }
    pthread_mutex_unlock(&p->rec_mu);
    free(times);
    /* The lock is let go between the write and the flush, so records of
     * other requests ending now join this frame and their own flush finds
     * nothing left to do. */
    pthread_mutex_lock(&p->rec_mu);
    if (mine && p->rec_flushed < mine && p->rec && !p->rec_failed) {
        uint64_t upto = p->rec_written;
        if (tr_writer_flush(p->rec, &e) < 0) {
            p->rec_failed = true;
            p->rec_err = e;
            fprintf(stderr, "rehearse router: the recording stopped: %s\n", e.msg);
        } else p->rec_flushed = upto;
    }
    pthread_mutex_unlock(&p->rec_mu);
}

void rp_record_flush(rproxy *p)
{
    rh_err e = {{0}};
    pthread_mutex_lock(&p->rec_mu);
    if (p->rec && !p->rec_failed && p->rec_flushed < p->rec_written) {
        if (tr_writer_flush(p->rec, &e) < 0) {
            p->rec_failed = true;
            p->rec_err = e;
            fprintf(stderr, "rehearse router: the recording stopped: %s\n", e.msg);
        } else p->rec_flushed = p->rec_written;
    }
    pthread_mutex_unlock(&p->rec_mu);
}

int rp_record_close(rproxy *p, rh_err *e)
{
    pthread_mutex_lock(&p->rec_mu);
    tr_writer *w = p->rec;
    p->rec = NULL;
    bool failed = p->rec_failed;
    rh_err why = p->rec_err;
    pthread_mutex_unlock(&p->rec_mu);
    if (!w) return failed ? rh_fail(e, "--record-trace %s: %s", p->cfg.record_path, why.msg) : 0;
    rh_err ce = {{0}};
    int rc = tr_writer_close(w, &ce);
    if (failed) return rh_fail(e, "--record-trace %s: %s", p->cfg.record_path, why.msg);
    if (rc < 0) return rh_fail(e, "--record-trace %s: %s", p->cfg.record_path, ce.msg);
    return 0;
}
