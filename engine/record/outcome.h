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
    uint32_t n_out, cached, retractions, spec_proposed, spec_accepted;
    uint8_t finish;             /* enum tr_finish */
} rec_outcome;

/* Folds one core event into the outcome (ADMITTED, TOKENS, RETRACTED,
 * FINISHED, ABORTED). */
void rec_outcome_event(rec_outcome *o, const core_event *ev);
/* The measured record of trace request `in`, finished (or refused) at `now`.
 * `times` holds the n_out token times on the same clock (absolute) or is
 * NULL; they are shifted in place to count from the send. */
void rec_outcome_record(const rec_outcome *o, const tr_request *in, double now, double *times, tr_request *out);

#endif
