/* cli.h — the command-line fronts, one per `rehearse` subcommand.
 *
 * Each front reads its flags, prints its help, calls into the libraries
 * below it and turns what they return into output and an exit status: 0 on
 * success, 1 with one message on stderr otherwise. argv[0] is the
 * subcommand's name. Nothing below cli/ includes this header: the fronts sit
 * above every library (README, Layout). */
#ifndef RH_CLI_H
#define RH_CLI_H

#include <stddef.h>
#include <stdio.h>

/* A table of subcommands, git-style (rehearse COMMAND, rehearse trace COMMAND). */
typedef struct cli_command {
    const char *name;
    int (*main)(int argc, char **argv);   /* argv[0] is the subcommand's name */
    const char *summary;
} cli_command;

/* Runs the command argv[1] names. "-h", "--help" and "help" print usage on
 * stdout (0); no name, or one the table lacks, prints "WHO: unknown command"
 * and usage on stderr (1). */
int cli_dispatch(const cli_command *t, size_t n, const char *who, void (*usage)(FILE *f), int argc, char **argv);

int trace_main(int argc, char **argv);            /* trace.c: import, export, cat, stats, slice, synth */
int sim_main(int argc, char **argv);              /* sim.c */
int run_main(int argc, char **argv);              /* run.c: a Lua experiment script */
int validate_main(int argc, char **argv);         /* validate.c */
int validate_steps_main(int argc, char **argv);   /* validate_steps.c */
int fit_main(int argc, char **argv);              /* fit.c */
int fit_live_main(int argc, char **argv);         /* fit_live.c, through fit_main (--model, --gpu) */
int plot_main(int argc, char **argv);             /* plot.c */
int cost_main(int argc, char **argv);             /* cost.c: show, presets, efficiency */
int cost_efficiency_main(int argc, char **argv);  /* cost_efficiency.c, through cost_main */
int cost_fit_kernels_main(int argc, char **argv); /* cost_kernels.c, through cost_main */
int cost_import_main(int argc, char **argv);      /* cost_import.c, through cost_main */
int serve_main(int argc, char **argv);            /* serve.c */
int replay_main(int argc, char **argv);           /* replay.c */
int calibrate_main(int argc, char **argv);        /* calibrate.c */
int model_main(int argc, char **argv);            /* model.c */
int bench_main(int argc, char **argv);            /* bench.c */
int probe_main(int argc, char **argv);            /* probe.c */
int router_main(int argc, char **argv);           /* router.c */
int plan_main(int argc, char **argv);             /* plan.c */

#endif
