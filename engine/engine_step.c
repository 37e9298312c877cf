/* engine_step.c — one batch: schedule, lay out, draft, forward, sample or
 * verify, commit. See engine.h for the order and what each part measures. */
#include <stdio.h>
#include <time.h>

#include "engine/engine_impl.h"

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
    return 0;
}

/* Drafts go just past the committed tokens, so the forward reads the last
 * token and its drafts as one run of the request's own array. */
static void draft(engine *g, const core_seq *s, runner_seq *rs)
{
    const engine_drafter *d = g->cfg.drafter;
    if (!d || !s->n_spec) return;
    ereq *q = s->user;
    uint32_t fill = q->prompt_len + q->n_out;
    uint32_t k = d->propose(d->ctx, q->id, q->toks, fill, s->n_spec, q->toks + fill);
    if (k > s->n_spec) k = s->n_spec;
    uint32_t vocab = g->m->cfg.vocab_size;
    for (uint32_t j = 0; j < k; j++)
        if (q->toks[fill + j] < 0 || (uint32_t)q->toks[fill + j] >= vocab) k = j;
    rs->n_new = 1 + k;
    rs->n_logits = 1 + k;
}

/* Draws this step's tokens for one sampling sequence from its logit rows and
 * writes them after the committed ones. A decode with k drafts has k + 1
 * rows: row j is the distribution after draft j - 1, so drafts are accepted
 * while each equals the token drawn before it. */
static core_seq_result sample(engine *g, ereq *q, const runner_seq *rs, const float *rows)
{
    uint32_t vocab = g->m->cfg.vocab_size;
    uint32_t fill = q->prompt_len + q->n_out;
    uint32_t proposed = rs->n_logits - 1, accepted = 0;
    for (uint32_t j = 0; j <= proposed; j++) {
        int32_t t = runner_sample(g->run, rows + (size_t)j * vocab, &q->sampling, &q->rng);
        if (j < proposed && t == q->toks[fill + j]) {
            accepted++;
            continue;
        }
        q->toks[fill + j] = t;
        break;
    }
    core_seq_result r = {.proposed = proposed, .accepted = accepted, .tokens = q->toks + fill};
    for (uint32_t j = 0; j <= accepted; j++)
        if (is_stop(q, q->toks[fill + j])) {
            r.accepted = j;
            r.stop = true;
            break;
        }
    return r;
}

int engine_step(engine *g, rh_err *e)
{
    if (g->in_step) return rh_fail(e, "engine_step called from an engine hook");
    if (g->n_pending) engine_apply_aborts(g);
    double cpu0 = cpu_seconds();
    double now = engine_now(g);
    core_batch b;
    g->in_step = true;
    uint32_t n = core_schedule(g->c, now, &b);
    if (n == 0) {
        g->in_step = false;
        if (!core_idle(g->c)) return rh_fail(e, "engine: the scheduler formed no batch with requests queued");
        return 0;
    }
    int rc = -1;
    if (n > g->cap_seqs) {
        rh_fail(e, "engine: a batch of %u sequences exceeds the %u the core allows", n, g->cap_seqs);
        goto out;
    }
    for (uint32_t i = 0; i < n; i++)
        if (lay_out(&b.seqs[i], &g->seqs[i], e) < 0) goto out;
    g->sched_time = cpu_seconds() - cpu0;
    for (uint32_t i = 0; i < n; i++)
        if (!b.seqs[i].prefill) draft(g, &b.seqs[i], &g->seqs[i]);

    const float *logits;
    if (runner_forward(g->run, g->seqs, n, &logits, e) < 0) goto out;
    size_t vocab = g->m->cfg.vocab_size;
    for (uint32_t i = 0; i < n; i++) {
        const runner_seq *rs = &g->seqs[i];
        g->results[i] = (core_seq_result){0};
        if (!rs->n_logits) continue;
        g->results[i] = sample(g, b.seqs[i].user, rs, logits);
        logits += rs->n_logits * vocab;
    }
    rc = core_complete(g->c, &b, g->results, engine_now(g), e) < 0 ? -1 : 1;
out:
    g->in_step = false;
    if (rc > 0 && g->n_pending) engine_apply_aborts(g);
    return rc;
}
