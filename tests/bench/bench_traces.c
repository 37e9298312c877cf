/* bench_traces.c — the trace format's three targets:
 *   read:   >= 20 million requests/s from a 10-million-request synthetic
 *           trace with block hashes, one core;
 *   import: >= 1 million rows/s of Azure CSV, >= 300,000 rows/s of Mooncake JSONL;
 *   size:   the binary trace <= half of the same trace as our JSONL
 *           compressed with zstd -19.
 * Prints a table and writes reports/bench/traces.json. Timings are the best
 * of a few runs (the machine is shared); CPU time is reported beside wall
 * time because other work on the machine inflates the wall clock. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "traces/import/import.h"
#include "traces/jsonl.h"
#include "util/rng.h"
#include "traces/tools/synth.h"
#include "util/progress.h"


static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* The 1-minute load average: on a shared machine it says how much the
 * wall-clock figures were squeezed by other work. */
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

static void die(const rh_err *e)
{
    fprintf(stderr, "bench_traces: %s\n", e->msg);
    exit(1);
}

typedef struct timing {
    double wall, cpu;   /* best of the runs */
} timing;

/* ---- read ---- */

static uint64_t read_all(const char *path, uint64_t *hashes)
{
    rh_err e;
    tr_reader *r = tr_reader_open(path, &e);
    if (!r) die(&e);
    tr_record rec;
    uint64_t n = 0, h = 0, check = 0;
    int rc;
    while ((rc = tr_reader_next(r, &rec, &e)) > 0) {
        n++;
        h += rec.req.n_hashes;
        check += rec.req.input_len;   /* touch the record */
    }
    if (rc < 0) die(&e);
    tr_reader_close(r);
    *hashes = h;
    return n + (check == 0);
}

static timing time_read(const char *path, int runs, uint64_t *n, uint64_t *hashes)
{
    timing best = {1e30, 1e30};
    for (int i = 0; i < runs; i++) {
        double w = rh_now(), c = cpu_now();
        *n = read_all(path, hashes);
        w = rh_now() - w;
        c = cpu_now() - c;
        if (w < best.wall) best.wall = w;
        if (c < best.cpu) best.cpu = c;
    }
    return best;
}

/* ---- import ---- */

static timing time_import(const char *in, tr_format f, int runs, const char *out, uint64_t *rows)
{
    timing best = {1e30, 1e30};
    tr_import_opts o;
    tr_import_opts_init(&o);
    o.format = f;
    for (int i = 0; i < runs; i++) {
        rh_err e;
        double w = rh_now(), c = cpu_now();
        if (tr_import_file(in, &o, out, rows, NULL, &e) < 0) die(&e);
        w = rh_now() - w;
        c = cpu_now() - c;
        if (w < best.wall) best.wall = w;
        if (c < best.cpu) best.cpu = c;
    }
    return best;
}

/* A large file in the exact shape of the Azure 2023 CSV (CRLF, seven
 * fractional digits of which the last is 0, no final newline). */
static void write_azure_csv(const char *path, size_t rows)
{
    FILE *f = fopen(path, "wb");
    rh_rng r;
    rh_rng_seed(&r, 2023);
    fputs("TIMESTAMP,ContextTokens,GeneratedTokens", f);
    uint64_t us = 0;
    for (size_t i = 0; i < rows; i++) {
        us += (uint64_t)rh_rng_exp(&r, 1.0 / 180000.0);
        uint64_t s = us / 1000000, frac = us % 1000000;
        fprintf(f, "\r\n2023-11-16 %02u:%02u:%02u.%06llu0,%u,%u", (unsigned)(s / 3600 % 24), (unsigned)(s / 60 % 60),
                (unsigned)(s % 60), (unsigned long long)frac, 1 + (unsigned)rh_rng_below(&r, 8000),
                1 + (unsigned)rh_rng_below(&r, 700));
    }
    fclose(f);
}

/* A large file in the exact shape of Mooncake's JSONL, from a synthetic
 * trace with shared prefixes and multi-turn sessions (Mooncake-like lengths). */
typedef struct moon_ctx {
    FILE *f;
} moon_ctx;

static int moon_record(void *ctx, const tr_record *r, rh_err *e)
{
    (void)e;
    moon_ctx *m = ctx;
    fprintf(m->f, "{\"timestamp\": %llu, \"input_length\": %u, \"output_length\": %u, \"hash_ids\": [",
            (unsigned long long)llround(r->req.arrival * 1000), r->req.input_len, r->req.output_len);
    for (uint32_t i = 0; i < r->req.n_hashes; i++) fprintf(m->f, i ? ", %llu" : "%llu", (unsigned long long)r->req.hashes[i]);
    fputs("]}\n", m->f);
    return 0;
}

static void mooncake_like_opts(tr_synth_opts *o, uint64_t requests)
{
    tr_synth_opts_init(o);
    o->requests = requests;
    o->rate = 4;
    o->input = (tr_len_dist){TR_LEN_LOGNORMAL, 12000, 0, 1.0};
    o->output = (tr_len_dist){TR_LEN_LOGNORMAL, 343, 0, 0.7};
    o->groups = 20;
    o->prompts_per_group = 50;
    o->system_prompt = 1024;
    o->turns = 4;
    o->sessions = 64;
}

/* With the real Mooncake file at hand: that file 25 times over (300,775
 * lines of the real shape; the copies restart the clock, so the importer's
 * sort runs too). */
static int write_mooncake_copies(const char *path, const char *real, int copies)
{
    size_t n;
    FILE *in = fopen(real, "rb");
    if (!in) return -1;
    fseek(in, 0, SEEK_END);
    n = (size_t)ftell(in);
    fseek(in, 0, SEEK_SET);
    char *buf = malloc(n);
    if (!buf || fread(buf, 1, n, in) != n) {
        fclose(in);
        free(buf);
        return -1;
    }
    fclose(in);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < copies; i++) fwrite(buf, 1, n, f);
    fclose(f);
    free(buf);
    return 0;
}

static void write_mooncake_jsonl(const char *path, size_t rows)
{
    tr_synth_opts o;
    mooncake_like_opts(&o, rows);
    moon_ctx m = {fopen(path, "wb")};
    tr_sink s = {&m, NULL, moon_record};
    rh_err e;
    if (tr_synth(&o, &s, &e) < 0) die(&e);
    fclose(m.f);
}

/* ---- size ---- */

typedef struct jsonl_buf {
    char *text;
    size_t len;
    FILE *f;
    tr_jsonl_writer w;
} jsonl_buf;

static int jb_header(void *ctx, const tr_header *h, rh_err *e)
{
    jsonl_buf *j = ctx;
    (void)e;
    return tr_jsonl_header(&j->w, h);
}

static int jb_record(void *ctx, const tr_record *r, rh_err *e)
{
    jsonl_buf *j = ctx;
    (void)e;
    return tr_jsonl_record(&j->w, r);
}

/* Our JSONL of the binary trace, compressed with zstd -19. */
static uint64_t jsonl_zstd19(const char *binary)
{
    jsonl_buf j = {0};
    j.f = open_memstream(&j.text, &j.len);
    tr_jsonl_init(&j.w, j.f);
    tr_sink s = {&j, jb_header, jb_record};
    rh_err e;
    if (tr_read(binary, NULL, &s, NULL, &e) < 0) die(&e);
    tr_jsonl_free(&j.w);
    fclose(j.f);
    size_t cap = ZSTD_compressBound(j.len);
    void *out = malloc(cap);
    size_t n = ZSTD_compress(out, cap, j.text, j.len, 19);
    if (ZSTD_isError(n)) {
        fprintf(stderr, "bench_traces: zstd: %s\n", ZSTD_getErrorName(n));
        exit(1);
    }
    free(out);
    free(j.text);
    return n;
}

typedef struct size_row {
    const char *name;
    uint64_t requests, binary, jsonl_z19;
} size_row;

static json_t *size_json(const size_row *s)
{
    return json_pack("{s:s,s:I,s:I,s:I,s:f}", "trace", s->name, "requests", (json_int_t)s->requests, "binary_bytes",
                     (json_int_t)s->binary, "jsonl_zstd19_bytes", (json_int_t)s->jsonl_z19, "ratio",
                     (double)s->binary / (double)s->jsonl_z19);
}

int main(void)
{
    mkdir("build", 0755);
    mkdir("build/tmp", 0755);
    mkdir("reports", 0755);
    mkdir("reports/bench", 0755);
    const char *big = "build/tmp/bench_10m.rhtr", *heavy = "build/tmp/bench_heavy.rhtr", *out = "build/tmp/bench_out.rhtr";
    rh_err e;
    json_t *root = json_object();
    int all_ok = 1;
    double load_start = loadavg();

    /* 1. read: 10M requests, the synthesizer's defaults (lognormal 1024-token
     * prompts in 512-token blocks). */
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    o.requests = 10000000;
    o.rate = 1000;
    printf("writing a 10M-request synthetic trace...\n");
    fflush(stdout);
    double w0 = rh_now();
    if (tr_synth_file(&o, big, &e) < 0) die(&e);
    double synth_s = rh_now() - w0;
    uint64_t n, hashes;
    timing rd = time_read(big, 3, &n, &hashes);
    double read_rps = (double)n / rd.wall, read_rps_cpu = (double)n / rd.cpu;
    /* A heavier one: Mooncake-like lengths, shared system prompts, 4-turn
     * sessions (about 5x the hashes per request); no target, for context. */
    tr_synth_opts h;
    mooncake_like_opts(&h, 2000000);
    if (tr_synth_file(&h, heavy, &e) < 0) die(&e);
    uint64_t hn, hh;
    timing hrd = time_read(heavy, 3, &hn, &hh);

    /* 2. import */
    const char *SHARED = getenv("REHEARSE_SHARED_TRACES");
    if (!SHARED || !*SHARED) SHARED = "../shared/traces";
    char az_code[512], az_conv[512], moon[512];
    snprintf(az_code, sizeof az_code, "%s/AzureLLMInferenceTrace_code.csv", SHARED);
    snprintf(az_conv, sizeof az_conv, "%s/AzureLLMInferenceTrace_conv.csv", SHARED);
    snprintf(moon, sizeof moon, "%s/mooncake_conversation_trace.jsonl", SHARED);
    int have_shared = access(az_code, R_OK) == 0 && access(az_conv, R_OK) == 0 && access(moon, R_OK) == 0;
    const char *big_csv = "build/tmp/bench_azure.csv", *big_moon = "build/tmp/bench_mooncake.jsonl";
    printf("writing a 2M-row Azure-shaped CSV and a ~300k-line Mooncake-shaped JSONL...\n");
    fflush(stdout);
    write_azure_csv(big_csv, 2000000);
    int moon_real_shape = have_shared && write_mooncake_copies(big_moon, moon, 25) == 0;
    if (!moon_real_shape) write_mooncake_jsonl(big_moon, 300000);
    uint64_t rows;
    timing t_az_big = time_import(big_csv, TR_FMT_AZURE, 3, out, &rows);
    double az_big_rps = (double)rows / t_az_big.wall, az_big_cpu = (double)rows / t_az_big.cpu;
    timing t_moon_big = time_import(big_moon, TR_FMT_MOONCAKE, 3, out, &rows);
    double moon_big_rps = (double)rows / t_moon_big.wall, moon_big_cpu = (double)rows / t_moon_big.cpu;
    double az_real_rps = 0, moon_real_rps = 0;
    if (have_shared) {
        timing t = time_import(az_conv, TR_FMT_AZURE, 9, out, &rows);
        az_real_rps = (double)rows / t.wall;
        t = time_import(moon, TR_FMT_MOONCAKE, 9, out, &rows);
        moon_real_rps = (double)rows / t.wall;
    }

    /* 3. size */
    size_row sizes[6];
    int ns = 0;
    if (have_shared) {
        const char *names[3] = {"mooncake_conversation", "azure_code_2023", "azure_conv_2023"};
        const char *paths[3] = {moon, az_code, az_conv};
        for (int i = 0; i < 3; i++) {
            uint64_t r;
            if (tr_import_file(paths[i], NULL, out, &r, NULL, &e) < 0) die(&e);
            sizes[ns++] = (size_row){names[i], r, file_size(out), jsonl_zstd19(out)};
        }
    }
    tr_synth_opts small = o;
    small.requests = 200000;
    if (tr_synth_file(&small, out, &e) < 0) die(&e);
    sizes[ns++] = (size_row){"synth_default_200k", small.requests, file_size(out), jsonl_zstd19(out)};
    mooncake_like_opts(&h, 100000);
    if (tr_synth_file(&h, out, &e) < 0) die(&e);
    sizes[ns++] = (size_row){"synth_mooncake_like_100k", h.requests, file_size(out), jsonl_zstd19(out)};
    unlink(out);

    /* ---- table ---- */
    printf("\n%-58s %14s %14s %10s\n", "measure", "wall", "cpu", "target");
    int ok = read_rps_cpu >= 20e6;
    all_ok &= ok;
    printf("%-58s %11.1f M/s %11.1f M/s %10s %s\n", "read: 10M synthetic requests (2.5 hashes each), req/s", read_rps / 1e6,
           read_rps_cpu / 1e6, ">= 20 M/s", ok ? "ok" : "MISSED");
    printf("%-58s %11.1f M/s %11.1f M/s %10s\n", "read: 2M Mooncake-like requests (multi-turn), req/s", (double)hn / hrd.wall / 1e6,
           (double)hn / hrd.cpu / 1e6, "-");
    ok = az_big_cpu >= 1e6;
    all_ok &= ok;
    printf("%-58s %11.2f M/s %11.2f M/s %10s %s\n", "import: Azure CSV, 2M rows, rows/s", az_big_rps / 1e6, az_big_cpu / 1e6,
           ">= 1 M/s", ok ? "ok" : "MISSED");
    ok = moon_big_cpu >= 3e5;
    all_ok &= ok;
    printf("%-58s %11.0f k/s %11.0f k/s %10s %s\n",
           moon_real_shape ? "import: Mooncake JSONL, the real file x25, rows/s" : "import: Mooncake-like JSONL, 300k lines, rows/s",
           moon_big_rps / 1e3,
           moon_big_cpu / 1e3, ">= 300 k/s", ok ? "ok" : "MISSED");
    if (have_shared) {
        printf("%-58s %11.2f M/s %14s %10s\n", "import: the real Azure conv file (19,366 rows), rows/s", az_real_rps / 1e6, "", "");
        printf("%-58s %11.0f k/s %14s %10s\n", "import: the real Mooncake file (12,031 lines), rows/s", moon_real_rps / 1e3, "", "");
    }
    printf("\n%-30s %10s %12s %16s %8s\n", "size", "requests", "binary", "JSONL zstd -19", "ratio");
    json_t *sz = json_array();
    for (int i = 0; i < ns; i++) {
        double ratio = (double)sizes[i].binary / (double)sizes[i].jsonl_z19;
        ok = ratio <= 0.5;
        all_ok &= ok;
        printf("%-30s %10llu %12llu %16llu %8.3f %s\n", sizes[i].name, (unsigned long long)sizes[i].requests,
               (unsigned long long)sizes[i].binary, (unsigned long long)sizes[i].jsonl_z19, ratio, ok ? "ok" : "MISSED");
        json_array_append_new(sz, size_json(&sizes[i]));
    }
    printf("\n(synthesis + write of the 10M trace: %.1f s, %.1f M req/s; file %.1f MB)\n", synth_s,
           (double)o.requests / synth_s / 1e6, (double)file_size(big) / 1e6);
    if (!have_shared) printf("(the real traces in %s are absent: real-file rows skipped)\n", SHARED);
    double load_end = loadavg();
    printf("(load average %.2f at the start, %.2f at the end, on %ld cores)\n", load_start, load_end,
           sysconf(_SC_NPROCESSORS_ONLN));

    json_object_set_new(root, "read", json_pack("{s:I,s:I,s:f,s:f,s:f}", "requests", (json_int_t)n, "hashes", (json_int_t)hashes,
                                                "requests_per_s_wall", read_rps, "requests_per_s_cpu", read_rps_cpu,
                                                "target_per_s", 20e6));
    json_object_set_new(root, "read_mooncake_like", json_pack("{s:I,s:I,s:f,s:f}", "requests", (json_int_t)hn, "hashes",
                                                              (json_int_t)hh, "requests_per_s_wall", (double)hn / hrd.wall,
                                                              "requests_per_s_cpu", (double)hn / hrd.cpu));
    json_object_set_new(root, "import_azure", json_pack("{s:f,s:f,s:f,s:f}", "rows_per_s_wall", az_big_rps, "rows_per_s_cpu",
                                                        az_big_cpu, "real_conv_rows_per_s_wall", az_real_rps, "target_per_s", 1e6));
    json_object_set_new(root, "import_mooncake", json_pack("{s:s,s:f,s:f,s:f,s:f}", "input",
                                                           moon_real_shape ? "real file x25" : "synthetic 300k lines",
                                                           "rows_per_s_wall", moon_big_rps, "rows_per_s_cpu", moon_big_cpu,
                                                           "real_rows_per_s_wall", moon_real_rps, "target_per_s", 3e5));
    json_object_set_new(root, "size", sz);
    json_object_set_new(root, "all_targets_met", json_boolean(all_ok));
    json_object_set_new(root, "load_average", json_pack("{s:f,s:f,s:I}", "start", load_start, "end", load_end, "cores",
                                                        (json_int_t)sysconf(_SC_NPROCESSORS_ONLN)));
    json_object_set_new(root, "note", json_string("best of 3 runs (9 for the small real files); shared 2-core machine, "
                                                  "wall times are noisy, cpu = process CPU time"));
    if (json_dump_file(root, "reports/bench/traces.json", JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0)
        fprintf(stderr, "bench_traces: cannot write reports/bench/traces.json\n");
    json_decref(root);
    unlink(big);
    unlink(heavy);
    unlink(big_csv);
    unlink(big_moon);
    return 0;
}
