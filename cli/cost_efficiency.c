/* cost_efficiency.c — `rehearse cost efficiency TABLE --roofline ROOF -o OUT`:
 * flags, help and the table of factors; the work is sim/cost/cost_efficiency.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sim/cost/cost_efficiency.h"
#include "util/args.h"

static const char *help =
    "usage: rehearse cost efficiency TABLE --roofline ROOF -o OUT [--json]\n\n"
    "Sets a roofline cost model's per-operator efficiency factors from a table\n"
    "measured by rehearse calibrate (on the GPU: --backend cuda) for the same model:\n"
    "each factor is the pure roofline's time over the measured time, summed over a\n"
    "few prefill and decode batches, at most 1. OUT is ROOF with those factors.\n"
    "  --roofline ROOF   a roofline cost file (its efficiency factors are replaced)\n"
    "  -o OUT            the roofline cost file to write\n"
    "  --json            print the factors as JSON\n";

static int bad(const char *msg)
{
    fprintf(stderr, "rehearse cost efficiency: %s\n", msg);
    return 1;
}

int cost_efficiency_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(help, stdout);
        return 0;
    }
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 2;
    rh_err e = {{0}};
    const char *roof_path = NULL, *out = NULL, *name;
    int as_json = 0;
    while ((name = rh_args_next(&a))) {
        if (!strcmp(name, "json")) {
            if (rh_args_no_value(&a, &e) < 0) return bad(e.msg);
            as_json = 1;
        } else if (!strcmp(name, "roofline")) {
            if (!(roof_path = rh_args_value(&a, &e))) return bad(e.msg);
        } else if (!strcmp(name, "o") || !strcmp(name, "output")) {
            if (!(out = rh_args_value(&a, &e))) return bad(e.msg);
        } else {
            fprintf(stderr, "rehearse cost efficiency: unknown flag --%s\n%s", name, help);
            return 1;
        }
    }
    if (a.npos != 1 || !roof_path || !out) {
        fputs(help, stderr);
        return 1;
    }
    const char *table_path = a.pos[0];
    cost_eff_row rows[RL_N_OPS];
    if (cost_efficiency_file(table_path, roof_path, out, rows, &e) < 0) return bad(e.msg);
    if (as_json) {
        json_t *eff = json_object();
        for (int op = 0; op < RL_N_OPS; op++)
            if (rows[op].efficiency > 0) json_object_set_new(eff, rl_op_name(op), json_real(rows[op].efficiency));
        json_t *o = json_pack("{s:s, s:o}", "written", out, "efficiency", eff);
        char *s = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
        if (s) puts(s);
        free(s);
        json_decref(o);
    } else {
        printf("%-16s %14s %14s %10s\n", "operator", "roofline ms", "measured ms", "efficiency");
        for (int op = 0; op < RL_N_OPS; op++) {
            if (!(rows[op].efficiency > 0)) continue;
            double ratio = rows[op].roofline_s / rows[op].measured_s;
            printf("%-16s %14.4f %14.4f %10.4g%s\n", rl_op_name(op), rows[op].roofline_s * 1e3,
                   rows[op].measured_s * 1e3, rows[op].efficiency,
                   ratio > 1              ? "  (faster than the roofline: capped at 1)"
                   : ratio < COST_EFF_MIN ? "  (slower than a roofline factor can say: floored)"
                                          : "");
        }
        printf("wrote %s\n", out);
    }
    return 0;
}
