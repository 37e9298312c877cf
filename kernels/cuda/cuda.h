/* cuda.h — the CUDA backend's API beside its dispatch table.
 *
 * kern_cuda() (kernels/kernels.h) is the backend the forward pass uses:
 * bf16 weights and KV, f32 activations, cuBLAS for GEMMs with more than a
 * few rows, own kernels for the rest, sampling on host logits (the CPU's
 * sampler). This header adds what tests, benchmarks, calibration and tensor
 * parallel need around it:
 *   - the calling thread's device and its stream (every kernel of a thread
 *     runs in order on that one stream), and the first CUDA error seen;
 *   - knobs that force one attention or GEMM path, so tests can compare two
 *     paths on the same input;
 *   - timing on the stream, a measured copy bandwidth and a plain cuBLAS
 *     bf16 GEMM to hold ours against;
 *   - NCCL communicators (loaded at run time: a machine without NCCL still
 *     runs one GPU) and all-reduce timings over message sizes.
 * These are built into librehearse_cuda.so; the binary's kernels/cuda/
 * loader.c forwards each call to it, loading it on first use (api.h). Where
 * it is absent (no nvcc at build time) or cannot load, every call fails or
 * returns 0, and kern_cuda() says why. Nothing here needs a GPU to link. */
#ifndef RH_KERNELS_CUDA_H
#define RH_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPUs this process can use; 0 without CUDA, a driver or a device. */
int cuda_device_count(void);
/* "NVIDIA H200 (sm_90, 132 SMs, 140.4 GB)" into buf; buf. */
const char *cuda_device_describe(int dev, char *buf, size_t n);
/* Binds the calling thread to a device; call before its first kernel.
 * -1 with a message when the device does not exist or the thread is bound
 * to another one already. */
int cuda_use_device(int dev, rh_err *e);
/* Releases the calling thread's stream and handles (a worker thread's last call). */
void cuda_thread_release(void);
/* Waits for the thread's stream; -1 with the first CUDA error recorded. */
int cuda_sync(rh_err *e);
/* The first CUDA error this thread recorded (kernels never fail; they
 * record), or NULL. cuda_clear_error forgets it. */
const char *cuda_error(void);
void cuda_clear_error(void);

/* Test and benchmark knobs for the calling thread: 0 chooses by shape. */
enum { CUDA_ATTN_AUTO = 0, CUDA_ATTN_DECODE = 1, CUDA_ATTN_PREFILL = 2 };
enum { CUDA_GEMM_AUTO = 0, CUDA_GEMM_GEMV = 1, CUDA_GEMM_CUBLAS = 2 };
void cuda_force_attention(int path);
void cuda_force_gemm(int path);
/* Kernel variants, for benchmarks to time side by side and tests to check
 * alike (0 keeps the default): loads in flight per lane in the decode GEMV
 * (4, 8 or 16), and whether decode attention issues the next round's K/V
 * loads before computing the current one (1) or after (2). */
enum { CUDA_DECODE_PIPELINED = 1, CUDA_DECODE_IN_TURN = 2 };
void cuda_set_variants(int gemv_loads, int decode_attention);

/* Fills n elements of backend memory with uniform values in [lo, hi), from
 * a counter-based stream (same seed, same values), without a host copy. */
void cuda_fill_uniform(void *dst, size_t n, kern_dtype dt, uint64_t seed, float lo, float hi);

/* Seconds between two points of the thread's stream. */
typedef struct cuda_timer cuda_timer;
cuda_timer *cuda_timer_new(void);
void cuda_timer_start(cuda_timer *t);
double cuda_timer_stop(cuda_timer *t);   /* waits for the stream */
void cuda_timer_free(cuda_timer *t);

/* Device-to-device copy bandwidth in bytes/s, counting bytes read plus
 * written (median of iters copies of `bytes`); 0 on failure. */
double cuda_copy_bandwidth(size_t bytes, int iters);
/* y = x W^T with every operand bf16 (plain cuBLAS, f32 accumulate): the
 * reference our GEMM path is measured against. 0, or -1 on a cuBLAS error. */
int cuda_ref_gemm_bf16(const void *x, const void *w, void *y, uint32_t m, uint32_t n, uint32_t k);

/* ---- NCCL ------------------------------------------------------------- */

/* A group's id (128 opaque bytes). Rank 0 makes it and hands it to the
 * others; with dist_init_addr ("host:port", as --dist-init-addr) every node
 * makes the same id and NCCL's own bootstrap meets at that address, rank 0
 * listening there. */
int cuda_comm_id(unsigned char id[128], const char *dist_init_addr, rh_err *e);
typedef struct cuda_comm cuda_comm;
/* Joins the group on the calling thread's device. Every rank calls it at
 * the same time (it blocks until all have). */
cuda_comm *cuda_comm_new(const unsigned char id[128], uint32_t rank, uint32_t size, rh_err *e);
/* The communicator as the runner takes it (runner_new_tp). */
const kern_comm *cuda_comm_kern(cuda_comm *c);
void cuda_comm_free(cuda_comm *c);
/* rank = node_rank * gpus_per_node + local GPU, size = nnodes * gpus_per_node:
 * SGLang's --nnodes / --node-rank layout. -1 when the numbers do not fit. */
int cuda_tp_rank(uint32_t nnodes, uint32_t node_rank, uint32_t gpus_per_node, uint32_t local, uint32_t *rank,
                 uint32_t *size, rh_err *e);

/* For calibration: the median time of one f32 sum all-reduce of each of
 * bytes[0..n) over n_gpus local GPUs (one thread each; 1 GPU: a group of
 * one), iters timed runs after warm-up. seconds[i] per size. */
int cuda_allreduce_times(uint32_t n_gpus, const size_t *bytes, size_t n, int iters, double *seconds, rh_err *e);

#ifdef __cplusplus
}
#endif

#endif
