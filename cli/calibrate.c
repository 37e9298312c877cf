/* calibrate.c — `rehearse calibrate`: measure a model's kernels on this machine
 * and write a table cost model, then show what it predicts for a few steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/model/runner.h"
#include "sim/calibrate/calibrate.h"
#include "sim/cost/cost.h"
#include "util/args.h"

static const char *help_text =
    "usage: rehearse calibrate --model MODEL -o COST [--backend cpu|cuda] [--tp N] [options]\n\n"
    "Runs the kernels of the forward pass over a grid of shapes — each layer's GEMMs\n"
    "over token counts, prefill attention over (new tokens, context), decode attention\n"
    "over (sequences, summed context), norms, RoPE, KV writes, SiLU, the LM head,\n"
    "sampling, the runner's batch preparation and the scheduler's step; all-reduces\n"
    "under tensor parallel — repeating each point until its samples agree, and writes\n"
    "COST, a \"table\" cost model for rehearse sim (sim/cost/COST.md).\n\n"
    "  --model MODEL        preset name, config.json or model directory (required)\n"
    "  -o COST              the cost file to write (required)\n"
    "  --backend B          cpu (default) or cuda\n"
    "  --tp N               tensor-parallel size the shapes are split for (default 1)\n"
    "  --page-size N        KV page size in tokens (default 16)\n"
    "  --max-tokens N       largest token count of the per-token grids (default 8192)\n"
    "  --max-seqs N         largest batch in sequences (default 256)\n"
    "  --max-context N      longest context measured (default: the model's)\n"
    "  --temperature T, --top-p P, --top-k K   how sampling is timed (default greedy)\n"
    "  --tolerance X        stop a point when its samples' interquartile range is\n"
    "                       within X of their median (default 0.05)\n"
    "  --quick              coarse grids and a loose rule: a smoke run in seconds\n"
    "  --lora-rank R        also time LoRA's shrink and expand GEMMs (lora: tokens x adapters)\n"
    "                       and adapter loads (lora_load) at rank R, as the engine runs them\n"
    "  --whole-steps        also time whole forward passes (step_prefill, step_decode); the\n"
    "                       table then scales each step's kernel sum to them (COST.md)\n"
    "  --seed S             dummy weights and inputs (default 1)\n"
    "Models: %s.\n";

static int fail(const char *msg)
{
    fprintf(stderr, "rehearse calibrate: %s\n", msg);
    return 1;
}

/* A few steps priced by the file just written: a check that it loads, and
 * the numbers a person wants to see first. */
static void show_examples(const char *path)
{
    rh_err e;
    cost_model *m = cost_load(path, &e);
    if (!m) {
        fprintf(stderr, "rehearse calibrate: the written file does not load: %s\n", e.msg);
        return;
    }
    static const struct {
        const char *what;
        uint32_t prefill, pctx, decodes, dctx;
    } ex[] = {{"decode, 1 sequence at context 512", 0, 0, 1, 512},
              {"decode, 32 sequences at context 512", 0, 0, 32, 512},
              {"prefill, 512 tokens", 512, 0, 0, 0},
              {"mixed, 256-token chunk + 16 decodes", 256, 256, 16, 1024}};
    printf("predicted step times:\n");
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        cost_seq s[33];
        uint32_t n = 0;
        if (ex[i].prefill) s[n++] = (cost_seq){ex[i].prefill, ex[i].pctx, true};
        for (uint32_t k = 0; k < ex[i].decodes; k++) s[n++] = (cost_seq){1, ex[i].dctx, false};
        cost_batch b = {.seqs = s, .n = n};
        cost_batch_summarize(&b);
        printf("  %-40s %10.3f ms\n", ex[i].what, cost_step_time(m, &b) * 1e3);
    }
    cost_free(m);
}

int calibrate_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        printf(help_text, model_preset_names());
        return 0;
    }
    calib_opts o;
    calib_opts_default(&o);
    rh_args a;
    rh_err e;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    const char *model_spec = NULL, *out = NULL, *backend = "cpu", *n, *v;
    double tol = -1, temp = 0, top_p = 1;
    uint32_t top_k = 0;
    while ((n = rh_args_next(&a))) {
        if (!strcmp(n, "quick") || !strcmp(n, "whole-steps")) {
            if (rh_args_no_value(&a, &e)) return fail(e.msg);
            if (n[0] == 'q') o.quick = true;
            else o.whole_steps = true;
            continue;
        }
        if (!(v = rh_args_value(&a, &e))) return fail(e.msg);
        int r = 0;
        unsigned long long seed;
        if (!strcmp(n, "model")) model_spec = v;
        else if (!strcmp(n, "o") || !strcmp(n, "output")) out = v;
        else if (!strcmp(n, "backend")) backend = v;
        else if (!strcmp(n, "tp") || !strcmp(n, "tp-size")) r = rh_parse_u32(v, "--tp", 1, 4096, &o.tp, &e);
        else if (!strcmp(n, "page-size")) r = rh_parse_u32(v, "--page-size", 1, 1u << 16, &o.page_size, &e);
        else if (!strcmp(n, "max-tokens")) r = rh_parse_u32(v, "--max-tokens", 2, 1u << 20, &o.max_tokens, &e);
        else if (!strcmp(n, "max-seqs")) r = rh_parse_u32(v, "--max-seqs", 2, 1u << 16, &o.max_seqs, &e);
        else if (!strcmp(n, "max-context")) r = rh_parse_u32(v, "--max-context", 32, 1u << 24, &o.max_context, &e);
        else if (!strcmp(n, "lora-rank")) r = rh_parse_u32(v, "--lora-rank", 1, 4096, &o.lora_rank, &e);
        else if (!strcmp(n, "top-k")) r = rh_parse_u32(v, "--top-k", 0, 1u << 30, &top_k, &e);
        else if (!strcmp(n, "temperature")) r = rh_parse_double(v, "--temperature", &temp, &e);
        else if (!strcmp(n, "top-p")) r = rh_parse_double(v, "--top-p", &top_p, &e);
        else if (!strcmp(n, "tolerance")) {
            r = rh_parse_double(v, "--tolerance", &tol, &e);
            if (!r && !(tol > 0 && tol < 10)) r = rh_fail(&e, "--tolerance: %g must be in (0, 10)", tol);
        } else if (!strcmp(n, "seed")) {
            if (!(r = rh_parse_u64(v, "--seed", &seed, &e))) o.seed = seed;
        } else {
            fprintf(stderr, "rehearse calibrate: unknown flag --%s (rehearse calibrate --help)\n", n);
            return 1;
        }
        if (r) return fail(e.msg);
    }
    if (a.npos) return fail("takes no positional arguments (the model is --model MODEL)");
    if (!model_spec) return fail("--model MODEL is required (a preset name, config.json or model directory)");
    if (!out) return fail("-o COST is required (the table cost file to write)");
    o.sampling = (kern_sampling){(float)temp, (float)top_p, top_k};
    if (runner_sampling_check(&o.sampling, &e)) return fail(e.msg);
    if (o.quick) calib_rule_quick(&o.rule);
    if (tol > 0) o.rule.tolerance = tol;

    model_config c;
    if (model_config_resolve(model_spec, &c, &e)) return fail(e.msg);
    calib_backend b;
    if (calib_backend_find(backend, &b, &e) < 0) return fail(e.msg);

    calib_report rep;
    json_t *table = calib_run(&b, &c, &o, &rep, &e);
    if (!table) return fail(e.msg);
    int rc = calib_save(table, out, &e);
    json_decref(table);
    if (rc < 0) return fail(e.msg);
    printf("calibrated %s on %s (%u thread%s, tp %u) in %.1f s: %u points, %u not converged to %.0f%%\n", c.name,
           b.name, b.threads, b.threads == 1 ? "" : "s", o.tp, rep.seconds, rep.points, rep.unconverged,
           o.rule.tolerance * 100);
    for (uint32_t i = 0; i < rep.n_notes; i++) printf("  note: %s\n", rep.notes[i]);
    printf("wrote %s\n", out);
    show_examples(out);
    return 0;
}
