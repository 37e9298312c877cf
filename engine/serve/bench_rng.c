/* bench_rng.c — see bench_rng.h. */
#include "engine/serve/bench_rng.h"

#include <math.h>

void bench_rng_seed(bench_rng *r, uint64_t seed)
{
    r->state = seed;
}

uint64_t bench_rng_next(bench_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double bench_rng_uniform(bench_rng *r)
{
    return (double)(bench_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Lemire's multiply-shift with rejection: unbiased without a division. */
uint64_t bench_rng_below(bench_rng *r, uint64_t n)
{
    unsigned __int128 m = (unsigned __int128)bench_rng_next(r) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = -n % n;
        while (low < threshold) {
            m = (unsigned __int128)bench_rng_next(r) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* Box-Muller; one of the pair is dropped, which keeps the state simple. */
double bench_rng_normal(bench_rng *r)
{
    double u = 1.0 - bench_rng_uniform(r);          /* (0, 1]: log is finite */
    double v = bench_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* Marsaglia and Tsang (2000) for shape >= 1; for shape < 1 the boost
 * Gamma(a) = Gamma(a + 1) * U^(1/a), so bursty schedules (shape < 1) work. */
double bench_rng_gamma(bench_rng *r, double shape, double scale)
{
    if (shape < 1.0) {
        double u = 1.0 - bench_rng_uniform(r);
        return bench_rng_gamma(r, shape + 1.0, scale) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = bench_rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        double u = 1.0 - bench_rng_uniform(r);
        if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v * scale;
    }
}
