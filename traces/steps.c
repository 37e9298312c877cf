/* steps.c — tr_read_steps: a recording's step records, whole, in memory. */
#include "traces/trace.h"

#include <stdlib.h>

#include "util/progress.h"

int tr_read_steps(const char *path, tr_step **steps, size_t *n, tr_header *h, rh_err *e)
{
    *steps = NULL;
    *n = 0;
    tr_reader *r = tr_reader_open(path, e);
    if (!r) return -1;
    if (h && tr_header_copy(h, tr_reader_header(r)) < 0) {
        tr_reader_close(r);
        return rh_fail(e, "%s: out of memory", path);
    }
    rh_progress bar;
    rh_progress_begin(&bar, "reading steps", 0);
    tr_record rec;
    size_t cap = 0;
    uint64_t records = 0;
    int rc;
    while ((rc = tr_reader_next(r, &rec, e)) == 1) {
        if (rec.kind == TR_STEP) {
            if (*n == cap) {
                size_t c = cap ? 2 * cap : 4096;
                tr_step *v = realloc(*steps, c * sizeof *v);
                if (!v) {
                    rc = rh_fail(e, "%s: out of memory reading steps", path);
                    break;
                }
                *steps = v;
                cap = c;
            }
            (*steps)[(*n)++] = rec.step;
        }
        if ((++records & 4095) == 0) rh_progress_update(&bar, records);
    }
    rh_progress_end(&bar);
    tr_reader_close(r);
    if (rc < 0) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        if (h) tr_header_free(h);
        return -1;
    }
    return 0;
}
