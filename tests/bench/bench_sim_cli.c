/* bench_sim_cli.c — `rehearse sim` as users run it: a shipped roofline
 * preset, the KV pool sized from the GPU's memory, the whole command timed.
 *
 *   mooncake        the shared Mooncake conversation trace (llama-3.1-70b,
 *                   8 x h200: its prompts need the 128k context; target
 *                   >= 100k requests/s)
 *   azure-conv/code the shared Azure 2023 traces (llama-3-70b, 8 x h200)
 *   synth-*         `trace synth` traces of 1024-in/128-out requests, unique
 *                   prompts, under load (10 req/s) and overloaded (2000
 *                   req/s), 200k and 1M of them (target: 1M <= 1.5 s for
 *                   the whole command, at any load); 200k sharing 64 system
 *                   prompts
 *   vidur-100k      the trace of ../shared/peers/ (100k, 1024/256, 2.5 req/s,
 *                   llama-3-8b on an a100, --scheduler vllm), beside Vidur's
 *                   measured 140 requests/s there (target: >= 1000x)
 *   cluster-1m      16 replicas behind the cache-aware router, 1M
 *                   Mooncake-like requests (target <= 30 s, <= 2 GiB)
 *
 * Each case reports wall time and the child's peak RSS, and instructions
 * (valgrind's callgrind, which counts the same on a busy machine) for the
 * cases short enough to run under it (REHEARSE_BENCH_CALLGRIND=all for every
 * case, 0 for none). With REHEARSE_BENCH_BEFORE=/path/to/an/older/rehearse
 * every case runs under both binaries, and the table and the JSON give
 * before, after and their ratio (a binary outside a checkout finds the
 * presets through REHEARSE_PRESETS). Writes reports/bench/sim_cli.json. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/progress.h"

#define TMP "build/tmp/bench-sim-cli"

typedef struct bench_case {
    const char *name;
    const char *trace;       /* a path; "@NAME" is a synthetic trace made below */
    const char *cost;        /* a cost file under TMP */
    const char *extra;       /* more flags, space-separated, or NULL */
    long requests;
    int callgrind;           /* short enough to count instructions by default */
    double target_req_s, target_wall_s, target_mib;
} bench_case;

typedef struct measured {
    int ok;
    double wall_s, peak_mib, instructions;   /* instructions < 0: not counted */
} measured;

static const char *const synth_args[][2] = {
    {"synth-200k-load", "--requests 200000 --rate 10 --input-dist fixed --input-len 1024 --output-dist fixed --output-len 128"},
    {"synth-200k-over", "--requests 200000 --rate 2000 --input-dist fixed --input-len 1024 --output-dist fixed --output-len 128"},
    {"synth-1m-load", "--requests 1000000 --rate 10 --input-dist fixed --input-len 1024 --output-dist fixed --output-len 128"},
    {"synth-1m-over", "--requests 1000000 --rate 2000 --input-dist fixed --input-len 1024 --output-dist fixed --output-len 128"},
    {"synth-200k-shared", "--requests 200000 --rate 10 --input-dist fixed --input-len 1024 --output-dist fixed "
                          "--output-len 128 --prefix-groups 64 --prompts-per-group 3125 --system-prompt-len 768"},
    {"vidur-100k", "--requests 100000 --arrival poisson --rate 2.5 --input-dist fixed --input-len 1024 "
                   "--output-dist fixed --output-len 256"},
    {"mooncake-like-1m", "--requests 1000000 --rate 120 --prefix-groups 64 --prompts-per-group 1000 "
                         "--system-prompt-len 2048 --turns 4 --sessions 256"},
};

/* Runs argv (a space-separated command) with its output discarded; the
 * wall time and the child's peak RSS. -1 when it fails. */
static int run_cmd(const char *cmd, double *wall, long *rss_kib, char *err_path)
{
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", cmd);
    char *argv[64];
    int n = 0;
    for (char *t = strtok(buf, " "); t && n < 63; t = strtok(NULL, " ")) argv[n++] = t;
    argv[n] = NULL;
    fflush(stdout);   /* or the child's freopen writes our buffered table again */
    fflush(stderr);
    double t0 = rh_now();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen(err_path, "w", stderr)) _exit(126);
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0) return -1;
    *wall = rh_now() - t0;
    *rss_kib = ru.ru_maxrss;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* callgrind's "Collected : N" from its log, or -1. */
static double instructions_of(const char *log)
{
    FILE *f = fopen(log, "r");
    if (!f) return -1;
    char line[512];
    double n = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "Collected : ");
        if (p) n = strtod(p + 12, NULL);
    }
    fclose(f);
    return n;
}

static int want_callgrind(const bench_case *c)
{
    const char *v = getenv("REHEARSE_BENCH_CALLGRIND");
    if (v && !strcmp(v, "0")) return 0;
    if (v && !strcmp(v, "all")) return 1;
    return c->callgrind;
}

static measured measure(const char *bin, const bench_case *c, const char *trace, int callgrind)
{
    measured m = {.instructions = -1};
    char cmd[2048], err[512];
    snprintf(cmd, sizeof cmd, "%s sim %s --cost %s/%s%s%s", bin, trace, TMP, c->cost, c->extra ? " " : "",
             c->extra ? c->extra : "");
    snprintf(err, sizeof err, "%s/%s.err", TMP, c->name);
    long rss;
    if (run_cmd(cmd, &m.wall_s, &rss, err) < 0) {
        fprintf(stderr, "bench_sim_cli: %s failed (see %s): %s\n", c->name, err, cmd);
        return m;
    }
    m.ok = 1;
    m.peak_mib = (double)rss / 1024;
    if (callgrind) {
        char vg[2600];
        double w;
        long r;
        snprintf(vg, sizeof vg, "valgrind --tool=callgrind --callgrind-out-file=/dev/null %s", cmd);
        if (run_cmd(vg, &w, &r, err) == 0) m.instructions = instructions_of(err);
    }
    return m;
}

static json_t *measured_json(const measured *m, long requests)
{
    json_t *j = json_object();
    json_object_set_new(j, "wall_s", json_real(m->wall_s));
    json_object_set_new(j, "requests_per_s", json_real((double)requests / m->wall_s));
    json_object_set_new(j, "peak_rss_mib", json_real(m->peak_mib));
    json_object_set_new(j, "instructions", m->instructions >= 0 ? json_real(m->instructions) : json_null());
    return j;
}

static int write_cost(const char *name, const char *model, const char *gpu, int tp)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", TMP, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"version\": 1, \"kind\": \"roofline\", \"model\": \"%s\", \"gpu\": \"%s\", \"tp\": %d}\n", model, gpu,
            tp);
    return fclose(f);
}

int main(void)
{
    const char *bin = getenv("REHEARSE_BIN"), *before = getenv("REHEARSE_BENCH_BEFORE");
    const char *dir = getenv("REHEARSE_SHARED_TRACES");
    if (!bin || !*bin) bin = "./rehearse";
    if (!dir || !*dir) dir = "../shared/traces";
    if (before && !*before) before = NULL;
    if (rh_mkdir_p(TMP) < 0 || write_cost("l70b-h200.json", "llama-3-70b", "h200", 8) < 0 ||
        write_cost("l31-70b-h200.json", "llama-3.1-70b", "h200", 8) < 0 ||
        write_cost("l8b-a100.json", "llama-3-8b", "a100-80g", 1) < 0) {
        fprintf(stderr, "bench_sim_cli: cannot write the cost files under %s\n", TMP);
        return 1;
    }
    char moon[1024], conv[1024], code[1024];
    snprintf(moon, sizeof moon, "%s/mooncake_conversation_trace.jsonl", dir);
    snprintf(conv, sizeof conv, "%s/AzureLLMInferenceTrace_conv.csv", dir);
    snprintf(code, sizeof code, "%s/AzureLLMInferenceTrace_code.csv", dir);
    const bench_case cases[] = {
        {"mooncake", moon, "l31-70b-h200.json", NULL, 12031, 1, 100000, 0, 0},
        {"azure-conv", conv, "l70b-h200.json", NULL, 19366, 1, 0, 0, 0},
        {"azure-code", code, "l70b-h200.json", NULL, 8819, 1, 0, 0, 0},
        {"synth-200k-load", "@synth-200k-load", "l70b-h200.json", NULL, 200000, 0, 0, 0, 0},
        {"synth-200k-over", "@synth-200k-over", "l70b-h200.json", NULL, 200000, 0, 0, 0, 0},
        {"synth-200k-shared", "@synth-200k-shared", "l70b-h200.json", NULL, 200000, 0, 0, 0, 0},
        {"synth-1m-load", "@synth-1m-load", "l70b-h200.json", NULL, 1000000, 0, 0, 1.5, 0},
        {"synth-1m-over", "@synth-1m-over", "l70b-h200.json", NULL, 1000000, 0, 0, 1.5, 0},
        {"vidur-100k", "@vidur-100k", "l8b-a100.json", "--scheduler vllm", 100000, 0, 140000, 0, 0},
        {"cluster-1m", "@mooncake-like-1m", "l70b-h200.json",
         "--replicas 16 --router cache-aware --context-length 0", 1000000, 0, 0, 30, 2048},
    };
    size_t n_cases = sizeof cases / sizeof cases[0];
    json_t *out = json_object();
    printf("\nrehearse sim, whole command, shipped presets, pool from memory%s\n",
           before ? " (before -> after)" : "");
    printf("%-18s %9s %16s %18s %16s %18s\n", "case", "requests", "wall s", "requests/s", "peak MiB", "G instructions");
    rh_progress bar;
    rh_progress_begin(&bar, "bench sim cli", n_cases);
    for (size_t i = 0; i < n_cases; i++) {
        const bench_case *c = &cases[i];
        char trace[1024];
        if (c->trace[0] == '@') {
            const char *args = NULL;
            for (size_t k = 0; k < sizeof synth_args / sizeof synth_args[0]; k++)
                if (!strcmp(synth_args[k][0], c->trace + 1)) args = synth_args[k][1];
            snprintf(trace, sizeof trace, "%s/%s.rhtr", TMP, c->trace + 1);
            struct stat st;
            if (stat(trace, &st) != 0) {   /* the same flags and seed make the same file: made once */
                char cmd[2048], err[512];
                double w;
                long r;
                snprintf(cmd, sizeof cmd, "%s trace synth -o %s --seed 1 %s", bin, trace, args);
                snprintf(err, sizeof err, "%s/synth.err", TMP);
                if (run_cmd(cmd, &w, &r, err) < 0) {
                    printf("%-18s failed to make its trace (see %s)\n", c->name, err);
                    continue;
                }
            }
        } else {
            struct stat st;
            if (stat(c->trace, &st) != 0) {
                printf("%-18s skipped: %s is absent (set REHEARSE_SHARED_TRACES)\n", c->name, c->trace);
                continue;
            }
            snprintf(trace, sizeof trace, "%s", c->trace);
        }
        int cg = want_callgrind(c);
        measured a = measure(bin, c, trace, cg), b = {0};
        if (before) b = measure(before, c, trace, cg);
        rh_progress_update(&bar, i + 1);
        if (!a.ok) {
            printf("%-18s failed\n", c->name);
            continue;
        }
        char wall[64], rps[64], mib[64], ins[64];
        if (before && b.ok) {
            snprintf(wall, sizeof wall, "%.2f -> %.2f", b.wall_s, a.wall_s);
            snprintf(rps, sizeof rps, "%.0f -> %.0f", c->requests / b.wall_s, c->requests / a.wall_s);
            snprintf(mib, sizeof mib, "%.0f -> %.0f", b.peak_mib, a.peak_mib);
            if (a.instructions >= 0 && b.instructions >= 0)
                snprintf(ins, sizeof ins, "%.2f -> %.2f", b.instructions / 1e9, a.instructions / 1e9);
            else snprintf(ins, sizeof ins, "-");
        } else {
            snprintf(wall, sizeof wall, "%.2f", a.wall_s);
            snprintf(rps, sizeof rps, "%.0f", c->requests / a.wall_s);
            snprintf(mib, sizeof mib, "%.0f", a.peak_mib);
            if (a.instructions >= 0) snprintf(ins, sizeof ins, "%.2f", a.instructions / 1e9);
            else snprintf(ins, sizeof ins, "-");
        }
        printf("%-18s %9ld %16s %18s %16s %18s", c->name, c->requests, wall, rps, mib, ins);
        if (c->target_req_s > 0 && !strcmp(c->name, "vidur-100k"))
            printf("   %.0fx Vidur's 140 req/s (target >= 1000x)", c->requests / a.wall_s / 140);
        else if (c->target_req_s > 0) printf("   target >= %.0f req/s", c->target_req_s);
        if (c->target_wall_s > 0) printf("   target <= %.1f s", c->target_wall_s);
        if (c->target_mib > 0) printf(", <= %.0f MiB", c->target_mib);
        printf("\n");
        json_t *j = json_object();
        json_object_set_new(j, "requests", json_integer(c->requests));
        json_object_set_new(j, "after", measured_json(&a, c->requests));
        if (before && b.ok) {
            json_object_set_new(j, "before", measured_json(&b, c->requests));
            json_object_set_new(j, "wall_ratio", json_real(a.wall_s / b.wall_s));
            if (a.instructions >= 0 && b.instructions >= 0)
                json_object_set_new(j, "instructions_ratio", json_real(a.instructions / b.instructions));
        }
        if (c->target_req_s > 0) json_object_set_new(j, "target_requests_per_s", json_real(c->target_req_s));
        if (c->target_wall_s > 0) json_object_set_new(j, "target_wall_s", json_real(c->target_wall_s));
        if (c->target_mib > 0) json_object_set_new(j, "target_peak_mib", json_real(c->target_mib));
        json_object_set_new(out, c->name, j);
    }
    rh_progress_end(&bar);
    json_dump_file(out, "reports/bench/sim_cli.json", JSON_INDENT(2));
    json_decref(out);
    return 0;
}
