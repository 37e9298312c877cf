/* validate.c — `rehearse validate TRACE --model M --cost COST [knobs] [-o DIR]`:
 * flags, help and exit codes; the work is in validate.h. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sim/sim.h"
#include "sim/validate/validate.h"
#include "traces/import/import.h"
#include "util/args.h"

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
            "  --measured RUN            no engine run: simulate a measured run's own requests\n"
            "                            (rehearse validate --measured RUN --help)\n"
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

static void note(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "rehearse validate: %s\n", msg);
}

static void print_report(const validate_report *r, const char *dir)
{
    printf("%-26s %14s %14s %10s\n", "metric", "measured", "simulated", "error");
    for (size_t i = 0; i < VALIDATE_N_METRICS; i++)
        if (isnan(r->rows[i].error_pct))   /* measured 0: a client-side run has no steps to count */
            printf("%-26s %14.4g %14.4g %10s\n", r->rows[i].metric, r->rows[i].measured, r->rows[i].simulated, "-");
        else
            printf("%-26s %14.4g %14.4g %9.1f%%\n", r->rows[i].metric, r->rows[i].measured, r->rows[i].simulated,
                   r->rows[i].error_pct);
    if (r->has_steps) printf("\nstep time error (|predicted - measured| / measured):\n");
    for (int c = 0; c < COST_N_CLASSES && r->has_steps; c++)
        if (r->steps[c].n)
            printf("  %-8s %6zu steps   median %5.1f%%   p90 %5.1f%%   max %6.1f%%\n", cost_class_name(c), r->steps[c].n,
                   100 * r->steps[c].median, 100 * r->steps[c].p90, 100 * r->steps[c].max);
    printf("\nwrote %s/ (%ssimulated.rhtr, metrics.csv, CDF%s plots)\n", dir, r->has_steps ? "recorded.rhtr, " : "",
           r->has_steps ? " and step" : "");
}

/* The table (or the JSON summary) of a finished validation, or its error;
 * the exit status. */
static int report(int rc, validate_report *r, const char *dir, int json, const rh_err *e)
{
    if (rc < 0) {
        fprintf(stderr, "rehearse validate: %s\n", e->msg);
    } else if (json) {
        json_dumpf(r->summary, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
    } else {
        print_report(r, dir);
    }
    char warn[800];
    if (rc >= 0) validate_cache_warning(r, warn, sizeof warn);
    if (rc >= 0 && warn[0]) fprintf(stderr, "rehearse validate: warning: %s\n", warn);
    validate_report_free(r);
    return rc < 0;
}

static const char *measured_help =
    "usage: rehearse validate --measured RUN.rhtr --cost COST [-o DIR] [--json] [scheduler knobs]\n\n"
    "No engine run: the simulator, with COST and the server's knobs, serves RUN's own\n"
    "requests (sent when they were sent, lengths as served, their prefix blocks), and\n"
    "every metric is printed measured against simulated. RUN is a client-side trace\n"
    "(rehearse bench --record-trace against any server, rehearse probe) or a rehearse\n"
    "serve recording (its header gives the knobs; flags win). Writes CDF overlays of\n"
    "TTFT, TPOT and E2E, TTFT against prompt length, and the tables into DIR\n"
    "(reports/validate).\n"
    "  --cost FILE        the cost model to check (required)\n"
    "  -o, --output DIR   where everything goes (reports/validate)\n"
    "  --json             print the summary as JSON\n"
    "knobs as for rehearse sim: --scheduler, --chunked-prefill-size, --max-running-requests,\n"
    "--page-size, --mem-fraction-static, ...\n";

static int validate_measured_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(measured_help, stdout);
        return 0;
    }
    validate_config vc = {.dir = "reports/validate", .note = note};
    replay_config_default(&vc.replay);
    sim_knobs knobs = {.n = 0};
    int json = 0;
    sim_config sc;
    sim_config_default(&sc);
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    const char *name;
    while ((name = rh_args_next(&a))) {
        if (!strcmp(name, "json")) {
            if (rh_args_no_value(&a, &e) < 0) return bad(e.msg);
            json = 1;
        } else if (!strcmp(name, "measured")) {
            if (!(vc.trace_path = rh_args_value(&a, &e))) return bad(e.msg);
        } else if (!strcmp(name, "cost")) {
            if (!(vc.cost_path = rh_args_value(&a, &e))) return bad(e.msg);
        } else if (!strcmp(name, "o") || !strcmp(name, "output")) {
            if (!(vc.dir = rh_args_value(&a, &e))) return bad(e.msg);
        } else {
            int takes = sim_config_takes_value(name);
            if (takes < 0) {
                snprintf(e.msg, sizeof e.msg, "unknown flag --%s (see rehearse validate --measured RUN --help)", name);
                return bad(e.msg);
            }
            const char *v = takes ? rh_args_value(&a, &e) : (a.inline_val ? rh_args_value(&a, &e) : "true");
            if (!v || sim_knobs_take(&knobs, &sc, name, v, &e) < 0) return bad(e.msg);
        }
    }
    if (a.npos) return bad("with --measured RUN, validate takes no other trace (see rehearse validate --measured RUN --help)");
    if (!vc.trace_path) return bad("--measured needs RUN.rhtr");
    if (!vc.cost_path) return bad("validate needs --cost COST (the cost model to check)");
    tr_trace t;
    if (tr_trace_load(vc.trace_path, &t, &e) < 0) return bad(e.msg);
    /* The server's knobs: its recording's header names them; flags win. */
    sim_config_from_header_and_flags(&sc, &t.header, &knobs);
    char model[256];
    snprintf(model, sizeof model, "%s", t.header.model && t.header.model[0] ? t.header.model : "measured");
    vc.replay.engine.model = model;
    tr_trace_free(&t);
    cost_model *cost = cost_load(vc.cost_path, &e);
    if (!cost) return bad(e.msg);
    validate_report r;
    int status = report(validate_measured(&vc, &sc, cost, &r, &e), &r, vc.dir, json, &e);
    cost_free(cost);
    return status;
}

int validate_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--measured", 10)) return validate_measured_main(argc, argv);
    if (rh_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    validate_config vc = {.dir = "reports/validate", .note = note};
    replay_config *rc = &vc.replay;
    replay_config_default(rc);
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    const char *name;
    int json = 0, concurrency_given = 0;
    while ((name = rh_args_next(&a))) {
        if (!strcmp(name, "json")) {
            json = 1;
        } else if (!strcmp(name, "cost")) {
            if (!(vc.cost_path = rh_args_value(&a, &e))) return bad(e.msg);
        } else if (!strcmp(name, "o") || !strcmp(name, "output")) {
            if (!(vc.dir = rh_args_value(&a, &e))) return bad(e.msg);
        } else if (replay_config_takes_value(name) > 0) {
            const char *v = rh_args_value(&a, &e);
            if (!v || replay_config_set(rc, name, v, &e) < 0) return bad(e.msg);
            if (!strcmp(name, "max-concurrency")) concurrency_given = 1;
        } else {
            int takes = core_config_takes_value(name);
            if (takes < 0) {
                snprintf(e.msg, sizeof e.msg, "unknown flag --%s (see rehearse validate --help)", name);
                return bad(e.msg);
            }
            const char *v = takes ? rh_args_value(&a, &e) : (a.inline_val ? rh_args_value(&a, &e) : "true");
            if (!v || core_config_set(&rc->engine.core, name, v, &e) < 0) return bad(e.msg);
        }
    }
    if (a.npos != 1) return bad("validate takes one TRACE file; see rehearse validate --help");
    if (!rc->engine.model) return bad("validate needs --model MODEL");
    if (!vc.cost_path) return bad("validate needs --cost COST (the cost model to check)");
    if (core_config_validate(&rc->engine.core, &e) < 0) return bad(e.msg);
    if (rc->engine.tp.node_rank) return bad("validate runs node 0; run the other nodes with rehearse serve --node-rank");
    vc.trace_path = a.pos[0];
    cost_model *cost = cost_load(vc.cost_path, &e);
    if (!cost) return bad(e.msg);
    char warn[1024];
    validate_threads_warning(vc.cost_path, rc, warn, sizeof warn);
    if (warn[0]) fprintf(stderr, "rehearse validate: warning: %s\n", warn);
    tr_trace t;
    if (tr_trace_load(vc.trace_path, &t, &e) < 0) {
        cost_free(cost);
        return bad(e.msg);
    }
    const char *clients = tr_header_get(&t.header, "clients");
    if (!concurrency_given && clients && atol(clients) > 0) rc->max_concurrency = (uint32_t)atol(clients);
    rc->progress = 1;
    validate_report r;
    int status = report(validate_run(&vc, &t, cost, &r, &e), &r, vc.dir, json, &e);
    tr_trace_free(&t);
    cost_free(cost);
    return status;
}
