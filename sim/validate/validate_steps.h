/* validate_steps.h — how well a cost model predicts the steps of a recorded
 * run: `rehearse validate-steps RECORDED COST [-o DIR]`.
 *
 * Every step record with work and a positive duration is priced from its
 * aggregates (cost_batch_from_step) and compared with its measured duration.
 * The relative error |predicted − measured| / measured is summarised per
 * class — prefill-only, decode-only and mixed steps — as median, p90 and max
 * (cost_step_errors). DIR receives steps.csv (one row per step: index,
 * class, measured and predicted milliseconds, relative error) and a scatter
 * plot of predicted against measured on log axes with the y = x line
 * (scatter.png and scatter.svg, through sim/plot/plot.h). Exit status 0 when the
 * comparison ran, 1 on any error (one message on stderr). */
#ifndef RH_VALIDATE_STEPS_H
#define RH_VALIDATE_STEPS_H

#include <stddef.h>

#include "sim/cost/cost.h"
#include "sim/cost/cost_fit.h"
#include "traces/trace.h"
#include "util/err.h"

typedef struct vs_result {
    cost_err_summary cls[COST_N_CLASSES];
    size_t used, skipped;           /* steps compared; steps with no work or no duration */
} vs_result;

/* Prices the steps (tensor-parallel size tp, 0: the model's own) and fills r.
 * csv_path, when not NULL, receives one row per compared step (written to a
 * temp file, then renamed). -1 with a message when no step is usable, the
 * model cannot price a step, or the CSV cannot be written. */
int validate_steps(const cost_model *m, const tr_step *steps, size_t n, uint32_t tp, const char *csv_path,
                   vs_result *r, rh_err *e);
/* The scatter of a steps CSV (validate_steps' or validate's): predicted
 * against measured milliseconds by class, log axes, the y = x line; OUT.png
 * and OUT.svg. */
int validate_steps_plot(const char *csv_path, const char *out, const char *title, const char *xlabel,
                        const char *ylabel, rh_err *e);

#endif
