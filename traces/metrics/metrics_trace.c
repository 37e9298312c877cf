/* metrics_trace.c — metrics_of_trace: the serving metrics of any trace file
 * whose requests are measured (a recorded engine run, a simulated run, a
 * benchmark client's trace), read as a stream. */
#include "traces/metrics/metrics.h"
#include "traces/import/import.h"

typedef struct acc {
    metrics *m;
    uint64_t measured;
} acc;

static int on_header(void *ctx, const tr_header *h, rh_err *e)
{
    (void)ctx;
    (void)h;
    (void)e;
    return 0;
}

static int on_record(void *ctx, const tr_record *r, rh_err *e)
{
    acc *a = ctx;
    if (r->kind == TR_REQUEST) {
        if (r->req.flags & TR_REQ_MEASURED) a->measured++;
        if (metrics_add_request(a->m, &r->req) < 0) return rh_fail(e, "out of memory");
    } else if (r->kind == TR_STEP) {
        metrics_add_step(a->m, &r->step);
    }
    return 0;
}

int metrics_of_trace(const char *path, const metrics_slo *slo, metrics_summary *out, rh_err *e)
{
    acc a = {metrics_new(slo), 0};
    if (!a.m) return rh_fail(e, "out of memory");
    tr_sink s = {&a, on_header, on_record};
    int truncated = 0;
    int rc = tr_read(path, NULL, &s, &truncated, e);
    if (rc == 0 && a.measured) {
        if (truncated) metrics_set_truncated(a.m);
        metrics_summarize(a.m, out);
    }
    metrics_free(a.m);
    if (rc < 0) return -1;
    return a.measured ? 1 : 0;
}
