/* kernel_time.h — one kernel's time on a GPU, by kind, as real kernels
 * run: a GEMM of few rows is bound by its weights' bytes and no faster
 * than a kernel can be, of many rows by FLOPs at a tile-padded rate; a
 * norm or an elementwise kernel walks one token's row in one thread block.
 * The parameters are a GPU preset's "kernels" object, fitted to measured
 * kernel times (`rehearse cost fit-kernels`); without it they are the pure
 * roofline's (efficiency 1, no floor, no padding).
 *
 *   gemm        floor + max(2(M + M_h)·K·N / rate, bytes / (hbm·e_m))
 *               (M rows cost as M + M_h: a partly filled tile and ramp-up;
 *               rate = peak·e_c, or a kernel's measured ceiling when lower)
 *   grouped     the same over E experts sharing A rows: 2(A + E·M_h)·K·N
 *   attention   floor + max(flops / (peak·e_c), bytes / (hbm·e_m))
 *   stream      floor + cbrt((row_s·L)³ + (bytes / (hbm·e_m))³)
 *               (norm, rope, activation, add: L elements in a token's row)
 *   embedding   floor + [M ≤ 16]·index_s·M + bytes / (hbm·e_m)
 * Every time is one call's, in seconds; `eff` (a cost file's factor for the
 * operator) scales both rates. */
#ifndef RH_COST_KERNEL_TIME_H
#define RH_COST_KERNEL_TIME_H

enum rl_kernel_kind {
    RL_K_GEMM, RL_K_ATTENTION, RL_K_NORM, RL_K_ROPE, RL_K_ACT, RL_K_ADD, RL_K_EMBED, RL_K_GEMM_FP8, RL_K_GROUPED,
    RL_K_FUSED_MOE, RL_K_N
};
/* "gemm", "attention", "norm", "rope", "activation", "add", "embedding",
 * "gemm_fp8" (FP8 block-scaled GEMMs: DeepGEMM), "grouped_gemm" (a MoE
 * layer's expert GEMMs: DeepGEMM's grouped kernels), "fused_moe_triton"
 * (the same GEMMs in FP8 by the Triton fused-MoE kernel, which SGLang and
 * vLLM run when DeepEP is off): the keys of a preset's "kernels" object. A
 * preset without "gemm_fp8" or "grouped_gemm" prices those GEMMs with its
 * "gemm", without "fused_moe_triton" with its "grouped_gemm". */
const char *rl_kernel_name(int kind);

typedef struct rl_kernel {
    double compute_eff, memory_eff;   /* e_c, e_m: shares of the peak FLOP rate and of HBM bandwidth */
    double floor_s;                   /* the shortest such kernel */
    double half_rows;                 /* M_h (GEMMs) */
    double row_s;                     /* per element of one row (stream kernels) */
    double index_s;                   /* per index of a small lookup (embedding) */
    double max_tflops;                /* the highest FLOP rate the kernel reaches on this GPU, measured; 0: none */
} rl_kernel;

/* The pure roofline's parameters: efficiency 1, nothing else. */
rl_kernel rl_kernel_pure(void);

/* The FLOP rate a kernel computes at: peak·e_c, or its ceiling when lower,
 * scaled by eff. */
double rl_kernel_rate(const rl_kernel *k, double peak, double eff);

/* peak: FLOP/s of the operands' dtype; hbm: bytes/s; wbytes: bytes per weight. */
double rl_gemm_s(const rl_kernel *k, double peak, double hbm, double M, double K, double N, double wbytes,
                 double eff);
double rl_grouped_gemm_s(const rl_kernel *k, double peak, double hbm, double rows, double experts, double K,
                         double N, double wbytes, double eff);
/* The same with the input's bytes per element (1 behind an FP8
 * quantisation; the two above read bf16 inputs). */
double rl_gemm_in_s(const rl_kernel *k, double peak, double hbm, double M, double K, double N, double wbytes,
                    double in_bytes, double eff);
double rl_grouped_gemm_in_s(const rl_kernel *k, double peak, double hbm, double rows, double experts, double K,
                            double N, double wbytes, double in_bytes, double eff);
double rl_attention_s(const rl_kernel *k, double peak, double hbm, double flops, double bytes, double eff);
double rl_stream_s(const rl_kernel *k, double hbm, double bytes, double row, double eff);
double rl_embedding_s(const rl_kernel *k, double hbm, double M, double bytes, double eff);

#endif
