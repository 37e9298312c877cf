/* opts.c — synth and slice options by their command-line names, so the CLI
 * (`rehearse trace synth|slice`) and the Lua API (trace.synth{...},
 * t:slice{...}) accept exactly the same names and values. '_' is read as
 * '-' so Lua keys work. */
#include <stdio.h>
#include <string.h>

#include "traces/tools/slice.h"
#include "traces/tools/synth.h"
#include "util/args.h"


static int num(const char *flag, const char *v, double *out, rh_err *e)
{
    return rh_parse_double(v, flag, out, e);
}

static int count(const char *flag, const char *v, uint64_t *out, rh_err *e)
{
    unsigned long long n;
    if (rh_parse_u64(v, flag, &n, e) < 0) return -1;
    *out = n;
    return 0;
}

static int u32(const char *flag, const char *v, uint32_t *out, rh_err *e)
{
    uint64_t n;
    if (count(flag, v, &n, e) < 0) return -1;
    if (n > UINT32_MAX) return rh_fail(e, "%s: %llu is too large", flag, (unsigned long long)n);
    *out = (uint32_t)n;
    return 0;
}

static int dist(const char *flag, const char *v, tr_len_dist *d, rh_err *e)
{
    if (!strcmp(v, "fixed")) d->kind = TR_LEN_FIXED;
    else if (!strcmp(v, "uniform")) d->kind = TR_LEN_UNIFORM;
    else if (!strcmp(v, "lognormal")) d->kind = TR_LEN_LOGNORMAL;
    else return rh_fail(e, "%s: '%s' is not fixed, uniform or lognormal", flag, v);
    return 0;
}

int tr_synth_opts_set(tr_synth_opts *o, const char *name_in, const char *v, rh_err *e)
{
    char name[64], flag[72];
    rh_knob_name(name_in, name, sizeof name);
    snprintf(flag, sizeof flag, "--%s", name);
    int r;
    if (!strcmp(name, "seed")) r = count(flag, v, &o->seed, e);
    else if (!strcmp(name, "requests")) {
        r = count(flag, v, &o->requests, e);
        o->requests_set = 1;
    } else if (!strcmp(name, "duration")) r = num(flag, v, &o->duration, e);
    else if (!strcmp(name, "arrival")) {
        r = 0;
        if (!strcmp(v, "poisson")) o->arrival = TR_ARRIVAL_POISSON;
        else if (!strcmp(v, "gamma")) o->arrival = TR_ARRIVAL_GAMMA;
        else if (!strcmp(v, "closed-loop")) o->arrival = TR_ARRIVAL_CLOSED;
        else r = rh_fail(e, "--arrival: '%s' is not poisson, gamma or closed-loop", v);
    } else if (!strcmp(name, "rate")) r = num(flag, v, &o->rate, e);
    else if (!strcmp(name, "burstiness")) r = num(flag, v, &o->burstiness, e);
    else if (!strcmp(name, "clients")) r = u32(flag, v, &o->clients, e);
    else if (!strcmp(name, "input-dist")) r = dist(flag, v, &o->input, e);
    else if (!strcmp(name, "input-len")) r = num(flag, v, &o->input.mean, e);
    else if (!strcmp(name, "input-range-ratio")) r = num(flag, v, &o->input.range_ratio, e);
    else if (!strcmp(name, "input-sigma")) r = num(flag, v, &o->input.sigma, e);
    else if (!strcmp(name, "output-dist")) r = dist(flag, v, &o->output, e);
    else if (!strcmp(name, "output-len")) r = num(flag, v, &o->output.mean, e);
    else if (!strcmp(name, "output-range-ratio")) r = num(flag, v, &o->output.range_ratio, e);
    else if (!strcmp(name, "output-sigma")) r = num(flag, v, &o->output.sigma, e);
    else if (!strcmp(name, "lengths-from")) r = (o->lengths_from = v) ? 0 : -1;
    else if (!strcmp(name, "block-size")) r = u32(flag, v, &o->block_size, e);
    else if (!strcmp(name, "prefix-groups")) r = u32(flag, v, &o->groups, e);
    else if (!strcmp(name, "prompts-per-group")) r = u32(flag, v, &o->prompts_per_group, e);
    else if (!strcmp(name, "system-prompt-len")) r = u32(flag, v, &o->system_prompt, e);
    else if (!strcmp(name, "turns")) r = u32(flag, v, &o->turns, e);
    else if (!strcmp(name, "sessions")) r = u32(flag, v, &o->sessions, e);
    else if (!strcmp(name, "adapters")) r = u32(flag, v, &o->adapters, e);
    else if (!strcmp(name, "adapter-zipf")) r = num(flag, v, &o->adapter_zipf, e);
    else if (!strcmp(name, "adapter-rank")) r = u32(flag, v, &o->adapter_rank, e);
    else if (!strcmp(name, "model")) r = (o->model = v) ? 0 : -1;
    else return 0;
    return r < 0 ? -1 : 1;
}

void tr_synth_opts_finish(tr_synth_opts *o)
{
    /* Shared-prefix groups default to one pass over their prompts; a
     * duration alone means "until then". */
    if (!o->requests_set && o->groups) o->requests = (uint64_t)o->groups * o->prompts_per_group;
    if (!o->requests_set && o->duration > 0) o->requests = 0;
}

int tr_slice_opts_set(tr_slice_opts *o, const char *name_in, const char *v, rh_err *e)
{
    char name[64], flag[72];
    rh_knob_name(name_in, name, sizeof name);
    snprintf(flag, sizeof flag, "--%s", name);
    int r;
    double x;
    if (!strcmp(name, "from")) r = num(flag, v, &o->from, e);
    else if (!strcmp(name, "to")) r = num(flag, v, &o->to, e);
    else if (!strcmp(name, "sample")) r = num(flag, v, &o->sample, e);
    else if (!strcmp(name, "seed")) r = count(flag, v, &o->seed, e);
    else if (!strcmp(name, "first")) r = count(flag, v, &o->first, e);
    else if (!strcmp(name, "rate-scale")) r = num(flag, v, &o->rate_scale, e);
    else if (!strcmp(name, "input-scale")) r = num(flag, v, &o->input_scale, e);
    else if (!strcmp(name, "output-scale")) r = num(flag, v, &o->output_scale, e);
    else if (!strcmp(name, "max-input-len")) r = u32(flag, v, &o->max_input_len, e);
    else if (!strcmp(name, "max-total-len")) r = u32(flag, v, &o->max_total_len, e);
    else if (!strcmp(name, "length-scale")) {
        r = num(flag, v, &x, e);
        if (r == 0) o->input_scale = o->output_scale = x;
    } else return 0;
    return r < 0 ? -1 : 1;
}
