/* cost_helpers.h — shared by the cost suites: the shipped presets as the
 * suite's preset folder, and Llama-3-8B's roofline on one H100 (SXM), the
 * model most of their closed forms are worked out for. */
#ifndef RH_TESTS_COST_HELPERS_H
#define RH_TESTS_COST_HELPERS_H

#include <stdio.h>
#include <stdlib.h>

#include "sim/cost/cost.h"
#include "testutil.h"

#define NEAR(a, b, rel) tu_close_rel((a), (b), (rel), #a, __LINE__)

/* A suite's init: presets resolve against the source tree's. */
static inline int ch_presets_init(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

static inline cost_model *ch_llama8b(void)
{
    rh_err e;
    cost_model *m = cost_parse("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", "
                               "\"gpu\": \"h100-sxm\", \"tp\": 1}", "roofline.json", &e);
    if (!m) printf("\n  %s\n", e.msg);
    return m;
}

#endif
