/* breaker.h — the circuit breaker every Lua hook (the scheduler's policy,
 * the router's route) puts around its script. No clock, no I/O.
 *
 * A script that fails on every call (a budget spent each time, a memory
 * cap collected each time) would cost its whole budget on every step or
 * pick. After max_failures failures in a row the breaker trips: the next
 * `backoff` calls are not made (the hook's fallback answers them), then
 * one is tried; if that fails too it trips again at once with the back-off
 * doubled (up to BREAKER_BACKOFF_MAX calls), and a success closes it, the
 * back-off back to BREAKER_BACKOFF_FIRST. Counted in calls, not seconds:
 * the cores have no clock, and a simulation stays deterministic. */
#ifndef RH_BREAKER_H
#define RH_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

#define BREAKER_BACKOFF_FIRST 64
#define BREAKER_BACKOFF_MAX (1u << 20)

typedef struct breaker {
    uint32_t max_failures;      /* 0: never trips */
    uint32_t failures;          /* in a row, now */
    bool trial;                 /* the next call ends a back-off */
    uint64_t skip;              /* calls still not to make */
    uint64_t backoff;           /* calls the next trip skips */
    uint64_t trips, skipped;
} breaker;

void breaker_init(breaker *k, uint32_t max_failures);
/* Before a call: true when the breaker is open and the call is not to be
 * made (counted in skipped). */
bool breaker_skip(breaker *k);
/* After a call made: true when this failure tripped the breaker, which
 * the caller says once, with breaker_backoff's calls. */
bool breaker_done(breaker *k, bool failed);
/* The calls the trip just made will skip. */
static inline uint64_t breaker_backoff(const breaker *k) { return k->skip; }

#endif
