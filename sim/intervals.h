/* intervals.h — prediction intervals: a simulation run K times, each run
 * with every step's time drawn from what the calibration left unexplained:
 *   - its noise: lognormal, the per-step noise the client saw
 *     ("fit.step_noise": each gap between tokens against its request's
 *     median; gpu_sigma, the same as the GPU's, each deviation over the
 *     forward's share of its step, applied to the GPU's time alone);
 *   - its model error: the median of log(measured / simulated) over the
 *     probe's requests ("fit.residuals": TTFT's for every step that
 *     computes prompt tokens, ITL's for decode steps), a fit's bias where
 *     it runs fast or slow. How much of a TTFT's error is its prefill
 *     step's (and how much the way in, the queue, the chunking around it)
 *     the client cannot tell, so each run takes a share of the bias drawn
 *     evenly between none and all of it, plus the median's standard error;
 *   - its terms: each drawn from its 95% interval ("fit.intervals":
 *     normal, half the interval over 1.96 its deviation, kept above 0).
 * Every metric's p5, p50 and p95 over the runs bound what the deployment
 * will show. Runs are seeded (seed + k), so the same question gives
 * the same bounds; they run in a fork pool. */
#ifndef RH_SIM_INTERVALS_H
#define RH_SIM_INTERVALS_H

#include <jansson.h>
#include <stdbool.h>

#include "sim/sim.h"

typedef struct sim_interval_opts {
    uint32_t runs;           /* K >= 2 */
    double sigma;            /* per-step noise; < 0: the cost file's fit.step_noise.sigma (0 when it has none) */
    bool draw_terms;         /* draw the fitted terms from fit.intervals */
    bool resample;           /* carry fit.residuals' bias into the steps */
    uint64_t seed;
    int workers;             /* 0: the processors */
    int progress;
} sim_interval_opts;

void sim_interval_opts_default(sim_interval_opts *o);

/* The cost file's per-step noise: fit.step_noise.gpu_sigma (*gpu_only set:
 * it scales the GPU's time alone), else its sigma (of whole steps); 0
 * without either. */
double sim_cost_step_noise(const char *cost_text, bool *gpu_only);

/* Runs cfg on t K times with the cost model cost_text (a cost file's JSON;
 * label for its relative paths, as cost_parse takes it). *out: {"runs": K,
 * "sigma": s, "terms_drawn": [names], "metrics": {name: {"p5", "p50",
 * "p95"}}} for every number metrics_to_json gives. 0, or -1 with the
 * message. */
int sim_intervals_run(const sim_config *cfg, const tr_trace *t, const char *cost_text, const char *label,
                      const sim_interval_opts *o, json_t **out, rh_err *e);

#endif
