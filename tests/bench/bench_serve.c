/* bench_serve.c — the server under load, on the CPU engine with tiny-llama,
 * measured by the load generator (`rehearse bench`'s client) over loopback,
 * both in this process:
 *   1. TTFT against prompt length, 16 tokens up to the context limit, one
 *      request at a time, with chunked prefill (256) and without;
 *   2. TTFT p50/p99 and output throughput against concurrency 1..64
 *      (random prompts of 128 tokens, 64 out);
 *   3. overlap scheduling on and off at concurrency 1, 16 and 64: client
 *      figures, plus from the server's own recording the scheduler thread's
 *      CPU per step (sched_time), the share of steps whose preparation was
 *      hidden, and the mean gap between one step's end and the next step's
 *      start (the time the model waited for the scheduler).
 * The client, the HTTP threads, the scheduler and the model share this
 * machine's cores, so every figure includes their contention; the machine
 * is shared, so repeat runs differ by several percent. Prints tables and
 * writes reports/bench/serve.json. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/bench.h"
#include "engine/serve/server.h"
#include "traces/import/import.h"
#include "util/progress.h"
#include "util/stats.h"

#define VOCAB 512
#define POOL_TOKENS 65536

static void die(const char *what, const rh_err *e)
{
    fprintf(stderr, "bench_serve: %s: %s\n", what, e->msg);
    exit(1);
}

static model *tiny;

typedef struct run_out {
    metrics_summary m;
    double wall;
    uint64_t failed;
} run_out;

static void run(server *s, bench_dataset *d, uint64_t conc, run_out *o)
{
    bench_config c;
    memset(&c, 0, sizeof c);
    c.base_url = server_url(s);
    c.endpoint = "/v1/completions";
    c.api = BENCH_API_COMPLETIONS;
    c.model = "tiny-llama";
    c.stream = 1;
    c.max_concurrency = conc;
    bench_result *r = calloc(d->n, sizeof *r);
    bench_run_info info;
    rh_err e = {{0}};
    if (!r || bench_run(&c, d, r, &info, &e) < 0) die("bench run", &e);
    if (bench_summarize(d, r, NULL, &o->m, &e) < 0) die("summary", &e);
    o->wall = info.wall;
    o->failed = o->m.failed;
    bench_results_free(r, d->n);
}

static bench_dataset random_set(size_t n, uint32_t in, uint32_t out, uint64_t seed)
{
    bench_dataset d;
    bench_random_opts o = {.num_prompts = n, .input_len = in, .output_len = out, .seed = seed};
    rh_err e = {{0}};
    if (bench_dataset_random(&d, &o, 16, &e) < 0) die("dataset", &e);
    d.vocab = VOCAB;
    /* Prompt ids hash (prompt seed, item, position): without a seed of its
     * own, item 0 of every set would share its prefix with item 0 of the
     * others, and the prefix cache would serve what should be computed. */
    d.prompt_seed = seed * 0x9e3779b97f4a7c15ull + 1;
    return d;
}

/* A few requests first: the kernels' threads come up and the KV pool's
 * memory is touched, so the first measured request pays for neither. */
static void warm_up(server *s)
{
    bench_dataset d = random_set(4, 256, 8, 999);
    run_out o;
    run(s, &d, 4, &o);
    bench_dataset_free(&d);
}

static server *start(int chunk, bool overlap, const char *record)
{
    server_config c;
    server_config_default(&c);
    c.engine.m = tiny;
    c.engine.core.max_total_tokens = POOL_TOKENS;
    c.engine.core.chunked_prefill_size = chunk;
    c.port = 0;
    c.disable_overlap = !overlap;
    c.record_path = record;
    c.http_threads = 2;
    rh_err e = {{0}};
    server *s = server_start(&c, &e);
    if (!s) die("server", &e);
    warm_up(s);
    return s;
}

static void stop(server *s)
{
    rh_err e = {{0}};
    if (server_stop(s, &e) < 0) die("server stop", &e);
}

/* ---- 1. TTFT against prompt length ---- */
static json_t *ttft_vs_length(void)
{
    static const uint32_t lens[] = {16, 64, 256, 512, 1024, 1536, 2040};
    enum { REPS = 3, NL = sizeof lens / sizeof lens[0] };
    double ttft[2][NL];
    printf("1. TTFT against prompt length, one request at a time (median of %d, 4 tokens out)\n", REPS);
    printf("   %8s  %16s  %16s\n", "prompt", "chunked 256 (ms)", "unchunked (ms)");
    for (int chunked = 1; chunked >= 0; chunked--) {
        server *s = start(chunked ? 256 : -1, true, NULL);
        for (size_t i = 0; i < NL; i++) {
            bench_dataset d = random_set(REPS, lens[i], 4, 100 + i);
            run_out o;
            run(s, &d, 1, &o);
            ttft[chunked][i] = o.m.ttft_ms.median;
            if (o.m.cache_hit_rate > 0) printf("   (prefix cache hits at %u tokens: the figure is low)\n", lens[i]);
            bench_dataset_free(&d);
        }
        stop(s);
    }
    json_t *a = json_array();
    for (size_t i = 0; i < NL; i++) {
        printf("   %8u  %16.1f  %16.1f\n", lens[i], ttft[1][i], ttft[0][i]);
        json_array_append_new(a, json_pack("{s:i,s:f,s:f}", "prompt_tokens", (int)lens[i], "chunked_256_ttft_ms",
                                           ttft[1][i], "unchunked_ttft_ms", ttft[0][i]));
    }
    return a;
}

/* ---- 2 and 3: concurrency, overlap ---- */
typedef struct rec_stats {
    double sched_us, hidden_share, gap_us, step_ms;
    size_t steps;
} rec_stats;

/* From the server's recording: per-step scheduling CPU, hidden share, and
 * the idle gap between a step's end and the next step's start. */
static rec_stats of_recording(const char *path)
{
    tr_trace t;
    rh_err e = {{0}};
    if (tr_trace_load(path, &t, &e) < 0) die("recording", &e);
    rec_stats r = {0};
    double sched = 0, gap = 0, dur = 0;
    size_t hidden = 0, gaps = 0;
    for (size_t i = 0; i < t.n_steps; i++) {
        const tr_step *s = &t.steps[i];
        sched += s->sched_time;
        dur += s->duration;
        hidden += (s->flags & TR_STEP_SCHED_HIDDEN) != 0;
        /* Back to back: the engine still had work when the previous step
         * ended, so any gap is the model waiting for the scheduler. */
        const tr_step *p = i ? &t.steps[i - 1] : NULL;
        if (p && p->running + p->waiting > p->finished) {
            gap += s->start - (p->start + p->duration);
            gaps++;
        }
    }
    r.steps = t.n_steps;
    if (t.n_steps) {
        r.sched_us = 1e6 * sched / (double)t.n_steps;
        r.hidden_share = (double)hidden / (double)t.n_steps;
        r.step_ms = 1e3 * dur / (double)t.n_steps;
    }
    r.gap_us = gaps ? 1e6 * gap / (double)gaps : 0;
    tr_trace_free(&t);
    return r;
}

static json_t *point(const run_out *o, uint64_t conc)
{
    json_t *p = json_object();
    json_object_set_new(p, "concurrency", json_integer((json_int_t)conc));
    json_object_set_new(p, "completed", json_integer((json_int_t)o->m.completed));
    json_object_set_new(p, "failed", json_integer((json_int_t)o->failed));
    json_object_set_new(p, "ttft_p50_ms", json_real(o->m.ttft_ms.median));
    json_object_set_new(p, "ttft_p99_ms", json_real(o->m.ttft_ms.p99));
    json_object_set_new(p, "itl_p50_ms", json_real(o->m.itl_ms.median));
    json_object_set_new(p, "tpot_mean_ms", json_real(o->m.tpot_ms.mean));
    json_object_set_new(p, "output_throughput", json_real(o->m.output_throughput));
    json_object_set_new(p, "request_throughput", json_real(o->m.request_throughput));
    json_object_set_new(p, "cache_hit_rate", json_real(o->m.cache_hit_rate));
    json_object_set_new(p, "duration_s", json_real(o->m.duration));
    return p;
}

static size_t prompts_for(uint64_t conc)
{
    return conc < 4 ? 8 : 2 * conc;
}

static json_t *concurrency_sweep(void)
{
    static const uint64_t cs[] = {1, 2, 4, 8, 16, 32, 64};
    printf("\n2. Against concurrency (128 tokens in, 64 out, 2 x C prompts, at least 8; overlap on, chunk 8192)\n");
    printf("   %4s  %12s  %12s  %12s  %14s\n", "C", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "output tok/s");
    json_t *a = json_array();
    server *s = start(8192, true, NULL);
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        bench_dataset d = random_set(prompts_for(cs[i]), 128, 64, 200 + i);
        run_out o;
        run(s, &d, cs[i], &o);
        printf("   %4llu  %12.1f  %12.1f  %12.2f  %14.1f%s\n", (unsigned long long)cs[i], o.m.ttft_ms.median,
               o.m.ttft_ms.p99, o.m.itl_ms.median, o.m.output_throughput, o.failed ? "  (failures!)" : "");
        json_array_append_new(a, point(&o, cs[i]));
        bench_dataset_free(&d);
    }
    stop(s);
    return a;
}

static double median3(double a, double b, double c)
{
    double x[3] = {a, b, c};
    rh_summary sm;
    rh_summarize(x, 3, &sm);
    return sm.median;
}

/* Two servers, overlap on and off, each recording; trials alternate
 * between them so a busy spell on the shared machine hits both alike.
 * Client figures are medians over the trials; scheduler figures come from
 * each server's whole recording. */
static json_t *overlap_on_off(void)
{
    static const uint64_t cs[] = {1, 16, 64};
    enum { TRIALS = 3 };
    printf("\n3. Overlap scheduling on and off (same prompts, %d alternating trials, medians; sched = scheduler\n"
           "   CPU per step, gap = model idle between back-to-back steps, both from the server's recording)\n",
           TRIALS);
    printf("   %4s  %7s  %12s  %12s  %14s  %10s  %8s  %8s  %9s\n", "C", "overlap", "TTFT p50 ms", "ITL p50 ms",
           "output tok/s", "sched us", "hidden", "gap us", "step ms");
    char path[2][256];
    mkdir("build", 0755);
    mkdir("build/tmp", 0755);
    for (int on = 0; on < 2; on++) snprintf(path[on], sizeof path[on], "build/tmp/bench-serve-%d-%d.rhtr", (int)getpid(), on);
    json_t *a = json_array();
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        server *s[2] = {start(8192, false, path[0]), start(8192, true, path[1])};
        run_out o[2][TRIALS];
        for (int t = 0; t < TRIALS; t++)
            for (int k = 0; k < 2; k++) {
                int on = (t + k) % 2;
                bench_dataset d = random_set(prompts_for(cs[i]), 128, 64, 300 + 10 * i + (uint64_t)t);   /* new prompts each trial, the same for on and off */
                run(s[on], &d, cs[i], &o[on][t]);
                bench_dataset_free(&d);
            }
        json_t *pair = json_object();
        json_object_set_new(pair, "concurrency", json_integer((json_int_t)cs[i]));
        for (int on = 1; on >= 0; on--) {
            stop(s[on]);
            rec_stats r = of_recording(path[on]);
            run_out m = o[on][0];
            m.m.ttft_ms.median = median3(o[on][0].m.ttft_ms.median, o[on][1].m.ttft_ms.median, o[on][2].m.ttft_ms.median);
            m.m.ttft_ms.p99 = median3(o[on][0].m.ttft_ms.p99, o[on][1].m.ttft_ms.p99, o[on][2].m.ttft_ms.p99);
            m.m.itl_ms.median = median3(o[on][0].m.itl_ms.median, o[on][1].m.itl_ms.median, o[on][2].m.itl_ms.median);
            m.m.tpot_ms.mean = median3(o[on][0].m.tpot_ms.mean, o[on][1].m.tpot_ms.mean, o[on][2].m.tpot_ms.mean);
            m.m.output_throughput = median3(o[on][0].m.output_throughput, o[on][1].m.output_throughput,
                                            o[on][2].m.output_throughput);
            m.m.request_throughput = median3(o[on][0].m.request_throughput, o[on][1].m.request_throughput,
                                             o[on][2].m.request_throughput);
            m.failed = o[on][0].failed + o[on][1].failed + o[on][2].failed;
            printf("   %4llu  %7s  %12.1f  %12.2f  %14.1f  %10.1f  %7.0f%%  %8.1f  %9.2f%s\n", (unsigned long long)cs[i],
                   on ? "on" : "off", m.m.ttft_ms.median, m.m.itl_ms.median, m.m.output_throughput, r.sched_us,
                   100 * r.hidden_share, r.gap_us, r.step_ms, m.failed ? "  (failures!)" : "");
            json_t *p = point(&m, cs[i]);
            json_object_set_new(p, "sched_us_per_step", json_real(r.sched_us));
            json_object_set_new(p, "hidden_share", json_real(r.hidden_share));
            json_object_set_new(p, "gap_us", json_real(r.gap_us));
            json_object_set_new(p, "step_ms", json_real(r.step_ms));
            json_object_set_new(p, "steps", json_integer((json_int_t)r.steps));
            json_t *tp = json_array();
            for (int t = 0; t < TRIALS; t++) json_array_append_new(tp, json_real(o[on][t].m.output_throughput));
            json_object_set_new(p, "output_throughput_trials", tp);
            json_object_set_new(pair, on ? "on" : "off", p);
        }
        json_array_append_new(a, pair);
    }
    for (int on = 0; on < 2; on++) unlink(path[on]);
    return a;
}

int main(void)
{
    model_config mc;
    rh_err e = {{0}};
    if (model_preset("tiny-llama", &mc, &e) < 0 || !(tiny = model_new_dummy(&mc, 42, 0, &e))) die("model", &e);
    double t0 = rh_now();
    printf("bench_serve: tiny-llama (dummy weights) on the CPU engine, served over loopback\n\n");
    json_t *j = json_object();
    json_object_set_new(j, "model", json_string("tiny-llama"));
    json_object_set_new(j, "cpus", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    json_object_set_new(j, "ttft_vs_prompt_length", ttft_vs_length());
    json_object_set_new(j, "concurrency", concurrency_sweep());
    json_object_set_new(j, "overlap", overlap_on_off());
    json_object_set_new(j, "wall_s", json_real(rh_now() - t0));
    mkdir("reports", 0755);
    mkdir("reports/bench", 0755);
    if (json_dump_file(j, "reports/bench/serve.json.tmp", JSON_INDENT(2)) < 0 ||
        rename("reports/bench/serve.json.tmp", "reports/bench/serve.json") < 0) {
        fprintf(stderr, "bench_serve: cannot write reports/bench/serve.json\n");
        return 1;
    }
    printf("\n  %.0f s; wrote reports/bench/serve.json\n", rh_now() - t0);
    json_decref(j);
    model_free(tiny);
    return 0;
}
