/* backend.c — the backends a calibration can run on.
 *
 * cpu   kern_cpu(): synchronous kernels, GEMMs on OpenBLAS's default thread
 *       count (the setting the engine runs in), no collective.
 * cuda  kern_cuda(), when the binary links the CUDA backend. It is referenced
 *       weakly so this file builds and links without it: a build without
 *       nvcc reports that it has no CUDA backend, a machine without a GPU
 *       gets kern_cuda's own reason. Kernels are asynchronous there, so a
 *       sample ends with a device-to-host copy of one word, which waits for
 *       them. The all-reduce hook stays NULL until the backend offers a
 *       timer for its communicator (calib_backend.allreduce). */
#include <cblas.h>
#include <stdio.h>
#include <string.h>

#include "kernels/calibrate/calibrate.h"

extern const kern_table *kern_cuda(const char **why) __attribute__((weak));

const char *calib_backend_names(void)
{
    return "cpu, cuda";
}

/* A copy back to the host returns only when the device has finished the
 * work queued before it. */
static void device_sync(void *ctx)
{
    const kern_table *K = ctx;
    static void *word;
    uint32_t host;
    if (!word) word = K->alloc(sizeof host);
    if (word) K->copy_out(&host, word, sizeof host);
}

int calib_backend_find(const char *name, calib_backend *b, rh_err *e)
{
    memset(b, 0, sizeof *b);
    b->activation_bytes = sizeof(float);
    if (!strcmp(name, "cpu")) {
        b->name = "cpu";
        b->K = kern_cpu();
        int t = openblas_get_num_threads();
        b->threads = t > 0 ? (uint32_t)t : 1;
        return 0;
    }
    if (!strcmp(name, "cuda")) {
        if (!kern_cuda)
            return rh_fail(e, "--backend cuda: this binary was built without the CUDA backend "
                              "(nvcc was not found when it was built); use --backend cpu");
        const char *why = NULL;
        const kern_table *K = kern_cuda(&why);
        if (!K) return rh_fail(e, "--backend cuda: %s", why && *why ? why : "no usable GPU");
        b->name = "cuda";
        b->K = K;
        b->ctx = (void *)K;
        b->sync = device_sync;
        b->threads = 1;
        return 0;
    }
    return rh_fail(e, "--backend: unknown backend '%s' (known: %s)", name, calib_backend_names());
}
