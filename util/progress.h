/* progress.h — a progress bar on stderr for anything that runs for seconds.
 *
 * Draws "label [#####.....] done/total  rate/s  ETA mm:ss" at most ten times a
 * second when stderr is a terminal (or REHEARSE_PROGRESS=1, or a command's
 * --progress through rh_progress_force). Elsewhere (a pipe, a log, CI) it
 * prints a plain line, a heartbeat, every 30 s of a long run and nothing for
 * a short one, so logs stay clean and a long job still shows it is alive;
 * forced into a pipe it writes whole lines every 2 s instead of redrawing.
 * REHEARSE_PROGRESS=0 silences it everywhere.
 * total 0 means unknown: a counter and rate are shown instead of a bar. */
#ifndef RH_PROGRESS_H
#define RH_PROGRESS_H

#include <stdint.h>

typedef struct rh_progress {
    const char *label;
    uint64_t total, done;
    double t_start, t_last_draw;
    int enabled, drawn;
    int lines;               /* not a terminal: whole lines (forced bar, or heartbeats when not enabled) */
    int silent;              /* REHEARSE_PROGRESS=0: nothing at all */
    char extra[96];          /* free text shown after the counters (e.g. "clock 12.3 s") */
} rh_progress;

void rh_progress_begin(rh_progress *p, const char *label, uint64_t total);
/* Draws every bar begun from now on whatever stderr is (1), or as the
 * terminal and REHEARSE_PROGRESS say (0, the default). */
void rh_progress_force(int on);
/* Cheap when called often: draws only when 100 ms passed since the last draw. */
void rh_progress_update(rh_progress *p, uint64_t done);
void rh_progress_end(rh_progress *p);

/* Monotonic wall clock in seconds. */
double rh_now(void);

#endif
