/* cost.c — `rehearse cost show` and `rehearse cost presets`: what a cost
 * model predicts for a few batches, term by term, so a person can check a
 * cost file against their intuition (or a profiler) before simulating.
 * `rehearse cost efficiency` is in cost_efficiency.c. */
#include "cli/cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/batch_spec.h"
#include "sim/cost/cost.h"
#include "sim/cost/cost_presets.h"
#include "sim/cost/roofline.h"
#include "sim/sim.h"
#include "util/args.h"

#define MAX_SEQS 65536
#define MAX_BATCHES 32

/* The simulator's serving flags, which cost show takes too. */
static bool is_serving_knob(const char *name)
{
    static const char *const names[] = {"ep-size", "expert-parallel-size", "enable-dp-attention", "dp-size",
                                        "moe-a2a-backend", "deepep-mode", "enable-two-batch-overlap",
                                        "expert-imbalance", "enable-eplb", "cuda-graph-max-bs",
                                        "disable-cuda-graph", "disable-overlap-schedule", "moe-dense-tp-size",
                                        "ep-num-redundant-experts", "max-lora-rank", "lora-target-modules",
                                        "max-loras-per-batch", "max-loras"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i])) return true;
    return false;
}

static void describe(FILE *f, const cost_model *m, uint32_t tp)
{
    fprintf(f, "cost model %s (kind %s", m->path, m->ops->kind);
    const rl_model *md = roofline_model(m);
    if (md) {
        rl_params p;
        rl_model_params(md, &p);
        bool ep;
        uint32_t own = roofline_tp(m, &ep);
        fprintf(f, ": %s, %.1fB parameters (%.1fB active), on %u x %s%s", md->name, p.total / 1e9, p.active / 1e9,
                tp ? tp : own, roofline_gpu(m)->name, ep ? ", experts spread (ep)" : "");
    } else if (tp) {
        fprintf(f, ", tp %u", tp);
    }
    fprintf(f, ")\n");
}

static void show_text(const char *spec, const cost_model *m, const cost_batch *b)
{
    cost_term t[80];
    int n = cost_breakdown(m, b, t, 80);
    double total = cost_step_time(m, b);
    cost_parts p;
    cost_step_parts(m, b, &p);
    bool overlap = b->serving ? b->serving->overlap : true;
    double steady = cost_parts_duration(&p, overlap, p.forward_s + p.draft_s);
    char shown[64];
    if (strlen(spec) > 60) snprintf(shown, sizeof shown, "%.57s...", spec);
    else snprintf(shown, sizeof shown, "%s", spec);
    printf("\n%s: %.4f ms  (%u prefill tokens in %u chunks, %u decodes, %u tokens computed)\n", shown, total * 1e3,
           b->prefill_tokens, b->prefill_seqs, b->decode_seqs, b->prefill_tokens + b->decode_tokens);
    if (p.hidden_s > 0 && overlap)
        printf("  %.4f ms after a step like it: the overlap scheduler hides the host's scheduling under its GPU time\n",
               steady * 1e3);
    int detail = 0;
    for (int i = 0; i < n; i++) detail |= t[i].flops > 0 || t[i].bytes > 0;
    printf("  %-30s %11s %6s", "term", "ms", "share");
    if (detail) printf(" %12s %10s  %s", "GFLOP/GPU", "GB/GPU", "bound");
    printf("\n");
    for (int i = 0; i < n; i++) {
        printf("  %-30s %11.4f %5.1f%%", t[i].name, t[i].seconds * 1e3, total > 0 ? 100 * t[i].seconds / total : 0);
        if (detail) printf(" %12.2f %10.4f  %s", t[i].flops / 1e9, t[i].bytes / 1e9, t[i].bound);
        printf("\n");
    }
}

/* The overheads outside any one step: where the simulator charges them. */
static void show_overheads(const cost_model *m)
{
    const cost_overheads *o = &m->over;
    printf("\noverheads: step cpu %.4f ms per step, launches %.4f ms per forward pass (in the steps above);\n"
           "           %.4f ms per request before its first token (tokenizer), %.4f ms per output token\n"
           "           (detokenizer), beside the GPU\n",
           o->step_s * 1e3, o->forward_s * 1e3, o->request_s * 1e3, o->output_token_s * 1e3);
}

static json_t *show_json(const char *spec, const cost_model *m, const cost_batch *b)
{
    cost_term t[80];
    int n = cost_breakdown(m, b, t, 80);
    json_t *terms = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(terms, json_pack("{s:s, s:f, s:f, s:f, s:s}", "name", t[i].name, "seconds", t[i].seconds,
                                               "flops", t[i].flops, "bytes", t[i].bytes, "bound", t[i].bound));
    return json_pack("{s:s, s:f, s:o}", "batch", spec, "step_s", cost_step_time(m, b), "terms", terms);
}

static const char *show_help =
    "usage: rehearse cost show COST [--batch SPEC]... [--tp N] [--json]\n"
    "       rehearse cost presets\n"
    "       rehearse cost efficiency TABLE --roofline ROOF -o OUT (see its --help)\n"
    "       rehearse cost fit-kernels PROFILE... --gpu GPU [-o KERNELS] (see its --help)\n"
    "       rehearse cost import vidur PROFILE --model M -o COST (see its --help)\n\n"
    "Prints the step time a cost model predicts and its terms (for a roofline,\n"
    "each operator's FLOPs, bytes and bound). SPEC is comma-separated:\n"
    "  prefill=N[@CTX]   one prompt chunk of N tokens after CTX cached tokens (repeatable)\n"
    "  decode=N[@CTX]    N decoding sequences with CTX tokens of context each\n"
    "  spec=K            each decode verifies K drafts made by K draft forward passes\n"
    "  lora=K            every token runs under one of K LoRA adapters (needs --max-lora-rank)\n"
    "  loads=N           N of them loaded into GPU slots before the step\n"
    "e.g. --batch prefill=8192 --batch decode=64@2000,spec=3. Without --batch a\n"
    "few typical shapes are shown.\n"
    "  --tp N    tensor-parallel size (default: the cost file's own)\n"
    "  --ep-size N, --enable-dp-attention, --dp-size N, --moe-a2a-backend B, --deepep-mode M,\n"
    "  --enable-two-batch-overlap, --expert-imbalance X, --cuda-graph-max-bs N,\n"
    "  --disable-cuda-graph, --disable-overlap-schedule, --max-lora-rank R,\n"
    "  --lora-target-modules LIST, --max-loras-per-batch N\n"
    "            the server's layout and host, as rehearse sim takes them (a roofline)\n"
    "  --json    print JSON instead of tables\n";

static int cost_show(int argc, char **argv)
{
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 2;
    rh_err e;
    const char *name, *specs[MAX_BATCHES];
    int nspecs = 0, json = 0;
    unsigned long long tp = 0;
    sim_config serve;
    sim_config_default(&serve);
    while ((name = rh_args_next(&a))) {
        if (!strcmp(name, "json")) {
            if (rh_args_no_value(&a, &e) < 0) goto bad;
            json = 1;
        } else if (!strcmp(name, "batch")) {
            const char *v = rh_args_value(&a, &e);
            if (!v) goto bad;
            if (nspecs == MAX_BATCHES) {
                rh_fail(&e, "at most %d --batch flags", MAX_BATCHES);
                goto bad;
            }
            specs[nspecs++] = v;
        } else if (!strcmp(name, "tp") || !strcmp(name, "tp-size")) {
            const char *v = rh_args_value(&a, &e);
            if (!v || rh_parse_u64(v, "--tp", &tp, &e) < 0) goto bad;
            if (tp < 1 || tp > 4096) {
                rh_fail(&e, "--tp must be 1..4096 (got %s)", v);
                goto bad;
            }
        } else if (is_serving_knob(name)) {
            int takes = sim_config_takes_value(name);
            const char *v = takes ? rh_args_value(&a, &e) : (a.inline_val ? rh_args_value(&a, &e) : "");
            if (!v || sim_config_set(&serve, name, v, &e) < 0) goto bad;
        } else {
            rh_fail(&e, "cost show: unknown flag --%s (see rehearse cost show --help)", name);
            goto bad;
        }
    }
    if (a.npos != 1) {
        rh_fail(&e, "cost show takes one COST file (got %d); see rehearse cost show --help", a.npos);
        goto bad;
    }
    static const char *defaults[] = {"prefill=2048", "prefill=8192", "decode=1@2048", "decode=64@2048",
                                     "decode=256@2048"};
    if (!nspecs)
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) specs[nspecs++] = defaults[i];
    cost_model *m = cost_load(a.pos[0], &e);
    if (!m) goto bad;
    serve.tp = (uint32_t)tp;
    if (cost_check_tp(m, (uint32_t)tp, &e) < 0 || sim_serving_resolve(&serve, m, &e) < 0) {
        cost_free(m);
        goto bad;
    }
    cost_seq *seqs = malloc(MAX_SEQS * sizeof *seqs);
    cost_batch *bs = malloc((size_t)nspecs * sizeof *bs);
    int rc = 0;
    for (int i = 0; i < nspecs && seqs && bs && rc == 0; i++) {
        /* every batch keeps its own sequences: one region of seqs each */
        uint32_t room = MAX_SEQS / (uint32_t)nspecs;
        rc = cost_batch_parse(specs[i], seqs + (size_t)i * room, room, &bs[i], &e);
        bs[i].tp = (uint32_t)tp;
        bs[i].serving = &serve.serving;
    }
    if (!seqs || !bs) rc = rh_fail(&e, "out of memory");
    if (rc == 0 && json) {
        json_t *arr = json_array();
        for (int i = 0; i < nspecs; i++) json_array_append_new(arr, show_json(specs[i], m, &bs[i]));
        const cost_overheads *ov = &m->over;
        json_t *o = json_pack("{s:s, s:s, s:o, s:{s:f, s:f, s:f, s:f}}", "cost", m->path, "kind", m->ops->kind,
                              "batches", arr, "overheads", "step_s", ov->step_s, "forward_s", ov->forward_s,
                              "request_s", ov->request_s, "output_token_s", ov->output_token_s);
        json_dumpf(o, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        printf("\n");
        json_decref(o);
    } else if (rc == 0) {
        describe(stdout, m, (uint32_t)tp);
        for (int i = 0; i < nspecs; i++) show_text(specs[i], m, &bs[i]);
        show_overheads(m);
    }
    free(seqs);
    free(bs);
    cost_free(m);
    if (rc < 0) goto bad;
    return 0;
bad:
    fprintf(stderr, "rehearse: %s\n", e.msg);
    return 1;
}

static int cost_presets(void)
{
    char list[4096];
    cost_preset_list("models", list, sizeof list);
    printf("models: %s\n", list);
    cost_preset_list("gpus", list, sizeof list);
    printf("gpus:   %s\n", list);
    cost_preset_list("hosts", list, sizeof list);
    printf("hosts:  %s\n", list);
    printf("(search path: $REHEARSE_PRESETS, <binary dir>/sim/cost/presets, <binary dir>/../share/rehearse/presets;\n"
           " a cost file may also name a preset file by path, e.g. a Hugging Face config.json)\n");
    return 0;
}

int cost_main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(show_help, stderr);
        return 1;
    }
    if (!strcmp(argv[1], "efficiency")) return cost_efficiency_main(argc, argv);
    if (!strcmp(argv[1], "fit-kernels")) return cost_fit_kernels_main(argc, argv);
    if (!strcmp(argv[1], "import")) return cost_import_main(argc, argv);
    if (rh_wants_help(argc, argv)) {
        fputs(show_help, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "show")) return cost_show(argc, argv);
    if (!strcmp(argv[1], "presets")) {
        if (argc > 2) {
            fprintf(stderr, "rehearse: cost presets takes no arguments\n");
            return 1;
        }
        return cost_presets();
    }
    fprintf(stderr, "rehearse: unknown cost command '%s' (show, presets, efficiency, fit-kernels, import)\n", argv[1]);
    return 1;
}
