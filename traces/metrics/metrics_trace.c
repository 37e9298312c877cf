/* metrics_trace.c — the serving metrics of any trace file whose requests
 * are measured (a recorded engine run, a simulated run, a benchmark
 * client's trace), read as a stream. */
#include "traces/import/import.h"
#include "traces/metrics/metrics.h"

static int on_header(void *ctx, const tr_header *h, rh_err *e)
{
    (void)ctx;
    (void)h;
    (void)e;
    return 0;
}

static int on_record(void *ctx, const tr_record *r, rh_err *e)
{
    metrics_reader *a = ctx;
    if (r->kind == TR_REQUEST) {
        if (r->req.flags & TR_REQ_MEASURED) a->measured++;
        if (metrics_add_request(a->m, &r->req) < 0) return rh_fail(e, "out of memory");
    } else if (r->kind == TR_STEP) {
        metrics_add_step(a->m, &r->step);
    }
    return 0;
}

int metrics_reader_init(metrics_reader *r, const metrics_slo *slo, rh_err *e)
{
    r->measured = 0;
    if (!(r->m = metrics_new(slo))) return rh_fail(e, "out of memory");
    return 0;
}

tr_sink metrics_reader_sink(metrics_reader *r)
{
    return (tr_sink){r, on_header, on_record};
}

int metrics_reader_finish(metrics_reader *r, int truncated, metrics_summary *out)
{
    if (!r->measured) return 0;
    if (truncated) metrics_set_truncated(r->m);
    return metrics_summarize(r->m, out) < 0 ? -1 : 1;
}

void metrics_reader_free(metrics_reader *r)
{
    metrics_free(r->m);
    r->m = NULL;
}

int metrics_of_trace(const char *path, const metrics_slo *slo, metrics_summary *out, rh_err *e)
{
    metrics_reader r;
    if (metrics_reader_init(&r, slo, e) < 0) return -1;
    tr_sink s = metrics_reader_sink(&r);
    int truncated = 0;
    int rc = tr_read(path, NULL, &s, &truncated, e);
    if (rc == 0) {
        rc = metrics_reader_finish(&r, truncated, out);
        if (rc < 0) rh_fail(e, "out of memory");
    }
    metrics_reader_free(&r);
    return rc;
}
