/* bench_rng.h — the seeded random numbers of the load generator: request
 * lengths, shuffles and arrival gaps. splitmix64 is small, fast and passes
 * BigCrush; the same seed gives the same run on every machine. */
#ifndef RH_BENCH_RNG_H
#define RH_BENCH_RNG_H

#include <stdint.h>

typedef struct bench_rng {
    uint64_t state;
} bench_rng;

void bench_rng_seed(bench_rng *r, uint64_t seed);
uint64_t bench_rng_next(bench_rng *r);
double bench_rng_uniform(bench_rng *r);                 /* [0, 1) */
uint64_t bench_rng_below(bench_rng *r, uint64_t n);     /* [0, n), n > 0 */
double bench_rng_normal(bench_rng *r);                  /* mean 0, sd 1 */
/* Gamma(shape, scale): mean shape * scale, variance shape * scale^2. */
double bench_rng_gamma(bench_rng *r, double shape, double scale);

#endif
