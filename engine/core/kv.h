/* kv.h — the paged KV pool and the radix prefix cache that lives in it.
 *
 * Pages are numbered 0..n-1. Each page has a reference count: one per request
 * whose page table holds it, plus one while the radix tree holds it. So a
 * page is
 *   free    ref == 0 (on the free stack),
 *   cached  in the tree and held by no request (ref == 1): evictable,
 *   used    held by at least one request.
 * A shared prefix is one set of pages with a higher count, never a copy.
 *
 * The radix tree has one node per page and the node IS the page: its key is
 * the chain hash of the page's tokens and of everything before it, its parent
 * the previous page of the prefix. A child is found through one hash table
 * keyed by (chain key, parent), so matching a prefix of m pages is m lookups.
 * Because a request holds its whole prefix path, a held page's ancestors are
 * held too, so every cached page can be evicted by removing leaves: eviction
 * pops the least recently released (LRU) or least often matched (LFU)
 * unlocked leaf from a heap, and its parent may become the next leaf.
 *
 * No function here allocates per call except heap growth (amortized), so the
 * per-step cost stays flat; nothing scans the pool except kv_check. */
#ifndef RH_CORE_KV_H
#define RH_CORE_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

#define KV_NONE UINT32_MAX

typedef struct kv_node {
    uint64_t key;      /* chain key, while in the tree */
    uint64_t tick;     /* when it last became cached (LRU order) */
    uint32_t ref;      /* holders: requests, plus one for the tree */
    uint32_t parent;   /* previous page of the prefix; KV_NONE at the root */
    uint32_t nchild;   /* tree pages whose parent this is */
    uint32_t hits;     /* times inserted or matched by an admission (LFU order) */
    uint32_t stamp;    /* generation of its one valid eviction-heap entry */
    uint8_t in_tree;
} kv_node;

typedef struct kv_slot {
    uint64_t key;
    uint32_t page;     /* KV_NONE: empty */
} kv_slot;

typedef struct kv_heap_entry {
    uint64_t k1, k2;   /* LRU: (tick, 0); LFU: (hits, tick) */
    uint32_t page, stamp;
} kv_heap_entry;

typedef struct kv_pool {
    uint32_t n_pages, page_size;
    bool lfu;
    kv_node *node;
    uint32_t *free_stack;
    uint32_t n_free;
    uint64_t n_cached, n_in_tree;
    kv_slot *slots;            /* open addressing, linear probing */
    uint64_t slot_mask;
    kv_heap_entry *heap;       /* min-heap of evictable leaves; stale entries skipped on pop */
    uint64_t heap_n, heap_cap;
    uint64_t tick;
    uint64_t evicted;          /* pages evicted so far */
} kv_pool;

int kv_init(kv_pool *kv, uint32_t n_pages, uint32_t page_size, bool lfu, rh_err *e);
void kv_destroy(kv_pool *kv);

static inline uint64_t kv_free_pages(const kv_pool *kv) { return kv->n_free; }
static inline uint64_t kv_cached_pages(const kv_pool *kv) { return kv->n_cached; }
/* Pages an allocation may take right now: free ones plus evictable ones. */
static inline uint64_t kv_available(const kv_pool *kv) { return kv->n_free + kv->n_cached; }

/* The tree page with this key under this parent, or KV_NONE. */
uint32_t kv_lookup(const kv_pool *kv, uint64_t key, uint32_t parent);
/* Where key's probe starts: kv_prefetch asks for that slot ahead of its
 * lookup, so a prompt's lookups (keys known in advance, each a cache miss
 * in a large pool) overlap instead of waiting one by one. */
static inline uint64_t kv_slot_home(uint64_t key, uint64_t mask)
{
    return (key ^ (key >> 29)) & mask;
}
static inline void kv_prefetch(const kv_pool *kv, uint64_t key)
{
    __builtin_prefetch(&kv->slots[kv_slot_home(key, kv->slot_mask)]);
}
/* The second stage, a few lookups later: the page a prefetched home slot
 * names (when the key sits there, the common case), so its node is in
 * cache too. */
static inline void kv_prefetch_node(const kv_pool *kv, uint64_t key)
{
    const kv_slot *s = &kv->slots[kv_slot_home(key, kv->slot_mask)];
    if (s->key == key && s->page != KV_NONE) __builtin_prefetch(&kv->node[s->page]);
}

/* Takes n pages (ref 1 each, private to the caller) into out[], evicting
 * cached leaves when the free stack is short. 0, or -1 with nothing changed
 * when free + cached < n. */
int kv_alloc(kv_pool *kv, uint32_t n, uint32_t *out);
/* Another holder of a page. A cached page becomes used (and counts a hit). */
void kv_hold(kv_pool *kv, uint32_t page);
/* One holder fewer. A tree page left only to the tree becomes cached (and an
 * eviction candidate when it is a leaf); a private page returns to the free
 * stack. */
void kv_release(kv_pool *kv, uint32_t page);
/* Makes a held private page a tree node under `parent` (a held tree page or
 * KV_NONE). 0, or -1 if the key is already present (the caller looked it up
 * first, so this only happens on a 64-bit hash collision: the page then
 * simply stays private). */
int kv_insert(kv_pool *kv, uint32_t page, uint64_t key, uint32_t parent);

/* Takes a leaf held by exactly one request out of the tree (the page stays
 * that request's, private). 0, or -1 when it is not such a leaf. */
int kv_uncache(kv_pool *kv, uint32_t page);

/* Empties the tree of every cached page (held pages stay): SGLang's
 * /flush_cache. Returns the pages freed; evictions are not counted. */
uint64_t kv_evict_all(kv_pool *kv);

/* Pool and tree consistency: counts, free stack, hash table, child counts,
 * held paths, heap entries of every evictable leaf. 0, or -1 and what broke. */
int kv_check(const kv_pool *kv, rh_err *e);

#endif
