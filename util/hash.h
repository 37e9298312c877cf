/* hash.h — the 64-bit mix every hash table, seed and counter-based stream
 * here is built on.
 *
 * rh_mix64 is splitmix64's finaliser: a bijection on 64-bit words in which
 * every output bit depends on every input bit, so sequential ids spread over
 * a table and nearby seeds give unrelated streams. rh_hash64 is one step of
 * splitmix64 (the golden gamma added first), for hashing values that may be
 * 0: rh_mix64(0) is 0, rh_hash64(0) is not. rh_fib32 is the cheap one for
 * table indexes. */
#ifndef RH_UTIL_HASH_H
#define RH_UTIL_HASH_H

#include <stdint.h>

#define RH_GOLDEN_GAMMA 0x9e3779b97f4a7c15ull

static inline uint64_t rh_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rh_hash64(uint64_t x)
{
    return rh_mix64(x + RH_GOLDEN_GAMMA);
}

/* Fibonacci hashing: one multiply, the high half kept. Enough to spread
 * keys that differ in a few low bits (pointers, small codes) over a table
 * indexed by the low bits of the result, where a full mix per lookup costs
 * more than the collisions it saves. */
static inline uint32_t rh_fib32(uint64_t x)
{
    return (uint32_t)((x * RH_GOLDEN_GAMMA) >> 32);
}

#endif
