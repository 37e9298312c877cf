/* server_sched.c — the scheduler thread (it alone drives the engine) and
 * the runner thread that computes a step while the scheduler thread
 * prepares the next; see server.h for who does what.
 *
 * One loop iteration with overlap:
 *   engine_step_begin (form the batch) -> hand it to the runner ->
 *   while it computes: intake (admit arrivals, apply aborts) and deliver
 *   (the previous step's tokens to text, connections, metrics, records) ->
 *   engine_step_end (commit; events only mark choices dirty).
 * Without overlap the same pieces run one after another on this thread.
 * Engine hooks do only bookkeeping: the work on a step's tokens waits for
 * deliver(), which is what overlap hides. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/serve/server_impl.h"
#include "traces/prompt.h"

/* CPU time of this thread: scheduling cost, not time spent waiting. */
static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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

static void mark_dirty(server *s, sv_choice *c)
{
    if (c->dirty) return;
    c->dirty = true;
    c->next_dirty = s->dirty;
    s->dirty = c;
}

static void unqueue(server *s, sv_choice *c)
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
            unqueue(s, c);
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
        mark_dirty(s, c);
        break;
    case CORE_EV_RETRACTED:
        c->retractions = ev->retractions;
        break;
    case CORE_EV_FINISHED:
    case CORE_EV_ABORTED:
        c->retractions = ev->retractions;
        c->in_engine = false;
        unqueue(s, c);
        if (!c->ended) {
            c->ended = true;
            c->finish = ev->kind == CORE_EV_ABORTED ? TR_FINISH_ABORT : ev->finish;
        }
        mark_dirty(s, c);
        break;
    default:
        break;
    }
}

static void record_fail(server *s, const rh_err *e)
{
    if (s->rec_failed) return;
    s->rec_failed = true;
    if (!s->fail.msg[0]) s->fail = *e;
    fprintf(stderr, "rehearse serve: the recording stopped: %s\n", e->msg);
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

static void release(server *s, sv_choice *c)
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

static void deliver(server *s)
{
    while (s->dirty) {
        sv_choice *c = s->dirty;
        s->dirty = c->next_dirty;
        c->dirty = false;
        deliver_choice(s, c);
        /* An abort applied at once marks c dirty again: it is released on
         * that visit, so the list never holds a freed choice. */
        if (c->done && !c->in_engine && !c->dirty) release(s, c);
    }
}

/* ---- intake: new jobs, cancellations, shutdown ---- */
static void link_live(server *s, sv_job *j)
{
    j->live_prev = NULL;
    j->live_next = s->live;
    if (s->live) s->live->live_prev = j;
    s->live = j;
}

/* Ends every choice of a job that never reached the engine. */
static void refuse(server *s, sv_job *j, const oa_error *err, bool cancelled)
{
    for (uint32_t i = 0; i < j->n_choices; i++) {
        sv_choice *c = &j->choices[i];
        unqueue(s, c);
        c->ended = c->done = true;   /* never in the engine: nothing to record */
        c->finish = cancelled ? TR_FINISH_ABORT : TR_FINISH_ERROR;
    }
    pthread_mutex_lock(&j->mu);
    j->state = JOB_REFUSED;
    if (!j->err.status) j->err = *err;
    j->n_done = j->n_choices;
    sv_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
    j->n_released = j->n_choices - 1;
    release(s, &j->choices[0]);
}

static void admit(server *s, sv_job *j, bool refuse_all)
{
    pthread_mutex_lock(&j->mu);
    bool cancelled = j->cancelled;
    pthread_mutex_unlock(&j->mu);
    link_live(s, j);
    oa_error err = {0};
    if (cancelled || refuse_all) {
        if (atomic_load(&s->broken))
            oa_fail(&err, 503, NULL, "engine_failed", "the engine failed and this server no longer serves: %s", s->fail.msg);
        else oa_fail(&err, 503, NULL, "server_shutdown", "the server is shutting down");
        refuse(s, j, &err, cancelled);
        return;
    }
    pthread_mutex_lock(&j->mu);
    j->state = JOB_RUNNING;
    pthread_mutex_unlock(&j->mu);
    bool failed = false;
    for (uint32_t i = 0; i < j->n_choices; i++) {
        sv_choice *c = &j->choices[i];
        const oa_prompt *p = &j->req.prompts[i];
        engine_request r = {
            .id = c->id,
            .prompt = p->ids,
            .prompt_len = p->n,
            .max_tokens = j->req.max_tokens,
            .sampling = j->req.sampling,
            .seed = j->seed,
            .ignore_eos = j->req.ignore_eos,
            .stop_ids = j->req.stop_ids,
            .n_stop_ids = j->req.n_stop_ids,
            .user = c,
        };
        rh_err e = {{0}};
        if (!failed && engine_add(s->g, &r, j->arrival, &e) == 0) {
            c->in_engine = true;
            continue;
        }
        /* Refused by the engine (or after a sibling was): recorded as an
         * error, as a replay records a refusal. */
        if (!failed) {
            failed = true;
            pthread_mutex_lock(&j->mu);
            oa_fail(&j->err, strstr(e.msg, "out of memory") ? 500 : 400, NULL, NULL, "%s", e.msg);
            pthread_mutex_unlock(&j->mu);
        }
        unqueue(s, c);
        c->ended = true;
        c->finish = TR_FINISH_ERROR;
        mark_dirty(s, c);
    }
    pthread_mutex_lock(&j->mu);
    if (failed) j->state = JOB_REFUSED;
    if (failed || j->req.stream) sv_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
    if (failed)
        for (uint32_t i = 0; i < j->n_choices; i++)
            if (j->choices[i].in_engine) engine_abort(s->g, j->choices[i].id);
}

static void cancel(server *s, sv_job *j)
{
    if (!atomic_load(&s->broken))
        for (uint32_t i = 0; i < j->n_choices; i++)
            if (j->choices[i].in_engine) engine_abort(s->g, j->choices[i].id);
    sv_job_unref(j);   /* the cancel list's reference */
}

static void abort_live(server *s)
{
    for (sv_job *j = s->live; j; j = j->live_next) {
        pthread_mutex_lock(&j->mu);
        if (!j->err.status) oa_fail(&j->err, 503, NULL, "server_shutdown", "the server is shutting down");
        pthread_mutex_unlock(&j->mu);
        for (uint32_t i = 0; i < j->n_choices; i++)
            if (j->choices[i].in_engine) engine_abort(s->g, j->choices[i].id);
    }
}

/* Takes everything waiting in the inbox and the cancel list and acts on it.
 * Returns true once the server asked the thread to quit. */
static bool intake(server *s, bool *abort_done)
{
    pthread_mutex_lock(&s->mu);
    sv_job *in = s->inbox, *cancels = s->cancels;
    s->inbox = s->inbox_tail = s->cancels = NULL;
    bool quit = s->quit, abort_all = s->abort_all;
    pthread_mutex_unlock(&s->mu);
    bool broken = atomic_load(&s->broken);
    if (abort_all && !*abort_done && !broken) {
        abort_live(s);
        *abort_done = true;
    }
    for (sv_job *n; in; in = n) {
        n = in->next_in;
        admit(s, in, abort_all || broken || quit);
    }
    for (sv_job *n; cancels; cancels = n) {
        n = cancels->next_in;
        cancel(s, cancels);
    }
    return quit;
}

/* The engine failed: it may only be freed now. Every request ends with an
 * error; the thread keeps answering (refusing) until told to quit. */
static void engine_broke(server *s, const rh_err *e)
{
    if (!atomic_load(&s->broken)) fprintf(stderr, "rehearse serve: the engine failed: %s\n", e->msg);
    if (!s->fail.msg[0] || s->rec_failed) s->fail = *e;
    atomic_store(&s->broken, true);
    for (sv_job *j = s->live; j; j = j->live_next) {
        pthread_mutex_lock(&j->mu);
        if (!j->err.status) oa_fail(&j->err, 500, NULL, "engine_failed", "the engine failed: %s", e->msg);
        pthread_mutex_unlock(&j->mu);
        for (uint32_t i = 0; i < j->n_choices; i++) {
            sv_choice *c = &j->choices[i];
            c->in_engine = false;
            if (!c->ended) {
                c->ended = true;
                c->finish = TR_FINISH_ERROR;
            }
            mark_dirty(s, c);
        }
    }
}

/* The engine's speculative counters since the last look, into /metrics:
 * a verify that accepted j drafts accepted one at every position below j. */
static void meter_spec(server *s)
{
    engine_spec_stats now;
    engine_get_spec_stats(s->g, &now);
    const engine_spec_stats *was = &s->spec_seen;
    if (now.verifies == was->verifies) return;
    prom_spec_counters d = {.drafts = now.verifies - was->verifies,
                            .draft_tokens = now.proposed - was->proposed,
                            .accepted_tokens = now.accepted - was->accepted};
    for (uint32_t p = 0; p < PROM_SPEC_POSITIONS; p++)
        for (uint32_t j = p + 1; j < ENGINE_SPEC_HIST; j++) d.accepted_at[p] += now.hist[j] - was->hist[j];
    prom_spec_add(s->prom, &d);
    s->spec_seen = now;
}

static void publish(server *s)
{
    core_stats st;
    core_get_stats(engine_core(s->g), &st);
    prom_core(s->prom, &st);
    meter_spec(s);
    pthread_mutex_lock(&s->mu);
    s->stats = st;
    pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
}

static bool work_waiting(const server *s, bool abort_done)
{
    return s->inbox || s->cancels || (s->abort_all && !abort_done);
}

void *sv_sched_main(void *arg)
{
    server *s = arg;
    bool overlap = !s->cfg.disable_overlap, abort_done = false, after_forward = false;
    double mark = thread_cpu();
    for (;;) {
        bool quit = intake(s, &abort_done);
        bool broken = atomic_load(&s->broken);
        bool idle = broken || engine_idle(s->g);
        /* With overlap the last step's tokens wait for the next forward,
         * unless there is none to hide behind. */
        if (!overlap || idle) deliver(s);
        if (idle) {
            publish(s);
            pthread_mutex_lock(&s->mu);
            bool more = work_waiting(s, abort_done);
            if (quit && !more && !s->dirty) {
                pthread_mutex_unlock(&s->mu);
                break;
            }
            if (!more && !s->quit && !s->dirty) pthread_cond_wait(&s->wake, &s->mu);
            pthread_mutex_unlock(&s->mu);
            mark = thread_cpu();
            after_forward = false;
            continue;
        }
        rh_err e = {{0}};
        int rc = engine_step_begin(s->g, &e);
        if (rc < 0) {
            engine_broke(s, &e);
            continue;
        }
        if (rc == 0) continue;
        s->cur_sched = thread_cpu() - mark;
        s->cur_hidden = overlap && after_forward;
        if (overlap) {
            pthread_mutex_lock(&s->mu);
            s->runner_go = true;
            pthread_cond_signal(&s->runner_cv);
            pthread_mutex_unlock(&s->mu);
            mark = thread_cpu();
            for (;;) {
                intake(s, &abort_done);
                deliver(s);
                pthread_mutex_lock(&s->mu);
                if (s->runner_done) {
                    s->runner_done = false;
                    rc = s->runner_rc;
                    e = s->runner_err;
                    pthread_mutex_unlock(&s->mu);
                    break;
                }
                if (!work_waiting(s, abort_done)) pthread_cond_wait(&s->wake, &s->mu);
                pthread_mutex_unlock(&s->mu);
            }
        } else {
            rc = engine_step_run(s->g, &e);
            mark = thread_cpu();
        }
        if (rc < 0 || engine_step_end(s->g, &e) < 0) {
            engine_broke(s, &e);
            continue;
        }
        after_forward = true;
        publish(s);
    }
    /* Whatever is still held (an engine that broke mid-request) is let go. */
    while (s->live) {
        sv_job *j = s->live;
        for (uint32_t i = 0; i < j->n_choices; i++) j->choices[i].in_engine = false;
        j->n_released = j->n_choices - 1;
        release(s, &j->choices[0]);
    }
    return NULL;
}

void *sv_runner_main(void *arg)
{
    server *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->runner_go && !s->runner_quit) pthread_cond_wait(&s->runner_cv, &s->mu);
        if (!s->runner_go) break;
        s->runner_go = false;
        pthread_mutex_unlock(&s->mu);
        rh_err e = {{0}};
        int rc = engine_step_run(s->g, &e);
        pthread_mutex_lock(&s->mu);
        s->runner_rc = rc;
        s->runner_err = e;
        s->runner_done = true;
        pthread_cond_broadcast(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
