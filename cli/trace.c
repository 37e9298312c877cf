/* trace.c — `rehearse trace ...`: the subcommand table, shared flag handling,
 * and import. */
#include "cli/cli.h"
#include "cli/trace_cmds.h"

#include <stdio.h>
#include <string.h>

static const cli_command cmds[] = {
    {"import", trace_cmd_import, "convert a trace (Mooncake, Azure, BurstGPT, vidur, JSONL, SGLang log/FPM) to our binary format"},
    {"export", trace_cmd_export, "write a trace as JSONL or CSV"},
    {"cat", trace_cmd_export, "print a trace as JSONL on stdout"},
    {"stats", trace_cmd_stats, "requests, span, rate, length percentiles, ideal prefix hit ratio"},
    {"slice", trace_cmd_slice, "cut a time window, the first N, a random sample; scale rate and lengths"},
    {"synth", trace_cmd_synth, "generate a seeded synthetic trace"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: rehearse trace COMMAND [ARGS...]   (rehearse trace COMMAND --help)\n\n"
               "Traces are our binary format (traces/FORMAT.md); every command also reads\n"
               "our JSONL and the public formats directly, recognised from their content.\n\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) fprintf(f, "  %-7s %s\n", cmds[i].name, cmds[i].summary);
}

int trace_main(int argc, char **argv)
{
    return cli_dispatch(cmds, sizeof cmds / sizeof cmds[0], "rehearse trace", usage, argc, argv);
}

int trace_cli_start(int argc, char **argv, const char *help, rh_args *a, tr_import_opts *o)
{
    if (rh_wants_help(argc, argv)) {
        fputs(help, stdout);
        return 0;
    }
    rh_args_init(a, argc, argv);
    a->i = 1;
    if (o) tr_import_opts_init(o);
    return 1;
}

int trace_cli_fail(const char *cmd, const rh_err *e)
{
    fprintf(stderr, "rehearse trace %s: %s\n", cmd, e->msg);
    return 1;
}

int trace_cli_input_flag(rh_args *a, const char *name, tr_import_opts *o, rh_err *e)
{
    const char *v;
    if (!strcmp(name, "input-format")) {
        if (!(v = rh_args_value(a, e))) return -1;
        o->format = tr_format_parse(v);
        if (o->format == TR_FMT_UNKNOWN)
            return rh_fail(e, "--input-format: '%s' is not one of binary, jsonl, mooncake, azure, burstgpt, vidur, sglang-log, "
                                 "sglang-fpm", v);
        return 1;
    }
    if (!strcmp(name, "model")) {
        if (!(o->model = rh_args_value(a, e))) return -1;
        return 1;
    }
    if (!strcmp(name, "block-size")) {
        unsigned long long n;
        if (!(v = rh_args_value(a, e)) || rh_parse_u64(v, "--block-size", &n, e) < 0) return -1;
        if (n == 0 || n > TR_MAX_TOKENS) return rh_fail(e, "--block-size: %llu is not in [1, %u]", n, TR_MAX_TOKENS);
        o->block_size = (uint32_t)n;
        return 1;
    }
    return 0;
}

int trace_cli_one_input(const rh_args *a, const char **in, rh_err *e)
{
    if (a->npos == 0) return rh_fail(e, "no input trace given");
    if (a->npos > 1) return rh_fail(e, "one input trace expected, got %d arguments ('%s', '%s'...)", a->npos, a->pos[0],
                                    a->pos[1]);
    *in = a->pos[0];
    return 0;
}

static const char import_help[] =
    "usage: rehearse trace import [--format F] IN -o OUT [--model NAME] [--block-size N]\n\n"
    "Converts IN to our binary trace format at OUT (written to a temporary file and\n"
    "renamed, so a failure leaves nothing at OUT).\n\n"
    "  --format F       mooncake | azure | burstgpt | vidur | jsonl | sglang-log | sglang-fpm | binary\n"
    "                   (default: recognised from the content)\n"
    "  -o, --output OUT the binary trace to write\n"
    "  --model NAME     BurstGPT: keep only rows of this model (e.g. ChatGPT, GPT-4)\n"
    "  --block-size N   Mooncake: tokens per hash_ids block (default 512)\n\n"
    "Public formats are sorted by arrival (ties keep file order), numbered from 0,\n"
    "and their timestamps become offsets from the first request. Our JSONL is kept\n"
    "as it is, field by field.\n";

int trace_cmd_import(int argc, char **argv)
{
    rh_args a;
    tr_import_opts o;
    if (!trace_cli_start(argc, argv, import_help, &a, &o)) return 0;
    rh_err e = {{0}};
    const char *out = NULL, *in = NULL, *name;
    while ((name = rh_args_next(&a))) {
        int r;
        if (!strcmp(name, "format")) name = "input-format";
        if ((r = trace_cli_input_flag(&a, name, &o, &e)) < 0) return trace_cli_fail("import", &e);
        if (r) continue;
        if (!strcmp(name, "o") || !strcmp(name, "output")) {
            if (!(out = rh_args_value(&a, &e))) return trace_cli_fail("import", &e);
        } else {
            rh_fail(&e, "unknown flag --%s (see --help)", name);
            return trace_cli_fail("import", &e);
        }
    }
    if (trace_cli_one_input(&a, &in, &e) < 0) return trace_cli_fail("import", &e);
    if (!out) {
        rh_fail(&e, "no output given (-o OUT)");
        return trace_cli_fail("import", &e);
    }
    uint64_t n = 0;
    tr_format f = TR_FMT_UNKNOWN;
    if (tr_import_file(in, &o, out, &n, &f, &e) < 0) return trace_cli_fail("import", &e);
    if (f == TR_FMT_SGLANG_LOG || f == TR_FMT_SGLANG_FPM)   /* server telemetry: steps, no requests */
        printf("imported %s (%s: step records) into %s; rehearse trace stats %s counts them\n", in,
               tr_format_name(f), out, out);
    else
        printf("imported %llu requests from %s (%s) into %s\n", (unsigned long long)n, in, tr_format_name(f), out);
    return 0;
}
