/* cublas_v2.h (emulator) — the one cuBLAS product the backend uses,
 * cublasGemmEx with bf16 or f32 operands and f32 accumulation, computed on
 * the host by OpenBLAS (kernels/cuda/emu/cublas.cc) on the handle's stream. */
#ifndef RH_CUDA_EMU_CUBLAS_H
#define RH_CUDA_EMU_CUBLAS_H

#include "cuda_runtime.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef struct rh_emu_blas *cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType ta_type, int lda, const void *B,
                            cudaDataType tb_type, int ldb, const void *beta, void *C, cudaDataType tc_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);

#endif
