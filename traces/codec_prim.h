/* codec_prim.h — small pieces shared by codec_enc.c and codec_dec.c. */
#ifndef RH_TRACES_CODEC_PRIM_H
#define RH_TRACES_CODEC_PRIM_H

#include <stdint.h>

/* Times within a billion seconds (31 years) that are whole nanoseconds are
 * stored as integer deltas; the bound keeps every delta inside int64. */
#define TIME_LIMIT_NS 1000000000000000000LL

static const int64_t unit_ns[3] = {1, 1000, 1000000};

static inline uint64_t zz(int64_t v)
{
    return v < 0 ? ~((uint64_t)v << 1) : (uint64_t)v << 1;
}

static inline int64_t unzz(uint64_t u)
{
    return (u & 1) ? (int64_t)~(u >> 1) : (int64_t)(u >> 1);
}

static inline unsigned bitlen(uint64_t v)
{
    return v ? 64u - (unsigned)__builtin_clzll(v) : 0u;
}

#endif
