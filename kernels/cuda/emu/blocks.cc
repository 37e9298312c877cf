/* blocks.cc — the emulator's execution of a grid: each block's threads are
 * fibers on one host thread, scheduled cooperatively; the blocks of a grid
 * are shared among the launching thread and a pool of workers.
 *
 * A fiber runs until it finishes or reaches a barrier, then hands over to
 * the next ready fiber directly (one switch, not two through a scheduler).
 * A warp's barrier (shuffle or __syncwarp) opens when every live lane of
 * the warp waits there, the block's (__syncthreads) when every live thread
 * does, as the hardware counts exited threads out. When no fiber is ready
 * and threads are still waiting, they wait at barriers that never open
 * (lanes of a warp split between a shuffle and __syncthreads): the launch
 * fails with a message naming the kernel and block instead of hanging.
 *
 * Shuffles exchange through two buffers a warp, alternately, so a shuffle
 * costs one barrier: a lane can only reuse a buffer after every lane has
 * passed the next barrier, and by then every lane has read it.
 *
 * Switching is a few instructions of assembly on x86-64 (no system call,
 * unlike swapcontext) and ucontext elsewhere (not exercised by CI, which is
 * x86-64); AddressSanitizer is told of every switch so it checks fiber
 * stacks as stacks. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define RH_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RH_EMU_ASAN 1
#endif
#endif
#ifdef RH_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

/* -DRH_EMU_UCONTEXT takes the portable path on x86-64 too (to test it). */
#if defined(__x86_64__) && !defined(RH_EMU_UCONTEXT)
#define RH_EMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace rh_emu {

enum { READY, AT_BLOCK, AT_WARP, DONE };
enum { MAX_THREADS = 1024, MAX_WARPS = MAX_THREADS / 32 };
#ifdef RH_EMU_ASAN
static const size_t STACK = 512u << 10;   /* redzones make frames larger */
#else
static const size_t STACK = 128u << 10;
#endif

struct fiber {
    void *sp;                  /* saved stack pointer while switched out */
#if !defined(RH_EMU_ASM_SWITCH)
    ucontext_t uc;
#endif
    char *stack;
    uint3 idx;
    unsigned linear, warp, lane;
    int state;
    unsigned phase;            /* shuffles done: which exchange buffer is next */
    void *asan_fake;
    bool abandoned;            /* left at a barrier by a failed launch, not finished */
};

struct block_runner {
    std::vector<fiber> fibers;
    void *sched_sp;
#if !defined(RH_EMU_ASM_SWITCH)
    ucontext_t sched_uc;
#endif
    const void *sched_stack_lo = nullptr;
    size_t sched_stack_size = 0;
    const std::function<void()> *body = nullptr;
    unsigned n;                          /* threads of the block being run */
    unsigned ready[MAX_THREADS];         /* ring of ready threads */
    unsigned head, tail;
    unsigned warp_live[MAX_WARPS], warp_wait[MAX_WARPS];
    unsigned block_live, block_wait;
    std::string why;                     /* the first misuse seen in this block */
    uint64_t xchg[2][MAX_WARPS][32];
    alignas(16) unsigned char smem[232448];   /* dynamic shared memory: Hopper's opt-in limit */
};

thread_local fiber *cur;
thread_local uint3 block_idx;
thread_local dim3 block_dim, grid_dim;
static thread_local block_runner *run_state;

/* Frees a host thread's runner and fiber stacks when the thread ends. */
struct runner_owner {
    ~runner_owner()
    {
        if (!run_state) return;
        for (fiber &f : run_state->fibers)
            if (f.stack) munmap(f.stack, STACK);
        delete run_state;
        run_state = nullptr;
    }
};
static thread_local runner_owner run_owner;

const uint3 &thread_idx() { return cur->idx; }
void *dyn_smem() { return run_state->smem; }
unsigned lane_id() { return cur->lane; }

}   // namespace rh_emu

using namespace rh_emu;

#if defined(RH_EMU_ASM_SWITCH)
/* rh_emu_swap(save, to): pushes the callee-saved registers, stores the
 * stack pointer in *save, and resumes the fiber whose stack pointer is `to`
 * the same way in reverse. The SSE and x87 control words are not switched:
 * no kernel changes rounding modes. rh_emu_entry is where a new fiber's
 * first switch returns to: it calls fiber_main(r12). */
extern "C" void rh_emu_swap(void **save, void *to);
extern "C" void rh_emu_entry(void);
asm(R"(
    .text
    .globl rh_emu_swap
    .type rh_emu_swap,@function
rh_emu_swap:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size rh_emu_swap, .-rh_emu_swap
    .globl rh_emu_entry
    .type rh_emu_entry,@function
rh_emu_entry:
    movq %r12, %rdi
    call rh_emu_fiber_main
    ud2
    .size rh_emu_entry, .-rh_emu_entry
    .section .note.GNU-stack,"",@progbits
    .text
)");
#endif

extern "C" void rh_emu_fiber_main(fiber *f);

/* Context switch from `from` (NULL: the scheduler) to `to` (NULL: the
 * scheduler). A finished fiber passes dying, and is never resumed. */
static void switch_to(block_runner *b, fiber *from, fiber *to, bool dying)
{
    cur = to;
#ifdef RH_EMU_ASAN
    void *fake = nullptr;
    void **save = dying ? nullptr : from ? &from->asan_fake : &fake;
    if (to) __sanitizer_start_switch_fiber(save, to->stack, STACK);
    else __sanitizer_start_switch_fiber(save, b->sched_stack_lo, b->sched_stack_size);
#else
    (void)dying;
#endif
#if defined(RH_EMU_ASM_SWITCH)
    rh_emu_swap(from ? &from->sp : &b->sched_sp, to ? to->sp : b->sched_sp);
#else
    swapcontext(from ? &from->uc : &b->sched_uc, to ? &to->uc : &b->sched_uc);
#endif
    /* Resumed: from is running again (or the scheduler is). */
#ifdef RH_EMU_ASAN
    if (from) __sanitizer_finish_switch_fiber(from->asan_fake, &b->sched_stack_lo, &b->sched_stack_size);
    else __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    cur = from;
}

/* Barrier bookkeeping, O(1) per arrival: a barrier opens when its count of
 * waiting threads reaches its count of live ones; released threads join the
 * ready queue in thread order. */
static void release_warp(block_runner *b, unsigned w)
{
    unsigned lo = w * 32, hi = lo + 32 < b->n ? lo + 32 : b->n;
    if (b->warp_live[w] != hi - lo && b->why.empty())
        b->why = "warp " + std::to_string(w) + " shuffles or syncs after some of its lanes exited";
    for (unsigned i = lo; i < hi; i++)
        if (b->fibers[i].state == AT_WARP) {
            b->fibers[i].state = READY;
            b->ready[b->tail++ % MAX_THREADS] = i;
        }
    b->warp_wait[w] = 0;
}

static void release_block(block_runner *b)
{
    for (unsigned i = 0; i < b->n; i++)
        if (b->fibers[i].state == AT_BLOCK) {
            b->fibers[i].state = READY;
            b->ready[b->tail++ % MAX_THREADS] = i;
        }
    b->block_wait = 0;
}

static void check_open(block_runner *b, unsigned w)
{
    if (b->warp_wait[w] && b->warp_wait[w] == b->warp_live[w]) release_warp(b, w);
    if (b->block_wait && b->block_wait == b->block_live) release_block(b);
}

/* The calling fiber stops in `state` and the next ready fiber runs (the
 * scheduler when none is: the block is done, or stuck). Returns when the
 * caller is released. */
static void yield(int state)
{
    block_runner *b = run_state;
    fiber *f = cur;
    f->state = state;
    if (state == AT_WARP) b->warp_wait[f->warp]++;
    else if (state == AT_BLOCK) b->block_wait++;
    else {   /* DONE */
        b->warp_live[f->warp]--;
        b->block_live--;
    }
    check_open(b, f->warp);   /* an arrival, or a thread leaving, may complete a barrier */
    fiber *next = b->head != b->tail ? &b->fibers[b->ready[b->head++ % MAX_THREADS]] : nullptr;
    if (next == f) return;   /* released at once: the last lane to arrive */
    switch_to(b, f, next, state == DONE);
}

extern "C" void rh_emu_fiber_main(fiber *f)
{
    block_runner *b = run_state;
#ifdef RH_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b->sched_stack_lo, &b->sched_stack_size);
#endif
    cur = f;
    (*b->body)();
    f->abandoned = false;
    yield(DONE);
    abort();   /* a finished fiber is never resumed */
}

#if !defined(RH_EMU_ASM_SWITCH)
static void uc_entry(unsigned lo, unsigned hi)
{
    rh_emu_fiber_main((fiber *)(((uintptr_t)hi << 32) | lo));
}
#endif

/* How far below its end a fiber's stack starts. Stacks are STACK apart, so
 * without an offset every fiber's hot top-of-stack lines fall into the same
 * cache sets and evict each other at every switch. */
static size_t color(unsigned i)
{
    return (size_t)(i % 61) * 4160 % 65536;
}

static void fiber_start(fiber *f)
{
#ifdef RH_EMU_ASAN
    /* The previous fiber on this stack left without returning from its last
     * frames (fiber_main, yield, the switch), whose redzones are still
     * poisoned and would read as overflows. Those frames lie near the top;
     * a fiber abandoned at a stuck barrier leaves poison anywhere. */
    if (f->abandoned) __asan_unpoison_memory_region(f->stack, STACK);
    else __asan_unpoison_memory_region(f->stack + STACK - 65536 - 16384, 65536 + 16384);
    f->abandoned = true;   /* until it finishes */
#endif
#if defined(RH_EMU_ASM_SWITCH)
    /* The frame rh_emu_swap pops: r15..r12, rbx, rbp, then the return
     * address. After the `ret` the stack is 16-byte aligned for the call. */
    uintptr_t top = ((uintptr_t)(f->stack + STACK - color(f->linear))) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 72);
    sp[0] = 0, sp[1] = 0, sp[2] = 0;             /* r15 r14 r13 */
    sp[3] = (uint64_t)f;                         /* r12: the fiber */
    sp[4] = 0, sp[5] = 0;                        /* rbx rbp */
    sp[6] = (uint64_t)rh_emu_entry;
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = STACK - color(f->linear);
    f->uc.uc_link = nullptr;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->uc, (void (*)())uc_entry, 2, (unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
#endif
}

static block_runner *runner_for_thread()
{
    if (!run_state) {
        (void)&run_owner;   /* constructs the owner, so the thread's exit frees what follows */
        run_state = new block_runner;
        run_state->fibers.resize(MAX_THREADS);
    }
    return run_state;
}

static char *stack_of(fiber *f)
{
    if (!f->stack) {
        void *p = mmap(nullptr, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return nullptr;
        f->stack = (char *)p;
    }
    return f->stack;
}

/* ---- barriers, from inside a fiber ------------------------------------- */

void rh_emu::sync_block() { yield(AT_BLOCK); }

void rh_emu::sync_warp(unsigned mask)
{
    (void)mask;
    yield(AT_WARP);
}

uint64_t rh_emu::exchange(uint64_t mine, unsigned src, unsigned mask)
{
    block_runner *b = run_state;
    fiber *f = cur;
    unsigned buf = f->phase++ & 1;
    b->xchg[buf][f->warp][f->lane] = mine;
    sync_warp(mask);
    return src < 32 ? b->xchg[buf][f->warp][src] : mine;
}

/* ---- one block --------------------------------------------------------- */

/* Runs one block; "" when it completed, else why it failed. */
static std::string run_block(block_runner *b, dim3 bd)
{
    unsigned n = bd.x * bd.y * bd.z;
    b->n = n;
    b->head = b->tail = 0;
    b->block_live = n;
    b->block_wait = 0;
    b->why.clear();
    for (unsigned w = 0; w * 32 < n; w++) {
        b->warp_live[w] = n - w * 32 < 32 ? n - w * 32 : 32;
        b->warp_wait[w] = 0;
    }
    for (unsigned i = 0; i < n; i++) {
        fiber *f = &b->fibers[i];
        if (!stack_of(f)) return "cannot map a stack for thread " + std::to_string(i);
        f->linear = i;
        f->idx = uint3{i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y)};
        f->warp = i / 32;
        f->lane = i % 32;
        f->phase = 0;
        f->state = READY;
        fiber_start(f);
        b->ready[b->tail++ % MAX_THREADS] = i;
    }
    /* The fibers hand over among themselves; control comes back here when
     * none is ready: all done, or the rest stuck at barriers. */
    switch_to(b, nullptr, &b->fibers[b->ready[b->head++ % MAX_THREADS]], false);
    if (b->block_live && b->why.empty())
        b->why = "threads wait at barriers that cannot open (lanes of a warp split between a shuffle or "
                 "__syncwarp and __syncthreads)";
    return b->why;
}

/* ---- a grid, over a pool of host threads ------------------------------- */

/* Blocks of one launch are independent by CUDA's rules, so they run on
 * several host threads: the launching thread and the pool's workers take
 * block numbers from one counter. REHEARSE_CUDA_EMU_THREADS sets how many
 * (default: the processors online). Several launching threads (tensor-
 * parallel ranks) share the pool; each waits only for its own grid. */
struct grid_job {
    const char *name;
    dim3 grid, block;
    const std::function<void()> *body;
    uint64_t total;
    std::atomic<uint64_t> next{0}, finished{0};
    int helpers = 0;                  /* workers inside this job (pool lock) */
    std::mutex lock;
    uint64_t failed_block = UINT64_MAX;
    std::string why;
};

/* Never destroyed: workers still wait on them when the process exits, and
 * destroying a condition variable with waiters blocks forever. */
static std::mutex &pool_lock = *new std::mutex;
static std::condition_variable &pool_cv = *new std::condition_variable;
static std::vector<grid_job *> &pool_jobs = *new std::vector<grid_job *>;
static int pool_started;

/* Runs blocks of j until none is left. */
static void work_on(grid_job *j)
{
    block_runner *b = runner_for_thread();
    const std::function<void()> *saved_body = b->body;
    dim3 saved_grid = grid_dim, saved_block = block_dim;
    b->body = j->body;
    grid_dim = j->grid;
    block_dim = j->block;
    for (uint64_t i; (i = j->next.fetch_add(1)) < j->total;) {
        unsigned x = (unsigned)(i % j->grid.x), y = (unsigned)(i / j->grid.x % j->grid.y),
                 z = (unsigned)(i / ((uint64_t)j->grid.x * j->grid.y));
        block_idx = uint3{x, y, z};
        std::string why = run_block(b, j->block);
        if (!why.empty()) {
            std::lock_guard<std::mutex> g(j->lock);
            if (i < j->failed_block) {   /* the first failing block, whichever thread ran it */
                j->failed_block = i;
                j->why = std::string(j->name) + ", block (" + std::to_string(x) + "," + std::to_string(y) + "," +
                         std::to_string(z) + "): " + why;
            }
        }
        j->finished.fetch_add(1);
    }
    b->body = saved_body;
    grid_dim = saved_grid;
    block_dim = saved_block;
}

static void *pool_worker(void *)
{
    std::unique_lock<std::mutex> l(pool_lock);
    for (;;) {
        grid_job *j = nullptr;
        for (grid_job *c : pool_jobs)
            if (c->next.load() < c->total) {
                j = c;
                break;
            }
        if (!j) {
            pool_cv.wait(l);
            continue;
        }
        j->helpers++;
        l.unlock();
        work_on(j);
        l.lock();
        j->helpers--;
        pool_cv.notify_all();
    }
    return nullptr;
}

static int pool_threads()
{
    static int n = [] {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int dflt = cpus > 1 ? (int)(cpus < 64 ? cpus : 64) : 1;
        const char *v = getenv("REHEARSE_CUDA_EMU_THREADS");
        if (v && *v) {
            int x = atoi(v);
            if (x >= 1 && x <= 256) return x;
            fprintf(stderr, "REHEARSE_CUDA_EMU_THREADS=%s: expected 1 to 256; using %d\n", v, dflt);
        }
        return dflt;
    }();
    return n;
}

std::string rh_emu_run_grid(const char *name, dim3 grid, dim3 block, const std::function<void()> &body)
{
    grid_job j;
    j.name = name;
    j.grid = grid;
    j.block = block;
    j.body = &body;
    j.total = (uint64_t)grid.x * grid.y * grid.z;
    int threads = pool_threads();
    /* A launch from inside a worker (never in CUDA code today) or a small
     * grid runs on the calling thread alone. */
    bool share = threads > 1 && j.total >= 4 && !cur;
    if (share) {
        std::lock_guard<std::mutex> g(pool_lock);
        if (!pool_started) {
            pool_started = 1;
            for (int i = 1; i < threads; i++) {
                pthread_t t;
                if (pthread_create(&t, nullptr, pool_worker, nullptr) == 0) pthread_detach(t);
            }
        }
        pool_jobs.push_back(&j);
        pool_cv.notify_all();
    }
    work_on(&j);
    if (share) {
        std::unique_lock<std::mutex> l(pool_lock);
        pool_cv.wait(l, [&] { return j.helpers == 0 && j.finished.load() == j.total; });
        for (size_t i = 0; i < pool_jobs.size(); i++)
            if (pool_jobs[i] == &j) pool_jobs.erase(pool_jobs.begin() + (long)i);
    }
    return j.why;
}
