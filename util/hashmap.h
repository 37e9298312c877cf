/* hashmap.h — the two hash maps: open addressing, linear probing,
 * power-of-two capacities grown by doubling at 3/4 load.
 *
 *   rh_map64:  u64 key -> u64 value (ids, block hashes, merge pairs)
 *   rh_strmap: byte string (explicit length, may hold NUL) -> i64 value;
 *              keys are copied into one pool, so the caller's buffers may go
 *              away and a million keys cost a million bytes, not mallocs.
 * A zeroed struct is an empty map. `slot` returns the value slot of a key,
 * inserting it with `dflt` when absent (*inserted says which; may be NULL);
 * the pointer is valid until the next insert. `put` overwrites, `get` reads
 * (val may be NULL). What allocates fails with NULL or -1 when memory runs
 * out, leaving the map as it was. */
#ifndef RH_UTIL_HASHMAP_H
#define RH_UTIL_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct rh_map64 {
    uint64_t *keys, *vals;
    uint8_t *used;
    size_t cap, n;
} rh_map64;

uint64_t *rh_map64_slot(rh_map64 *m, uint64_t key, uint64_t dflt, int *inserted);
int rh_map64_put(rh_map64 *m, uint64_t key, uint64_t val);
int rh_map64_get(const rh_map64 *m, uint64_t key, uint64_t *val);   /* 1 when present, else 0 */
int rh_map64_del(rh_map64 *m, uint64_t key);                          /* 1 when it was present */
void rh_map64_free(rh_map64 *m);

typedef struct rh_strmap {
    uint64_t *hashes;
    int64_t *vals;
    uint32_t *offs, *lens;      /* key bytes in pool */
    uint8_t *used;
    char *pool;
    size_t cap, n, pool_len, pool_cap;
} rh_strmap;

int64_t *rh_strmap_slot(rh_strmap *m, const char *key, size_t len, int64_t dflt, int *inserted);
int rh_strmap_put(rh_strmap *m, const char *key, size_t len, int64_t val);
int rh_strmap_get(const rh_strmap *m, const char *key, size_t len, int64_t *val);   /* 1 when present */
void rh_strmap_free(rh_strmap *m);

#endif
