/* metrics.c — see metrics.h. */
#include "traces/metrics/metrics.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct metrics {
    metrics_slo slo;
    rh_dvec ttft, tpot, e2e;            /* seconds, completed requests */
    metrics_wsample *itl;               /* runs of equal gaps */
    size_t n_itl, cap_itl;
    uint64_t completed, failed, good;
    uint64_t in_tokens, out_tokens, cached_tokens, cached_host, cached_storage, req_retractions;
    uint64_t load_back, write_back, backup;   /* host-tier tokens moved, from the steps */
    uint64_t req_spec_proposed, req_spec_accepted;
    double first_arrival, last_done;
    int any_request;
    /* steps */
    uint64_t steps, step_retractions, step_spec_proposed, step_spec_accepted, spec_verifies;
    double sum_batch, max_batch, sum_tokens, sum_kv, max_kv, sum_waiting, max_waiting, busy;
    uint32_t truncated;
};

metrics *metrics_new(const metrics_slo *slo)
{
    metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    if (slo) m->slo = *slo;
    return m;
}

void metrics_free(metrics *m)
{
    if (!m) return;
    rh_dvec_free(&m->ttft);
    rh_dvec_free(&m->tpot);
    rh_dvec_free(&m->e2e);
    free(m->itl);
    free(m);
}

int metrics_add_itl(metrics *m, double gap_s, uint64_t count)
{
    if (count == 0) return 0;
    /* Successive equal gaps (one step's decodes) merge into one run. */
    if (m->n_itl && m->itl[m->n_itl - 1].value == gap_s) {
        m->itl[m->n_itl - 1].count += count;
        return 0;
    }
    if (m->n_itl == m->cap_itl) {
        size_t cap = m->cap_itl ? m->cap_itl * 2 : 1024;
        metrics_wsample *v = realloc(m->itl, cap * sizeof *v);
        if (!v) return -1;
        m->itl = v;
        m->cap_itl = cap;
    }
    m->itl[m->n_itl++] = (metrics_wsample){gap_s, count};
    return 0;
}

int metrics_add_request(metrics *m, const tr_request *r)
{
    if (!(r->flags & TR_REQ_MEASURED)) return 0;
    double done = r->arrival + r->e2e;
    if (!m->any_request || r->arrival < m->first_arrival) m->first_arrival = r->arrival;
    if (!m->any_request || done > m->last_done) m->last_done = done;
    m->any_request = 1;
    m->req_retractions += r->retractions;
    m->req_spec_proposed += r->spec_proposed;
    m->req_spec_accepted += r->spec_accepted;
    int ok = r->finish == TR_FINISH_LENGTH || r->finish == TR_FINISH_STOP;
    if (!ok || (r->flags & TR_REQ_FAILED)) {
        m->failed++;
        return 0;
    }
    m->completed++;
    m->in_tokens += r->input_len;
    m->out_tokens += r->output_len;
    m->cached_tokens += r->cached_tokens;
    m->cached_host += r->cached_host;
    m->cached_storage += r->cached_storage;
    double tpot = r->output_len > 1 ? (r->e2e - r->ttft) / (double)(r->output_len - 1) : 0;
    if (rh_dvec_push(&m->ttft, r->ttft) < 0 || rh_dvec_push(&m->e2e, r->e2e) < 0) return -1;
    if (r->output_len > 1 && rh_dvec_push(&m->tpot, tpot) < 0) return -1;
    for (uint32_t i = 1; i < r->n_times; i++) {
        double gap = r->token_times[i] - r->token_times[i - 1];
        if (gap > 0 && metrics_add_itl(m, gap, 1) < 0) return -1;
    }
    int good = 1;
    if (m->slo.ttft_ms > 0 && r->ttft * 1e3 > m->slo.ttft_ms) good = 0;
    if (m->slo.tpot_ms > 0 && tpot * 1e3 > m->slo.tpot_ms) good = 0;
    if (m->slo.e2e_ms > 0 && r->e2e * 1e3 > m->slo.e2e_ms) good = 0;
    m->good += good;
    return 0;
}

int metrics_add_step(metrics *m, const tr_step *s)
{
    double batch = (double)s->prefill_seqs + (double)s->decode_seqs;
    double kv = s->pages_total ? (double)s->pages_used / (double)s->pages_total : 0;
    m->steps++;
    m->sum_batch += batch;
    if (batch > m->max_batch) m->max_batch = batch;
    m->sum_tokens += (double)s->prefill_tokens + (double)s->decode_tokens;
    m->sum_kv += kv;
    if (kv > m->max_kv) m->max_kv = kv;
    m->sum_waiting += s->waiting;
    if (s->waiting > m->max_waiting) m->max_waiting = s->waiting;
    m->busy += s->duration;
    m->step_retractions += s->retractions;
    m->step_spec_proposed += s->spec_proposed;
    m->step_spec_accepted += s->spec_accepted;
    if (s->spec_proposed) m->spec_verifies += s->decode_seqs;
    m->load_back += s->hicache_load_tokens;
    m->write_back += s->hicache_writeback_tokens;
    m->backup += s->hicache_backup_tokens;
    return 0;
}

void metrics_set_truncated(metrics *m)
{
    m->truncated = 1;
}

static int cmp_wsample(const void *a, const void *b)
{
    double x = ((const metrics_wsample *)a)->value, y = ((const metrics_wsample *)b)->value;
    return (x > y) - (x < y);
}

/* The value at 0-based index k of the expanded, sorted sample. `cum` walks
 * forward only, so successive calls with growing k are linear overall. */
static double wsample_at(const metrics_wsample *x, size_t n, uint64_t k, size_t *pos, uint64_t *cum)
{
    while (*pos < n && *cum + x[*pos].count <= k) {
        *cum += x[*pos].count;
        (*pos)++;
    }
    return x[*pos < n ? *pos : n - 1].value;
}

static double wpercentile(const metrics_wsample *x, size_t n, uint64_t total, double q)
{
    double p = q / 100.0 * (double)(total - 1);
    uint64_t lo = (uint64_t)floor(p);
    size_t pos = 0;
    uint64_t cum = 0;
    double a = wsample_at(x, n, lo, &pos, &cum);
    if (lo + 1 >= total) return a;
    double b = wsample_at(x, n, lo + 1, &pos, &cum);
    return a + (b - a) * (p - (double)lo);
}

/* Sorts runs by value: a radix sort on the order-preserving keys for the
 * millions of runs of a long simulation, qsort for short lists. */
static void sort_wsamples(metrics_wsample *x, size_t n)
{
    if (n < 4096) {
        qsort(x, n, sizeof *x, cmp_wsample);
        return;
    }
    typedef struct { unsigned long long key; uint64_t count; } kc;
    kc *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    size_t *cnt = malloc(65536 * sizeof *cnt);
    if (!a || !b || !cnt) {
        free(a);
        free(b);
        free(cnt);
        qsort(x, n, sizeof *x, cmp_wsample);
        return;
    }
    for (size_t i = 0; i < n; i++) a[i] = (kc){rh_double_key(x[i].value), x[i].count};
    for (int shift = 0; shift < 64; shift += 16) {
        memset(cnt, 0, 65536 * sizeof *cnt);
        for (size_t i = 0; i < n; i++) cnt[(a[i].key >> shift) & 0xffff]++;
        size_t sum = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t c = cnt[d];
            cnt[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) b[cnt[(a[i].key >> shift) & 0xffff]++] = a[i];
        kc *t = a;
        a = b;
        b = t;
    }
    for (size_t i = 0; i < n; i++) {
        union { unsigned long long u; double d; } v;
        v.u = (a[i].key >> 63) ? (a[i].key & 0x7fffffffffffffffull) : ~a[i].key;
        x[i] = (metrics_wsample){v.d, a[i].count};
    }
    free(a);
    free(b);
    free(cnt);
}

void metrics_wsummarize(metrics_wsample *x, size_t n, rh_summary *s)
{
    memset(s, 0, sizeof *s);
    uint64_t total = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        total += x[i].count;
        sum += x[i].value * (double)x[i].count;
    }
    if (total == 0) return;
    sort_wsamples(x, n);
    double mean = sum / (double)total, var = 0;
    for (size_t i = 0; i < n; i++) var += (x[i].value - mean) * (x[i].value - mean) * (double)x[i].count;
    s->n = (size_t)total;
    s->mean = mean;
    s->std = sqrt(var / (double)total);
    size_t first = 0;
    while (x[first].count == 0) first++;
    size_t last = n - 1;
    while (x[last].count == 0) last--;
    s->min = x[first].value;
    s->max = x[last].value;
    s->median = wpercentile(x, n, total, 50);
    s->p90 = wpercentile(x, n, total, 90);
    s->p99 = wpercentile(x, n, total, 99);
}

static void to_ms(rh_summary *s)
{
    s->mean *= 1e3;
    s->std *= 1e3;
    s->min *= 1e3;
    s->median *= 1e3;
    s->p90 *= 1e3;
    s->p99 *= 1e3;
    s->max *= 1e3;
}

static void summarize_copy(const rh_dvec *v, rh_summary *s)
{
    double *tmp = v->n ? malloc(v->n * sizeof *tmp) : NULL;
    if (v->n && !tmp) {
        memset(s, 0, sizeof *s);
        return;
    }
    if (v->n) memcpy(tmp, v->v, v->n * sizeof *tmp);
    rh_summarize(tmp, v->n, s);
    free(tmp);
    to_ms(s);
}

int metrics_summarize(metrics *m, metrics_summary *o)
{
    memset(o, 0, sizeof *o);
    o->completed = m->completed;
    o->failed = m->failed;
    o->duration = m->any_request ? m->last_done - m->first_arrival : 0;
    o->total_input_tokens = m->in_tokens;
    o->total_output_tokens = m->out_tokens;
    if (o->duration > 0) {
        o->request_throughput = (double)m->completed / o->duration;
        o->input_throughput = (double)m->in_tokens / o->duration;
        o->output_throughput = (double)m->out_tokens / o->duration;
        o->total_token_throughput = (double)(m->in_tokens + m->out_tokens) / o->duration;
        o->request_goodput = (double)m->good / o->duration;
    }
    o->good_requests = m->good;
    summarize_copy(&m->ttft, &o->ttft_ms);
    summarize_copy(&m->tpot, &o->tpot_ms);
    summarize_copy(&m->e2e, &o->e2el_ms);
    metrics_wsummarize(m->itl, m->n_itl, &o->itl_ms);
    to_ms(&o->itl_ms);
    o->cached_tokens = m->cached_tokens;
    o->cache_hit_rate = m->in_tokens ? (double)m->cached_tokens / (double)m->in_tokens : 0;
    o->cached_host = m->cached_host;
    o->cache_hit_rate_host = m->in_tokens ? (double)m->cached_host / (double)m->in_tokens : 0;
    o->cached_storage = m->cached_storage;
    o->cache_hit_rate_storage = m->in_tokens ? (double)m->cached_storage / (double)m->in_tokens : 0;
    o->load_back_tokens = m->load_back;
    o->write_back_tokens = m->write_back;
    o->backup_tokens = m->backup;
    o->host_tier = m->cached_host || m->load_back || m->write_back || m->backup;
    /* Steps see every retraction and verify; requests are the fallback for
     * traces recorded by a client, which has no step records. */
    o->retractions = m->steps ? m->step_retractions : m->req_retractions;
    o->spec_proposed = m->steps ? m->step_spec_proposed : m->req_spec_proposed;
    o->spec_accepted = m->steps ? m->step_spec_accepted : m->req_spec_accepted;
    o->spec_accept_rate = o->spec_proposed ? (double)o->spec_accepted / (double)o->spec_proposed : 0;
    o->mean_accepted_len = m->spec_verifies ? 1.0 + (double)m->step_spec_accepted / (double)m->spec_verifies : 0;
    o->steps = m->steps;
    if (m->steps) {
        double n = (double)m->steps;
        o->mean_batch_size = m->sum_batch / n;
        o->mean_tokens_per_step = m->sum_tokens / n;
        o->mean_kv_use = m->sum_kv / n;
        o->mean_waiting = m->sum_waiting / n;
    }
    o->max_batch_size = m->max_batch;
    o->max_kv_use = m->max_kv;
    o->max_waiting = m->max_waiting;
    o->busy_time = m->busy;
    o->truncated = m->truncated;
    return 0;
}

static void put_summary(json_t *o, const char *name, const rh_summary *s)
{
    char key[64];
    static const char *stat[] = {"mean", "median", "std", "p90", "p99", "max"};
    const double val[] = {s->mean, s->median, s->std, s->p90, s->p99, s->max};
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof key, "%s_%s_ms", stat[i], name);
        json_object_set_new(o, key, json_real(val[i]));
    }
}

void *metrics_to_json(const metrics_summary *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "completed", json_integer((json_int_t)s->completed));
    json_object_set_new(o, "failed", json_integer((json_int_t)s->failed));
    json_object_set_new(o, "failed_reasons", json_pack("{sI sI}", "context_length", (json_int_t)s->failed_context_length,
                                                       "kv_pool", (json_int_t)s->failed_kv_pool));
    json_object_set_new(o, "duration", json_real(s->duration));
    json_object_set_new(o, "total_input_tokens", json_integer((json_int_t)s->total_input_tokens));
    json_object_set_new(o, "total_output_tokens", json_integer((json_int_t)s->total_output_tokens));
    json_object_set_new(o, "request_throughput", json_real(s->request_throughput));
    json_object_set_new(o, "request_goodput", json_real(s->request_goodput));
    json_object_set_new(o, "input_throughput", json_real(s->input_throughput));
    json_object_set_new(o, "output_throughput", json_real(s->output_throughput));
    json_object_set_new(o, "total_token_throughput", json_real(s->total_token_throughput));
    put_summary(o, "ttft", &s->ttft_ms);
    put_summary(o, "tpot", &s->tpot_ms);
    put_summary(o, "itl", &s->itl_ms);
    put_summary(o, "e2el", &s->e2el_ms);
    json_object_set_new(o, "good_requests", json_integer((json_int_t)s->good_requests));
    json_object_set_new(o, "cache_hit_rate", json_real(s->cache_hit_rate));
    json_object_set_new(o, "cached_tokens", json_integer((json_int_t)s->cached_tokens));
    if (s->host_tier) {
        /* per tier, as SGLang's sglang:cached_tokens_total{cache_source} */
        json_object_set_new(o, "cached_tokens_device", json_integer((json_int_t)(s->cached_tokens - s->cached_host)));
        json_object_set_new(o, "cached_tokens_host", json_integer((json_int_t)(s->cached_host - s->cached_storage)));
        json_object_set_new(o, "cached_tokens_storage", json_integer((json_int_t)s->cached_storage));
        json_object_set_new(o, "cache_hit_rate_device", json_real(s->cache_hit_rate - s->cache_hit_rate_host));
        json_object_set_new(o, "cache_hit_rate_host", json_real(s->cache_hit_rate_host - s->cache_hit_rate_storage));
        json_object_set_new(o, "cache_hit_rate_storage", json_real(s->cache_hit_rate_storage));
        json_object_set_new(o, "load_back_tokens", json_integer((json_int_t)s->load_back_tokens));
        json_object_set_new(o, "write_back_tokens", json_integer((json_int_t)s->write_back_tokens));
        json_object_set_new(o, "backup_tokens", json_integer((json_int_t)s->backup_tokens));
    }
    json_object_set_new(o, "retractions", json_integer((json_int_t)s->retractions));
    json_object_set_new(o, "policy_errors", json_integer((json_int_t)s->policy_errors));
    if (s->policy_trips) json_object_set_new(o, "policy_breaker_trips", json_integer((json_int_t)s->policy_trips));
    json_object_set_new(o, "spec_proposed_tokens", json_integer((json_int_t)s->spec_proposed));
    json_object_set_new(o, "spec_accepted_tokens", json_integer((json_int_t)s->spec_accepted));
    json_object_set_new(o, "spec_accept_rate", json_real(s->spec_accept_rate));
    json_object_set_new(o, "mean_accepted_length", json_real(s->mean_accepted_len));
    json_object_set_new(o, "steps", json_integer((json_int_t)s->steps));
    json_object_set_new(o, "mean_batch_size", json_real(s->mean_batch_size));
    json_object_set_new(o, "max_batch_size", json_real(s->max_batch_size));
    json_object_set_new(o, "mean_tokens_per_step", json_real(s->mean_tokens_per_step));
    json_object_set_new(o, "mean_kv_use", json_real(s->mean_kv_use));
    json_object_set_new(o, "max_kv_use", json_real(s->max_kv_use));
    json_object_set_new(o, "mean_waiting", json_real(s->mean_waiting));
    json_object_set_new(o, "max_waiting", json_real(s->max_waiting));
    json_object_set_new(o, "busy_time", json_real(s->busy_time));
    json_object_set_new(o, "truncated", json_boolean(s->truncated));
    return o;
}

/* A title centred in a 50-column rule of `fill`, as vLLM's summary draws it. */
static void print_rule(FILE *f, const char *title, char fill)
{
    int w = 50, n = (int)strlen(title);
    int left = n >= w ? 0 : (w - n) / 2, right = n >= w ? 0 : w - n - left;
    for (int i = 0; i < left; i++) fputc(fill, f);
    fputs(title, f);
    for (int i = 0; i < right; i++) fputc(fill, f);
    fputc('\n', f);
}

void metrics_print(FILE *f, const metrics_summary *s, const char *title)
{
    char head[128];
    snprintf(head, sizeof head, " %s ", title ? title : "Serving Benchmark Result");
    print_rule(f, head, '=');
    fprintf(f, "%-40s %12llu\n", "Successful requests:", (unsigned long long)s->completed);
    if (s->failed) fprintf(f, "%-40s %12llu\n", "Failed or aborted requests:", (unsigned long long)s->failed);
    if (s->failed_context_length)
        fprintf(f, "%-40s %12llu\n", "  longer than the context length:", (unsigned long long)s->failed_context_length);
    if (s->failed_kv_pool)
        fprintf(f, "%-40s %12llu\n", "  larger than the whole KV pool:", (unsigned long long)s->failed_kv_pool);
    fprintf(f, "%-40s %12.2f\n", "Duration (s):", s->duration);
    fprintf(f, "%-40s %12llu\n", "Total input tokens:", (unsigned long long)s->total_input_tokens);
    fprintf(f, "%-40s %12llu\n", "Total generated tokens:", (unsigned long long)s->total_output_tokens);
    fprintf(f, "%-40s %12.2f\n", "Request throughput (req/s):", s->request_throughput);
    if (s->request_goodput != s->request_throughput || s->good_requests != s->completed)
        fprintf(f, "%-40s %12.2f\n", "Request goodput (req/s):", s->request_goodput);
    fprintf(f, "%-40s %12.2f\n", "Output token throughput (tok/s):", s->output_throughput);
    fprintf(f, "%-40s %12.2f\n", "Total token throughput (tok/s):", s->total_token_throughput);
    struct { const char *head, *abbr; const rh_summary *v; } blocks[] = {
        {"Time to First Token", "TTFT", &s->ttft_ms},
        {"Time per Output Token (excl. 1st token)", "TPOT", &s->tpot_ms},
        {"Inter-token Latency", "ITL", &s->itl_ms},
        {"End-to-end Latency", "E2EL", &s->e2el_ms},
    };
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        const rh_summary *v = blocks[i].v;
        print_rule(f, blocks[i].head, '-');
        char lab[64];
        snprintf(lab, sizeof lab, "Mean %s (ms):", blocks[i].abbr);
        fprintf(f, "%-40s %12.2f\n", lab, v->mean);
        snprintf(lab, sizeof lab, "Median %s (ms):", blocks[i].abbr);
        fprintf(f, "%-40s %12.2f\n", lab, v->median);
        snprintf(lab, sizeof lab, "P90 %s (ms):", blocks[i].abbr);
        fprintf(f, "%-40s %12.2f\n", lab, v->p90);
        snprintf(lab, sizeof lab, "P99 %s (ms):", blocks[i].abbr);
        fprintf(f, "%-40s %12.2f\n", lab, v->p99);
        snprintf(lab, sizeof lab, "Max %s (ms):", blocks[i].abbr);
        fprintf(f, "%-40s %12.2f\n", lab, v->max);
    }
    print_rule(f, "", '-');
    fprintf(f, "%-40s %12.2f%%\n", "Prefix cache hit rate:", 100 * s->cache_hit_rate);
    if (s->host_tier) {
        fprintf(f, "%-40s %12.2f%%\n", "  of which from the GPU:", 100 * (s->cache_hit_rate - s->cache_hit_rate_host));
        fprintf(f, "%-40s %12.2f%%\n", "  of which from host memory:", 100 * (s->cache_hit_rate_host - s->cache_hit_rate_storage));
        if (s->cached_storage)
            fprintf(f, "%-40s %12.2f%%\n", "  of which from storage:", 100 * s->cache_hit_rate_storage);
    }
    fprintf(f, "%-40s %12llu\n", "Retractions:", (unsigned long long)s->retractions);
    if (s->policy_errors)
        fprintf(f, "%-40s %12llu\n", "Policy errors (fell back to fcfs):", (unsigned long long)s->policy_errors);
    if (s->policy_trips)
        fprintf(f, "%-40s %12llu\n", "Policy breaker trips:", (unsigned long long)s->policy_trips);
    if (s->spec_proposed) {
        fprintf(f, "%-40s %12.2f%%\n", "Speculative acceptance:", 100 * s->spec_accept_rate);
        fprintf(f, "%-40s %12.2f\n", "Mean accepted length:", s->mean_accepted_len);
    }
    if (s->steps) {
        fprintf(f, "%-40s %12llu\n", "Steps:", (unsigned long long)s->steps);
        fprintf(f, "%-40s %12.1f / %.0f\n", "Batch size (mean / max):", s->mean_batch_size, s->max_batch_size);
        fprintf(f, "%-40s %12.1f\n", "Tokens per step (mean):", s->mean_tokens_per_step);
        fprintf(f, "%-40s %11.1f%% / %.1f%%\n", "KV cache use (mean / max):", 100 * s->mean_kv_use, 100 * s->max_kv_use);
        fprintf(f, "%-40s %12.1f / %.0f\n", "Waiting requests (mean / max):", s->mean_waiting, s->max_waiting);
    }
    if (s->truncated) fprintf(f, "%-40s %12s\n", "Trace:", "cut short");
    print_rule(f, "", '=');
}
