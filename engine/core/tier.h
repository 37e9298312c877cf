/* tier.h — a KV tier below the GPU pool: host memory (SGLang's HiCache L2)
 * or shared storage (L3, Mooncake's store), as a set of page keys.
 *
 * A page key is the chain hash of the page's tokens and everything before
 * them (keys.c), so a key alone names a whole prefix: a tier needs no tree
 * of its own, as Mooncake's store and SGLang's L3 need none (they key pages
 * by the same kind of chain hash, hicache_storage.py get_hash_str). A match
 * below the GPU walks the prompt's next keys while the tier has them.
 *
 * Each entry is
 *   pinned     its page is also on the GPU (a write-through backup, or a
 *              page just loaded back): SGLang never drops the host copy of
 *              a GPU-resident node, so the entry is not evictable;
 *   evictable  host-only, on an LRU list (least recently demoted or
 *              touched first), as SGLang's evict_host takes evicted leaves.
 * When the tier is full a new entry takes the LRU evictable one's slot; with
 * none evictable the write is skipped (SGLang skips a backup it cannot
 * place). Capacity is in pages; nothing here allocates per call except the
 * key map's growth (amortized). */
#ifndef RH_CORE_TIER_H
#define RH_CORE_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"
#include "util/hashmap.h"

typedef struct kv_tier_entry {
    uint64_t key;
    uint32_t prev, next;       /* LRU list (evictable only); UINT32_MAX ends */
    uint8_t used, pinned;
} kv_tier_entry;

typedef struct kv_tier {
    uint64_t cap;              /* pages */
    kv_tier_entry *e;          /* cap entries; free ones chained through next */
    uint32_t free_head, lru, mru;
    uint64_t n_used, n_pinned;
    rh_map64 map;              /* key -> entry index */
    uint64_t written;          /* pages written into the tier so far */
    uint64_t evicted;          /* pages dropped to make room */
} kv_tier;

/* 0, or -1 with a message (cap 0 or too large). */
int kv_tier_init(kv_tier *t, uint64_t cap_pages, rh_err *e);
void kv_tier_destroy(kv_tier *t);

bool kv_tier_has(const kv_tier *t, uint64_t key);
/* The key's entry index (its slot in a host pool of cap pages), or UINT32_MAX. */
uint32_t kv_tier_slot(const kv_tier *t, uint64_t key);
/* The page is (also) on the GPU: the entry becomes pinned, written first
 * when absent. 1 written now, 0 already there, -1 no room (skipped). */
int kv_tier_pin(kv_tier *t, uint64_t key);
/* The GPU dropped its copy: a pinned entry becomes the most recently used
 * evictable one. 1 if the tier has the key, else 0. */
int kv_tier_unpin(kv_tier *t, uint64_t key);
/* Writes a host-only entry (write-back of an evicted page), most recently
 * used. 1 written, 0 already there (moved to the MRU end), -1 no room. */
int kv_tier_put(kv_tier *t, uint64_t key);
/* Forgets the key (a page nobody can match again). */
void kv_tier_remove(kv_tier *t, uint64_t key);
/* Counts, list and map agree. 0, or -1 and what broke. */
int kv_tier_check(const kv_tier *t, rh_err *e);

#endif
