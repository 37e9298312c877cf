/* prom.c — see prom.h. Histograms keep per-bucket counts and render them
 * cumulatively, as the text format wants. Bucket bounds start below vLLM's
 * (a CPU engine serving a small model answers in milliseconds) and reach
 * as far. */
#include "engine/serve/prom.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double ttft_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                     1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560};
static const double itl_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15,
                                    0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80};
static const double e2e_bounds[] = {0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30,
                                    40, 50, 60, 120, 240, 480, 960, 1920, 7680};
#define NB(a) (sizeof a / sizeof a[0])

typedef struct hist {
    const char *name, *help;
    const double *bounds;
    uint32_t n;
    uint64_t counts[32];        /* per bucket, the last one +Inf */
    uint64_t count;
    double sum;
} hist;

enum { H_TTFT, H_ITL, H_TPOT, H_E2E, H_QUEUE, N_HIST };

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
    return p;
}

void prom_free(prom *p)
{
    if (!p) return;
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
    observe(&p->h[H_QUEUE], r->admitted - r->arrival, 1);
    if (r->n_tokens) {
        const double *t = r->token_times;
        double ttft = t[0] - r->arrival, e2e = t[r->n_tokens - 1] - r->arrival;
        observe(&p->h[H_TTFT], ttft, 1);
        observe(&p->h[H_E2E], e2e, 1);
        if (r->n_tokens > 1) observe(&p->h[H_TPOT], (e2e - ttft) / (r->n_tokens - 1), 1);
        /* Tokens committed together (speculative accepts) arrive together:
         * one delivery, as a streaming client sees them. */
        for (uint32_t i = 1; i < r->n_tokens; i++)
            if (t[i] != t[i - 1]) observe(&p->h[H_ITL], t[i] - t[i - 1], 1);
    }
    pthread_mutex_unlock(&p->mu);
}

void prom_step(prom *p, const tr_step *s)
{
    pthread_mutex_lock(&p->mu);
    p->steps++;
    p->hidden_steps += (s->flags & TR_STEP_SCHED_HIDDEN) != 0;
    p->sched_seconds += s->sched_time;
    p->preemptions += s->retractions;
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

static void sample_u(out *o, const prom *p, const char *name, uint64_t v)
{
    printf_out(o, "%s{model_name=\"%s\"} %llu\n", name, p->model, (unsigned long long)v);
}

static void sample_d(out *o, const prom *p, const char *name, double v)
{
    printf_out(o, "%s{model_name=\"%s\"} %.17g\n", name, p->model, v);
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

static void render_hist(out *o, const prom *p, const hist *h)
{
    family(o, h->name, "histogram", h->help);
    uint64_t cum = 0;
    for (uint32_t i = 0; i <= h->n; i++) {
        cum += h->counts[i];
        if (i < h->n) printf_out(o, "%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", h->name, h->bounds[i], p->model,
                                 (unsigned long long)cum);
        else printf_out(o, "%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", h->name, p->model, (unsigned long long)cum);
    }
    printf_out(o, "%s_sum{model_name=\"%s\"} %.17g\n", h->name, p->model, h->sum);
    printf_out(o, "%s_count{model_name=\"%s\"} %llu\n", h->name, p->model, (unsigned long long)h->count);
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
        printf_out(&o, "vllm:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %llu\n",
                   tr_finish_name(reasons[i]), p->model, (unsigned long long)p->success[reasons[i]]);

    for (int i = 0; i < N_HIST; i++) render_hist(&o, p, &p->h[i]);

    counter(&o, p, "vllm:spec_decode_num_drafts_total", "Verifications that carried draft tokens.", p->spec.drafts);
    counter(&o, p, "vllm:spec_decode_num_draft_tokens_total", "Draft tokens proposed.", p->spec.draft_tokens);
    counter(&o, p, "vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", p->spec.accepted_tokens);
    family(&o, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Draft tokens accepted, by position in the proposal.");
    for (int i = 0; i < PROM_SPEC_POSITIONS; i++)
        if (p->spec.accepted_at[i] || i == 0)
            printf_out(&o, "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"%s\",position=\"%d\"} %llu\n",
                       p->model, i, (unsigned long long)p->spec.accepted_at[i]);

    counter(&o, p, "rehearse:steps_total", "Scheduler steps run.", p->steps);
    counter(&o, p, "rehearse:policy_errors_total",
            "Lua policy calls that failed; each of those steps fell back to fcfs.", c->policy_errors);
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
