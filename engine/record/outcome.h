/* outcome.h — what happened to one request, folded from the scheduler core's
 * events, and the measured trace record it becomes.
 *
 * The engine's replay and the simulator build their request records the same
 * way: TTFT and E2E from the send, every token's time, cached tokens, drafts,
 * retractions and the finish reason. */
#ifndef RH_RECORD_OUTCOME_H
#define RH_RECORD_OUTCOME_H

#include <stdint.h>

#include "engine/core/core.h"
#include "traces/trace.h"

typedef struct rec_outcome {
    double send, first, last;   /* s: sent, first token, latest token */
    uint32_t n_out, cached, cached_host, cached_storage, retractions, spec_proposed, spec_accepted;
    uint8_t finish;             /* enum tr_finish */
} rec_outcome;

/* Folds one core event into the outcome (ADMITTED, TOKENS, RETRACTED,
 * FINISHED, ABORTED). Inline: a simulation calls it for every token. */
static inline void rec_outcome_event(rec_outcome *o, const core_event *ev)
{
    switch (ev->kind) {
    case CORE_EV_ADMITTED:
        o->cached = ev->cached_tokens;
        o->cached_host = ev->cached_host;
        o->cached_storage = ev->cached_storage;
        break;
    case CORE_EV_TOKENS:
        if (o->n_out == 0) o->first = ev->now;
        o->last = ev->now;
        o->n_out += ev->n_tokens;
        /* Read apart and only when drafting: the core has just stored these
         * as two 32-bit fields, and one 64-bit load of both (what the
         * compiler makes of two adjacent adds) cannot be forwarded from
         * those stores; it stalled every token of a simulation. */
        if (ev->spec_proposed) {
            o->spec_proposed += ev->spec_proposed;
            o->spec_accepted += ev->spec_accepted;
        }
        break;
    case CORE_EV_RETRACTED:
        o->retractions = ev->retractions;
        break;
    case CORE_EV_FINISHED:
    case CORE_EV_ABORTED:
        o->retractions = ev->retractions;
        o->finish = ev->kind == CORE_EV_ABORTED ? TR_FINISH_ABORT : ev->finish;
        break;
    default:
        break;
    }
}

/* The measured record of trace request `in`, finished (or refused) at `now`.
 * `times` holds the n_out token times on the same clock (absolute) or is
 * NULL; they are shifted in place to count from the send. */
void rec_outcome_record(const rec_outcome *o, const tr_request *in, double now, double *times, tr_request *out);

#endif
