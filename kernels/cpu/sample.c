/* sample.c — drawing the next token from a row of logits: greedy, temperature,
 * top-k and top-p (nucleus), from the request's own seeded stream.
 *
 * Candidates are ordered by (logit desc, id asc), a total order, so the token
 * drawn for a given stream state never depends on sort stability or on the
 * C library. top-k keeps the k best with a min-heap (O(V log k)); top-p pops
 * a max-heap only until the nucleus is complete (O(V + n log V)), so no
 * sampler sorts the whole vocabulary. top-k applies first, then top-p over
 * the renormalized survivors, then one uniform draw. */
#include <math.h>

#include "kernels/cpu/cpu.h"

static int better(const kern_cand *a, const kern_cand *b)
{
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

/* Sifts c[i] down a heap of n: a max-heap keeps the best on top, a min-heap the worst. */
static void sift(kern_cand *c, uint32_t n, uint32_t i, int max_heap)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (max_heap) {
            if (l < n && better(&c[l], &c[m])) m = l;
            if (r < n && better(&c[r], &c[m])) m = r;
        } else {
            if (l < n && better(&c[m], &c[l])) m = l;
            if (r < n && better(&c[m], &c[r])) m = r;
        }
        if (m == i) return;
        kern_cand t = c[i];
        c[i] = c[m];
        c[m] = t;
        i = m;
    }
}

static void heapify(kern_cand *c, uint32_t n, int max_heap)
{
    for (uint32_t i = n / 2; i-- > 0;) sift(c, n, i, max_heap);
}

int32_t cpu_sample(const float *logits, uint32_t vocab, const kern_sampling *p, uint64_t *rng, kern_cand *c)
{
    if (p->temperature <= 0.0f || p->top_k == 1) return (int32_t)kern_argmax(logits, vocab);

    /* Keep the candidates (all, or the top k) as scaled logits. */
    uint32_t n;
    if (p->top_k && p->top_k < vocab) {
        n = p->top_k;
        for (uint32_t i = 0; i < n; i++) c[i] = (kern_cand){logits[i], (int32_t)i};
        heapify(c, n, 0);                       /* min-heap: c[0] is the worst kept */
        for (uint32_t i = n; i < vocab; i++) {
            kern_cand x = {logits[i], (int32_t)i};
            if (better(&x, &c[0])) {
                c[0] = x;
                sift(c, n, 0, 0);
            }
        }
    } else {
        n = vocab;
        for (uint32_t i = 0; i < n; i++) c[i] = (kern_cand){logits[i], (int32_t)i};
    }

    /* Softmax at the temperature, over the survivors. */
    double total = kern_softmax_at(c, n, p->temperature);

    /* Nucleus: pop the most likely until their mass reaches top_p. Popped
     * candidates collect at the end of the array, most likely last. */
    uint32_t lo = 0;
    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        heapify(c, n, 1);
        double need = (double)p->top_p * total, mass = 0;
        uint32_t heap_n = n;
        while (heap_n > 0 && mass < need) {
            mass += c[0].v;
            kern_cand t = c[0];
            c[0] = c[heap_n - 1];
            c[heap_n - 1] = t;
            heap_n--;
            sift(c, heap_n, 0, 1);
        }
        lo = heap_n;
        total = mass;
    }

    double u = rh_splitmix_unit(rng) * total, acc = 0;
    for (uint32_t i = n; i-- > lo;) {
        acc += c[i].v;
        if (u < acc) return c[i].id;
    }
    return c[lo].id;   /* u landed on the rounding slack of the last bucket */
}
