/* load.c — tr_trace_load: any trace file, whole, in memory. */
#include "traces/import/import.h"

int tr_trace_load(const char *path, tr_trace *t, rh_err *e)
{
    tr_trace_init(t);
    tr_sink s = tr_trace_sink(t);
    if (tr_read(path, NULL, &s, NULL, e) < 0) {
        tr_trace_free(t);   /* zeroed: nothing for the caller to free */
        return -1;
    }
    return 0;
}
