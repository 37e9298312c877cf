/* hashmap.c — see hashmap.h. Linear probing; capacities are powers of two. */
#include "util/hashmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int map64_grow(rh_map64 *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    rh_map64 g = {calloc(cap, 8), calloc(cap, 8), calloc(cap, 1), cap, 0};
    if (!g.keys || !g.vals || !g.used) {
        free(g.keys);
        free(g.vals);
        free(g.used);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i]) rh_map64_put(&g, m->keys[i], m->vals[i]);
    rh_map64_free(m);
    *m = g;
    return 0;
}

int rh_map64_put(rh_map64 *m, uint64_t key, uint64_t val)
{
    if ((m->n + 1) * 2 > m->cap && map64_grow(m)) return -1;
    size_t i = mix64(key) & (m->cap - 1);
    while (m->used[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (!m->used[i]) {
        m->used[i] = 1;
        m->keys[i] = key;
        m->n++;
    }
    m->vals[i] = val;
    return 0;
}

int rh_map64_get(const rh_map64 *m, uint64_t key, uint64_t *val)
{
    if (!m->cap) return 0;
    for (size_t i = mix64(key) & (m->cap - 1); m->used[i]; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return 1;
        }
    return 0;
}

void rh_map64_free(rh_map64 *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

/* Places an entry (key already owned) into a table with room. */
static void str_place(rh_strmap_entry *slots, size_t cap, rh_strmap_entry e)
{
    size_t i = e.hash & (cap - 1);
    while (slots[i].key) i = (i + 1) & (cap - 1);
    slots[i] = e;
}

int rh_strmap_put(rh_strmap *m, const char *key, size_t len, int64_t val)
{
    uint64_t h = XXH3_64bits(key, len);
    if (m->cap) {
        for (size_t i = h & (m->cap - 1); m->slots[i].key; i = (i + 1) & (m->cap - 1)) {
            rh_strmap_entry *s = &m->slots[i];
            if (s->hash == h && s->len == len && !memcmp(s->key, key, len)) {
                s->val = val;
                return 0;
            }
        }
    }
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        rh_strmap_entry *slots = calloc(cap, sizeof *slots);
        if (!slots) return -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key) str_place(slots, cap, m->slots[i]);
        free(m->slots);
        m->slots = slots;
        m->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, key, len);
    copy[len] = '\0';
    str_place(m->slots, m->cap, (rh_strmap_entry){copy, len, h, val});
    m->n++;
    return 0;
}

int rh_strmap_get(const rh_strmap *m, const char *key, size_t len, int64_t *val)
{
    if (!m->cap) return 0;
    uint64_t h = XXH3_64bits(key, len);
    for (size_t i = h & (m->cap - 1); m->slots[i].key; i = (i + 1) & (m->cap - 1)) {
        const rh_strmap_entry *s = &m->slots[i];
        if (s->hash == h && s->len == len && !memcmp(s->key, key, len)) {
            *val = s->val;
            return 1;
        }
    }
    return 0;
}

void rh_strmap_free(rh_strmap *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof *m);
}
