/* cost_noise.c — see cost_noise.h. */
#include "sim/cost/cost_noise.h"

#include <math.h>

static double factor(const cost_noise *n, const cost_batch *b)
{
    double f = n->sigma > 0 ? exp(n->sigma * rh_rng_normal(n->rng)) : 1;
    double scale = b->prefill_tokens ? n->prefill_scale : n->decode_scale;
    return scale > 0 ? f * scale : f;
}

static double noise_step(const cost_model *m, const cost_batch *b)
{
    const cost_noise *n = (const cost_noise *)m;
    return cost_step_time(n->inner, b) * factor(n, b);
}

/* The inner model's parts (its overheads inside them), the GPU's times the
 * factor, the host's as they are unless whole_step. */
static void noise_parts(const cost_model *m, const cost_batch *b, cost_parts *out)
{
    const cost_noise *n = (const cost_noise *)m;
    cost_step_parts(n->inner, b, out);
    double f = factor(n, b);
    out->forward_s *= f;
    out->draft_s *= f;
    if (n->whole_step) {
        out->launch_s *= f;
        out->exposed_s *= f;
        out->hidden_s *= f;
    }
}

static void noise_serving(const cost_model *m, uint32_t tp, cost_serving *out)
{
    cost_serving_default(((const cost_noise *)m)->inner, tp, out);
}

static void noise_memory(const cost_model *m, uint32_t tp, const cost_serving *sv, cost_memory *out)
{
    cost_memory_of_serving(((const cost_noise *)m)->inner, tp, sv, out);
}

static int noise_check_tp(const cost_model *m, uint32_t tp, rh_err *e)
{
    return cost_check_tp(((const cost_noise *)m)->inner, tp, e);
}

static int noise_check_serving(const cost_model *m, uint32_t tp, const cost_serving *s, rh_err *e)
{
    return cost_serving_check(((const cost_noise *)m)->inner, tp, s, e);
}

/* No by_aggregates: a step's price is drawn, never remembered. */
static const cost_ops noise_ops = {.kind = "noisy", .step_time = noise_step, .check_tp = noise_check_tp,
                                   .memory = noise_memory, .parts = noise_parts, .serving = noise_serving,
                                   .check_serving = noise_check_serving};

void cost_noise_init(cost_noise *n, const cost_model *inner, double sigma, rh_rng *rng)
{
    static char path[] = "";
    *n = (cost_noise){.base = {.ops = &noise_ops, .path = inner->path ? inner->path : path,
                               .draft_ratio = inner->draft_ratio, .over = inner->over},
                      .inner = inner, .sigma = sigma, .rng = rng};
    /* The inner model's step and forward overheads are inside its parts
     * already; the per-request ones the simulator reads from here. */
    n->base.over.step_s = n->base.over.forward_s = 0;
}
