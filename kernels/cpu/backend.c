/* backend.c — the CPU backend's dispatch table. Memory is plain host memory,
 * so copies are memcpy and the forward pass skips them (host_memory = 1). */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

static void *cpu_alloc(size_t bytes)
{
    return calloc(1, bytes ? bytes : 1);
}

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes) memcpy(dst, src, bytes);
}

static const kern_table table = {
    .name = "cpu",
    .host_memory = 1,
    .alloc = cpu_alloc,
    .free = free,
    .copy_in = cpu_copy,
    .copy_out = cpu_copy,
    .gemm = cpu_gemm,
    .embedding = cpu_embedding,
    .rmsnorm = cpu_rmsnorm,
    .rope_angles = cpu_rope_angles,
    .rope = cpu_rope,
    .silu_mul = cpu_silu_mul,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .lm_head = cpu_lm_head,
    .sample = cpu_sample,
};

const kern_table *kern_cpu(void)
{
    return &table;
}

int kern_cpu_threads(void)
{
    int t = openblas_get_num_threads();
    return t > 0 ? t : 1;
}
