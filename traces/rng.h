/* rng.h — the seeded generator behind synth and slice --sample.
 *
 * Internal to traces/. xoshiro256** seeded through splitmix64: fast, and the
 * same stream on every machine for a seed. Distributions use only +,*,/ and
 * libm's log/exp/sqrt/cos, so a seed gives the same trace on every run. */
#ifndef RH_TRACES_RNG_H
#define RH_TRACES_RNG_H

#include <stdint.h>

typedef struct tr_rng {
    uint64_t s[4];
    double spare;               /* the second normal of a Box-Muller pair */
    int has_spare;
} tr_rng;

void tr_rng_seed(tr_rng *r, uint64_t seed);
uint64_t tr_rng_u64(tr_rng *r);
double tr_rng_uniform(tr_rng *r);                 /* [0, 1) with 53 random bits */
uint64_t tr_rng_below(tr_rng *r, uint64_t n);     /* uniform in [0, n), n > 0 */
double tr_rng_exp(tr_rng *r, double rate);
double tr_rng_normal(tr_rng *r);
double tr_rng_gamma(tr_rng *r, double shape, double scale);
/* splitmix64's mixing step: a stateless hash of one value. */
uint64_t tr_mix64(uint64_t x);

#endif
