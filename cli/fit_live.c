/* fit_live.c — `rehearse fit TRACE --model M --gpu G -o COST`: a roofline
 * fitted to a client-side trace with the simulator in the loop
 * (sim/calibrate/live_fit.h); prints the terms and the per-request error of
 * TTFT, TPOT and E2E, writes COST and two plots (TTFT against prompt
 * length, TPOT against concurrency: measured and fitted). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sim/calibrate/live_fit.h"
#include "sim/plot/plot.h"
#include "traces/import/import.h"
#include "util/args.h"
#include "util/atomic_file.h"
#include "util/fs.h"
#include "util/progress.h"

static const char *help =
    "usage: rehearse fit TRACE --model PRESET --gpu PRESET -o COST [--tp N] [flags] [scheduler knobs]\n"
    "       rehearse fit TRACE --kind linear -o COST [flags] [scheduler knobs]\n\n"
    "Fits a cost model to a server seen from outside: TRACE is client-side (rehearse\n"
    "probe, or rehearse bench --record-trace against any server). The simulator replays\n"
    "TRACE's requests (sends, lengths, prefixes) with the server's scheduler knobs, and\n"
    "the terms are searched (Nelder-Mead) until each request's simulated TTFT and median\n"
    "inter-token latency are closest to the measured ones: a roofline's\n"
    "compute_efficiency, memory_efficiency and overheads.step_s, or the linear kind's\n"
    "five coefficients; with either, overheads.arrival_s and request_s. Prints the terms,\n"
    "each with its 95% interval and whether the trace determines it (not identified: its\n"
    "interval reaches 0, no measured time depends on it, or it moves only with others),\n"
    "the per-request error of TTFT, ITL, TPOT and E2E, writes COST and plots.\n"
    "  --model PRESET     the served model (sim/cost/presets/models)\n"
    "  --gpu PRESET       its GPU (sim/cost/presets/gpus)\n"
    "  --tp N             tensor-parallel size (1)\n"
    "  --kind K           roofline (with --model and --gpu; the default) or linear (no\n"
    "                     preset: for hardware none describes, e.g. rehearse's CPU engine)\n"
    "  --dtype D          bf16 or fp8 (bf16); --kv-dtype D as the roofline's\n"
    "  --host H           the serving framework's host preset the roofline keeps (sglang; none: no host time)\n"
    "  -o COST            the cost file to write (required)\n"
    "  --plot-dir DIR     where the plots go (reports/fit)\n"
    "  --no-plot          no plots\n"
    "  --json             print the result as JSON\n"
    "  --allow-failed     fit a trace that holds failed requests (refused otherwise: a fit of the\n"
    "                     rest fits what the server chose to serve)\n"
    "the server's knobs: --scheduler sglang|vllm, --chunked-prefill-size, --max-running-requests,\n"
    "--page-size, --mem-fraction-static, ... as for rehearse sim (a rehearse serve recording's\n"
    "header gives its own; flags win).\n"
    "Without --model and --gpu, fit reads step records (rehearse fit --help).\n";

static int fail(const char *msg)
{
    fprintf(stderr, "rehearse fit: %s\n", msg);
    return 1;
}

/* The evaluations are counted against a bound the search rarely reaches
 * (it stops when the simplex converges): the bar stays under 100% until
 * the end, and its time estimate errs long. */
static void on_progress(void *ctx, int evals, double loss, double stage_loss)
{
    (void)stage_loss;
    rh_progress *p = ctx;
    snprintf(p->extra, sizeof p->extra, "loss %.4g", loss);
    uint64_t done = (uint64_t)evals;
    rh_progress_update(p, done < p->total ? done : p->total - 1);
}

/* Requests decoding at a time: the decode intervals' starts and ends,
 * sorted, so each count is two binary searches (a bench run's trace holds
 * thousands of requests). */
typedef struct decode_spans {
    double *start, *end;
    size_t n;
} decode_spans;

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int spans_make(const tr_trace *t, decode_spans *d)
{
    d->n = 0;
    d->start = malloc((t->n_requests + 1) * sizeof *d->start);
    d->end = malloc((t->n_requests + 1) * sizeof *d->end);
    if (!d->start || !d->end) return -1;
    for (size_t j = 0; j < t->n_requests; j++) {
        const tr_request *o = &t->requests[j];
        if (!o->output_len) continue;
        d->start[d->n] = o->arrival + o->ttft;
        d->end[d->n++] = o->arrival + o->e2e;
    }
    qsort(d->start, d->n, sizeof *d->start, by_value);
    qsort(d->end, d->n, sizeof *d->end, by_value);
    return 0;
}

/* How many values of the sorted x are below v (or at most v when `equal`). */
static size_t count_below(const double *x, size_t n, double v, int equal)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x[mid] < v || (equal && x[mid] == v)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* How many requests were in flight at the middle of request i's decode:
 * started by then, not yet ended. */
static uint32_t concurrency_at(const decode_spans *d, const tr_request *q)
{
    double mid = q->arrival + (q->ttft + q->e2e) / 2;
    return (uint32_t)(count_below(d->start, d->n, mid, 1) - count_below(d->end, d->n, mid, 0));
}

/* measured and fitted per request, as CSV rows, then the two plots. */
static int plots(const char *dir, const tr_trace *t, const char *cost_text, const sim_config *sc, rh_err *e)
{
    tr_trace reqs;
    if (live_fit_requests(t, &reqs, e) < 0) return -1;
    cost_model *m = cost_parse(cost_text, "the fitted cost model", e);
    sim_result sr;
    sim_config c = *sc;
    c.progress = 0;
    c.out_path = NULL;
    c.rate_scale = 1;
    c.max_concurrency = 0;
    int rc = -1;
    if (m && sim_run(&c, &reqs, m, &sr, e) == 0) {
        char csv[4200];
        snprintf(csv, sizeof csv, "%s/requests.csv", dir);
        FILE *f = rh_mkdir_p(dir) == 0 ? fopen(csv, "w") : NULL;
        if (!f) {
            rh_fail(e, "%s: cannot write", csv);
        } else {
            fprintf(f, "source,input_len,concurrency,ttft_ms,tpot_ms\n");
            decode_spans spans;
            int spans_ok = spans_make(&reqs, &spans) == 0;
            for (size_t i = 0; spans_ok && i < reqs.n_requests; i++) {
                const tr_request *q = &reqs.requests[i];
                const sim_request_result *s = &sr.requests[i];
                uint32_t conc = concurrency_at(&spans, q);
                double tm = q->output_len > 1 ? (q->e2e - q->ttft) / (q->output_len - 1) : NAN;
                double ts = s->output_len > 1 ? (s->e2e - s->ttft) / (s->output_len - 1) : NAN;
                fprintf(f, "measured,%u,%u,%.6g,%.6g\n", q->input_len, conc, 1e3 * q->ttft, 1e3 * tm);
                fprintf(f, "fitted,%u,%u,%.6g,%.6g\n", q->input_len, conc, 1e3 * s->ttft, 1e3 * ts);
            }
            free(spans.start);
            free(spans.end);
            fclose(f);
            rc = spans_ok ? 0 : rh_fail(e, "out of memory counting requests in flight");
            struct { const char *x, *y, *out, *title, *xl, *yl; } p[2] = {
                {"input_len", "ttft_ms", "ttft_vs_length", "TTFT against prompt length: measured and fitted",
                 "prompt tokens (log scale)", "TTFT (ms, log scale)"},
                {"concurrency", "tpot_ms", "tpot_vs_batch", "TPOT against requests in flight: measured and fitted",
                 "requests decoding at once", "TPOT (ms)"}};
            for (int k = 0; k < 2; k++) {
                char out[4200];
                snprintf(out, sizeof out, "%s/%s", dir, p[k].out);
                plot_spec s;
                plot_spec_init(&s);
                s.kind = PLOT_SCATTER;
                s.csv = csv;
                s.x = p[k].x;
                s.y = p[k].y;
                s.by = "source";
                s.out = out;
                s.title = p[k].title;
                s.xlabel = p[k].xl;
                s.ylabel = p[k].yl;
                s.logx = s.logy = k == 0;
                rh_err pe;
                if (plot_draw(&s, &pe) < 0) fprintf(stderr, "rehearse fit: plot %s: %s\n", out, pe.msg);
            }
        }
        sim_result_free(&sr);
    }
    cost_free(m);
    tr_trace_free(&reqs);
    return rc;
}

int fit_live_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(help, stdout);
        return 0;
    }
    live_fit_opts o;
    live_fit_opts_default(&o);
    const char *model = NULL, *gpu = NULL, *kind = "roofline", *dtype = NULL, *kv_dtype = NULL, *out = NULL,
               *plot_dir = "reports/fit", *host = NULL;
    unsigned long long tp = 1;
    int json = 0, no_plot = 0, allow_failed = 0;
    /* Flags are applied after the trace's header: kept as name, value. */
    sim_knobs knobs = {.n = 0};
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    const char *name, *v;
    while ((name = rh_args_next(&a))) {
        if (!strcmp(name, "json") || !strcmp(name, "no-plot") || !strcmp(name, "allow-failed")) {
            if (rh_args_no_value(&a, &e) < 0) return fail(e.msg);
            if (name[0] == 'j') json = 1;
            else if (name[0] == 'n') no_plot = 1;
            else allow_failed = 1;
            continue;
        }
        const char **dst = !strcmp(name, "model") ? &model : !strcmp(name, "gpu") ? &gpu
                         : !strcmp(name, "kind") ? &kind
                         : !strcmp(name, "dtype") ? &dtype : !strcmp(name, "kv-dtype") ? &kv_dtype
                         : !strcmp(name, "host") ? &host
                         : (!strcmp(name, "o") || !strcmp(name, "output")) ? &out
                         : !strcmp(name, "plot-dir") ? &plot_dir : NULL;
        if (dst) {
            if (!(*dst = rh_args_value(&a, &e))) return fail(e.msg);
        } else if (!strcmp(name, "tp") || !strcmp(name, "tp-size")) {
            if (!(v = rh_args_value(&a, &e)) || rh_parse_u64(v, "--tp", &tp, &e) < 0) return fail(e.msg);
            if (tp < 1 || tp > 65536) return fail("--tp must be 1..65536");
        } else {
            int takes = sim_config_takes_value(name);
            if (takes < 0) {
                snprintf(e.msg, sizeof e.msg, "unknown flag --%s (see rehearse fit --model M --gpu G --help)", name);
                return fail(e.msg);
            }
            v = takes ? rh_args_value(&a, &e) : (a.inline_val ? rh_args_value(&a, &e) : "true");
            if (!v || sim_knobs_take(&knobs, &o.sim, name, v, &e) < 0) return fail(e.msg);
        }
    }
    if (a.npos != 1) return fail("fit takes one TRACE (see rehearse fit --help)");
    if (!strcmp(kind, "linear")) {
        o.kind = &live_linear;
        if (model || gpu) return fail("--kind linear takes no --model or --gpu (a roofline does)");
    } else if (strcmp(kind, "roofline")) {
        return fail("--kind must be roofline or linear");
    } else if (!model || !gpu) {
        return fail("a roofline fit to a client-side trace needs --model PRESET and --gpu PRESET (or --kind linear)");
    }
    if (!out) return fail("fit needs -o COST, the cost file to write");
    tr_trace t;
    if (tr_trace_load(a.pos[0], &t, &e) < 0) return fail(e.msg);
    size_t failed = 0;
    for (size_t i = 0; i < t.n_requests; i++)
        failed += t.requests[i].finish == TR_FINISH_ERROR;   /* aborts: cut by the client (a probe's budget) */
    if (failed && !allow_failed) {
        snprintf(e.msg, sizeof e.msg,
                 "%s holds %zu failed requests of %zu: a fit of the rest fits what the server chose to serve "
                 "(requests longer than its pool or context are refused, not measured). Probe again inside what "
                 "the server holds, or pass --allow-failed", a.pos[0], failed, t.n_requests);
        tr_trace_free(&t);
        return fail(e.msg);
    }

    /* The server's knobs: a rehearse serve recording names them; flags win. */
    sim_config_from_header_and_flags(&o.sim, &t.header, &knobs);
    int status = 1;
    json_t *base = o.kind == &live_linear
                       ? json_pack("{s:s, s:i, s:I}", "kind", "linear", "version", 1, "tp_size", (json_int_t)tp)
                       : json_pack("{s:s, s:i, s:s, s:s, s:I}", "kind", "roofline", "version", 1, "model", model,
                                   "gpu", gpu, "tp", (json_int_t)tp);
    if (dtype) json_object_set_new(base, "dtype", json_string(dtype));
    if (kv_dtype) json_object_set_new(base, "kv_dtype", json_string(kv_dtype));
    if (host) json_object_set_new(base, "host", json_string(host));
    char *base_text = json_dumps(base, 0);
    json_decref(base);
    o.base_json = base_text;
    if (model) {   /* the base must load on its own: a bad preset is reported once, here */
        cost_model *m = base_text ? cost_parse(base_text, "--model/--gpu", &e) : NULL;
        if (!m) goto done;
        cost_free(m);
    }
    rh_progress bar;
    /* three stages from each start (two for a kind with no preset to start from) */
    rh_progress_begin(&bar, "fitting", (uint64_t)(o.iters * (o.restarts + 1)) * 3 * (o.kind->start_from_data ? 2 : 1));
    o.progress = on_progress;
    o.ctx = &bar;
    live_fit_result r;
    int rc = live_fit(&t, &o, &r, &e);
    rh_progress_end(&bar);
    if (rc < 0) goto done;
    if (rh_write_file_atomic(out, r.cost_json, strlen(r.cost_json), &e) < 0) {
        live_fit_result_free(&r);
        goto done;
    }
    if (!no_plot && plots(plot_dir, &t, r.cost_json, &o.sim, &e) < 0)
        fprintf(stderr, "rehearse fit: plots: %s\n", e.msg);
    if (json) {
        json_t *res = json_object(), *terms = json_object(), *errs = json_object();
        for (int k = 0; k < r.n_terms; k++) json_object_set_new(terms, o.kind->term[k], json_real(r.terms[k]));
        for (int k = 0; k < LIVE_N_ERRS; k++)
            json_object_set_new(errs, live_err_names[k],
                                json_pack("{s:I, s:f, s:f}", "requests", (json_int_t)r.err[k].n, "median",
                                          r.err[k].median, "p90", r.err[k].p90));
        json_object_set_new(res, "cost", json_string(out));
        json_object_set_new(res, "requests", json_integer((json_int_t)r.requests));
        json_object_set_new(res, "evaluations", json_integer(r.evals));
        json_object_set_new(res, "loss", json_real(r.loss));
        json_object_set_new(res, "terms", terms);
        json_object_set_new(res, "intervals", live_fit_intervals_json(o.kind, &r));
        json_object_set_new(res, "step_noise", live_step_noise_json(&t));
        json_object_set_new(res, "relative_error", errs);
        json_dumpf(res, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        printf("\n");
        json_decref(res);
    } else {
        if (model)
            printf("fit: %zu requests of %s, %d simulations (a roofline of %s on %s, tp %llu)\n", r.requests,
                   a.pos[0], r.evals, model, gpu, tp);
        else
            printf("fit: %zu requests of %s, %d simulations (linear)\n", r.requests, a.pos[0], r.evals);
        printf("  %-22s %-11s %s\n", "term", "fitted", "95% interval");
        for (int k = 0; k < r.n_terms; k++) {
            printf("  %-22s %-11.4g ", o.kind->term[k], r.terms[k]);
            if (isfinite(r.hi[k])) printf("%.4g .. %.4g", r.lo[k], r.hi[k]);
            else printf("unbounded");
            printf("%s%s\n", r.ident[k] == LIVE_IDENTIFIED ? "" : "  ",
                   r.ident[k] == LIVE_IDENTIFIED ? "" : live_ident_why[r.ident[k]]);
        }
        printf("per-request relative error |simulated - measured| / measured:\n");
        printf("  %-6s %8s %8s %8s\n", "metric", "requests", "median", "p90");
        for (int k = 0; k < LIVE_N_ERRS; k++)
            printf("  %-6s %8zu %7.2f%% %7.2f%%\n", live_err_names[k], r.err[k].n, 100 * r.err[k].median,
                   100 * r.err[k].p90);
        size_t gaps = 0;
        double sigma = live_step_noise(&t, &gaps);
        if (gaps >= 100)
            printf("step noise: sigma %.4f (lognormal) from %zu inter-token gaps, each against its request's median; "
                   "sim --intervals draws each step's time with it\n", sigma, gaps);
        printf("wrote %s%s%s\n", out, no_plot ? "" : " and plots in ", no_plot ? "" : plot_dir);
    }
    live_fit_result_free(&r);
    status = 0;
done:
    if (status) fprintf(stderr, "rehearse fit: %s\n", e.msg);
    free(base_text);
    tr_trace_free(&t);
    return status;
}
