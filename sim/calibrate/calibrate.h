/* calibrate.h — kernel micro-benchmarks over a grid of shapes, written as a
 * `table` cost model (sim/cost/cost_table.h lists its operators, sim/cost/COST.md the
 * file).
 *
 * Every measurement runs a real entry of a backend's kern_table on the shapes
 * the forward pass (engine/model/forward.c) gives it for one model: each
 * layer's GEMMs over token counts, prefill attention over (new tokens,
 * context) of one chunk, decode attention over (sequences, summed context),
 * the norms, RoPE, KV write and SiLU·mul over tokens, the LM head over rows,
 * sampling; optionally whole forward passes of prefill chunks and decode
 * batches (steps.c: what the kernels' sum misses); the CPU time of a step outside the kernels — the runner's batch
 * preparation (runner_forward with every kernel timed and subtracted) and the
 * scheduler core's core_schedule — over sequences; and, under tensor
 * parallel, all-reduces over message sizes through the backend's hook. Each
 * point is repeated until its samples agree (measure.h).
 *
 * Backends plug in through calib_backend: a kernel table, a sync for
 * asynchronous devices, and an optional all-reduce timer. Memory the kernels
 * read as weights or KV is filled in the table's weight_dtype and kv_dtype
 * (bf16 on the GPU), and each attention batch is planned (kern_table.plan) as
 * the forward pass plans it. "cpu" is always there; "cuda" needs a build with
 * nvcc and a GPU (backend.c). Tests pass their own backend with a virtual
 * clock. */
#ifndef RH_CALIBRATE_H
#define RH_CALIBRATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/model/config.h"
#include "sim/calibrate/measure.h"
#include "kernels/kernels.h"
#include "util/err.h"

typedef struct calib_backend {
    const char *name;            /* written as the file's "backend" */
    const kern_table *K;
    void *ctx;                   /* handed to the hooks below */
    /* Waits until every kernel issued so far has finished; NULL when kernels
     * return finished (the CPU). */
    void (*sync)(void *ctx);
    /* The time of one all-reduce across `tp` ranks of each of bytes[0..n)
     * (seconds[i]; the backend repeats and takes its own median, since a
     * group of devices is set up once for all sizes). NULL, or a failure
     * (fewer devices than tp): a tp > 1 calibration skips the all-reduce
     * grid and says why. */
    int (*allreduce)(void *ctx, uint32_t tp, const uint64_t *bytes, size_t n, double *seconds, rh_err *e);
    /* The clock samples are timed with; NULL: rh_now. */
    double (*clock)(void *ctx);
    uint32_t threads;            /* threads the kernels run on, for the record */
    uint32_t activation_bytes;   /* bytes per activation element (what an all-reduce moves) */
} calib_backend;

/* "cpu", or "cuda" where this binary has the CUDA backend and a GPU; -1 and a
 * message saying which is missing otherwise. */
int calib_backend_find(const char *name, calib_backend *b, rh_err *e);
/* Names for help texts. */
const char *calib_backend_names(void);

typedef struct calib_opts {
    uint32_t tp;                 /* tensor-parallel size the shapes are split for (1) */
    uint32_t page_size;          /* KV page size of the attention kernels (16) */
    uint32_t max_tokens;         /* largest token count of the per-token grids (8192) */
    uint32_t max_seqs;           /* largest batch in sequences (256) */
    uint32_t max_context;        /* longest context measured; 0: the model's context length */
    bool quick;                  /* coarse grids and the quick rule: smoke runs and tests */
    kern_sampling sampling;      /* how sampling is timed (greedy) */
    calib_rule rule;
    uint64_t seed;               /* dummy weights and inputs */
    bool progress;               /* progress bar on stderr */
    bool skip_schedule;          /* leave the scheduler grid at zeros (tests) */
    bool whole_steps;            /* also time whole forwards (--whole-steps): step_prefill, step_decode */
    uint32_t lora_rank;          /* also time LoRA's kernels and loads at this rank (--lora-rank); 0: not */
} calib_opts;

void calib_opts_default(calib_opts *o);

typedef struct calib_report {
    uint32_t points, unconverged;
    double seconds;              /* wall time of the calibration */
    char notes[4][256];          /* what was skipped or approximated, and why */
    uint32_t n_notes;
} calib_report;

/* Runs the calibration of model c on backend b; returns the table cost file
 * as a JSON object (the caller owns it), or NULL with a message. Fails before
 * measuring on a tp that does not split the model, or a shape the backend
 * cannot run. */
json_t *calib_run(const calib_backend *b, const model_config *c, const calib_opts *o, calib_report *r, rh_err *e);

/* Writes the JSON to path (temp file + rename). */
int calib_save(json_t *table, const char *path, rh_err *e);

#endif
