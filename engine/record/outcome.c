/* outcome.c — see outcome.h. */
#include "engine/record/outcome.h"

void rec_outcome_record(const rec_outcome *o, const tr_request *in, double now, double *times, tr_request *out)
{
    *out = *in;
    out->arrival = o->send;
    out->output_len = o->n_out;
    out->flags = (in->flags & TR_REQ_FAILED) | TR_REQ_MEASURED;
    out->ttft = o->n_out ? o->first - o->send : 0;
    out->e2e = (o->n_out ? o->last : now) - o->send;
    out->cached_tokens = o->cached;
    out->cached_host = o->cached_host <= o->cached ? o->cached_host : o->cached;
    out->cached_storage = o->cached_storage <= out->cached_host ? o->cached_storage : out->cached_host;
    out->spec_proposed = o->spec_proposed;
    out->spec_accepted = o->spec_accepted;
    out->retractions = o->retractions;
    out->finish = o->finish;
    out->n_times = 0;
    out->token_times = NULL;
    if (times && o->n_out) {
        for (uint32_t k = 0; k < o->n_out; k++) times[k] -= o->send;
        out->n_times = o->n_out;
        out->token_times = times;
    }
}
