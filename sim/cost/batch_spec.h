/* batch_spec.h — a batch written as text, for `rehearse cost show --batch`
 * and tests: "prefill=2048@1024,decode=64@3000,spec=2".
 *
 * prefill=N[@CTX][*COUNT] adds COUNT (1) prompt chunks of N tokens at
 * context CTX; decode=N[@CTX] adds N decodes at context CTX each; spec=K makes
 * every decode verify K drafts made by K draft forward passes; lora=K puts
 * every token under one of K LoRA adapters, loads=N of which were loaded
 * into GPU slots for the step (priced with --max-lora-rank); load_back=N
 * loads N prompt tokens' KV back from a host tier beside the forward (storage=M
 * of them fetched from a storage tier into host memory first) and
 * write_back=N copies N tokens' KV to it while the step waits
 * (--enable-hierarchical-cache). Lengths are
 * bounded as the trace format bounds them; a bad item is named in the
 * message. */
#ifndef RH_COST_BATCH_SPEC_H
#define RH_COST_BATCH_SPEC_H

#include <stdint.h>

#include "sim/cost/cost.h"
#include "util/err.h"

/* seqs must hold max entries; b->seqs points at it and its aggregates are
 * filled (cost_batch_summarize), drafting included. */
int cost_batch_parse(const char *spec, cost_seq *seqs, uint32_t max, cost_batch *b, rh_err *e);

#endif
