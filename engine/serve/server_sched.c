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
#include "util/hash.h"

/* CPU time of this thread: scheduling cost, not time spent waiting. */
static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
        sv_unqueue(s, c);
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
    sv_release_choice(s, &j->choices[0]);
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
    uint32_t adapter = 0;
    if (j->req.adapter[0] && !(adapter = sv_lora_resolve(s, j->req.adapter, &err))) {
        refuse(s, j, &err, false);
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
            .rules = j->req.rules,
            .logprobs = j->req.logprobs,
            .top_logprobs = j->req.top_logprobs,
            .prompt_logprobs = j->req.echo && j->req.logprobs,
            .priority = j->req.priority,
            .adapter = adapter,
            .user = c,
        };
        /* The n choices of one prompt draw from streams of their own. */
        if (i % j->req.n) r.seed = rh_hash64(j->seed ^ rh_hash64(i % j->req.n));
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
        sv_unqueue(s, c);
        c->ended = true;
        c->finish = TR_FINISH_ERROR;
        sv_mark_dirty(s, c);
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
    if (s->flush_asked != s->flush_answered) {
        /* As SGLang does: only when nothing is queued or running (new
         * requests in the inbox count as queued). */
        s->flush_result = in || atomic_load(&s->broken) ? -1 : engine_flush_cache(s->g);
        s->flush_answered = s->flush_asked;
        pthread_cond_broadcast(&s->idle_cv);
    }
    pthread_mutex_unlock(&s->mu);
    sv_lora_serve(s);
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
            sv_mark_dirty(s, c);
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
        for (uint32_t j = p + 1; j < SPEC_HIST_BINS; j++) d.accepted_at[p] += now.hist[j] - was->hist[j];
    prom_spec_add(s->prom, &d);
    s->spec_seen = now;
}

static void publish(server *s)
{
    if (engine_lora_count(s->g) || s->n_lora_list) sv_lora_publish(s);
    core_stats st;
    core_get_stats(engine_core(s->g), &st);
    prom_core(s->prom, &st);
    meter_spec(s);
    pthread_mutex_lock(&s->mu);
    s->stats = st;
    s->spec_pub = s->spec_seen;
    pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
}

static bool work_waiting(const server *s, bool abort_done)
{
    return s->inbox || s->cancels || (s->abort_all && !abort_done) || s->flush_asked != s->flush_answered ||
           sv_lora_waiting(s);
}

int64_t sv_flush_cache(server *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t mine = ++s->flush_asked;
    pthread_cond_signal(&s->wake);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    int rc = 0;
    while (s->flush_answered < mine && rc == 0) rc = pthread_cond_timedwait(&s->idle_cv, &s->mu, &until);
    int64_t r = s->flush_answered >= mine ? s->flush_result : -2;
    pthread_mutex_unlock(&s->mu);
    return r;
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
        if (!overlap || idle) sv_deliver(s);
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
                sv_deliver(s);
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
        sv_release_choice(s, &j->choices[0]);
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
