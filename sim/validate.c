/* validate.c — `rehearse validate TRACE --model M --cost COST [knobs] [-o DIR]`:
 * does the simulator tell the truth?
 *
 * Runs the real engine (replay, wall clock) and the simulator (virtual
 * clock, the cost model) on the same trace with the same knobs — the
 * simulator takes the engine's resolved knobs from the recording's header,
 * so both run exactly the same scheduler configuration — then prints every
 * metric measured, simulated and the error in %, and writes into DIR:
 *   recorded.rhtr, simulated.rhtr      both runs
 *   metrics.csv                        the table
 *   requests.csv, ttft_cdf/tpot_cdf/e2e_cdf.{png,svg}   CDF overlays
 *   steps.csv, step_scatter.{png,svg}  predicted against measured step time
 *   summary.json                       for the demo report */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/replay.h"
#include "engine/spec/hist.h"
#include "sim/cost_fit.h"
#include "sim/lua_api.h"
#include "sim/metrics.h"
#include "sim/plot.h"
#include "sim/sim.h"
#include "util/args.h"
#include "util/fs.h"
#include "util/progress.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rehearse validate TRACE --model MODEL --cost COST [-o DIR] [flags] [scheduler knobs]\n\n"
            "Runs TRACE through the real engine (replay) and through the simulator with COST,\n"
            "with the same knobs, and prints every metric measured, simulated and the error.\n"
            "Writes both runs, CSVs, CDF overlays of TTFT, TPOT and E2E and a predicted-vs-measured\n"
            "step-time scatter into DIR (default reports/validate).\n\n"
            "  --cost FILE               the cost model to check (required)\n"
            "  -o, --output DIR          where everything goes (reports/validate)\n"
            "  --json                    print the table as JSON\n"
            "  --max-concurrency, --rate-scale, --prompt-seed, --temperature, --top-p, --top-k\n"
            "                            as for rehearse replay\n"
            "the engine (--tp-size also sets the simulator's tensor-parallel size):\n%s"
            "speculative decoding, as for rehearse replay (the simulator takes the recording's\n"
            "accepted-length histogram):\n%s"
            "scheduler knobs:\n%s",
            engine_flags_help(), spec_config_help(), core_config_help());
}

static int bad(const char *msg)
{
    fprintf(stderr, "rehearse validate: %s\n", msg);
    return 1;
}

/* The metrics compared, by their JSON names. */
static const char *compared[] = {
    "completed", "duration", "request_throughput", "output_throughput", "total_token_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
    "mean_e2el_ms", "median_e2el_ms", "p90_e2el_ms", "p99_e2el_ms",
    "cache_hit_rate", "retractions", "steps", "mean_batch_size", "mean_kv_use", "busy_time",
    "spec_accept_rate", "mean_accepted_length",
};
#define N_COMPARED (sizeof compared / sizeof compared[0])

static double jnum(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (json_is_integer(v)) return (double)json_integer_value(v);
    if (json_is_real(v)) return json_real_value(v);
    if (json_is_true(v)) return 1;
    return 0;
}

static double err_pct(double meas, double sim)
{
    if (meas == 0) return sim == 0 ? 0 : NAN;
    return 100 * (sim - meas) / meas;
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
        fprintf(f, "%.6f\n", 1e3 * r->e2e);
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

static void plot_or_warn(plot_spec *s)
{
    rh_err e;
    if (plot_draw(s, &e) < 0) fprintf(stderr, "rehearse validate: plot %s: %s\n", s->out, e.msg);
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

int validate_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    replay_config rc;
    replay_config_default(&rc);
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    const char *cost_path = NULL, *dir = "reports/validate", *name;
    int json = 0, concurrency_given = 0;
    while ((name = rh_args_next(&a))) {
        if (!strcmp(name, "json")) {
            json = 1;
        } else if (!strcmp(name, "cost")) {
            if (!(cost_path = rh_args_value(&a, &e))) return bad(e.msg);
        } else if (!strcmp(name, "o") || !strcmp(name, "output")) {
            if (!(dir = rh_args_value(&a, &e))) return bad(e.msg);
        } else if (replay_config_takes_value(name) > 0) {
            const char *v = rh_args_value(&a, &e);
            if (!v || replay_config_set(&rc, name, v, &e) < 0) return bad(e.msg);
            if (!strcmp(name, "max-concurrency")) concurrency_given = 1;
        } else {
            int takes = core_config_takes_value(name);
            if (takes < 0) {
                snprintf(e.msg, sizeof e.msg, "unknown flag --%s (see rehearse validate --help)", name);
                return bad(e.msg);
            }
            const char *v = takes ? rh_args_value(&a, &e) : (a.inline_val ? rh_args_value(&a, &e) : "true");
            if (!v || core_config_set(&rc.engine.core, name, v, &e) < 0) return bad(e.msg);
        }
    }
    if (a.npos != 1) return bad("validate takes one TRACE file; see rehearse validate --help");
    if (!rc.engine.model) return bad("validate needs --model MODEL");
    if (!cost_path) return bad("validate needs --cost COST (the cost model to check)");
    if (core_config_validate(&rc.engine.core, &e) < 0) return bad(e.msg);
    if (rc.engine.tp.node_rank) return bad("validate runs node 0; run the other nodes with rehearse serve --node-rank");
    cost_model *cost = cost_load(cost_path, &e);
    if (!cost) return bad(e.msg);
    {
        /* A table measured with another BLAS thread count prices other steps. */
        json_t *cj = json_load_file(cost_path, 0, NULL);
        json_t *th = cj ? json_object_get(cj, "threads") : NULL;
        const char *be = cj ? json_string_value(json_object_get(cj, "backend")) : NULL;
        if (json_is_integer(th) && (!be || !strcmp(be, "cpu")) && (!rc.engine.kernels || rc.engine.kernels == kern_cpu()) &&
            json_integer_value(th) != kern_cpu_threads())
            fprintf(stderr, "rehearse validate: warning: %s was calibrated with %lld BLAS threads, the engine runs %d "
                            "(set OPENBLAS_NUM_THREADS to match)\n",
                    cost_path, (long long)json_integer_value(th), kern_cpu_threads());
        json_decref(cj);
    }
    tr_trace t;
    if (tr_trace_load(a.pos[0], &t, &e) < 0) {
        cost_free(cost);
        return bad(e.msg);
    }
    int status = 1;
    char recorded[4096], simulated[4096], path[4200];
    snprintf(recorded, sizeof recorded, "%s/recorded.rhtr", dir);
    snprintf(simulated, sizeof simulated, "%s/simulated.rhtr", dir);
    if (rh_mkdir_p(dir) < 0) {
        rh_fail(&e, "%s: cannot create the folder", dir);
        goto done;
    }
    const char *clients = tr_header_get(&t.header, "clients");
    if (!concurrency_given && clients && atol(clients) > 0) rc.max_concurrency = (uint32_t)atol(clients);

    /* 1. The real engine. */
    fprintf(stderr, "rehearse validate: 1/2 replaying %zu requests through the engine (%s)\n", t.n_requests,
            rc.engine.model);
    rc.out_path = recorded;
    rc.trace_name = a.pos[0];
    rc.progress = 1;
    replay_result rr;
    if (replay_run(&rc, &t, &rr, &e) < 0) goto done;

    /* 2. The simulator, with the knobs the engine resolved (pool size included). */
    fprintf(stderr, "rehearse validate: 2/2 simulating the same trace (%s)\n", cost_path);
    sim_config sc;
    sim_config_default(&sc);
    sc.core = rc.engine.core;
    tr_trace served;
    const tr_trace *to_sim = &t;
    size_t refused = 0;
    {
        tr_trace rec;
        if (tr_trace_load(recorded, &rec, &e) < 0) goto done;
        if (served_only(&t, &rec, &served, &refused, &e) < 0) {
            tr_trace_free(&rec);
            goto done;
        }
        if (refused) {
            to_sim = &served;
            fprintf(stderr, "rehearse validate: the engine refused %zu request%s (longer than the context or the "
                            "pool); the simulator gets the other %zu\n",
                    refused, refused == 1 ? "" : "s", served.n_requests);
        }
        for (uint32_t i = 0; i < rec.header.n_kv; i++) set_knob(&sc.core, rec.header.kv[i].key, rec.header.kv[i].value);
        /* Speculation as the engine ran it: its drafter's kind and the
         * accepted-length histogram it recorded. */
        const char *alg = tr_header_get(&rec.header, "speculative-algorithm");
        const char *hist = tr_header_get(&rec.header, SPEC_HIST_KEY);
        int bad_spec = (alg && strcasecmp(alg, "none") && sim_config_set(&sc, "speculative-algorithm", alg, &e) < 0) ||
                       (hist && sim_config_set(&sc, "speculative-accept-hist", hist, &e) < 0);
        tr_trace_free(&rec);
        if (bad_spec) {
            if (refused) tr_trace_free(&served);
            goto done;
        }
    }
    if (rc.engine.tp.tp_size > 1) sc.tp = rc.engine.tp.tp_size;   /* the cost model prices the group's steps */
    sc.rate_scale = rc.rate_scale;
    sc.max_concurrency = rc.max_concurrency;
    sc.out_path = simulated;
    sim_result sr;
    int sim_rc = sim_run(&sc, to_sim, cost, &sr, &e);
    if (refused) tr_trace_free(&served);
    if (sim_rc < 0) goto done;
    sim_result_free(&sr);

    /* 3. Side by side. */
    metrics_summary ms, ss;
    if (metrics_of_trace(recorded, NULL, &ms, &e) <= 0 || metrics_of_trace(simulated, NULL, &ss, &e) <= 0) {
        if (!e.msg[0]) rh_fail(&e, "a run holds no measured requests");
        goto done;
    }
    json_t *jm = metrics_to_json(&ms), *js = metrics_to_json(&ss);
    json_t *table = json_array();
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        rh_fail(&e, "%s: cannot write", path);
        json_decref(jm);
        json_decref(js);
        json_decref(table);
        goto done;
    }
    fprintf(f, "metric,measured,simulated,error_pct\n");
    if (!json) printf("%-26s %14s %14s %10s\n", "metric", "measured", "simulated", "error");
    for (size_t i = 0; i < N_COMPARED; i++) {
        double m = jnum(jm, compared[i]), s = jnum(js, compared[i]), er = err_pct(m, s);
        fprintf(f, "%s,%.6g,%.6g,%.3f\n", compared[i], m, s, er);
        if (!json) printf("%-26s %14.4g %14.4g %9.1f%%\n", compared[i], m, s, er);
        json_t *row = json_array();
        json_array_append_new(row, json_string(compared[i]));
        json_array_append_new(row, json_real(m));
        json_array_append_new(row, json_real(s));
        json_array_append_new(row, isnan(er) ? json_null() : json_real(er));
        json_array_append_new(table, row);
    }
    fclose(f);
    json_decref(jm);
    json_decref(js);

    /* 4. CDF overlays of per-request latencies. */
    snprintf(path, sizeof path, "%s/requests.csv", dir);
    f = fopen(path, "w");
    if (!f || fprintf(f, "source,ttft_ms,tpot_ms,e2e_ms\n") < 0 || request_rows(f, recorded, "measured", &e) < 0 ||
        request_rows(f, simulated, "simulated", &e) < 0) {
        if (f) fclose(f);
        json_decref(table);
        if (!e.msg[0]) rh_fail(&e, "%s: cannot write", path);
        goto done;
    }
    fclose(f);
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
        snprintf(titles[i], sizeof titles[i], "%s: measured engine against simulator", cdfs[i].label);
        p.out = outs[i];
        p.title = titles[i];
        p.xlabel = cdfs[i].label;
        plot_or_warn(&p);
    }

    /* 5. Step times, predicted against measured. */
    cost_err_summary errs[COST_N_CLASSES];
    char steps_csv[4200], scatter[4200];
    snprintf(steps_csv, sizeof steps_csv, "%s/steps.csv", dir);
    snprintf(scatter, sizeof scatter, "%s/step_scatter", dir);
    if (step_rows(steps_csv, recorded, cost, errs, &e) < 0) {
        json_decref(table);
        goto done;
    }
    plot_spec p;
    plot_spec_init(&p);
    p.kind = PLOT_SCATTER;
    p.csv = steps_csv;
    p.x = "measured_ms";
    p.y = "predicted_ms";
    p.by = "class";
    p.diagonal = 1;
    p.logx = p.logy = 1;
    p.out = scatter;
    p.title = "Step time: the cost model's prediction against the engine's measurement";
    p.xlabel = "measured step time (ms, log scale)";
    p.ylabel = "predicted step time (ms, log scale)";
    plot_or_warn(&p);
    json_t *steps = json_object();
    if (!json) printf("\nstep time error (|predicted - measured| / measured):\n");
    for (int c = 0; c < COST_N_CLASSES; c++) {
        if (!json && errs[c].n)
            printf("  %-8s %6zu steps   median %5.1f%%   p90 %5.1f%%   max %6.1f%%\n", cost_class_name(c), errs[c].n,
                   100 * errs[c].median, 100 * errs[c].p90, 100 * errs[c].max);
        json_t *o = json_object();
        json_object_set_new(o, "steps", json_integer((json_int_t)errs[c].n));
        json_object_set_new(o, "median_pct", json_real(100 * errs[c].median));
        json_object_set_new(o, "p90_pct", json_real(100 * errs[c].p90));
        json_object_set_new(o, "max_pct", json_real(100 * errs[c].max));
        json_object_set_new(steps, cost_class_name(c), o);
    }

    /* 6. The summary the demo report reads. */
    json_t *sum = json_object();
    json_object_set_new(sum, "trace", json_string(a.pos[0]));
    json_object_set_new(sum, "model", json_string(rc.engine.model));
    json_object_set_new(sum, "cost", json_string(cost_path));
    json_object_set_new(sum, "requests", json_integer((json_int_t)t.n_requests));
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
    const char *files[] = {"ttft_cdf.png", "tpot_cdf.png", "e2e_cdf.png", "step_scatter.png"};
    const char *caps[] = {
        "TTFT of every request: the engine's measurement and the simulator's prediction as two CDFs.",
        "TPOT of every request, measured and simulated.",
        "End-to-end latency of every request, measured and simulated.",
        "Every step the engine ran: the time the cost model predicts for its batch against the time it took; "
        "the dashed line is a perfect prediction."};
    for (int i = 0; i < 4; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "file", json_string(files[i]));
        json_object_set_new(o, "caption", json_string(caps[i]));
        json_array_append_new(plots, o);
    }
    json_object_set_new(sum, "plots", plots);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    if (json) {
        json_dumpf(sum, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
    }
    char *text = json_dumps(sum, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(sum);
    if (!text || rl_write_file_atomic(path, text, strlen(text), &e) < 0) {
        free(text);
        goto done;
    }
    free(text);
    if (!json) printf("\nwrote %s/ (recorded.rhtr, simulated.rhtr, metrics.csv, CDF and step plots)\n", dir);
    status = 0;
done:
    if (status) fprintf(stderr, "rehearse validate: %s\n", e.msg);
    tr_trace_free(&t);
    cost_free(cost);
    return status;
}
