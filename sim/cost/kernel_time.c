/* kernel_time.c — the kernel-time shapes of kernel_time.h. */
#include "sim/cost/kernel_time.h"

#include <math.h>

static const char *const names[RL_K_N] = {"gemm", "attention", "norm", "rope", "activation", "add", "embedding",
                                            "gemm_fp8", "grouped_gemm", "fused_moe_triton"};

const char *rl_kernel_name(int kind)
{
    return kind >= 0 && kind < RL_K_N ? names[kind] : "?";
}

rl_kernel rl_kernel_pure(void)
{
    return (rl_kernel){.compute_eff = 1, .memory_eff = 1};
}

double rl_kernel_rate(const rl_kernel *k, double peak, double eff)
{
    double rate = peak * k->compute_eff;
    if (k->max_tflops > 0 && k->max_tflops * 1e12 < rate) rate = k->max_tflops * 1e12;
    return rate * eff;
}

double rl_gemm_in_s(const rl_kernel *k, double peak, double hbm, double M, double K, double N, double wbytes,
                    double in_bytes, double eff)
{
    if (M <= 0) return 0;
    double bytes = K * N * wbytes + M * K * in_bytes + M * N * 2;
    return k->floor_s + fmax(2 * (M + k->half_rows) * K * N / rl_kernel_rate(k, peak, eff),
                             bytes / (hbm * k->memory_eff * eff));
}

double rl_gemm_s(const rl_kernel *k, double peak, double hbm, double M, double K, double N, double wbytes,
                 double eff)
{
    return rl_gemm_in_s(k, peak, hbm, M, K, N, wbytes, 2, eff);
}

double rl_grouped_gemm_in_s(const rl_kernel *k, double peak, double hbm, double rows, double experts, double K,
                            double N, double wbytes, double in_bytes, double eff)
{
    if (rows <= 0 || experts <= 0) return 0;
    double bytes = experts * K * N * wbytes + rows * (K * in_bytes + N * 2);
    return k->floor_s + fmax(2 * (rows + experts * k->half_rows) * K * N / rl_kernel_rate(k, peak, eff),
                             bytes / (hbm * k->memory_eff * eff));
}

double rl_grouped_gemm_s(const rl_kernel *k, double peak, double hbm, double rows, double experts, double K,
                         double N, double wbytes, double eff)
{
    return rl_grouped_gemm_in_s(k, peak, hbm, rows, experts, K, N, wbytes, 2, eff);
}

double rl_attention_s(const rl_kernel *k, double peak, double hbm, double flops, double bytes, double eff)
{
    if (flops <= 0 && bytes <= 0) return 0;
    return k->floor_s + fmax(flops / rl_kernel_rate(k, peak, eff), bytes / (hbm * k->memory_eff * eff));
}

double rl_stream_s(const rl_kernel *k, double hbm, double bytes, double row, double eff)
{
    if (bytes <= 0) return 0;
    double tm = bytes / (hbm * k->memory_eff * eff), tr = k->row_s * row;
    return k->floor_s + cbrt(tm * tm * tm + tr * tr * tr);
}

double rl_embedding_s(const rl_kernel *k, double hbm, double M, double bytes, double eff)
{
    if (M <= 0) return 0;
    return k->floor_s + (M <= 16 ? k->index_s * M : 0) + bytes / (hbm * k->memory_eff * eff);
}
