/* serving.c — see serving.h. */
#define _POSIX_C_SOURCE 200809L
#include "cli/serving.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

#include "util/progress.h"

void serving_prepare(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, set, NULL);   /* every thread started later inherits it */
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Waits for a signal for up to `seconds` (< 0: forever); its number or 0. */
static int wait_signal(const sigset_t *set, double seconds)
{
    if (seconds < 0) {
        int sig = 0;
        return sigwait(set, &sig) == 0 ? sig : 0;
    }
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    int sig = sigtimedwait(set, NULL, &ts);
    return sig > 0 ? sig : 0;
}

void serving_wait(const char *who, const sigset_t *set, double grace, const serving_ops *ops, const char *cut)
{
    int sig = wait_signal(set, -1);
    fprintf(stderr, "rehearse %s: %s: no longer admitting; %llu requests in flight get up to %g s to finish "
                    "(signal again to %s them)\n",
            who, sig == SIGINT ? "SIGINT" : "SIGTERM", (unsigned long long)ops->live(ops->obj), grace,
            cut[0] == 'a' ? "abort" : "cut off");
    ops->drain(ops->obj);
    double end = rh_now() + grace;
    while (ops->live(ops->obj) && rh_now() < end)
        if (wait_signal(set, 0.05)) break;
    if (ops->live(ops->obj))
        fprintf(stderr, "rehearse %s: %s %llu requests\n", who, cut, (unsigned long long)ops->live(ops->obj));
}
