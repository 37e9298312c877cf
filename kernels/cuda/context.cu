/* context.cu — the CUDA backend's dispatch table, the per-thread context
 * behind it (device, stream, cuBLAS handle, scratch), memory, copies, error
 * recording and graph recording.
 *
 * Memory entries run on the thread's stream like the kernels, so a copy_in
 * followed by a kernel needs no synchronization; copy_out waits for the
 * stream, because the caller reads the host buffer right after. */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/internal.h"

#ifndef RH_CUDA_ARCH
#define RH_CUDA_ARCH 90
#endif

/* The device a thread asked for before its context exists (-1: device 0). */
static thread_local int want_device = -1;
static thread_local cuda_ctx ctx;

void cx_record(const char *what, const char *msg)
{
    if (!ctx.err[0]) snprintf(ctx.err, sizeof ctx.err, "%s: %s", what, msg);
}

int cx_ok(cudaError_t rc, const char *what)
{
    if (rc == cudaSuccess) return 0;
    cx_record(what, cudaGetErrorString(rc));
    return -1;
}

int cx_blas_ok(cublasStatus_t rc, const char *what)
{
    if (rc == CUBLAS_STATUS_SUCCESS) return 0;
    cx_record(what, cublasGetStatusString(rc));
    return -1;
}

cuda_ctx *cx(void)
{
    if (ctx.ready) return &ctx;
    if (ctx.failed) return NULL;
    ctx.failed = 1;   /* until every step below succeeded */
    ctx.device = want_device < 0 ? 0 : want_device;
    cudaDeviceProp p;
    if (cx_ok(cudaSetDevice(ctx.device), "cudaSetDevice") ||
        cx_ok(cudaGetDeviceProperties(&p, ctx.device), "cudaGetDeviceProperties") ||
        cx_ok(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking), "cudaStreamCreate"))
        return NULL;
    ctx.sms = p.multiProcessorCount;
    ctx.smem_optin = p.sharedMemPerBlockOptin;
    const size_t ws = 32u << 20;
    if (cx_blas_ok(cublasCreate(&ctx.blas), "cublasCreate") ||
        cx_blas_ok(cublasSetStream(ctx.blas, ctx.stream), "cublasSetStream") ||
        cx_ok(cudaMalloc(&ctx.blas_ws, ws), "cudaMalloc (cuBLAS workspace)") ||
        cx_blas_ok(cublasSetWorkspace(ctx.blas, ctx.blas_ws, ws), "cublasSetWorkspace"))
        return NULL;
    ctx.failed = 0;
    ctx.ready = 1;
    cu_attention_init(&ctx);
    return &ctx;
}

void *cx_scratch(cuda_ctx *c, int which, size_t bytes)
{
    if (bytes <= c->scratch_cap[which]) return c->scratch[which];
    size_t cap = c->scratch_cap[which] ? c->scratch_cap[which] : 4096;
    while (cap < bytes) cap *= 2;
    /* The old buffer may still be read by queued kernels: wait for them. */
    if (c->scratch[which]) {
        cx_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
        cudaFree(c->scratch[which]);
    }
    c->scratch[which] = NULL;
    c->scratch_cap[which] = 0;
    if (cx_ok(cudaMalloc(&c->scratch[which], cap), "cudaMalloc (scratch)")) return NULL;
    c->scratch_cap[which] = cap;
    return c->scratch[which];
}

/* ---- the C API ---------------------------------------------------------- */

extern "C" int cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();   /* not sticky: leave no trace for later calls */
        return 0;
    }
    return n;
}

extern "C" const char *cuda_device_describe(int dev, char *buf, size_t n)
{
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        cudaGetLastError();
        snprintf(buf, n, "no CUDA device %d", dev);
        return buf;
    }
    snprintf(buf, n, "%s (sm_%d%d, %d SMs, %.1f GB)", p.name, p.major, p.minor, p.multiProcessorCount,
             (double)p.totalGlobalMem / 1e9);
    return buf;
}

extern "C" int cuda_use_device(int dev, rh_err *e)
{
    int n = cuda_device_count();
    if (dev < 0 || dev >= n) return rh_fail(e, "CUDA device %d does not exist (%d found)", dev, n);
    if (ctx.ready && ctx.device != dev)
        return rh_fail(e, "this thread already runs on CUDA device %d, not %d", ctx.device, dev);
    want_device = dev;
    return 0;
}

extern "C" void cuda_thread_release(void)
{
    if (!ctx.ready) return;
    cudaStreamSynchronize(ctx.stream);
    for (int i = 0; i < 4; i++)
        if (ctx.scratch[i]) cudaFree(ctx.scratch[i]);
    cublasDestroy(ctx.blas);
    cudaFree(ctx.blas_ws);
    cudaStreamDestroy(ctx.stream);
    memset(&ctx, 0, sizeof ctx);
    want_device = -1;
}

extern "C" int cuda_sync(rh_err *e)
{
    cuda_ctx *c = cx();
    if (c) cx_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    if (ctx.err[0]) return rh_fail(e, "CUDA: %s", ctx.err);
    return 0;
}

extern "C" const char *cuda_error(void)
{
    return ctx.err[0] ? ctx.err : NULL;
}

extern "C" void cuda_clear_error(void)
{
    ctx.err[0] = 0;
}

extern "C" void cuda_force_attention(int path)
{
    ctx.force_attn = path;
}

extern "C" void cuda_force_gemm(int path)
{
    ctx.force_gemm = path;
}

extern "C" void cuda_set_variants(int gemv_loads, int decode_attention)
{
    ctx.gemv_loads = gemv_loads == 8 || gemv_loads == 16 ? gemv_loads : 0;
    ctx.decode_attn = decode_attention == CUDA_DECODE_IN_TURN ? CUDA_DECODE_IN_TURN : 0;
}

/* ---- memory ------------------------------------------------------------- */

static void *cu_alloc(size_t bytes)
{
    cuda_ctx *c = cx();
    void *p = NULL;
    if (!c) return NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();   /* out of memory is an answer, not an error of the stream */
        return NULL;
    }
    if (cx_ok(cudaMemsetAsync(p, 0, bytes, c->stream), "cudaMemset")) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cu_free(void *p)
{
    cuda_ctx *c = cx();
    if (c) cx_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    cudaFree(p);
}

static void cu_copy_in(void *dst, const void *src, size_t bytes)
{
    cuda_ctx *c = cx();
    /* From pageable memory the copy is staged before this returns, so the
     * caller may reuse src at once. */
    if (c && bytes) cx_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), "copy to device");
}

static void cu_copy_out(void *dst, const void *src, size_t bytes)
{
    cuda_ctx *c = cx();
    if (!c || !bytes) return;
    cx_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "copy to host");
    cx_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
}

static unsigned long long cu_mem_available(void)
{
    size_t fr = 0, total = 0;
    if (!cx() || cudaMemGetInfo(&fr, &total) != cudaSuccess) return 0;
    return fr;
}

/* ---- graphs ------------------------------------------------------------- */

static int cu_graph_begin(void)
{
    cuda_ctx *c = cx();
    if (!c) return -1;
    return cx_ok(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

static void *cu_graph_end(void)
{
    cuda_ctx *c = cx();
    if (!c) return NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    if (cx_ok(cudaStreamEndCapture(c->stream, &g), "cudaStreamEndCapture") || !g) return NULL;
    cudaError_t rc = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (cx_ok(rc, "cudaGraphInstantiate")) return NULL;
    return x;
}

static int cu_graph_launch(void *g)
{
    cuda_ctx *c = cx();
    if (!c) return -1;
    return cx_ok(cudaGraphLaunch((cudaGraphExec_t)g, c->stream), "cudaGraphLaunch");
}

static void cu_graph_free(void *g)
{
    if (g) cudaGraphExecDestroy((cudaGraphExec_t)g);
}

/* ---- the table ---------------------------------------------------------- */

static const kern_table table = {
    .name = "cuda",
    .host_memory = 0,
    .weight_dtype = KERN_BF16,
    .kv_dtype = KERN_BF16,
    .mem_available = cu_mem_available,
    .check_shape = cu_check_shape,
    .plan = cu_plan,
    .alloc = cu_alloc,
    .free = cu_free,
    .copy_in = cu_copy_in,
    .copy_out = cu_copy_out,
    .gemm = cu_gemm,
    .gemm_group = cu_gemm_group,
    .embedding = cu_embedding,
    .rmsnorm = cu_rmsnorm,
    .rope_angles = cu_rope_angles,
    .rope = cu_rope,
    .silu_mul = cu_silu_mul,
    .kv_write = cu_kv_write,
    .attention = cu_attention,
    .lm_head = cu_lm_head,
    /* Logits come back to the host anyway (runner.h), and the CPU sampler's
     * draws are the reference the tests hold every backend to. */
    .sample = cpu_sample,
    .graph_begin = cu_graph_begin,
    .graph_end = cu_graph_end,
    .graph_launch = cu_graph_launch,
    .graph_free = cu_graph_free,
};

extern "C" const kern_table *kern_cuda(const char **why)
{
    static char reason[384];
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess || n == 0) {
        cudaGetLastError();
        snprintf(reason, sizeof reason, "no CUDA device (%s)",
                 rc != cudaSuccess ? cudaGetErrorString(rc) : "the driver lists none");
        if (why) *why = reason;
        return NULL;
    }
    int dev = want_device < 0 ? 0 : want_device, major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (major * 10 + minor < RH_CUDA_ARCH) {
        snprintf(reason, sizeof reason, "CUDA device %d is sm_%d%d but this build targets sm_%d (make CUDA_ARCH=%d%d)",
                 dev, major, minor, RH_CUDA_ARCH, major, minor);
        if (why) *why = reason;
        return NULL;
    }
    if (!cx()) {
        snprintf(reason, sizeof reason, "CUDA device %d cannot be used: %s", dev, ctx.err);
        if (why) *why = reason;
        return NULL;
    }
    if (why) *why = NULL;
    return &table;
}
