/* verify.h — speculative verification: the target's distributions against
 * the drafts, so that what is committed is distributed exactly as the target
 * would have sampled it alone.
 *
 *   spec_probs    a row of logits -> the probabilities the request's sampler
 *                 (kernels' `sample`: temperature, top-k, then top-p) draws
 *                 from; greedy is a point mass on the argmax;
 *   spec_draw     one id from a probability row (inverse CDF, one uniform);
 *   spec_verify   k drafts against k + 1 target rows: draft x at row j is
 *                 accepted with probability min(1, p_j(x) / q_j(x)); the
 *                 first rejection draws from norm(max(0, p_j - q_j)) and
 *                 ends the step; if all k stand, a bonus token is drawn from
 *                 row k. q NULL means each draft was certain (q = 1 on it:
 *                 n-gram lookup, a greedy draft model).
 * The theorem behind spec_verify: for x ~ q, accepting with min(1, p/q) and
 * otherwise drawing from the normalised residual yields exactly p. The tests
 * check it with a chi-square on a small vocabulary.
 * Pure functions of their arguments and the caller's random stream. */
#ifndef RH_SPEC_VERIFY_H
#define RH_SPEC_VERIFY_H

#include <stdint.h>

#include "kernels/kernels.h"

/* True when p samples deterministically (temperature 0 or top_k 1). */
int spec_is_greedy(const kern_sampling *p);

/* probs[vocab] = the distribution `sample` draws from for these logits.
 * scratch: vocab entries. Ties order by id, as the sampler orders them, so
 * the top-k and top-p sets are the sampler's own. */
void spec_probs(const float *logits, uint32_t vocab, const kern_sampling *p, float *probs, kern_cand *scratch);

/* One id drawn from p (need not be normalised; its sum must be > 0). */
int32_t spec_draw(const float *p, uint32_t vocab, uint64_t *rng);

/* Verifies drafts[0..k) against target rows p[0..k] (k + 1 rows of vocab
 * probabilities) and draft rows q[0..k) (NULL: point masses on the drafts).
 * Writes the committed ids, accepted + 1 of them, to out (which may be
 * drafts itself: each draft is read before its place is written) and returns
 * accepted. Draws one uniform per examined draft plus one for the token that
 * ends the step. */
uint32_t spec_verify(const float *p, const float *q, const int32_t *drafts, uint32_t k, uint32_t vocab,
                     uint64_t *rng, int32_t *out);

#endif
