/* engine.c — see engine.h. The engine's lifecycle, its requests and the
 * translation of core events into engine events; one batch is engine_step.c. */
#include "engine/engine_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/mem.h"
#include "util/progress.h"

/* Pools beyond this many tokens are never useful on a CPU (and a pool sized
 * from a machine's whole memory would make every page table walk cold). */
#define ENGINE_MAX_AUTO_POOL_TOKENS (1ull << 22)

void engine_config_default(engine_config *c)
{
    memset(c, 0, sizeof *c);
    core_config_default(&c->core);
    spec_config_default(&c->spec);
    tp_config_default(&c->tp);
    c->mem_fraction = 0.3;
}

double engine_now(const engine *g)
{
    return g->cfg.clock ? g->cfg.clock(g->cfg.clock_ctx) : rh_now() - g->t0;
}

const model_config *engine_model(const engine *g) { return &g->m->cfg; }
const core *engine_core(const engine *g) { return g->c; }
const char *engine_hardware(const engine *g) { return g->hardware; }
int64_t engine_flush_cache(engine *g)
{
    return g->in_step ? -1 : core_flush_cache(g->c);
}

bool engine_in_flight(const engine *g)
{
    return g->in_step;
}

bool engine_idle(const engine *g) { return core_idle(g->c) && g->n_pending == 0; }

/* The Lua policy's watchdog (--policy-max-seconds) on real time. */
static double guard_clock(void *ctx)
{
    (void)ctx;
    return rh_now();
}

/* The MODEL argument (model_open), noting where its weights came from. */
static model *open_model(engine *g, const engine_config *c, rh_err *e)
{
    if (!c->model || !*c->model) return rh_fail(e, "no model given (a preset name, config.json or directory)"), NULL;
    const char *w = model_weights_of(c->model, c->weights);
    if (w) snprintf(g->weights, sizeof g->weights, "%s", w);
    else snprintf(g->weights, sizeof g->weights, "dummy, seed %llu", (unsigned long long)c->weight_seed);
    return model_open(c->model, c->weights, c->weight_seed, 0, e);
}

/* "cpu: AMD EPYC 7B13", from /proc/cpuinfo; "cpu" when it cannot be read. */
static void describe_hardware(engine *g, const kern_table *K)
{
    if (K && K->name && strcmp(K->name, "cpu")) {
        snprintf(g->hardware, sizeof g->hardware, "%s", K->name);
        return;
    }
    snprintf(g->hardware, sizeof g->hardware, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t n = strcspn(v, "\n");
        int t = kern_cpu_threads();
        snprintf(g->hardware, sizeof g->hardware, "cpu: %.*s, %d thread%s", (int)n, v, t, t == 1 ? "" : "s");
        break;
    }
    fclose(f);
}

/* The pool in tokens: as given, else mem_fraction of what memory is left,
 * never more than every running request at full context could fill. */
static int size_pool(engine_config *c, const model_config *mc, rh_err *e)
{
    core_config *k = &c->core;
    if (k->max_total_tokens) {
        if (k->max_total_tokens / k->page_size > UINT32_MAX)
            return rh_fail(e, "--max-total-tokens %llu: more than %u pages of %u tokens",
                           (unsigned long long)k->max_total_tokens, UINT32_MAX, k->page_size);
        return 0;
    }
    if (!(c->mem_fraction > 0 && c->mem_fraction <= 1))
        return rh_fail(e, "--mem-fraction-static must be in (0, 1] (got %g)", c->mem_fraction);
    if (c->tp.nnodes > 1)
        return rh_fail(e, "--nnodes %u: give --max-total-tokens, so every node sizes the same KV pool", c->tp.nnodes);
    uint64_t avail = c->mem_limit ? c->mem_limit : rh_mem_available();
    uint64_t per_token = model_kv_bytes_per_token(mc);
    uint64_t tokens = (uint64_t)((double)avail * c->mem_fraction) / (per_token ? per_token : 1);
    uint64_t cap = (uint64_t)k->max_running_requests * k->context_length;
    if (cap > ENGINE_MAX_AUTO_POOL_TOKENS) cap = ENGINE_MAX_AUTO_POOL_TOKENS;
    if (tokens > cap) tokens = cap;
    tokens -= tokens % k->page_size;
    if (tokens < k->page_size) {
        char b[32];
        return rh_fail(e, "no room for a KV pool: %s of memory %s, a page of '%s' takes %llu bytes "
                          "(give --max-total-tokens)",
                       rh_fmt_bytes(avail, b, sizeof b), c->mem_limit ? "allowed" : "available", mc->name,
                       (unsigned long long)(per_token * k->page_size));
    }
    k->max_total_tokens = tokens;
    return 0;
}

/* One small forward before the first request: the kernels' thread pools and
 * the activation buffers come up now, so the first recorded step measures
 * the batch and not the start-up. Its K and V land in pages no request owns
 * yet; every request writes its positions before reading them. */
static int warm_up(engine *g, rh_err *e)
{
    const core_config *k = &g->cfg.core;
    uint32_t n_pages = k->max_total_tokens / k->page_size >= 2 ? 2 : 1;
    uint32_t n = n_pages * k->page_size;
    if (n > k->context_length) n = k->context_length;
    if (n > 64) n = 64;
    int32_t tokens[64] = {0};
    uint32_t pages[2] = {0, 1};
    runner_seq s = {tokens, n, 0, pages, n_pages, 1, NULL};
    const float *logits;
    return runner_forward(g->run, &s, 1, &logits, e);
}

/* Speculation asked for by algorithm gets SGLang's shape when the depth is
 * not given: 3 draft steps (or draft tokens - 1). Draft slots without a
 * drafter would reserve pages and record tokens no one computes. */
static int spec_defaults(engine_config *c, rh_err *e)
{
    core_config *k = &c->core;
    if (c->spec.algorithm != SPEC_NONE && !c->drafter && !k->spec_steps)
        k->spec_steps = k->spec_draft_tokens > 1 ? k->spec_draft_tokens - 1 : 3;
    if (k->spec_steps && !c->drafter && c->spec.algorithm == SPEC_NONE)
        return rh_fail(e, "--speculative-num-steps %u needs --speculative-algorithm NGRAM or DRAFT", k->spec_steps);
    return spec_config_validate(&c->spec, e);
}

/* The drafter (the caller's, or one built from cfg.spec with a draft pool
 * as large as the target's) and the per-step arrays of drafting. */
static int start_spec(engine *g, rh_err *e)
{
    const core_config *k = core_get_config(g->c);
    if (!k->spec_steps) return 0;
    g->drafter = g->cfg.drafter;
    if (!g->drafter) {
        spec_env env = {g->m, k->page_size, (uint32_t)(k->max_total_tokens / k->page_size), g->cfg.mem_limit,
                        g->cfg.kernels, g->cfg.weight_seed};
        if (!(g->spec = spec_drafter_new(&g->cfg.spec, &env, e))) return -1;
        g->drafter = spec_drafter_seam(g->spec);
    }
    uint32_t bins = k->spec_draft_tokens;          /* accepted lengths 0 .. slots */
    g->spec_stats.hist_n = bins < SPEC_HIST_BINS ? bins : SPEC_HIST_BINS;
    g->drafts = calloc(g->cap_seqs, sizeof *g->drafts);
    g->draft_of = calloc(g->cap_seqs, sizeof *g->draft_of);
    g->cand = malloc((size_t)g->m->cfg.vocab_size * sizeof *g->cand);
    if (!g->drafts || !g->draft_of || !g->cand) return rh_fail(e, "engine: out of memory");
    return 0;
}

engine *engine_new(const engine_config *cfg, rh_err *e)
{
    engine *g = calloc(1, sizeof *g);
    if (!g) return rh_fail(e, "engine: out of memory"), NULL;
    g->cfg = *cfg;
    g->t0 = rh_now();
    if (spec_defaults(&g->cfg, e) < 0 || core_config_validate(&g->cfg.core, e) < 0 ||
        tp_config_check(&cfg->tp, cfg->kernels, e) < 0)
        goto fail;
    if (cfg->tp.node_rank) {
        rh_fail(e, "--node-rank %u: only node 0 runs the scheduler; the others follow it (engine_follow)",
                cfg->tp.node_rank);
        goto fail;
    }
    if (cfg->pricer && (tp_config_active(&cfg->tp) || cfg->drafter || cfg->spec.algorithm != SPEC_NONE ||
                        cfg->core.spec_steps)) {
        rh_fail(e, "a priced forward (--backend sim) runs no tensor-parallel group and makes no drafts "
                   "(its cost model prices the parallel layout)");
        goto fail;
    }
    if (cfg->m) {
        g->m = cfg->m;
        snprintf(g->weights, sizeof g->weights, "given by the caller");
    } else if (cfg->pricer) {
        model_config mc;
        if (!cfg->model || model_config_resolve(cfg->model, &mc, e) < 0 || !(g->owned = model_new_shapes(&mc, e))) {
            if (!cfg->model) rh_fail(e, "no model given (a preset name, config.json or directory)");
            goto fail;
        }
        g->m = g->owned;
        snprintf(g->weights, sizeof g->weights, "none: forwards priced");
    } else {
        if (!(g->owned = open_model(g, cfg, e))) goto fail;
        g->m = g->owned;
    }
    g->cfg.m = g->m;
    core_config *k = &g->cfg.core;
    if (k->enable_hierarchical_cache) {
        /* The host tier's pages are copies of the runner's own pool: one
         * runner, and no drafter with a KV pool of its own to keep in step. */
        if (tp_config_active(&cfg->tp) || (cfg->spec.algorithm != SPEC_NONE && cfg->spec.algorithm != SPEC_NGRAM)) {
            rh_fail(e, "--enable-hierarchical-cache: a host KV tier is not supported with tensor parallel or a "
                       "model-drafted speculative algorithm");
            goto fail;
        }
        k->kv_bytes_per_token = (double)model_kv_bytes_per_token(&g->m->cfg);   /* what --hicache-size divides */
    }
    uint32_t ctx = g->m->cfg.max_position;
    if (!k->context_length || k->context_length > ctx) k->context_length = ctx;
    if (size_pool(&g->cfg, &g->m->cfg, e) < 0) goto fail;

    runner_config rc = {k->page_size, (uint32_t)(k->max_total_tokens / k->page_size), cfg->mem_limit, cfg->kernels};
    if (cfg->pricer) {
        snprintf(g->hardware, sizeof g->hardware, "%s", cfg->pricer->hardware ? cfg->pricer->hardware : "sim");
    } else {
        if (tp_config_active(&cfg->tp)) {
            if (!(g->tp = tp_group_start(g->m, &rc, &cfg->tp, e))) goto fail;
            g->run = tp_group_leader(g->tp);
        } else if (!(g->run = runner_new(g->m, &rc, e))) {
            goto fail;
        }
        if (warm_up(g, e) < 0) goto fail;
        describe_hardware(g, cfg->kernels ? cfg->kernels : kern_cpu());
    }

    core_hooks hooks = {.ctx = g, .on_step = engine_core_on_step, .on_event = engine_core_on_event,
                        .on_message = engine_core_on_message, .guard_clock = guard_clock};
    if (cfg->lora_paths && *cfg->lora_paths) k->enable_lora = true;   /* the base holds its slot from the start */
    if (!(g->c = core_new(k, &hooks, e))) goto fail;
    if (k->enable_hierarchical_cache && g->run) {
        core_stats st;
        core_get_stats(g->c, &st);
        if (runner_host_tier(g->run, (uint32_t)st.host_pages_total, e) < 0) goto fail;
    }
    if (engine_lora_start(g, e) < 0) goto fail;
    g->cap_seqs = k->max_running_requests + 1;
    g->seqs = calloc(g->cap_seqs, sizeof *g->seqs);
    g->results = calloc(g->cap_seqs, sizeof *g->results);
    g->counts = calloc(g->m->cfg.vocab_size, sizeof *g->counts);
    if (!g->seqs || !g->results || !g->counts) {
        rh_fail(e, "engine: out of memory");
        goto fail;
    }
    if (start_spec(g, e) < 0) goto fail;
    return g;
fail:
    engine_free(g);
    return NULL;
}

int engine_follow(const engine_config *cfg, rh_err *e)
{
    if (!cfg->tp.node_rank) return rh_fail(e, "engine_follow: node 0 runs the engine itself (engine_new)");
    if (tp_config_check(&cfg->tp, cfg->kernels, e) < 0) return -1;
    engine_config c = *cfg;
    engine g0 = {0};   /* only for open_model's note of where the weights came from */
    model *owned = NULL;
    const model *m = c.m;
    if (!m && !(m = owned = open_model(&g0, &c, e))) return -1;
    core_config *k = &c.core;
    uint32_t ctx = m->cfg.max_position;
    if (!k->context_length || k->context_length > ctx) k->context_length = ctx;
    int rc = -1;
    if (core_config_validate(k, e) < 0 || size_pool(&c, &m->cfg, e) < 0) goto done;
    runner_config run = {k->page_size, (uint32_t)(k->max_total_tokens / k->page_size), c.mem_limit, c.kernels};
    tp_group *tp = tp_group_start(m, &run, &c.tp, e);
    if (!tp) goto done;
    rc = tp_group_join(tp, e);
    tp_group_free(tp);
done:
    model_free(owned);
    return rc;
}

static void free_req(ereq *q)
{
    free(q->toks);
    free(q->stop);
    free(q->masked);
    free((void *)q->rules.bias_ids);
    free((void *)q->rules.bias);
    free(q->lp);
    free(q->lp_top);
    free(q->plp);
    free(q->plp_top);
    free(q);
}

static void unlink_req(engine *g, ereq *q)
{
    if (q->prev) q->prev->next = q->next;
    else g->live = q->next;
    if (q->next) q->next->prev = q->prev;
}

void engine_free(engine *g)
{
    if (!g) return;
    core_free(g->c);
    engine_lora_free_all(g);
    for (ereq *q = g->live, *n; q; q = n) {
        n = q->next;
        free_req(q);
    }
    if (g->tp) tp_group_free(g->tp);   /* lets the other ranks go, then frees rank 0's runner */
    else runner_free(g->run);
    spec_drafter_free(g->spec);     /* after the core: its states go with it */
    model_free(g->owned);
    free(g->seqs);
    free(g->results);
    free(g->pending_aborts);
    free(g->drafts);
    free(g->draft_of);
    free(g->probs);
    free(g->cand);
    free(g->counts);
    free(g->work);
    free(g);
}

/* A request's logit rules and logprobs, checked against the model and the
 * forward: a priced forward makes its tokens up, so only min_tokens (which
 * only holds its stop back) means anything there. */
static int check_rules(const engine *g, const engine_request *r, rh_err *e)
{
    unsigned long long id = (unsigned long long)r->id;
    const logit_rules *k = &r->rules;
    uint32_t vocab = g->m->cfg.vocab_size;
    if (k->n_bias && (!k->bias_ids || !k->bias)) return rh_fail(e, "request %llu: logit_bias without its arrays", id);
    for (uint32_t i = 0; i < k->n_bias; i++) {
        if (k->bias_ids[i] < 0 || (uint32_t)k->bias_ids[i] >= vocab)
            return rh_fail(e, "request %llu: logit_bias id %d is outside the vocabulary of %u", id, k->bias_ids[i],
                           vocab);
        if (!isfinite(k->bias[i])) return rh_fail(e, "request %llu: logit_bias of id %d is not finite", id, k->bias_ids[i]);
    }
    if (!(k->min_p >= 0 && k->min_p <= 1)) return rh_fail(e, "request %llu: min_p %g must be in [0, 1]", id, (double)k->min_p);
    if (!isfinite(k->presence) || !isfinite(k->frequency))
        return rh_fail(e, "request %llu: the presence and frequency penalties must be finite", id);
    if (!(k->repetition >= 0) || !isfinite(k->repetition))
        return rh_fail(e, "request %llu: repetition_penalty %g must be > 0", id, (double)k->repetition);
    if (r->top_logprobs > LOGPROB_MAX_TOP)
        return rh_fail(e, "request %llu: %u top logprobs asked, at most %u", id, r->top_logprobs, LOGPROB_MAX_TOP);
    if (r->prompt_logprobs && (double)r->prompt_len * vocab * sizeof(float) > (double)(1u << 30))
        return rh_fail(e, "request %llu: prompt logprobs over %u tokens would hold %.1f GiB of logits (at most 1)", id,
                       r->prompt_len, (double)r->prompt_len * vocab * sizeof(float) / (double)(1u << 30));
    logit_rules beyond_min = *k;
    beyond_min.min_tokens = 0;
    if (g->cfg.pricer && (logit_rules_active(&beyond_min) || r->logprobs || r->prompt_logprobs))
        return rh_fail(e, "request %llu: this server prices its forward passes and makes its tokens up (--backend sim): "
                          "logit_bias, min_p, penalties and logprobs need a computed forward", id);
    return 0;
}

/* Copies what the rules point at into the request. */
static int take_rules(ereq *q, const engine_request *r)
{
    q->rules = r->rules;
    q->rules.bias_ids = NULL;
    q->rules.bias = NULL;
    if (r->rules.n_bias) {
        int32_t *ids = malloc(r->rules.n_bias * sizeof *ids);
        float *b = malloc(r->rules.n_bias * sizeof *b);
        q->rules.bias_ids = ids;
        q->rules.bias = b;
        if (!ids || !b) return -1;
        memcpy(ids, r->rules.bias_ids, r->rules.n_bias * sizeof *ids);
        memcpy(b, r->rules.bias, r->rules.n_bias * sizeof *b);
    }
    if (r->rules.min_tokens) {
        if (!(q->masked = malloc((r->n_stop_ids + 1) * sizeof *q->masked))) return -1;
        if (q->eos >= 0) q->masked[q->n_masked++] = q->eos;
        for (uint32_t i = 0; i < r->n_stop_ids; i++) q->masked[q->n_masked++] = r->stop_ids[i];
    }
    q->logprobs = r->logprobs || r->prompt_logprobs;
    q->top_n = r->top_logprobs;
    q->prompt_logprobs = r->prompt_logprobs;
    if (r->prompt_logprobs) {
        q->plp = malloc(r->prompt_len * sizeof *q->plp);
        q->plp_top = malloc(((size_t)r->prompt_len * q->top_n + 1) * sizeof *q->plp_top);
        if (!q->plp || !q->plp_top) return -1;
        q->plp[0] = NAN;
        for (uint32_t i = 0; i < q->top_n; i++) q->plp_top[i] = (logprob_entry){-1, NAN};
    }
    return 0;
}

int engine_add(engine *g, const engine_request *r, double now, rh_err *e)
{
    unsigned long long id = (unsigned long long)r->id;
    const model_config *mc = &g->m->cfg;
    if (g->in_hooks) return rh_fail(e, "request %llu: engine_add called from an engine hook", id);
    if (!r->prompt_len || !r->prompt) return rh_fail(e, "request %llu: the prompt is empty", id);
    if (!r->max_tokens) return rh_fail(e, "request %llu: max_tokens is 0 (a request must produce a token)", id);
    uint64_t total = (uint64_t)r->prompt_len + r->max_tokens;
    uint32_t ctx = g->cfg.core.context_length;
    if (total > ctx)
        return rh_fail(e, "request %llu: %u prompt + %u output tokens exceed the context length %u of '%s'", id,
                       r->prompt_len, r->max_tokens, ctx, mc->name);
    for (uint32_t i = 0; i < r->prompt_len; i++)
        if (r->prompt[i] < 0 || (uint32_t)r->prompt[i] >= mc->vocab_size)
            return rh_fail(e, "request %llu: prompt token %u is %d, outside the vocabulary of %u", id, i,
                           r->prompt[i], mc->vocab_size);
    if (runner_sampling_check(&r->sampling, e) < 0) return rh_prefix(e, "request %llu", id);
    if (r->n_stop_ids && !r->stop_ids) return rh_fail(e, "request %llu: %u stop ids but no array", id, r->n_stop_ids);
    if (check_rules(g, r, e) < 0) return -1;
    eadapter *ad = r->adapter ? engine_adapter(g, r->adapter) : NULL;
    if (r->adapter && !ad) return rh_fail(e, "request %llu: adapter %u is not served", id, r->adapter);

    ereq *q = calloc(1, sizeof *q);
    if (!q || !(q->toks = malloc(total * sizeof *q->toks)) ||
        (r->n_stop_ids && !(q->stop = malloc(r->n_stop_ids * sizeof *q->stop)))) {
        if (q) free_req(q);
        return rh_fail(e, "request %llu: out of memory", id);
    }
    memcpy(q->toks, r->prompt, r->prompt_len * sizeof *q->toks);
    if (r->n_stop_ids) memcpy(q->stop, r->stop_ids, r->n_stop_ids * sizeof *q->stop);
    q->id = r->id;
    q->user = r->user;
    q->prompt_len = r->prompt_len;
    q->max_tokens = r->max_tokens;
    q->sampling = r->sampling;
    q->rng = kern_rng_init(r->seed);
    q->seed = r->seed;
    q->eos = r->ignore_eos ? -1 : mc->eos_token_id;
    q->n_stop = r->n_stop_ids;
    if (take_rules(q, r) < 0) {
        free_req(q);
        return rh_fail(e, "request %llu: out of memory", id);
    }
    core_req_desc d = {
        .id = r->id,
        .prompt_len = r->prompt_len,
        .max_new_tokens = r->max_tokens,
        .prompt_tokens = r->prompt_logprobs ? NULL : q->toks,   /* NULL: shares no cached prefix */
        .priority = r->priority,
        .adapter = r->adapter,
        .user = q,
    };
    q->adapter = r->adapter;
    if (!core_add(g->c, &d, now, e)) {
        free_req(q);
        return -1;
    }
    if (ad) ad->requests++, ad->total++;
    q->next = g->live;
    if (g->live) g->live->prev = q;
    g->live = q;
    return 0;
}

int engine_abort(engine *g, uint64_t id)
{
    if (!g->in_step) return core_abort(g->c, id, engine_now(g));
    ereq *q = g->live;
    while (q && q->id != id) q = q->next;
    if (!q) return -1;
    if (g->n_pending == g->cap_pending) {
        uint32_t cap = g->cap_pending ? 2 * g->cap_pending : 16;
        uint64_t *v = realloc(g->pending_aborts, cap * sizeof *v);
        if (!v) return -1;
        g->pending_aborts = v;
        g->cap_pending = cap;
    }
    g->pending_aborts[g->n_pending++] = id;
    return 0;
}

void engine_apply_aborts(engine *g)
{
    /* An id may be pending twice, or have finished in the batch that was in
     * flight: core_abort then answers -1 and there is nothing to do. */
    for (uint32_t i = 0; i < g->n_pending; i++) core_abort(g->c, g->pending_aborts[i], engine_now(g));
    g->n_pending = 0;
}

/* ---- the core's hooks ---- */

void engine_core_on_event(void *ctx, const core_event *ev)
{
    engine *g = ctx;
    ereq *q = ev->user;
    if (ev->kind == CORE_EV_TOKENS) q->n_out = ev->output_len;
    engine_event out = {.ev = *ev, .user = q->user, .output = q->toks + q->prompt_len};
    out.ev.user = q->user;
    if (ev->kind == CORE_EV_TOKENS) {
        out.tokens = q->toks + q->prompt_len + q->n_out - ev->n_tokens;
        if (q->logprobs) {
            out.logprobs = q->lp;
            out.top = q->lp_top;
            out.top_n = q->top_n;
        }
        if (q->prompt_logprobs && !q->prompt_sent) {
            out.prompt_logprobs = q->plp;
            out.prompt_top = q->plp_top;
            q->prompt_sent = true;
        }
    }
    if (g->cfg.hooks.on_event) g->cfg.hooks.on_event(g->cfg.hooks.ctx, &out);
    if (ev->kind == CORE_EV_FINISHED || ev->kind == CORE_EV_ABORTED) {
        if (g->drafter && g->drafter->forget) g->drafter->forget(g->drafter->ctx, q->id, q->draft_state);
        eadapter *a = q->adapter ? engine_adapter(g, q->adapter) : NULL;
        if (a && a->requests) a->requests--;
        unlink_req(g, q);
        free_req(q);
    }
}

void engine_core_on_step(void *ctx, const tr_step *st)
{
    engine *g = ctx;
    if (!g->cfg.hooks.on_step) return;
    tr_step s = *st;
    s.sched_time = g->sched_time;
    /* A priced step is recorded as priced: it ran from where it was put on
     * the clock (chained to the last one's end, which may be before the
     * core formed it) for exactly its price, never the remnant after the
     * loop's own work. */
    if (g->cfg.pricer) {
        s.start = g->priced_start;
        s.duration = g->priced_dt;
    }
    g->cfg.hooks.on_step(g->cfg.hooks.ctx, &s);
}

void engine_core_on_message(void *ctx, const char *msg)
{
    engine *g = ctx;
    if (g->cfg.hooks.on_message) g->cfg.hooks.on_message(g->cfg.hooks.ctx, msg);
}

typedef struct describe_ctx {
    tr_header *h;
    int rc;
} describe_ctx;

static void put_knob(void *ctx, const char *name, const char *value)
{
    describe_ctx *d = ctx;
    if (tr_header_set(d->h, name, value) < 0) d->rc = -1;
}

int engine_describe(const engine *g, tr_header *h)
{
    describe_ctx d = {h, 0};
    if (tr_header_set_model(h, g->m->cfg.name) < 0 || tr_header_set_hardware(h, g->hardware) < 0 ||
        tr_header_set(h, "weights", g->weights) < 0)
        return -1;
    core_config_foreach(core_get_config(g->c), put_knob, &d);
    if (g->cfg.tp.tp_size > 1) {
        char v[16];
        snprintf(v, sizeof v, "%u", g->cfg.tp.tp_size);
        put_knob(&d, "tp-size", v);
    }
    if (g->spec) {
        spec_config_foreach(&g->cfg.spec, put_knob, &d);
        if (*spec_drafter_model(g->spec)) put_knob(&d, "speculative-draft-model", spec_drafter_model(g->spec));
    }
    return d.rc;
}

const spec_drafter *engine_spec_drafter(const engine *g) { return g->spec; }

void engine_get_spec_stats(const engine *g, engine_spec_stats *s)
{
    *s = g->spec_stats;
    s->accept_rate = s->proposed ? (double)s->accepted / (double)s->proposed : 0;
    s->mean_accepted_len = s->verifies ? 1.0 + (double)s->accepted / (double)s->verifies : 0;
}
