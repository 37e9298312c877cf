/* probe.c — the campaign of probe.h: its plan, and running it. */
#include "client/probe.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/progress.h"
#include "util/rng.h"

#define GEN_BLOCK 16             /* prompt ids are made 16 at a time from a hash (traces/prompt.h) */

void probe_opts_default(probe_opts *o)
{
    *o = (probe_opts){.budget_s = 600, .max_context = 0, .max_concurrency = 32, .vocab = 256, .seed = 1};
}

/* The plan being built: items appended run by run. */
typedef struct builder {
    probe_plan *p;
    size_t cap_runs;
    rh_rng rng;
    size_t n_items, n_hashes;   /* used so far */
    int counting;               /* the first pass only counts */
} builder;

static probe_run *begin_run(builder *b, const char *name, uint32_t concurrency, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#include <stdarg.h>

static probe_run *begin_run(builder *b, const char *name, uint32_t concurrency, const char *fmt, ...)
{
    probe_plan *p = b->p;
    if (b->counting) {
        p->n_runs++;
        return NULL;
    }
    probe_run *r = &p->runs[p->n_runs++];
    snprintf(r->name, sizeof r->name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->what, sizeof r->what, fmt, ap);
    va_end(ap);
    r->start = b->n_items;
    r->concurrency = concurrency;
    return r;
}

static void end_run(builder *b, probe_run *r)
{
    if (r) r->n = b->n_items - r->start;
}

/* One request: `share` >= 0 reuses item share's prompt (same hashes). */
static void item(builder *b, double arrival, uint32_t in, uint32_t out, long share)
{
    uint32_t blocks = (in + GEN_BLOCK - 1) / GEN_BLOCK;
    if (b->counting) {   /* the same draws as the second pass, so the burst's lengths come out the same */
        b->n_items++;
        if (share < 0)
            for (uint32_t k = 0; k < blocks; k++) (void)rh_rng_u64(&b->rng);
        b->n_hashes += share >= 0 ? 0 : blocks;
        return;
    }
    bench_dataset *d = &b->p->d;
    bench_item *it = &d->items[b->n_items++];
    it->arrival = arrival;
    it->input_len = in;
    it->output_len = out;
    it->n_hashes = blocks;
    if (share >= 0) {
        it->hashes = d->items[share].hashes;
        return;
    }
    it->hashes = d->hash_pool + b->n_hashes;
    for (uint32_t k = 0; k < blocks; k++) d->hash_pool[b->n_hashes++] = rh_rng_u64(&b->rng);
}

static uint32_t min_u32(uint32_t a, uint32_t b)
{
    return a < b ? a : b;
}

/* Every run, appended (or counted). */
static void design(builder *b, const probe_opts *o)
{
    uint32_t ctx = o->max_context, N = o->max_concurrency;
    probe_run *r = begin_run(b, "ttft", 1, "lone prompts of 16 to %u tokens, twice each, 4 tokens out",
                             min_u32(ctx / 2, 65536));
    for (uint32_t len = 16; len <= ctx / 2 && len <= 65536; len *= 2)
        for (int k = 0; k < 2; k++) item(b, 0, len, 4, -1);
    end_run(b, r);
    for (uint32_t c = 1; c <= N; c *= 2) {
        r = begin_run(b, "batch", c, "%u requests decoding together: 64 tokens in, 64 out", c);
        for (uint32_t k = 0; k < c; k++) item(b, 0, 64, 64, -1);
        end_run(b, r);
    }
    /* As many decodes as the largest batch, long: their KV reads then weigh
     * against the weights' (the lever that tells memory bandwidth from a
     * per-step constant), and 127 gaps each make their median steady. */
    uint32_t nc = N > 4 ? N : 4;
    static const uint32_t eighths[] = {1, 2, 4, 6};
    for (size_t f = 0; f < sizeof eighths / sizeof eighths[0]; f++) {
        uint32_t len = min_u32((uint32_t)((uint64_t)ctx * eighths[f] / 8), 32768);
        if (len < 256) continue;
        r = begin_run(b, "context", nc, "%u decodes at a context of %u tokens, 128 out", nc, len);
        for (uint32_t k = 0; k < nc; k++) item(b, 0, len - 128, 128, -1);
        end_run(b, r);
    }
    uint32_t bg = N / 2 > 2 ? N / 2 : 2, longp = min_u32(ctx / 4, 16384);
    r = begin_run(b, "mixed", 0, "a %u-token prompt at 0.5 s while %u requests decode 256 tokens", longp, bg);
    for (uint32_t k = 0; k < bg; k++) item(b, 0, 64, 256, -1);
    item(b, 0.5, longp, 4, -1);
    end_run(b, r);
    uint32_t plen = min_u32(ctx / 4, 4096);
    r = begin_run(b, "prefix", 1, "a %u-token prompt, then the same prompt twice (cached)", plen);
    size_t first = b->n_items;
    item(b, 0, plen, 4, -1);
    item(b, 0, plen, 4, (long)first);
    item(b, 0, plen, 4, (long)first);
    end_run(b, r);
    uint32_t hi = min_u32(1024, ctx / 4) > 64 ? min_u32(1024, ctx / 4) : 64;
    r = begin_run(b, "burst", N, "%u clients, %u requests: 64 to %u tokens in, 16 to 128 out", N, 3 * N, hi);
    for (uint32_t k = 0; k < 3 * N; k++) {
        uint32_t in = 64 + (uint32_t)rh_rng_below(&b->rng, hi - 63), out = 16 + (uint32_t)rh_rng_below(&b->rng, 113);
        item(b, 0, in, out, -1);
    }
    end_run(b, r);
}

int probe_plan_make(const probe_opts *o, probe_plan *p, rh_err *e)
{
    memset(p, 0, sizeof *p);
    if (o->max_context < 128) return rh_fail(e, "--max-context %u: the campaign needs at least 128 tokens", o->max_context);
    if (o->max_concurrency < 1) return rh_fail(e, "--max-concurrency must be at least 1");
    if (o->vocab < 2) return rh_fail(e, "--vocab-size must be at least 2");
    builder b = {.p = p, .counting = 1};
    rh_rng_seed(&b.rng, o->seed);   /* the same draws in both passes */
    design(&b, o);
    size_t n_items = b.n_items, n_hashes = b.n_hashes, n_runs = p->n_runs;
    if (bench_dataset_new(&p->d, n_items, n_hashes, "probe", e) < 0) return -1;
    if (!(p->runs = calloc(n_runs, sizeof *p->runs))) {
        bench_dataset_free(&p->d);
        return rh_fail(e, "out of memory");
    }
    p->n_runs = 0;
    b = (builder){.p = p};
    rh_rng_seed(&b.rng, o->seed);
    design(&b, o);
    if (b.n_items != n_items || b.n_hashes != n_hashes) {   /* the two passes must agree: the arrays are sized by the first */
        probe_plan_free(p);
        return rh_fail(e, "probe: the plan's two passes disagree (%zu/%zu items, %zu/%zu hashes)", b.n_items, n_items,
                       b.n_hashes, n_hashes);
    }
    p->d.gen_block_size = GEN_BLOCK;
    p->d.trace_block_size = GEN_BLOCK;
    p->d.vocab = o->vocab;
    p->d.prompt_seed = o->seed;
    return 0;
}

void probe_plan_print(FILE *f, const probe_plan *p)
{
    fprintf(f, "probe plan: %zu runs, %zu requests\n", p->n_runs, p->d.n);
    for (size_t i = 0; i < p->n_runs; i++)
        fprintf(f, "  %2zu %-8s %s\n", i + 1, p->runs[i].name, p->runs[i].what);
}

void probe_plan_free(probe_plan *p)
{
    bench_dataset_free(&p->d);
    free(p->runs);
    memset(p, 0, sizeof *p);
}

/* Stops the run in flight at the deadline. */
typedef struct watchdog {
    double deadline;
    volatile int done;
} watchdog;

static void *watch(void *arg)
{
    watchdog *w = arg;
    while (!w->done) {
        if (rh_now() >= w->deadline) {
            bench_stop();
            break;
        }
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int probe_execute(const bench_config *c, const probe_plan *p, double budget_s, bench_result *out, size_t *skipped,
                  rh_err *e)
{
    *skipped = 0;
    double t0 = rh_now(), deadline = t0 + budget_s;
    bench_config rc = *c;
    rc.progress = 0;
    rh_progress bar;
    rh_progress_begin(&bar, "probe", p->d.n);
    size_t done = 0;
    for (size_t k = 0; k < p->n_runs; k++) {
        const probe_run *run = &p->runs[k];
        if (rh_now() >= deadline) {
            (*skipped)++;
            continue;
        }
        bench_dataset view = p->d;
        view.items = p->d.items + run->start;
        view.n = run->n;
        rc.max_concurrency = run->concurrency;
        watchdog w = {deadline, 0};
        pthread_t th;
        int watching = pthread_create(&th, NULL, watch, &w) == 0;
        bench_run_info info;
        int r = bench_run(&rc, &view, out + run->start, &info, e);
        w.done = 1;
        if (watching) pthread_join(th, NULL);
        if (r < 0) {
            rh_progress_end(&bar);
            return -1;
        }
        for (size_t i = 0; i < run->n; i++)
            if (out[run->start + i].sent) out[run->start + i].send += info.t0 - t0;
        done += run->n;
        snprintf(bar.extra, sizeof bar.extra, "%s done", run->name);
        rh_progress_update(&bar, done);
    }
    rh_progress_end(&bar);
    return 0;
}
