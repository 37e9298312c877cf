/* bench_report.c — results as trace records and as the serving summary. */
#include "client/bench.h"

#include <stdlib.h>
#include <string.h>

void bench_result_request(const bench_dataset *d, size_t i, const bench_result *r, tr_request *out, double *times)
{
    const bench_item *it = &d->items[i];
    memset(out, 0, sizeof *out);
    out->id = it->id;
    out->arrival = r->send;
    out->session_id = it->session_id;
    out->turn = it->turn;
    out->flags = TR_REQ_MEASURED;
    out->finish = (uint8_t)r->finish;
    out->e2e = r->e2e;
    out->input_len = r->input_len ? r->input_len : it->input_len;
    if (r->error) {
        /* The target length, so a replay of this trace asks for the same work. */
        out->output_len = it->output_len;
        return;
    }
    out->ttft = r->ttft;
    out->output_len = r->output_len;
    out->cached_tokens = r->cached_tokens;
    uint32_t n = r->output_len, k = r->n_chunks;
    if (k == 0 || n == 0) return;
    /* More chunks than tokens (a server splitting text): the first n-1 and the
     * last keep both TTFT and the end; fewer: the last time repeats. */
    for (uint32_t j = 0; j < n; j++) {
        uint32_t src = j < k ? j : k - 1;
        if (j == n - 1) src = k - 1;
        times[j] = r->chunk_times[src];
    }
    out->n_times = n;
    out->token_times = times;
}

int bench_summarize(const bench_dataset *d, const bench_result *r, const metrics_slo *slo, metrics_summary *s,
                    rh_err *e)
{
    uint32_t longest = 1;
    for (size_t i = 0; i < d->n; i++) {
        if (!r[i].sent) continue;
        uint32_t n = r[i].error ? d->items[i].output_len : r[i].output_len;
        if (n > longest) longest = n;
    }
    metrics *m = metrics_new(slo);
    double *times = malloc((size_t)longest * sizeof *times);
    if (!m || !times) {
        metrics_free(m);
        free(times);
        return rh_fail(e, "out of memory summarizing %zu requests", d->n);
    }
    int rc = 0;
    for (size_t i = 0; i < d->n && rc == 0; i++) {
        if (!r[i].sent) continue;
        tr_request q;
        bench_result_request(d, i, &r[i], &q, times);
        if (metrics_add_request(m, &q) < 0) rc = rh_fail(e, "out of memory summarizing %zu requests", d->n);
    }
    if (rc == 0) metrics_summarize(m, s);
    metrics_free(m);
    free(times);
    return rc;
}
