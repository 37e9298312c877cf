/* hist.h — the accepted-length histogram a recorded run carries in its trace
 * header, for the simulator's acceptance model.
 *
 * Key SPEC_HIST_KEY, value "c0,c1,...,ck": c_j verifies (decodes that had
 * draft slots) accepted j drafts; k is the draft slots per decode. The
 * simulator's --speculative-accept-hist takes the same text. A recording's
 * header is written before its records, so the histogram is set afterwards
 * by rewriting the file (spec_trace_set_hist). */
#ifndef RH_SPEC_HIST_H
#define RH_SPEC_HIST_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define SPEC_HIST_KEY "spec_accept_hist"
/* Bins of an accepted-length histogram: 0..31 drafts accepted, and the last
 * for 32 or more (the engine's counters and the simulator's model alike). */
#define SPEC_HIST_BINS 33

/* Writes "c0,c1,...,c(n-1)" to buf; -1 when it does not fit. */
int spec_hist_format(const uint64_t *hist, uint32_t n, char *buf, size_t cap);

/* Rewrites the trace at path with the histogram in its header, streaming
 * every record through (a temporary file renamed over path: path is never
 * half-written). 0, or -1 with a message naming the file. */
int spec_trace_set_hist(const char *path, const uint64_t *hist, uint32_t n, rh_err *e);

#endif
