/* elementwise.c — the row-wise kernels: embedding lookup, RMSNorm, RoPE and
 * the SwiGLU activation. Each is one pass over its rows. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

void cpu_embedding(const float *table, const int32_t *ids, uint32_t n, uint32_t dim, float *out)
{
    for (uint32_t i = 0; i < n; i++)
        memcpy(out + (size_t)i * dim, table + (size_t)ids[i] * dim, (size_t)dim * sizeof *out);
}

void cpu_rmsnorm(const float *x, const float *w, float eps, uint32_t rows, uint32_t dim, float *out)
{
    for (uint32_t r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim;
        float *o = out + (size_t)r * dim;
        /* The mean of squares in double: a residual stream of large values
         * loses digits in a float sum over thousands of elements. */
        double ss = 0;
        for (uint32_t i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / dim + (double)eps));
        for (uint32_t i = 0; i < dim; i++) o[i] = xr[i] * inv * w[i];
    }
}

void cpu_rope_angles(const uint32_t *pos, const float *inv_freq, uint32_t rows, uint32_t half, float *c,
                     float *s)
{
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t i = 0; i < half; i++) {
            /* The angle is formed in f32 as Llama checkpoints were trained with. */
            float a = (float)pos[r] * inv_freq[i];
            c[(size_t)r * half + i] = cosf(a);
            s[(size_t)r * half + i] = sinf(a);
        }
}

void cpu_rope(float *x, const float *c, const float *s, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
              uint32_t row_stride)
{
    uint32_t half = head_dim / 2;
    for (uint32_t r = 0; r < rows; r++) {
        const float *cr = c + (size_t)r * half, *sr = s + (size_t)r * half;
        for (uint32_t h = 0; h < n_heads; h++) {
            float *v = x + (size_t)r * row_stride + (size_t)h * head_dim;
            for (uint32_t i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * cr[i] - b * sr[i];
                v[i + half] = b * cr[i] + a * sr[i];
            }
        }
    }
}

void cpu_silu_mul(const float *gate, const float *up, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
