/* cost_fit.h — fitting the linear cost model to step records, and measuring
 * how well any cost model predicts them.
 *
 * cost_fit_steps solves a non-negative least-squares problem over the five
 * linear features (cost_linear_features) of each step: every coefficient is
 * a time per unit of work, so none may be negative. By default each step's
 * residual is divided by its measured duration, so the fit minimises the
 * squared relative error — the error `rehearse fit` reports — and a 20 ms
 * decode weighs as much as a 2 s prefill. The steps are an in-memory array;
 * reading them from a trace file is the caller's job (cli/cost.c).
 *
 * Steps are classed as prefill (prefill chunks only), decode (decodes only)
 * or mixed (both), the classes whose error is reported separately. */
#ifndef RH_COST_FIT_H
#define RH_COST_FIT_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/cost/cost.h"
#include "traces/trace.h"
#include "util/err.h"

enum cost_step_class { COST_CLASS_PREFILL = 0, COST_CLASS_DECODE, COST_CLASS_MIXED, COST_N_CLASSES };

/* The class of a step, or -1 for a step that computed nothing. */
int cost_step_class(const tr_step *s);
const char *cost_class_name(int c);          /* "prefill", "decode", "mixed" */

/* Relative error |predicted − measured| / measured over a class of steps. */
typedef struct cost_err_summary {
    size_t n;
    double median, p90, max, mean;
} cost_err_summary;

/* Predicts every step (tensor-parallel size tp, 0: the model's own) and
 * summarises the relative error per class. Steps that computed nothing or
 * have no positive duration are not counted. -1 when the model cannot price
 * a step (a tp it refuses) or memory runs out. */
int cost_step_errors(const cost_model *m, const tr_step *steps, size_t n, uint32_t tp,
                     cost_err_summary out[COST_N_CLASSES], rh_err *e);

typedef struct cost_fit_opts {
    double draft_ratio;     /* how drafting is priced (COST_DRAFT_RATIO_DEFAULT; 0: free drafts) */
    bool absolute;          /* minimise squared seconds instead of squared relative error */
} cost_fit_opts;

typedef struct cost_fit_result {
    cost_linear_coef coef;  /* seconds; all >= 0 */
    size_t used;            /* steps that entered the fit */
    size_t skipped;         /* steps with no work or no positive duration */
    /* false: no step exercised this feature (e.g. no prefill with context),
     * so the data says nothing about it and its coefficient is left 0.
     * Order of cost_linear_coef. */
    bool determined[5];
    double rms;             /* root mean squared (relative, unless absolute) residual */
} cost_fit_result;

void cost_fit_opts_default(cost_fit_opts *o);

/* The coefficients of cost_linear_coef by their file names, and why the
 * data can leave each undetermined. */
extern const char *const cost_fit_coef_names[5];
extern const char *const cost_fit_undetermined_why[5];

/* The whole of `rehearse fit`: the step records of RECORDED fitted, the fit's
 * error per class measured on them, and OUT written as a linear cost file
 * for tensor-parallel size tp (0: the recording's tp-size, else 1) with the
 * fit's provenance in its "fit" object (the trace, model, steps, weighting,
 * residual, errors, undetermined coefficients). */
typedef struct cost_fit_report {
    cost_fit_result fit;
    cost_err_summary errors[COST_N_CLASSES];
    uint32_t tp;
    void *provenance;           /* jansson json_t*: the "fit" object; cost_fit_report_free drops it */
} cost_fit_report;
int cost_fit_file(const char *recorded, const char *out, const cost_fit_opts *o, uint32_t tp, cost_fit_report *r,
                  rh_err *e);
void cost_fit_report_free(cost_fit_report *r);
/* Fits; -1 with a message when no step is usable. */
int cost_fit_steps(const tr_step *steps, size_t n, const cost_fit_opts *o, cost_fit_result *r, rh_err *e);

#endif
