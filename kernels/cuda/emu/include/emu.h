/* emu.h — the CUDA emulator's kernel side: what a .cu file of kernels/cuda
 * sees in place of the CUDA toolkit when it is built for the CPU (make's
 * emulator build, -I kernels/cuda/emu/include).
 *
 * The emulator runs the real kernel source on the host so that CI, which
 * has no GPU, tests it: every CUDA thread of a block is a fiber on the
 * launching host thread, run until it finishes or waits at a barrier
 * (__syncthreads, __syncwarp, a warp shuffle); a barrier opens when every
 * live thread of its block (or lanes of its warp) has reached it, and
 * threads waiting at barriers that can never open are reported as a launch
 * failure, as a hung GPU would be (without hanging). A block runs on one
 * host thread, the blocks of a grid on a pool of them, so __shared__
 * memory is per host thread. Device memory is host memory, so
 * AddressSanitizer checks every kernel access in a SAN=1 build. Streams run
 * their work when it is issued; graph capture records it and a graph launch
 * replays it. What is not emulated: timing (events measure the host), and
 * races between the threads of a block, which take turns in a fixed order.
 *
 * Two source forms nvcc takes and a C++ compiler does not are rewritten by
 * the build (Makefile, $(BUILD)/emu/%.cc): `k<<<grid, block, smem, stream>>>(args)`
 * becomes `rh_emu_launch("k", k, grid, block, smem, stream)(args)`, and `extern
 * __shared__ T name[];` becomes a pointer to the block's dynamic shared
 * memory. */
#ifndef RH_CUDA_EMU_H
#define RH_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define RH_CUDA_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* One block at a time per host thread: a block's shared memory is the host thread's. */
#define __shared__ static thread_local

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

typedef struct rh_emu_stream *cudaStream_t;

namespace rh_emu {

struct fiber;
/* The running thread of the block being run on this host thread. */
extern thread_local fiber *cur;
extern thread_local uint3 block_idx;
extern thread_local dim3 block_dim, grid_dim;
const uint3 &thread_idx();
void *dyn_smem();
void sync_block();
void sync_warp(unsigned mask);
/* Swaps 64-bit values within the warp: returns lane `src`'s value. */
uint64_t exchange(uint64_t mine, unsigned src_lane, unsigned mask);
unsigned lane_id();

/* Runs body once per thread of every block of grid on stream s (or records it
 * when s is being captured). name is the kernel's, for errors; its address
 * finds its shared-memory attribute. */
void launch(const char *name, const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s, std::function<void()> body);

template <class... P> struct launcher {
    const char *name;
    void (*k)(P...);
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    template <class... A> void operator()(A &&...a) const
    {
        /* Arguments convert to the kernel's parameter types here, as nvcc does. */
        std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
        auto fn = k;
        launch(name, reinterpret_cast<const void *>(k), grid, block, smem, stream, [fn, args]() { std::apply(fn, args); });
    }
};

template <class T> static inline uint64_t to_bits(T v)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a 1-8 byte value");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <class T> static inline T from_bits(uint64_t b)
{
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}

}   // namespace rh_emu

template <class... P>
static inline rh_emu::launcher<P...> rh_emu_launch(const char *name, void (*k)(P...), dim3 grid, dim3 block, size_t smem = 0,
                                                    cudaStream_t s = nullptr)
{
    return rh_emu::launcher<P...>{name, k, grid, block, smem, s};
}

#define threadIdx (rh_emu::thread_idx())
#define blockIdx (rh_emu::block_idx)
#define blockDim (rh_emu::block_dim)
#define gridDim (rh_emu::grid_dim)

static inline void __syncthreads() { rh_emu::sync_block(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { rh_emu::sync_warp(mask); }

template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    unsigned lane = rh_emu::lane_id(), base = lane & ~(unsigned)(width - 1);
    return rh_emu::from_bits<T>(rh_emu::exchange(rh_emu::to_bits(v), base + ((unsigned)src & (width - 1)), mask));
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    unsigned lane = rh_emu::lane_id(), src = lane ^ (unsigned)lane_mask;
    if ((src & ~(unsigned)(width - 1)) != (lane & ~(unsigned)(width - 1))) src = lane;
    return rh_emu::from_bits<T>(rh_emu::exchange(rh_emu::to_bits(v), src, mask));
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    unsigned lane = rh_emu::lane_id(), src = lane + delta;
    if ((src & ~(unsigned)(width - 1)) != (lane & ~(unsigned)(width - 1))) src = lane;
    return rh_emu::from_bits<T>(rh_emu::exchange(rh_emu::to_bits(v), src, mask));
}

/* Loads through the read-only or streaming caches are plain loads here. */
template <class T> static inline T __ldg(const T *p) { return *p; }
template <class T> static inline T __ldcs(const T *p) { return *p; }

static inline float __uint_as_float(unsigned u) { return rh_emu::from_bits<float>(u); }
static inline unsigned __float_as_uint(float f) { return (unsigned)rh_emu::to_bits(f); }
#define __expf(x) expf(x)   /* glibc declares its own __expf */

/* CUDA's integer and float min/max overloads for mixed operands. */
template <class A, class B> static inline std::common_type_t<A, B> max(A a, B b)
{
    return a > b ? (std::common_type_t<A, B>)a : (std::common_type_t<A, B>)b;
}
template <class A, class B> static inline std::common_type_t<A, B> min(A a, B b)
{
    return a < b ? (std::common_type_t<A, B>)a : (std::common_type_t<A, B>)b;
}

/* Blocks run on several host threads at once (blocks.cc), so atomics are atomic. */
template <class T> static inline T atomicAdd(T *p, T v)
{
    if constexpr (std::is_integral<T>::value) {
        return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
    } else {
        T old, want;
        __atomic_load(p, &old, __ATOMIC_RELAXED);
        do {
            want = old + v;
        } while (!__atomic_compare_exchange(p, &old, &want, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
        return old;
    }
}

#endif
