/* trace_synth.c — `rehearse trace slice` and `rehearse trace synth`. */
#include "cli/trace_cmds.h"
#include "traces/tools/slice.h"
#include "traces/tools/synth.h"

#include <stdio.h>
#include <string.h>

static const char slice_help[] =
    "usage: rehearse trace slice IN -o OUT [flags]\n\n"
    "Cuts and reshapes a trace (any format rehearse reads) into a binary trace.\n"
    "Applied in this order:\n"
    "  --from S --to S     keep requests arriving in [from, to) s, shifted to start at 0\n"
    "  --sample F          keep each request with probability F (seeded, reproducible)\n"
    "  --seed N            seed for --sample (default 1)\n"
    "  --first N           keep the first N requests (after the above)\n"
    "  --rate-scale X      divide arrivals by X (2: twice the rate)\n"
    "  --input-scale X     multiply input lengths by X; block hashes are rescaled so\n"
    "                      shared prefixes stay shared\n"
    "  --output-scale X    multiply output lengths by X\n"
    "  --length-scale X    both of the above\n"
    "  --max-input-len N   drop requests with more than N prompt tokens\n"
    "  --max-total-len N   drop requests with more than N prompt + output tokens\n"
    "                      (a model's context length: a simulation refuses them)\n\n"
    "Scaling drops measured results; steps are kept only for a plain time window.\n"
    "  --input-format F, --model NAME, --block-size N   as for import\n";

int trace_cmd_slice(int argc, char **argv)
{
    rh_args a;
    tr_import_opts io;
    if (!trace_cli_start(argc, argv, slice_help, &a, &io)) return 0;
    rh_err e = {{0}};
    tr_slice_opts o;
    tr_slice_opts_init(&o);
    const char *in = NULL, *out = NULL, *name;
    while ((name = rh_args_next(&a))) {
        int r = trace_cli_input_flag(&a, name, &io, &e);
        if (r == 0) {
            if (!strcmp(name, "o") || !strcmp(name, "output")) {
                r = (out = rh_args_value(&a, &e)) ? 0 : -1;
            } else {
                const char *v = rh_args_value(&a, &e);
                r = v ? tr_slice_opts_set(&o, name, v, &e) : -1;
                if (r == 0) r = rh_fail(&e, "unknown flag --%s (see --help)", name);
            }
        }
        if (r < 0) return trace_cli_fail("slice", &e);
    }
    if (trace_cli_one_input(&a, &in, &e) < 0) return trace_cli_fail("slice", &e);
    if (!out) {
        rh_fail(&e, "no output given (-o OUT)");
        return trace_cli_fail("slice", &e);
    }
    if (o.to != 0 && o.to <= o.from) {
        rh_fail(&e, "--to %g is not after --from %g", o.to, o.from);
        return trace_cli_fail("slice", &e);
    }
    uint64_t kept = 0;
    if (tr_slice_file(in, &io, &o, out, &kept, &e) < 0) return trace_cli_fail("slice", &e);
    printf("kept %llu requests of %s in %s\n", (unsigned long long)kept, in, out);
    return 0;
}

static const char synth_help[] =
    "usage: rehearse trace synth -o OUT [flags]\n\n"
    "Generates a synthetic trace; the same flags and seed give the same file, byte\n"
    "for byte.\n\n"
    "  --seed N                  (default 1)\n"
    "  --requests N              how many (default 1000; 0 with --duration: until then)\n"
    "  --duration S              open loop: stop at this arrival time\n"
    "arrivals:\n"
    "  --arrival poisson|gamma|closed-loop   (default poisson)\n"
    "  --rate R                  requests per second (default 10)\n"
    "  --burstiness B            gamma shape: 1 is Poisson, below 1 burstier (default 1)\n"
    "  --clients N               closed loop: all arrivals 0, N clients each send the\n"
    "                            next request when their previous one finishes\n"
    "                            (header arrival=closed-loop, clients=N) (default 8)\n"
    "lengths (input: each new prompt or new message; output):\n"
    "  --input-dist fixed|uniform|lognormal    (default lognormal)\n"
    "  --input-len N             mean (default 1024)\n"
    "  --input-range-ratio R     uniform over [N(1-R), N(1+R)]\n"
    "  --input-sigma S           lognormal sigma (default 0.5)\n"
    "  --output-dist, --output-len (default 256), --output-range-ratio, --output-sigma\n"
    "  --lengths-from TRACE      draw (input, output) pairs from another trace instead\n"
    "prefixes and sessions:\n"
    "  --block-size N            tokens per block hash, 0 for none (default 512)\n"
    "  --prefix-groups G --prompts-per-group P --system-prompt-len S\n"
    "                            G groups of P prompts sharing an S-token system prompt\n"
    "  --turns T                 multi-turn sessions: turn k extends turn k-1's context\n"
    "  --sessions K              open sessions at once (open loop; default 16)\n"
    "LoRA adapters:\n"
    "  --adapters N              each request (or session) runs with adapter 1..N (default 0: base)\n"
    "  --adapter-zipf A          adapter popularity ~ k^-A, S-LoRA's power law (default 1; 0 uniform)\n"
    "  --adapter-rank R          recorded in the header as the adapters' rank (adapter.rank)\n"
    "  --model NAME              recorded in the header\n";

int trace_cmd_synth(int argc, char **argv)
{
    rh_args a;
    if (!trace_cli_start(argc, argv, synth_help, &a, NULL)) return 0;
    rh_err e = {{0}};
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    const char *out = NULL, *name;
    while ((name = rh_args_next(&a))) {
        int r;
        if (!strcmp(name, "o") || !strcmp(name, "output")) {
            r = (out = rh_args_value(&a, &e)) ? 0 : -1;
        } else {
            const char *v = rh_args_value(&a, &e);
            r = v ? tr_synth_opts_set(&o, name, v, &e) : -1;
            if (r == 0) r = rh_fail(&e, "unknown flag --%s (see --help)", name);
        }
        if (r < 0) return trace_cli_fail("synth", &e);
    }
    if (a.npos) {
        rh_fail(&e, "unexpected argument '%s' (the output is -o OUT)", a.pos[0]);
        return trace_cli_fail("synth", &e);
    }
    if (!out) {
        rh_fail(&e, "no output given (-o OUT)");
        return trace_cli_fail("synth", &e);
    }
    tr_synth_opts_finish(&o);
    if (tr_synth_file(&o, out, &e) < 0) return trace_cli_fail("synth", &e);
    printf("wrote a synthetic trace (seed %llu) to %s\n", (unsigned long long)o.seed, out);
    return 0;
}
