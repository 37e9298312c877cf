/* verify.c — see verify.h. */
#include "engine/speculative/verify.h"

#include <math.h>
#include <stdlib.h>

int spec_is_greedy(const kern_sampling *p)
{
    return p->temperature <= 0.0f || p->top_k == 1;
}

/* The sampler's candidate order: larger value first, then smaller id. */
static int cand_cmp(const void *a, const void *b)
{
    const kern_cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Mirrors the sampler step by step (kernels/cpu/sample.c): keep the top k by
 * logit, exponentiate at the temperature in float with the sum in double,
 * then keep the most likely until their mass reaches top_p of the total. The
 * sampler finds these sets with heaps; a sort finds the same sets because
 * both use the same total order. */
void spec_probs(const float *logits, uint32_t vocab, const kern_sampling *p, float *probs, kern_cand *c)
{
    for (uint32_t i = 0; i < vocab; i++) probs[i] = 0.0f;
    if (spec_is_greedy(p)) {
        probs[kern_argmax(logits, vocab)] = 1.0f;
        return;
    }
    for (uint32_t i = 0; i < vocab; i++) c[i] = (kern_cand){logits[i], (int32_t)i};
    uint32_t n = vocab;
    if (p->top_k && p->top_k < vocab) {
        qsort(c, vocab, sizeof *c, cand_cmp);
        n = p->top_k;
    }
    double total = kern_softmax_at(c, n, p->temperature);
    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        /* The nucleus: the sampler pops candidates by exponentiated value
         * (ties by id) while the mass popped is below top_p of the total. */
        qsort(c, n, sizeof *c, cand_cmp);
        double need = (double)p->top_p * total, mass = 0;
        uint32_t kept = 0;
        while (kept < n && mass < need) mass += c[kept++].v;
        n = kept;
        total = mass;
    }
    for (uint32_t i = 0; i < n; i++) probs[c[i].id] = (float)(c[i].v / total);
}

int32_t spec_draw(const float *p, uint32_t vocab, uint64_t *rng)
{
    double total = 0;
    for (uint32_t i = 0; i < vocab; i++) total += p[i];
    double u = rh_splitmix_unit(rng) * total, acc = 0;
    int32_t last = 0;
    for (uint32_t i = 0; i < vocab; i++) {
        if (p[i] <= 0) continue;
        acc += p[i];
        last = (int32_t)i;
        if (u < acc) return last;
    }
    return last;   /* u landed on the rounding slack: the last id with mass */
}

/* On rejection of draft x: a draw from max(0, p - q), where q is the draft
 * row or the point mass on x. When the residual has no mass (p equals q up
 * to rounding, so rejection was a rounding accident) p itself is drawn. */
static int32_t draw_residual(const float *p, const float *q, int32_t x, uint32_t vocab, uint64_t *rng)
{
    double total = 0;
    for (uint32_t i = 0; i < vocab; i++) {
        double r = (double)p[i] - (q ? (double)q[i] : (i == (uint32_t)x ? 1.0 : 0.0));
        if (r > 0) total += r;
    }
    if (!(total > 0)) return spec_draw(p, vocab, rng);
    double u = rh_splitmix_unit(rng) * total, acc = 0;
    int32_t last = -1;
    for (uint32_t i = 0; i < vocab; i++) {
        double r = (double)p[i] - (q ? (double)q[i] : (i == (uint32_t)x ? 1.0 : 0.0));
        if (r <= 0) continue;
        acc += r;
        last = (int32_t)i;
        if (u < acc) return last;
    }
    return last;
}

uint32_t spec_verify(const float *p, const float *q, const int32_t *drafts, uint32_t k, uint32_t vocab,
                     uint64_t *rng, int32_t *out)
{
    for (uint32_t j = 0; j < k; j++) {
        const float *pj = p + (size_t)j * vocab;
        const float *qj = q ? q + (size_t)j * vocab : NULL;
        int32_t x = drafts[j];
        double px = pj[x], qx = qj ? qj[x] : 1.0;
        /* A draft its own distribution gave no mass cannot have been drawn
         * from it; it stands only where the target could have drawn it. */
        double ratio = qx > 0 ? px / qx : (px > 0 ? 1.0 : 0.0);
        if (rh_splitmix_unit(rng) < ratio) {
            out[j] = x;
            continue;
        }
        out[j] = draw_residual(pj, qj, x, vocab, rng);
        return j;
    }
    out[k] = spec_draw(p + (size_t)k * vocab, vocab, rng);
    return k;
}
