/* selftest.cu — the CUDA emulator (kernels/cuda/emu) checked against what
 * CUDA defines, with kernels written for nvcc: thread and block indices over
 * three dimensions, warp shuffles, __syncthreads, dynamic shared memory and
 * its limit, atomics across blocks, graph capture and replay, and the
 * launch failures a GPU reports or hangs on (a bad configuration, threads
 * held at two different barriers, a shuffle after lanes exited). Built and run by
 * `make test` with the emulator only. */
#include <CUnit/Basic.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include <vector>

/* out[global linear thread id] = a code of its indices. */
__global__ void indices_k(unsigned *out)
{
    unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    unsigned per = blockDim.x * blockDim.y * blockDim.z;
    out[block * per + t] = (blockIdx.x << 24) | (blockIdx.y << 20) | (blockIdx.z << 16) | (threadIdx.x << 8) |
                           (threadIdx.y << 4) | threadIdx.z;
}

/* Per warp: xor-reduction of lane ids, a broadcast from lane 5, a shift down. */
__global__ void shuffle_k(int *sum, int *bcast, int *down)
{
    int lane = threadIdx.x % 32, v = lane;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    sum[threadIdx.x] = v;
    bcast[threadIdx.x] = __shfl_sync(0xffffffffu, lane * 10, 5);
    down[threadIdx.x] = __shfl_down_sync(0xffffffffu, lane, 3);
}

/* Reverses the block's values through dynamic shared memory. */
__global__ void reverse_k(const float *in, float *out, unsigned n)
{
    extern __shared__ float buf[];
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) buf[i] = in[i];
    __syncthreads();
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
}

__global__ void count_k(unsigned *c) { atomicAdd(c, 1u); }

__global__ void add_k(float *x, float v) { x[threadIdx.x] += v; }

/* Lane 0 shuffles while the rest of its warp waits at __syncthreads: each
 * barrier waits for threads held at the other (a GPU hangs). */
__global__ void crossed_barriers_k(int *x)
{
    int v = threadIdx.x;
    if (threadIdx.x == 0) v = __shfl_xor_sync(0xffffffffu, v, 1);
    __syncthreads();
    x[threadIdx.x] = v;
}

/* Lanes 16..31 leave; the rest shuffle with a full mask. */
__global__ void exited_lanes_k(float *x)
{
    if (threadIdx.x >= 16) return;
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

static void test_indices(void)
{
    dim3 grid(3, 2, 2), block(4, 3, 2);
    size_t n = 3 * 2 * 2 * 4 * 3 * 2;
    unsigned *d;
    CU_ASSERT_EQUAL(cudaMalloc(&d, n * 4), cudaSuccess);
    indices_k<<<grid, block>>>(d);
    CU_ASSERT_EQUAL(cudaGetLastError(), cudaSuccess);
    std::vector<unsigned> h(n);
    cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost);
    size_t at = 0;
    int ok = 1;
    for (unsigned bz = 0; bz < 2; bz++)
        for (unsigned by = 0; by < 2; by++)
            for (unsigned bx = 0; bx < 3; bx++)
                for (unsigned tz = 0; tz < 2; tz++)
                    for (unsigned ty = 0; ty < 3; ty++)
                        for (unsigned tx = 0; tx < 4; tx++)
                            ok &= h[at++] == ((bx << 24) | (by << 20) | (bz << 16) | (tx << 8) | (ty << 4) | tz);
    CU_ASSERT(ok);
    cudaFree(d);
}

static void test_shuffles(void)
{
    int *s, *b, *dn;
    cudaMalloc(&s, 64 * 4), cudaMalloc(&b, 64 * 4), cudaMalloc(&dn, 64 * 4);
    shuffle_k<<<1, 64>>>(s, b, dn);
    int hs[64], hb[64], hd[64];
    cudaMemcpy(hs, s, sizeof hs, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb, b, sizeof hb, cudaMemcpyDeviceToHost);
    cudaMemcpy(hd, dn, sizeof hd, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 64; i++) {
        int lane = i % 32;
        CU_ASSERT_EQUAL(hs[i], 496);   /* 0 + 1 + ... + 31 in every lane */
        CU_ASSERT_EQUAL(hb[i], 50);
        CU_ASSERT_EQUAL(hd[i], lane + 3 < 32 ? lane + 3 : lane);   /* past the end: its own value */
    }
    CU_ASSERT_EQUAL(cudaGetLastError(), cudaSuccess);
    cudaFree(s), cudaFree(b), cudaFree(dn);
}

static void test_shared_memory_and_limit(void)
{
    const unsigned n = 20000;   /* 80 KB: above the default 48 KB */
    std::vector<float> h(n), back(n);
    for (unsigned i = 0; i < n; i++) h[i] = (float)i;
    float *in, *out;
    cudaMalloc(&in, n * 4), cudaMalloc(&out, n * 4);
    cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice);
    reverse_k<<<1, 256, n * 4>>>(in, out, n);
    cudaError_t e = cudaGetLastError();
    CU_ASSERT_EQUAL(e, cudaErrorInvalidValue);   /* as CUDA: the attribute first */
    CU_ASSERT(strstr(cudaGetErrorString(e), "reverse_k") != NULL);
    CU_ASSERT_EQUAL(cudaFuncSetAttribute(reverse_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(n * 4)),
                    cudaSuccess);
    reverse_k<<<1, 256, n * 4>>>(in, out, n);
    CU_ASSERT_EQUAL(cudaGetLastError(), cudaSuccess);
    cudaMemcpy(back.data(), out, n * 4, cudaMemcpyDeviceToHost);
    int ok = 1;
    for (unsigned i = 0; i < n; i++) ok &= back[i] == (float)(n - 1 - i);
    CU_ASSERT(ok);
    cudaFree(in), cudaFree(out);
}

static void test_atomics_across_blocks(void)
{
    unsigned *c, h = 0;
    cudaMalloc(&c, 4);
    cudaMemset(c, 0, 4);
    count_k<<<500, 96>>>(c);   /* blocks run on several host threads */
    cudaMemcpy(&h, c, 4, cudaMemcpyDeviceToHost);
    CU_ASSERT_EQUAL(h, 500u * 96u);
    cudaFree(c);
}

static void test_graphs(void)
{
    cudaStream_t s;
    cudaStreamCreate(&s);
    float *x, h[8];
    cudaMalloc(&x, sizeof h);
    cudaMemsetAsync(x, 0, sizeof h, s);
    CU_ASSERT_EQUAL(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    add_k<<<1, 8, 0, s>>>(x, 1.5f);
    add_k<<<1, 8, 0, s>>>(x, 0.5f);
    /* Waiting for a stream that is being captured is an error, as in CUDA. */
    CU_ASSERT_EQUAL(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();
    cudaGraph_t g;
    cudaGraphExec_t ex;
    CU_ASSERT_EQUAL(cudaStreamEndCapture(s, &g), cudaSuccess);
    cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
    CU_ASSERT_EQUAL(h[3], 0.f);   /* captured, not run */
    CU_ASSERT_EQUAL(cudaGraphInstantiate(&ex, g, 0), cudaSuccess);
    cudaGraphDestroy(g);
    for (int i = 0; i < 3; i++) cudaGraphLaunch(ex, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
    CU_ASSERT_EQUAL(h[7], 6.f);
    cudaGraphExecDestroy(ex);
    cudaFree(x);
    cudaStreamDestroy(s);
}

static void test_launch_failures(void)
{
    int *x;
    cudaMalloc(&x, 64 * 4);
    add_k<<<1, 2048>>>((float *)x, 1.f);   /* more threads than a block may have */
    CU_ASSERT_EQUAL(cudaGetLastError(), cudaErrorInvalidConfiguration);

    crossed_barriers_k<<<2, 64>>>(x);
    cudaError_t e = cudaGetLastError();
    CU_ASSERT_EQUAL(e, cudaErrorLaunchFailure);
    const char *msg = cudaGetErrorString(e);
    printf("\n  %s\n", msg);
    CU_ASSERT(strstr(msg, "crossed_barriers_k, block (0,0,0)") != NULL);
    CU_ASSERT(strstr(msg, "cannot open") != NULL);

    exited_lanes_k<<<1, 32>>>((float *)x);
    e = cudaGetLastError();
    CU_ASSERT_EQUAL(e, cudaErrorLaunchFailure);
    msg = cudaGetErrorString(e);
    printf("  %s\n", msg);
    CU_ASSERT(strstr(msg, "lanes exited") != NULL);

    /* The emulator goes on after a failed launch. */
    indices_k<<<1, 32>>>((unsigned *)x);
    CU_ASSERT_EQUAL(cudaGetLastError(), cudaSuccess);
    cudaFree(x);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 2;
    CU_pSuite s = CU_add_suite("cuda emulator", NULL, NULL);
    CU_add_test(s, "thread and block indices in three dimensions", test_indices);
    CU_add_test(s, "warp shuffles: xor, broadcast, down", test_shuffles);
    CU_add_test(s, "dynamic shared memory and its 48 KB default limit", test_shared_memory_and_limit);
    CU_add_test(s, "atomics across blocks on several host threads", test_atomics_across_blocks);
    CU_add_test(s, "graph capture records, replay runs", test_graphs);
    CU_add_test(s, "launch failures reported, not hung", test_launch_failures);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned fails = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
