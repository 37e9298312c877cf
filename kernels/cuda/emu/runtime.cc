/* runtime.cc — the emulator's CUDA runtime: devices, memory, streams,
 * events, graphs and launches, on the host (see include/cuda_runtime.h).
 *
 * Devices: REHEARSE_CUDA_EMU_DEVICES of them (default 1), each reporting
 * REHEARSE_CUDA_EMU_MEM_MB of memory (default 4096; allocations count
 * against it, so "out of memory" happens as on a GPU). Device memory is
 * malloc'd host memory, 256-byte aligned like cudaMalloc's.
 *
 * A stream runs each operation when it is issued, so a synchronize only
 * reports; while it is captured, operations are appended to the graph
 * instead, and a graph launch runs them in order. Events read the host's
 * monotonic clock. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime.h"

std::string rh_emu_run_grid(const char *name, dim3 grid, dim3 block, const std::function<void()> &body);

struct rh_emu_graph {
    std::vector<std::function<void()>> ops;
};
struct rh_emu_stream {
    rh_emu_graph *capture;
};
struct rh_emu_event {
    double t;
};

namespace {

thread_local cudaError_t last_error = cudaSuccess;
thread_local std::string launch_why;   /* the last failed launch's reason, for cudaGetErrorString */
thread_local cudaError_t launch_code = cudaSuccess;
rh_emu_stream default_stream = {nullptr};

std::mutex mem_lock;
size_t mem_used;
std::map<void *, size_t> allocations;
std::map<const void *, int> smem_allowed;   /* kernel -> its dynamic shared memory limit */

const size_t SMEM_DEFAULT = 48u << 10, SMEM_OPTIN = 232448;

int env_int(const char *name, int dflt, int lo, int hi)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        fprintf(stderr, "%s=%s: expected a whole number from %d to %d; using %d\n", name, v, lo, hi, dflt);
        return dflt;
    }
    return (int)x;
}

int device_count() { return env_int("REHEARSE_CUDA_EMU_DEVICES", 1, 0, 64); }
size_t device_memory() { return (size_t)env_int("REHEARSE_CUDA_EMU_MEM_MB", 4096, 16, 1 << 20) << 20; }

rh_emu_stream *stream_of(cudaStream_t s) { return s ? s : &default_stream; }

double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

}   // namespace

cudaError_t rh_emu::fail(cudaError_t e)
{
    if (e != cudaSuccess) last_error = e;
    return e;
}

bool rh_emu::capturing(cudaStream_t s) { return stream_of(s)->capture != nullptr; }

cudaError_t rh_emu::enqueue(cudaStream_t s, std::function<void()> op)
{
    rh_emu_stream *st = stream_of(s);
    if (st->capture) st->capture->ops.push_back(std::move(op));
    else op();
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e)
{
    if (e != cudaSuccess && e == launch_code) return launch_why.c_str();
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = device_count();
    return *n ? cudaSuccess : rh_emu::fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int dev)
{
    if (dev < 0 || dev >= device_count()) return rh_emu::fail(cudaErrorInvalidDevice);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
    if (dev < 0 || dev >= device_count()) return rh_emu::fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CUDA emulator on the CPU, device %d", dev);
    p->totalGlobalMem = device_memory();
    p->sharedMemPerBlock = SMEM_DEFAULT;
    p->sharedMemPerBlockOptin = SMEM_OPTIN;
    p->major = 9;   /* the sm_90 the kernels are written for */
    p->minor = 0;
    p->multiProcessorCount = 4;   /* few "SMs": the split logic still splits long contexts */
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int dev)
{
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return cudaErrorInvalidDevice;
    switch (a) {
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; return cudaSuccess;
    }
    return rh_emu::fail(cudaErrorInvalidValue);
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    std::lock_guard<std::mutex> g(mem_lock);
    *total_bytes = device_memory();
    *free_bytes = mem_used < *total_bytes ? *total_bytes - mem_used : 0;
    return cudaSuccess;
}

/* ---- memory ------------------------------------------------------------- */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = nullptr;
    size_t rounded = (bytes + 255) & ~(size_t)255;
    if (!rounded) rounded = 256;
    std::lock_guard<std::mutex> g(mem_lock);
    if (mem_used + rounded > device_memory()) return rh_emu::fail(cudaErrorMemoryAllocation);
    void *q = aligned_alloc(256, rounded);
    if (!q) return rh_emu::fail(cudaErrorMemoryAllocation);
    allocations[q] = rounded;
    mem_used += rounded;
    *p = q;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    std::lock_guard<std::mutex> g(mem_lock);
    auto it = allocations.find(p);
    if (it == allocations.end()) return rh_emu::fail(cudaErrorInvalidValue);
    mem_used -= it->second;
    allocations.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    (void)kind;
    if (rh_emu::capturing(nullptr)) return rh_emu::fail(cudaErrorStreamCaptureUnsupported);
    if (bytes) memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s)
{
    /* A device-to-host copy inside a capture would read at replay: CUDA takes
     * it, and so does this; a host-to-device one from pageable memory is
     * staged at once in CUDA, which replaying the recorded source matches
     * only if the caller keeps it, as CUDA requires of captured copies. */
    (void)kind;
    return rh_emu::enqueue(s, [dst, src, bytes]() {
        if (bytes) memmove(dst, src, bytes);
    });
}

cudaError_t cudaMemset(void *dst, int value, size_t bytes)
{
    if (rh_emu::capturing(nullptr)) return rh_emu::fail(cudaErrorStreamCaptureUnsupported);
    memset(dst, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s)
{
    return rh_emu::enqueue(s, [dst, value, bytes]() { memset(dst, value, bytes); });
}

/* ---- streams and graphs -------------------------------------------------- */

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    *s = new rh_emu_stream{nullptr};
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    return cudaStreamCreate(s);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s) return cudaSuccess;
    delete s->capture;
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (rh_emu::capturing(s)) return rh_emu::fail(cudaErrorStreamCaptureUnsupported);
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode)
{
    (void)mode;
    rh_emu_stream *st = stream_of(s);
    if (!s || st->capture) return rh_emu::fail(cudaErrorInvalidValue);   /* CUDA captures no legacy stream */
    st->capture = new rh_emu_graph;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    rh_emu_stream *st = stream_of(s);
    *g = nullptr;
    if (!st->capture) return rh_emu::fail(cudaErrorInvalidValue);
    *g = st->capture;
    st->capture = nullptr;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags)
{
    (void)flags;
    if (!g) return rh_emu::fail(cudaErrorInvalidValue);
    *x = new rh_emu_graph(*g);
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s)
{
    if (!x) return rh_emu::fail(cudaErrorInvalidValue);
    if (rh_emu::capturing(s)) return rh_emu::fail(cudaErrorStreamCaptureUnsupported);
    for (auto &op : x->ops) op();
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    delete x;
    return cudaSuccess;
}

/* ---- events -------------------------------------------------------------- */

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    *e = new rh_emu_event{0};
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!e) return rh_emu::fail(cudaErrorInvalidResourceHandle);
    return rh_emu::enqueue(s, [e]() { e->t = now_s(); });
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? cudaSuccess : rh_emu::fail(cudaErrorInvalidResourceHandle); }

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!a || !b) return rh_emu::fail(cudaErrorInvalidResourceHandle);
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}

/* ---- launches ------------------------------------------------------------ */

cudaError_t rh_emu_func_set_smem(const void *kernel, int bytes)
{
    if (bytes < 0 || (size_t)bytes > SMEM_OPTIN) return rh_emu::fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(mem_lock);
    smem_allowed[kernel] = bytes;
    return cudaSuccess;
}

void rh_emu::launch(const char *name, const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                    std::function<void()> body)
{
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (!threads || threads > 1024 || block.z > 64 || !grid.x || !grid.y || !grid.z || grid.y > 65535 ||
        grid.z > 65535) {
        launch_why = std::string(name) + ": invalid configuration argument (grid " + std::to_string(grid.x) + "x" +
                     std::to_string(grid.y) + "x" + std::to_string(grid.z) + ", " + std::to_string(threads) +
                     " threads a block)";
        launch_code = fail(cudaErrorInvalidConfiguration);
        return;
    }
    size_t limit = SMEM_DEFAULT;
    {
        std::lock_guard<std::mutex> g(mem_lock);
        auto it = smem_allowed.find(kernel);
        if (it != smem_allowed.end() && (size_t)it->second > limit) limit = (size_t)it->second;
    }
    if (smem > limit) {
        launch_why = std::string(name) + ": " + std::to_string(smem) + " bytes of dynamic shared memory, above its " +
                     std::to_string(limit) + "-byte limit";
        launch_code = fail(cudaErrorInvalidValue);
        return;
    }
    std::string nm = name;
    enqueue(s, [nm, grid, block, body]() {
        std::string why = rh_emu_run_grid(nm.c_str(), grid, block, body);
        if (!why.empty()) {
            launch_why = why;
            launch_code = fail(cudaErrorLaunchFailure);
        }
    });
}
