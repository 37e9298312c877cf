/* synth.h — seeded synthetic traces.
 *
 * A seed gives the same trace byte for byte. Requests stream into a sink, so
 * memory does not grow with their number (only with the prompt table of
 * shared-prefix groups, the open sessions and a resampling pool).
 *
 * Arrivals: Poisson at `rate`; gamma with the same mean and shape
 * `burstiness` (1 is Poisson, smaller is burstier: the squared coefficient of
 * variation of the gaps is 1/burstiness); or closed loop with `clients`
 * clients, where every arrival is 0 and the header says arrival=closed-loop,
 * clients=N (the rule is in traces/FORMAT.md). Open-loop arrivals are whole
 * microseconds.
 *
 * Lengths: fixed, uniform over [mean(1-r), mean(1+r)], lognormal with the
 * given mean and sigma, or (input, output) pairs drawn from another trace.
 * Inputs are at least 1 token, outputs at least 1.
 *
 * Prefixes: with `groups` G, `prompts_per_group` P and `system_prompt` S,
 * there are G*P prompts; prompt (g, p) is S shared tokens followed by a
 * question whose length is drawn once from the input distribution. Requests
 * cycle through a seeded shuffle of the G*P prompts, so the first G*P
 * requests use each prompt once.
 *
 * Sessions: with `turns` T > 1, a request is a turn of a session; turn k's
 * prompt is turn k-1's prompt, its output, and a new message drawn from the
 * input distribution. Open loop keeps `sessions` sessions open at once and
 * gives each arrival to one of them at random; closed loop lists each
 * session's turns one after another.
 *
 * Block hashes (block_size > 0): ids are handed out in order of first use,
 * one per block, as in Mooncake traces. Blocks that hold the same prefix
 * carry the same id: the full blocks of a group's system prompt, all blocks
 * of a repeated prompt, and the full blocks of turn k-1's prompt in turn k.
 *
 * Adapters: with `adapters` N, each request (each session, with turns) runs
 * with LoRA adapter k in 1..N drawn by Zipf with exponent `adapter_zipf`
 * (0: uniform; S-LoRA's power-law popularity), from its own seeded stream,
 * so the rest of the trace is the same as without adapters. */
#ifndef RH_TRACES_SYNTH_H
#define RH_TRACES_SYNTH_H

#include "traces/import/import.h"

typedef enum tr_arrival { TR_ARRIVAL_POISSON = 0, TR_ARRIVAL_GAMMA, TR_ARRIVAL_CLOSED } tr_arrival;
typedef enum tr_len_kind { TR_LEN_FIXED = 0, TR_LEN_UNIFORM, TR_LEN_LOGNORMAL } tr_len_kind;

typedef struct tr_len_dist {
    tr_len_kind kind;
    double mean;
    double range_ratio;         /* uniform: in [0, 1] */
    double sigma;               /* lognormal: of the underlying normal */
} tr_len_dist;

typedef struct tr_synth_opts {
    uint64_t seed;
    uint64_t requests;          /* how many (0 with duration: until duration) */
    double duration;            /* open loop: stop at this arrival time (0: no limit) */
    tr_arrival arrival;
    double rate;                /* requests per second (open loop) */
    double burstiness;          /* gamma shape */
    uint32_t clients;           /* closed loop */
    tr_len_dist input, output;
    const char *lengths_from;   /* a trace to draw (input, output) pairs from, or NULL */
    uint32_t block_size;        /* 0: no block hashes */
    uint32_t groups, prompts_per_group, system_prompt;
    uint32_t turns;             /* 1: single-turn */
    uint32_t sessions;          /* open sessions (open loop with turns) */
    uint32_t adapters;          /* LoRA adapters (0: every request runs on the base model) */
    double adapter_zipf;        /* their popularity's Zipf exponent */
    uint32_t adapter_rank;      /* written to the header as adapter.rank (0: not written) */
    const char *model;          /* header model, may be NULL */
    int requests_set;           /* `requests` was given (else defaults apply) */
} tr_synth_opts;

/* 1000 Poisson requests at 10/s, lognormal input (mean 1024, sigma 0.5) and
 * output (mean 256, sigma 0.5), block size 512, single-turn, seed 1. */
void tr_synth_opts_init(tr_synth_opts *o);
int tr_synth_check(const tr_synth_opts *o, rh_err *e);
/* One option by its CLI name (`input-len`; `input_len` too): 1 set, 0 not an
 * option, -1 bad value. Strings are kept by pointer. Then call
 * tr_synth_opts_finish, which applies the defaults that depend on what was
 * given (groups without --requests: one pass over their prompts). */
int tr_synth_opts_set(tr_synth_opts *o, const char *name, const char *value, rh_err *e);
void tr_synth_opts_finish(tr_synth_opts *o);
int tr_synth(const tr_synth_opts *o, const tr_sink *s, rh_err *e);
int tr_synth_file(const tr_synth_opts *o, const char *path, rh_err *e);

#endif
