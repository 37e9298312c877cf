/* breaker.c — see breaker.h. */
#include "engine/core/breaker.h"

#include <string.h>

void breaker_init(breaker *k, uint32_t max_failures)
{
    memset(k, 0, sizeof *k);
    k->max_failures = max_failures;
    k->backoff = BREAKER_BACKOFF_FIRST;
}

bool breaker_skip(breaker *k)
{
    if (!k->skip) return false;
    if (--k->skip == 0) k->trial = true;
    k->skipped++;
    return true;
}

bool breaker_done(breaker *k, bool failed)
{
    bool trial = k->trial;
    k->trial = false;
    if (!failed) {
        k->failures = 0;
        k->backoff = BREAKER_BACKOFF_FIRST;
        return false;
    }
    k->failures++;
    if (!k->max_failures || (!trial && k->failures < k->max_failures)) return false;
    k->skip = k->backoff;
    if (k->backoff < BREAKER_BACKOFF_MAX) k->backoff *= 2;
    k->trips++;
    return true;
}
