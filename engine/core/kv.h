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
 * the previous page of the prefix. Pages chain into runs, as SGLang's radix
 * nodes hold token runs: a page with exactly one child links to it (`next`),
 * and only the first page of a run (its head: the root's children and pages
 * where prompts diverge) is in the hash table, keyed by (chain key, parent).
 * So matching a prompt walks `next` links, one key comparison a page, and
 * touches the table only where the path branches; a run splits where a new
 * prompt diverges inside it and grows where one extends its tail. Runs are
 * the index only: every count, hold and eviction is the page's, so the tree
 * behaves page by page exactly as a tree of single pages would.
 * Because a request holds its whole prefix path, a held page's ancestors are
 * held too, so every cached page can be evicted by removing leaves: eviction
 * pops the least recently released (LRU), least often matched (LFU), or
 * (SLRU) least recently released of the pages not yet reused twice, then of
 * the rest, unlocked leaf from a heap, and its parent may become the next leaf (taken
 * at once, without a trip through the heap, when it is the next in order).
 *
 * No function here allocates per call except heap growth (amortized), so the
 * per-step cost stays flat; nothing scans the pool except kv_check. Nor does
 * kv_init touch the pool's arrays: pages are handed out 0, 1, 2, ... until
 * some come back, so an idle replica of a large cluster costs no memory. */
#ifndef RH_CORE_KV_H
#define RH_CORE_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/tier.h"
#include "util/err.h"

#define KV_NONE UINT32_MAX

typedef struct kv_node {
    uint64_t key;      /* chain key, while in the tree */
    uint64_t tick;     /* when it last became cached (LRU order) */
    uint32_t ref;      /* holders: requests, plus one for the tree */
    uint32_t parent;   /* previous page of the prefix; KV_NONE at the root */
    uint32_t nchild;   /* runs whose head's parent this is (only a run's tail has any) */
    uint32_t next;     /* the next page of its run; KV_NONE at a run's tail */
    uint32_t hits;     /* times inserted or matched by an admission (LFU order) */
    uint32_t stamp;    /* generation of its one valid eviction-heap entry */
    uint8_t in_tree;
    uint8_t head;      /* first page of a run: in the hash table */
} kv_node;

typedef struct kv_slot {
    uint64_t key;
    uint32_t page1;    /* the page + 1; 0: empty (so a fresh table is calloc's zeros) */
} kv_slot;

typedef struct kv_heap_entry {
    uint64_t k1, k2;   /* LRU: (tick, 0); LFU: (hits, tick); SLRU: (protected, tick) */
    uint32_t page, stamp;
} kv_heap_entry;

/* Eviction orders; the values are core_evict's. */
typedef enum kv_order { KV_LRU = 0, KV_LFU = 1, KV_SLRU = 2 } kv_order;

/* SLRU's protected segment: pages reused by this many admissions after the
 * one that inserted them (hits counts that one too). SGLang's SLRUStrategy
 * protects a node once its hit_count, which its inserts through an existing
 * node raise and its creation does not, reaches 2. */
#define KV_SLRU_REUSES 2

/* When a GPU page's KV is copied to the host tier (--hicache-write-policy;
 * SGLang's hiradix_cache.py): write_through backs up every page as it
 * enters the tree; write_through_selective once a second admission reuses
 * it (SGLang's write_through_threshold 2); write_back only when eviction
 * takes it off the GPU, while the eviction waits for the copy. */
typedef enum kv_write_policy {
    KV_WRITE_THROUGH = 0,
    KV_WRITE_THROUGH_SELECTIVE = 1,
    KV_WRITE_BACK = 2,
} kv_write_policy;

/* A copy between a GPU page and a host-tier slot (the tier's entry index),
 * logged in the order the pool decided it: the runner replays the log
 * before the forward that follows, so a page is copied out before it is
 * reused and a slot is written before it is read. */
typedef struct kv_copy {
    uint32_t gpu_page, host_slot;
    uint8_t to_host;
} kv_copy;

typedef struct kv_pool {
    uint32_t n_pages, page_size;
    kv_order order;
    kv_node *node;             /* a page's fields are set when it is first handed out */
    uint32_t *free_stack;      /* pages returned, taken before fresh ones (LIFO) */
    uint32_t n_stacked;
    uint32_t n_fresh;          /* pages n_fresh.. were never handed out: free, untouched */
    uint32_t n_free;           /* n_stacked + (n_pages - n_fresh) */
    uint64_t n_cached, n_in_tree;
    kv_slot *slots;            /* run heads by key: open addressing, linear probing */
    uint64_t slot_mask;
    kv_heap_entry *heap;       /* min-heap of evictable leaves; stale entries skipped on pop */
    uint64_t heap_n, heap_cap;
    uint64_t tick;
    uint64_t evicted;          /* pages evicted so far */
    /* The host tier (NULL: none). Eviction demotes a page whose host copy
     * exists, or (write_back) writes one first; else the page is dropped. */
    kv_tier *host;
    /* A storage tier below the host (SGLang's L3, Mooncake's store; NULL:
     * none), possibly shared with other pools: every page written to the
     * host is written here too when absent. */
    kv_tier *storage;
    uint64_t stored;           /* pages this pool wrote to storage */
    kv_write_policy write_policy;
    uint64_t backed_up;        /* pages copied to the host in the background (write-through kinds) */
    uint64_t written_back;     /* pages copied to the host while an eviction waited (write_back) */
    uint64_t demoted;          /* evicted pages that stay in the host tier */
    kv_copy *log;              /* copies since kv_log_clear (only with a host tier) */
    uint32_t n_log, cap_log;
    bool log_failed;           /* a copy could not be logged (out of memory): the log is not whole */
} kv_pool;

int kv_init(kv_pool *kv, uint32_t n_pages, uint32_t page_size, kv_order order, rh_err *e);
void kv_destroy(kv_pool *kv);

static inline uint64_t kv_free_pages(const kv_pool *kv) { return kv->n_free; }
static inline uint64_t kv_cached_pages(const kv_pool *kv) { return kv->n_cached; }
/* Pages an allocation may take right now: free ones plus evictable ones. */
static inline uint64_t kv_available(const kv_pool *kv) { return kv->n_free + kv->n_cached; }

/* The tree page with this key under this parent, or KV_NONE. */
uint32_t kv_lookup(const kv_pool *kv, uint64_t key, uint32_t parent);
static inline uint64_t kv_slot_home(uint64_t key, uint64_t mask)
{
    return (key ^ (key >> 29)) & mask;
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
 * KV_NONE). 0, or -1 if the key is already present as a run head, or the
 * page under `parent` already has it (the caller looked it up first, so
 * this only happens on a 64-bit hash collision: the page then simply stays
 * private). */
int kv_insert(kv_pool *kv, uint32_t page, uint64_t key, uint32_t parent);

/* Takes a leaf held by exactly one request out of the tree (the page stays
 * that request's, private). 0, or -1 when it is not such a leaf. */
int kv_uncache(kv_pool *kv, uint32_t page);

/* Empties the tree of every cached page (held pages stay), and the host
 * tier of every page not on the GPU: SGLang's /flush_cache. Returns the GPU
 * pages freed; evictions are not counted. */
uint64_t kv_evict_all(kv_pool *kv);

/* Logs a copy (kv_pool.log). */
void kv_log_copy(kv_pool *kv, uint32_t gpu_page, uint32_t host_slot, bool to_host);
static inline void kv_log_clear(kv_pool *kv) { kv->n_log = 0; }

/* Pool and tree consistency: counts, free stack, hash table, child counts,
 * held paths, heap entries of every evictable leaf. 0, or -1 and what broke. */
int kv_check(const kv_pool *kv, rh_err *e);

#endif
