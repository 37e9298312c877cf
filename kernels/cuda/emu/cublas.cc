/* cublas.cc — the emulator's cuBLAS: cublasGemmEx in column-major order as
 * cuBLAS defines it, operands widened from bf16 to f32 and multiplied by
 * OpenBLAS (f32 accumulation, as CUBLAS_COMPUTE_32F), the result rounded
 * back where C is bf16. Runs on the handle's stream like a kernel. */
#include <cblas.h>
#include <stdlib.h>

#include <vector>

#include "cublas_v2.h"
#include "cuda_bf16.h"

struct rh_emu_blas {
    cudaStream_t stream;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new rh_emu_blas{nullptr};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
    (void)ws, (void)bytes;
    return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

/* A column-major matrix of `rows` x `cols` (leading dimension ld) as floats. */
static std::vector<float> widen(const void *p, cudaDataType t, int rows, int cols, int ld)
{
    std::vector<float> out((size_t)ld * cols);
    size_t n = (size_t)ld * (cols - 1) + rows;
    if (t == CUDA_R_32F) {
        const float *f = (const float *)p;
        for (size_t i = 0; i < n; i++) out[i] = f[i];
    } else {
        const __nv_bfloat16 *b = (const __nv_bfloat16 *)p;
        for (size_t i = 0; i < n; i++) out[i] = __bfloat162float(b[i]);
    }
    return out;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType ta_type, int lda, const void *B,
                            cudaDataType tb_type, int ldb, const void *beta, void *C, cudaDataType tc_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
    int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
    if (m < 0 || n < 0 || k < 0 || lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) ||
        ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    float al = *(const float *)alpha, be = *(const float *)beta;
    rh_emu::enqueue(h->stream, [=]() {
        std::vector<float> a = k ? widen(A, ta_type, a_rows, a_cols, lda) : std::vector<float>(1);
        std::vector<float> b = k ? widen(B, tb_type, b_rows, b_cols, ldb) : std::vector<float>(1);
        std::vector<float> c = widen(C, tc_type, m, n, ldc);
        if (k)
            cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                        tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, al, a.data(), lda, b.data(), ldb, be,
                        c.data(), ldc);
        else
            for (float &v : c) v = be == 0.f ? 0.f : v * be;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                size_t at = (size_t)j * ldc + i;
                if (tc_type == CUDA_R_32F) ((float *)C)[at] = c[at];
                else ((__nv_bfloat16 *)C)[at] = __float2bfloat16(c[at]);
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}
