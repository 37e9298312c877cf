/* bench_summary.c — see bench_summary.h. */
#include "client/bench_summary.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/stats.h"

static const struct {
    unsigned bit;
    const char *key, *abbr, *head;
} METRICS[] = {
    {BENCH_M_TTFT, "ttft", "TTFT", "Time to First Token"},
    {BENCH_M_TPOT, "tpot", "TPOT", "Time per Output Token (excl. 1st token)"},
    {BENCH_M_ITL, "itl", "ITL", "Inter-token Latency"},
    {BENCH_M_E2EL, "e2el", "E2EL", "End-to-end Latency"},
};
#define N_METRICS 4

int bench_selection_parse(bench_selection *s, const char *metrics, const char *percentiles, rh_err *e)
{
    memset(s, 0, sizeof *s);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", metrics ? metrics : "ttft,tpot,itl");
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < N_METRICS && strcmp(t, METRICS[i].key)) i++;
        if (i == N_METRICS)
            return rh_fail(e, "--percentile-metrics: '%s' is not one of ttft, tpot, itl, e2el", t);
        s->metrics |= METRICS[i].bit;
    }
    snprintf(buf, sizeof buf, "%s", percentiles ? percentiles : "99");
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        double p = strtod(t, &end);
        if (*end || !(p > 0 && p < 100))
            return rh_fail(e, "--metric-percentiles: '%s' is not a percentile in (0, 100)", t);
        if (s->n_percentiles == BENCH_MAX_PERCENTILES)
            return rh_fail(e, "--metric-percentiles: at most %d percentiles", BENCH_MAX_PERCENTILES);
        s->percentiles[s->n_percentiles++] = p;
    }
    if (!s->metrics) return rh_fail(e, "--percentile-metrics: no metric named");
    if (!s->n_percentiles) return rh_fail(e, "--metric-percentiles: no percentile named");
    return 0;
}

/* One metric's samples over the successful requests, in ms, sorted. */
static int samples(const bench_dataset *d, const bench_result *r, unsigned which, rh_dvec *v)
{
    for (size_t i = 0; i < d->n; i++) {
        const bench_result *x = &r[i];
        if (!x->sent || x->error) continue;
        int rc = 0;
        if (which == BENCH_M_TTFT) rc = rh_dvec_push(v, x->ttft * 1e3);
        else if (which == BENCH_M_E2EL) rc = rh_dvec_push(v, x->e2e * 1e3);
        else if (which == BENCH_M_TPOT && x->output_len > 1)
            rc = rh_dvec_push(v, (x->e2e - x->ttft) * 1e3 / (x->output_len - 1));
        else if (which == BENCH_M_ITL)
            for (uint32_t k = 1; k < x->n_chunks && rc == 0; k++)
                rc = rh_dvec_push(v, (x->chunk_times[k] - x->chunk_times[k - 1]) * 1e3);
        if (rc < 0) return -1;
    }
    if (v->n) rh_sort_doubles(v->v, v->n);   /* no samples: no array at all */
    return 0;
}

typedef struct stat_of {
    double mean, median, std, max;
    double p[BENCH_MAX_PERCENTILES];
} stat_of;

static int stats(const bench_dataset *d, const bench_result *r, unsigned which, const double *ps, size_t np,
                 stat_of *s)
{
    rh_dvec v = {0};
    if (samples(d, r, which, &v) < 0) {
        rh_dvec_free(&v);
        return -1;
    }
    memset(s, 0, sizeof *s);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < v.n; i++) sum += v.v[i];
    s->mean = v.n ? sum / (double)v.n : 0;
    for (size_t i = 0; i < v.n; i++) sq += (v.v[i] - s->mean) * (v.v[i] - s->mean);
    s->std = v.n ? sqrt(sq / (double)v.n) : 0;
    s->median = v.n ? rh_percentile_sorted(v.v, v.n, 50) : 0;
    s->max = v.n ? v.v[v.n - 1] : 0;
    for (size_t k = 0; k < np; k++) s->p[k] = v.n ? rh_percentile_sorted(v.v, v.n, ps[k]) : 0;
    rh_dvec_free(&v);
    return 0;
}

/* Sorts sweep events by time, an end (-1) before a start (+1) at the same
 * instant: intervals are half-open, so a request sent as another ends does
 * not overlap it. */
typedef struct peak_event {
    double t;
    int delta;
} peak_event;

static int event_cmp(const void *a, const void *b)
{
    const peak_event *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->delta - y->delta;
}

void bench_peaks_of(const bench_dataset *d, const bench_result *r, double duration, bench_peaks *p)
{
    memset(p, 0, sizeof *p);
    /* vLLM's: only successful requests, buckets from the first one's send */
    double start = INFINITY, end = 0, e2e_sum = 0;
    size_t ok = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (!r[i].sent || r[i].error) continue;
        ok++;
        if (r[i].send < start) start = r[i].send;
        if (r[i].send + r[i].e2e > end) end = r[i].send + r[i].e2e;
    }
    if (!ok) return;
    size_t bins = (size_t)ceil(end - start) + 1;
    uint64_t *tok = calloc(bins, sizeof *tok);
    peak_event *ev = malloc(2 * ok * sizeof *ev);
    if (!tok || !ev) {
        free(tok);
        free(ev);
        return;
    }
    size_t ne = 0;
    for (size_t i = 0; i < d->n; i++) {
        const bench_result *x = &r[i];
        if (!x->sent || x->error) continue;
        ev[ne++] = (peak_event){x->send, +1};
        ev[ne++] = (peak_event){x->send + x->e2e, -1};
        e2e_sum += x->e2e;
        /* each output token at its chunk's time; a chunk of several tokens
         * (speculation, or a server's own batching) carries them all */
        uint32_t n = x->output_len, c = x->n_chunks;
        for (uint32_t t = 0; t < n && c; t++) {
            uint32_t src = t < c ? t : c - 1;
            double at = x->send + x->chunk_times[src] - start;
            size_t k = at > 0 ? (size_t)floor(at) : 0;
            if (k < bins) tok[k]++;
        }
    }
    for (size_t k = 0; k < bins; k++)
        if ((double)tok[k] > p->output_tokens_per_s) p->output_tokens_per_s = (double)tok[k];
    /* the most requests in flight at one instant (a sweep over the
     * intervals, as vLLM counts it), not in one second: under
     * --max-concurrency C it is at most C */
    qsort(ev, ne, sizeof *ev, event_cmp);
    int64_t now = 0;
    for (size_t k = 0; k < ne; k++) {
        now += ev[k].delta;
        if (now > 0 && (uint64_t)now > p->concurrent) p->concurrent = (uint64_t)now;
    }
    p->concurrency = duration > 0 ? e2e_sum / duration : 0;
    free(tok);
    free(ev);
}

static void row_u(FILE *f, const char *label, unsigned long long v)
{
    fprintf(f, "%-40s %-10llu\n", label, v);
}

static void row_f(FILE *f, const char *label, double v)
{
    fprintf(f, "%-40s %-10.2f\n", label, v);
}

static void rule(FILE *f, const char *title, char c)
{
    size_t n = strlen(title), left = n < 50 ? (50 - n) / 2 : 0, right = n < 50 ? 50 - n - left : 0;
    for (size_t i = 0; i < left; i++) fputc(c, f);
    fputs(title, f);
    for (size_t i = 0; i < right; i++) fputc(c, f);
    fputc('\n', f);
}

static void pword(double p, char *out, size_t cap)
{
    if (p == floor(p)) snprintf(out, cap, "%d", (int)p);
    else snprintf(out, cap, "%g", p);
}

static int print_vllm(FILE *f, const metrics_summary *s, const bench_dataset *d, const bench_result *r,
                      const bench_selection *sel, const bench_peaks *pk, const bench_table *t)
{
    rule(f, " Serving Benchmark Result ", '=');
    row_u(f, "Successful requests:", s->completed);
    row_u(f, "Failed requests:", s->failed);
    if (t->max_concurrency) row_u(f, "Maximum request concurrency:", t->max_concurrency);
    if (isfinite(t->request_rate)) row_f(f, "Request rate configured (RPS):", t->request_rate);
    row_f(f, "Benchmark duration (s):", s->duration);
    row_u(f, "Total input tokens:", s->total_input_tokens);
    row_u(f, "Total generated tokens:", s->total_output_tokens);
    row_f(f, "Request throughput (req/s):", s->request_throughput);
    if (t->goodput) row_f(f, "Request goodput (req/s):", s->request_goodput);
    row_f(f, "Output token throughput (tok/s):", s->output_throughput);
    row_f(f, "Peak output token throughput (tok/s):", pk->output_tokens_per_s);
    row_f(f, "Peak concurrent requests:", (double)pk->concurrent);
    row_f(f, "Total token throughput (tok/s):", s->total_token_throughput);
    for (int m = 0; m < N_METRICS; m++) {
        if (!(sel->metrics & METRICS[m].bit)) continue;
        stat_of st;
        if (stats(d, r, METRICS[m].bit, sel->percentiles, sel->n_percentiles, &st) < 0) return -1;
        rule(f, METRICS[m].head, '-');
        char lab[64], pw[16];
        snprintf(lab, sizeof lab, "Mean %s (ms):", METRICS[m].abbr);
        row_f(f, lab, st.mean);
        snprintf(lab, sizeof lab, "Median %s (ms):", METRICS[m].abbr);
        row_f(f, lab, st.median);
        for (size_t k = 0; k < sel->n_percentiles; k++) {
            pword(sel->percentiles[k], pw, sizeof pw);
            snprintf(lab, sizeof lab, "P%s %s (ms):", pw, METRICS[m].abbr);
            row_f(f, lab, st.p[k]);
        }
    }
    rule(f, "", '=');
    return 0;
}

/* SGLang's table: fixed rows (its percentiles are not selectable). */
static int print_sglang(FILE *f, const metrics_summary *s, const bench_dataset *d, const bench_result *r,
                        const bench_peaks *pk, const bench_table *t)
{
    static const double ps[] = {90, 95, 99};
    stat_of e2e, ttft, tpot, itl;
    if (stats(d, r, BENCH_M_E2EL, ps, 3, &e2e) < 0 || stats(d, r, BENCH_M_TTFT, ps, 3, &ttft) < 0 ||
        stats(d, r, BENCH_M_TPOT, ps, 3, &tpot) < 0 || stats(d, r, BENCH_M_ITL, ps, 3, &itl) < 0)
        return -1;
    rule(f, " Serving Benchmark Result ", '=');
    fprintf(f, "%-40s %-10s\n", "Backend:", t->backend);
    if (isfinite(t->request_rate)) row_f(f, "Traffic request rate:", t->request_rate);
    else fprintf(f, "%-40s %-10s\n", "Traffic request rate:", "inf");
    if (t->max_concurrency) row_u(f, "Max request concurrency:", t->max_concurrency);
    else fprintf(f, "%-40s %-10s\n", "Max request concurrency:", "not set");
    row_u(f, "Successful requests:", s->completed);
    row_u(f, "Failed requests:", s->failed);
    row_f(f, "Benchmark duration (s):", s->duration);
    row_u(f, "Total input tokens:", s->total_input_tokens);
    row_u(f, "Total generated tokens:", s->total_output_tokens);
    row_f(f, "Request throughput (req/s):", s->request_throughput);
    row_f(f, "Input token throughput (tok/s):", s->input_throughput);
    row_f(f, "Output token throughput (tok/s):", s->output_throughput);
    row_f(f, "Peak output token throughput (tok/s):", pk->output_tokens_per_s);
    row_f(f, "Peak concurrent requests:", (double)pk->concurrent);
    row_f(f, "Total token throughput (tok/s):", s->total_token_throughput);
    row_f(f, "Concurrency:", pk->concurrency);
    rule(f, "End-to-End Latency", '-');
    row_f(f, "Mean E2E Latency (ms):", e2e.mean);
    row_f(f, "Median E2E Latency (ms):", e2e.median);
    row_f(f, "P90 E2E Latency (ms):", e2e.p[0]);
    row_f(f, "P99 E2E Latency (ms):", e2e.p[2]);
    rule(f, "Time to First Token", '-');
    row_f(f, "Mean TTFT (ms):", ttft.mean);
    row_f(f, "Median TTFT (ms):", ttft.median);
    row_f(f, "P99 TTFT (ms):", ttft.p[2]);
    rule(f, "Time per Output Token (excl. 1st token)", '-');
    row_f(f, "Mean TPOT (ms):", tpot.mean);
    row_f(f, "Median TPOT (ms):", tpot.median);
    row_f(f, "P99 TPOT (ms):", tpot.p[2]);
    rule(f, "Inter-Token Latency", '-');
    row_f(f, "Mean ITL (ms):", itl.mean);
    row_f(f, "Median ITL (ms):", itl.median);
    row_f(f, "P95 ITL (ms):", itl.p[1]);
    row_f(f, "P99 ITL (ms):", itl.p[2]);
    row_f(f, "Max ITL (ms):", itl.max);
    rule(f, "", '=');
    return 0;
}

int bench_print_summary(FILE *f, bench_style st, const metrics_summary *s, const bench_dataset *d,
                        const bench_result *r, const bench_selection *sel, const bench_peaks *pk,
                        const bench_table *t)
{
    return st == BENCH_STYLE_SGLANG ? print_sglang(f, s, d, r, pk, t) : print_vllm(f, s, d, r, sel, pk, t);
}

/* mean_, median_, std_ and pP_ keys of one metric, as {prefix}_{name}_ms. */
static void put_stats(json_t *o, const char *name, const stat_of *s, const double *ps, size_t np)
{
    char k[64], pw[16];
    snprintf(k, sizeof k, "mean_%s_ms", name);
    json_object_set_new(o, k, json_real(s->mean));
    snprintf(k, sizeof k, "median_%s_ms", name);
    json_object_set_new(o, k, json_real(s->median));
    snprintf(k, sizeof k, "std_%s_ms", name);
    json_object_set_new(o, k, json_real(s->std));
    for (size_t j = 0; j < np; j++) {
        pword(ps[j], pw, sizeof pw);
        snprintf(k, sizeof k, "p%s_%s_ms", pw, name);
        json_object_set_new(o, k, json_real(s->p[j]));
    }
}

int bench_summary_json(json_t *o, bench_style st, const bench_dataset *d, const bench_result *r,
                       const bench_selection *sel, const bench_peaks *pk)
{
    json_object_set_new(o, "max_output_tokens_per_s", json_real(pk->output_tokens_per_s));
    json_object_set_new(o, "max_concurrent_requests", json_integer((json_int_t)pk->concurrent));
    if (st == BENCH_STYLE_SGLANG) {
        /* SGLang's fixed set: its names, p90/p95/p99, and max ITL */
        static const double ps[] = {90, 95, 99};
        static const struct {
            unsigned m;
            const char *name;
        } names[] = {{BENCH_M_E2EL, "e2e_latency"}, {BENCH_M_TTFT, "ttft"}, {BENCH_M_TPOT, "tpot"}, {BENCH_M_ITL, "itl"}};
        for (size_t i = 0; i < 4; i++) {
            stat_of s;
            if (stats(d, r, names[i].m, ps, 3, &s) < 0) return -1;
            put_stats(o, names[i].name, &s, ps, 3);
            if (names[i].m == BENCH_M_ITL) json_object_set_new(o, "max_itl_ms", json_real(s.max));
        }
        json_object_set_new(o, "concurrency", json_real(pk->concurrency));
        return 0;
    }
    for (int m = 0; m < N_METRICS; m++) {
        if (!(sel->metrics & METRICS[m].bit)) continue;
        stat_of s;
        if (stats(d, r, METRICS[m].bit, sel->percentiles, sel->n_percentiles, &s) < 0) return -1;
        put_stats(o, METRICS[m].key, &s, sel->percentiles, sel->n_percentiles);
    }
    return 0;
}
