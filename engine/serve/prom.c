/* prom.c — see prom.h. Histograms keep per-bucket counts and render them
 * cumulatively, as the text format wants. Bucket bounds start below vLLM's
 * (a CPU engine serving a small model answers in milliseconds) and reach
 * as far. */
#include "engine/serve/prom.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const double ttft_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                     1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560};
static const double itl_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15,
                                    0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80};
static const double e2e_bounds[] = {0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30,
                                    40, 50, 60, 120, 240, 480, 960, 1920, 7680};
static const double per_token_bounds[] = {1e-5, 2e-5, 5e-5, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01,
                                          0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5};
static const double token_bounds[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                                      100000, 200000, 500000, 1000000};
#define NB(a) (sizeof a / sizeof a[0])
#define GEN_WINDOW 40   /* steps gen_throughput looks back over: SGLang's decode_log_interval */

typedef struct hist {
    const char *name, *help;
    const double *bounds;
    uint32_t n;
    uint64_t counts[32];        /* per bucket, the last one +Inf */
    uint64_t count;
    double sum;
} hist;

enum {
    H_TTFT, H_ITL, H_TPOT, H_E2E, H_QUEUE,
    H_PROMPT, H_GEN, H_PREFILL, H_DECODE, H_INFERENCE, H_ITER,
    H_PREFILL_PER_TOKEN, H_MAX_GEN, H_PARAMS_N, H_PARAMS_MAX,
    N_HIST
};

/* SGLang's names for the same measurements. */
static const struct {
    int h;
    const char *name;
} SGLANG_HIST[] = {{H_TTFT, "sglang:time_to_first_token_seconds"},
                   {H_ITL, "sglang:inter_token_latency_seconds"},
                   {H_E2E, "sglang:e2e_request_latency_seconds"},
                   {H_QUEUE, "sglang:queue_time_seconds"}};

struct prom {
    pthread_mutex_t mu;
    char *model;                /* escaped for a label value */
    hist h[N_HIST];
    uint64_t prompt_tokens, generation_tokens;
    uint64_t success[5];        /* by enum tr_finish */
    uint64_t steps, hidden_steps, preemptions;
    double sched_seconds;
    core_stats core;
    prom_spec_counters spec;
    uint64_t requests, cached_tokens;
    uint32_t block_size;        /* prom_cache_config; 0: not said */
    uint64_t blocks;
    bool prefix_caching;
    uint32_t max_running;       /* prom_max_running; 0: not said */
    uint64_t decode_sum_seq_lens;   /* the last decode step's */
    uint32_t retracted[GEN_WINDOW]; /* the last steps' retractions, a ring */
    uint32_t retract_at;
    struct {
        double start, end;
        uint32_t tokens;
    } gen[GEN_WINDOW];          /* the last steps' decode output, a ring */
    uint32_t gen_n, gen_at;
    /* prom_lora: escaped names and counts */
    uint32_t max_lora, n_lora;
    char **lora_names;
    uint32_t *lora_running, *lora_waiting;
    uint64_t *lora_total;
};

static void hist_init(hist *h, const char *name, const char *help, const double *b, uint32_t n)
{
    h->name = name;
    h->help = help;
    h->bounds = b;
    h->n = n;
}

static void observe(hist *h, double v, uint64_t times)
{
    uint32_t i = 0;
    while (i < h->n && v > h->bounds[i]) i++;
    h->counts[i] += times;
    h->count += times;
    h->sum += v * (double)times;
}

/* A label value with \, " and newlines escaped. */
static char *escape(const char *s)
{
    size_t n = strlen(s);
    char *o = malloc(2 * n + 1), *p = o;
    if (!o) return NULL;
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') *p++ = '\\';
        if (*s == '\n') {
            *p++ = '\\';
            *p++ = 'n';
            continue;
        }
        *p++ = *s;
    }
    *p = '\0';
    return o;
}

prom *prom_new(const char *model_name)
{
    prom *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    if (!(p->model = escape(model_name ? model_name : ""))) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    hist_init(&p->h[H_TTFT], "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              ttft_bounds, NB(ttft_bounds));
    hist_init(&p->h[H_ITL], "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              itl_bounds, NB(itl_bounds));
    hist_init(&p->h[H_TPOT], "vllm:time_per_output_token_seconds",
              "Histogram of time per output token in seconds (per request).", itl_bounds, NB(itl_bounds));
    hist_init(&p->h[H_E2E], "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
              e2e_bounds, NB(e2e_bounds));
    hist_init(&p->h[H_QUEUE], "vllm:request_queue_time_seconds",
              "Histogram of time spent waiting in the queue before the first schedule, in seconds.", ttft_bounds,
              NB(ttft_bounds));
    hist_init(&p->h[H_PROMPT], "vllm:request_prompt_tokens", "Number of prefill tokens processed, per request.",
              token_bounds, NB(token_bounds));
    hist_init(&p->h[H_GEN], "vllm:request_generation_tokens", "Number of generation tokens processed, per request.",
              token_bounds, NB(token_bounds));
    hist_init(&p->h[H_PREFILL], "vllm:request_prefill_time_seconds",
              "Histogram of time spent in the prefill phase (first scheduled to first token), in seconds.", e2e_bounds,
              NB(e2e_bounds));
    hist_init(&p->h[H_DECODE], "vllm:request_decode_time_seconds",
              "Histogram of time spent in the decode phase (first token to last), in seconds.", e2e_bounds,
              NB(e2e_bounds));
    hist_init(&p->h[H_INFERENCE], "vllm:request_inference_time_seconds",
              "Histogram of time spent running (first scheduled to last token), in seconds.", e2e_bounds,
              NB(e2e_bounds));
    hist_init(&p->h[H_ITER], "vllm:iteration_tokens_total", "Histogram of the tokens each step computed.",
              token_bounds, NB(token_bounds));
    hist_init(&p->h[H_PREFILL_PER_TOKEN], "vllm:time_per_prefill_token_request_seconds",
              "Time spent per token during the prefill phase (first scheduled to first token over prompt tokens), "
              "in seconds.", per_token_bounds, NB(per_token_bounds));
    hist_init(&p->h[H_MAX_GEN], "vllm:request_max_num_generation_tokens",
              "Histogram of the most generation tokens of one sequence of a request (its n choices).", token_bounds,
              NB(token_bounds));
    hist_init(&p->h[H_PARAMS_N], "vllm:request_params_n", "Histogram of the n request parameter.", token_bounds,
              NB(token_bounds));
    hist_init(&p->h[H_PARAMS_MAX], "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
              token_bounds, NB(token_bounds));
    return p;
}

static void lora_clear(prom *p)
{
    for (uint32_t i = 0; i < p->n_lora; i++) free(p->lora_names[i]);
    free(p->lora_names);
    free(p->lora_running);
    free(p->lora_waiting);
    free(p->lora_total);
    p->lora_names = NULL;
    p->lora_running = p->lora_waiting = NULL;
    p->lora_total = NULL;
    p->n_lora = 0;
}

void prom_lora(prom *p, uint32_t max_lora, const char *const *names, const uint32_t *running, const uint32_t *waiting,
               const uint64_t *total, uint32_t n)
{
    char **nm = n ? calloc(n, sizeof *nm) : NULL;
    uint32_t *r = n ? malloc(n * sizeof *r) : NULL, *w = n ? malloc(n * sizeof *w) : NULL;
    uint64_t *t = n ? malloc(n * sizeof *t) : NULL;
    bool ok = !n || (nm && r && w && t);
    for (uint32_t i = 0; ok && i < n; i++) {
        ok = (nm[i] = escape(names[i])) != NULL;
        if (ok) r[i] = running[i], w[i] = waiting[i], t[i] = total[i];
    }
    pthread_mutex_lock(&p->mu);
    if (ok) {   /* out of memory: the last counts stay */
        lora_clear(p);
        p->lora_names = nm;
        p->lora_running = r;
        p->lora_waiting = w;
        p->lora_total = t;
        p->n_lora = n;
        p->max_lora = max_lora;
    }
    pthread_mutex_unlock(&p->mu);
    if (!ok) {
        for (uint32_t i = 0; nm && i < n; i++) free(nm[i]);
        free(nm), free(r), free(w), free(t);
    }
}

void prom_free(prom *p)
{
    if (!p) return;
    lora_clear(p);
    pthread_mutex_destroy(&p->mu);
    free(p->model);
    free(p);
}

void prom_request_done(prom *p, const prom_request *r)
{
    pthread_mutex_lock(&p->mu);
    if (r->finish >= 0 && r->finish < 5) p->success[r->finish]++;
    p->prompt_tokens += r->prompt_tokens;
    p->generation_tokens += r->n_tokens;
    p->requests++;
    observe(&p->h[H_QUEUE], r->admitted - r->arrival, 1);
    observe(&p->h[H_PROMPT], r->prompt_tokens, 1);
    observe(&p->h[H_GEN], r->n_tokens, 1);
    if (r->n_tokens) {
        const double *t = r->token_times;
        double ttft = t[0] - r->arrival, e2e = t[r->n_tokens - 1] - r->arrival;
        observe(&p->h[H_TTFT], ttft, 1);
        observe(&p->h[H_E2E], e2e, 1);
        observe(&p->h[H_PREFILL], t[0] - r->admitted, 1);
        if (r->prompt_tokens) observe(&p->h[H_PREFILL_PER_TOKEN], (t[0] - r->admitted) / r->prompt_tokens, 1);
        observe(&p->h[H_DECODE], t[r->n_tokens - 1] - t[0], 1);
        observe(&p->h[H_INFERENCE], t[r->n_tokens - 1] - r->admitted, 1);
        if (r->n_tokens > 1) observe(&p->h[H_TPOT], (e2e - ttft) / (r->n_tokens - 1), 1);
        /* Tokens committed together (speculative accepts) arrive together:
         * one delivery, as a streaming client sees them. */
        for (uint32_t i = 1; i < r->n_tokens; i++)
            if (t[i] != t[i - 1]) observe(&p->h[H_ITL], t[i] - t[i - 1], 1);
    }
    pthread_mutex_unlock(&p->mu);
}

void prom_request_params(prom *p, uint32_t n, uint32_t max_tokens, uint32_t max_generation_tokens)
{
    pthread_mutex_lock(&p->mu);
    observe(&p->h[H_PARAMS_N], n, 1);
    observe(&p->h[H_PARAMS_MAX], max_tokens, 1);
    observe(&p->h[H_MAX_GEN], max_generation_tokens, 1);
    pthread_mutex_unlock(&p->mu);
}

void prom_step(prom *p, const tr_step *s)
{
    pthread_mutex_lock(&p->mu);
    p->steps++;
    p->retracted[p->retract_at] = s->retractions;
    p->retract_at = (p->retract_at + 1) % GEN_WINDOW;
    p->hidden_steps += (s->flags & TR_STEP_SCHED_HIDDEN) != 0;
    p->sched_seconds += s->sched_time;
    p->preemptions += s->retractions;
    observe(&p->h[H_ITER], s->prefill_tokens + s->decode_tokens, 1);
    if (s->decode_seqs) {
        p->decode_sum_seq_lens = s->decode_context + s->decode_seqs;   /* each one's context and the token it adds */
        p->gen[p->gen_at].start = s->start;
        p->gen[p->gen_at].end = s->start + s->duration;
        p->gen[p->gen_at].tokens = s->decode_seqs + s->spec_accepted;
        p->gen_at = (p->gen_at + 1) % GEN_WINDOW;
        if (p->gen_n < GEN_WINDOW) p->gen_n++;
    }
    pthread_mutex_unlock(&p->mu);
}

void prom_cache_config(prom *p, uint32_t block_size, uint64_t blocks, bool prefix_caching)
{
    pthread_mutex_lock(&p->mu);
    p->block_size = block_size;
    p->blocks = blocks;
    p->prefix_caching = prefix_caching;
    pthread_mutex_unlock(&p->mu);
}

/* Output tokens per second over the last decode steps, as SGLang's decode
 * log line reports it: their tokens over the span from the first's start
 * to the last's end. */
static double gen_throughput(const prom *p)
{
    if (!p->gen_n) return 0;
    uint32_t first = p->gen_n < GEN_WINDOW ? 0 : p->gen_at, last = (p->gen_at + GEN_WINDOW - 1) % GEN_WINDOW;
    uint64_t tokens = 0;
    for (uint32_t i = 0; i < p->gen_n; i++) tokens += p->gen[i].tokens;
    double span = p->gen[last].end - p->gen[first].start;
    return span > 0 ? (double)tokens / span : 0;
}

void prom_max_running(prom *p, uint32_t max_running)
{
    pthread_mutex_lock(&p->mu);
    p->max_running = max_running;
    pthread_mutex_unlock(&p->mu);
}

void prom_core(prom *p, const core_stats *st)
{
    pthread_mutex_lock(&p->mu);
    p->core = *st;
    pthread_mutex_unlock(&p->mu);
}

void prom_spec_add(prom *p, const prom_spec_counters *d)
{
    pthread_mutex_lock(&p->mu);
    p->spec.drafts += d->drafts;
    p->spec.draft_tokens += d->draft_tokens;
    p->spec.accepted_tokens += d->accepted_tokens;
    for (int i = 0; i < PROM_SPEC_POSITIONS; i++) p->spec.accepted_at[i] += d->accepted_at[i];
    pthread_mutex_unlock(&p->mu);
}

/* ---- rendering ---- */
typedef struct out {
    char *p;
    size_t n, cap;
    int oom;
} out;

static void printf_out(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void printf_out(out *o, const char *fmt, ...)
{
    if (o->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->p ? o->p + o->n : NULL, o->p ? o->cap - o->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            o->oom = 1;
            return;
        }
        if (o->p && o->n + (size_t)k < o->cap) {
            o->n += (size_t)k;
            return;
        }
        size_t cap = o->cap ? o->cap * 2 : 8192;
        while (cap < o->n + (size_t)k + 1) cap *= 2;
        char *q = realloc(o->p, cap);
        if (!q) {
            o->oom = 1;
            return;
        }
        o->p = q;
        o->cap = cap;
    }
}

static void family(out *o, const char *name, const char *type, const char *help)
{
    printf_out(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* vLLM's samples also carry engine="0" (its v1 engine index: one engine
 * here), so a dashboard that filters or groups by it finds them. */
static const char *engine_label(const char *name)
{
    return strncmp(name, "vllm:", 5) ? "" : ",engine=\"0\"";
}

static void sample_u(out *o, const prom *p, const char *name, uint64_t v)
{
    printf_out(o, "%s{model_name=\"%s\"%s} %llu\n", name, p->model, engine_label(name), (unsigned long long)v);
}

static void sample_d(out *o, const prom *p, const char *name, double v)
{
    printf_out(o, "%s{model_name=\"%s\"%s} %.17g\n", name, p->model, engine_label(name), v);
}

static void counter(out *o, const prom *p, const char *name, const char *help, uint64_t v)
{
    family(o, name, "counter", help);
    sample_u(o, p, name, v);
}

static void gauge(out *o, const prom *p, const char *name, const char *help, double v)
{
    family(o, name, "gauge", help);
    sample_d(o, p, name, v);
}

static void render_hist_as(out *o, const prom *p, const hist *h, const char *name)
{
    family(o, name, "histogram", h->help);
    const char *eng = engine_label(name);
    uint64_t cum = 0;
    for (uint32_t i = 0; i <= h->n; i++) {
        cum += h->counts[i];
        if (i < h->n) printf_out(o, "%s_bucket{le=\"%g\",model_name=\"%s\"%s} %llu\n", name, h->bounds[i], p->model,
                                 eng, (unsigned long long)cum);
        else printf_out(o, "%s_bucket{le=\"+Inf\",model_name=\"%s\"%s} %llu\n", name, p->model, eng,
                        (unsigned long long)cum);
    }
    printf_out(o, "%s_sum{model_name=\"%s\"%s} %.17g\n", name, p->model, eng, h->sum);
    printf_out(o, "%s_count{model_name=\"%s\"%s} %llu\n", name, p->model, eng, (unsigned long long)h->count);
}

static void render_hist(out *o, const prom *p, const hist *h)
{
    render_hist_as(o, p, h, h->name);
}

/* SGLang's names, next to vLLM's, so either project's dashboard reads the
 * server. */
static void render_sglang(out *o, const prom *p, double kv)
{
    const core_stats *c = &p->core;
    gauge(o, p, "sglang:num_running_reqs", "The number of running requests.", c->running);
    gauge(o, p, "sglang:num_queue_reqs", "The number of requests in the waiting queue.", c->waiting);
    gauge(o, p, "sglang:num_used_tokens", "The number of used tokens (KV pages held, in tokens).",
          (double)c->pages_used * (p->block_size ? p->block_size : 1));
    gauge(o, p, "sglang:token_usage", "The token usage (0..1).", kv);
    gauge(o, p, "sglang:cache_hit_rate", "The prefix cache hit rate.",
          c->prompt_tokens ? (double)c->cached_tokens / (double)c->prompt_tokens : 0);
    gauge(o, p, "sglang:gen_throughput", "The generation throughput (token/s) over the last decode steps.",
          gen_throughput(p));
    gauge(o, p, "sglang:spec_accept_length", "The average speculative accept length (1 without drafts).",
          p->spec.drafts ? 1 + (double)p->spec.accepted_tokens / (double)p->spec.drafts : 1);
    gauge(o, p, "sglang:spec_accept_rate",
          "The speculative acceptance rate: accepted draft tokens over draft tokens (0 without drafts).",
          p->spec.draft_tokens ? (double)p->spec.accepted_tokens / (double)p->spec.draft_tokens : 0);
    gauge(o, p, "sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
          (double)p->blocks * p->block_size);
    uint64_t retracted = 0;
    for (int i = 0; i < GEN_WINDOW; i++) retracted += p->retracted[i];
    gauge(o, p, "sglang:num_retracted_reqs", "The number of retracted requests (over the last 40 steps).",
          (double)retracted);
    counter(o, p, "sglang:num_retracted_requests_total", "Total number of retracted requests.", p->preemptions);
    gauge(o, p, "sglang:new_token_ratio",
          "The scheduler's estimate of the share of max_new_tokens a running request still needs.",
          c->new_token_ratio);
    gauge(o, p, "sglang:decode_sum_seq_lens", "The sum of all sequence lengths in the last decode batch.",
          (double)p->decode_sum_seq_lens);
    /* SGLang's definition with max running requests as the bound its
     * max_running_requests_under_SLO gives when set. */
    double util = kv / 0.9;
    if (p->max_running && (double)c->running / p->max_running > util) util = (double)c->running / p->max_running;
    gauge(o, p, "sglang:utilization", "The utilization: max(running / max running requests, token usage / 0.9).",
          util);
    counter(o, p, "sglang:prompt_tokens_total", "Number of prefill tokens processed.", p->prompt_tokens);
    counter(o, p, "sglang:generation_tokens_total", "Number of generation tokens processed.", p->generation_tokens);
    if (c->host_pages_total) {
        /* HiCache: the cached tokens by the tier they came from, as SGLang
         * labels them, and the host tier's use and traffic */
        uint64_t ps = p->block_size ? p->block_size : 1;
        family(o, "sglang:cached_tokens_total", "counter", "Number of cached prompt tokens, by the tier that held them.");
        printf_out(o, "sglang:cached_tokens_total{cache_source=\"device\",model_name=\"%s\"} %llu\n", p->model,
                   (unsigned long long)(c->cached_tokens - c->host_cached_tokens));
        printf_out(o, "sglang:cached_tokens_total{cache_source=\"host\",model_name=\"%s\"} %llu\n", p->model,
                   (unsigned long long)(c->host_cached_tokens - c->storage_cached_tokens));
        if (c->storage_cached_tokens)
            printf_out(o, "sglang:cached_tokens_total{cache_source=\"storage\",model_name=\"%s\"} %llu\n", p->model,
                       (unsigned long long)c->storage_cached_tokens);
        gauge(o, p, "sglang:hicache_host_used_tokens", "Tokens held in the host KV tier.", (double)(c->host_pages_used * ps));
        gauge(o, p, "sglang:hicache_host_total_tokens", "Tokens the host KV tier can hold.",
              (double)(c->host_pages_total * ps));
        counter(o, p, "sglang:evicted_tokens_total", "Tokens evicted from the GPU's KV pool (demoted or dropped).",
                c->evicted_pages * ps);
        counter(o, p, "sglang:load_back_tokens_total", "Tokens loaded back from the host tier to the GPU.",
                c->load_back_tokens);
        counter(o, p, "rehearse:hicache_backup_tokens_total", "Tokens copied GPU to host in the background.",
                c->backup_pages * ps);
        counter(o, p, "rehearse:hicache_write_back_tokens_total",
                "Tokens copied GPU to host while an eviction waited (write_back).", c->writeback_pages * ps);
    } else {
        counter(o, p, "sglang:cached_tokens_total", "Number of cached prompt tokens.", c->cached_tokens);
    }
    counter(o, p, "sglang:num_requests_total", "Number of requests processed.", p->requests);
    for (size_t i = 0; i < sizeof SGLANG_HIST / sizeof *SGLANG_HIST; i++)
        render_hist_as(o, p, &p->h[SGLANG_HIST[i].h], SGLANG_HIST[i].name);
}

/* The adapter names with a count above zero, comma-joined (vLLM's labels). */
static void lora_label(out *o, const prom *p, const uint32_t *count)
{
    bool first = true;
    for (uint32_t i = 0; i < p->n_lora; i++)
        if (count[i]) {
            printf_out(o, "%s%s", first ? "" : ",", p->lora_names[i]);
            first = false;
        }
}

static void render_lora(out *o, const prom *p)
{
    if (!p->max_lora) return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    family(o, "vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
    printf_out(o, "vllm:lora_requests_info{max_lora=\"%u\",running_lora_adapters=\"", p->max_lora);
    lora_label(o, p, p->lora_running);
    printf_out(o, "\",waiting_lora_adapters=\"");
    lora_label(o, p, p->lora_waiting);
    printf_out(o, "\"} %.6f\n", (double)now.tv_sec + now.tv_nsec * 1e-9);
    family(o, "rehearse:lora_requests_running", "gauge", "Requests running under each LoRA adapter.");
    for (uint32_t i = 0; i < p->n_lora; i++)
        printf_out(o, "rehearse:lora_requests_running{model_name=\"%s\",lora_name=\"%s\"} %u\n", p->model,
                   p->lora_names[i], p->lora_running[i]);
    family(o, "rehearse:lora_requests_waiting", "gauge", "Requests waiting under each LoRA adapter.");
    for (uint32_t i = 0; i < p->n_lora; i++)
        printf_out(o, "rehearse:lora_requests_waiting{model_name=\"%s\",lora_name=\"%s\"} %u\n", p->model,
                   p->lora_names[i], p->lora_waiting[i]);
    family(o, "rehearse:lora_requests_total", "counter", "Requests each LoRA adapter has taken.");
    for (uint32_t i = 0; i < p->n_lora; i++)
        printf_out(o, "rehearse:lora_requests_total{model_name=\"%s\",lora_name=\"%s\"} %llu\n", p->model,
                   p->lora_names[i], (unsigned long long)p->lora_total[i]);
}

char *prom_render(prom *p, size_t *len)
{
    out o = {0};
    pthread_mutex_lock(&p->mu);
    const core_stats *c = &p->core;
    double kv = c->pages_total ? (double)c->pages_used / (double)c->pages_total : 0;
    gauge(&o, p, "vllm:num_requests_running", "Number of requests in model execution batches.", c->running);
    gauge(&o, p, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", c->waiting);
    gauge(&o, p, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv);
    gauge(&o, p, "vllm:gpu_cache_usage_perc", "KV-cache usage (the older name). 1 means 100 percent usage.", kv);
    gauge(&o, p, "vllm:gpu_prefix_cache_hit_rate", "Prefix cache hit rate: cached prompt tokens over prompt tokens.",
          c->prompt_tokens ? (double)c->cached_tokens / (double)c->prompt_tokens : 0);
    counter(&o, p, "vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", c->prompt_tokens);
    counter(&o, p, "vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", c->cached_tokens);
    counter(&o, p, "vllm:num_preemptions_total", "Cumulative number of preemptions (retractions).", p->preemptions);
    counter(&o, p, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", p->prompt_tokens);
    counter(&o, p, "vllm:generation_tokens_total", "Number of generation tokens processed.", p->generation_tokens);

    family(&o, "vllm:request_success_total", "counter", "Count of finished requests by finish reason.");
    static const int reasons[] = {TR_FINISH_STOP, TR_FINISH_LENGTH, TR_FINISH_ABORT, TR_FINISH_ERROR};
    for (int i = 0; i < 4; i++)
        printf_out(&o, "vllm:request_success_total{finished_reason=\"%s\",model_name=\"%s\",engine=\"0\"} %llu\n",
                   tr_finish_name(reasons[i]), p->model, (unsigned long long)p->success[reasons[i]]);

    for (int i = 0; i < N_HIST; i++) render_hist(&o, p, &p->h[i]);
    if (p->block_size) {
        family(&o, "vllm:cache_config_info", "gauge", "Information of the KV cache configuration (the labels).");
        printf_out(&o,
                   "vllm:cache_config_info{block_size=\"%u\",cache_dtype=\"auto\",enable_prefix_caching=\"%s\","
                   "model_name=\"%s\",num_gpu_blocks=\"%llu\",engine=\"0\"} 1\n",
                   p->block_size, p->prefix_caching ? "True" : "False", p->model, (unsigned long long)p->blocks);
    }
    render_sglang(&o, p, kv);
    render_lora(&o, p);

    counter(&o, p, "vllm:spec_decode_num_drafts_total", "Verifications that carried draft tokens.", p->spec.drafts);
    counter(&o, p, "vllm:spec_decode_num_draft_tokens_total", "Draft tokens proposed.", p->spec.draft_tokens);
    counter(&o, p, "vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", p->spec.accepted_tokens);
    family(&o, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Draft tokens accepted, by position in the proposal.");
    for (int i = 0; i < PROM_SPEC_POSITIONS; i++)
        if (p->spec.accepted_at[i] || i == 0)
            printf_out(&o,
                       "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"%s\",position=\"%d\","
                       "engine=\"0\"} %llu\n",
                       p->model, i, (unsigned long long)p->spec.accepted_at[i]);

    counter(&o, p, "rehearse:steps_total", "Scheduler steps run.", p->steps);
    counter(&o, p, "rehearse:policy_errors_total",
            "Lua policy calls that failed; each of those steps fell back to fcfs.", c->policy_errors);
    counter(&o, p, "rehearse:policy_breaker_trips_total",
            "Times the Lua policy failed --policy-max-failures times in a row (or again after a back-off) and was "
            "then not called for a while.", c->policy_trips);
    counter(&o, p, "rehearse:policy_skipped_total",
            "Steps that would have called the Lua policy but did not, its breaker open (fcfs).", c->policy_skipped);
    counter(&o, p, "rehearse:steps_sched_hidden_total",
            "Steps whose preparation ran while the previous step computed (overlap scheduling).", p->hidden_steps);
    family(&o, "rehearse:step_sched_seconds_total", "counter", "CPU seconds the scheduler thread spent preparing steps.");
    sample_d(&o, p, "rehearse:step_sched_seconds_total", p->sched_seconds);
    pthread_mutex_unlock(&p->mu);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    if (len) *len = o.n;
    return o.p;
}
