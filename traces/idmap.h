/* idmap.h — hash maps for importers, slice and synth: uint64 -> uint64 and
 * string -> uint64 (open addressing, linear probing, xxHash for strings).
 *
 * Internal to traces/. Used to number BurstGPT session UUIDs, to renumber
 * block hashes in order of first appearance, and to count prefix hits. */
#ifndef RH_TRACES_IDMAP_H
#define RH_TRACES_IDMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr_u64map {
    uint64_t *keys, *vals;
    uint8_t *used;
    size_t n, cap;
} tr_u64map;

void tr_u64map_init(tr_u64map *m);
void tr_u64map_free(tr_u64map *m);
/* The value slot for key, inserting `dflt` when absent (*inserted = 1).
 * NULL on out of memory. The pointer is valid until the next insert. */
uint64_t *tr_u64map_get(tr_u64map *m, uint64_t key, uint64_t dflt, int *inserted);
/* 1 if present (value in *val, may be NULL), else 0. */
int tr_u64map_find(const tr_u64map *m, uint64_t key, uint64_t *val);

typedef struct tr_strmap {
    uint64_t *hashes, *vals;
    uint32_t *offs, *lens;      /* key text in pool */
    uint8_t *used;
    char *pool;
    size_t n, cap, pool_len, pool_cap;
} tr_strmap;

void tr_strmap_init(tr_strmap *m);
void tr_strmap_free(tr_strmap *m);
uint64_t *tr_strmap_get(tr_strmap *m, const char *key, size_t len, uint64_t dflt, int *inserted);

#endif
