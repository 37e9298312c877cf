/* rng.h — the seeded generators: one family, built on util/hash.h.
 *
 *   rh_splitmix_*  splitmix64 as a stream: 8 bytes of state, any seed (0
 *                  too) gives a good stream. A request's sampling stream, an
 *                  acceptance draw, a policy's shuffle.
 *   rh_rng_*       xoshiro256** seeded through splitmix64: a longer period
 *                  and distributions (exponential, normal, gamma), for
 *                  synthesizing and sampling traces.
 * Both give the same stream on every machine for a seed; the distributions
 * use only +, *, / and libm's log/exp/sqrt/cos, so a seed gives the same
 * trace on every run. */
#ifndef RH_UTIL_RNG_H
#define RH_UTIL_RNG_H

#include <stdint.h>

#include "util/hash.h"

static inline uint64_t rh_splitmix_next(uint64_t *state)
{
    return rh_mix64(*state += RH_GOLDEN_GAMMA);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double rh_splitmix_unit(uint64_t *state)
{
    return (double)(rh_splitmix_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct rh_rng {
    uint64_t s[4];
    double spare;               /* the second normal of a Box-Muller pair */
    int has_spare;
} rh_rng;

void rh_rng_seed(rh_rng *r, uint64_t seed);
uint64_t rh_rng_u64(rh_rng *r);
double rh_rng_uniform(rh_rng *r);                 /* [0, 1) with 53 random bits */
uint64_t rh_rng_below(rh_rng *r, uint64_t n);     /* uniform in [0, n), n > 0 */
double rh_rng_exp(rh_rng *r, double rate);
double rh_rng_normal(rh_rng *r);
double rh_rng_gamma(rh_rng *r, double shape, double scale);

/* Zipf over 1..n: P(k) proportional to k^-alpha (alpha 0: uniform), as
 * S-LoRA draws each adapter's share of the traffic. A table of n cumulative
 * weights, so a draw is one uniform and a binary search. */
typedef struct rh_zipf {
    double *cdf;                /* cdf[k-1] = P(draw <= k); cdf[n-1] = 1 */
    uint32_t n;
} rh_zipf;

int rh_zipf_init(rh_zipf *z, uint32_t n, double alpha);   /* 0, or -1 out of memory; n >= 1 */
uint32_t rh_zipf_draw(const rh_zipf *z, rh_rng *r);       /* in [1, n] */
void rh_zipf_free(rh_zipf *z);

#endif
