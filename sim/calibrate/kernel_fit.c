/* kernel_fit.c — fitting kernel parameters to measured operator times
 * (kernel_fit.h). */
#include "sim/calibrate/kernel_fit.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sim/cost/vidur_profile.h"
#include "util/minimize.h"
#include "util/progress.h"

typedef struct fileset {
    vidur_profile *p;
    char (*name)[160];
    int n, cap;
} fileset;

static int add_file(fileset *fs, const char *path, rh_err *e)
{
    if (fs->n == fs->cap) {
        int cap = fs->cap ? 2 * fs->cap : 8;
        vidur_profile *p = realloc(fs->p, (size_t)cap * sizeof *p);
        if (p) fs->p = p;
        char(*nm)[160] = realloc(fs->name, (size_t)cap * sizeof *nm);
        if (nm) fs->name = nm;
        if (!p || !nm) return rh_fail(e, "out of memory");
        fs->cap = cap;
    }
    if (vidur_profile_read(path, &fs->p[fs->n], e) < 0) return -1;
    snprintf(fs->name[fs->n++], 160, "%s", path);
    return 0;
}

/* Every mlp.csv under dir, in name order (so the output is the same on any
 * file system). */
static int add_dir(fileset *fs, const char *dir, int depth, rh_err *e)
{
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    if (n < 0) return rh_fail(e, "%s: cannot read the directory", dir);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *name = list[i]->d_name;
        char path[4096];
        struct stat st;
        if (rc == 0 && name[0] != '.' && snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path &&
            stat(path, &st) == 0) {
            if (S_ISDIR(st.st_mode) && depth < 8) rc = add_dir(fs, path, depth + 1, e);
            else if (S_ISREG(st.st_mode) && !strcmp(name, "mlp.csv")) rc = add_file(fs, path, e);
        }
        free(list[i]);
    }
    free(list);
    return rc;
}

static void fileset_free(fileset *fs)
{
    for (int i = 0; i < fs->n; i++) vidur_profile_free(&fs->p[i]);
    free(fs->p);
    free(fs->name);
}

static int load(const char *const *paths, int n_paths, fileset *fs, rh_err *e)
{
    memset(fs, 0, sizeof *fs);
    for (int i = 0; i < n_paths; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0) return rh_fail(e, "%s: no such file or directory", paths[i]);
        if ((S_ISDIR(st.st_mode) ? add_dir(fs, paths[i], 0, e) : add_file(fs, paths[i], e)) < 0) return -1;
    }
    if (!fs->n) return rh_fail(e, "no Vidur profile (mlp.csv) under the paths given");
    return 0;
}

/* ---- the fit ---- */

typedef struct objective {
    const fileset *fs;
    int kind;
    double peak, hbm;
} objective;

static double logistic(double x)
{
    return 1 / (1 + exp(-x));
}

/* Parameters from the search's unconstrained coordinates: a GEMM's
 * (e_c, e_m, floor, M_h), the others' (e_m, floor, row or index cost);
 * efficiencies through a logistic, the rest through exp. */
static rl_kernel unpack(int kind, const double *x)
{
    rl_kernel k = rl_kernel_pure();
    if (kind == RL_K_GEMM) {
        k.compute_eff = logistic(x[0]);
        k.memory_eff = logistic(x[1]);
        k.floor_s = exp(x[2]);
        k.half_rows = exp(x[3]);
        return k;
    }
    k.memory_eff = logistic(x[0]);
    k.floor_s = exp(x[1]);
    if (kind == RL_K_EMBED) k.index_s = exp(x[2]);
    else k.row_s = exp(x[2]);
    return k;
}

static double mean_sq_log(const double *x, void *ctx)
{
    const objective *o = ctx;
    rl_kernel k = unpack(o->kind, x);
    double sum = 0;
    size_t n = 0;
    for (int f = 0; f < o->fs->n; f++)
        for (size_t i = 0; i < o->fs->p[f].n; i++) {
            const vidur_sample *s = &o->fs->p[f].s[i];
            if (s->kind != o->kind) continue;
            double r = log(vidur_predict(s, &k, o->peak, o->hbm) / s->seconds);
            sum += r * r;
            n++;
        }
    return n ? sum / n : 0;
}

static size_t count_kind(const fileset *fs, int kind)
{
    size_t n = 0;
    for (int f = 0; f < fs->n; f++)
        for (size_t i = 0; i < fs->p[f].n; i++) n += fs->p[f].s[i].kind == kind;
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int errors_of(const fileset *fs, const rl_gpu *gpu, const rl_kernel kern[RL_K_N], kernel_fit *out, rh_err *e)
{
    double peak = gpu->bf16_tflops * 1e12, hbm = gpu->hbm_GBps * 1e9;
    out->errors = calloc((size_t)fs->n * VIDUR_N_OPS, sizeof *out->errors);
    double *err = NULL;
    size_t cap = 0;
    for (int f = 0; f < fs->n; f++) cap = fs->p[f].n > cap ? fs->p[f].n : cap;
    err = malloc((cap ? cap : 1) * sizeof *err);
    if (!out->errors || !err) {
        free(err);
        return rh_fail(e, "out of memory");
    }
    for (int f = 0; f < fs->n; f++)
        for (int op = 0; op < VIDUR_N_OPS; op++) {
            size_t n = 0;
            for (size_t i = 0; i < fs->p[f].n; i++) {
                const vidur_sample *s = &fs->p[f].s[i];
                if (s->op != op) continue;
                err[n++] = fabs(vidur_predict(s, &kern[s->kind], peak, hbm) - s->seconds) / s->seconds;
            }
            if (!n) continue;
            qsort(err, n, sizeof *err, cmp_double);
            kernel_fit_error *x = &out->errors[out->n_errors++];
            snprintf(x->file, sizeof x->file, "%s", fs->name[f]);
            x->op = vidur_op_names[op];
            x->rows = n;
            x->median = err[n / 2];
            x->p90 = err[(size_t)(0.9 * (double)(n - 1))];
            x->max = err[n - 1];
        }
    free(err);
    return 0;
}

int kernel_fit_profiles(const char *const *paths, int n_paths, const rl_gpu *gpu, kernel_fit *out, rh_err *e)
{
    memset(out, 0, sizeof *out);
    fileset fs;
    if (load(paths, n_paths, &fs, e) < 0) {
        fileset_free(&fs);
        return -1;
    }
    rh_progress bar;
    rh_progress_begin(&bar, "fit-kernels", RL_K_N);
    for (int kind = 0; kind < RL_K_N; kind++) {
        snprintf(bar.extra, sizeof bar.extra, "%s", rl_kernel_name(kind));
        rh_progress_update(&bar, (uint64_t)kind);
        out->kern[kind] = gpu->kern[kind];
        if (kind == RL_K_ATTENTION || !(out->samples[kind] = count_kind(&fs, kind))) continue;
        objective o = {&fs, kind, gpu->bf16_tflops * 1e12, gpu->hbm_GBps * 1e9};
        double x[4];
        int n;
        if (kind == RL_K_GEMM) {
            double x0[] = {1.0, 1.4, log(5e-6), log(100)};
            memcpy(x, x0, sizeof x0);
            n = 4;
        } else {
            double x0[] = {0.0, log(1e-6), log(kind == RL_K_EMBED ? 5e-7 : 5e-10)};
            memcpy(x, x0, sizeof x0);
            n = 3;
        }
        rh_nelder_mead(mean_sq_log, &o, x, n, kind == RL_K_GEMM ? 1.0 : 0.5, 1500, 3);
        out->kern[kind] = unpack(kind, x);
        out->fitted[kind] = true;
    }
    rh_progress_end(&bar);
    int rc = errors_of(&fs, gpu, out->kern, out, e);
    fileset_free(&fs);
    return rc;
}

int kernel_fit_errors(const char *const *paths, int n_paths, const rl_gpu *gpu, const rl_kernel kern[RL_K_N],
                      kernel_fit *out, rh_err *e)
{
    memset(out, 0, sizeof *out);
    fileset fs;
    int rc = load(paths, n_paths, &fs, e);
    if (rc == 0) {
        memcpy(out->kern, kern, sizeof out->kern);
        rc = errors_of(&fs, gpu, kern, out, e);
    }
    fileset_free(&fs);
    return rc;
}

void kernel_fit_free(kernel_fit *f)
{
    free(f->errors);
    memset(f, 0, sizeof *f);
}
