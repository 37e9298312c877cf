/* internal.h — what the drafter files share: the drafter object (drafter.c
 * dispatches), the n-gram drafter (ngram.c) and the draft-model drafter
 * (draft.c). Never include outside engine/speculative. */
#ifndef RH_SPEC_INTERNAL_H
#define RH_SPEC_INTERNAL_H

#include "engine/speculative/seam.h"
#include "engine/speculative/spec.h"

typedef struct draft_model draft_model;

struct spec_drafter {
    spec_config cfg;
    spec_seam seam;
    uint32_t vocab;
    draft_model *dm;            /* DRAFT */
};

/* ngram.c: the batch form for NGRAM. */
int ngram_propose_batch(void *ctx, spec_draft *d, uint32_t n, rh_err *e);

/* draft.c */
draft_model *draft_model_new(const spec_config *c, const spec_env *env, rh_err *e);
void draft_model_free(draft_model *dm);
int draft_propose_batch(void *ctx, spec_draft *d, uint32_t n, rh_err *e);
void draft_verified(void *ctx, const spec_draft *d, uint32_t accepted);
void draft_forget(void *ctx, uint64_t id, void *state);
const char *draft_model_name(const draft_model *dm);
void draft_model_stats(const draft_model *dm, spec_draft_stats *s);
int draft_model_check(const draft_model *dm, rh_err *e);

#endif
