/* hashmap.h — two small open-addressing hash maps.
 *
 *   rh_map64:  u64 key -> u64 value (e.g. a pair of ids -> merge rank)
 *   rh_strmap: byte string (explicit length, may hold NUL) -> i64 value;
 *              keys are copied, so the caller's buffers may go away.
 * Both grow by doubling at 50% load; put overwrites an existing key's value.
 * Functions that allocate return -1 when out of memory, leaving the map valid. */
#ifndef RH_HASHMAP_H
#define RH_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct rh_map64 {
    uint64_t *keys, *vals;
    uint8_t *used;
    size_t cap, n;
} rh_map64;

int rh_map64_put(rh_map64 *m, uint64_t key, uint64_t val);
/* 1 and *val when present, else 0. */
int rh_map64_get(const rh_map64 *m, uint64_t key, uint64_t *val);
void rh_map64_free(rh_map64 *m);

typedef struct rh_strmap_entry {
    char *key;          /* NULL: empty slot */
    size_t len;
    uint64_t hash;
    int64_t val;
} rh_strmap_entry;

typedef struct rh_strmap {
    rh_strmap_entry *slots;
    size_t cap, n;
} rh_strmap;

int rh_strmap_put(rh_strmap *m, const char *key, size_t len, int64_t val);
int rh_strmap_get(const rh_strmap *m, const char *key, size_t len, int64_t *val);
void rh_strmap_free(rh_strmap *m);

#endif
