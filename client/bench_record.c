/* bench_record.c — the client-side trace of a run (--record-trace): what any
 * server did, as measured from outside, in the format the simulator replays. */
#include "client/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/bench_json.h"
#include "traces/prompt.h"

typedef struct by_send {
    double send;
    size_t index;
} by_send;

static int cmp_send(const void *a, const void *b)
{
    const by_send *x = a, *y = b;
    if (x->send != y->send) return x->send < y->send ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

int bench_write_trace(const char *path, const bench_dataset *d, const bench_result *r, const tr_header *h, rh_err *e)
{
    uint32_t longest_out = 1, longest_in = 1;
    size_t n_sent = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (!r[i].sent) continue;
        n_sent++;
        uint32_t o = r[i].error ? d->items[i].output_len : r[i].output_len;
        if (o > longest_out) longest_out = o;
        if (d->items[i].input_len > longest_in) longest_in = d->items[i].input_len;
    }
    /* Synthetic prompts get content hashes of their real ids at the record's
     * block size; a trace dataset keeps the hashes it came with. */
    int content_hashes = !d->hashes_from_source && d->trace_block_size > 0;
    tr_header hd;
    memset(&hd, 0, sizeof hd);      /* tr_header_copy initializes it */
    by_send *order = malloc((n_sent ? n_sent : 1) * sizeof *order);
    double *times = malloc((size_t)longest_out * sizeof *times);
    int32_t *tokens = content_hashes ? malloc((size_t)longest_in * sizeof *tokens) : NULL;
    uint64_t *hashes = content_hashes ? malloc(((size_t)longest_in / d->trace_block_size + 1) * sizeof *hashes) : NULL;
    if (!order || !times || (content_hashes && (!tokens || !hashes)) || tr_header_copy(&hd, h) < 0) {
        free(order);
        free(times);
        free(tokens);
        free(hashes);
        tr_header_free(&hd);
        return rh_fail(e, "%s: out of memory writing the trace", path);
    }
    hd.block_size = d->trace_block_size;
    size_t k = 0;
    for (size_t i = 0; i < d->n; i++)
        if (r[i].sent) order[k++] = (by_send){r[i].send, i};
    qsort(order, n_sent, sizeof *order, cmp_send);
    tr_writer *w = tr_writer_open(path, &hd, 0, e);
    int rc = w ? 0 : -1;
    for (size_t j = 0; j < n_sent && rc == 0; j++) {
        size_t i = order[j].index;
        tr_request q;
        bench_result_request(d, i, &r[i], &q, times);
        if (content_hashes) {
            bench_item_tokens(d, i, tokens);
            q.n_hashes = tr_prompt_block_hashes(tokens, d->items[i].input_len, d->trace_block_size, d->prompt_seed,
                                                hashes);
            q.hashes = hashes;
        } else if (d->hashes_from_source && hd.block_size) {
            q.n_hashes = d->items[i].n_hashes;
            q.hashes = d->items[i].hashes;
        }
        /* A chat server's own prompt count may differ from ours: never claim
         * more blocks than the recorded prompt spans. */
        if (hd.block_size) {
            uint32_t span = (uint32_t)(((uint64_t)q.input_len + hd.block_size - 1) / hd.block_size);
            if (q.n_hashes > span) q.n_hashes = span;
        }
        rc = tr_write_request(w, &q, e);
    }
    if (w) {
        if (rc < 0) tr_writer_abort(w);
        else rc = tr_writer_close(w, e);
    }
    free(order);
    free(times);
    free(tokens);
    free(hashes);
    tr_header_free(&hd);
    return rc;
}

int bench_trace_header(tr_header *h, const bench_config *c, const bench_dataset *d, const bench_json_settings *js,
                       rh_err *e)
{
    char buf[64];
    int bad = tr_header_set_model(h, c->model ? c->model : "") < 0;
    bad |= tr_header_set(h, "source", "rehearse bench") < 0;
    bad |= tr_header_set(h, "base_url", c->base_url) < 0;
    bad |= tr_header_set(h, "endpoint", c->endpoint) < 0;
    bad |= tr_header_set(h, "stream", c->stream ? "true" : "false") < 0;
    bad |= tr_header_set(h, "dataset", d->name) < 0;
    if (isnan(js->request_rate)) snprintf(buf, sizeof buf, "trace");
    else if (!isfinite(js->request_rate)) snprintf(buf, sizeof buf, "inf");
    else snprintf(buf, sizeof buf, "%.17g", js->request_rate);
    bad |= tr_header_set(h, "request_rate", buf) < 0;
    snprintf(buf, sizeof buf, "%.17g", js->burstiness);
    bad |= tr_header_set(h, "burstiness", buf) < 0;
    snprintf(buf, sizeof buf, "%.17g", js->rate_scale);
    bad |= tr_header_set(h, "rate_scale", buf) < 0;
    if (c->max_concurrency) snprintf(buf, sizeof buf, "%llu", (unsigned long long)c->max_concurrency);
    else snprintf(buf, sizeof buf, "unlimited");
    bad |= tr_header_set(h, "max_concurrency", buf) < 0;
    snprintf(buf, sizeof buf, "%llu", js->seed);
    bad |= tr_header_set(h, "seed", buf) < 0;
    snprintf(buf, sizeof buf, "%u", d->vocab);
    bad |= tr_header_set(h, "vocab_size", buf) < 0;
    return bad ? rh_fail(e, "out of memory building the trace header") : 0;
}
