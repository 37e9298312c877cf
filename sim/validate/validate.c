/* validate.c — see validate.h: the engine run, the simulation with the
 * engine's knobs, the comparison, the plots and the summary, each a step. */
#include "sim/validate/validate.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <strings.h>

#include "engine/speculative/hist.h"
#include "traces/import/import.h"
#include "traces/metrics/metrics.h"
#include "sim/calibrate/live_fit.h"
#include "sim/plot/plot.h"
#include "sim/sim.h"
#include "sim/validate/validate_steps.h"
#include "util/fs.h"
#include "util/atomic_file.h"

const char *const validate_metrics[VALIDATE_N_METRICS] = {
    "completed", "duration", "request_throughput", "output_throughput", "total_token_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
    "mean_e2el_ms", "median_e2el_ms", "p90_e2el_ms", "p99_e2el_ms",
    "cache_hit_rate", "cache_hit_rate_host", "retractions", "steps", "mean_batch_size", "mean_kv_use", "busy_time",
    "spec_accept_rate", "mean_accepted_length",
};

static void note(const validate_config *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const validate_config *c, const char *fmt, ...)
{
    if (!c->note) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->note(c->ctx, msg);
}

static double jnum(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (json_is_integer(v)) return (double)json_integer_value(v);
    if (json_is_real(v)) return json_real_value(v);
    if (json_is_true(v)) return 1;
    return 0;
}

double validate_error_pct(double measured, double simulated)
{
    if (measured == 0) return simulated == 0 ? 0 : NAN;
    return 100 * (simulated - measured) / measured;
}

int validate_compare(const char *measured_path, const char *simulated_path, validate_row rows[VALIDATE_N_METRICS],
                     rh_err *e)
{
    metrics_summary ms, ss;
    if (metrics_of_trace(measured_path, NULL, &ms, e) <= 0 || metrics_of_trace(simulated_path, NULL, &ss, e) <= 0) {
        if (!e->msg[0]) rh_fail(e, "a run holds no measured requests");
        return -1;
    }
    json_t *jm = metrics_to_json(&ms), *js = metrics_to_json(&ss);
    for (size_t i = 0; i < VALIDATE_N_METRICS; i++) {
        double m = jnum(jm, validate_metrics[i]), s = jnum(js, validate_metrics[i]);
        rows[i] = (validate_row){validate_metrics[i], m, s, validate_error_pct(m, s)};
    }
    json_decref(jm);
    json_decref(js);
    return 0;
}

void validate_threads_warning(const char *cost_path, const replay_config *rc, char *out, size_t n)
{
    out[0] = 0;
    json_t *cj = json_load_file(cost_path, 0, NULL);
    json_t *th = cj ? json_object_get(cj, "threads") : NULL;
    const char *be = cj ? json_string_value(json_object_get(cj, "backend")) : NULL;
    if (json_is_integer(th) && (!be || !strcmp(be, "cpu")) && (!rc->engine.kernels || rc->engine.kernels == kern_cpu()) &&
        json_integer_value(th) != kern_cpu_threads())
        snprintf(out, n, "%s was calibrated with %lld BLAS threads, the engine runs %d (set OPENBLAS_NUM_THREADS to match)",
                 cost_path, (long long)json_integer_value(th), kern_cpu_threads());
    json_decref(cj);
}

/* Per-request latencies of one run, appended to the CSV. */
static int request_rows(FILE *f, const char *path, const char *source, rh_err *e)
{
    tr_trace t;
    if (tr_trace_load(path, &t, e) < 0) return -1;
    for (size_t i = 0; i < t.n_requests; i++) {
        const tr_request *r = &t.requests[i];
        if (!(r->flags & TR_REQ_MEASURED) || (r->finish != TR_FINISH_LENGTH && r->finish != TR_FINISH_STOP)) continue;
        double tpot = r->output_len > 1 ? (r->e2e - r->ttft) / (r->output_len - 1) : NAN;
        fprintf(f, "%s,%.6f,", source, 1e3 * r->ttft);
        if (isnan(tpot)) fprintf(f, ",");
        else fprintf(f, "%.6f,", 1e3 * tpot);
        fprintf(f, "%.6f,%u\n", 1e3 * r->e2e, r->input_len);
    }
    tr_trace_free(&t);
    return 0;
}

/* Every recorded step, measured and predicted. */
static int step_rows(const char *csv, const char *recorded, const cost_model *cost,
                     cost_err_summary errs[COST_N_CLASSES], rh_err *e)
{
    tr_trace t;
    if (tr_trace_load(recorded, &t, e) < 0) return -1;
    int rc = cost_step_errors(cost, t.steps, t.n_steps, 0, errs, e);
    FILE *f = rc == 0 ? fopen(csv, "w") : NULL;
    if (rc == 0 && !f) rc = rh_fail(e, "%s: cannot write", csv);
    if (f) {
        fprintf(f, "class,measured_ms,predicted_ms\n");
        for (size_t i = 0; i < t.n_steps; i++) {
            int c = cost_step_class(&t.steps[i]);
            if (c < 0 || !(t.steps[i].duration > 0)) continue;
            cost_batch b;
            cost_batch_from_step(&b, &t.steps[i]);
            fprintf(f, "%s,%.6f,%.6f\n", cost_class_name(c), 1e3 * t.steps[i].duration, 1e3 * cost_step_time(cost, &b));
        }
        if (fclose(f) != 0) rc = rh_fail(e, "%s: write failed", csv);
    }
    tr_trace_free(&t);
    return rc;
}

static void plot_or_warn(const validate_config *c, plot_spec *s)
{
    rh_err e;
    if (plot_draw(s, &e) < 0) note(c, "plot %s: %s", s->out, e.msg);
}

static int set_knob(void *ctx, const char *k, const char *v)
{
    rh_err e;
    return core_config_set(ctx, k, v, &e);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The requests of `t` the engine did not refuse (a refused request is in the
 * recording with no output and the error finish: longer than the model's
 * context or the whole pool). The simulator gets these, so both sides serve
 * the same requests where the simulator would otherwise stop at the first
 * request it cannot run. *refused: how many were left out (0: out untouched). */
static int served_only(const tr_trace *t, const tr_trace *rec, tr_trace *out, size_t *refused, rh_err *e)
{
    *refused = 0;
    uint64_t *ids = malloc((rec->n_requests + 1) * sizeof *ids);
    if (!ids) return rh_fail(e, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < rec->n_requests; i++)
        if (rec->requests[i].finish == TR_FINISH_ERROR && rec->requests[i].output_len == 0)
            ids[n++] = rec->requests[i].id;
    if (!n) {
        free(ids);
        return 0;
    }
    qsort(ids, n, sizeof *ids, cmp_u64);
    tr_trace_init(out);
    tr_header_free(&out->header);   /* tr_header_copy makes the header anew */
    int rc = tr_header_copy(&out->header, &t->header) < 0 ? rh_fail(e, "out of memory") : 0;
    for (size_t i = 0; i < t->n_requests && rc == 0; i++) {
        if (bsearch(&t->requests[i].id, ids, n, sizeof *ids, cmp_u64)) (*refused)++;
        else rc = tr_trace_add_request(out, &t->requests[i], e);
    }
    free(ids);
    if (rc < 0) tr_trace_free(out);
    return rc;
}

/* Step 2: the simulator on the requests the engine served, with the knobs
 * the engine resolved (the recording's header), speculation as the engine
 * ran it, and the same sending. */
static int simulate(const validate_config *c, const tr_trace *t, const char *recorded, const cost_model *cost,
                    const char *simulated, rh_err *e)
{
    const replay_config *rc = &c->replay;
    sim_config sc;
    sim_config_default(&sc);
    sc.core = rc->engine.core;
    tr_trace served, rec;
    const tr_trace *to_sim = t;
    size_t refused = 0;
    if (tr_trace_load(recorded, &rec, e) < 0) return -1;
    if (served_only(t, &rec, &served, &refused, e) < 0) {
        tr_trace_free(&rec);
        return -1;
    }
    if (refused) {
        to_sim = &served;
        note(c, "the engine refused %zu request%s (longer than the context or the pool); the simulator gets the "
                "other %zu",
             refused, refused == 1 ? "" : "s", served.n_requests);
    }
    for (uint32_t i = 0; i < rec.header.n_kv; i++) set_knob(&sc.core, rec.header.kv[i].key, rec.header.kv[i].value);
    /* Speculation as the engine ran it: its drafter's kind and the
     * accepted-length histogram it recorded. */
    const char *alg = tr_header_get(&rec.header, "speculative-algorithm");
    const char *hist = tr_header_get(&rec.header, SPEC_HIST_KEY);
    int bad_spec = (alg && strcasecmp(alg, "none") && sim_config_set(&sc, "speculative-algorithm", alg, e) < 0) ||
                   (hist && sim_config_set(&sc, "speculative-accept-hist", hist, e) < 0);
    tr_trace_free(&rec);
    int rc_sim = -1;
    if (!bad_spec) {
        if (rc->engine.tp.tp_size > 1) sc.tp = rc->engine.tp.tp_size;   /* the cost model prices the group's steps */
        sc.rate_scale = rc->rate_scale;
        sc.max_concurrency = rc->max_concurrency;
        sc.out_path = simulated;
        sim_result sr;
        rc_sim = sim_run(&sc, to_sim, cost, &sr, e);
        if (rc_sim == 0) sim_result_free(&sr);
    }
    if (refused) tr_trace_free(&served);
    return rc_sim;
}

/* Step 3: the table, as metrics.csv. */
static int write_metrics(const char *dir, const validate_row rows[VALIDATE_N_METRICS], rh_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    FILE *f = fopen(path, "w");
    if (!f) return rh_fail(e, "%s: cannot write", path);
    fprintf(f, "metric,measured,simulated,error_pct\n");
    for (size_t i = 0; i < VALIDATE_N_METRICS; i++)
        fprintf(f, "%s,%.6g,%.6g,%.3f\n", rows[i].metric, rows[i].measured, rows[i].simulated, rows[i].error_pct);
    fclose(f);
    return 0;
}

/* Step 4: CDF overlays of per-request latencies. */
static int plot_cdfs(const validate_config *c, const char *dir, const char *recorded, const char *simulated, rh_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/requests.csv", dir);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "source,ttft_ms,tpot_ms,e2e_ms,input_len\n") < 0 || request_rows(f, recorded, "measured", e) < 0 ||
        request_rows(f, simulated, "simulated", e) < 0) {
        if (f) fclose(f);
        if (!e->msg[0]) rh_fail(e, "%s: cannot write", path);
        return -1;
    }
    fclose(f);
    {   /* TTFT against prompt length: where prefill's price shows */
        plot_spec p;
        plot_spec_init(&p);
        char out[4200];
        snprintf(out, sizeof out, "%s/ttft_vs_length", dir);
        p.kind = PLOT_SCATTER;
        p.csv = path;
        p.x = "input_len";
        p.y = "ttft_ms";
        p.by = "source";
        p.out = out;
        p.title = "TTFT against prompt length: measured and simulated";
        p.xlabel = "prompt tokens (log scale)";
        p.ylabel = "TTFT (ms, log scale)";
        p.logx = p.logy = 1;
        plot_or_warn(c, &p);
    }
    struct { const char *col, *out, *label; } cdfs[] = {
        {"ttft_ms", "ttft_cdf", "TTFT (ms)"}, {"tpot_ms", "tpot_cdf", "TPOT (ms)"}, {"e2e_ms", "e2e_cdf", "end-to-end latency (ms)"}};
    char outs[3][4200], titles[3][256];
    for (int i = 0; i < 3; i++) {
        plot_spec p;
        plot_spec_init(&p);
        p.kind = PLOT_CDF;
        p.csv = path;
        p.y = cdfs[i].col;
        p.by = "source";
        snprintf(outs[i], sizeof outs[i], "%s/%s", dir, cdfs[i].out);
        snprintf(titles[i], sizeof titles[i], "%s: measured against simulated", cdfs[i].label);
        p.out = outs[i];
        p.title = titles[i];
        p.xlabel = cdfs[i].label;
        plot_or_warn(c, &p);
    }
    return 0;
}

/* Step 5: step times, predicted against measured. */
static int plot_steps(const validate_config *c, const char *recorded, const cost_model *cost,
                      cost_err_summary errs[COST_N_CLASSES], rh_err *e)
{
    char steps_csv[4200], scatter[4200];
    snprintf(steps_csv, sizeof steps_csv, "%s/steps.csv", c->dir);
    snprintf(scatter, sizeof scatter, "%s/step_scatter", c->dir);
    if (step_rows(steps_csv, recorded, cost, errs, e) < 0) return -1;
    rh_err pe;
    if (validate_steps_plot(steps_csv, scatter, "Step time: the cost model's prediction against the engine's measurement",
                            "measured step time (ms, log scale)", "predicted step time (ms, log scale)", &pe) < 0)
        note(c, "plot %s: %s", scatter, pe.msg);
    return 0;
}

/* Step 6: the summary the demo report reads (and --json prints). */
static json_t *summary_json(const validate_config *c, const validate_report *r)
{
    json_t *steps = json_object();
    for (int k = 0; k < COST_N_CLASSES; k++) {
        json_t *o = json_object();
        json_object_set_new(o, "steps", json_integer((json_int_t)r->steps[k].n));
        json_object_set_new(o, "median_pct", json_real(100 * r->steps[k].median));
        json_object_set_new(o, "p90_pct", json_real(100 * r->steps[k].p90));
        json_object_set_new(o, "max_pct", json_real(100 * r->steps[k].max));
        json_object_set_new(steps, cost_class_name(k), o);
    }
    json_t *table = json_array();
    for (size_t i = 0; i < VALIDATE_N_METRICS; i++) {
        const validate_row *w = &r->rows[i];
        json_t *row = json_array();
        json_array_append_new(row, json_string(w->metric));
        json_array_append_new(row, json_real(w->measured));
        json_array_append_new(row, json_real(w->simulated));
        json_array_append_new(row, isnan(w->error_pct) ? json_null() : json_real(w->error_pct));
        json_array_append_new(table, row);
    }
    json_t *sum = json_object();
    json_object_set_new(sum, "trace", json_string(c->trace_path));
    json_object_set_new(sum, "model", json_string(c->replay.engine.model ? c->replay.engine.model : ""));
    json_object_set_new(sum, "cost", json_string(c->cost_path));
    json_object_set_new(sum, "requests", json_integer((json_int_t)r->requests));
    json_object_set_new(sum, "step_errors", steps);
    json_t *tbl = json_object(), *cols = json_array();
    json_array_append_new(cols, json_string("metric"));
    json_array_append_new(cols, json_string("measured"));
    json_array_append_new(cols, json_string("simulated"));
    json_array_append_new(cols, json_string("error %"));
    json_object_set_new(tbl, "columns", cols);
    json_object_set_new(tbl, "rows", table);
    json_object_set_new(sum, "table", tbl);
    json_t *plots = json_array();
    const char *files[] = {"ttft_cdf.png", "tpot_cdf.png", "e2e_cdf.png", "ttft_vs_length.png", "step_scatter.png"};
    const char *caps[] = {
        "TTFT of every request: the measurement and the simulator's prediction as two CDFs.",
        "TPOT of every request, measured and simulated.",
        "End-to-end latency of every request, measured and simulated.",
        "TTFT of every request against its prompt length, measured and simulated.",
        "Every step the engine ran: the time the cost model predicts for its batch against the time it took; "
        "the dashed line is a perfect prediction."};
    int n_plots = r->has_steps ? 5 : 4;
    for (int i = 0; i < n_plots; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "file", json_string(files[i]));
        json_object_set_new(o, "caption", json_string(caps[i]));
        json_array_append_new(plots, o);
    }
    json_object_set_new(sum, "plots", plots);
    return sum;
}

static int write_summary(const validate_config *c, validate_report *out, rh_err *e)
{
    char path[4200];
    json_t *sum = summary_json(c, out);
    snprintf(path, sizeof path, "%s/summary.json", c->dir);
    char *text = json_dumps(sum, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    if (!text || rh_write_file_atomic(path, text, strlen(text), e) < 0) {
        free(text);
        json_decref(sum);
        return -1;
    }
    free(text);
    out->summary = sum;
    return 0;
}

int validate_run(const validate_config *c, const tr_trace *t, const cost_model *cost, validate_report *out, rh_err *e)
{
    memset(out, 0, sizeof *out);
    out->requests = t->n_requests;
    char recorded[4096], simulated[4096];
    snprintf(recorded, sizeof recorded, "%s/recorded.rhtr", c->dir);
    snprintf(simulated, sizeof simulated, "%s/simulated.rhtr", c->dir);
    if (rh_mkdir_p(c->dir) < 0) return rh_fail(e, "%s: cannot create the folder", c->dir);

    /* Step 1: the real engine. */
    note(c, "1/2 replaying %zu requests through the engine (%s)", t->n_requests, c->replay.engine.model);
    replay_config rc = c->replay;
    rc.out_path = recorded;
    rc.trace_name = c->trace_path;
    replay_result rr;
    if (replay_run(&rc, t, &rr, e) < 0) return -1;

    out->has_steps = true;
    note(c, "2/2 simulating the same trace (%s)", c->cost_path);
    if (simulate(c, t, recorded, cost, simulated, e) < 0) return -1;
    if (validate_compare(recorded, simulated, out->rows, e) < 0 || write_metrics(c->dir, out->rows, e) < 0 ||
        plot_cdfs(c, c->dir, recorded, simulated, e) < 0 || plot_steps(c, recorded, cost, out->steps, e) < 0)
        return -1;
    return write_summary(c, out, e);
}

int validate_measured(const validate_config *c, const sim_config *knobs, const cost_model *cost,
                      validate_report *out, rh_err *e)
{
    memset(out, 0, sizeof *out);
    char simulated[4096];
    snprintf(simulated, sizeof simulated, "%s/simulated.rhtr", c->dir);
    if (rh_mkdir_p(c->dir) < 0) return rh_fail(e, "%s: cannot create the folder", c->dir);
    tr_trace t, served;
    if (tr_trace_load(c->trace_path, &t, e) < 0) return -1;
    int rc = live_fit_requests(&t, &served, e);
    out->has_steps = t.n_steps > 0;
    tr_trace_free(&t);
    if (rc < 0) return -1;
    out->requests = served.n_requests;
    note(c, "simulating the %zu requests %s served (%s)", served.n_requests, c->trace_path, c->cost_path);
    sim_config sc = *knobs;
    sc.rate_scale = 1;          /* the measured sends, as they happened */
    sc.max_concurrency = 0;
    sc.out_path = simulated;
    sim_result sr;
    rc = sim_run(&sc, &served, cost, &sr, e);
    tr_trace_free(&served);
    if (rc < 0) return -1;
    sim_result_free(&sr);
    if (validate_compare(c->trace_path, simulated, out->rows, e) < 0 || write_metrics(c->dir, out->rows, e) < 0 ||
        plot_cdfs(c, c->dir, c->trace_path, simulated, e) < 0 ||
        (out->has_steps && plot_steps(c, c->trace_path, cost, out->steps, e) < 0))
        return -1;
    return write_summary(c, out, e);
}

void validate_cache_warning(const validate_report *r, char *out, size_t n)
{
    out[0] = '\0';
    for (int i = 0; i < VALIDATE_N_METRICS; i++) {
        if (strcmp(validate_metrics[i], "cache_hit_rate")) continue;   /* rows are in this order */
        double m = r->rows[i].measured, s = r->rows[i].simulated;
        if (fabs(m - s) <= 0.1) return;
        snprintf(out, n,
                 "the prefix cache hit %.3f of prompt tokens in the measured run and %.3f in the simulation: "
                 "the %s did work the other did not, so TTFT and throughput compare different work. %s",
                 m, s, m > s ? "simulation" : "server",
                 m > s ? "A server measured warm (restart it or POST /flush_cache before the run), or prompts "
                         "sharing prefixes the trace's block hashes do not show, explain a higher measured rate."
                       : "A server with its prefix cache off, or a smaller pool than the simulation's, explains a "
                         "lower measured rate: give the simulation the server's knobs.");
        return;
    }
}

void validate_report_free(validate_report *r)
{
    json_decref(r->summary);
    r->summary = NULL;
}
