/* drafter.c — builds a drafter from a spec_config and fills the engine's
 * seam with the functions of its algorithm. */
#include <stdlib.h>

#include "engine/speculative/internal.h"

spec_drafter *spec_drafter_new(const spec_config *c, const spec_env *env, rh_err *e)
{
    if (spec_config_validate(c, e) < 0) return NULL;
    if (c->algorithm == SPEC_NONE) return rh_fail(e, "no --speculative-algorithm: there is no drafter to build"), NULL;
    spec_drafter *d = calloc(1, sizeof *d);
    if (!d) return rh_fail(e, "drafter: out of memory"), NULL;
    d->cfg = *c;
    d->vocab = env->target->cfg.vocab_size;
    d->seam.ctx = d;
    if (c->algorithm == SPEC_NGRAM) {
        d->seam.propose_batch = ngram_propose_batch;
        return d;
    }
    if (!(d->dm = draft_model_new(c, env, e))) {
        free(d);
        return NULL;
    }
    d->seam.propose_batch = draft_propose_batch;
    d->seam.verified = draft_verified;
    d->seam.forget = draft_forget;
    return d;
}

void spec_drafter_free(spec_drafter *d)
{
    if (!d) return;
    draft_model_free(d->dm);
    free(d);
}

const struct spec_seam *spec_drafter_seam(spec_drafter *d) { return &d->seam; }

const char *spec_drafter_model(const spec_drafter *d) { return d->dm ? draft_model_name(d->dm) : ""; }

void spec_drafter_stats(const spec_drafter *d, spec_draft_stats *s)
{
    if (d->dm) draft_model_stats(d->dm, s);
    else *s = (spec_draft_stats){0};
}

int spec_drafter_check(const spec_drafter *d, rh_err *e)
{
    return d->dm ? draft_model_check(d->dm, e) : 0;
}
