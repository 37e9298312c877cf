/* hist.c — see hist.h. */
#include "engine/speculative/hist.h"

#include <stdio.h>

#include "traces/trace.h"

int spec_hist_format(const uint64_t *hist, uint32_t n, char *buf, size_t cap)
{
    size_t at = 0;
    if (cap) buf[0] = '\0';
    for (uint32_t j = 0; j < n; j++) {
        int w = snprintf(buf + at, cap - at, "%s%llu", j ? "," : "", (unsigned long long)hist[j]);
        if (w < 0 || (size_t)w >= cap - at) return -1;
        at += (size_t)w;
    }
    return 0;
}

int spec_trace_set_hist(const char *path, const uint64_t *hist, uint32_t n, rh_err *e)
{
    char text[33 * 21];
    if (n == 0 || spec_hist_format(hist, n, text, sizeof text) < 0)
        return rh_fail(e, "%s: an accepted-length histogram of %u bins does not fit a header", path, n);
    tr_reader *r = tr_reader_open(path, e);
    if (!r) return -1;
    tr_header h;
    tr_writer *w = NULL;
    int rc = -1;
    if (tr_header_copy(&h, tr_reader_header(r)) < 0) {
        tr_reader_close(r);
        return rh_fail(e, "%s: out of memory", path);
    }
    if (tr_header_set(&h, SPEC_HIST_KEY, text) < 0) {
        rh_fail(e, "%s: out of memory", path);
        goto out;
    }
    if (!(w = tr_writer_open(path, &h, 0, e))) goto out;
    tr_record rec;
    int got;
    while ((got = tr_reader_next(r, &rec, e)) > 0)
        if (tr_write(w, &rec, e) < 0) goto out;
    if (got < 0) goto out;
    tr_writer *done = w;
    w = NULL;
    rc = tr_writer_close(done, e);
out:
    if (w) tr_writer_abort(w);
    tr_reader_close(r);
    tr_header_free(&h);
    return rc;
}
