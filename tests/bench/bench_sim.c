/* bench_sim.c — how fast the simulator replays.
 *
 *   replay/1M      1,000,000 requests with Azure-conv-like lengths (drawn from
 *                  the shared Azure conv trace, or lognormal with its means when
 *                  absent), Poisson arrivals at 80% of the modelled capacity,
 *                  max running 256, chunk 8192, radix cache on, the linear
 *                  cost model of the issue (target <= 5 s wall, <= 1 GiB peak
 *                  memory, one core)
 *   replay/<file>  one replay of each shared trace at its own arrival times
 *                  (Mooncake's target: >= 100k requests/s on one core)
 *   cluster/1M     16 replicas behind the cache-aware router replaying
 *                  1,000,000 requests of Mooncake-like traffic (`trace synth`
 *                  with 64 prefix groups of a 2048-token system prompt and
 *                  4-turn sessions), the same linear cost model (target
 *                  <= 30 s wall, <= 2 GiB peak memory, one core)
 * Capacity is measured first: a burst of 40,000 such requests all arriving at
 * once, completed requests per second of simulated time.
 * Prints a table and writes reports/bench/sim.json. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "sim/sim.h"
#include "traces/import/import.h"
#include "traces/tools/synth.h"
#include "util/fs.h"
#include "util/progress.h"

static const cost_linear_coef K = {0.004, 2e-5, 1e-4, 1e-8, 1e-10};

static uint64_t rng = 2024;
static double unit(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
}

static double gauss(void)
{
    return sqrt(-2 * log(1 - unit())) * cos(2 * M_PI * unit());
}

/* (input, output) pairs to draw from. */
typedef struct lens {
    uint32_t *in, *out;
    size_t n;
} lens;

static void load_lengths(const char *dir, lens *L, const char **source)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/AzureLLMInferenceTrace_conv.csv", dir);
    tr_trace t;
    rh_err e;
    if (tr_trace_load(path, &t, &e) == 0 && t.n_requests > 0) {
        L->n = t.n_requests;
        L->in = malloc(L->n * sizeof *L->in);
        L->out = malloc(L->n * sizeof *L->out);
        for (size_t i = 0; i < L->n; i++) {
            L->in[i] = t.requests[i].input_len;
            L->out[i] = t.requests[i].output_len ? t.requests[i].output_len : 1;
        }
        tr_trace_free(&t);
        *source = "Azure conv lengths";
        return;
    }
    /* Lognormal with the published conv means (input 1155, output 211). */
    L->n = 100000;
    L->in = malloc(L->n * sizeof *L->in);
    L->out = malloc(L->n * sizeof *L->out);
    for (size_t i = 0; i < L->n; i++) {
        L->in[i] = (uint32_t)fmax(1, exp(log(1155) - 0.32 + 0.8 * gauss()));
        L->out[i] = (uint32_t)fmax(1, exp(log(211) - 0.32 + 0.8 * gauss()));
    }
    *source = "lognormal lengths (shared traces absent)";
}

static void make_trace(tr_trace *t, const lens *L, size_t n, double rate)
{
    tr_trace_init(t);
    double at = 0;
    rh_err e;
    for (size_t i = 0; i < n; i++) {
        if (rate > 0) at += -log(1 - unit()) / rate;
        size_t k = (size_t)(unit() * (double)L->n);
        tr_request r = {.id = i + 1, .arrival = at, .input_len = L->in[k], .output_len = L->out[k]};
        if (tr_trace_add_request(t, &r, &e) < 0) {
            fprintf(stderr, "bench_sim: %s\n", e.msg);
            exit(1);
        }
    }
}

static void config(sim_config *c)
{
    sim_config_default(c);
    c->core.max_running_requests = 256;
    c->core.chunked_prefill_size = 8192;
    c->core.max_total_tokens = 4u << 20;     /* 4M tokens: an 80 GB GPU's worth for an 8B model */
    c->core.total_pages = 0;
    c->progress = 1;
}

static long peak_rss_kib(void);

/* cluster/1M: see the header. */
static void cluster_1m(json_t *out)
{
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    rh_err e = {{0}};
    const char *opts[][2] = {{"requests", "1000000"}, {"rate", "120"},          {"prefix-groups", "64"},
                             {"prompts-per-group", "1000"}, {"system-prompt-len", "2048"}, {"turns", "4"},
                             {"sessions", "256"}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (tr_synth_opts_set(&o, opts[i][0], opts[i][1], &e) != 1) {
            printf("%-28s failed: %s\n", "cluster/1M", e.msg);
            return;
        }
    tr_synth_opts_finish(&o);
    const char *path = "build/tmp/bench-cluster-1m.rhtr";
    tr_trace t;
    if (rh_mkdir_p("build/tmp") < 0 || tr_synth_file(&o, path, &e) < 0 || tr_trace_load(path, &t, &e) < 0) {
        printf("%-28s failed: %s\n", "cluster/1M", e.msg);
        return;
    }
    remove(path);
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    config(&c);
    c.replicas = 16;
    c.router.policy = ROUTER_CACHE_AWARE;
    c.core.context_length = 1u << 20;
    long rss_before = peak_rss_kib();
    double t0 = rh_now();
    sim_result res;
    int rc = sim_run(&c, &t, m, &res, &e);
    double wall = rh_now() - t0;
    long rss = peak_rss_kib();
    if (rc < 0) {
        printf("%-28s failed: %s\n", "cluster/1M", e.msg);
    } else {
        printf("%-28s %12zu %12llu %12.2f %12.0f   target <= 30 s, <= 2048 MiB; hit rate %.1f%%, imbalance %.3f\n",
               "cluster/1M (16 replicas)", t.n_requests, (unsigned long long)res.summary.steps, wall,
               (double)rss / 1024, 100 * res.summary.cache_hit_rate, res.imbalance_requests);
        json_t *j = json_object();
        json_object_set_new(j, "replicas", json_integer(16));
        json_object_set_new(j, "requests", json_integer((json_int_t)t.n_requests));
        json_object_set_new(j, "steps", json_integer((json_int_t)res.summary.steps));
        json_object_set_new(j, "wall_s", json_real(wall));
        json_object_set_new(j, "requests_per_s", json_real((double)t.n_requests / wall));
        json_object_set_new(j, "peak_rss_mib", json_real((double)rss / 1024));
        json_object_set_new(j, "rss_before_mib", json_real((double)rss_before / 1024));
        json_object_set_new(j, "cache_hit_rate", json_real(res.summary.cache_hit_rate));
        json_object_set_new(j, "imbalance_requests", json_real(res.imbalance_requests));
        json_object_set_new(j, "target_wall_s", json_real(30));
        json_object_set_new(j, "target_peak_mib", json_real(2048));
        json_object_set_new(out, "cluster_1m", j);
        sim_result_free(&res);
    }
    cost_free(m);
    tr_trace_free(&t);
}

static long peak_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

int main(void)
{
    const char *dir = getenv("REHEARSE_SHARED_TRACES");
    if (!dir || !*dir) dir = "../shared/traces";
    lens L;
    const char *source;
    load_lengths(dir, &L, &source);
    cost_model *m = cost_linear_new(&K);
    json_t *out = json_object();
    rh_err e;

    /* Capacity: a burst, everything arriving at once. */
    tr_trace burst;
    make_trace(&burst, &L, 40000, 0);
    sim_config c;
    config(&c);
    c.progress = 0;
    sim_result res;
    if (sim_run(&c, &burst, m, &res, &e) < 0) {
        fprintf(stderr, "bench_sim: %s\n", e.msg);
        return 1;
    }
    double capacity = res.summary.request_throughput;
    sim_result_free(&res);
    tr_trace_free(&burst);

    double rate = 0.8 * capacity;
    tr_trace big;
    make_trace(&big, &L, 1000000, rate);
    long rss_before = peak_rss_kib();
    config(&c);
    double t0 = rh_now();
    if (sim_run(&c, &big, m, &res, &e) < 0) {
        fprintf(stderr, "bench_sim: %s\n", e.msg);
        return 1;
    }
    double wall = rh_now() - t0;
    long rss = peak_rss_kib();
    printf("\nsimulator replay (%s, linear cost model, max running 256, chunk 8192, radix on)\n", source);
    printf("%-28s %12s %12s %12s %12s\n", "case", "requests", "steps", "wall s", "peak MiB");
    printf("%-28s %12s %12.0f %12s %12s   capacity %.2f req/s, rate %.2f req/s\n", "capacity burst", "40000",
           0.0, "-", "-", capacity, rate);
    printf("%-28s %12d %12llu %12.2f %12.0f   target <= 5 s, <= 1024 MiB; p99 TTFT %.0f ms, %.0f steps/s\n",
           "replay/1M", 1000000, (unsigned long long)res.summary.steps, wall, (double)rss / 1024,
           res.summary.ttft_ms.p99, (double)res.summary.steps / wall);
    json_t *j = json_object();
    json_object_set_new(j, "requests", json_integer(1000000));
    json_object_set_new(j, "steps", json_integer((json_int_t)res.summary.steps));
    json_object_set_new(j, "wall_s", json_real(wall));
    json_object_set_new(j, "peak_rss_mib", json_real((double)rss / 1024));
    json_object_set_new(j, "rss_before_mib", json_real((double)rss_before / 1024));
    json_object_set_new(j, "capacity_req_s", json_real(capacity));
    json_object_set_new(j, "rate_req_s", json_real(rate));
    json_object_set_new(j, "p99_ttft_ms", json_real(res.summary.ttft_ms.p99));
    json_object_set_new(j, "target_wall_s", json_real(5));
    json_object_set_new(j, "target_peak_mib", json_real(1024));
    json_object_set_new(j, "lengths", json_string(source));
    json_object_set_new(out, "replay_1m", j);
    sim_result_free(&res);
    tr_trace_free(&big);

    const char *shared[] = {"mooncake_conversation_trace.jsonl", "AzureLLMInferenceTrace_code.csv",
                            "AzureLLMInferenceTrace_conv.csv"};
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, shared[i]);
        tr_trace t;
        if (tr_trace_load(path, &t, &e) < 0) {
            printf("%-28s skipped: %s\n", shared[i], e.msg);
            continue;
        }
        config(&c);
        c.core.max_total_tokens = 16u << 20;   /* Mooncake prompts are long */
        t0 = rh_now();
        int rc = sim_run(&c, &t, m, &res, &e);
        wall = rh_now() - t0;
        if (rc < 0) {
            printf("%-28s failed: %s\n", shared[i], e.msg);
            tr_trace_free(&t);
            continue;
        }
        printf("%-28.28s %12zu %12llu %12.2f %12s   p99 TTFT %.0f ms, hit rate %.1f%%\n", shared[i], t.n_requests,
               (unsigned long long)res.summary.steps, wall, "-", res.summary.ttft_ms.p99,
               100 * res.summary.cache_hit_rate);
        json_t *s = json_object();
        json_object_set_new(s, "requests", json_integer((json_int_t)t.n_requests));
        json_object_set_new(s, "steps", json_integer((json_int_t)res.summary.steps));
        json_object_set_new(s, "wall_s", json_real(wall));
        json_object_set_new(s, "cache_hit_rate", json_real(res.summary.cache_hit_rate));
        json_object_set_new(s, "requests_per_s", json_real((double)t.n_requests / wall));
        if (i == 0) json_object_set_new(s, "target_requests_per_s", json_real(100000));
        json_object_set_new(out, shared[i], s);
        sim_result_free(&res);
        tr_trace_free(&t);
    }
    cluster_1m(out);
    json_dump_file(out, "reports/bench/sim.json", JSON_INDENT(2));
    json_decref(out);
    cost_free(m);
    free(L.in);
    free(L.out);
    return 0;
}
