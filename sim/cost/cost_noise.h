/* cost_noise.h — a cost model whose every step draws its time again: the
 * base model's forward and drafting times times a lognormal factor
 * exp(sigma·z), z standard normal from the caller's generator (so a run is
 * repeated by its seed, and consecutive runs can share one stream). The
 * host's parts (launches, per-step CPU time, scheduling) are the base's,
 * as a GPU's jitter leaves them; or, with whole_step, scaled too: the noise
 * a client measures is of whole steps, host time included.
 * What `sim --intervals` draws each run's steps with, sigma from the
 * calibration's residuals (COST.md, "fit.step_noise"); what the tests use
 * as a server with known physics and noise. */
#ifndef RH_COST_NOISE_H
#define RH_COST_NOISE_H

#include <stdbool.h>

#include "sim/cost/cost.h"
#include "util/rng.h"

typedef struct cost_noise {
    cost_model base;            /* first: the simulator sees a cost_model */
    const cost_model *inner;    /* borrowed */
    double sigma;
    rh_rng *rng;                /* borrowed; advanced by each step priced */
    bool whole_step;            /* the factor on every part of the step, not the GPU's alone */
    /* A model's error, one factor a run: every step that computes prompt
     * tokens also takes prefill_scale, every decode step decode_scale (0:
     * 1). */
    double prefill_scale, decode_scale;
} cost_noise;

/* n wraps inner; it borrows inner and rng, which must outlive it. Nothing
 * to free. */
void cost_noise_init(cost_noise *n, const cost_model *inner, double sigma, rh_rng *rng);

#endif
