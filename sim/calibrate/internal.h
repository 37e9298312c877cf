/* internal.h — what the calibration's files share, not for other modules.
 *
 * calibrate.c walks the operators of sim/cost/cost_table.h; for each it builds the
 * grid and calls the operator's bench (ops.c and attention.c for kernels,
 * overhead.c for the runner's and the scheduler's own time), which fills one
 * time and one spread per grid point through calib_grid_measure. */
#ifndef RH_CALIB_INTERNAL_H
#define RH_CALIB_INTERNAL_H

#include "sim/calibrate/calibrate.h"
#include "util/progress.h"

/* The shapes one tensor-parallel rank runs. */
typedef struct calib_shape {
    uint32_t layers, d, f, vocab;
    uint32_t n_heads, n_kv, hd, qd, kvd;
    uint32_t page_size, window;
    float eps;
    float scale;                 /* softmax scale, 1/sqrt(head_dim) */
    bool qkv_bias, o_bias, mlp_bias;
} calib_shape;

typedef struct calib_ctx {
    const calib_backend *b;
    const calib_opts *o;
    const model_config *c;
    calib_shape s;
    calib_report *r;
    rh_progress bar;
    uint64_t done;
    uint64_t rng;
} calib_ctx;

/* A grid to fill: n0 x n1 points (n1 = 1 for one axis), row-major. */
typedef struct calib_grid {
    const double *ax0, *ax1;
    uint32_t n0, n1;
    double *seconds, *spread;
} calib_grid;

double calib_now(const calib_ctx *x);
void calib_sync(const calib_ctx *x);
/* Measures every point of the grid with the run's rule (set prepares point
 * k = i * n1 + j); counts them and moves the bar. */
int calib_grid_measure(calib_ctx *x, calib_grid *g, calib_set_fn set, calib_sample_fn fn, void *state, rh_err *e);

/* Backend memory of n floats, uniform in [-scale, scale) from the run's
 * stream; NULL when out of memory. calib_random_as stores them as dt
 * (weights in the table's weight_dtype, KV pools in its kv_dtype). */
float *calib_random(calib_ctx *x, size_t n, float scale);
float *calib_random_as(calib_ctx *x, size_t n, float scale, kern_dtype dt);
/* Backend memory holding a copy of n host words. */
void *calib_upload(calib_ctx *x, const void *host, size_t bytes);
void calib_free(calib_ctx *x, void *p);                /* NULL is fine */
/* The weights every layer holds, in bytes (a forward pass's working set). */
uint64_t calib_layer_weight_bytes(const calib_shape *s);

/* The benches: each fills its grid, -1 with a message when memory runs out. */
int calib_bench_gemm(calib_ctx *x, int op, calib_grid *g, rh_err *e);
int calib_bench_rows(calib_ctx *x, int op, calib_grid *g, rh_err *e);
int calib_bench_prefill_attention(calib_ctx *x, calib_grid *g, rh_err *e);
int calib_bench_decode_attention(calib_ctx *x, calib_grid *g, rh_err *e);
int calib_bench_lm_head(calib_ctx *x, calib_grid *g, rh_err *e);
int calib_bench_sample(calib_ctx *x, calib_grid *g, rh_err *e);
/* 1 when the backend cannot time all-reduces (a note says why). */
int calib_bench_allreduce(calib_ctx *x, calib_grid *g, rh_err *e);
int calib_bench_batch_prep(calib_ctx *x, calib_grid *g, rh_err *e);
int calib_bench_schedule(calib_ctx *x, calib_grid *g, rh_err *e);
/* Whole forward passes for CT_STEP_PREFILL or CT_STEP_DECODE (steps.c); 1
 * when they cannot be run here (a note says why). */
int calib_bench_step(calib_ctx *x, int op, calib_grid *g, rh_err *e);
/* LoRA's shrink and expand GEMMs over a layer (lora.c), and adapter loads. */
int calib_bench_lora(calib_ctx *x, calib_grid *g, rh_err *e);
int calib_bench_lora_load(calib_ctx *x, calib_grid *g, rh_err *e);
int calib_bench_kv_copy(calib_ctx *x, calib_grid *g, rh_err *e);

/* The attention shape of one rank. */
kern_attn_shape calib_attn_shape(const calib_shape *s);
/* Plans a batch whose row0 and start are host arrays (kern_table.plan). */
void calib_plan(calib_ctx *x, const kern_attn_batch *b, const uint32_t *h_row0, const uint32_t *h_start);

/* Adds a note to the report (the front prints them). */
void calib_note(calib_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
