/* cli_synth.c — `rehearse trace slice` and `rehearse trace synth`. */
#include "traces/cli_int.h"
#include "traces/slice.h"
#include "traces/synth.h"

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
    "  --length-scale X    both of the above\n\n"
    "Scaling drops measured results; steps are kept only for a plain time window.\n"
    "  --input-format F, --model NAME, --block-size N   as for import\n";

static int num_flag(rh_args *a, const char *flag, double *out, rh_err *e)
{
    const char *v = rh_args_value(a, e);
    return v ? rh_parse_double(v, flag, out, e) : -1;
}

static int count_flag(rh_args *a, const char *flag, uint64_t *out, rh_err *e)
{
    unsigned long long n;
    const char *v = rh_args_value(a, e);
    if (!v || rh_parse_u64(v, flag, &n, e) < 0) return -1;
    *out = n;
    return 0;
}

static int u32_flag(rh_args *a, const char *flag, uint32_t *out, rh_err *e)
{
    uint64_t n;
    if (count_flag(a, flag, &n, e) < 0) return -1;
    if (n > UINT32_MAX) return rh_fail(e, "%s: %llu is too large", flag, (unsigned long long)n);
    *out = (uint32_t)n;
    return 0;
}

int trace_cmd_slice(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(slice_help, stdout);
        return 0;
    }
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    tr_import_opts io;
    tr_import_opts_init(&io);
    tr_slice_opts o;
    tr_slice_opts_init(&o);
    const char *in = NULL, *out = NULL, *name;
    while ((name = rh_args_next(&a))) {
        int r = trace_cli_input_flag(&a, name, &io, &e);
        double x;
        if (r == 0) {
            if (!strcmp(name, "o") || !strcmp(name, "output")) r = (out = rh_args_value(&a, &e)) ? 0 : -1;
            else if (!strcmp(name, "from")) r = num_flag(&a, "--from", &o.from, &e);
            else if (!strcmp(name, "to")) r = num_flag(&a, "--to", &o.to, &e);
            else if (!strcmp(name, "sample")) r = num_flag(&a, "--sample", &o.sample, &e);
            else if (!strcmp(name, "seed")) r = count_flag(&a, "--seed", &o.seed, &e);
            else if (!strcmp(name, "first")) r = count_flag(&a, "--first", &o.first, &e);
            else if (!strcmp(name, "rate-scale")) r = num_flag(&a, "--rate-scale", &o.rate_scale, &e);
            else if (!strcmp(name, "input-scale")) r = num_flag(&a, "--input-scale", &o.input_scale, &e);
            else if (!strcmp(name, "output-scale")) r = num_flag(&a, "--output-scale", &o.output_scale, &e);
            else if (!strcmp(name, "length-scale")) {
                r = num_flag(&a, "--length-scale", &x, &e);
                o.input_scale = o.output_scale = x;
            } else r = rh_fail(&e, "unknown flag --%s (see --help)", name);
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
    "  --model NAME              recorded in the header\n";

static int dist_flag(rh_args *a, const char *flag, tr_len_dist *d, rh_err *e)
{
    const char *v = rh_args_value(a, e);
    if (!v) return -1;
    if (!strcmp(v, "fixed")) d->kind = TR_LEN_FIXED;
    else if (!strcmp(v, "uniform")) d->kind = TR_LEN_UNIFORM;
    else if (!strcmp(v, "lognormal")) d->kind = TR_LEN_LOGNORMAL;
    else return rh_fail(e, "%s: '%s' is not fixed, uniform or lognormal", flag, v);
    return 0;
}

int trace_cmd_synth(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(synth_help, stdout);
        return 0;
    }
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    const char *out = NULL, *name, *v;
    int requests_set = 0;
    while ((name = rh_args_next(&a))) {
        int r = 0;
        if (!strcmp(name, "o") || !strcmp(name, "output")) r = (out = rh_args_value(&a, &e)) ? 0 : -1;
        else if (!strcmp(name, "seed")) r = count_flag(&a, "--seed", &o.seed, &e);
        else if (!strcmp(name, "requests")) r = count_flag(&a, "--requests", &o.requests, &e), requests_set = 1;
        else if (!strcmp(name, "duration")) r = num_flag(&a, "--duration", &o.duration, &e);
        else if (!strcmp(name, "arrival")) {
            if (!(v = rh_args_value(&a, &e))) r = -1;
            else if (!strcmp(v, "poisson")) o.arrival = TR_ARRIVAL_POISSON;
            else if (!strcmp(v, "gamma")) o.arrival = TR_ARRIVAL_GAMMA;
            else if (!strcmp(v, "closed-loop")) o.arrival = TR_ARRIVAL_CLOSED;
            else r = rh_fail(&e, "--arrival: '%s' is not poisson, gamma or closed-loop", v);
        } else if (!strcmp(name, "rate")) r = num_flag(&a, "--rate", &o.rate, &e);
        else if (!strcmp(name, "burstiness")) r = num_flag(&a, "--burstiness", &o.burstiness, &e);
        else if (!strcmp(name, "clients")) r = u32_flag(&a, "--clients", &o.clients, &e);
        else if (!strcmp(name, "input-dist")) r = dist_flag(&a, "--input-dist", &o.input, &e);
        else if (!strcmp(name, "input-len")) r = num_flag(&a, "--input-len", &o.input.mean, &e);
        else if (!strcmp(name, "input-range-ratio")) r = num_flag(&a, "--input-range-ratio", &o.input.range_ratio, &e);
        else if (!strcmp(name, "input-sigma")) r = num_flag(&a, "--input-sigma", &o.input.sigma, &e);
        else if (!strcmp(name, "output-dist")) r = dist_flag(&a, "--output-dist", &o.output, &e);
        else if (!strcmp(name, "output-len")) r = num_flag(&a, "--output-len", &o.output.mean, &e);
        else if (!strcmp(name, "output-range-ratio")) r = num_flag(&a, "--output-range-ratio", &o.output.range_ratio, &e);
        else if (!strcmp(name, "output-sigma")) r = num_flag(&a, "--output-sigma", &o.output.sigma, &e);
        else if (!strcmp(name, "lengths-from")) r = (o.lengths_from = rh_args_value(&a, &e)) ? 0 : -1;
        else if (!strcmp(name, "block-size")) r = u32_flag(&a, "--block-size", &o.block_size, &e);
        else if (!strcmp(name, "prefix-groups")) r = u32_flag(&a, "--prefix-groups", &o.groups, &e);
        else if (!strcmp(name, "prompts-per-group")) r = u32_flag(&a, "--prompts-per-group", &o.prompts_per_group, &e);
        else if (!strcmp(name, "system-prompt-len")) r = u32_flag(&a, "--system-prompt-len", &o.system_prompt, &e);
        else if (!strcmp(name, "turns")) r = u32_flag(&a, "--turns", &o.turns, &e);
        else if (!strcmp(name, "sessions")) r = u32_flag(&a, "--sessions", &o.sessions, &e);
        else if (!strcmp(name, "model")) r = (o.model = rh_args_value(&a, &e)) ? 0 : -1;
        else r = rh_fail(&e, "unknown flag --%s (see --help)", name);
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
    /* Shared-prefix groups default to one pass over their prompts; a
     * duration alone means "until then". */
    if (!requests_set && o.groups) o.requests = (uint64_t)o.groups * o.prompts_per_group;
    if (!requests_set && o.duration > 0) o.requests = 0;
    if (tr_synth_file(&o, out, &e) < 0) return trace_cli_fail("synth", &e);
    printf("wrote a synthetic trace (seed %llu) to %s\n", (unsigned long long)o.seed, out);
    return 0;
}
