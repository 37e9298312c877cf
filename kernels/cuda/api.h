/* api.h — the one seam between the rehearse binary and its CUDA backend
 * library (librehearse_cuda.so): a table of the backend's entry points,
 * the library's one exported symbol.
 *
 * The binary links no CUDA library: kernels/cuda/loader.c dlopens the
 * backend the first time a cuda.h function or kern_cuda() is called (that
 * is, when --backend cuda asks for it), so every other command starts
 * without mapping cuBLAS and the CUDA runtime, and a machine without CUDA
 * runs the same binary. The library holds the .cu objects, the CUDA runtime
 * (static) and, hidden, the little host code they call. Each entry is the
 * cuda.h function of the same name. */
#ifndef RH_KERNELS_CUDA_API_H
#define RH_KERNELS_CUDA_API_H

#include "kernels/cuda/cuda.h"

#define RH_CUDA_API_VERSION 1
#define RH_CUDA_LIB "librehearse_cuda.so"
#define RH_CUDA_ENTRY "rh_cuda_backend"

typedef struct rh_cuda_api {
    uint32_t version, size;     /* RH_CUDA_API_VERSION, sizeof(rh_cuda_api): a stale library is refused */
    const kern_table *(*kern_cuda)(const char **why);
    int (*device_count)(void);
    const char *(*device_describe)(int dev, char *buf, size_t n);
    int (*use_device)(int dev, rh_err *e);
    void (*thread_release)(void);
    int (*sync)(rh_err *e);
    const char *(*error)(void);
    void (*clear_error)(void);
    void (*force_attention)(int path);
    void (*force_gemm)(int path);
    void (*set_variants)(int gemv_loads, int decode_attention);
    void (*fill_uniform)(void *dst, size_t n, kern_dtype dt, uint64_t seed, float lo, float hi);
    cuda_timer *(*timer_new)(void);
    void (*timer_start)(cuda_timer *t);
    double (*timer_stop)(cuda_timer *t);
    void (*timer_free)(cuda_timer *t);
    double (*copy_bandwidth)(size_t bytes, int iters);
    int (*ref_gemm_bf16)(const void *x, const void *w, void *y, uint32_t m, uint32_t n, uint32_t k);
    int (*comm_id)(unsigned char id[128], const char *dist_init_addr, rh_err *e);
    cuda_comm *(*comm_new)(const unsigned char id[128], uint32_t rank, uint32_t size, rh_err *e);
    const kern_comm *(*comm_kern)(cuda_comm *c);
    void (*comm_free)(cuda_comm *c);
    int (*allreduce_times)(uint32_t n_gpus, const size_t *bytes, size_t n, int iters, double *seconds, rh_err *e);
} rh_cuda_api;

#ifdef __cplusplus
extern "C" {
#endif
/* The library's table (exported with default visibility; all else hidden). */
const rh_cuda_api *rh_cuda_backend(void);
#ifdef __cplusplus
}
#endif

#endif
