/* none.c — the CUDA backend of a build without nvcc: kern_cuda() says why
 * it is absent, and every other entry of kernels/cuda/cuda.h fails or
 * answers zero, so callers link and skip the same way as on a machine
 * without a GPU. */
#include "kernels/cuda/cuda.h"

#include <stdio.h>

static const char *const absent = "this build has no CUDA backend (nvcc was not found when it was built)";

const kern_table *kern_cuda(const char **why)
{
    if (why) *why = absent;
    return NULL;
}

int cuda_device_count(void) { return 0; }

const char *cuda_device_describe(int dev, char *buf, size_t n)
{
    snprintf(buf, n, "no CUDA device %d: %s", dev, absent);
    return buf;
}

int cuda_use_device(int dev, rh_err *e) { return rh_fail(e, "CUDA device %d: %s", dev, absent); }
void cuda_thread_release(void) {}
int cuda_sync(rh_err *e) { return rh_fail(e, "%s", absent); }
const char *cuda_error(void) { return absent; }
void cuda_clear_error(void) {}
void cuda_force_attention(int path) { (void)path; }
void cuda_force_gemm(int path) { (void)path; }
void cuda_set_variants(int gemv_loads, int decode_attention) { (void)gemv_loads, (void)decode_attention; }

void cuda_fill_uniform(void *dst, size_t n, kern_dtype dt, uint64_t seed, float lo, float hi)
{
    (void)dst, (void)n, (void)dt, (void)seed, (void)lo, (void)hi;
}

cuda_timer *cuda_timer_new(void) { return NULL; }
void cuda_timer_start(cuda_timer *t) { (void)t; }
double cuda_timer_stop(cuda_timer *t) { return (void)t, 0.0; }
void cuda_timer_free(cuda_timer *t) { (void)t; }
double cuda_copy_bandwidth(size_t bytes, int iters) { return (void)bytes, (void)iters, 0.0; }

int cuda_ref_gemm_bf16(const void *x, const void *w, void *y, uint32_t m, uint32_t n, uint32_t k)
{
    (void)x, (void)w, (void)y, (void)m, (void)n, (void)k;
    return -1;
}

int cuda_comm_id(unsigned char id[128], const char *dist_init_addr, rh_err *e)
{
    (void)id, (void)dist_init_addr;
    return rh_fail(e, "tensor parallel: %s", absent);
}

cuda_comm *cuda_comm_new(const unsigned char id[128], uint32_t rank, uint32_t size, rh_err *e)
{
    (void)id, (void)rank, (void)size;
    rh_fail(e, "tensor parallel: %s", absent);
    return NULL;
}

const kern_comm *cuda_comm_kern(cuda_comm *c) { return (void)c, NULL; }
void cuda_comm_free(cuda_comm *c) { (void)c; }

int cuda_allreduce_times(uint32_t n_gpus, const size_t *bytes, size_t n, int iters, double *seconds, rh_err *e)
{
    (void)n_gpus, (void)bytes, (void)n, (void)iters, (void)seconds;
    return rh_fail(e, "all-reduce timings: %s", absent);
}
