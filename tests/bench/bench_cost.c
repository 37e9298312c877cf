/* bench_cost.c — how fast the cost models price a step, and how fast
 * `rehearse fit` fits. The simulator prices every step it replays (a
 * million-request replay runs a few hundred thousand to millions of steps
 * within its 5 s budget), so a step price must cost well under a
 * microsecond. Prints a table; writes reports/bench/cost.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost.h"
#include "sim/cost/cost_fit.h"
#include "util/progress.h"

typedef struct row {
    const char *name;
    double ns_per_step;
    double checksum;
} row;

/* Prices n batches whose shapes vary with i (a decode-heavy mix with a
 * prefill chunk every fourth step and 3 drafts every eighth). */
static row time_model(const char *name, const cost_model *m, long n)
{
    double sum = 0, t0 = rh_now();
    for (long i = 0; i < n; i++) {
        cost_batch b;
        memset(&b, 0, sizeof b);
        b.decode_seqs = 1 + (uint32_t)(i % 256);
        b.decode_tokens = b.decode_seqs * ((i & 7) == 0 ? 4 : 1);
        b.decode_context = (uint64_t)b.decode_seqs * (500 + (uint64_t)(i % 4000));
        if ((i & 3) == 0) {
            b.prefill_seqs = 1;
            b.prefill_tokens = 256 + (uint32_t)(i % 7936);
            b.prefill_context = (uint64_t)(i % 16000);
            b.prefill_attn = (uint64_t)b.prefill_tokens * (b.prefill_context + b.prefill_tokens);
        }
        if ((i & 7) == 0) {
            b.draft_steps = 3;
            b.draft_seqs = b.decode_seqs;
        }
        sum += cost_step_time(m, &b);
    }
    double dt = rh_now() - t0;
    return (row){name, dt / (double)n * 1e9, sum};
}

static cost_model *load(const char *json)
{
    rh_err e;
    cost_model *m = cost_parse(json, "bench", &e);
    if (!m) {
        fprintf(stderr, "bench_cost: %s\n", e.msg);
        exit(1);
    }
    return m;
}

int main(void)
{
    setenv("REHEARSE_PRESETS", "sim/cost/presets", 0);
    const long n = 2000000;
    cost_linear_coef k = {0.004, 2e-5, 1e-4, 1e-8, 1e-10};
    cost_model *lin = cost_linear_new(&k);
    cost_model *llama = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-70b\", \"gpu\": \"h200\","
                             " \"tp\": 8}");
    cost_model *ds = load("{\"kind\": \"roofline\", \"version\": 1, \"model\": \"deepseek-v3\", \"gpu\": \"h200\","
                          " \"tp\": 16, \"ep\": 16, \"dtype\": \"fp8\"}");
    row rows[3] = {time_model("linear", lin, n), time_model("roofline llama-3-70b tp8", llama, n / 4),
                   time_model("roofline deepseek-v3 ep16 (MTP drafts)", ds, n / 4)};

    /* fit: a million synthetic steps priced by the linear model */
    size_t ns = 1000000;
    tr_step *st = calloc(ns, sizeof *st);
    if (!st) return 1;
    for (size_t i = 0; i < ns; i++) {
        st[i].decode_seqs = (uint32_t)(i % 3 ? 1 + i % 200 : 0);
        st[i].decode_tokens = st[i].decode_seqs;
        st[i].decode_context = (uint64_t)st[i].decode_seqs * (100 + i % 3000);
        if (i % 3 != 1) {
            st[i].prefill_seqs = 1;
            st[i].prefill_tokens = 64 + (uint32_t)(i % 4000);
            st[i].prefill_context = i % 5 ? 0 : i % 9000;
            st[i].prefill_attn = (uint64_t)st[i].prefill_tokens * (st[i].prefill_context + st[i].prefill_tokens);
        }
        cost_batch b;
        cost_batch_from_step(&b, &st[i]);
        st[i].duration = cost_step_time(lin, &b);
    }
    cost_fit_opts o;
    cost_fit_opts_default(&o);
    cost_fit_result r;
    rh_err e;
    double t0 = rh_now();
    int rc = cost_fit_steps(st, ns, &o, &r, &e);
    double fit_s = rh_now() - t0;
    free(st);
    if (rc < 0) {
        fprintf(stderr, "bench_cost: %s\n", e.msg);
        return 1;
    }

    printf("%-42s %14s\n", "cost_step_time", "ns per step");
    for (int i = 0; i < 3; i++) printf("%-42s %14.1f\n", rows[i].name, rows[i].ns_per_step);
    printf("%-42s %14.3f s  (%.0f ns per step; base_s recovered %.6g)\n", "fit of 1,000,000 steps", fit_s,
           fit_s / (double)ns * 1e9, r.coef.base_s);

    FILE *f = fopen("reports/bench/cost.json.tmp", "w");
    if (!f) return 1;
    fprintf(f, "{\n  \"bench\": \"cost\",\n  \"step_time_ns\": {\n");
    for (int i = 0; i < 3; i++)
        fprintf(f, "    \"%s\": %.1f%s\n", rows[i].name, rows[i].ns_per_step, i < 2 ? "," : "");
    fprintf(f, "  },\n  \"fit_1M_steps_s\": %.4f\n}\n", fit_s);
    if (fclose(f) != 0 || rename("reports/bench/cost.json.tmp", "reports/bench/cost.json") != 0) return 1;
    cost_free(lin);
    cost_free(llama);
    cost_free(ds);
    return 0;
}
