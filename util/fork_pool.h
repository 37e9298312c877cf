/* fork_pool.h — independent jobs in forked children, a few at a time.
 *
 * Each job runs in a child process that shares the parent's memory
 * copy-on-write (a trace or cost model loaded once is read by every job
 * without a copy) and writes its result to a temporary file; the parent
 * hands that file, rewound, to `done` as each child exits, in the order
 * they finish. A job's crash cannot take the parent down: `done` is told
 * how the child died instead. After `done` fails, no job starts and the
 * running ones are waited for, so no child is left behind. */
#ifndef RH_FORK_POOL_H
#define RH_FORK_POOL_H

#include <stdio.h>

#include "util/err.h"

/* In the child: job i's result into out. 0, or nonzero for a failed job
 * (its file still reaches done, with ok = 0). */
typedef int (*rh_fork_job)(void *ctx, int i, FILE *out);
/* In the parent: job i finished. out is its file (NULL when the child died;
 * `why` then says how: "signal 9", "status 3"); ok is 1 when the job
 * returned 0. 0 to go on, -1 (e set) to stop. */
typedef int (*rh_fork_done)(void *ctx, int i, FILE *out, int ok, const char *why, rh_err *e);

/* Runs jobs 0..n-1 on up to `workers` children (label non-NULL: a progress
 * bar under it). 0, or -1 with the first failure's message. */
int rh_fork_pool(int n, int workers, const char *label, rh_fork_job job, rh_fork_done done, void *ctx, rh_err *e);

/* The processors online, at least 1: the default number of workers. */
int rh_fork_pool_default_workers(void);

#endif
