/* trace_cmds.h — the `rehearse trace` subcommands, shared by the trace_*.c
 * fronts (and only by them). Each returns the process exit status: 0, or 1
 * after printing one message. */
#ifndef RH_CLI_TRACE_CMDS_H
#define RH_CLI_TRACE_CMDS_H

#include "cli/cli.h"
#include "traces/import/import.h"
#include "util/args.h"

int trace_cmd_import(int argc, char **argv);
int trace_cmd_export(int argc, char **argv);   /* also `cat` */
int trace_cmd_stats(int argc, char **argv);
int trace_cmd_slice(int argc, char **argv);
int trace_cmd_synth(int argc, char **argv);

/* What every trace command does first: with -h or --help prints `help` and
 * returns 0 (the command then exits 0); else readies the walker past the
 * command's name and the input options, and returns 1. */
int trace_cli_start(int argc, char **argv, const char *help, rh_args *a, tr_import_opts *o);
/* Prints "rehearse trace NAME: message" and returns 1. */
int trace_cli_fail(const char *cmd, const rh_err *e);
/* Handles --input-format, --model and --block-size shared by the readers:
 * 1 if the flag was one of them, 0 if not, -1 on a bad value. */
int trace_cli_input_flag(rh_args *a, const char *name, tr_import_opts *o, rh_err *e);
/* Exactly one positional argument (the input), else a message. */
int trace_cli_one_input(const rh_args *a, const char **in, rh_err *e);

#endif
