/* rehearse.c — the table of subcommands, git-style. Nothing else lives here:
 * each subcommand's flags, help and exit codes are its front in cli/. */
#include "util/version.h"
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const cli_command commands[] = {
    {"trace", trace_main, "import, export, inspect, slice and synthesize traces"},
    {"sim", sim_main, "replay a trace through the scheduler on a virtual clock, priced by a cost model"},
    {"run", run_main, "run a Lua experiment script (sweeps in parallel, CSV, plots)"},
    {"validate", validate_main, "run a trace through the real engine and the simulator; compare every metric"},
    {"fit", fit_main, "fit a linear cost model to the step records of a recorded trace"},
    {"plan", plan_main, "the cheapest deployment that serves a trace within its SLOs, searched by simulation"},
    {"plot", plot_main, "draw lines, CDFs, heatmaps, bars or time series from a CSV with gnuplot"},
    {"cost", cost_main, "show what a cost model predicts for a batch, term by term; list presets"},
    {"serve", serve_main, "serve a model over an OpenAI-compatible HTTP API, recording requests and steps"},
    {"replay", replay_main, "serve a trace with the real engine on the wall clock and record the run"},
    {"calibrate", calibrate_main, "measure a model's kernels on this machine and write a table cost model"},
    {"validate-steps", validate_steps_main, "compare a cost model's step times with a recorded run's, per step class"},
    {"model", model_main, "inspect a model, generate text with it, save seeded weights"},
    {"bench", bench_main, "load-test any OpenAI-compatible server; TTFT, TPOT, ITL, E2E; client-side trace"},
    {"probe", probe_main, "measure any OpenAI-compatible server with a designed campaign, for rehearse fit"},
    {"router", router_main, "route OpenAI-compatible requests over running workers with the router core's policies"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: rehearse COMMAND [ARGS...]   (rehearse COMMAND --help for its flags)\n\n"
               "A dress rehearsal for LLM serving: a real engine that records, a simulator\n"
               "that replays traces through the same scheduler, and comparison plots.\n"
               "rehearse --version prints the release.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

/* The release (util/version.h); the Makefile adds the commit it was built
 * from when git knows it. */
#ifndef REHEARSE_COMMIT
#define REHEARSE_COMMIT ""
#endif

int main(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version"))) {
        printf("rehearse %s%s%s%s\n", REHEARSE_VERSION, REHEARSE_COMMIT[0] ? " (" : "", REHEARSE_COMMIT,
               REHEARSE_COMMIT[0] ? ")" : "");
        return 0;
    }
    return cli_dispatch(commands, sizeof commands / sizeof commands[0], "rehearse", usage, argc, argv);
}
