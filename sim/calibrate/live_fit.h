/* live_fit.h — a roofline cost model fitted to a server seen only from
 * outside: a client-side trace (`rehearse probe`, `bench --record-trace`)
 * holds each request's send time, lengths as served, TTFT and token times,
 * and nothing of the server's steps. So the fit runs the simulator in the
 * loop: for a trial of the four terms below it simulates the measured
 * requests (same sends, same lengths, same prefix blocks, the server's
 * scheduler knobs) and scores how far each request's simulated TTFT and
 * median inter-token latency lie from its measured ones (TPOT where the
 * trace has no token times), a robust loss of the logs of the ratios,
 * every request weighing the same. The median ITL is a request's decode
 * step, free of the stalls other requests' prefills put into its TPOT. Matching request by request matches the
 * distributions too; a mean alone could be met by errors that cancel.
 * Nelder–Mead over the logs of the terms (all stay positive), from one
 * start or (linear) two, the lower loss kept; the same trace and knobs give
 * the same fit. At the end each term's interval (live_fit_result).
 *
 * The terms: compute_efficiency and memory_efficiency (the deployment's
 * share of its GPU preset's kernels: prefill is compute-bound, decode
 * reads weights and KV), overheads.step_s (CPU per step) and
 * overheads.arrival_s (the network and HTTP between a client's send and the
 * scheduler: it sets TTFT's floor and which step an arrival catches). The
 * probe separates them: TTFT against prompt length (compute), ITL against
 * batch and context (memory against the per-step constant). A probe sends
 * token ids, so the one-at-a-time tokenizer (overheads.request_s) is not
 * seen and not fitted. */
#ifndef RH_CALIBRATE_LIVE_FIT_H
#define RH_CALIBRATE_LIVE_FIT_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/sim.h"
#include "traces/trace.h"
#include "util/err.h"

#define LIVE_MAX_TERMS 8
#define LIVE_RESID_Q 21         /* residual quantiles kept: every 5% */

/* What a kind of cost file fits: its terms by JSON path ("a.b": field b of
 * object a), their range, where the search starts, and which terms the
 * first stage fits from the ITLs alone (the second fits the others from
 * the TTFTs; the third, all). */
typedef struct live_kind {
    const char *name;
    int n;
    const char *term[LIVE_MAX_TERMS];
    double lo[LIVE_MAX_TERMS], hi[LIVE_MAX_TERMS], start[LIVE_MAX_TERMS];
    bool itl_stage[LIVE_MAX_TERMS];
    bool start_from_data;       /* scale the start from the trace's own ITL and TTFT (linear: no preset knows them) */
} live_kind;

/* A roofline's compute_efficiency, memory_efficiency, overheads.step_s,
 * overheads.arrival_s and overheads.request_s. */
extern const live_kind live_roofline;
/* The linear kind's five coefficients and the two arrival overheads: for
 * a server whose hardware no preset describes (rehearse's CPU engine). */
extern const live_kind live_linear;

typedef struct live_fit_opts {
    const live_kind *kind;      /* &live_roofline (default) or &live_linear */
    const char *base_json;      /* the cost file's text without the fitted terms
                                   (a roofline's model, gpu, tp, dtype, ...) */
    sim_config sim;             /* the server's scheduler knobs (open loop is forced) */
    int iters;                  /* Nelder–Mead iterations per restart (300) */
    int restarts;               /* (3) */
    /* Progress: called after each simulation with the evaluations so far,
     * the least loss seen (TTFT and ITL together, whatever the stage
     * weighs: one quantity that only falls) and this simulation's loss as
     * its stage weighs it. */
    void (*progress)(void *ctx, int evals, double loss, double stage_loss);
    void *ctx;
} live_fit_opts;

void live_fit_opts_default(live_fit_opts *o);

/* How close the fitted model comes, per request: |simulated − measured| /
 * measured, over the requests that have the metric. */
typedef struct live_fit_error {
    size_t n;
    double median, p90;
} live_fit_error;

enum { LIVE_ERR_TTFT, LIVE_ERR_ITL, LIVE_ERR_TPOT, LIVE_ERR_E2E, LIVE_N_ERRS };
extern const char *const live_err_names[LIVE_N_ERRS];

/* Whether the trace determines a term: its 95% interval is finite and
 * clear of 0 — or why not. */
enum live_ident {
    LIVE_IDENTIFIED = 0,
    LIVE_NOT_FROM_ZERO,     /* its interval reaches 0: the data cannot tell it from nothing */
    LIVE_NO_EFFECT,         /* no measured time moves with it */
    LIVE_CONFOUNDED,        /* only a mix of it and other terms moves the times */
};
extern const char *const live_ident_why[4];

typedef struct live_fit_result {
    double terms[LIVE_MAX_TERMS];   /* in the kind's order */
    int n_terms;
    /* Each term's 95% interval: the Gauss–Newton covariance of the fit
     * (the residuals' spread carried through the Jacobian of the simulated
     * times against the terms), lo clipped at 0; and what the trace says
     * of it. Infinite where ident is LIVE_NO_EFFECT or LIVE_CONFOUNDED. */
    double lo[LIVE_MAX_TERMS], hi[LIVE_MAX_TERMS];
    enum live_ident ident[LIVE_MAX_TERMS];
    double loss;                /* mean loss of the log ratios, TTFT and ITL together */
    int evals;
    size_t requests;            /* the measured requests the fit scored */
    live_fit_error err[LIVE_N_ERRS];
    /* The signed residuals, log(measured / simulated), of each request's
     * TTFT and median ITL under the fitted terms, at quantiles 0, 5, ...,
     * 100% (n_resid: how many; 0 when too few to say). */
    double resid_ttft[LIVE_RESID_Q], resid_itl[LIVE_RESID_Q];
    size_t n_resid[2];
    char *cost_json;            /* the fitted cost file (base + terms + a "fit" object), malloc'd */
} live_fit_result;

/* The measured requests a simulation can replay: those that produced
 * output (a request cut off by a budget keeps the tokens it got). A new
 * trace in out (its header copied). */
int live_fit_requests(const tr_trace *measured, tr_trace *out, rh_err *e);
/* The fit. measured must hold per-request TTFT and E2E. */
int live_fit(const tr_trace *measured, const live_fit_opts *o, live_fit_result *r, rh_err *e);
/* The base cost file with the given terms set, as text (malloc'd). */
char *live_fit_cost_text(const live_kind *k, const char *base_json, const double *terms, rh_err *e);
/* The intervals as a JSON object by term (jansson json_t*, new reference):
 * lo, hi (absent when unbounded), identified, why. */
void *live_fit_intervals_json(const live_kind *k, const live_fit_result *r);
/* The per-step noise a client-side trace shows (live_fit.c says how), and
 * the same as the cost file's "fit.step_noise" object (json_t*, new). */
double live_step_noise(const tr_trace *t, size_t *gaps_used);
void *live_step_noise_json(const tr_trace *t);
/* The residuals as the cost file's "fit.residuals" (json_t*, new). */
void *live_residuals_json(const live_fit_result *r);
void live_fit_result_free(live_fit_result *r);

#endif
