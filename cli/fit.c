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
    "  --json             print the result as JSON\n";

typedef struct step_vec {
    tr_step *v;
    size_t n, cap;
} step_vec;

static int push_step(step_vec *s, const tr_step *st)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4096;
        tr_step *v = realloc(s->v, cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = *st;
    return 0;
}

/* The steps of a trace file, streamed; the header's tp-size when present. */
static int read_steps(const char *path, step_vec *out, uint32_t *tp, char *model, size_t model_n, rh_err *e)
{
    tr_reader *r = tr_reader_open(path, e);
    if (!r) return -1;
    const tr_header *h = tr_reader_header(r);
    const char *t = tr_header_get(h, "tp-size");
    unsigned long long v;
    if (t && rh_parse_u64(t, "tp-size", &v, NULL) == 0 && v >= 1 && v <= 65536) *tp = (uint32_t)v;
    snprintf(model, model_n, "%s", h->model ? h->model : "");
    rh_progress bar;
    rh_progress_begin(&bar, "reading steps", 0);
    tr_record rec;
    int rc;
    uint64_t records = 0;
    while ((rc = tr_reader_next(r, &rec, e)) == 1) {
        if (rec.kind == TR_STEP && push_step(out, &rec.step) < 0) {
            rc = rh_fail(e, "out of memory");
            break;
        }
        if ((++records & 4095) == 0) rh_progress_update(&bar, records);
    }
    rh_progress_end(&bar);
    tr_reader_close(r);
    if (rc == 0 && out->n == 0)
        rc = rh_fail(e, "%s: no step records to fit (a recorded run from rehearse replay or serve has them)", path);
    return rc < 0 ? -1 : 0;
}

static const char *coef_names[5] = {"base_s", "per_prefill_token_s", "per_decode_seq_s", "per_context_token_s",
                                    "per_attention_s"};
static const char *undetermined_why[5] = {"no usable step", "no step computed prompt tokens or draft slots",
                                          "no step had decodes", "no decode had context",
                                          "no prompt chunk was computed"};

static json_t *errors_json(const cost_err_summary es[COST_N_CLASSES])
{
    json_t *o = json_object();
    for (int c = 0; c < COST_N_CLASSES; c++)
        json_object_set_new(o, cost_class_name(c),
                            json_pack("{s:I, s:f, s:f, s:f}", "steps", (json_int_t)es[c].n, "median", es[c].median,
                                      "p90", es[c].p90, "max", es[c].max));
    return o;
}

int fit_main(int argc, char **argv)
{
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
    step_vec steps = {0};
    uint32_t tp = 1;
    char model[256];
    if (read_steps(path, &steps, &tp, model, sizeof model, &e) < 0) {
        free(steps.v);
        goto bad;
    }
    if (tp_flag) tp = (uint32_t)tp_flag;
    cost_fit_result r;
    cost_err_summary es[COST_N_CLASSES];
    cost_model *m = NULL;
    int rc = cost_fit_steps(steps.v, steps.n, &o, &r, &e);
    if (rc == 0 && !(m = cost_linear_new(&r.coef))) rc = rh_fail(&e, "out of memory");
    if (rc == 0) {
        m->draft_ratio = o.draft_ratio;
        rc = cost_step_errors(m, steps.v, steps.n, 0, es, &e);
    }
    cost_free(m);
    free(steps.v);
    if (rc < 0) goto bad;

    json_t *fit = json_pack("{s:s, s:s, s:I, s:I, s:s, s:f, s:o}", "trace", path, "model", model, "steps",
                            (json_int_t)r.used, "skipped", (json_int_t)r.skipped, "weight",
                            o.absolute ? "absolute" : "relative", "rms_residual", r.rms, "error", errors_json(es));
    json_t *undet = json_array();
    for (int i = 0; i < 5; i++)
        if (!r.determined[i]) json_array_append_new(undet, json_string(coef_names[i]));
    json_object_set_new(fit, "undetermined", undet);
    json_t *extra = json_pack("{s:o}", "fit", fit);
    rc = cost_linear_save(out, &r.coef, tp, o.draft_ratio, extra, &e);
    if (rc == 0 && json) {
        json_t *res = json_pack("{s:s, s:O}", "cost", out, "fit", fit);
        const double c[5] = {r.coef.base_s, r.coef.per_prefill_token_s, r.coef.per_decode_seq_s,
                             r.coef.per_context_token_s, r.coef.per_attention_s};
        for (int i = 0; i < 5; i++) json_object_set_new(res, coef_names[i], json_real(c[i]));
        json_dumpf(res, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        printf("\n");
        json_decref(res);
    } else if (rc == 0) {
        printf("fit: %zu steps of %s (%zu skipped: no work or no duration), %s least squares\n", r.used, path,
               r.skipped, o.absolute ? "absolute" : "relative");
        const double c[5] = {r.coef.base_s, r.coef.per_prefill_token_s, r.coef.per_decode_seq_s,
                             r.coef.per_context_token_s, r.coef.per_attention_s};
        for (int i = 0; i < 5; i++) {
            printf("  %-22s %.6g", coef_names[i], c[i]);
            if (!r.determined[i]) printf("   (not determined: %s)", undetermined_why[i]);
            printf("\n");
        }
        printf("relative error |predicted - measured| / measured:\n");
        printf("  %-8s %8s %8s %8s %8s\n", "class", "steps", "median", "p90", "max");
        for (int cl = 0; cl < COST_N_CLASSES; cl++) {
            if (!es[cl].n) {
                printf("  %-8s %8s\n", cost_class_name(cl), "0");
                continue;
            }
            printf("  %-8s %8zu %7.2f%% %7.2f%% %7.2f%%\n", cost_class_name(cl), es[cl].n, 100 * es[cl].median,
                   100 * es[cl].p90, 100 * es[cl].max);
        }
        printf("wrote %s\n", out);
    }
    json_decref(extra);
    if (rc < 0) goto bad;
    return 0;
bad:
    fprintf(stderr, "rehearse: %s\n", e.msg);
    return 1;
}
