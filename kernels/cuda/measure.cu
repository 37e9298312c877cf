/* measure.cu — what benchmarks and calibration hold the kernels against:
 * event timing on the thread's stream, the device's measured copy bandwidth
 * (the practical ceiling of a memory-bound kernel), and a plain cuBLAS bf16
 * GEMM (the ceiling our GEMM path is compared with on the same shapes). */
#include <algorithm>
#include <vector>

#include "kernels/cuda/internal.h"

struct cuda_timer {
    cudaEvent_t a, b;
};

extern "C" cuda_timer *cuda_timer_new(void)
{
    if (!cx()) return NULL;
    cuda_timer *t = new cuda_timer;
    if (cx_ok(cudaEventCreate(&t->a), "cudaEventCreate") || cx_ok(cudaEventCreate(&t->b), "cudaEventCreate")) {
        delete t;
        return NULL;
    }
    return t;
}

extern "C" void cuda_timer_start(cuda_timer *t)
{
    cuda_ctx *c = cx();
    if (t && c) cx_ok(cudaEventRecord(t->a, c->stream), "cudaEventRecord");
}

extern "C" double cuda_timer_stop(cuda_timer *t)
{
    cuda_ctx *c = cx();
    if (!t || !c) return 0;
    float ms = 0;
    if (cx_ok(cudaEventRecord(t->b, c->stream), "cudaEventRecord") ||
        cx_ok(cudaEventSynchronize(t->b), "cudaEventSynchronize") ||
        cx_ok(cudaEventElapsedTime(&ms, t->a, t->b), "cudaEventElapsedTime"))
        return 0;
    return ms * 1e-3;
}

extern "C" void cuda_timer_free(cuda_timer *t)
{
    if (!t) return;
    cudaEventDestroy(t->a);
    cudaEventDestroy(t->b);
    delete t;
}

extern "C" double cuda_copy_bandwidth(size_t bytes, int iters)
{
    cuda_ctx *c = cx();
    if (!c || !bytes) return 0;
    void *src = NULL, *dst = NULL;
    if (cudaMalloc(&src, bytes) != cudaSuccess || cudaMalloc(&dst, bytes) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(src);
        return 0;
    }
    cuda_fill_uniform(src, bytes / 4, KERN_F32, 3, -1.f, 1.f);   /* not zeros: nothing may be skipped */
    cuda_timer *t = cuda_timer_new();
    std::vector<double> times;
    for (int i = 0; i < iters + 2; i++) {
        cuda_timer_start(t);
        cx_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream), "cudaMemcpy (device)");
        double s = cuda_timer_stop(t);
        if (i >= 2) times.push_back(s);   /* the first two warm up */
    }
    cuda_timer_free(t);
    cudaFree(src);
    cudaFree(dst);
    if (times.empty()) return 0;
    std::sort(times.begin(), times.end());
    double med = times[times.size() / 2];
    return med > 0 ? 2.0 * (double)bytes / med : 0;
}

extern "C" int cuda_ref_gemm_bf16(const void *x, const void *w, void *y, uint32_t m, uint32_t n, uint32_t k)
{
    cuda_ctx *c = cx();
    if (!c) return -1;
    float alpha = 1.f, beta = 0.f;
    return cx_blas_ok(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, w, CUDA_R_16BF,
                                   (int)k, x, CUDA_R_16BF, (int)k, &beta, y, CUDA_R_16BF, (int)n, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT),
                      "cublasGemmEx (reference)");
}
