/* idmap.c — see idmap.h. */
#include "traces/idmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* splitmix64's finaliser: spreads sequential ids over the table. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void tr_u64map_init(tr_u64map *m)
{
    memset(m, 0, sizeof *m);
}

void tr_u64map_free(tr_u64map *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

static int u64_grow(tr_u64map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    tr_u64map n = {calloc(cap, 8), calloc(cap, 8), calloc(cap, 1), 0, cap};
    if (!n.keys || !n.vals || !n.used) {
        tr_u64map_free(&n);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->used[i]) continue;
        size_t j = mix(m->keys[i]) & (cap - 1);
        while (n.used[j]) j = (j + 1) & (cap - 1);
        n.used[j] = 1;
        n.keys[j] = m->keys[i];
        n.vals[j] = m->vals[i];
    }
    n.n = m->n;
    tr_u64map_free(m);
    *m = n;
    return 0;
}

uint64_t *tr_u64map_get(tr_u64map *m, uint64_t key, uint64_t dflt, int *inserted)
{
    if ((m->n + 1) * 4 > m->cap * 3 && u64_grow(m) < 0) return NULL;
    size_t j = mix(key) & (m->cap - 1);
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

int tr_u64map_find(const tr_u64map *m, uint64_t key, uint64_t *val)
{
    if (!m->cap) return 0;
    size_t j = mix(key) & (m->cap - 1);
    while (m->used[j]) {
        if (m->keys[j] == key) {
            if (val) *val = m->vals[j];
            return 1;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return 0;
}

void tr_strmap_init(tr_strmap *m)
{
    memset(m, 0, sizeof *m);
}

void tr_strmap_free(tr_strmap *m)
{
    free(m->hashes);
    free(m->vals);
    free(m->offs);
    free(m->lens);
    free(m->used);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

static int str_grow(tr_strmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint64_t *h = calloc(cap, 8), *v = calloc(cap, 8);
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

uint64_t *tr_strmap_get(tr_strmap *m, const char *key, size_t len, uint64_t dflt, int *inserted)
{
    if ((m->n + 1) * 4 > m->cap * 3 && str_grow(m) < 0) return NULL;
    uint64_t h = XXH3_64bits(key, len);
    size_t j = h & (m->cap - 1);
    while (m->used[j]) {
        if (m->hashes[j] == h && m->lens[j] == len && !memcmp(m->pool + m->offs[j], key, len)) {
            if (inserted) *inserted = 0;
            return &m->vals[j];
        }
        j = (j + 1) & (m->cap - 1);
    }
    if (m->pool_len + len > UINT32_MAX) return NULL;
    if (m->pool_len + len > m->pool_cap) {
        size_t c = m->pool_cap ? m->pool_cap * 2 : 4096;
        while (c < m->pool_len + len) c *= 2;
        char *p = realloc(m->pool, c);
        if (!p) return NULL;
        m->pool = p;
        m->pool_cap = c;
    }
    memcpy(m->pool + m->pool_len, key, len);
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
