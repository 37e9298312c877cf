/* generate.h — one sequence, start to finish, without a scheduler.
 *
 * For the `rehearse model generate` front, tests and benchmarks: the prompt
 * is prefilled in chunks of `chunk` tokens (0: all at once), then tokens are
 * decoded one per step and sampled with the request's seeded stream. The
 * sequence uses pages 0, 1, 2, ... of the runner's pool, so the caller must
 * not share that runner with a scheduler. */
#ifndef RH_MODEL_GENERATE_H
#define RH_MODEL_GENERATE_H

#include <stdint.h>

#include "engine/model/runner.h"
#include "util/progress.h"

typedef struct gen_params {
    kern_sampling sampling;
    uint64_t seed;             /* the request's stream: the same seed, the same tokens */
    uint32_t chunk;            /* prefill chunk size; 0: the whole prompt in one step */
    uint32_t max_new;          /* tokens to generate */
    int32_t stop_id;           /* stop after producing this id; -1: never (ignore_eos) */
    rh_progress *progress;     /* advanced by prompt and generated tokens; NULL: none */
} gen_params;

/* Writes up to max_new ids to out; returns how many, or -1 with a message. */
int64_t gen_run(runner *r, const int32_t *prompt, uint32_t n_prompt, const gen_params *p, int32_t *out, rh_err *e);

#endif
