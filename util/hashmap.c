/* hashmap.c — see hashmap.h. */
#include "util/hashmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "util/hash.h"

#define FIRST_CAP 64

static int full(size_t n, size_t cap)
{
    return (n + 1) * 4 > cap * 3;
}

/* ---- u64 -> u64 ---- */

static int map64_grow(rh_map64 *m)
{
    size_t cap = m->cap ? m->cap * 2 : FIRST_CAP;
    rh_map64 g = {calloc(cap, 8), calloc(cap, 8), calloc(cap, 1), cap, m->n};
    if (!g.keys || !g.vals || !g.used) {
        g.n = 0;
        rh_map64_free(&g);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->used[i]) continue;
        size_t j = rh_mix64(m->keys[i]) & (cap - 1);
        while (g.used[j]) j = (j + 1) & (cap - 1);
        g.used[j] = 1;
        g.keys[j] = m->keys[i];
        g.vals[j] = m->vals[i];
    }
    rh_map64_free(m);
    *m = g;
    return 0;
}

uint64_t *rh_map64_slot(rh_map64 *m, uint64_t key, uint64_t dflt, int *inserted)
{
    if (full(m->n, m->cap) && map64_grow(m) < 0) return NULL;
    size_t j = rh_mix64(key) & (m->cap - 1);
    while (m->used[j]) {
        if (m->keys[j] == key) {
            if (inserted) *inserted = 0;
            return &m->vals[j];
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->used[j] = 1;
    m->keys[j] = key;
    m->vals[j] = dflt;
    m->n++;
    if (inserted) *inserted = 1;
    return &m->vals[j];
}

int rh_map64_put(rh_map64 *m, uint64_t key, uint64_t val)
{
    uint64_t *v = rh_map64_slot(m, key, val, NULL);
    if (!v) return -1;
    *v = val;
    return 0;
}

int rh_map64_get(const rh_map64 *m, uint64_t key, uint64_t *val)
{
    if (!m->cap) return 0;
    for (size_t j = rh_mix64(key) & (m->cap - 1); m->used[j]; j = (j + 1) & (m->cap - 1))
        if (m->keys[j] == key) {
            if (val) *val = m->vals[j];
            return 1;
        }
    return 0;
}

/* Backward-shift deletion: every probe chain stays unbroken without
 * tombstones, so a map that churns (a cache tier) never slows down. */
int rh_map64_del(rh_map64 *m, uint64_t key)
{
    if (!m->cap) return 0;
    size_t mask = m->cap - 1, i = rh_mix64(key) & mask;
    while (m->used[i] && m->keys[i] != key) i = (i + 1) & mask;
    if (!m->used[i]) return 0;
    for (;;) {
        m->used[i] = 0;
        size_t j = i;
        for (;;) {
            j = (j + 1) & mask;
            if (!m->used[j]) {
                m->n--;
                return 1;
            }
            size_t k = rh_mix64(m->keys[j]) & mask;
            /* The entry at j may stay if its home lies cyclically in (i, j]. */
            int stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
            if (!stays) {
                m->used[i] = 1;
                m->keys[i] = m->keys[j];
                m->vals[i] = m->vals[j];
                i = j;
                break;
            }
        }
    }
}

void rh_map64_free(rh_map64 *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

/* ---- string -> i64 ---- */

static int str_grow(rh_strmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : FIRST_CAP;
    uint64_t *h = calloc(cap, 8);
    int64_t *v = calloc(cap, 8);
    uint32_t *o = calloc(cap, 4), *l = calloc(cap, 4);
    uint8_t *u = calloc(cap, 1);
    if (!h || !v || !o || !l || !u) {
        free(h), free(v), free(o), free(l), free(u);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->used[i]) continue;
        size_t j = m->hashes[i] & (cap - 1);
        while (u[j]) j = (j + 1) & (cap - 1);
        u[j] = 1, h[j] = m->hashes[i], v[j] = m->vals[i], o[j] = m->offs[i], l[j] = m->lens[i];
    }
    free(m->hashes), free(m->vals), free(m->offs), free(m->lens), free(m->used);
    m->hashes = h, m->vals = v, m->offs = o, m->lens = l, m->used = u, m->cap = cap;
    return 0;
}

/* The slot of key (found: *found = 1) or the empty slot it would take. */
static size_t str_find(const rh_strmap *m, uint64_t h, const char *key, size_t len, int *found)
{
    size_t j = h & (m->cap - 1);
    while (m->used[j]) {
        if (m->hashes[j] == h && m->lens[j] == len && (len == 0 || !memcmp(m->pool + m->offs[j], key, len))) {
            *found = 1;
            return j;
        }
        j = (j + 1) & (m->cap - 1);
    }
    *found = 0;
    return j;
}

int64_t *rh_strmap_slot(rh_strmap *m, const char *key, size_t len, int64_t dflt, int *inserted)
{
    if (full(m->n, m->cap) && str_grow(m) < 0) return NULL;
    uint64_t h = XXH3_64bits(key, len);
    int found;
    size_t j = str_find(m, h, key, len, &found);
    if (found) {
        if (inserted) *inserted = 0;
        return &m->vals[j];
    }
    if (len > UINT32_MAX || m->pool_len + len > UINT32_MAX) return NULL;
    if (m->pool_len + len > m->pool_cap) {
        size_t c = m->pool_cap ? m->pool_cap * 2 : 4096;
        while (c < m->pool_len + len) c *= 2;
        char *p = realloc(m->pool, c);
        if (!p) return NULL;
        m->pool = p;
        m->pool_cap = c;
    }
    if (len) memcpy(m->pool + m->pool_len, key, len);
    m->used[j] = 1;
    m->hashes[j] = h;
    m->offs[j] = (uint32_t)m->pool_len;
    m->lens[j] = (uint32_t)len;
    m->vals[j] = dflt;
    m->pool_len += len;
    m->n++;
    if (inserted) *inserted = 1;
    return &m->vals[j];
}

int rh_strmap_put(rh_strmap *m, const char *key, size_t len, int64_t val)
{
    int64_t *v = rh_strmap_slot(m, key, len, val, NULL);
    if (!v) return -1;
    *v = val;
    return 0;
}

int rh_strmap_get(const rh_strmap *m, const char *key, size_t len, int64_t *val)
{
    if (!m->cap) return 0;
    int found;
    size_t j = str_find(m, XXH3_64bits(key, len), key, len, &found);
    if (found && val) *val = m->vals[j];
    return found;
}

void rh_strmap_free(rh_strmap *m)
{
    free(m->hashes);
    free(m->vals);
    free(m->offs);
    free(m->lens);
    free(m->used);
    free(m->pool);
    memset(m, 0, sizeof *m);
}
