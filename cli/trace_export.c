/* trace_export.c — `rehearse trace export` and `rehearse trace cat`. */
#include "cli/trace_cmds.h"
#include "traces/csvout.h"
#include "traces/jsonl.h"
#include "util/atomic_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char export_help[] =
    "usage: rehearse trace export IN [--format jsonl|csv] [-o OUT] [--steps]\n"
    "       rehearse trace cat IN\n\n"
    "Writes a trace (any format rehearse reads) as our JSONL, losslessly (header\n"
    "line first, then one line per record), or as CSV. `cat` is export to stdout\n"
    "as JSONL.\n\n"
    "  --format F        jsonl (default) | csv\n"
    "  -o, --output OUT  write OUT (via a temporary file) instead of stdout\n"
    "  --steps           csv: write the step records instead of the requests\n"
    "  --input-format F  the input's format when it cannot be recognised\n"
    "  --model NAME, --block-size N   as for import (BurstGPT, Mooncake input)\n";

typedef struct export_ctx {
    FILE *f;
    int csv, steps, failed_errno;
    tr_jsonl_writer j;
} export_ctx;

static int ex_header(void *ctx, const tr_header *h, rh_err *e)
{
    export_ctx *x = ctx;
    int rc = x->csv ? (x->steps ? tr_csv_step_header(x->f) : tr_csv_request_header(x->f)) : tr_jsonl_header(&x->j, h);
    return rc < 0 ? rh_fail(e, "write failed: %s", strerror(errno)) : 0;
}

static int ex_record(void *ctx, const tr_record *r, rh_err *e)
{
    export_ctx *x = ctx;
    int rc = 0;
    if (!x->csv) rc = tr_jsonl_record(&x->j, r);
    else if (x->steps && r->kind == TR_STEP) rc = tr_csv_step(x->f, &r->step);
    else if (!x->steps && r->kind == TR_REQUEST) rc = tr_csv_request(x->f, &r->req);
    return rc < 0 ? rh_fail(e, "write failed: %s", strerror(errno)) : 0;
}

int trace_cmd_export(int argc, char **argv)
{
    const char *cmd = argv[0];
    int is_cat = !strcmp(cmd, "cat");
    rh_args a;
    tr_import_opts o;
    if (!trace_cli_start(argc, argv, export_help, &a, &o)) return 0;
    rh_err e = {{0}};
    export_ctx x = {0};
    const char *out = NULL, *in = NULL, *name;
    while ((name = rh_args_next(&a))) {
        int r = trace_cli_input_flag(&a, name, &o, &e);
        if (r < 0) return trace_cli_fail(cmd, &e);
        if (r) continue;
        const char *v;
        if (!is_cat && (!strcmp(name, "o") || !strcmp(name, "output"))) {
            if (!(out = rh_args_value(&a, &e))) return trace_cli_fail(cmd, &e);
        } else if (!is_cat && !strcmp(name, "format")) {
            if (!(v = rh_args_value(&a, &e))) return trace_cli_fail(cmd, &e);
            if (!strcmp(v, "csv")) x.csv = 1;
            else if (strcmp(v, "jsonl")) {
                rh_fail(&e, "--format: '%s' is not jsonl or csv", v);
                return trace_cli_fail(cmd, &e);
            }
        } else if (!is_cat && !strcmp(name, "steps")) {
            if (rh_args_no_value(&a, &e) < 0) return trace_cli_fail(cmd, &e);
            x.steps = 1;
        } else {
            rh_fail(&e, "unknown flag --%s (see --help)", name);
            return trace_cli_fail(cmd, &e);
        }
    }
    if (trace_cli_one_input(&a, &in, &e) < 0) return trace_cli_fail(cmd, &e);
    if (x.steps && !x.csv) {
        rh_fail(&e, "--steps applies to --format csv (JSONL holds every record)");
        return trace_cli_fail(cmd, &e);
    }
    rh_atomic_file af;
    x.f = stdout;
    if (out) {
        if (rh_atomic_open(&af, out, &e) < 0) return trace_cli_fail(cmd, &e);
        x.f = af.f;
    }
    tr_jsonl_init(&x.j, x.f);
    tr_sink sink = {&x, ex_header, ex_record};
    int truncated = 0;
    int rc = tr_read(in, &o, &sink, &truncated, &e);
    tr_jsonl_free(&x.j);
    if (out) {
        if (rc < 0) rh_atomic_abort(&af);
        else rc = rh_atomic_commit(&af, &e);
    } else if (fflush(stdout) != 0 && rc == 0) {
        rc = rh_fail(&e, "stdout: write failed: %s", strerror(errno));
    }
    if (rc < 0) return trace_cli_fail(cmd, &e);
    if (truncated) fprintf(stderr, "rehearse trace %s: note: %s was cut short (no end-of-trace marker)\n", cmd, in);
    return 0;
}
