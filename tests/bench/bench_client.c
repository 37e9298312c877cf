/* bench_client.c — how much the load generator itself adds to what it
 * measures, and how much load one client thread can drive. Against the
 * scripted server (client/bench_mock.h) in this process, on the same
 * clock:
 *   - stamp delay: client's stamp of a chunk minus the server's send time
 *     (what every TTFT and ITL carries on top of the server's own latency);
 *   - send lateness: actual send minus planned arrival at a Poisson rate;
 *   - capacity: requests and chunks per second against a server with no
 *     delays, and the client thread's CPU per chunk;
 *   - request building: prompt ids plus JSON body for a 32k-token prompt.
 * The mock's threads share the two cores with the client, so the capacity
 * figure is a floor. Prints a table; writes reports/bench/client.json. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "client/bench.h"
#include "client/bench_body.h"
#include "client/bench_mock.h"
#include "util/progress.h"
#include "util/stats.h"

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const rh_err *e)
{
    fprintf(stderr, "bench_client: %s: %s\n", what, e->msg);
    exit(1);
}

typedef struct run_out {
    bench_dataset d;
    bench_result *r;
    bench_run_info info;
    double wall, cpu;
} run_out;

static bench_mock *start(double first, double itl, rh_err *e)
{
    bench_mock_opts mo = {.first_token_s = first, .itl_s = itl};
    bench_mock *m = bench_mock_start(&mo, e);
    if (!m) die("mock", e);
    return m;
}

static void run(bench_mock *m, size_t n, uint32_t in, uint32_t out, double rate, uint64_t conc, run_out *o)
{
    rh_err e;
    bench_random_opts ro = {.num_prompts = n, .input_len = in, .output_len = out, .seed = 1};
    if (bench_dataset_random(&o->d, &ro, 16, &e) < 0) die("dataset", &e);
    bench_dataset_set_rate(&o->d, rate, 1, 1);
    bench_config c = {.base_url = bench_mock_url(m), .endpoint = "/v1/completions", .model = "mock-model",
                      .stream = 1, .max_concurrency = conc};
    o->r = calloc(n, sizeof *o->r);
    double t0 = rh_now(), c0 = thread_cpu();
    if (bench_run(&c, &o->d, o->r, &o->info, &e) < 0) die("run", &e);
    o->cpu = thread_cpu() - c0;
    o->wall = rh_now() - t0;
    for (size_t i = 0; i < n; i++)
        if (o->r[i].error) {
            fprintf(stderr, "bench_client: request %zu failed: %s\n", i, o->r[i].error);
            exit(1);
        }
}

static void done(run_out *o)
{
    bench_results_free(o->r, o->d.n);
    bench_dataset_free(&o->d);
}

/* Client stamp minus server send, for every chunk, in microseconds. */
static void stamp_delays(bench_mock *m, run_out *o, rh_summary *s)
{
    const bench_mock_request *log;
    size_t nl = bench_mock_requests(m, &log);
    rh_dvec v = {0};
    int32_t *ids = malloc(o->d.items[0].input_len * sizeof *ids);
    for (size_t i = 0; i < o->d.n; i++) {
        bench_item_tokens(&o->d, i, ids);
        uint64_t h = bench_mock_prompt_hash(ids, o->d.items[i].input_len);
        for (size_t k = 0; k < nl; k++) {
            if (log[k].prompt_hash != h) continue;
            double send = o->info.t0 + o->r[i].send;
            for (uint32_t j = 0; j < log[k].n_chunks && j < o->r[i].n_chunks; j++)
                rh_dvec_push(&v, 1e6 * (send + o->r[i].chunk_times[j] - log[k].chunk_sent[j]));
            break;
        }
    }
    rh_summarize(v.v, v.n, s);
    rh_dvec_free(&v);
    free(ids);
}

int main(void)
{
    mkdir("reports", 0755);
    mkdir("reports/bench", 0755);
    rh_err e;
    json_t *j = json_object();
    printf("bench_client: the load generator's own cost (2 shared cores: noisy)\n\n");

    /* 1. Stamp delay: 64 streams of 20 chunks, 16 at a time. */
    bench_mock *m = start(0.020, 0.005, &e);
    run_out o;
    run(m, 64, 128, 20, INFINITY, 16, &o);
    rh_summary st;
    stamp_delays(m, &o, &st);
    printf("%-44s %8.1f %8.1f %8.1f   (%zu chunks)\n", "stamp delay, us (p50 / p99 / max)", st.median, st.p99, st.max,
           st.n);
    json_object_set_new(j, "stamp_delay_p50_us", json_real(st.median));
    json_object_set_new(j, "stamp_delay_p99_us", json_real(st.p99));
    json_object_set_new(j, "stamp_delay_max_us", json_real(st.max));
    done(&o);
    bench_mock_stop(m);

    /* 2. Send lateness at 200 req/s, Poisson. */
    m = start(0.002, 0.001, &e);
    run(m, 400, 64, 4, 200, 0, &o);
    double *late = malloc(o.d.n * sizeof *late);
    for (size_t i = 0; i < o.d.n; i++) late[i] = 1e6 * (o.r[i].send - o.d.items[i].arrival);
    rh_summary sl;
    rh_summarize(late, o.d.n, &sl);
    printf("%-44s %8.1f %8.1f %8.1f   (%zu sends)\n", "send lateness at 200 req/s, us (p50 / p99 / max)", sl.median,
           sl.p99, sl.max, sl.n);
    json_object_set_new(j, "send_late_p50_us", json_real(sl.median));
    json_object_set_new(j, "send_late_p99_us", json_real(sl.p99));
    json_object_set_new(j, "send_late_max_us", json_real(sl.max));
    free(late);
    done(&o);
    bench_mock_stop(m);

    /* 3. Capacity against a server without delays. */
    m = start(0, 0, &e);
    run(m, 2000, 64, 16, INFINITY, 32, &o);
    double chunks = 0;
    for (size_t i = 0; i < o.d.n; i++) chunks += o.r[i].n_chunks;
    printf("%-44s %8.0f req/s %9.0f chunks/s\n", "capacity, 32 streams, no server delay", (double)o.d.n / o.wall,
           chunks / o.wall);
    printf("%-44s %8.2f us per chunk\n", "client thread CPU", 1e6 * o.cpu / chunks);
    json_object_set_new(j, "capacity_requests_per_s", json_real((double)o.d.n / o.wall));
    json_object_set_new(j, "capacity_chunks_per_s", json_real(chunks / o.wall));
    json_object_set_new(j, "client_cpu_us_per_chunk", json_real(1e6 * o.cpu / chunks));
    done(&o);
    bench_mock_stop(m);

    /* 4. Building one request with a 32k-token prompt. */
    bench_random_opts ro = {.num_prompts = 1, .input_len = 32768, .output_len = 1};
    bench_dataset d;
    if (bench_dataset_random(&d, &ro, 16, &e) < 0) die("dataset", &e);
    int32_t *ids = malloc(32768 * sizeof *ids);
    bench_body_opts bo = {.model_json = "\"m\"", .stream = 1};
    double best = 1e9;
    size_t len = 0;
    for (int rep = 0; rep < 20; rep++) {
        double t0 = rh_now();
        bench_item_tokens(&d, 0, ids);
        char *body = bench_request_body(&bo, ids, 32768, NULL, 1, &len);
        double dt = rh_now() - t0;
        free(body);
        if (dt < best) best = dt;
    }
    printf("%-44s %8.1f us (best of 20, %zu-byte body)\n", "build a 32k-token request", 1e6 * best, len);
    json_object_set_new(j, "build_32k_request_us", json_real(1e6 * best));
    free(ids);
    bench_dataset_free(&d);

    if (json_dump_file(j, "reports/bench/client.json.tmp", JSON_INDENT(2)) < 0 ||
        rename("reports/bench/client.json.tmp", "reports/bench/client.json") < 0) {
        fprintf(stderr, "bench_client: cannot write reports/bench/client.json\n");
        return 1;
    }
    json_decref(j);
    printf("\n  wrote reports/bench/client.json\n");
    return 0;
}
