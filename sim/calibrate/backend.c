/* backend.c — the backends a calibration can run on.
 *
 * cpu   kern_cpu(): synchronous kernels, GEMMs on OpenBLAS's default thread
 *       count (the setting the engine runs in), no collective.
 * cuda  kern_cuda() on GPU 0, bound to this thread. Kernels are queued on
 *       the thread's stream, so a sample ends with cuda_sync. All-reduces
 *       are timed by cuda_allreduce_times over local GPUs, one thread each.
 *       A build without nvcc, or a machine without a GPU, fails with
 *       kern_cuda's own reason. */
#include <cblas.h>
#include <stdio.h>
#include <string.h>

#include "sim/calibrate/calibrate.h"
#include "kernels/cuda/cuda.h"

const char *calib_backend_names(void)
{
    return "cpu, cuda";
}

static void cuda_wait(void *ctx)
{
    (void)ctx;
    cuda_sync(NULL);
}

/* Medians of 20 timed runs after a warm-up, per size: the backend's own
 * repetition, since a group of GPUs is set up once for all sizes. */
static int cuda_allreduce(void *ctx, uint32_t tp, const uint64_t *bytes, size_t n, double *seconds, rh_err *e)
{
    (void)ctx;
    size_t b[64];
    if (n > sizeof b / sizeof b[0]) return rh_fail(e, "all-reduce: at most 64 sizes");
    for (size_t i = 0; i < n; i++) b[i] = (size_t)bytes[i];
    return cuda_allreduce_times(tp, b, n, 20, seconds, e);
}

int calib_backend_find(const char *name, calib_backend *b, rh_err *e)
{
    memset(b, 0, sizeof *b);
    b->activation_bytes = sizeof(float);
    if (!strcmp(name, "cpu")) {
        b->name = "cpu";
        b->K = kern_cpu();
        b->threads = (uint32_t)kern_cpu_threads();
        return 0;
    }
    if (!strcmp(name, "cuda")) {
        const char *why = NULL;
        const kern_table *K = kern_cuda(&why);
        if (!K) return rh_fail(e, "--backend cuda: %s; use --backend cpu", why && *why ? why : "no usable GPU");
        if (cuda_use_device(0, e) < 0) return rh_prefix(e, "--backend cuda");
        b->name = "cuda";
        b->K = K;
        b->sync = cuda_wait;
        b->allreduce = cuda_allreduce;
        b->threads = 1;
        return 0;
    }
    return rh_fail(e, "--backend: unknown backend '%s' (known: %s)", name, calib_backend_names());
}
