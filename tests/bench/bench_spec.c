/* bench_spec.c — does speculative decoding pay on this machine's CPU
 * engine, where does it stop paying, and does the simulator say the same?
 *
 * Two workloads, tiny-llama with dummy weights, greedy, closed loop, every
 * request PROMPT prompt tokens and OUTPUT output tokens:
 *   repeat  each prompt repeats one 4-token phrase (a block hash repeated):
 *           lookup finds what the model goes on to say, often
 *   random  private random prompts: lookup rarely finds it
 * Grid: concurrency 1, 4, 16, 64 (requests: 8, 8, 32, 64) x speculation off,
 * NGRAM and DRAFT (self-speculation with the first layer), K drafts each.
 *
 * Measured: `rehearse replay` (replay_run) of each cell; output tokens per
 * second as vLLM's benchmark defines it, read back from the recording. The
 * grid runs ROUNDS times, cells interleaved, and each cell keeps its best
 * round: other processes on the machine only ever slow a run down.
 * Simulated: `rehearse sim` (sim_run) of the same trace and knobs, priced by
 * a linear cost model fitted here (the NNLS of `rehearse fit`) to every step
 * recorded with speculation off or NGRAM; DRAFT's drafting priced by a draft
 * ratio fitted in closed form to the DRAFT cells' steps; each cell's
 * acceptance taken from its own recording's header histogram, as
 * --speculative-accept-hist-from does. Prints both grids and the first
 * concurrency at which speculation no longer pays, measured and simulated;
 * writes reports/bench/spec.json. One run per cell on a shared 2-core
 * machine: figures move by several percent between runs (load average in
 * the JSON). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/replay.h"
#include "engine/speculative/hist.h"
#include "sim/cost/cost_fit.h"
#include "traces/import/import.h"
#include "traces/metrics/metrics.h"
#include "sim/sim.h"
#include "util/progress.h"

#define PROMPT 64
#define OUTPUT 96
#define ROUNDS 2
#define K 3
#define POOL_TOKENS 32768
#define N_CONC 4
#define N_MODES 3
#define N_WORK 2

static const uint32_t conc[N_CONC] = {1, 4, 16, 64};
static const char *mode_name[N_MODES] = {"off", "ngram", "draft"};
static const char *work_name[N_WORK] = {"repeat", "random"};

typedef struct cell {
    double measured, simulated;         /* output tokens per second */
    double accept_rate, mean_len;       /* recorded */
    double sim_mean_len;
    double wall_s;
    char rec[256];
} cell;

static cell grid[N_WORK][N_CONC][N_MODES];
static char slower[N_WORK * N_CONC * N_MODES * ROUNDS][256];   /* recordings of the rounds not kept */
static int n_slower;

static uint32_t requests_for(uint32_t c) { return c >= 64 ? 64 : c >= 4 ? 2 * c : 8; }

static void make_trace(int w, uint32_t n, tr_trace *t)
{
    tr_trace_init(t);
    t->header.block_size = w == 0 ? 4 : 0;
    uint64_t h[PROMPT / 4];
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t b = 0; b < PROMPT / 4; b++) h[b] = 7777 + i;
        tr_request q = {.id = i, .arrival = 0, .input_len = PROMPT, .output_len = OUTPUT};
        if (w == 0) {
            q.hashes = h;
            q.n_hashes = PROMPT / 4;
        }
        rh_err e;
        if (tr_trace_add_request(t, &q, &e) < 0) {
            fprintf(stderr, "bench_spec: %s\n", e.msg);
            exit(1);
        }
    }
}

static void set_mode(core_config *core, int mode)
{
    core->max_total_tokens = POOL_TOKENS;
    core->spec_steps = mode ? K : 0;
}

static int run_cell(int w, int ci, int mode, int round, const tr_trace *t, cell *out)
{
    replay_config c;
    replay_config_default(&c);
    c.engine.model = "tiny-llama";
    set_mode(&c.engine.core, mode);
    c.engine.spec.algorithm = mode == 1 ? SPEC_NGRAM : mode == 2 ? SPEC_DRAFT : SPEC_NONE;
    c.max_concurrency = conc[ci];
    char rec[256];
    snprintf(rec, sizeof rec, "build/tmp/bench-spec-%s-c%u-%s-%d.rhtr", work_name[w], conc[ci], mode_name[mode], round);
    c.out_path = rec;
    replay_result res;
    rh_err e;
    metrics_summary s;
    if (replay_run(&c, t, &res, &e) < 0 || metrics_of_trace(rec, NULL, &s, &e) < 0) {
        fprintf(stderr, "bench_spec: %s/%u/%s: %s\n", work_name[w], conc[ci], mode_name[mode], e.msg);
        return -1;
    }
    if (s.output_throughput <= out->measured) {   /* a slower round: its steps still feed the fit */
        snprintf(slower[n_slower++], sizeof slower[0], "%s", rec);
        return 0;
    }
    if (out->rec[0]) snprintf(slower[n_slower++], sizeof slower[0], "%s", out->rec);
    snprintf(out->rec, sizeof out->rec, "%s", rec);
    out->measured = s.output_throughput;
    out->accept_rate = s.spec_accept_rate;
    out->mean_len = s.mean_accepted_len;
    out->wall_s = res.wall_s;
    return 0;
}

/* ---- the cost model, fitted to what was recorded ---- */

typedef struct steps {
    tr_step *v;
    size_t n, cap;
} steps;

static int add_steps(steps *s, const char *path)
{
    tr_trace t;
    rh_err e;
    if (tr_trace_load(path, &t, &e) < 0) {
        fprintf(stderr, "bench_spec: %s\n", e.msg);
        return -1;
    }
    if (s->n + t.n_steps > s->cap) {
        size_t cap = (s->n + t.n_steps) * 2;
        tr_step *v = realloc(s->v, cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    memcpy(s->v + s->n, t.steps, t.n_steps * sizeof *t.steps);
    s->n += t.n_steps;
    tr_trace_free(&t);
    return 0;
}

/* The draft ratio R that best explains the DRAFT steps' durations given the
 * fitted verify cost: duration = verify(step) + R * drafting(step), least
 * squares on the relative error, closed form. */
static double fit_draft_ratio(cost_model *m, const steps *s)
{
    double num = 0, den = 0, saved = m->draft_ratio;
    for (size_t i = 0; i < s->n; i++) {
        const tr_step *st = &s->v[i];
        if (!st->spec_proposed || !(st->duration > 0)) continue;
        cost_batch b;
        cost_batch_from_step(&b, st);
        m->draft_ratio = 1.0;
        double with_unit = cost_step_time(m, &b), verify = with_unit - cost_draft_time(m, &b);
        double d = with_unit - verify, r = st->duration - verify;
        num += d * r / (st->duration * st->duration);
        den += d * d / (st->duration * st->duration);
    }
    m->draft_ratio = saved;
    return den > 0 && num > 0 ? num / den : 0;
}

static int simulate(int w, int ci, int mode, const tr_trace *t, const cost_model *cost, cell *out)
{
    sim_config sc;
    sim_config_default(&sc);
    set_mode(&sc.core, mode);
    sc.max_concurrency = conc[ci];
    sc.spec_draft_model = mode == 2;
    sc.token_times = 0;
    rh_err e;
    if (mode && sim_config_set(&sc, "speculative-accept-hist-from", out->rec, &e) < 0) {
        fprintf(stderr, "bench_spec: %s\n", e.msg);
        return -1;
    }
    sim_result r;
    if (sim_run(&sc, t, cost, &r, &e) < 0) {
        fprintf(stderr, "bench_spec: sim %s/%u/%s: %s\n", work_name[w], conc[ci], mode_name[mode], e.msg);
        return -1;
    }
    out->simulated = r.summary.output_throughput;
    out->sim_mean_len = r.summary.mean_accepted_len;
    sim_result_free(&r);
    return 0;
}

static int pays(int w, int ci, int mode, int simulated)
{
    const cell *off = &grid[w][ci][0], *on = &grid[w][ci][mode];
    return simulated ? on->simulated > off->simulated : on->measured > off->measured;
}

/* Where speculation stops paying: the concurrency after the last one of the
 * grid at which mode beat off (1 when it never did; 0 when it still pays at
 * the largest). */
static uint32_t stops_paying(int w, int mode, int simulated)
{
    int last = -1;
    for (int ci = 0; ci < N_CONC; ci++)
        if (pays(w, ci, mode, simulated)) last = ci;
    return last == N_CONC - 1 ? 0 : conc[last + 1];
}

/* "4, 16" or "none". */
static void pays_list(int w, int mode, int simulated, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int ci = 0; ci < N_CONC; ci++)
        if (pays(w, ci, mode, simulated))
            at += (size_t)snprintf(buf + at, n - at, "%s%u", at ? ", " : "", conc[ci]);
    if (!at) snprintf(buf, n, "none");
}

static double loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

static void print_grid(int w)
{
    printf("\n  %s prompts: output tokens/s (speedup over off), measured | simulated; accepted length\n",
           work_name[w]);
    printf("  %5s %9s %17s %17s | %9s %17s %17s | %11s %11s\n", "conc", "off", "ngram", "draft", "off", "ngram",
           "draft", "ngram len", "draft len");
    for (int ci = 0; ci < N_CONC; ci++) {
        const cell *c = grid[w][ci];
        printf("  %5u %9.0f %9.0f (%4.2fx) %9.0f (%4.2fx) | %9.0f %9.0f (%4.2fx) %9.0f (%4.2fx) | %5.2f/%5.2f "
               "%5.2f/%5.2f\n",
               conc[ci], c[0].measured, c[1].measured, c[1].measured / c[0].measured, c[2].measured,
               c[2].measured / c[0].measured, c[0].simulated, c[1].simulated, c[1].simulated / c[0].simulated,
               c[2].simulated, c[2].simulated / c[0].simulated, c[1].mean_len, c[1].sim_mean_len, c[2].mean_len,
               c[2].sim_mean_len);
    }
    for (int mode = 1; mode < N_MODES; mode++) {
        char pm[64], ps[64];
        pays_list(w, mode, 0, pm, sizeof pm);
        pays_list(w, mode, 1, ps, sizeof ps);
        printf("  %s pays at concurrency: measured %s; simulated %s\n", mode_name[mode], pm, ps);
    }
}

static json_t *grid_json(int w)
{
    json_t *cells = json_array();
    for (int ci = 0; ci < N_CONC; ci++)
        for (int mode = 0; mode < N_MODES; mode++) {
            const cell *c = &grid[w][ci][mode];
            json_array_append_new(cells, json_pack("{s:i, s:s, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "concurrency",
                                                   (int)conc[ci], "speculation", mode_name[mode], "requests",
                                                   (int)requests_for(conc[ci]), "measured_output_tok_s", c->measured,
                                                   "simulated_output_tok_s", c->simulated, "accept_rate",
                                                   c->accept_rate, "mean_accepted_length", c->mean_len,
                                                   "sim_mean_accepted_length", c->sim_mean_len, "wall_s", c->wall_s));
        }
    /* stops_paying_at_concurrency: the concurrency after the last one where
     * speculation beat off; 1: it never did; 0: it still does at 64. */
    json_t *stops = json_object();
    for (int mode = 1; mode < N_MODES; mode++) {
        json_t *o = json_object();
        for (int sim = 0; sim < 2; sim++) {
            json_t *at = json_array();
            for (int ci = 0; ci < N_CONC; ci++)
                if (pays(w, ci, mode, sim)) json_array_append_new(at, json_integer(conc[ci]));
            json_object_set_new(o, sim ? "simulated" : "measured",
                                json_pack("{s:i, s:o}", "stops_paying_at_concurrency", (int)stops_paying(w, mode, sim),
                                          "pays_at", at));
        }
        json_object_set_new(stops, mode_name[mode], o);
    }
    return json_pack("{s:o, s:o}", "cells", cells, "speculation_pays", stops);
}

int main(void)
{
    mkdir("build", 0755);
    mkdir("build/tmp", 0755);
    double load0 = loadavg(), t0 = rh_now();
    printf("bench_spec: tiny-llama (dummy weights) on the CPU backend, greedy, %u prompt + %u output tokens, "
           "%u drafts per decode\n", PROMPT, OUTPUT, K);
    tr_trace traces[N_WORK][N_CONC];
    for (int w = 0; w < N_WORK; w++)
        for (int ci = 0; ci < N_CONC; ci++) make_trace(w, requests_for(conc[ci]), &traces[w][ci]);

    rh_progress bar;
    rh_progress_begin(&bar, "bench_spec", ROUNDS * N_WORK * N_CONC * N_MODES);
    uint64_t done = 0;
    for (int round = 0; round < ROUNDS; round++)
        for (int w = 0; w < N_WORK; w++)
            for (int ci = 0; ci < N_CONC; ci++)
                for (int mode = 0; mode < N_MODES; mode++) {
                    snprintf(bar.extra, sizeof bar.extra, "round %d: %s c=%u %s", round + 1, work_name[w], conc[ci],
                             mode_name[mode]);
                    if (run_cell(w, ci, mode, round, &traces[w][ci], &grid[w][ci][mode]) < 0) return 1;
                    rh_progress_update(&bar, ++done);
                }
    rh_progress_end(&bar);
    double measured_s = rh_now() - t0;

    /* Fit the verify cost to every step without drafting work, then the draft ratio. */
    steps plain = {0}, drafted = {0};
    for (int w = 0; w < N_WORK; w++)
        for (int ci = 0; ci < N_CONC; ci++)
            for (int mode = 0; mode < N_MODES; mode++)
                if (add_steps(mode == 2 ? &drafted : &plain, grid[w][ci][mode].rec) < 0) return 1;
    for (int i = 0; i < n_slower; i++)
        if (add_steps(strstr(slower[i], "-draft-") ? &drafted : &plain, slower[i]) < 0) return 1;
    cost_fit_opts fo;
    cost_fit_opts_default(&fo);
    fo.draft_ratio = 0;
    cost_fit_result fr;
    rh_err e;
    if (cost_fit_steps(plain.v, plain.n, &fo, &fr, &e) < 0) {
        fprintf(stderr, "bench_spec: fit: %s\n", e.msg);
        return 1;
    }
    cost_model *cost = cost_linear_new(&fr.coef);
    if (!cost) return 1;
    cost->draft_ratio = 0;
    cost_err_summary errs[COST_N_CLASSES];
    if (cost_step_errors(cost, plain.v, plain.n, 0, errs, &e) < 0) return 1;
    cost_model *draft_cost = cost_linear_new(&fr.coef);
    if (!draft_cost) return 1;
    draft_cost->draft_ratio = fit_draft_ratio(draft_cost, &drafted);
    cost_err_summary derrs[COST_N_CLASSES];
    if (cost_step_errors(draft_cost, drafted.v, drafted.n, 0, derrs, &e) < 0) return 1;

    for (int w = 0; w < N_WORK; w++)
        for (int ci = 0; ci < N_CONC; ci++)
            for (int mode = 0; mode < N_MODES; mode++)
                if (simulate(w, ci, mode, &traces[w][ci], mode == 2 ? draft_cost : cost, &grid[w][ci][mode]) < 0)
                    return 1;

    const cost_linear_coef *k = &fr.coef;
    printf("  cost model fitted to %zu steps: base %.3f ms, %.4f ms/prefill token (and draft slot), %.4f ms/decode, "
           "%.2e s/context token; decode steps median error %.1f%%, prefill %.1f%%\n",
           fr.used, k->base_s * 1e3, k->per_prefill_token_s * 1e3, k->per_decode_seq_s * 1e3, k->per_context_token_s,
           100 * errs[COST_CLASS_DECODE].median, 100 * errs[COST_CLASS_PREFILL].median);
    printf("  draft ratio fitted to %zu DRAFT steps: %.3f (layer share 0.25); their median error %.1f%%\n",
           drafted.n, draft_cost->draft_ratio, 100 * derrs[COST_CLASS_DECODE].median);
    for (int w = 0; w < N_WORK; w++) print_grid(w);
    double load1 = loadavg();
    printf("\n  measured in %.0f s; load average %.2f -> %.2f\n", measured_s, load0, load1);

    json_t *works = json_object();
    for (int w = 0; w < N_WORK; w++) json_object_set_new(works, work_name[w], grid_json(w));
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:o, s:{s:f, s:f, s:f, s:f, s:f, s:I, s:f, s:f}, s:f, s:f, s:f, s:f}",
        "bench", "spec", "model", "tiny-llama", "backend", "cpu", "prompt_len", PROMPT, "output_len", OUTPUT,
        "drafts_per_decode", K, "rounds_best_of", ROUNDS, "workloads", works, "cost_fit", "base_s", k->base_s, "per_prefill_token_s",
        k->per_prefill_token_s, "per_decode_seq_s", k->per_decode_seq_s, "per_context_token_s",
        k->per_context_token_s, "per_attention_s", k->per_attention_s, "steps", (json_int_t)fr.used,
        "decode_median_rel_error", errs[COST_CLASS_DECODE].median, "draft_ratio", draft_cost->draft_ratio,
        "measured_s", measured_s, "load_avg_start", load0, "load_avg_end", load1, "total_s", rh_now() - t0);
    mkdir("reports", 0755);
    mkdir("reports/bench", 0755);
    if (!j || json_dump_file(j, "reports/bench/spec.json.tmp", JSON_INDENT(2)) < 0 ||
        rename("reports/bench/spec.json.tmp", "reports/bench/spec.json") < 0) {
        fprintf(stderr, "bench_spec: cannot write reports/bench/spec.json\n");
        json_decref(j);
        return 1;
    }
    json_decref(j);
    printf("  wrote reports/bench/spec.json\n");

    for (int w = 0; w < N_WORK; w++)
        for (int ci = 0; ci < N_CONC; ci++) {
            tr_trace_free(&traces[w][ci]);
            for (int mode = 0; mode < N_MODES; mode++) unlink(grid[w][ci][mode].rec);
        }
    for (int i = 0; i < n_slower; i++) unlink(slower[i]);
    cost_free(cost);
    cost_free(draft_cost);
    free(plain.v);
    free(drafted.v);
    return 0;
}
