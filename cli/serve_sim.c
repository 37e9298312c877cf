/* serve_sim.c — `rehearse serve --backend sim --cost COST [--noise X]`:
 * the engine with each forward pass priced by a cost model (engine.h's
 * engine_pricer) instead of computed: the real server, scheduler and API
 * on the wall clock, with known physics. A step takes the cost model's
 * time for its batch times a seeded lognormal factor exp(X·z) (median 1),
 * and the KV pool is what the cost model's GPU holds (sim/pool.h) unless
 * --max-total-tokens says. */
#include "cli/serve_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/pool.h"
#include "util/progress.h"
#include "util/rng.h"

struct serve_sim {
    cost_model *cost;
    double noise;
    uint64_t rng;
    cost_seq *seqs;
    uint32_t cap;
    cost_serving serving;    /* the cost file's own, or as the flags say */
    double prev_gpu;         /* the GPU time of the step priced last */
    double prev_end;         /* when that step ends on the monotonic clock */
    engine_pricer pricer;
    char hardware[4200];
    char model[64];          /* the cost file's model, when --model was not given */
};

/* A standard normal draw (Box-Muller on the seeded stream). */
static double normal(uint64_t *s)
{
    double u = rh_splitmix_unit(s), v = rh_splitmix_unit(s);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static double price(void *ctx, const core_batch *b)
{
    serve_sim *s = ctx;
    if (b->n > s->cap) {
        cost_seq *v = realloc(s->seqs, (size_t)b->n * 2 * sizeof *v);
        if (!v) return NAN;
        s->seqs = v;
        s->cap = b->n * 2;
    }
    for (uint32_t i = 0; i < b->n; i++)
        s->seqs[i] = (cost_seq){.n_new = b->seqs[i].n_new, .context = b->seqs[i].start, .prefill = b->seqs[i].prefill};
    cost_batch cb = {.seqs = s->seqs, .n = b->n, .serving = &s->serving, .lora_adapters = b->n_adapters,
                     .lora_tokens = b->adapter_tokens, .lora_loads = b->adapter_loads,
                     .load_tokens = b->load_tokens, .writeback_tokens = b->writeback_tokens,
                     .backup_tokens = b->backup_tokens, .storage_tokens = b->storage_tokens};
    cost_batch_summarize(&cb);
    cost_parts p;
    cost_step_parts(s->cost, &cb, &p);
    if (s->noise > 0) {
        double f = exp(s->noise * normal(&s->rng));
        p.forward_s *= f;
        p.draft_s *= f;
    }
    /* the host's scheduling hides under the previous step's GPU time when
     * this step follows it directly (the server was not idle between) */
    double now = rh_now(), prev = now <= s->prev_end + 1e-3 ? s->prev_gpu : 0;
    double t = cost_parts_duration(&p, s->serving.overlap, prev);
    s->prev_gpu = p.forward_s + p.draft_s;
    s->prev_end = now + t;
    return t;
}

serve_sim *serve_sim_new(const char *cost_path, double noise, uint64_t seed, sim_config *serving, engine_config *ec,
                         rh_err *e)
{
    serve_sim *s = calloc(1, sizeof *s);
    if (!s) return rh_fail(e, "out of memory"), NULL;
    if (!(s->cost = cost_load(cost_path, e))) {
        free(s);
        return NULL;
    }
    if (cost_check_tp(s->cost, 0, e) < 0 || sim_serving_resolve(serving, s->cost, e) < 0) {
        serve_sim_free(s);
        return NULL;
    }
    s->serving = serving->serving;
    s->noise = noise;
    s->rng = rh_hash64(seed ^ 0x5e57e5ull);
    snprintf(s->hardware, sizeof s->hardware, "sim: %s%s", cost_path, noise > 0 ? " with noise" : "");
    s->pricer = (engine_pricer){.ctx = s, .price = price, .hardware = s->hardware};
    ec->pricer = &s->pricer;
    /* Without --model, the model the cost file prices (a roofline names
     * one): the server answers with its name, vocabulary and context. */
    if (!ec->model) {
        cost_memory named;
        if (!cost_memory_of(s->cost, 0, &named) || !named.model_name[0]) {
            serve_sim_free(s);
            return rh_fail(e, "serve needs --model MODEL: %s names no model", cost_path), NULL;
        }
        snprintf(s->model, sizeof s->model, "%s", named.model_name);
        ec->model = s->model;
        fprintf(stderr, "rehearse serve: --model %s, the model %s prices\n", s->model, cost_path);
    }
    /* The pool the deployment the cost model prices would hold. */
    cost_memory mem;
    core_config *k = &ec->core;
    if (!k->max_total_tokens && cost_memory_of_serving(s->cost, 0, &s->serving, &mem)) {
        sim_pool_opts o = {ec->mem_fraction > 0 && ec->mem_fraction != 0.3 ? ec->mem_fraction : 0, 0, false};
        sim_pool p;
        if (sim_pool_size(&mem, k, &o, &p, e) < 0) {
            serve_sim_free(s);
            return NULL;
        }
        k->max_total_tokens = p.tokens;
        if (!k->context_length && mem.context_length) k->context_length = mem.context_length;
        fprintf(stderr, "rehearse serve: %s\n", p.how);
    }
    return s;
}

void serve_sim_free(serve_sim *s)
{
    if (!s) return;
    cost_free(s->cost);
    free(s->seqs);
    free(s);
}
