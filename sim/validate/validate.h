/* validate.h — does the simulator tell the truth? The steps behind
 * `rehearse validate`.
 *
 * The real engine (replay, wall clock) and the simulator (virtual clock, a
 * cost model) run the same trace with the same knobs: the simulator takes the
 * engine's resolved knobs from the recording's header (pool size included)
 * and the requests the engine served, so both run exactly the same scheduler
 * configuration on the same requests. Then every metric is compared,
 * measured against simulated, and DIR receives:
 *   recorded.rhtr, simulated.rhtr      both runs
 *   metrics.csv                        the table
 *   requests.csv, ttft_cdf/tpot_cdf/e2e_cdf.{png,svg}   CDF overlays
 *   steps.csv, step_scatter.{png,svg}  predicted against measured step time
 *   summary.json                       for the demo report
 * The error of a metric is 100 · (simulated − measured) / measured: its sign
 * says which way the simulator errs, and it is relative to what happened. */
#ifndef RH_SIM_VALIDATE_H
#define RH_SIM_VALIDATE_H

#include <stddef.h>

#include "engine/replay.h"
#include "sim/cost/cost.h"
#include "sim/cost/cost_fit.h"
#include "sim/sim.h"
#include "traces/trace.h"
#include "util/err.h"

/* The metrics compared, by their JSON names (metrics_to_json). */
#define VALIDATE_N_METRICS 29
extern const char *const validate_metrics[VALIDATE_N_METRICS];

typedef struct validate_row {
    const char *metric;
    double measured, simulated;
    double error_pct;           /* NaN when measured is 0 and simulated is not */
} validate_row;

typedef struct validate_config {
    replay_config replay;       /* the engine side; out_path and trace_name are set by validate_run */
    const char *trace_path;     /* for the summary */
    const char *cost_path;
    const char *dir;            /* where everything goes */
    /* Progress notes ("1/2 replaying ..."); NULL: none. */
    void (*note)(void *ctx, const char *msg);
    void *ctx;
} validate_config;

typedef struct validate_report {
    validate_row rows[VALIDATE_N_METRICS];
    cost_err_summary steps[COST_N_CLASSES];     /* per step class, the recorded steps */
    size_t requests;
    bool has_steps;             /* the measured run has step records (the step errors and scatter) */
    void *summary;              /* jansson json_t*: summary.json's content; validate_report_free drops it */
} validate_report;

/* 100 · (simulated − measured) / measured; 0 when both are 0, NaN when only
 * measured is. */
double validate_error_pct(double measured, double simulated);
/* The metrics of two runs side by side, in validate_metrics order. */
int validate_compare(const char *measured_path, const char *simulated_path, validate_row rows[VALIDATE_N_METRICS],
                     rh_err *e);
/* A warning when a CPU table was calibrated with another BLAS thread count
 * than the engine runs with (it then prices other steps); "" otherwise. */
void validate_threads_warning(const char *cost_path, const replay_config *rc, char *out, size_t n);
/* Every step above: engine, simulator, comparison, plots, files. */
int validate_run(const validate_config *c, const tr_trace *t, const cost_model *cost, validate_report *out, rh_err *e);
/* `rehearse validate --measured RUN`: no engine run. The simulator, with
 * knobs (the server's; open loop is forced), gets the requests of
 * c->trace_path that produced output, sent when they were sent, with the
 * lengths they were served at and their prefix blocks; then the same
 * comparison, CDFs and a TTFT-against-length plot (and the step scatter
 * when RUN has step records). RUN comes from bench --record-trace against
 * any server, serve --record-trace, or probe. */
int validate_measured(const validate_config *c, const sim_config *knobs, const cost_model *cost,
                      validate_report *out, rh_err *e);
void validate_report_free(validate_report *r);
/* A warning when the measured and simulated prefix-cache hit rates are
 * more than 0.1 apart (a warm server measured, prefixes the trace cannot
 * show): the latencies then compare different work. "" otherwise. */
void validate_cache_warning(const validate_report *r, char *out, size_t n);

#endif
