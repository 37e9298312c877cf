/* server_deliver.c — what a step's tokens become: the engine hooks (which
 * only take note), then deliver(), which turns each touched choice's new
 * tokens into text (detokenizing, stop strings), hands them to its
 * connection, and meters and records a choice once it is over. With overlap
 * scheduling deliver() runs while the next step computes. Scheduler thread
 * only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/server_impl.h"
#include "traces/prompt.h"

void sv_delivery_free(sv_delivery *d)
{
    while (d) {
        sv_delivery *n = d->next;
        free(d->text);
        free(d->ids);
        free(d->lp);
        free(d->top);
        free(d);
        d = n;
    }
}

void sv_mark_dirty(server *s, sv_choice *c)
{
    if (c->dirty) return;
    c->dirty = true;
    c->next_dirty = s->dirty;
    s->dirty = c;
}

void sv_unqueue(server *s, sv_choice *c)
{
    if (!c->queued) return;
    c->queued = false;
    atomic_fetch_sub(&s->n_queued, 1);
}

/* Room for n more tokens of a choice (and their logprobs, when asked). */
static int room(sv_choice *c, uint32_t n)
{
    if (c->n_out + n <= c->cap_out) return 0;
    uint32_t cap = c->cap_out ? c->cap_out : 64;
    while (cap < c->n_out + n) cap *= 2;
    int32_t *o = realloc(c->out, cap * sizeof *o);
    if (o) c->out = o;
    double *t = o ? realloc(c->times, cap * sizeof *t) : NULL;
    if (t) c->times = t;
    if (!o || !t) return -1;
    const oa_request *rq = &c->job->req;
    if (rq->logprobs) {
        float *lp = realloc(c->lp, cap * sizeof *lp);
        if (lp) c->lp = lp;
        logprob_entry *top = lp ? realloc(c->lp_top, ((size_t)cap * rq->top_logprobs + 1) * sizeof *top) : NULL;
        if (top) c->lp_top = top;
        if (!lp || !top) return -1;
    }
    c->cap_out = cap;
    return 0;
}

/* The logprobs of a TOKENS event, kept with the choice's ids. */
static int keep_logprobs(sv_choice *c, const engine_event *ee)
{
    const oa_request *rq = &c->job->req;
    uint32_t k = rq->top_logprobs, n = ee->ev.n_tokens;
    if (ee->prompt_logprobs && !c->plp) {
        uint32_t len = rq->prompts[c->index].n;
        c->plp = malloc(len * sizeof *c->plp);
        c->plp_top = malloc(((size_t)len * k + 1) * sizeof *c->plp_top);
        if (!c->plp || !c->plp_top) return -1;
        memcpy(c->plp, ee->prompt_logprobs, len * sizeof *c->plp);
        memcpy(c->plp_top, ee->prompt_top, (size_t)len * k * sizeof *c->plp_top);
    }
    if (!ee->logprobs) return 0;
    memcpy(c->lp + c->n_out, ee->logprobs, n * sizeof *c->lp);
    memcpy(c->lp_top + (size_t)c->n_out * k, ee->top, (size_t)n * k * sizeof *c->lp_top);
    return 0;
}

/* ---- engine hooks: bookkeeping only ---- */
static void on_event(void *ctx, const engine_event *ee)
{
    server *s = ctx;
    const core_event *ev = &ee->ev;
    sv_choice *c = ee->user;
    switch (ev->kind) {
    case CORE_EV_ADMITTED:
        if (c->queued) {
            c->admitted_at = ev->now;
            c->cached = ev->cached_tokens;
            c->cached_host = ev->cached_host;
            sv_unqueue(s, c);
        }
        break;
    case CORE_EV_TOKENS:
        c->spec_proposed += ev->spec_proposed;
        c->spec_accepted += ev->spec_accepted;
        if (c->ended) break;   /* a stop string ended it; the abort is on its way */
        if (room(c, ev->n_tokens) < 0 || keep_logprobs(c, ee) < 0) {
            /* Out of memory for its tokens: it ends here, with an error. */
            c->ended = true;
            c->finish = TR_FINISH_ERROR;
            engine_abort(s->g, c->id);
        } else {
            for (uint32_t k = 0; k < ev->n_tokens; k++) {
                c->out[c->n_out] = ee->tokens[k];
                c->times[c->n_out++] = ev->now;
            }
            /* SGLang's --stream-interval: a stream waits for a run of
             * tokens, except its first (TTFT is not delayed); the end
             * delivers whatever is left. A request that is not streamed is
             * looked at every token: its stop strings end it at once. */
            uint32_t every = s->cfg.stream_interval;
            if (every > 1 && c->job->req.stream && c->n_seen > 0 && c->n_out - c->n_seen < every) break;
        }
        sv_mark_dirty(s, c);
        break;
    case CORE_EV_RETRACTED:
        c->retractions = ev->retractions;
        break;
    case CORE_EV_FINISHED:
    case CORE_EV_ABORTED:
        c->retractions = ev->retractions;
        c->in_engine = false;
        sv_unqueue(s, c);
        if (!c->ended) {
            c->ended = true;
            c->finish = ev->kind == CORE_EV_ABORTED ? TR_FINISH_ABORT : ev->finish;
        }
        sv_mark_dirty(s, c);
        break;
    default:
        break;
    }
}

void sv_say_recording_stopped(server *s, const char *msg)
{
    if (!atomic_exchange(&s->rec_said, true)) fprintf(stderr, "rehearse serve: the recording stopped: %s\n", msg);
}

static void record_fail(server *s, const rh_err *e)
{
    if (s->rec_failed) return;
    s->rec_failed = true;
    if (!s->fail.msg[0]) s->fail = *e;
    sv_say_recording_stopped(s, e->msg);
}

static void on_step(void *ctx, const tr_step *st)
{
    server *s = ctx;
    tr_step r = *st;
    r.sched_time = s->cur_sched;
    if (s->cur_hidden) r.flags |= TR_STEP_SCHED_HIDDEN;
    prom_step(s->prom, &r);
    rh_err e = {{0}};
    if (s->rec && !s->rec_failed && rec_step(s->rec, &r, &e) < 0) record_fail(s, &e);
}

static void on_message(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "rehearse serve: warning: %s\n", msg);
}

engine_hooks sv_engine_hooks(server *s)
{
    return (engine_hooks){.ctx = s, .on_event = on_event, .on_step = on_step, .on_message = on_message};
}

/* ---- a finished choice: metrics and its request record ---- */
static void meter_and_record(server *s, sv_choice *c)
{
    sv_job *j = c->job;
    const oa_prompt *p = &j->req.prompts[c->index];
    uint32_t n = c->n_kept;
    prom_request pr = {.arrival = j->arrival, .admitted = c->admitted_at > 0 ? c->admitted_at : j->arrival,
                       .token_times = c->times, .n_tokens = n, .prompt_tokens = p->n, .finish = c->finish};
    prom_request_done(s->prom, &pr);
    /* A prompt's n choices are adjacent (prompt-major): when the last of
     * them is metered, its request's parameters are. */
    c->metered = true;
    uint32_t k = j->req.n ? j->req.n : 1, first = c->index / k * k, most = 0;
    bool all = true;
    for (uint32_t i = first; i < first + k && i < j->n_choices; i++) {
        all = all && j->choices[i].metered;
        if (j->choices[i].n_kept > most) most = j->choices[i].n_kept;
    }
    if (all) prom_request_params(s->prom, k, j->req.max_tokens, most);
    if (!s->rec || s->rec_failed) return;

    uint32_t blocks = p->n / s->block_size;
    if (blocks > s->cap_hashes) {
        uint64_t *h = realloc(s->hashes, blocks * sizeof *h);
        if (!h) {
            rh_err e;
            rh_fail(&e, "request %llu: out of memory for its block hashes", (unsigned long long)c->id);
            record_fail(s, &e);
            return;
        }
        s->hashes = h;
        s->cap_hashes = blocks;
    }
    for (uint32_t k = 0; k < n; k++) c->times[k] -= j->arrival;   /* from the request's arrival, as traces keep them */
    tr_request q = {
        .id = c->id,
        .arrival = j->arrival,
        .input_len = p->n,
        .output_len = n,
        .flags = TR_REQ_MEASURED,
        .priority = j->req.priority,
        .n_hashes = tr_prompt_block_hashes(p->ids, p->n, s->block_size, 0, s->hashes),
        .hashes = s->hashes,
        .ttft = n ? c->times[0] : 0,
        .e2e = n ? c->times[n - 1] : sv_clock(s) - j->arrival,
        .cached_tokens = c->cached < p->n ? c->cached : p->n,
        .spec_proposed = c->spec_proposed,
        .spec_accepted = c->spec_accepted,
        .retractions = c->retractions,
        .finish = (uint8_t)c->finish,
        .n_times = n,
        .token_times = c->times,
    };
    rh_err e = {{0}};
    if (rec_request(s->rec, &q, &e) < 0) record_fail(s, &e);
}

/* ---- deliver: tokens to text, to the connection ---- */
static bool is_stop_id(const oa_request *r, int32_t id)
{
    for (uint32_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == id) return true;
    return false;
}

void sv_release_choice(server *s, sv_choice *c)
{
    sv_job *j = c->job;
    c->done = true;   /* (already) */
    if (++j->n_released < j->n_choices) return;
    if (j->live_prev) j->live_prev->live_next = j->live_next;
    else s->live = j->live_next;
    if (j->live_next) j->live_next->live_prev = j->live_prev;
    j->live_prev = j->live_next = NULL;
    sv_job_unref(j);
}

/* One stream delivery: the echo (once), the new text, the new ids and
 * their logprobs. NULL when out of memory. */
static sv_delivery *new_delivery(const sv_choice *c, const char *echo, size_t echo_len, const char *txt, size_t len,
                                 uint32_t n_ids, bool final)
{
    const oa_request *rq = &c->job->req;
    sv_delivery *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->choice = c->index;
    d->finish = final ? c->finish : 0;
    d->len = echo_len + len;
    d->n_ids = n_ids;
    d->with_prompt = echo && c->plp;
    d->cached = c->cached < rq->prompts[c->index].n ? c->cached : rq->prompts[c->index].n;
    d->cached_host = c->cached_host < d->cached ? c->cached_host : d->cached;
    d->matched = final && c->finish == TR_FINISH_STOP && !c->text.stopped && c->n_kept ? c->out[c->n_kept - 1] : -1;
    d->text = malloc(d->len + 1);
    d->ids = malloc((n_ids ? n_ids : 1) * sizeof *d->ids);
    bool ok = d->text && d->ids;
    if (ok && rq->logprobs) {
        uint32_t k = rq->top_logprobs;
        d->lp = malloc((n_ids ? n_ids : 1) * sizeof *d->lp);
        d->top = malloc(((size_t)n_ids * k + 1) * sizeof *d->top);
        ok = d->lp && d->top;
        if (ok && n_ids) {
            memcpy(d->lp, c->lp + c->n_ids_sent, n_ids * sizeof *d->lp);
            memcpy(d->top, c->lp_top + (size_t)c->n_ids_sent * k, (size_t)n_ids * k * sizeof *d->top);
        }
    }
    if (!ok) {
        sv_delivery_free(d);
        return NULL;
    }
    if (echo_len) memcpy(d->text, echo, echo_len);
    if (len) memcpy(d->text + echo_len, txt, len);
    d->text[d->len] = '\0';
    if (n_ids) memcpy(d->ids, c->out + c->n_ids_sent, n_ids * sizeof *d->ids);
    return d;
}

/* What prepare_choice hands on: the delivery (NULL: none) and whether the
 * choice ended with it. */
typedef struct prepared {
    sv_delivery *d;
    bool final;
    bool lost;                  /* a stream's delivery that could not be made (out of memory) */
} prepared;

/* A finished choice and what it hands on, held by sv_deliver. */
struct sv_held {
    sv_choice *c;
    prepared p;
};

/* Tokens to text and, once the choice is over, its metrics and record:
 * everything but handing it to the connection (publish). */
static prepared prepare_choice(server *s, sv_choice *c)
{
    sv_job *j = c->job;
    const oa_request *rq = &j->req;
    char piece[512];
    while (c->n_seen < c->n_out && !c->text.stopped) {
        int32_t id = c->out[c->n_seen++];
        size_t n = is_stop_id(rq, id) ? 0 : sv_token_bytes(s->tok, id, piece, sizeof piece);
        c->text.no_stop = c->n_seen < rq->rules.min_tokens;   /* no stop string ends it before min_tokens */
        int rc = sv_text_push(&c->text, piece, n);
        c->n_kept = c->n_seen;
        if (rc < 0 && !c->ended) {
            c->ended = true;
            c->finish = TR_FINISH_ERROR;
        }
        if (rc == 1) {
            /* The stop string ends the output here, whatever the engine
             * decided about this step. */
            c->ended = true;
            c->finish = TR_FINISH_STOP;
            if (c->in_engine && !atomic_load(&s->broken)) engine_abort(s->g, c->id);
        }
        if (rc) break;
    }
    bool final = c->ended && !c->done && (c->n_seen == c->n_out || c->text.stopped || c->text.oom);
    if (final) sv_text_finish(&c->text);
    size_t len;
    const char *txt = sv_text_take(&c->text, &len);
    uint32_t n_ids = c->n_kept - c->n_ids_sent;
    /* Echo: the prompt's text opens the choice's first delivery. */
    const char *echo = NULL;
    size_t echo_len = 0;
    if (rq->echo && !c->echo_sent && j->echo) {
        echo = j->echo[c->index / rq->n];
        echo_len = j->echo_len[c->index / rq->n];
    }
    sv_delivery *d = NULL;
    if (rq->stream && (len || final || echo || ((rq->return_token_ids || rq->logprobs || rq->kind == OA_GENERATE) && n_ids)))
        d = new_delivery(c, echo, echo_len, txt, len, n_ids, final);
    if (d || !rq->stream) c->echo_sent = true;
    c->n_ids_sent = c->n_kept;
    if (final) {
        c->done = true;
        meter_and_record(s, c);
    }
    return (prepared){d, final, !d && rq->stream && (len || final)};
}

/* Hands the delivery to the connection and, when final, ends the choice
 * there, waking what waits on it. */
static void publish_choice(sv_choice *c, prepared p)
{
    sv_job *j = c->job;
    const oa_request *rq = &j->req;
    sv_delivery *d = p.d;
    bool final = p.final;
    pthread_mutex_lock(&j->mu);
    if (p.lost) {
        /* Out of memory for the delivery: the stream cannot be complete. */
        if (!j->err.status) oa_fail(&j->err, 500, NULL, NULL, "out of memory while streaming");
    }
    if (d) {
        if (j->tail) j->tail->next = d;
        else j->head = d;
        j->tail = d;
    }
    if (final) {
        j->n_done++;
        if (c->index % rq->n == 0) j->usage.prompt += rq->prompts[c->index].n;   /* once per prompt, as OpenAI counts */
        j->usage.completion += c->n_kept;
        if (c->index % rq->n == 0)
            j->usage.cached += c->cached < rq->prompts[c->index].n ? c->cached : rq->prompts[c->index].n;
        if (c->finish == TR_FINISH_ERROR && !j->err.status)
            oa_fail(&j->err, 500, NULL, NULL, "the engine could not finish the request");
        if (j->n_done == j->n_choices && j->state == JOB_RUNNING) j->state = JOB_DONE;
    }
    if ((d && rq->stream) || (final && j->n_done == j->n_choices)) sv_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
}

/* Holds a finished choice until its record is flushed; false when out of
 * memory (it is published at once then, its record a frame later). */
static bool hold(server *s, sv_choice *c, prepared p)
{
    if (s->n_held == s->cap_held) {
        uint32_t cap = s->cap_held ? 2 * s->cap_held : 64;
        struct sv_held *h = realloc(s->held, cap * sizeof *h);
        if (!h) return false;
        s->held = h;
        s->cap_held = cap;
    }
    s->held[s->n_held++] = (struct sv_held){c, p};
    c->held = true;
    return true;
}

static void release_if_done(server *s, sv_choice *c)
{
    /* An abort applied at once marks c dirty again: it is released on
     * that visit, so the list never holds a freed choice. */
    if (c->done && !c->in_engine && !c->dirty && !c->held) sv_release_choice(s, c);
}

/* Every dirty choice delivered. A recorded choice that ends here is held:
 * its last bytes reach the client only after its record reached the kernel
 * (rec_flush: written, a whole frame), so a server killed at any moment
 * has in its trace every completion a client received. One flush for all
 * the choices a step ended. */
void sv_deliver(server *s)
{
    while (s->dirty) {
        sv_choice *c = s->dirty;
        s->dirty = c->next_dirty;
        c->dirty = false;
        prepared p = prepare_choice(s, c);
        if (p.final && s->rec && !s->rec_failed && hold(s, c, p)) continue;
        publish_choice(c, p);
        release_if_done(s, c);
    }
    if (!s->n_held) return;
    rh_err e = {{0}};
    if (!s->rec_failed && rec_flush(s->rec, &e) < 0) record_fail(s, &e);
    for (uint32_t i = 0; i < s->n_held; i++) {
        sv_choice *c = s->held[i].c;
        c->held = false;
        publish_choice(c, s->held[i].p);
        release_if_done(s, c);
    }
    s->n_held = 0;
}
