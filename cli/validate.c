/* validate.c — `rehearse validate TRACE --model M --cost COST [knobs] [-o DIR]`:
 * flags, help and exit codes; the work is in validate.h. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
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
        printf("%-26s %14.4g %14.4g %9.1f%%\n", r->rows[i].metric, r->rows[i].measured, r->rows[i].simulated,
               r->rows[i].error_pct);
    printf("\nstep time error (|predicted - measured| / measured):\n");
    for (int c = 0; c < COST_N_CLASSES; c++)
        if (r->steps[c].n)
            printf("  %-8s %6zu steps   median %5.1f%%   p90 %5.1f%%   max %6.1f%%\n", cost_class_name(c), r->steps[c].n,
                   100 * r->steps[c].median, 100 * r->steps[c].p90, 100 * r->steps[c].max);
    printf("\nwrote %s/ (recorded.rhtr, simulated.rhtr, metrics.csv, CDF and step plots)\n", dir);
}

int validate_main(int argc, char **argv)
{
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
    int status = validate_run(&vc, &t, cost, &r, &e) < 0;
    if (status) {
        fprintf(stderr, "rehearse validate: %s\n", e.msg);
    } else if (json) {
        json_dumpf(r.summary, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
    } else {
        print_report(&r, vc.dir);
    }
    validate_report_free(&r);
    tr_trace_free(&t);
    cost_free(cost);
    return status;
}
