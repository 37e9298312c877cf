/* kv.c — see kv.h. */
#include "engine/core/kv.h"

#include <stdlib.h>
#include <string.h>

/* ---- hash table: (chain key) -> page, linear probing ----
 * Keys are xxHash outputs, so their bits are already uniform; folding the
 * high half in (kv_slot_home, kv.h) only guards against a caller feeding
 * structured keys. */

/* The run head with this key, or KV_NONE. */
static uint32_t slot_find(const kv_pool *kv, uint64_t key)
{
    uint64_t i = kv_slot_home(key, kv->slot_mask);
    for (;;) {
        const kv_slot *s = &kv->slots[i];
        if (s->page1 == 0 || s->key == key) return s->page1 - 1;   /* 0 - 1 is KV_NONE */
        i = (i + 1) & kv->slot_mask;
    }
}

uint32_t kv_lookup(const kv_pool *kv, uint64_t key, uint32_t parent)
{
    if (parent != KV_NONE) {
        /* Inside a run the one child is the next page: no table probe. */
        const kv_node *p = &kv->node[parent];
        if (p->next != KV_NONE) return kv->node[p->next].key == key ? p->next : KV_NONE;
        if (p->nchild == 0) return KV_NONE;
    }
    /* Heads' keys are unique in the table, so the first equal key decides.
     * The parent check makes this a trie lookup: a chain key found under
     * another parent is a collision, not a match. */
    uint32_t h = slot_find(kv, key);
    return h != KV_NONE && kv->node[h].parent == parent ? h : KV_NONE;
}

static int slot_insert(kv_pool *kv, uint64_t key, uint32_t page)
{
    uint64_t i = kv_slot_home(key, kv->slot_mask);
    for (;;) {
        kv_slot *s = &kv->slots[i];
        if (s->page1 == 0) {
            s->key = key;
            s->page1 = page + 1;
            return 0;
        }
        if (s->key == key) return -1;
        i = (i + 1) & kv->slot_mask;
    }
}

/* Backward-shift deletion keeps every probe chain unbroken without
 * tombstones, so lookups never slow down as the cache churns. */
static void slot_delete(kv_pool *kv, uint64_t key)
{
    uint64_t mask = kv->slot_mask, i = kv_slot_home(key, mask);
    while (kv->slots[i].key != key || kv->slots[i].page1 == 0) {
        if (kv->slots[i].page1 == 0) return;
        i = (i + 1) & mask;
    }
    for (;;) {
        kv->slots[i].page1 = 0;
        uint64_t j = i;
        for (;;) {
            j = (j + 1) & mask;
            if (kv->slots[j].page1 == 0) return;
            uint64_t k = kv_slot_home(kv->slots[j].key, mask);
            /* The entry at j may stay if its home lies cyclically in (i, j]. */
            bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
            if (!stays) {
                kv->slots[i] = kv->slots[j];
                i = j;
                break;
            }
        }
    }
}

/* ---- eviction heap ---- */
static inline bool heap_less(const kv_heap_entry *a, const kv_heap_entry *b)
{
    if (a->k1 != b->k1) return a->k1 < b->k1;
    if (a->k2 != b->k2) return a->k2 < b->k2;
    return a->page < b->page;
}

static void heap_sift_up(kv_heap_entry *h, uint64_t i)
{
    kv_heap_entry x = h[i];
    while (i > 0) {
        uint64_t p = (i - 1) / 2;
        if (!heap_less(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static void heap_sift_down(kv_heap_entry *h, uint64_t n, uint64_t i)
{
    kv_heap_entry x = h[i];
    for (;;) {
        uint64_t l = 2 * i + 1;
        if (l >= n) break;
        uint64_t m = (l + 1 < n && heap_less(&h[l + 1], &h[l])) ? l + 1 : l;
        if (!heap_less(&h[m], &x)) break;
        h[i] = h[m];
        i = m;
    }
    h[i] = x;
}

static inline bool is_leaf(const kv_node *n)
{
    return n->next == KV_NONE && n->nchild == 0;
}

static inline bool evictable(const kv_node *n)
{
    return n->in_tree && n->ref == 1 && is_leaf(n);
}

static inline bool entry_valid(const kv_pool *kv, const kv_heap_entry *e)
{
    const kv_node *n = &kv->node[e->page];
    return evictable(n) && n->stamp == e->stamp;
}

/* Entries go stale when their page is held again or gains a child; rather
 * than find and delete them, pop skips them, and a full heap first drops
 * them all (each page has at most one valid entry, so the heap never needs
 * more than twice the tree). */
static void heap_compact(kv_pool *kv)
{
    uint64_t w = 0;
    for (uint64_t i = 0; i < kv->heap_n; i++)
        if (entry_valid(kv, &kv->heap[i])) kv->heap[w++] = kv->heap[i];
    kv->heap_n = w;
    for (uint64_t i = w / 2; i-- > 0;) heap_sift_down(kv->heap, w, i);
}

/* The page's place in eviction order, under its current stamp. */
static inline kv_heap_entry entry_of(const kv_pool *kv, uint32_t page)
{
    const kv_node *n = &kv->node[page];
    kv_heap_entry e = {.page = page, .stamp = n->stamp};
    if (kv->order == KV_LFU) {
        e.k1 = n->hits;
        e.k2 = n->tick;
    } else if (kv->order == KV_SLRU) {
        e.k1 = n->hits >= 1 + KV_SLRU_REUSES;
        e.k2 = n->tick;
    } else {
        e.k1 = n->tick;
        e.k2 = 0;
    }
    return e;
}

static void heap_push(kv_pool *kv, uint32_t page)
{
    kv_node *n = &kv->node[page];
    if (kv->heap_n == kv->heap_cap) {
        if (kv->heap_n > 2 * kv->n_in_tree + 64) heap_compact(kv);
        if (kv->heap_n == kv->heap_cap) {
            uint64_t cap = kv->heap_cap * 2;
            kv_heap_entry *h = realloc(kv->heap, cap * sizeof *h);
            if (!h) {
                /* Out of memory: drop stale entries and, if that frees no
                 * room, leave the page unindexed; it stays cached and kv_check
                 * reports it. Allocation failure is not a scheduling outcome. */
                heap_compact(kv);
                if (kv->heap_n == kv->heap_cap) return;
            } else {
                kv->heap = h;
                kv->heap_cap = cap;
            }
        }
    }
    n->stamp++;
    kv->heap[kv->heap_n] = entry_of(kv, page);
    heap_sift_up(kv->heap, kv->heap_n++);
}

/* Takes a leaf out of the tree (out of its run, or the table when it heads
 * one) and returns its parent, or KV_NONE. */
static uint32_t unlink_leaf(kv_pool *kv, uint32_t page)
{
    kv_node *n = &kv->node[page];
    uint32_t parent = n->parent;
    if (n->head) {
        slot_delete(kv, n->key);
        n->head = 0;
        if (parent != KV_NONE) kv->node[parent].nchild--;
    } else {
        kv->node[parent].next = KV_NONE;   /* its run's new tail */
    }
    n->in_tree = 0;
    n->parent = KV_NONE;
    kv->n_in_tree--;
    return parent;
}

void kv_log_copy(kv_pool *kv, uint32_t gpu_page, uint32_t host_slot, bool to_host)
{
    if (kv->n_log == kv->cap_log) {
        uint32_t cap = kv->cap_log ? kv->cap_log * 2 : 256;
        kv_copy *v = realloc(kv->log, (size_t)cap * sizeof *v);
        if (!v) {
            kv->log_failed = true;
            return;
        }
        kv->log = v;
        kv->cap_log = cap;
    }
    kv->log[kv->n_log++] = (kv_copy){gpu_page, host_slot, to_host};
}

/* A page just written to the host goes on to storage, unless storage has
 * it (SGLang's write_backup_storage; Mooncake puts only missing keys). */
static void store(kv_pool *kv, uint64_t key)
{
    if (kv->storage && !kv_tier_has(kv->storage, key) && kv_tier_put(kv->storage, key) == 1) kv->stored++;
}

/* A page leaving the GPU: its host copy stays (demoted); under write_back
 * one is written first; else it is gone. */
static void demote(kv_pool *kv, uint32_t page)
{
    if (!kv->host) return;
    uint64_t key = kv->node[page].key;
    if (kv_tier_unpin(kv->host, key)) {
        kv->demoted++;
    } else if (kv->write_policy == KV_WRITE_BACK && kv_tier_put(kv->host, key) == 1) {
        kv->written_back++;
        kv->demoted++;
        kv_log_copy(kv, page, kv_tier_slot(kv->host, key), true);
        store(kv, key);
    }
}

/* A page entering the tree or reused: a host copy already there is pinned
 * (never dropped while the GPU holds the page); a new one is written when
 * the policy says so. */
static void backup(kv_pool *kv, uint32_t page, bool write)
{
    uint64_t key = kv->node[page].key;
    if ((write || kv_tier_has(kv->host, key)) && kv_tier_pin(kv->host, key) == 1) {
        kv->backed_up++;
        kv_log_copy(kv, page, kv_tier_slot(kv->host, key), true);
        store(kv, key);
    }
}

/* Frees the evictable leaves `need` asks for, least first. A leaf's parent
 * that becomes a leaf is usually the very next in order (a run is released
 * root to tail, so its pages go tail to root): when it orders before the
 * heap's top, every entry there included, the heap would hand it back at
 * once, so it goes now without a push and a pop. The order is the heap's. */
static int evict(kv_pool *kv, uint64_t need)
{
    uint64_t freed = 0;
    while (freed < need) {
        if (kv->heap_n == 0) return -1;
        kv_heap_entry e = kv->heap[0];
        kv->heap[0] = kv->heap[--kv->heap_n];
        if (kv->heap_n) heap_sift_down(kv->heap, kv->heap_n, 0);
        if (!entry_valid(kv, &e)) continue;
        uint32_t page = e.page;
        for (;;) {
            demote(kv, page);
            uint32_t parent = unlink_leaf(kv, page);
            kv->node[page].ref = 0;
            kv->n_cached--;
            kv->evicted++;
            kv->free_stack[kv->n_stacked++] = page;
            kv->n_free++;
            freed++;
            if (parent == KV_NONE || !evictable(&kv->node[parent])) break;
            if (freed < need) {
                kv_heap_entry pe = entry_of(kv, parent);
                if (kv->heap_n == 0 || heap_less(&pe, &kv->heap[0])) {
                    page = parent;
                    continue;
                }
            }
            heap_push(kv, parent);
            break;
        }
    }
    return 0;
}

uint64_t kv_evict_all(kv_pool *kv)
{
    uint64_t n = kv->n_cached, counted = kv->evicted;
    uint64_t demoted = kv->demoted, written_back = kv->written_back;
    if (n && evict(kv, n) < 0) n = 0;   /* cannot happen: every cached page is a leaf or above one */
    kv->evicted = counted;              /* a flush is not cache pressure */
    kv->demoted = demoted;
    kv->written_back = written_back;
    if (kv->host)
        while (kv->host->lru != UINT32_MAX) kv_tier_remove(kv->host, kv->host->e[kv->host->lru].key);
    return n;
}

/* ---- pool ---- */
int kv_init(kv_pool *kv, uint32_t n_pages, uint32_t page_size, kv_order order, rh_err *e)
{
    memset(kv, 0, sizeof *kv);
    if (n_pages == 0 || n_pages == KV_NONE || page_size == 0)
        return rh_fail(e, "KV pool: %u pages of %u tokens is not a pool", n_pages, page_size);
    kv->n_pages = n_pages;
    kv->page_size = page_size;
    kv->order = order;
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n_pages) cap *= 2;
    kv->slot_mask = cap - 1;
    /* calloc: the OS maps untouched pages lazily, so a huge pool costs
     * memory only as far as it is used. */
    kv->node = calloc(n_pages, sizeof *kv->node);
    kv->free_stack = malloc((size_t)n_pages * sizeof *kv->free_stack);
    kv->slots = calloc(cap, sizeof *kv->slots);
    kv->heap_cap = 1024;
    kv->heap = malloc(kv->heap_cap * sizeof *kv->heap);
    if (!kv->node || !kv->free_stack || !kv->slots || !kv->heap) {
        kv_destroy(kv);
        return rh_fail(e, "KV pool: out of memory for %u pages", n_pages);
    }
    kv->n_free = n_pages;   /* all fresh: handed out 0, 1, 2, ... */
    return 0;
}

void kv_destroy(kv_pool *kv)
{
    free(kv->node);
    free(kv->free_stack);
    free(kv->slots);
    free(kv->heap);
    free(kv->log);
    memset(kv, 0, sizeof *kv);
}

int kv_alloc(kv_pool *kv, uint32_t n, uint32_t *out)
{
    if ((uint64_t)n > kv->n_free + kv->n_cached) return -1;
    if (n > kv->n_free && evict(kv, n - kv->n_free) < 0) return -1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p;
        if (kv->n_stacked) {
            p = kv->free_stack[--kv->n_stacked];
        } else {
            p = kv->n_fresh++;
            kv->node[p].parent = KV_NONE;
            kv->node[p].next = KV_NONE;
        }
        kv->n_free--;
        kv->node[p].ref = 1;
        out[i] = p;
    }
    return 0;
}

void kv_hold(kv_pool *kv, uint32_t page)
{
    kv_node *n = &kv->node[page];
    if (n->in_tree) {
        if (n->ref == 1) kv->n_cached--;   /* its heap entry, if any, is now stale */
        n->hits++;
        if (kv->host && kv->write_policy == KV_WRITE_THROUGH_SELECTIVE && n->hits == 2) backup(kv, page, true);
    }
    n->ref++;
}

void kv_release(kv_pool *kv, uint32_t page)
{
    kv_node *n = &kv->node[page];
    n->ref--;
    if (n->in_tree) {
        if (n->ref == 1) {
            kv->n_cached++;
            n->tick = ++kv->tick;
            if (is_leaf(n)) heap_push(kv, page);
        }
    } else if (n->ref == 0) {
        kv->free_stack[kv->n_stacked++] = page;
        kv->n_free++;
    }
}

int kv_insert(kv_pool *kv, uint32_t page, uint64_t key, uint32_t parent)
{
    kv_node *n = &kv->node[page];
    bool head = true;
    if (parent != KV_NONE) {
        kv_node *p = &kv->node[parent];
        if (p->next == KV_NONE && p->nchild == 0) {
            head = false;   /* the parent is a run's tail with no children: the run grows */
        } else if (p->next != KV_NONE) {
            /* The prompt diverges inside a run: split it after the parent,
             * whose old next page heads the rest. Both keys must be free in
             * the table before anything changes. */
            uint32_t c = p->next;
            if (kv->node[c].key == key || slot_find(kv, key) != KV_NONE || slot_find(kv, kv->node[c].key) != KV_NONE)
                return -1;
            slot_insert(kv, kv->node[c].key, c);
            kv->node[c].head = 1;
            p->next = KV_NONE;
            p->nchild = 1;
        }
    }
    if (head) {
        if (slot_insert(kv, key, page) < 0) return -1;
        if (parent != KV_NONE) kv->node[parent].nchild++;
    } else {
        kv->node[parent].next = page;
    }
    n->key = key;
    n->parent = parent;
    n->in_tree = 1;
    n->head = head;
    n->next = KV_NONE;
    n->nchild = 0;
    n->hits = 1;
    n->ref++;                   /* the tree's own hold; the inserting request still holds it */
    kv->n_in_tree++;
    if (kv->host) backup(kv, page, kv->write_policy == KV_WRITE_THROUGH);
    return 0;
}

int kv_uncache(kv_pool *kv, uint32_t page)
{
    kv_node *n = &kv->node[page];
    if (!n->in_tree || n->ref != 2 || !is_leaf(n)) return -1;
    uint32_t parent = unlink_leaf(kv, page);
    if (kv->host) kv_tier_remove(kv->host, n->key);   /* nobody can match it again */
    n->ref = 1;
    if (parent != KV_NONE && evictable(&kv->node[parent])) heap_push(kv, parent);
    return 0;
}

int kv_check(const kv_pool *kv, rh_err *e)
{
    uint32_t n = kv->n_pages;
    uint64_t n_free = 0, n_cached = 0, n_used = 0, n_tree = 0, n_evictable = 0;
    uint32_t *kids = calloc(n, sizeof *kids);
    uint8_t *seen = calloc(n, 1);
    int rc = -1;
    if (!kids || !seen) {
        rh_fail(e, "kv_check: out of memory");
        goto out;
    }
    if (kv->n_fresh > n || kv->n_stacked + (n - kv->n_fresh) != kv->n_free) {
        rh_fail(e, "free pages: %u returned + %u fresh != %u free", kv->n_stacked, n - kv->n_fresh, kv->n_free);
        goto out;
    }
    for (uint32_t p = kv->n_fresh; p < n; p++) seen[p] = 1;   /* fresh: never handed out */
    for (uint32_t i = 0; i < kv->n_stacked; i++) {
        uint32_t p = kv->free_stack[i];
        if (p >= kv->n_fresh || seen[p]) {
            rh_fail(e, "free stack holds page %u twice or out of range", p);
            goto out;
        }
        seen[p] = 1;
        if (kv->node[p].ref != 0 || kv->node[p].in_tree) {
            rh_fail(e, "page %u is on the free stack with ref %u, in_tree %u", p, kv->node[p].ref,
                    kv->node[p].in_tree);
            goto out;
        }
    }
    for (uint32_t p = 0; p < n; p++) {
        const kv_node *x = &kv->node[p];
        if (x->ref == 0) {
            if (x->in_tree) {
                rh_fail(e, "page %u is in the tree with no holder", p);
                goto out;
            }
            if (!seen[p]) {
                rh_fail(e, "page %u has no holder but is not on the free stack (leaked)", p);
                goto out;
            }
            n_free++;
            continue;
        }
        if (!x->in_tree && p < kv->n_fresh && (x->head || x->next != KV_NONE)) {
            rh_fail(e, "page %u is out of the tree but still linked (head %u, next %u)", p, x->head, x->next);
            goto out;
        }
        if (!x->in_tree) {
            n_used++;
            continue;
        }
        n_tree++;
        if (x->ref == 1) n_cached++;
        else n_used++;
        if (kv_lookup(kv, x->key, x->parent) != p) {
            rh_fail(e, "tree page %u is not found under its key and parent", p);
            goto out;
        }
        if (x->parent != KV_NONE) {
            if (x->parent >= n || !kv->node[x->parent].in_tree) {
                rh_fail(e, "tree page %u has parent %u outside the tree", p, x->parent);
                goto out;
            }
            /* Every request that holds a page holds its whole prefix path. */
            const kv_node *par = &kv->node[x->parent];
            if (par->ref < x->ref) {
                rh_fail(e, "tree page %u is held %u times but its parent %u only %u times", p, x->ref,
                        x->parent, par->ref);
                goto out;
            }
            kids[x->parent]++;
        }
        /* A run's inner page is its parent's `next` and not in the table;
         * a head hangs off a run's tail (or the root) and is. */
        bool inner = x->parent != KV_NONE && kv->node[x->parent].next == p;
        if (inner == (x->head != 0)) {
            rh_fail(e, "tree page %u: head %u but %s its parent's next page", p, x->head, inner ? "is" : "is not");
            goto out;
        }
        if (x->next != KV_NONE &&
            (x->next >= n || !kv->node[x->next].in_tree || kv->node[x->next].parent != p || x->nchild != 0)) {
            rh_fail(e, "tree page %u links to %u, which is not its only child", p, x->next);
            goto out;
        }
    }
    for (uint32_t p = 0; p < n; p++) {
        const kv_node *x = &kv->node[p];
        if (x->in_tree && x->nchild + (x->next != KV_NONE) != kids[p]) {
            rh_fail(e, "tree page %u counts %u children but has %u", p, x->nchild + (x->next != KV_NONE), kids[p]);
            goto out;
        }
        if (evictable(x)) n_evictable++;
    }
    if (n_free != kv->n_free || n_cached != kv->n_cached || n_tree != kv->n_in_tree) {
        rh_fail(e, "pool counts drifted: free %llu/%u, cached %llu/%llu, tree %llu/%llu",
                (unsigned long long)n_free, kv->n_free, (unsigned long long)n_cached,
                (unsigned long long)kv->n_cached, (unsigned long long)n_tree, (unsigned long long)kv->n_in_tree);
        goto out;
    }
    if (n_free + n_cached + n_used != n) {
        rh_fail(e, "free %llu + used %llu + cached %llu != %u pages", (unsigned long long)n_free,
                (unsigned long long)n_used, (unsigned long long)n_cached, n);
        goto out;
    }
    uint64_t used_slots = 0, n_heads = 0;
    for (uint32_t p = 0; p < n; p++) n_heads += kv->node[p].in_tree && kv->node[p].head;
    for (uint64_t i = 0; i <= kv->slot_mask; i++) {
        uint32_t p = kv->slots[i].page1 - 1;
        if (p == KV_NONE) continue;
        used_slots++;
        if (p >= n || !kv->node[p].in_tree || !kv->node[p].head || kv->node[p].key != kv->slots[i].key) {
            rh_fail(e, "hash slot %llu points at page %u, which is not the run head of that key",
                    (unsigned long long)i, p);
            goto out;
        }
    }
    if (used_slots != n_heads) {
        rh_fail(e, "hash table holds %llu keys for %llu run heads", (unsigned long long)used_slots,
                (unsigned long long)n_heads);
        goto out;
    }
    /* Every evictable leaf must be reachable by eviction: exactly one valid
     * heap entry each, and the heap ordered. */
    memset(seen, 0, n);
    uint64_t valid = 0;
    for (uint64_t i = 0; i < kv->heap_n; i++) {
        const kv_heap_entry *h = &kv->heap[i];
        if (i > 0 && heap_less(h, &kv->heap[(i - 1) / 2])) {
            rh_fail(e, "eviction heap out of order at %llu", (unsigned long long)i);
            goto out;
        }
        if (h->page >= n) {
            rh_fail(e, "eviction heap entry %llu names page %u", (unsigned long long)i, h->page);
            goto out;
        }
        if (entry_valid(kv, h)) {
            if (seen[h->page]) {
                rh_fail(e, "page %u has two valid eviction entries", h->page);
                goto out;
            }
            seen[h->page] = 1;
            valid++;
        }
    }
    if (valid != n_evictable) {
        rh_fail(e, "%llu evictable leaves but %llu valid eviction entries", (unsigned long long)n_evictable,
                (unsigned long long)valid);
        goto out;
    }
    if (kv->host) {
        /* A host copy is pinned exactly while the GPU tree holds its page. */
        uint64_t pinned_in_tree = 0;
        for (uint32_t p = 0; p < n; p++) {
            const kv_node *x = &kv->node[p];
            if (!x->in_tree) continue;
            uint64_t v;
            if (rh_map64_get(&kv->host->map, x->key, &v)) {
                if (!kv->host->e[v].pinned) {
                    rh_fail(e, "tree page %u has a host copy that is not pinned", p);
                    goto out;
                }
                pinned_in_tree++;
            }
        }
        if (pinned_in_tree != kv->host->n_pinned) {
            rh_fail(e, "host tier pins %llu pages but the tree holds %llu of them",
                    (unsigned long long)kv->host->n_pinned, (unsigned long long)pinned_in_tree);
            goto out;
        }
        if (kv_tier_check(kv->host, e) < 0) goto out;
    }
    rc = 0;
out:
    free(kids);
    free(seen);
    return rc;
}
