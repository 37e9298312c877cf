/* comm.cu — NCCL communicators for tensor parallel, and all-reduce timings.
 *
 * NCCL is loaded with dlopen on first use rather than linked: the library is
 * large and often installed apart from the CUDA toolkit (a Python wheel, a
 * cluster module), and one GPU never needs it, so a machine without it
 * still runs the single-GPU backend and only tensor parallel says why it
 * cannot start. REHEARSE_NCCL names the library file when it is not on the
 * loader's path.
 *
 * Collectives run on the calling thread's stream, in the order the ranks
 * call them (kern_comm's contract), so they queue behind the kernels that
 * produced their input like any other kernel. */
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/internal.h"

/* The entry points we use, with the header's own types. */
static struct {
    int tried, ok;
    char why[300];
    decltype(&ncclGetUniqueId) get_unique_id;
    decltype(&ncclCommInitRank) comm_init_rank;
    decltype(&ncclCommDestroy) comm_destroy;
    decltype(&ncclAllReduce) all_reduce;
    decltype(&ncclBroadcast) broadcast;
    decltype(&ncclGetErrorString) error_string;
} nccl;

static pthread_mutex_t nccl_lock = PTHREAD_MUTEX_INITIALIZER;

static int nccl_load(rh_err *e)
{
    pthread_mutex_lock(&nccl_lock);
    if (!nccl.tried) {
        nccl.tried = 1;
#ifdef RH_NCCL_BUILTIN
        /* The emulator's in-process NCCL (kernels/cuda/emu/nccl.cc). */
        nccl = {1, 1, "", ncclGetUniqueId, ncclCommInitRank, ncclCommDestroy, ncclAllReduce, ncclBroadcast,
                ncclGetErrorString};
#else
        const char *name = getenv("REHEARSE_NCCL");
        void *h = dlopen(name && *name ? name : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(nccl.why, sizeof nccl.why, "NCCL cannot be loaded (%s); set REHEARSE_NCCL to libnccl.so.2's path",
                     dlerror());
        } else {
#define SYM(field, symbol) (nccl.field = (decltype(nccl.field))dlsym(h, symbol))
            if (SYM(get_unique_id, "ncclGetUniqueId") && SYM(comm_init_rank, "ncclCommInitRank") &&
                SYM(comm_destroy, "ncclCommDestroy") && SYM(all_reduce, "ncclAllReduce") &&
                SYM(broadcast, "ncclBroadcast") && SYM(error_string, "ncclGetErrorString"))
                nccl.ok = 1;
            else
                snprintf(nccl.why, sizeof nccl.why, "NCCL was loaded but lacks its entry points: %s", dlerror());
#undef SYM
        }
#endif
    }
    int ok = nccl.ok;
    pthread_mutex_unlock(&nccl_lock);
    return ok ? 0 : rh_fail(e, "%s", nccl.why);
}

struct cuda_comm {
    ncclComm_t comm;
    kern_comm k;
};

static void record_nccl(ncclResult_t rc, const char *what)
{
    if (rc != ncclSuccess) cx_record(what, nccl.error_string(rc));
}

static void comm_all_reduce(void *ctx, float *x, size_t n)
{
    cuda_comm *c = (cuda_comm *)ctx;
    cuda_ctx *t = cx();
    if (t && n) record_nccl(nccl.all_reduce(x, x, n, ncclFloat, ncclSum, c->comm, t->stream), "ncclAllReduce");
}

static void comm_broadcast(void *ctx, void *buf, size_t bytes)
{
    cuda_comm *c = (cuda_comm *)ctx;
    cuda_ctx *t = cx();
    if (t && bytes) record_nccl(nccl.broadcast(buf, buf, bytes, ncclChar, 0, c->comm, t->stream), "ncclBroadcast");
}

extern "C" int cuda_comm_id(unsigned char id[128], const char *dist_init_addr, rh_err *e)
{
    if (nccl_load(e)) return -1;
    if (dist_init_addr && *dist_init_addr) {
        /* NCCL's bootstrap: with NCCL_COMM_ID every rank derives the same id
         * from the address and rank 0 listens there. */
        if (!strchr(dist_init_addr, ':'))
            return rh_fail(e, "--dist-init-addr '%s': expected host:port", dist_init_addr);
        setenv("NCCL_COMM_ID", dist_init_addr, 1);
    }
    ncclUniqueId u;
    ncclResult_t rc = nccl.get_unique_id(&u);
    if (rc != ncclSuccess) return rh_fail(e, "ncclGetUniqueId: %s", nccl.error_string(rc));
    static_assert(sizeof u == 128, "NCCL's unique id is 128 bytes");
    memcpy(id, &u, sizeof u);
    return 0;
}

extern "C" cuda_comm *cuda_comm_new(const unsigned char id[128], uint32_t rank, uint32_t size, rh_err *e)
{
    if (nccl_load(e)) return NULL;
    if (!size || rank >= size) return rh_fail(e, "tensor parallel: rank %u of a group of %u", rank, size), (cuda_comm *)NULL;
    if (!cx()) return rh_fail(e, "CUDA: %s", cuda_error() ? cuda_error() : "no device"), (cuda_comm *)NULL;
    cuda_comm *c = (cuda_comm *)calloc(1, sizeof *c);
    if (!c) return rh_fail(e, "out of memory"), (cuda_comm *)NULL;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclResult_t rc = nccl.comm_init_rank(&c->comm, (int)size, u, (int)rank);
    if (rc != ncclSuccess) {
        free(c);
        return rh_fail(e, "ncclCommInitRank (rank %u of %u): %s", rank, size, nccl.error_string(rc)), (cuda_comm *)NULL;
    }
    c->k = kern_comm{rank, size, c, comm_all_reduce, comm_broadcast};
    return c;
}

extern "C" const kern_comm *cuda_comm_kern(cuda_comm *c)
{
    return &c->k;
}

extern "C" void cuda_comm_free(cuda_comm *c)
{
    if (!c) return;
    cuda_ctx *t = cx();
    if (t) cudaStreamSynchronize(t->stream);
    nccl.comm_destroy(c->comm);
    free(c);
}

/* ---- all-reduce timings ------------------------------------------------- */

struct ar_job {
    const unsigned char *id;
    uint32_t rank, size;
    const size_t *bytes;
    size_t n;
    int iters;
    double *seconds;   /* rank 0 writes */
    rh_err err;
    int rc;
};

static void *ar_rank(void *arg)
{
    ar_job *j = (ar_job *)arg;
    j->rc = -1;
    cuda_comm *c = NULL;
    float *buf = NULL;
    cuda_timer *t = NULL;
    size_t most = 0;
    for (size_t i = 0; i < j->n; i++) most = std::max(most, j->bytes[i]);
    if (cuda_use_device((int)j->rank, &j->err) || !(c = cuda_comm_new(j->id, j->rank, j->size, &j->err))) goto out;
    if (cudaMalloc(&buf, most ? most : 4) != cudaSuccess) {
        rh_fail(&j->err, "cudaMalloc of %zu bytes for the all-reduce failed", most);
        goto out;
    }
    cuda_fill_uniform(buf, (most ? most : 4) / 4, KERN_F32, 1, -1.f, 1.f);
    t = cuda_timer_new();
    for (size_t i = 0; i < j->n; i++) {
        size_t count = j->bytes[i] / 4;
        std::vector<double> times;
        for (int w = 0; w < 3; w++) c->k.all_reduce(c, buf, count);   /* warm-up: NCCL sets up channels lazily */
        for (int it = 0; it < j->iters; it++) {
            cuda_timer_start(t);
            c->k.all_reduce(c, buf, count);
            times.push_back(cuda_timer_stop(t));
        }
        std::sort(times.begin(), times.end());
        if (j->rank == 0) j->seconds[i] = times.empty() ? 0 : times[times.size() / 2];
    }
    j->rc = cuda_sync(&j->err);
out:
    cuda_timer_free(t);
    if (buf) cudaFree(buf);
    cuda_comm_free(c);
    cuda_thread_release();
    return NULL;
}

extern "C" int cuda_allreduce_times(uint32_t n_gpus, const size_t *bytes, size_t n, int iters, double *seconds,
                                    rh_err *e)
{
    int have = cuda_device_count();
    if (!n_gpus || (int)n_gpus > have) return rh_fail(e, "all-reduce over %u GPUs: %d found", n_gpus, have);
    if (iters < 1) iters = 1;
    unsigned char id[128];
    if (cuda_comm_id(id, NULL, e)) return -1;
    std::vector<ar_job> jobs(n_gpus);
    std::vector<pthread_t> th(n_gpus);
    for (uint32_t r = 0; r < n_gpus; r++) {
        jobs[r] = ar_job{id, r, n_gpus, bytes, n, iters, seconds, rh_err{}, -1};
        if (pthread_create(&th[r], NULL, ar_rank, &jobs[r])) return rh_fail(e, "cannot start a thread per GPU");
    }
    for (uint32_t r = 0; r < n_gpus; r++) pthread_join(th[r], NULL);
    for (uint32_t r = 0; r < n_gpus; r++)
        if (jobs[r].rc) return rh_fail(e, "all-reduce, rank %u: %s", r, jobs[r].err.msg);
    return 0;
}
