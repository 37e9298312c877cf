/* engine_step.c — one batch: schedule, lay out, draft, forward, sample or
 * verify, commit. See engine.h for the order and what each part measures. */
#include <math.h>
#include <stdio.h>
#include <time.h>

#include "engine/core/kv.h"
#include "engine/engine_impl.h"
#include "engine/speculative/verify.h"
#include "util/hash.h"

#include <stddef.h>

/* The core's copy log is handed to the runner as it is. */
_Static_assert(sizeof(kv_copy) == sizeof(runner_page_copy) &&
                   offsetof(kv_copy, gpu_page) == offsetof(runner_page_copy, gpu_page) &&
                   offsetof(kv_copy, host_slot) == offsetof(runner_page_copy, host_slot) &&
                   offsetof(kv_copy, to_host) == offsetof(runner_page_copy, to_host),
               "kv_copy and runner_page_copy share one layout");

#include <stdlib.h>
#include <string.h>

/* CPU time of this thread: scheduling cost that does not count the time the
 * thread waited for a core on a busy machine. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool is_stop(const ereq *q, int32_t t)
{
    if (t == q->eos) return true;
    for (uint32_t i = 0; i < q->n_stop; i++)
        if (q->stop[i] == t) return true;
    return false;
}

/* The runner's view of one core sequence. The core counts a request's
 * tokens as prompt + committed outputs (its "fill"): a prefill chunk covers
 * positions below the fill (after a retraction it recomputes outputs too),
 * a decode computes the newest token at fill - 1. */
static int lay_out(const core_seq *s, runner_seq *rs, rh_err *e)
{
    const ereq *q = s->user;
    uint32_t fill = q->prompt_len + q->n_out;
    bool ok = s->prefill ? (uint64_t)s->start + s->n_new <= fill : s->start + 1 == fill && s->n_new == 1 + s->n_spec;
    if (!ok)
        return rh_fail(e, "engine: request %llu: the core asked for positions %u..%u of %u tokens",
                       (unsigned long long)q->id, s->start, s->start + s->n_new - 1, fill);
    *rs = (runner_seq){
        .tokens = q->toks + s->start,
        .n_new = s->prefill ? s->n_new : 1,
        .start = s->start,
        .pages = s->pages,
        .n_pages = s->n_pages,
        .n_logits = s->samples ? 1 : 0,
    };
    /* Prompt logprobs score every prompt position: each row of a chunk. */
    if (s->prefill && q->prompt_logprobs) rs->n_logits = s->n_new;
    return 0;
}

/* Asks the drafter for every decode with draft slots, all at once. Drafts
 * go just past the committed tokens, so the forward reads the last token
 * and its drafts as one run of the request's own array. */
static int draft(engine *g, const core_batch *b, rh_err *e)
{
    const spec_seam *d = g->drafter;
    g->n_drafts = 0;
    if (!d) return 0;
    for (uint32_t i = 0; i < b->n; i++) {
        const core_seq *s = &b->seqs[i];
        g->draft_of[i] = UINT32_MAX;
        if (s->prefill || !s->n_spec) continue;
        ereq *q = s->user;
        uint32_t fill = q->prompt_len + q->n_out;
        g->draft_of[i] = g->n_drafts;
        g->drafts[g->n_drafts++] = (spec_draft){.id = q->id, .state = q->draft_state, .tokens = q->toks,
                                                  .n = fill, .k = s->n_spec, .sampling = &q->sampling,
                                                  .out = q->toks + fill};
    }
    if (!g->n_drafts) return 0;
    if (d->propose_batch) {
        if (d->propose_batch(d->ctx, g->drafts, g->n_drafts, e) < 0) return -1;
    } else {
        for (uint32_t j = 0; j < g->n_drafts; j++) {
            spec_draft *x = &g->drafts[j];
            x->n_out = d->propose(d->ctx, x->id, x->tokens, x->n, x->k, x->out);
            x->q = NULL;
        }
    }
    uint32_t vocab = g->m->cfg.vocab_size;
    for (uint32_t i = 0; i < b->n; i++) {
        if (g->draft_of[i] == UINT32_MAX) continue;
        spec_draft *x = &g->drafts[g->draft_of[i]];
        ereq *q = b->seqs[i].user;
        q->draft_state = x->state;
        uint32_t k = x->n_out < b->seqs[i].n_spec ? x->n_out : b->seqs[i].n_spec;
        for (uint32_t j = 0; j < k; j++)
            if (x->out[j] < 0 || (uint32_t)x->out[j] >= vocab) k = j;
        x->n_out = k;
        g->seqs[i].n_new = 1 + k;
        g->seqs[i].n_logits = 1 + k;
    }
    return 0;
}

/* Target probability rows for verifying drafts that came with their own
 * distribution; grown to the largest verify seen. */
static float *probs_rows(engine *g, uint32_t rows)
{
    size_t need = (size_t)rows * g->m->cfg.vocab_size;
    if (need > g->cap_probs) {
        float *p = realloc(g->probs, need * sizeof *p);
        if (!p) return NULL;
        g->probs = p;
        g->cap_probs = need;
    }
    return g->probs;
}

/* Draws this step's tokens for one sampling sequence from its logit rows and
 * writes them after the committed ones. A decode with k drafts has k + 1
 * rows: row j is the distribution after draft j - 1. Certain drafts (no q)
 * are accepted while each equals the token drawn before it: for q = 1 on
 * the draft that is exactly rejection sampling, and it draws from the
 * request's stream just as a run without drafts does. Drafts with a
 * distribution q go through spec_verify. */
/* The rows with the request's logit rules applied, in the engine's scratch;
 * row j is drawn after j drafts, which count as outputs before it. */
static const float *apply_rules(engine *g, ereq *q, const float *rows, uint32_t n_rows, rh_err *e)
{
    uint32_t vocab = g->m->cfg.vocab_size;
    size_t need = (size_t)n_rows * vocab;
    if (need > g->cap_work) {
        float *w = realloc(g->work, need * sizeof *w);
        if (!w) return rh_fail(e, "engine: out of memory applying a request's logit rules"), NULL;
        g->work = w;
        g->cap_work = need;
    }
    memcpy(g->work, rows, need * sizeof *rows);
    for (uint32_t j = 0; j < n_rows; j++) {
        logit_context x = {.prompt = q->toks, .n_prompt = q->prompt_len, .out = q->toks + q->prompt_len,
                           .n_out = q->n_out + j, .stops = q->masked, .n_stops = q->n_masked,
                           .temperature = q->sampling.temperature};
        logit_rules_apply(&q->rules, &x, g->work + (size_t)j * vocab, vocab, g->counts);
    }
    return g->work;
}

/* Each committed token's logprob (and top ids) under the model's raw rows. */
static int note_logprobs(ereq *q, const float *raw, uint32_t vocab, const int32_t *toks, uint32_t n, rh_err *e)
{
    if (n > q->cap_lp) {
        float *lp = realloc(q->lp, n * sizeof *lp);
        if (lp) q->lp = lp;
        logprob_entry *top = lp ? realloc(q->lp_top, ((size_t)n * q->top_n + 1) * sizeof *top) : NULL;
        if (top) q->lp_top = top;
        if (!lp || !top) return rh_fail(e, "engine: out of memory for request %llu's logprobs", (unsigned long long)q->id);
        q->cap_lp = n;
    }
    for (uint32_t j = 0; j < n; j++)
        q->lp[j] = logprob_top(raw + (size_t)j * vocab, vocab, toks[j], q->top_n, q->lp_top + (size_t)j * q->top_n);
    return 0;
}

/* A prompt chunk's rows of a request that asked for prompt logprobs: row t
 * (position start + t) scores the prompt id after it. */
static void note_prompt_logprobs(ereq *q, const runner_seq *rs, const float *rows, uint32_t vocab)
{
    for (uint32_t t = 0; t < rs->n_new; t++) {
        uint32_t next = rs->start + t + 1;
        if (next >= q->prompt_len) break;
        q->plp[next] = logprob_top(rows + (size_t)t * vocab, vocab, q->toks[next], q->top_n,
                                   q->plp_top + (size_t)next * q->top_n);
    }
}

static int sample(engine *g, ereq *q, uint32_t n_rows, const float *raw, const spec_draft *dr,
                  core_seq_result *out, rh_err *e)
{
    uint32_t vocab = g->m->cfg.vocab_size;
    uint32_t fill = q->prompt_len + q->n_out;
    uint32_t proposed = n_rows - 1, accepted = 0;
    const float *rows = raw;
    if (logit_rules_active(&q->rules) && !(rows = apply_rules(g, q, raw, n_rows, e))) return -1;
    if (proposed && dr && dr->q) {
        float *p = probs_rows(g, proposed + 1);
        if (!p) return rh_fail(e, "engine: out of memory verifying %u drafts", proposed);
        for (uint32_t j = 0; j <= proposed; j++)
            spec_probs(rows + (size_t)j * vocab, vocab, &q->sampling, p + (size_t)j * vocab, g->cand);
        accepted = spec_verify(p, dr->q, q->toks + fill, proposed, vocab, &q->rng, q->toks + fill);
    } else {
        for (uint32_t j = 0; j <= proposed; j++) {
            int32_t t = runner_sample(g->run, rows + (size_t)j * vocab, &q->sampling, &q->rng);
            if (j < proposed && t == q->toks[fill + j]) {
                accepted++;
                continue;
            }
            q->toks[fill + j] = t;
            break;
        }
    }
    core_seq_result r = {.proposed = proposed, .accepted = accepted, .tokens = q->toks + fill};
    for (uint32_t j = 0; j <= accepted; j++)
        if (is_stop(q, q->toks[fill + j])) {
            r.accepted = j;
            r.stop = true;
            break;
        }
    *out = r;
    if (q->logprobs && note_logprobs(q, raw, vocab, q->toks + fill, r.accepted + 1, e) < 0) return -1;
    return 0;
}

/* A decode that had draft slots: the drafter rolls its state back to the
 * drafts that stood, and the counters take the verify. */
static void count_verify(engine *g, const spec_draft *dr, const core_seq_result *r)
{
    if (dr && g->drafter->verified) g->drafter->verified(g->drafter->ctx, dr, r->accepted);
    engine_spec_stats *st = &g->spec_stats;
    st->verifies++;
    st->proposed += r->proposed;
    st->accepted += r->accepted;
    uint32_t bin = r->accepted < SPEC_HIST_BINS - 1 ? r->accepted : SPEC_HIST_BINS - 1;
    st->hist[bin]++;
}

/* The three parts of a step. Between begin and end a batch is in flight:
 * aborts wait for end (the forward may be reading the request's tokens),
 * and the caller's thread may add requests while another thread runs
 * engine_step_run (engine_add touches only the core's waiting queue and new
 * requests, never the batch). */
int engine_step_begin(engine *g, rh_err *e)
{
    if (g->in_step) return rh_fail(e, "engine_step called from an engine hook or with a batch in flight");
    if (g->n_pending) engine_apply_aborts(g);
    double cpu0 = cpu_seconds();
    double now = engine_now(g);
    g->in_step = g->in_hooks = true;
    uint32_t n = core_schedule(g->c, now, &g->batch);
    g->in_hooks = false;
    if (n == 0) {
        g->in_step = false;
        if (!core_idle(g->c)) return rh_fail(e, "engine: the scheduler formed no batch with requests queued");
        return 0;
    }
    if (n > g->cap_seqs)
        return rh_fail(e, "engine: a batch of %u sequences exceeds the %u the core allows", n, g->cap_seqs);
    if (g->batch.copies_lost) return rh_fail(e, "engine: out of memory logging the host KV tier's copies");
    if (g->batch.n_copies && g->run &&
        runner_copy_pages(g->run, (const runner_page_copy *)g->batch.copies, g->batch.n_copies, e) < 0)
        return -1;
    for (uint32_t i = 0; i < n; i++)
        if (lay_out(&g->batch.seqs[i], &g->seqs[i], e) < 0) return -1;
    if (g->n_adapters) {   /* each sequence under its adapter's copy in a GPU slot */
        if (engine_lora_prepare(g, &g->batch, e) < 0) return -1;
        for (uint32_t i = 0; i < n; i++) {
            const ereq *q = g->batch.seqs[i].user;
            const eadapter *a = q->adapter ? engine_adapter(g, q->adapter) : NULL;
            g->seqs[i].lora = a ? a->dev : NULL;
        }
    }
    g->sched_time = cpu_seconds() - cpu0;
    return 1;
}

/* The priced forward (engine_pricer): wait what the batch costs, then one
 * made-up token per sampling sequence, from the request's seed and the
 * token's position alone. Ids start past the first 256 (a bytes
 * tokenizer's control range) and skip EOS, so text decodes and nothing
 * stops early unless a stop id matches. */
static int run_priced(engine *g, rh_err *e)
{
    const engine_pricer *p = g->cfg.pricer;
    const core_batch *b = &g->batch;
    double dt = p->price(p->ctx, b);
    if (!(dt > 0) || !isfinite(dt)) return rh_fail(e, "engine: the pricer gave %g s for a batch of %u", dt, b->n);
    g->priced_dt = dt;
    if (p->wait) {
        g->priced_start = engine_now(g);
        p->wait(p->ctx, dt);
    } else {
        /* Back-to-back steps run back to back, as on a GPU: a step formed
         * while requests were left in the core starts at the last one's
         * end, so the sleep's overshoot and the loop's own work do not add
         * up over a run (a stall of the process longer than 20 ms is not
         * made up). After the core went idle (priced_end reset) it starts
         * now. */
        double now = engine_now(g), start = now;
        if (g->priced_end > 0 && now - g->priced_end < 0.02) start = g->priced_end;
        g->priced_start = start;
        g->priced_end = start + dt;
        double left = g->priced_end - now;
        if (left > 0) {
            struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
            while (nanosleep(&ts, &ts) != 0) {
            }
        }
    }
    uint32_t vocab = g->m->cfg.vocab_size, base = vocab > 512 ? 256 : 0;
    for (uint32_t i = 0; i < b->n; i++) {
        g->results[i] = (core_seq_result){0};
        if (!b->seqs[i].samples) continue;
        ereq *q = b->seqs[i].user;
        uint32_t fill = q->prompt_len + q->n_out;
        int32_t t = (int32_t)(base + rh_hash64(q->seed ^ rh_hash64(fill)) % (vocab - base));
        if (t == q->eos) t = (int32_t)(base + (uint32_t)(t - (int32_t)base + 1) % (vocab - base));
        q->toks[fill] = t;
        /* min_tokens holds a made-up stop id back as a computed forward masks it */
        bool early = q->n_out < q->rules.min_tokens;
        g->results[i] = (core_seq_result){.tokens = q->toks + fill, .stop = !early && is_stop(q, t)};
    }
    /* Tokens are delivered on the wall clock; the step's record says what
     * was priced (engine_core_on_step). */
    g->done_at = engine_now(g);
    return 0;
}

int engine_step_run(engine *g, rh_err *e)
{
    const core_batch *b = &g->batch;
    uint32_t n = b->n;
    if (g->cfg.pricer) return run_priced(g, e);
    if (draft(g, b, e) < 0) return -1;

    const float *logits;
    if (runner_forward(g->run, g->seqs, n, &logits, e) < 0) return -1;
    size_t vocab = g->m->cfg.vocab_size;
    for (uint32_t i = 0; i < n; i++) {
        const runner_seq *rs = &g->seqs[i];
        g->results[i] = (core_seq_result){0};
        if (!rs->n_logits) continue;
        const core_seq *s = &b->seqs[i];
        ereq *q = s->user;
        const float *rows = logits;
        uint32_t n_rows = rs->n_logits;
        logits += rs->n_logits * vocab;
        if (s->prefill && q->prompt_logprobs) {
            note_prompt_logprobs(q, rs, rows, (uint32_t)vocab);
            if (!s->samples) continue;
            rows += (size_t)(n_rows - 1) * vocab;   /* the last row samples */
            n_rows = 1;
        }
        const spec_draft *dr = NULL;
        if (g->drafter && g->draft_of[i] != UINT32_MAX) dr = &g->drafts[g->draft_of[i]];
        if (sample(g, q, n_rows, rows, dr, &g->results[i], e) < 0) return -1;
        if (s->n_spec) count_verify(g, dr, &g->results[i]);
    }
    g->done_at = engine_now(g);
    return 0;
}

int engine_step_end(engine *g, rh_err *e)
{
    /* Committed at the time the tokens were ready, not when the caller got
     * round to committing them. */
    g->in_hooks = true;
    int rc = core_complete(g->c, &g->batch, g->results, g->done_at, e) < 0 ? -1 : 1;
    g->in_step = g->in_hooks = false;
    if (g->cfg.pricer && core_idle(g->c)) g->priced_end = 0;   /* the next step starts after idle time */
    if (rc > 0 && g->n_pending) engine_apply_aborts(g);
    return rc;
}

int engine_step(engine *g, rh_err *e)
{
    int rc = engine_step_begin(g, e);
    if (rc <= 0) return rc;
    if (engine_step_run(g, e) < 0) return -1;
    return engine_step_end(g, e);
}
