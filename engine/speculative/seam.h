/* seam.h — speculative decoding's seam: the drafter interface the engine
 * calls (engine_config.drafter in engine/engine.h), declared here so that
 * drafters need nothing of the engine that drives them.
 *
 * Before the forward pass, each decode with draft slots asks the drafter
 * for up to k tokens to follow the request's tokens so far; the step then
 * verifies them in one forward over 1 + k positions. Greedy requests accept drafts while each equals the target's
 * argmax after the one before; sampling requests accept draft x with
 * probability min(1, p(x)/q(x)) and on rejection draw from
 * norm(max(0, p - q)) (verify.h), so tokens keep the target's
 * distribution. A drafter that proposes certain tokens (q = 1: n-gram
 * lookup, a greedy draft model) hands back no q; the engine then draws each
 * row's token with the request's stream and accepts while it equals the
 * draft, which is the same rule and keeps seeded outputs identical to a run
 * without drafts. Accepted tokens plus the first drawn one that differs (or
 * a bonus token after k accepted) are committed. spec.h builds the n-gram
 * and draft-model drafters. */
#ifndef RH_SPEC_SEAM_H
#define RH_SPEC_SEAM_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "util/err.h"

typedef struct spec_draft {
    uint64_t id;
    void *state;                /* the drafter's per-request pointer: NULL at first; the engine
                                   keeps what the drafter leaves here and hands it to forget */
    const int32_t *tokens;      /* prompt then committed outputs */
    uint32_t n;                 /* how many */
    uint32_t k;                 /* draft slots: propose at most k */
    const kern_sampling *sampling;      /* the request's (a draft model samples alike) */
    int32_t *out;               /* proposals go here ... */
    uint32_t n_out;             /* ... and how many (set by the drafter) */
    const float *q;             /* set by the drafter: NULL, each proposal certain; else n_out rows
                                   of vocab probabilities they were drawn from, valid until the
                                   step's verification is done */
} spec_draft;

typedef struct spec_seam {
    void *ctx;
    /* Simple form: writes up to k proposals following tokens[0..n) to out[];
     * returns how many. Ids outside the vocabulary end the proposal. Used
     * when propose_batch is NULL. */
    uint32_t (*propose)(void *ctx, uint64_t id, const int32_t *tokens, uint32_t n, uint32_t k, int32_t *out);
    /* The request left the engine; drop its state. May be NULL. */
    void (*forget)(void *ctx, uint64_t id, void *state);
    /* Batch form: every decode with draft slots in this step at once (a
     * draft model runs one forward per draft position over all of them).
     * 0, or -1 with a message (the step fails). May be NULL. */
    int (*propose_batch)(void *ctx, spec_draft *d, uint32_t n, rh_err *e);
    /* After verification: `accepted` of d->n_out proposals stood, so a
     * drafter's own KV rolls back past them. May be NULL. */
    void (*verified)(void *ctx, const spec_draft *d, uint32_t accepted);
} spec_seam;

#endif
