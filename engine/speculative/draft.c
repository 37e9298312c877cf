/* draft.c — the draft-model drafter: a second runner over a smaller model
 * (or the target's first L layers) with its own paged KV pool.
 *
 * Per request the drafter keeps `kv`: how many of the request's tokens have
 * valid K and V in its pages. A step's drafting for k tokens after n
 * committed ones:
 *   1. catch-up: positions kv .. n-2 (the whole prompt the first time, else
 *      nothing or one token) in chunks of at most CATCHUP_ROWS rows over all
 *      requests, no logits;
 *   2. k forwards of one token per request: position n-1 (the newest
 *      committed token) gives draft 1, draft j at position n+j-2 gives draft
 *      j+1; forward j carries only the requests that want more than j.
 * Afterwards kv = n + k - 1 (the last draft is never fed). After the verify,
 * `verified` cuts kv to n + accepted, the drafts that stood, and frees the
 * pages past it: the draft KV follows every accept and rollback.
 *
 * Pages come from a free list. When it runs dry, the drafter drops the draft
 * KV of requests that are not drafting this step, least recently drafted
 * first (they recompute it when they draft again); if that is not enough the
 * request simply gets no drafts this step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/runner.h"
#include "engine/speculative/internal.h"
#include "engine/speculative/verify.h"
#include "util/hash.h"

#define CATCHUP_ROWS 2048     /* rows per catch-up forward: bounds the activations */

typedef struct dstate {
    uint64_t id;
    uint32_t kv;               /* tokens with valid draft K/V */
    uint32_t *pages;
    uint32_t n_pages, cap_pages;
    uint64_t rng;              /* the request's draft sampling stream */
    uint64_t used;             /* the last step it drafted in (eviction order) */
    uint32_t slot;             /* index in draft_model.states */
} dstate;

struct draft_model {
    model *owned;              /* a draft model loaded here */
    model self;                /* the target's first L layers (self-speculation) */
    const model *m;            /* the model drafting */
    runner *run;
    uint32_t ps, total_pages, vocab;
    uint32_t *free_pages, n_free;
    dstate **states;           /* every request with draft state */
    uint32_t n_states, cap_states;
    uint64_t step, evictions, forwards, seed;
    char name[96];
    /* per-call scratch, grown as needed */
    runner_seq *seqs;
    uint32_t *who, *qoff;
    uint32_t cap_seqs;
    float *q;                  /* draft probability rows of sampling requests */
    size_t cap_q;
    kern_cand *cand;
};

static uint32_t pages_for(const draft_model *dm, uint64_t tokens)
{
    return (uint32_t)((tokens + dm->ps - 1) / dm->ps);
}

/* ---- pages ---- */

static void shrink(draft_model *dm, dstate *st, uint32_t kv)
{
    if (kv < st->kv) st->kv = kv;
    uint32_t keep = pages_for(dm, st->kv);
    while (st->n_pages > keep) dm->free_pages[dm->n_free++] = st->pages[--st->n_pages];
}

/* Frees the draft KV of the least recently drafted request not drafting in
 * this step. 0 if there was none to drop. */
static int evict_one(draft_model *dm)
{
    dstate *victim = NULL;
    for (uint32_t i = 0; i < dm->n_states; i++) {
        dstate *s = dm->states[i];
        if (s->used == dm->step || !s->n_pages) continue;
        if (!victim || s->used < victim->used) victim = s;
    }
    if (!victim) return 0;
    shrink(dm, victim, 0);
    dm->evictions++;
    return 1;
}

/* Gives st pages for `tokens` positions; 0, or -1 when the pool cannot. */
static int grow(draft_model *dm, dstate *st, uint64_t tokens)
{
    uint32_t need = pages_for(dm, tokens);
    if (need <= st->n_pages) return 0;
    if (need > dm->total_pages) return -1;
    if (need > st->cap_pages) {
        uint32_t cap = st->cap_pages ? st->cap_pages : 8;
        while (cap < need) cap *= 2;
        uint32_t *p = realloc(st->pages, cap * sizeof *p);
        if (!p) return -1;
        st->pages = p;
        st->cap_pages = cap;
    }
    while (dm->n_free < need - st->n_pages)
        if (!evict_one(dm)) return -1;
    while (st->n_pages < need) st->pages[st->n_pages++] = dm->free_pages[--dm->n_free];
    return 0;
}

/* ---- per-request state ---- */

static dstate *state_new(draft_model *dm, uint64_t id)
{
    if (dm->n_states == dm->cap_states) {
        uint32_t cap = dm->cap_states ? 2 * dm->cap_states : 64;
        dstate **v = realloc(dm->states, cap * sizeof *v);
        if (!v) return NULL;
        dm->states = v;
        dm->cap_states = cap;
    }
    dstate *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->id = id;
    st->rng = kern_rng_init(rh_hash64(dm->seed) ^ rh_hash64(id));
    st->slot = dm->n_states;
    dm->states[dm->n_states++] = st;
    return st;
}

void draft_forget(void *ctx, uint64_t id, void *state)
{
    (void)id;
    spec_drafter *d = ctx;
    draft_model *dm = d->dm;
    dstate *st = state;
    if (!st) return;
    shrink(dm, st, 0);
    dstate *last = dm->states[--dm->n_states];
    dm->states[st->slot] = last;
    last->slot = st->slot;
    free(st->pages);
    free(st);
}

void draft_verified(void *ctx, const spec_draft *d, uint32_t accepted)
{
    spec_drafter *s = ctx;
    dstate *st = d->state;
    if (st) shrink(s->dm, st, d->n + accepted);
}

/* ---- drafting ---- */

static int reserve_scratch(draft_model *dm, uint32_t n, size_t q_rows)
{
    if (n > dm->cap_seqs) {
        runner_seq *s = realloc(dm->seqs, n * sizeof *s);
        if (s) dm->seqs = s;
        uint32_t *w = realloc(dm->who, n * sizeof *w);
        if (w) dm->who = w;
        uint32_t *o = realloc(dm->qoff, n * sizeof *o);
        if (o) dm->qoff = o;
        if (!s || !w || !o) return -1;
        dm->cap_seqs = n;
    }
    size_t need = q_rows * dm->vocab;
    if (need > dm->cap_q) {
        float *q = realloc(dm->q, need * sizeof *q);
        if (!q) return -1;
        dm->q = q;
        dm->cap_q = need;
    }
    return 0;
}

static int forward(draft_model *dm, uint32_t n, const float **logits, rh_err *e)
{
    dm->forwards++;
    if (runner_forward(dm->run, dm->seqs, n, logits, e) < 0) return rh_prefix(e, "draft model '%s'", dm->name);
    return 0;
}

/* Brings every drafting request's kv up to n - 1 in bounded forwards. */
static int catch_up(draft_model *dm, spec_draft *d, uint32_t n, rh_err *e)
{
    for (;;) {
        uint32_t m = 0, rows = 0;
        for (uint32_t i = 0; i < n && rows < CATCHUP_ROWS; i++) {
            dstate *st = d[i].state;
            if (!d[i].k || st->kv + 1 >= d[i].n) continue;
            uint32_t len = d[i].n - 1 - st->kv;
            if (len > CATCHUP_ROWS - rows) len = CATCHUP_ROWS - rows;
            dm->seqs[m++] = (runner_seq){d[i].tokens + st->kv, len, st->kv, st->pages, st->n_pages, 0, NULL};
            dm->who[m - 1] = i;
            rows += len;
        }
        if (!m) return 0;
        const float *logits;
        if (forward(dm, m, &logits, e) < 0) return -1;
        for (uint32_t j = 0; j < m; j++) ((dstate *)d[dm->who[j]].state)->kv += dm->seqs[j].n_new;
    }
}

/* Draft j + 1 of a request from its logit row: the argmax for greedy
 * requests, else a draw from the draft's own distribution under the
 * request's sampling, whose row (q_row) is kept for the verifier. */
static void choose(draft_model *dm, spec_draft *d, uint32_t j, const float *row, float *q_row)
{
    dstate *st = d->state;
    if (!q_row) {
        kern_sampling greedy = {0, 1, 0};
        d->out[j] = runner_sample(dm->run, row, &greedy, &st->rng);
        return;
    }
    spec_probs(row, dm->vocab, d->sampling, q_row, dm->cand);
    d->out[j] = spec_draw(q_row, dm->vocab, &st->rng);
}

int draft_propose_batch(void *ctx, spec_draft *d, uint32_t n, rh_err *e)
{
    spec_drafter *s = ctx;
    draft_model *dm = s->dm;
    dm->step++;
    size_t q_rows = 0;
    uint32_t kmax = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!spec_is_greedy(d[i].sampling)) q_rows += d[i].k;
    if (reserve_scratch(dm, n, q_rows) < 0) return rh_fail(e, "draft model '%s': out of memory", dm->name);

    /* Every drafting request is marked first, so making room for one can
     * only evict requests that are not drafting now. */
    for (uint32_t i = 0; i < n; i++) {
        if (!d[i].state && !(d[i].state = state_new(dm, d[i].id))) return rh_fail(e, "draft model: out of memory");
        ((dstate *)d[i].state)->used = dm->step;
    }
    size_t qo = 0;
    for (uint32_t i = 0; i < n; i++) {
        spec_draft *x = &d[i];
        x->n_out = 0;
        x->q = NULL;
        dstate *st = x->state;
        uint64_t end = (uint64_t)x->n + x->k - 1;       /* positions whose K/V drafting writes */
        if (x->n == 0 || end > dm->m->cfg.max_position) x->k = 0;
        else shrink(dm, st, x->n - 1);                 /* the newest token is always recomputed */
        if (x->k && grow(dm, st, end) < 0) {
            shrink(dm, st, 0);
            x->k = 0;
        }
        dm->qoff[i] = UINT32_MAX;                      /* greedy: no rows */
        if (x->k && !spec_is_greedy(x->sampling)) {
            dm->qoff[i] = (uint32_t)qo;
            x->q = dm->q + qo * dm->vocab;
            qo += x->k;
        }
        if (x->k > kmax) kmax = x->k;
    }
    if (catch_up(dm, d, n, e) < 0) return -1;

    for (uint32_t j = 0; j < kmax; j++) {
        uint32_t m = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (d[i].k <= j) continue;
            dstate *st = d[i].state;
            const int32_t *tok = j ? d[i].out + j - 1 : d[i].tokens + d[i].n - 1;
            dm->seqs[m] = (runner_seq){tok, 1, d[i].n - 1 + j, st->pages, st->n_pages, 1, NULL};
            dm->who[m++] = i;
        }
        const float *logits;
        if (forward(dm, m, &logits, e) < 0) return -1;
        for (uint32_t t = 0; t < m; t++) {
            uint32_t i = dm->who[t];
            float *q_row = dm->qoff[i] == UINT32_MAX ? NULL : dm->q + ((size_t)dm->qoff[i] + j) * dm->vocab;
            choose(dm, &d[i], j, logits + (size_t)t * dm->vocab, q_row);
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!d[i].k) continue;
        dstate *st = d[i].state;
        st->kv = d[i].n + d[i].k - 1;
        d[i].n_out = d[i].k;
    }
    return 0;
}

/* ---- lifecycle ---- */

/* A draft model named on the command line: a directory's own weights when
 * it has any, else dummy weights from the engine's seed. */
static model *load_draft(const char *spec, uint64_t seed, rh_err *e)
{
    model_config mc;
    if (model_config_resolve(spec, &mc, e)) return rh_prefix(e, "--speculative-draft-model-path"), NULL;
    return model_open(spec, NULL, seed, 0, e);
}

static int pick_model(draft_model *dm, const spec_config *c, const spec_env *env, rh_err *e)
{
    const model_config *t = &env->target->cfg;
    if (c->draft_m || c->draft_model) {
        if (c->draft_m) dm->m = c->draft_m;
        else if (!(dm->m = dm->owned = load_draft(c->draft_model, env->weight_seed, e))) return -1;
        if (dm->m->cfg.vocab_size != t->vocab_size)
            return rh_fail(e, "draft model '%s' has a vocabulary of %u ids but the target '%s' has %u: "
                              "drafts must be target token ids",
                           dm->m->cfg.name, dm->m->cfg.vocab_size, t->name, t->vocab_size);
        snprintf(dm->name, sizeof dm->name, "%s", dm->m->cfg.name);
        return 0;
    }
    uint32_t L = c->draft_layers ? c->draft_layers : (t->n_layers + 3) / 4;
    if (L > t->n_layers)
        return rh_fail(e, "--speculative-draft-layers %u: the target '%s' has only %u layers", L, t->name,
                       t->n_layers);
    /* The same weights seen with fewer layers: the runner walks layers
     * 0..L-1, then the final norm and the LM head. Nothing is copied. */
    dm->self = *env->target;
    dm->self.cfg.n_layers = L;
    dm->self.arena = NULL;
    dm->self.files = NULL;
    dm->self.n_files = 0;
    dm->m = &dm->self;
    snprintf(dm->name, sizeof dm->name, "%s[0:%u]", t->name, L);
    return 0;
}

draft_model *draft_model_new(const spec_config *c, const spec_env *env, rh_err *e)
{
    draft_model *dm = calloc(1, sizeof *dm);
    if (!dm) return rh_fail(e, "draft model: out of memory"), NULL;
    dm->ps = env->page_size;
    dm->total_pages = env->total_pages;
    dm->seed = c->draft_seed;
    dm->vocab = env->target->cfg.vocab_size;
    if (pick_model(dm, c, env, e) < 0) goto fail;
    runner_config rc = {env->page_size, env->total_pages, env->mem_limit, env->kernels};
    if (!(dm->run = runner_new(dm->m, &rc, e))) {
        rh_prefix(e, "draft model '%s'", dm->name);
        goto fail;
    }
    dm->free_pages = malloc((size_t)dm->total_pages * sizeof *dm->free_pages);
    dm->cand = malloc((size_t)dm->vocab * sizeof *dm->cand);
    if (!dm->free_pages || !dm->cand) {
        rh_fail(e, "draft model: out of memory");
        goto fail;
    }
    /* Handed out lowest first (the list is popped from its end). */
    for (uint32_t i = 0; i < dm->total_pages; i++) dm->free_pages[i] = dm->total_pages - 1 - i;
    dm->n_free = dm->total_pages;
    return dm;
fail:
    draft_model_free(dm);
    return NULL;
}

void draft_model_free(draft_model *dm)
{
    if (!dm) return;
    for (uint32_t i = 0; i < dm->n_states; i++) {
        free(dm->states[i]->pages);
        free(dm->states[i]);
    }
    free(dm->states);
    runner_free(dm->run);
    model_free(dm->owned);
    free(dm->free_pages);
    free(dm->seqs);
    free(dm->who);
    free(dm->qoff);
    free(dm->q);
    free(dm->cand);
    free(dm);
}

const char *draft_model_name(const draft_model *dm) { return dm->name; }

void draft_model_stats(const draft_model *dm, spec_draft_stats *s)
{
    *s = (spec_draft_stats){.pages_total = dm->total_pages, .pages_free = dm->n_free, .requests = dm->n_states,
                            .evictions = dm->evictions, .forwards = dm->forwards};
}

int draft_model_check(const draft_model *dm, rh_err *e)
{
    uint8_t *seen = calloc(dm->total_pages ? dm->total_pages : 1, 1);
    if (!seen) return rh_fail(e, "draft check: out of memory");
    int rc = 0;
    uint64_t held = 0;
    for (uint32_t i = 0; i < dm->n_free && !rc; i++) {
        uint32_t p = dm->free_pages[i];
        if (p >= dm->total_pages || seen[p]++) rc = rh_fail(e, "draft pool: free page %u is listed twice or out of range", p);
    }
    for (uint32_t i = 0; i < dm->n_states && !rc; i++) {
        const dstate *st = dm->states[i];
        if (st->slot != i) rc = rh_fail(e, "draft state of request %llu: slot %u at %u", (unsigned long long)st->id, st->slot, i);
        else if (st->n_pages != pages_for(dm, st->kv))
            rc = rh_fail(e, "draft state of request %llu holds %u pages for %u tokens (%u needed)",
                         (unsigned long long)st->id, st->n_pages, st->kv, pages_for(dm, st->kv));
        for (uint32_t j = 0; j < st->n_pages && !rc; j++) {
            uint32_t p = st->pages[j];
            if (p >= dm->total_pages || seen[p]++)
                rc = rh_fail(e, "draft state of request %llu: page %u is also held elsewhere or out of range",
                             (unsigned long long)st->id, p);
        }
        held += st->n_pages;
    }
    if (!rc && held + dm->n_free != dm->total_pages)
        rc = rh_fail(e, "draft pool: %llu pages held + %u free != %u total", (unsigned long long)held, dm->n_free,
                     dm->total_pages);
    free(seen);
    return rc;
}
