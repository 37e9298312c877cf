/* bench_engine.c — how fast `rehearse replay` serves a slice of a real trace,
 * and what the engine loop costs around the model.
 *
 *   mooncake-32   the Mooncake conversation trace's first 32 requests, lengths
 *                 x 0.02, all sent at once (open loop, arrivals compressed):
 *                 throughput-bound
 *   azure-conv-64 the Azure 2023 conversation trace's first 64 requests,
 *                 lengths x 0.25, closed loop with 8 clients, all due at once:
 *                 bound by the clients and decode-heavy
 * Both with tiny-llama on the CPU backend, default scheduler knobs. For each:
 * wall seconds, steps, computed tokens per second (prompt tokens not served
 * from the cache, plus outputs), and the loop's cost: scheduling CPU time as
 * a share of step time, and wall time outside steps (sending, recording,
 * events). Prints a table; writes reports/bench/engine.json. One run each: a
 * replay is seconds long and the shared machine makes every figure noisy. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/replay.h"
#include "traces/import/import.h"
#include "traces/tools/slice.h"

typedef struct scenario {
    const char *name, *file;
    uint64_t first;
    double length_scale, rate_scale;
    uint32_t clients;
} scenario;

typedef struct outcome {
    int ran;
    replay_result res;
    double busy_s, sched_s, tokens_per_s, sched_share, outside_s;
} outcome;

static const char *shared_dir(void)
{
    const char *d = getenv("REHEARSE_SHARED_TRACES");
    return d && *d ? d : "../shared/traces";
}

static int run(const scenario *sc, outcome *o)
{
    char src[1024], sliced[256], rec[256];
    snprintf(src, sizeof src, "%s/%s", shared_dir(), sc->file);
    if (access(src, R_OK) != 0) {
        printf("  %-14s SKIPPED: %s is absent\n", sc->name, src);
        return 0;
    }
    mkdir("build", 0755);
    mkdir("build/tmp", 0755);
    snprintf(sliced, sizeof sliced, "build/tmp/bench-engine-%s.rhtr", sc->name);
    snprintf(rec, sizeof rec, "build/tmp/bench-engine-%s-rec.rhtr", sc->name);
    tr_import_opts io;
    tr_import_opts_init(&io);
    tr_slice_opts so;
    tr_slice_opts_init(&so);
    so.first = sc->first;
    so.input_scale = so.output_scale = sc->length_scale;
    so.rate_scale = sc->rate_scale;
    rh_err e;
    tr_trace t, r;
    if (tr_slice_file(src, &io, &so, sliced, NULL, &e) < 0 || tr_trace_load(sliced, &t, &e) < 0) {
        fprintf(stderr, "bench_engine: %s\n", e.msg);
        return -1;
    }
    replay_config c;
    replay_config_default(&c);
    c.engine.model = "tiny-llama";
    c.engine.core.max_total_tokens = 1u << 18;
    c.max_concurrency = sc->clients;
    c.out_path = rec;
    c.progress = 1;
    int rc = replay_run(&c, &t, &o->res, &e);
    tr_trace_free(&t);
    if (rc < 0 || tr_trace_load(rec, &r, &e) < 0) {
        fprintf(stderr, "bench_engine: %s\n", e.msg);
        return -1;
    }
    for (size_t i = 0; i < r.n_steps; i++) {
        o->busy_s += r.steps[i].duration;
        o->sched_s += r.steps[i].sched_time;
    }
    tr_trace_free(&r);
    unlink(sliced);
    unlink(rec);
    const replay_result *x = &o->res;
    o->tokens_per_s = (double)(x->prompt_tokens - x->cached_tokens + x->output_tokens) / x->wall_s;
    o->sched_share = o->busy_s > 0 ? o->sched_s / o->busy_s : 0;
    o->outside_s = x->wall_s - o->busy_s;
    o->ran = 1;
    return 0;
}

int main(void)
{
    static const scenario scs[] = {
        {"mooncake-32", "mooncake_conversation_trace.jsonl", 32, 0.02, 1e6, 0},
        {"azure-conv-64", "AzureLLMInferenceTrace_conv.csv", 64, 0.25, 1e6, 8},
    };
    enum { N = sizeof scs / sizeof scs[0] };
    outcome out[N];
    memset(out, 0, sizeof out);
    printf("bench_engine: rehearse replay with tiny-llama on the CPU backend\n");
    for (int i = 0; i < N; i++)
        if (run(&scs[i], &out[i]) < 0) return 1;
    printf("\n  %-14s %5s %7s %8s %6s %11s %9s %8s %10s\n", "scenario", "reqs", "refused", "wall s", "steps",
           "computed/s", "cached", "sched %", "outside s");
    json_t *rows = json_object();
    for (int i = 0; i < N; i++) {
        if (!out[i].ran) continue;
        const replay_result *x = &out[i].res;
        printf("  %-14s %5llu %7llu %8.3f %6llu %11.0f %9llu %8.3f %10.4f\n", scs[i].name,
               (unsigned long long)x->requests, (unsigned long long)x->refused, x->wall_s,
               (unsigned long long)x->steps, out[i].tokens_per_s, (unsigned long long)x->cached_tokens,
               100 * out[i].sched_share, out[i].outside_s);
        json_object_set_new(rows, scs[i].name,
                            json_pack("{s:I, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "requests",
                                      (json_int_t)x->requests, "refused", (json_int_t)x->refused, "completed",
                                      (json_int_t)x->completed, "wall_s", x->wall_s, "steps", (json_int_t)x->steps,
                                      "prompt_tokens", (json_int_t)x->prompt_tokens, "cached_tokens",
                                      (json_int_t)x->cached_tokens, "output_tokens", (json_int_t)x->output_tokens,
                                      "computed_tokens_per_s", out[i].tokens_per_s, "sched_share_of_step",
                                      out[i].sched_share, "wall_outside_steps_s", out[i].outside_s));
    }
    json_t *j = json_pack("{s:s, s:s, s:o}", "bench", "engine", "model", "tiny-llama", "scenarios", rows);
    mkdir("reports", 0755);
    mkdir("reports/bench", 0755);
    if (!j || json_dump_file(j, "reports/bench/engine.json.tmp", JSON_INDENT(2)) < 0 ||
        rename("reports/bench/engine.json.tmp", "reports/bench/engine.json") < 0) {
        fprintf(stderr, "bench_engine: cannot write reports/bench/engine.json\n");
        json_decref(j);
        return 1;
    }
    json_decref(j);
    printf("  wrote reports/bench/engine.json\n");
    return 0;
}
