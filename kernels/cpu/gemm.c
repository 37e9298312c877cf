/* gemm.c — the two matrix products of the forward pass: every linear layer
 * (one OpenBLAS call over all the batch's rows) and the LM head.
 *
 * Nothing is done around OpenBLAS that a caller could not avoid: the bias is
 * written into y first and the product accumulates onto it with beta = 1, so
 * a biased layer costs one pass over y more than an unbiased one, and the
 * residual add is the same beta = 1. The benchmark holds this path to >= 90%
 * of bare sgemm on the model's shapes.
 *
 * Up to GEMV_MAX_ROWS rows (decode at small batch) of a weight matrix of at
 * least GEMV_MIN_WEIGHTS elements, the product is one sgemv per row: there
 * OpenBLAS's sgemm packs the whole matrix for a single row and runs 4-10x
 * slower than streaming it through sgemv (1024x1024: 0.60 vs 0.06 ms; 2048x768:
 * 0.21 vs 0.045 ms; 2 threads). Smaller matrices stay in cache and sgemm's
 * small-matrix path is as fast or faster (768x768: 0.032 vs 0.036 ms); from
 * about 4 rows sgemm's blocking wins at every size. */
#include <cblas.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

#define GEMV_MAX_ROWS 3
#define GEMV_MIN_WEIGHTS (1u << 20)

void cpu_gemm(const float *x, const float *w, const float *bias, float *y, uint32_t m, uint32_t n, uint32_t k,
              int accumulate)
{
    if (!m || !n) return;
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) {
        for (uint32_t i = 0; i < m; i++) {
            float *row = y + (size_t)i * n;
            if (accumulate)
                for (uint32_t j = 0; j < n; j++) row[j] += bias[j];
            else
                memcpy(row, bias, (size_t)n * sizeof *row);
        }
        beta = 1.0f;
    }
    if (!k) {
        if (!accumulate && !bias) memset(y, 0, (size_t)m * n * sizeof *y);
        return;
    }
    if (m <= GEMV_MAX_ROWS && (uint64_t)n * k >= GEMV_MIN_WEIGHTS) {
        for (uint32_t i = 0; i < m; i++)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)n, (blasint)k, 1.0f, w, (blasint)k, x + (size_t)i * k, 1,
                        beta, y + (size_t)i * n, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)m, (blasint)n, (blasint)k, 1.0f, x,
                (blasint)k, w, (blasint)k, beta, y, (blasint)n);
}

void cpu_lm_head(const float *h, const uint32_t *rows, uint32_t n_rows, const float *norm_w, float eps,
                 const float *w, uint32_t vocab, uint32_t dim, float *tmp, float *logits)
{
    /* Only the rows that need logits go through the final norm and the
     * vocab-wide product: a prefill chunk of 512 tokens asks for one row. */
    for (uint32_t i = 0; i < n_rows; i++)
        cpu_rmsnorm(h + (size_t)rows[i] * dim, norm_w, eps, 1, dim, tmp + (size_t)i * dim);
    cpu_gemm(tmp, w, NULL, logits, n_rows, vocab, dim, 0);
}
