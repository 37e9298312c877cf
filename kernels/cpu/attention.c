/* attention.c — attention over the paged KV cache, for prefill chunks and
 * decodes in one batch.
 *
 * Every row (new token) attends to positions 0..its own position of its
 * sequence: the cached context in full, and the chunk's own tokens causally.
 * kv_write runs first, so a chunk's keys are in the pages before any of its
 * rows reads them; one code path then serves prefill, chunked prefill,
 * prefix reuse and decode alike. Keys are walked page by page so the page
 * lookup is paid once per page, not once per position. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

void cpu_kv_write(const float *k, const float *v, const kern_attn_batch *b, const kern_attn_shape *s,
                  float *k_pool, float *v_pool)
{
    size_t slot = (size_t)s->n_kv_heads * s->head_dim;
    size_t page = slot * s->page_size;
    for (uint32_t q = 0; q < b->n_seqs; q++) {
        const uint32_t *pages = b->page_ids + b->pt0[q];
        for (uint32_t r = b->row0[q]; r < b->row0[q + 1]; r++) {
            uint32_t pos = b->start[q] + (r - b->row0[q]);
            size_t at = (size_t)pages[pos / s->page_size] * page + (size_t)(pos % s->page_size) * slot;
            memcpy(k_pool + at, k + (size_t)r * slot, slot * sizeof *k);
            memcpy(v_pool + at, v + (size_t)r * slot, slot * sizeof *v);
        }
    }
}

static float dot(const float *a, const float *b, uint32_t n)
{
    /* Four partial sums: lets the compiler keep four FMA chains in flight. */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    uint32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* One head of one row: scores over [lo, hi], softmax, weighted sum of V. */
static void attend(const float *qv, const float *k_pool, const float *v_pool, const uint32_t *pages,
                   uint32_t lo, uint32_t hi, uint32_t kvh, const kern_attn_shape *s, float *out, float *sc)
{
    uint32_t hd = s->head_dim, ps = s->page_size;
    size_t slot = (size_t)s->n_kv_heads * hd, page = slot * ps;
    float mx = -INFINITY;
    for (uint32_t p = lo; p <= hi;) {
        const float *kp = k_pool + (size_t)pages[p / ps] * page + (size_t)kvh * hd;
        uint32_t end = (p / ps + 1) * ps - 1;
        if (end > hi) end = hi;
        for (; p <= end; p++) {
            float x = dot(qv, kp + (size_t)(p % ps) * slot, hd) * s->scale;
            sc[p - lo] = x;
            if (x > mx) mx = x;
        }
    }
    float sum = 0;
    for (uint32_t j = 0; j <= hi - lo; j++) {
        sc[j] = expf(sc[j] - mx);
        sum += sc[j];
    }
    float inv = 1.0f / sum;
    memset(out, 0, hd * sizeof *out);
    for (uint32_t p = lo; p <= hi;) {
        const float *vp = v_pool + (size_t)pages[p / ps] * page + (size_t)kvh * hd;
        uint32_t end = (p / ps + 1) * ps - 1;
        if (end > hi) end = hi;
        for (; p <= end; p++) {
            const float *vv = vp + (size_t)(p % ps) * slot;
            float w = sc[p - lo] * inv;
            for (uint32_t d = 0; d < hd; d++) out[d] += w * vv[d];
        }
    }
}

void cpu_attention(const float *q, const float *k_pool, const float *v_pool, const kern_attn_batch *b,
                   const kern_attn_shape *s, float *out, float *scratch)
{
    uint32_t group = s->n_heads / s->n_kv_heads;
    size_t row = (size_t)s->n_heads * s->head_dim;
    for (uint32_t qi = 0; qi < b->n_seqs; qi++) {
        const uint32_t *pages = b->page_ids + b->pt0[qi];
        for (uint32_t r = b->row0[qi]; r < b->row0[qi + 1]; r++) {
            uint32_t pos = b->start[qi] + (r - b->row0[qi]);
            uint32_t lo = (s->window && pos + 1 > s->window) ? pos + 1 - s->window : 0;
            for (uint32_t h = 0; h < s->n_heads; h++)
                attend(q + r * row + (size_t)h * s->head_dim, k_pool, v_pool, pages, lo, pos, h / group, s,
                       out + r * row + (size_t)h * s->head_dim, scratch);
        }
    }
}
