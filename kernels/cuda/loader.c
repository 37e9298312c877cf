/* loader.c — the binary's side of the CUDA backend (api.h): every cuda.h
 * function and kern_cuda(), forwarded to librehearse_cuda.so, which is
 * loaded the first time one of them is called. Where it cannot be loaded
 * (a build without nvcc, a machine without the CUDA libraries) each call
 * fails or answers zero as on a machine without a GPU, and kern_cuda()
 * says why, naming the places it looked.
 *
 * The library is looked for at $REHEARSE_CUDA_LIB, then beside the binary,
 * in build/ beside it (a source checkout's ./rehearse), and in
 * ../lib/rehearse/ (`make install`). */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/api.h"
#include "util/fs.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* Set once, by load(); read without loading by the calls that only matter
 * when the backend already runs (releasing a thread's handles, a timer). */
static _Atomic(const rh_cuda_api *) api;
static char why[4 * PATH_MAX + 512];   /* room for every place it looked */

/* The backend when it is already loaded, else NULL: never loads it. */
static const rh_cuda_api *loaded(void)
{
    return atomic_load_explicit(&api, memory_order_acquire);
}

static int try_path(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        size_t n = strlen(why);
        snprintf(why + n, sizeof why - n, "%s%s", n ? "; " : "", dlerror());
        return 0;
    }
    const rh_cuda_api *(*entry)(void) = (const rh_cuda_api *(*)(void))dlsym(h, RH_CUDA_ENTRY);
    const rh_cuda_api *a = entry ? entry() : NULL;
    if (!a || a->version != RH_CUDA_API_VERSION || a->size != sizeof(rh_cuda_api)) {
        size_t n = strlen(why);
        snprintf(why + n, sizeof why - n, "%s%s: not this build's CUDA backend (rebuild it)", n ? "; " : "", path);
        dlclose(h);
        return 0;
    }
    atomic_store_explicit(&api, a, memory_order_release);   /* kept loaded for the life of the process */
    return 1;
}

static void load(void)
{
    const char *env = getenv("REHEARSE_CUDA_LIB");
    if (env && *env) {
        try_path(env);
        return;
    }
    char exe[PATH_MAX];
    if (rh_exe_dir(exe, sizeof exe)) {
        snprintf(why, sizeof why, "the CUDA backend library cannot be found: /proc/self/exe is unreadable");
        return;
    }
    static const char *const places[] = {"%s/" RH_CUDA_LIB, "%s/build/" RH_CUDA_LIB, "%s/../lib/rehearse/" RH_CUDA_LIB};
    for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
        char path[PATH_MAX + 64];
        int n = snprintf(path, sizeof path, places[i], exe);
        if (n < 0 || (size_t)n >= sizeof path) continue;   /* a path too long to be there */
        if (access(path, F_OK) == 0 && try_path(path)) return;
    }
    if (!why[0])
        snprintf(why, sizeof why,
                 "this build has no CUDA backend: " RH_CUDA_LIB " (built where nvcc is found) is not in %s, %s/build "
                 "or %s/../lib/rehearse, and REHEARSE_CUDA_LIB names no other place",
                 exe, exe, exe);
}

static const rh_cuda_api *backend(void)
{
    pthread_once(&once, load);
    return loaded();
}

static const char *absent(void)
{
    backend();
    return why[0] ? why : "the CUDA backend is not loaded";
}

const kern_table *kern_cuda(const char **w)
{
    const rh_cuda_api *a = backend();
    if (a) return a->kern_cuda(w);
    if (w) *w = absent();
    return NULL;
}

int cuda_device_count(void)
{
    const rh_cuda_api *a = backend();
    return a ? a->device_count() : 0;
}

const char *cuda_device_describe(int dev, char *buf, size_t n)
{
    const rh_cuda_api *a = backend();
    if (a) return a->device_describe(dev, buf, n);
    snprintf(buf, n, "no CUDA device %d: %s", dev, absent());
    return buf;
}

int cuda_use_device(int dev, rh_err *e)
{
    const rh_cuda_api *a = backend();
    return a ? a->use_device(dev, e) : rh_fail(e, "CUDA device %d: %s", dev, absent());
}

void cuda_thread_release(void)
{
    /* Only a loaded backend has threads to release; never load it for this. */
    const rh_cuda_api *a = loaded();
    if (a) a->thread_release();
}

int cuda_sync(rh_err *e)
{
    const rh_cuda_api *a = backend();
    return a ? a->sync(e) : rh_fail(e, "%s", absent());
}

const char *cuda_error(void)
{
    const rh_cuda_api *a = backend();
    return a ? a->error() : absent();
}

void cuda_clear_error(void)
{
    const rh_cuda_api *a = loaded();
    if (a) a->clear_error();
}

void cuda_force_attention(int path)
{
    const rh_cuda_api *a = backend();
    if (a) a->force_attention(path);
}

void cuda_force_gemm(int path)
{
    const rh_cuda_api *a = backend();
    if (a) a->force_gemm(path);
}

void cuda_set_variants(int gemv_loads, int decode_attention)
{
    const rh_cuda_api *a = backend();
    if (a) a->set_variants(gemv_loads, decode_attention);
}

void cuda_fill_uniform(void *dst, size_t n, kern_dtype dt, uint64_t seed, float lo, float hi)
{
    const rh_cuda_api *a = backend();
    if (a) a->fill_uniform(dst, n, dt, seed, lo, hi);
}

cuda_timer *cuda_timer_new(void)
{
    const rh_cuda_api *a = backend();
    return a ? a->timer_new() : NULL;
}

void cuda_timer_start(cuda_timer *t)
{
    const rh_cuda_api *a = loaded();
    if (a && t) a->timer_start(t);
}

double cuda_timer_stop(cuda_timer *t)
{
    const rh_cuda_api *a = loaded();
    return a && t ? a->timer_stop(t) : 0.0;
}

void cuda_timer_free(cuda_timer *t)
{
    const rh_cuda_api *a = loaded();
    if (a && t) a->timer_free(t);
}

double cuda_copy_bandwidth(size_t bytes, int iters)
{
    const rh_cuda_api *a = backend();
    return a ? a->copy_bandwidth(bytes, iters) : 0.0;
}

int cuda_ref_gemm_bf16(const void *x, const void *w, void *y, uint32_t m, uint32_t n, uint32_t k)
{
    const rh_cuda_api *a = backend();
    return a ? a->ref_gemm_bf16(x, w, y, m, n, k) : -1;
}

int cuda_comm_id(unsigned char id[128], const char *dist_init_addr, rh_err *e)
{
    const rh_cuda_api *a = backend();
    return a ? a->comm_id(id, dist_init_addr, e) : rh_fail(e, "tensor parallel: %s", absent());
}

cuda_comm *cuda_comm_new(const unsigned char id[128], uint32_t rank, uint32_t size, rh_err *e)
{
    const rh_cuda_api *a = backend();
    if (a) return a->comm_new(id, rank, size, e);
    rh_fail(e, "tensor parallel: %s", absent());
    return NULL;
}

const kern_comm *cuda_comm_kern(cuda_comm *c)
{
    const rh_cuda_api *a = loaded();
    return a && c ? a->comm_kern(c) : NULL;
}

void cuda_comm_free(cuda_comm *c)
{
    const rh_cuda_api *a = loaded();
    if (a && c) a->comm_free(c);
}

int cuda_allreduce_times(uint32_t n_gpus, const size_t *bytes, size_t n, int iters, double *seconds, rh_err *e)
{
    const rh_cuda_api *a = backend();
    return a ? a->allreduce_times(n_gpus, bytes, n, iters, seconds, e) : rh_fail(e, "all-reduce timings: %s", absent());
}
