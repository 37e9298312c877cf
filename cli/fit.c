/* fit.c — `rehearse fit RECORDED -o COST`: reads the step records of a
 * recorded run, fits the linear cost model to them (cost_fit.h), prints the
 * coefficients and the fit's relative error per step class, and writes the
 * cost file (with the fit's provenance and error in its "fit" object). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sim/cost/cost_fit.h"
#include "traces/trace.h"
#include "util/args.h"
#include "util/progress.h"

static const char *fit_help =
    "usage: rehearse fit RECORDED -o COST [--draft-ratio R] [--absolute] [--tp N] [--json]\n\n"
    "Fits the linear cost model (base, per prefill token, per decode sequence,\n"
    "per decode context token, per prefill attention pair; none negative) to the\n"
    "step records of a recorded trace by least squares on the relative error,\n"
    "prints the fit's median, p90 and max relative error for prefill, decode and\n"
    "mixed steps, and writes COST (a \"linear\" cost file).\n"
    "  -o COST            the cost file to write (required)\n"
    "  --draft-ratio R    a draft forward's cost as a fraction of a decode step, for\n"
    "                     steps that verified drafts (default 0.1; 0 for drafts that\n"
    "                     cost no forward pass, e.g. n-gram)\n"
    "  --absolute         minimise squared seconds instead of squared relative error\n"
    "  --tp N             tensor-parallel size the recording ran at (default: the\n"
    "                     trace header's tp-size, else 1)\n"
    "  --json             print the result as JSON\n\n"
    "With --model PRESET and --gpu PRESET (or --kind linear), fit takes a client-side\n"
    "trace (rehearse probe, bench --record-trace) and fits with the simulator in the loop:\n"
    "  rehearse fit TRACE --model M --gpu G -o COST --help\n";

int fit_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--model", 7) || !strncmp(argv[i], "--gpu", 5) || !strncmp(argv[i], "--kind", 6))
            return fit_live_main(argc, argv);
    if (rh_wants_help(argc, argv)) {
        fputs(fit_help, stdout);
        return 0;
    }
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e;
    const char *name, *out = NULL;
    int json = 0;
    unsigned long long tp_flag = 0;
    cost_fit_opts o;
    cost_fit_opts_default(&o);
    while ((name = rh_args_next(&a))) {
        const char *v;
        if (!strcmp(name, "o") || !strcmp(name, "output")) {
            if (!(out = rh_args_value(&a, &e))) goto bad;
        } else if (!strcmp(name, "draft-ratio")) {
            if (!(v = rh_args_value(&a, &e)) || rh_parse_double(v, "--draft-ratio", &o.draft_ratio, &e) < 0) goto bad;
            if (o.draft_ratio < 0 || o.draft_ratio > 100) {
                rh_fail(&e, "--draft-ratio must be in [0, 100] (got %s)", v);
                goto bad;
            }
        } else if (!strcmp(name, "absolute")) {
            if (rh_args_no_value(&a, &e) < 0) goto bad;
            o.absolute = true;
        } else if (!strcmp(name, "json")) {
            if (rh_args_no_value(&a, &e) < 0) goto bad;
            json = 1;
        } else if (!strcmp(name, "tp") || !strcmp(name, "tp-size")) {
            if (!(v = rh_args_value(&a, &e)) || rh_parse_u64(v, "--tp", &tp_flag, &e) < 0) goto bad;
            if (tp_flag < 1 || tp_flag > 65536) {
                rh_fail(&e, "--tp must be 1..65536 (got %s)", v);
                goto bad;
            }
        } else {
            rh_fail(&e, "fit: unknown flag --%s (see rehearse fit --help)", name);
            goto bad;
        }
    }
    if (a.npos != 1) {
        rh_fail(&e, "fit takes one RECORDED trace (got %d); see rehearse fit --help", a.npos);
        goto bad;
    }
    if (!out) {
        rh_fail(&e, "fit needs -o COST, the cost file to write");
        goto bad;
    }
    const char *path = a.pos[0];
    cost_fit_report r;
    if (cost_fit_file(path, out, &o, (uint32_t)tp_flag, &r, &e) < 0) goto bad;
    const double c[5] = {r.fit.coef.base_s, r.fit.coef.per_prefill_token_s, r.fit.coef.per_decode_seq_s,
                         r.fit.coef.per_context_token_s, r.fit.coef.per_attention_s};
    if (json) {
        json_t *res = json_pack("{s:s, s:O}", "cost", out, "fit", (json_t *)r.provenance);
        for (int i = 0; i < 5; i++) json_object_set_new(res, cost_fit_coef_names[i], json_real(c[i]));
        json_dumpf(res, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        printf("\n");
        json_decref(res);
    } else {
        printf("fit: %zu steps of %s (%zu skipped: no work or no duration), %s least squares\n", r.fit.used, path,
               r.fit.skipped, o.absolute ? "absolute" : "relative");
        for (int i = 0; i < 5; i++) {
            printf("  %-22s %.6g", cost_fit_coef_names[i], c[i]);
            if (!r.fit.determined[i]) printf("   (not determined: %s)", cost_fit_undetermined_why[i]);
            printf("\n");
        }
        printf("relative error |predicted - measured| / measured:\n");
        printf("  %-8s %8s %8s %8s %8s\n", "class", "steps", "median", "p90", "max");
        for (int cl = 0; cl < COST_N_CLASSES; cl++) {
            const cost_err_summary *es = &r.errors[cl];
            if (!es->n) {
                printf("  %-8s %8s\n", cost_class_name(cl), "0");
                continue;
            }
            printf("  %-8s %8zu %7.2f%% %7.2f%% %7.2f%%\n", cost_class_name(cl), es->n, 100 * es->median,
                   100 * es->p90, 100 * es->max);
        }
        printf("wrote %s\n", out);
    }
    cost_fit_report_free(&r);
    return 0;
bad:
    fprintf(stderr, "rehearse: %s\n", e.msg);
    return 1;
}
