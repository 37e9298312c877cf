/* progress.h — a progress bar on stderr for anything that runs for seconds.
 *
 * Draws "label [#####.....] done/total  rate/s  ETA mm:ss" at most ten times a
 * second, only when stderr is a terminal (or REHEARSE_PROGRESS=1), so logs and
 * CI output stay clean. REHEARSE_PROGRESS=0 silences it everywhere.
 * total 0 means unknown: a counter and rate are shown instead of a bar. */
#ifndef RH_PROGRESS_H
#define RH_PROGRESS_H

#include <stdint.h>

typedef struct rh_progress {
    const char *label;
    uint64_t total, done;
    double t_start, t_last_draw;
    int enabled, drawn;
    char extra[96];          /* free text shown after the counters (e.g. "clock 12.3 s") */
} rh_progress;

void rh_progress_begin(rh_progress *p, const char *label, uint64_t total);
/* Cheap when called often: draws only when 100 ms passed since the last draw. */
void rh_progress_update(rh_progress *p, uint64_t done);
void rh_progress_end(rh_progress *p);

/* Monotonic wall clock in seconds. */
double rh_now(void);

#endif
