/* serving.h — what the serving fronts (`serve`, `router`) share: the open
 * file limit raised (a server holds a socket per client), and how they stop: SIGINT and
 * SIGTERM are blocked before any thread starts (so every thread inherits
 * the mask) and waited for; the first stops admitting and gives the work in
 * flight a grace period; a second signal, or the end of the grace, cuts it
 * off. Both fronts say the same lines under their own names. */
#ifndef RH_CLI_SERVING_H
#define RH_CLI_SERVING_H

#include <signal.h>
#include <stdint.h>

/* Blocks SIGINT and SIGTERM into *set, ignores SIGPIPE and raises the
 * open-file limit to its hard maximum. Call before any thread starts. */
void serving_prepare(sigset_t *set);

/* What is being stopped: work in flight, and how to stop admitting more. */
typedef struct serving_ops {
    void *obj;
    uint64_t (*live)(void *obj);
    void (*drain)(void *obj);
} serving_ops;

/* Waits for the first signal, drains for up to grace s (a second signal
 * ends the wait), saying so on stderr as "rehearse WHO: ..."; `cut` names
 * what happens to what is left ("aborting", "cutting off"). */
void serving_wait(const char *who, const sigset_t *set, double grace, const serving_ops *ops, const char *cut);

#endif
