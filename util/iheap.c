/* iheap.c — the indexed min-heap: see iheap.h. */
#include "util/iheap.h"

#include <math.h>
#include <stdlib.h>

static bool before(const rh_iheap *h, uint32_t a, uint32_t b)
{
    return h->key[a] < h->key[b] || (h->key[a] == h->key[b] && a < b);
}

static void place(rh_iheap *h, uint32_t i, uint32_t id)
{
    h->heap[i] = id;
    h->pos[id] = i;
}

static void sift_up(rh_iheap *h, uint32_t i)
{
    uint32_t id = h->heap[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (!before(h, id, h->heap[parent])) break;
        place(h, i, h->heap[parent]);
        i = parent;
    }
    place(h, i, id);
}

static void sift_down(rh_iheap *h, uint32_t i)
{
    uint32_t id = h->heap[i];
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= h->n) break;
        if (child + 1 < h->n && before(h, h->heap[child + 1], h->heap[child])) child++;
        if (!before(h, h->heap[child], id)) break;
        place(h, i, h->heap[child]);
        i = child;
    }
    place(h, i, id);
}

int rh_iheap_init(rh_iheap *h, uint32_t n)
{
    h->heap = malloc((n ? n : 1) * sizeof *h->heap);
    h->pos = malloc((n ? n : 1) * sizeof *h->pos);
    h->key = malloc((n ? n : 1) * sizeof *h->key);
    h->n = h->cap = n;
    if (!h->heap || !h->pos || !h->key) {
        rh_iheap_free(h);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {   /* equal keys in id order: already a heap */
        h->key[i] = INFINITY;
        place(h, i, i);
    }
    return 0;
}

void rh_iheap_free(rh_iheap *h)
{
    free(h->heap), free(h->pos), free(h->key);
    h->heap = h->pos = NULL;
    h->key = NULL;
    h->n = h->cap = 0;
}

double rh_iheap_top_key(const rh_iheap *h)
{
    return h->n ? h->key[h->heap[0]] : INFINITY;
}

uint32_t rh_iheap_top(const rh_iheap *h)
{
    return h->n ? h->heap[0] : UINT32_MAX;
}

uint32_t rh_iheap_pop(rh_iheap *h)
{
    if (!h->n) return UINT32_MAX;
    uint32_t id = h->heap[0];
    h->pos[id] = UINT32_MAX;
    if (--h->n) {
        place(h, 0, h->heap[h->n]);
        sift_down(h, 0);
    }
    return id;
}

void rh_iheap_set(rh_iheap *h, uint32_t id, double key)
{
    double old = h->key[id];
    h->key[id] = key;
    uint32_t i = h->pos[id];
    if (i == UINT32_MAX || key == old) return;
    if (key < old) sift_up(h, i);
    else sift_down(h, i);
}

void rh_iheap_push(rh_iheap *h, uint32_t id)
{
    if (h->pos[id] != UINT32_MAX) return;
    place(h, h->n++, id);
    sift_up(h, h->n - 1);
}
