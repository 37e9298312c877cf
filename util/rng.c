/* rng.c — see rng.h. */
#include "util/rng.h"

#include <math.h>
#include <stdlib.h>

void rh_rng_seed(rh_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        x = rh_hash64(x);
        r->s[i] = x;
    }
    r->has_spare = 0;
    r->spare = 0;
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t rh_rng_u64(rh_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double rh_rng_uniform(rh_rng *r)
{
    return (double)(rh_rng_u64(r) >> 11) * 0x1.0p-53;
}

uint64_t rh_rng_below(rh_rng *r, uint64_t n)
{
    /* Rejection keeps it exactly uniform. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = rh_rng_u64(r);
    while (x >= limit);
    return x % n;
}

double rh_rng_exp(rh_rng *r, double rate)
{
    return -log1p(-rh_rng_uniform(r)) / rate;
}

double rh_rng_normal(rh_rng *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u = 1.0 - rh_rng_uniform(r), v = rh_rng_uniform(r);
    double m = sqrt(-2.0 * log(u));
    r->spare = m * sin(2.0 * M_PI * v);
    r->has_spare = 1;
    return m * cos(2.0 * M_PI * v);
}

/* Marsaglia and Tsang's method; shapes below 1 are boosted by U^(1/shape). */
double rh_rng_gamma(rh_rng *r, double shape, double scale)
{
    if (shape < 1.0) {
        double u = 1.0 - rh_rng_uniform(r);
        return rh_rng_gamma(r, shape + 1.0, scale) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = rh_rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0);
        v = v * v * v;
        double u = 1.0 - rh_rng_uniform(r);
        if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v * scale;
    }
}

int rh_zipf_init(rh_zipf *z, uint32_t n, double alpha)
{
    z->n = n;
    z->cdf = malloc((size_t)n * sizeof *z->cdf);
    if (!z->cdf) return -1;
    double sum = 0;
    for (uint32_t k = 1; k <= n; k++) z->cdf[k - 1] = sum += exp(-alpha * log((double)k));
    for (uint32_t k = 0; k < n; k++) z->cdf[k] /= sum;
    z->cdf[n - 1] = 1;
    return 0;
}

uint32_t rh_zipf_draw(const rh_zipf *z, rh_rng *r)
{
    double u = rh_rng_uniform(r);
    uint32_t lo = 0, hi = z->n - 1;     /* the first k with u < cdf[k] */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (u < z->cdf[mid]) hi = mid;
        else lo = mid + 1;
    }
    return lo + 1;
}

void rh_zipf_free(rh_zipf *z)
{
    free(z->cdf);
    z->cdf = NULL;
}
