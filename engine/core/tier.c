/* tier.c — see tier.h. */
#include "engine/core/tier.h"

#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX

int kv_tier_init(kv_tier *t, uint64_t cap_pages, rh_err *e)
{
    memset(t, 0, sizeof *t);
    if (cap_pages == 0 || cap_pages >= NIL)
        return rh_fail(e, "KV tier: %llu pages is not a tier", (unsigned long long)cap_pages);
    t->e = calloc(cap_pages, sizeof *t->e);
    if (!t->e) return rh_fail(e, "KV tier: out of memory for %llu pages", (unsigned long long)cap_pages);
    t->cap = cap_pages;
    for (uint64_t i = 0; i < cap_pages; i++) t->e[i].next = i + 1 < cap_pages ? (uint32_t)(i + 1) : NIL;
    t->free_head = 0;
    t->lru = t->mru = NIL;
    return 0;
}

void kv_tier_destroy(kv_tier *t)
{
    free(t->e);
    rh_map64_free(&t->map);
    memset(t, 0, sizeof *t);
}

static uint32_t find(const kv_tier *t, uint64_t key)
{
    uint64_t v;
    return rh_map64_get(&t->map, key, &v) ? (uint32_t)v : NIL;
}

uint32_t kv_tier_slot(const kv_tier *t, uint64_t key)
{
    return find(t, key);
}

bool kv_tier_has(const kv_tier *t, uint64_t key)
{
    return find(t, key) != NIL;
}

static void list_unlink(kv_tier *t, uint32_t i)
{
    kv_tier_entry *x = &t->e[i];
    if (x->prev != NIL) t->e[x->prev].next = x->next;
    else t->lru = x->next;
    if (x->next != NIL) t->e[x->next].prev = x->prev;
    else t->mru = x->prev;
    x->prev = x->next = NIL;
}

static void list_push_mru(kv_tier *t, uint32_t i)
{
    kv_tier_entry *x = &t->e[i];
    x->prev = t->mru;
    x->next = NIL;
    if (t->mru != NIL) t->e[t->mru].next = i;
    else t->lru = i;
    t->mru = i;
}

static void release(kv_tier *t, uint32_t i)
{
    rh_map64_del(&t->map, t->e[i].key);
    t->e[i].used = 0;
    t->e[i].next = t->free_head;
    t->free_head = i;
    t->n_used--;
}

/* A free entry for a new key: a never-used or released one, else the LRU
 * evictable entry's. NIL when every entry is pinned, or the map cannot grow. */
static uint32_t take(kv_tier *t, uint64_t key)
{
    uint32_t i = t->free_head;
    if (i == NIL) {
        if (t->lru == NIL) return NIL;
        i = t->lru;
        list_unlink(t, i);
        release(t, i);
        t->evicted++;
    }
    if (rh_map64_put(&t->map, key, i) < 0) return NIL;
    t->free_head = t->e[i].next;
    t->e[i] = (kv_tier_entry){.key = key, .prev = NIL, .next = NIL, .used = 1};
    t->n_used++;
    t->written++;
    return i;
}

int kv_tier_pin(kv_tier *t, uint64_t key)
{
    uint32_t i = find(t, key);
    int wrote = 0;
    if (i == NIL) {
        if ((i = take(t, key)) == NIL) return -1;
        wrote = 1;
    } else if (!t->e[i].pinned) {
        list_unlink(t, i);
    } else {
        return 0;
    }
    t->e[i].pinned = 1;
    t->n_pinned++;
    return wrote;
}

int kv_tier_unpin(kv_tier *t, uint64_t key)
{
    uint32_t i = find(t, key);
    if (i == NIL) return 0;
    if (t->e[i].pinned) {
        t->e[i].pinned = 0;
        t->n_pinned--;
    } else {
        list_unlink(t, i);
    }
    list_push_mru(t, i);
    return 1;
}

int kv_tier_put(kv_tier *t, uint64_t key)
{
    if (kv_tier_unpin(t, key)) return 0;
    uint32_t i = take(t, key);
    if (i == NIL) return -1;
    list_push_mru(t, i);
    return 1;
}

void kv_tier_remove(kv_tier *t, uint64_t key)
{
    uint32_t i = find(t, key);
    if (i == NIL) return;
    if (t->e[i].pinned) t->n_pinned--;
    else list_unlink(t, i);
    release(t, i);
}

int kv_tier_check(const kv_tier *t, rh_err *e)
{
    uint64_t used = 0, pinned = 0, listed = 0, free_n = 0;
    for (uint64_t i = 0; i < t->cap; i++) {
        const kv_tier_entry *x = &t->e[i];
        if (!x->used) continue;
        used++;
        pinned += x->pinned;
        if (find(t, x->key) != i)
            return rh_fail(e, "tier entry %llu: its key maps elsewhere", (unsigned long long)i);
    }
    for (uint32_t i = t->lru, prev = NIL; i != NIL; prev = i, i = t->e[i].next) {
        if (!t->e[i].used || t->e[i].pinned || t->e[i].prev != prev || ++listed > t->cap)
            return rh_fail(e, "tier LRU list broken at entry %u", i);
        if (t->e[i].next == NIL && t->mru != i) return rh_fail(e, "tier LRU list ends at %u, not at its MRU", i);
    }
    for (uint32_t i = t->free_head; i != NIL; i = t->e[i].next)
        if (t->e[i].used || ++free_n > t->cap) return rh_fail(e, "tier free list holds a used entry %u", i);
    if (used != t->n_used || pinned != t->n_pinned || used != t->map.n || listed + pinned != used ||
        free_n + used != t->cap)
        return rh_fail(e, "tier counts drifted: used %llu/%llu, pinned %llu/%llu, mapped %zu, listed %llu, free %llu",
                       (unsigned long long)used, (unsigned long long)t->n_used, (unsigned long long)pinned,
                       (unsigned long long)t->n_pinned, t->map.n, (unsigned long long)listed,
                       (unsigned long long)free_n);
    return 0;
}
