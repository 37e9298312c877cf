/* kernel_fit.h — a GPU's kernel parameters (sim/cost/kernel_time.h) fitted
 * to measured operator times: Vidur's profiles (sim/cost/vidur_profile.h),
 * every row of every file given. Per kind of kernel (GEMM; norm; rope;
 * activation; add; embedding), least squares on the log of the time
 * (a 5 µs kernel weighs as much as a 5 ms one), by Nelder–Mead over
 * parameters kept in range (efficiencies in (0, 1), the rest positive).
 * Attention is not in these profiles and is not fitted. What
 * `rehearse cost fit-kernels` runs; the GPU presets' "kernels" objects are
 * its output. */
#ifndef RH_CALIBRATE_KERNEL_FIT_H
#define RH_CALIBRATE_KERNEL_FIT_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/cost/roofline.h"
#include "util/err.h"

/* The fit's error on one operator of one file. */
typedef struct kernel_fit_error {
    char file[160];
    const char *op;                 /* Vidur's name */
    size_t rows;
    double median, p90, max;        /* of |predicted − measured| / measured */
} kernel_fit_error;

typedef struct kernel_fit {
    rl_kernel kern[RL_K_N];
    bool fitted[RL_K_N];
    size_t samples[RL_K_N];
    kernel_fit_error *errors;       /* per file and operator, in file order */
    size_t n_errors;
} kernel_fit;

/* Fits gpu's kernels to the profiles at paths (files, or directories
 * searched for mlp.csv). */
int kernel_fit_profiles(const char *const *paths, int n_paths, const rl_gpu *gpu, kernel_fit *out, rh_err *e);
/* The errors of given parameters on the same files (the check of a preset). */
int kernel_fit_errors(const char *const *paths, int n_paths, const rl_gpu *gpu, const rl_kernel kern[RL_K_N],
                      kernel_fit *out, rh_err *e);
void kernel_fit_free(kernel_fit *f);

#endif
