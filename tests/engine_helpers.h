/* engine_helpers.h — shared by the test_engine*.c and test_replay*.c suites:
 * the tiny model, random prompts, and the reference every engine result is
 * compared with: the same prompt generated alone by gen_run, with no
 * scheduler, no batching and no cache. */
#ifndef RH_TESTS_ENGINE_HELPERS_H
#define RH_TESTS_ENGINE_HELPERS_H

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/model/generate.h"

#define EH_WEIGHT_SEED 42

static inline model *eh_tiny_model(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    model *m = model_new_dummy(&c, EH_WEIGHT_SEED, 0, &e);
    if (!m) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(m != NULL);
    return m;
}

static inline void eh_random_prompt(uint64_t seed, uint32_t vocab, int32_t *out, uint32_t n)
{
    uint64_t s = kern_rng_init(seed);
    for (uint32_t i = 0; i < n; i++) out[i] = (int32_t)(rh_splitmix_unit(&s) * vocab);
}

/* The prompt generated alone: out gets max_new ids; returns how many. */
static inline int64_t eh_reference(const model *m, const int32_t *prompt, uint32_t n, kern_sampling sp, uint64_t seed,
                                   uint32_t max_new, int32_t *out)
{
    uint32_t pages = (n + max_new + 15) / 16;
    runner_config rc = {16, pages, 0, NULL};
    rh_err e;
    runner *r = runner_new(m, &rc, &e);
    CU_ASSERT_FATAL(r != NULL);
    gen_params gp = {sp, seed, 0, max_new, -1, NULL};
    int64_t made = gen_run(r, prompt, n, &gp, out, &e);
    if (made < 0) printf("\n  reference: %s\n", e.msg);
    runner_free(r);
    return made;
}

/* Counts the positions where two id arrays differ (and prints the first). */
static inline uint32_t eh_mismatches(const char *what, uint64_t id, const int32_t *got, uint32_t n_got,
                                     const int32_t *want, uint32_t n_want)
{
    uint32_t bad = n_got == n_want ? 0 : 1;
    uint32_t n = n_got < n_want ? n_got : n_want;
    for (uint32_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            if (!bad) printf("\n    %s, request %llu: token %u is %d, alone it is %d\n", what, (unsigned long long)id, i,
                             got[i], want[i]);
            bad++;
        }
    if (n_got != n_want) printf("\n    %s, request %llu: %u tokens, alone %u\n", what, (unsigned long long)id, n_got, n_want);
    return bad;
}

#endif
