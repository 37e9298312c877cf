/* fork_pool.c — see fork_pool.h. */
#include "util/fork_pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/progress.h"

int rh_fork_pool_default_workers(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

typedef struct slot {
    pid_t pid;
    FILE *f;
    int job;
} slot;

int rh_fork_pool(int n, int workers, const char *label, rh_fork_job job, rh_fork_done done, void *ctx, rh_err *e)
{
    if (n <= 0) return 0;
    if (workers < 1) workers = 1;
    if (workers > n) workers = n;
    slot *slots = calloc((size_t)workers, sizeof *slots);
    if (!slots) return rh_fail(e, "out of memory");
    rh_progress bar;
    if (label) rh_progress_begin(&bar, label, (uint64_t)n);
    int next = 0, finished = 0, active = 0, rc = 0;
    while (finished < n) {
        while (rc == 0 && next < n && active < workers) {
            int s = 0;
            while (slots[s].pid) s++;
            FILE *f = tmpfile();
            if (!f) {
                rc = rh_fail(e, "cannot create a temporary file for a worker: %s", strerror(errno));
                break;
            }
            fflush(NULL);   /* or the child would write the parent's buffered output again */
            pid_t pid = fork();
            if (pid < 0) {
                fclose(f);
                rc = rh_fail(e, "cannot start a worker: %s", strerror(errno));
                break;
            }
            if (pid == 0) {
                int jr = job(ctx, next, f);
                _exit(fflush(f) == 0 && jr == 0 ? 0 : 1);
            }
            slots[s] = (slot){pid, f, next++};
            active++;
        }
        if (active == 0) break;
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            rc = rh_fail(e, "waiting for workers: %s", strerror(errno));
            break;
        }
        int s = 0;
        while (s < workers && slots[s].pid != pid) s++;
        if (s == workers) continue;   /* not ours */
        active--;
        finished++;
        int exited = WIFEXITED(status);
        char why[48];
        snprintf(why, sizeof why, "%s %d", exited ? "status" : "signal", exited ? WEXITSTATUS(status) : WTERMSIG(status));
        int ok = exited && WEXITSTATUS(status) == 0;
        /* A child that exited (0 or 1) wrote its file; one killed did not finish it. */
        FILE *f = exited && WEXITSTATUS(status) <= 1 ? slots[s].f : NULL;
        if (f) rewind(f);
        if (rc == 0 && done(ctx, slots[s].job, f, ok, why, e) < 0) rc = -1;
        fclose(slots[s].f);
        slots[s].pid = 0;
        if (label) rh_progress_update(&bar, (uint64_t)finished);
    }
    for (int s = 0; s < workers; s++)
        if (slots[s].pid) {
            waitpid(slots[s].pid, NULL, 0);
            fclose(slots[s].f);
        }
    if (label) rh_progress_end(&bar);
    free(slots);
    return rc;
}
