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

/* Room for n more tokens of a choice. */
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
    c->cap_out = cap;
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
            sv_unqueue(s, c);
        }
        break;
    case CORE_EV_TOKENS:
        c->spec_proposed += ev->spec_proposed;
        c->spec_accepted += ev->spec_accepted;
        if (c->ended) break;   /* a stop string ended it; the abort is on its way */
        if (room(c, ev->n_tokens) < 0) {
            /* Out of memory for its tokens: it ends here, with an error. */
            c->ended = true;
            c->finish = TR_FINISH_ERROR;
            engine_abort(s->g, c->id);
        } else {
            for (uint32_t k = 0; k < ev->n_tokens; k++) {
                c->out[c->n_out] = ee->tokens[k];
                c->times[c->n_out++] = ev->now;
            }
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

static void deliver_choice(server *s, sv_choice *c)
{
    sv_job *j = c->job;
    const oa_request *rq = &j->req;
    char piece[512];
    while (c->n_seen < c->n_out && !c->text.stopped) {
        int32_t id = c->out[c->n_seen++];
        size_t n = is_stop_id(rq, id) ? 0 : sv_token_bytes(s->tok, id, piece, sizeof piece);
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
    sv_delivery *d = NULL;
    if (rq->stream && (len || final || (rq->return_token_ids && n_ids))) {
        d = calloc(1, sizeof *d);
        if (d) {
            d->choice = c->index;
            d->finish = final ? c->finish : 0;
            d->len = len;
            d->n_ids = n_ids;
            d->text = malloc(len + 1);
            d->ids = malloc((n_ids ? n_ids : 1) * sizeof *d->ids);
            if (!d->text || !d->ids) {
                sv_delivery_free(d);
                d = NULL;
            } else {
                if (len) memcpy(d->text, txt, len);
                d->text[len] = '\0';
                if (n_ids) memcpy(d->ids, c->out + c->n_ids_sent, n_ids * sizeof *d->ids);
            }
        }
    }
    c->n_ids_sent = c->n_kept;
    if (final) {
        c->done = true;
        meter_and_record(s, c);
    }

    pthread_mutex_lock(&j->mu);
    if (!d && rq->stream && (len || final)) {
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
        j->usage.prompt += rq->prompts[c->index].n;
        j->usage.completion += c->n_kept;
        j->usage.cached += c->cached < rq->prompts[c->index].n ? c->cached : rq->prompts[c->index].n;
        if (c->finish == TR_FINISH_ERROR && !j->err.status)
            oa_fail(&j->err, 500, NULL, NULL, "the engine could not finish the request");
        if (j->n_done == j->n_choices && j->state == JOB_RUNNING) j->state = JOB_DONE;
    }
    if ((d && rq->stream) || (final && j->n_done == j->n_choices)) sv_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
}

void sv_deliver(server *s)
{
    while (s->dirty) {
        sv_choice *c = s->dirty;
        s->dirty = c->next_dirty;
        c->dirty = false;
        deliver_choice(s, c);
        /* An abort applied at once marks c dirty again: it is released on
         * that visit, so the list never holds a freed choice. */
        if (c->done && !c->in_engine && !c->dirty) sv_release_choice(s, c);
    }
}
