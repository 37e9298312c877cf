/* cost_kernels.c — `rehearse cost fit-kernels PROFILE... --gpu GPU`: a GPU
 * preset's "kernels" object fitted to measured operator times, and its
 * error per operator and file; --check measures the preset's own instead.
 * The work is sim/calibrate/kernel_fit.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sim/calibrate/kernel_fit.h"
#include "util/args.h"
#include "util/json_file.h"

static const char *help =
    "usage: rehearse cost fit-kernels PROFILE... --gpu GPU [-o KERNELS.json] [--check]\n\n"
    "Fits a GPU's kernel parameters (COST.md, \"kernels\") to measured per-operator\n"
    "times: Vidur's profiles (PROFILE: an mlp.csv, or a directory searched for them,\n"
    "e.g. ../shared/gpu-profiles/vidur/compute/h100). Per kind of kernel (gemm, norm,\n"
    "rope, activation, add, embedding), least squares on the log of the time over\n"
    "every row; prints the parameters and each operator's error in each file\n"
    "(median, p90, max of |predicted - measured| / measured).\n"
    "  --gpu GPU        the GPU preset (or file) whose peaks the kernels are fitted to\n"
    "  -o KERNELS.json  write {\"kernels\": {...}}, for the preset's \"kernels\" object\n"
    "  --check          fit nothing: the errors of the preset's own kernels\n";

static json_t *kernels_json(const kernel_fit *f, int argc, char **argv)
{
    json_t *k = json_object();
    for (int i = 0; i < RL_K_N; i++) {
        if (!f->fitted[i]) continue;
        const rl_kernel *p = &f->kern[i];
        json_t *o = json_object();
        if (i == RL_K_GEMM) json_object_set_new(o, "compute_efficiency", json_real(p->compute_eff));
        json_object_set_new(o, "memory_efficiency", json_real(p->memory_eff));
        json_object_set_new(o, "floor_s", json_real(p->floor_s));
        if (i == RL_K_GEMM) json_object_set_new(o, "half_rows", json_real(p->half_rows));
        if (p->row_s > 0) json_object_set_new(o, "row_s", json_real(p->row_s));
        if (p->index_s > 0) json_object_set_new(o, "index_s", json_real(p->index_s));
        json_object_set_new(k, rl_kernel_name(i), o);
    }
    double worst_med = 0, worst_p90 = 0;
    for (size_t i = 0; i < f->n_errors; i++) {
        if (f->errors[i].median > worst_med) worst_med = f->errors[i].median;
        if (f->errors[i].p90 > worst_p90) worst_p90 = f->errors[i].p90;
    }
    char src[1024];
    int n = snprintf(src, sizeof src, "rehearse cost fit-kernels");
    for (int i = 2; i < argc && n < (int)sizeof src; i++) n += snprintf(src + n, sizeof src - n, " %s", argv[i]);
    if (n < (int)sizeof src)
        snprintf(src + n, sizeof src - n, ": least squares on log time over %zu operator-file pairs; worst median "
                 "error %.1f%%, worst p90 %.1f%%", f->n_errors, 100 * worst_med, 100 * worst_p90);
    json_object_set_new(k, "source", json_string(src));
    return json_pack("{s:o}", "kernels", k);
}

static void print_fit(const kernel_fit *f, bool check)
{
    printf("%s\n", check ? "the preset's kernels:" : "fitted kernels:");
    for (int i = 0; i < RL_K_N; i++) {
        const rl_kernel *p = &f->kern[i];
        if (!check && !f->fitted[i]) continue;
        printf("  %-16s e_c %.3f  e_m %.3f  floor %.2f us", rl_kernel_name(i), p->compute_eff, p->memory_eff,
               p->floor_s * 1e6);
        if (p->half_rows > 0) printf("  M_h %.1f rows", p->half_rows);
        if (p->row_s > 0) printf("  row %.3g s/element", p->row_s);
        if (p->index_s > 0) printf("  index %.3g s", p->index_s);
        if (p->max_tflops > 0) printf("  ceiling %.0f TFLOPS", p->max_tflops);
        if (!check) printf("  (%zu samples)", f->samples[i]);
        printf("\n");
    }
    printf("\n%-64s %-26s %6s %8s %8s %8s\n", "file", "operator", "rows", "median", "p90", "max");
    for (size_t i = 0; i < f->n_errors; i++) {
        const kernel_fit_error *x = &f->errors[i];
        const char *file = x->file;
        size_t len = strlen(file);
        if (len > 64) file += len - 64;
        printf("%-64s %-26s %6zu %7.1f%% %7.1f%% %7.1f%%\n", file, x->op, x->rows, 100 * x->median, 100 * x->p90,
               100 * x->max);
    }
}

int cost_fit_kernels_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(help, stdout);
        return 0;
    }
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 2;
    rh_err e = {{0}};
    const char *gpu_name = NULL, *out = NULL, *name;
    bool check = false;
    while ((name = rh_args_next(&a))) {
        if (!strcmp(name, "gpu")) {
            if (!(gpu_name = rh_args_value(&a, &e))) goto bad;
        } else if (!strcmp(name, "o") || !strcmp(name, "output")) {
            if (!(out = rh_args_value(&a, &e))) goto bad;
        } else if (!strcmp(name, "check")) {
            if (rh_args_no_value(&a, &e) < 0) goto bad;
            check = true;
        } else {
            rh_fail(&e, "unknown flag --%s (see --help)", name);
            goto bad;
        }
    }
    if (!gpu_name || a.npos < 1) {
        rh_fail(&e, "give one or more profiles and --gpu GPU (see --help)");
        goto bad;
    }
    rl_gpu gpu;
    if (rl_gpu_load(gpu_name, &gpu, &e) < 0) goto bad;
    kernel_fit f;
    int rc = check ? kernel_fit_errors((const char *const *)a.pos, a.npos, &gpu, gpu.kern, &f, &e)
                   : kernel_fit_profiles((const char *const *)a.pos, a.npos, &gpu, &f, &e);
    if (rc < 0) goto bad;
    print_fit(&f, check);
    if (out) {
        json_t *o = kernels_json(&f, argc, argv);
        rc = rh_json_save(o, out, JSON_INDENT(2) | JSON_REAL_PRECISION(6), "kernel parameters", &e);
        json_decref(o);
        if (rc < 0) {
            kernel_fit_free(&f);
            goto bad;
        }
        printf("\nwrote %s\n", out);
    }
    kernel_fit_free(&f);
    return 0;
bad:
    fprintf(stderr, "rehearse cost fit-kernels: %s\n", e.msg);
    return 1;
}
