/* ngram.c — prompt lookup: propose what followed the last time the
 * request's recent tokens occurred. See spec.h. */
#include "engine/speculative/internal.h"

/* One backward scan over the candidate end positions e (most recent first):
 * the match length at e is how many tokens ending at e equal those ending at
 * n - 1. The first e reaching the longest length wins, so among equally long
 * matches the most recent one does; the scan stops at a full-window match.
 * Mismatches usually end at the first compare, so this is about one pass
 * over the tokens per call. */
uint32_t spec_ngram_lookup(const int32_t *tokens, uint32_t n, uint32_t min_n, uint32_t max_n, uint32_t k,
                           int32_t *out)
{
    if (n < 2 || k == 0 || max_n == 0) return 0;
    if (min_n == 0) min_n = 1;
    if (max_n > n - 1) max_n = n - 1;
    if (min_n > max_n) return 0;
    const int32_t *last = tokens + n - 1;
    uint32_t best_len = 0, best_end = 0;
    for (uint32_t e = n - 1; e-- > 0;) {
        uint32_t cap = e + 1 < max_n ? e + 1 : max_n;
        uint32_t m = 0;
        while (m < cap && tokens[e - m] == last[-(int64_t)m]) m++;
        if (m > best_len) {
            best_len = m;
            best_end = e;
            if (m == max_n) break;
        }
    }
    if (best_len < min_n) return 0;
    /* Token i of the continuation is tokens[best_end + 1 + i]; past the end
     * of tokens it is the proposal made i - (n - best_end - 1) places ago. */
    for (uint32_t i = 0; i < k; i++) {
        uint64_t at = (uint64_t)best_end + 1 + i;
        out[i] = at < n ? tokens[at] : out[at - n];
    }
    return k;
}

/* Every slot gets a proposal: when nothing matches, the newest token
 * repeated (the cheapest guess, and a common one). The core has already
 * reserved and the step record already counts 1 + k tokens per decode, so
 * verifying all k keeps the recorded work equal to the computed work, as
 * the simulator and the cost fit assume; on a machine with idle compute at
 * that batch size the extra rows cost little. */
int ngram_propose_batch(void *ctx, spec_draft *d, uint32_t n, rh_err *e)
{
    const spec_drafter *s = ctx;
    (void)e;
    for (uint32_t i = 0; i < n; i++) {
        spec_draft *x = &d[i];
        x->q = NULL;
        x->n_out = spec_ngram_lookup(x->tokens, x->n, s->cfg.ngram_min, s->cfg.ngram_max, x->k, x->out);
        if (x->n_out || !x->n) continue;
        for (uint32_t j = 0; j < x->k; j++) x->out[j] = x->tokens[x->n - 1];
        x->n_out = x->k;
    }
    return 0;
}
