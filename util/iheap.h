/* iheap.h — an indexed min-heap: ids 0..n-1, each with a key (a time), the
 * least key on top, equal keys in id order. An id is in the heap or taken
 * out (rh_iheap_pop); its key can change either way (rh_iheap_set), and a
 * taken id goes back with the key it has (rh_iheap_push). Every operation
 * is O(log n) or less: a simulator with many replicas finds the next one
 * to wake without looking at the others. */
#ifndef RH_UTIL_IHEAP_H
#define RH_UTIL_IHEAP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct rh_iheap {
    uint32_t *heap;          /* ids, heap-ordered by (key, id) */
    uint32_t *pos;           /* per id: its place in heap[], UINT32_MAX when taken out */
    double *key;             /* per id */
    uint32_t n, cap;         /* ids in the heap; ids in all */
} rh_iheap;

/* n ids, all in, every key INFINITY. 0, or -1 out of memory. */
int rh_iheap_init(rh_iheap *h, uint32_t n);
void rh_iheap_free(rh_iheap *h);

/* The least key (INFINITY when empty) and its id (UINT32_MAX when empty). */
double rh_iheap_top_key(const rh_iheap *h);
uint32_t rh_iheap_top(const rh_iheap *h);

/* Takes the top id out and returns it (UINT32_MAX when empty). */
uint32_t rh_iheap_pop(rh_iheap *h);

/* Sets id's key; an id in the heap moves to its place. */
void rh_iheap_set(rh_iheap *h, uint32_t id, double key);

/* Puts a taken id back with its key; an id already in stays where it is. */
void rh_iheap_push(rh_iheap *h, uint32_t id);

static inline bool rh_iheap_has(const rh_iheap *h, uint32_t id)
{
    return h->pos[id] != UINT32_MAX;
}

#endif
