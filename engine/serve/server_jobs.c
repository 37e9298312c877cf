/* server_jobs.c — a job's life (created by an HTTP thread, handed to the
 * scheduler, let go by both) and the watch thread that notices clients who
 * hang up while their connection is suspended. See server_impl.h for the
 * references and the lock order. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/serve/server_impl.h"

#define WATCH_PERIOD_S 0.05    /* how soon a hung-up client is noticed */

/* ---- jobs ---- */
/* Echo: each distinct prompt's text, special tokens left out as in any
 * output text. */
static int echo_texts(server *s, sv_job *j)
{
    uint32_t n = j->n_choices / j->req.n;
    j->echo = calloc(n, sizeof *j->echo);
    j->echo_len = calloc(n, sizeof *j->echo_len);
    if (!j->echo || !j->echo_len) return -1;
    for (uint32_t i = 0; i < n; i++) {
        const oa_prompt *p = &j->req.prompts[i * j->req.n];
        size_t len = 0;
        char *raw = s->tok ? tok_decode(s->tok, p->ids, p->n, 1, &len) : NULL;
        j->echo[i] = sv_utf8_clean(raw ? raw : "", raw ? len : 0, &j->echo_len[i]);
        free(raw);
        if (!j->echo[i]) return -1;
    }
    return 0;
}

sv_job *sv_job_new(server *s, oa_request *req, double arrival)
{
    sv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->srv = s;
    j->refs = 1;
    j->req = *req;
    memset(req, 0, sizeof *req);
    j->arrival = arrival;
    j->n_choices = j->req.n_prompts;
    if (!j->req.n) j->req.n = 1;
    j->choices = calloc(j->n_choices, sizeof *j->choices);
    j->started = calloc(j->n_choices, sizeof *j->started);
    j->text_offset = calloc(j->n_choices, sizeof *j->text_offset);
    pthread_mutex_init(&j->mu, NULL);
    atomic_fetch_add(&s->n_jobs, 1);
    if (!j->choices || !j->started || !j->text_offset || (j->req.echo && echo_texts(s, j) < 0)) goto oom;
    uint64_t first = atomic_fetch_add(&s->next_id, j->n_choices);
    for (uint32_t i = 0; i < j->n_choices; i++) {
        sv_choice *c = &j->choices[i];
        c->job = j;
        c->index = i;
        c->id = first + i;
        sv_text_init(&c->text, (const char *const *)j->req.stop, j->req.n_stop);
    }
    if (j->req.rid[0]) snprintf(j->id, sizeof j->id, "%s", j->req.rid);   /* SGLang answers with the client's rid */
    else snprintf(j->id, sizeof j->id, "%s%016llx", j->req.kind == OA_CHAT ? "chatcmpl-" : j->req.kind == OA_GENERATE ? "" : "cmpl-",
                  (unsigned long long)(s->id_salt ^ (first * 0x9e3779b97f4a7c15ull)));
    /* an adapter's answer names the adapter, as vLLM's does */
    j->ident = (oa_ident){.id = j->id, .created = (long long)time(NULL),
                          .model = j->req.adapter[0] ? j->req.adapter : s->model_name};
    /* Without a seed each request still gets its own stream, reproducible
     * from the server's --seed and the request's order. */
    j->seed = j->req.has_seed ? j->req.seed : s->cfg.seed ^ (first * 0xbf58476d1ce4e5b9ull);
    return j;
oom:
    sv_job_unref(j);
    return NULL;
}

void sv_job_unref(sv_job *j)
{
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    server *s = j->srv;
    for (uint32_t i = 0; j->choices && i < j->n_choices; i++) {
        free(j->choices[i].out);
        free(j->choices[i].times);
        free(j->choices[i].lp);
        free(j->choices[i].lp_top);
        free(j->choices[i].plp);
        free(j->choices[i].plp_top);
        sv_text_free(&j->choices[i].text);
    }
    free(j->choices);
    free(j->started);
    free(j->text_offset);
    for (uint32_t i = 0; j->sg_text && i < j->n_choices; i++) free(j->sg_text[i].p);
    free(j->sg_text);
    free(j->sg_ids);
    for (uint32_t i = 0; j->echo && i < j->n_choices / j->req.n; i++) free(j->echo[i]);
    free(j->echo);
    free(j->echo_len);
    free(j->wbuf);
    sv_delivery_free(j->head);
    oa_request_free(&j->req);
    pthread_mutex_destroy(&j->mu);
    free(j);
    atomic_fetch_sub(&s->n_jobs, 1);
}

void sv_wake_locked(sv_job *j)
{
    if (!j->suspended || !j->conn) return;
    j->suspended = false;
    MHD_resume_connection(j->conn);
}

void sv_cancel_locked(sv_job *j)
{
    if (j->cancel_queued || j->state == JOB_DONE || j->state == JOB_REFUSED) return;
    j->cancel_queued = true;
    j->refs++;
    server *s = j->srv;
    pthread_mutex_lock(&s->mu);
    j->next_in = s->cancels;
    s->cancels = j;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

int sv_submit(server *s, sv_job *j, struct MHD_Connection *conn, oa_error *e)
{
    if (atomic_load(&s->broken))
        return oa_fail(e, 503, NULL, "engine_failed", "the engine failed; this server no longer serves");
    if (atomic_load(&s->draining)) return oa_fail(e, 503, NULL, "server_shutdown", "the server is shutting down");
    uint64_t queued = atomic_fetch_add(&s->n_queued, j->n_choices);
    if (s->cfg.max_queued_requests && queued + j->n_choices > s->cfg.max_queued_requests) {
        atomic_fetch_sub(&s->n_queued, j->n_choices);
        return oa_fail(e, 429, NULL, "too_many_requests",
                       "%llu requests are already waiting to be scheduled (--max-queued-requests %u); try again later",
                       (unsigned long long)queued, s->cfg.max_queued_requests);
    }
    for (uint32_t i = 0; i < j->n_choices; i++) j->choices[i].queued = true;
    pthread_mutex_lock(&s->reg_mu);
    j->reg_next = s->reg;
    j->reg_prev = NULL;
    if (s->reg) s->reg->reg_prev = j;
    s->reg = j;
    j->registered = true;
    pthread_mutex_lock(&j->mu);
    j->conn = conn;
    /* Suspended before the scheduler can see the job, so its first wake-up
     * always finds the connection suspended. */
    j->suspended = true;
    MHD_suspend_connection(conn);
    j->refs++;   /* the scheduler's */
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_unlock(&s->reg_mu);

    pthread_mutex_lock(&s->mu);
    j->next_in = NULL;
    if (s->inbox_tail) s->inbox_tail->next_in = j;
    else s->inbox = j;
    s->inbox_tail = j;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void sv_release(sv_job *j)
{
    server *s = j->srv;
    pthread_mutex_lock(&s->reg_mu);
    if (j->registered) {
        if (j->reg_prev) j->reg_prev->reg_next = j->reg_next;
        else s->reg = j->reg_next;
        if (j->reg_next) j->reg_next->reg_prev = j->reg_prev;
        j->registered = false;
    }
    pthread_mutex_lock(&j->mu);
    j->conn = NULL;
    j->suspended = false;
    if (j->state != JOB_DONE && j->state != JOB_REFUSED) {
        j->cancelled = true;
        sv_cancel_locked(j);
    }
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_unlock(&s->reg_mu);
    sv_job_unref(j);
}

/* SGLang's /abort_request: the in-flight jobs whose id is rid (every one
 * with all) are aborted as a hang-up would abort them, except that the
 * client is still there and gets its answer, finish reason "abort". */
uint32_t sv_abort_request(server *s, const char *rid, bool all)
{
    uint32_t n = 0;
    pthread_mutex_lock(&s->reg_mu);
    for (sv_job *j = s->reg; j; j = j->reg_next) {
        if (!all && strcmp(j->id, rid)) continue;
        pthread_mutex_lock(&j->mu);
        if (!j->cancel_queued && j->state != JOB_DONE && j->state != JOB_REFUSED) {
            sv_cancel_locked(j);
            n++;
        }
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&s->reg_mu);
    return n;
}

/* ---- the watch thread ----
 * A suspended connection is out of libmicrohttpd's event loop, so a client
 * that hangs up while its request waits or computes would go unnoticed until
 * the next write. Polling each suspended socket for a hang-up (under the
 * job's lock, so nothing resumes or closes it meanwhile) catches it within
 * one period. */
static bool hung_up(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

void *sv_watch_main(void *arg)
{
    server *s = arg;
    pthread_mutex_lock(&s->reg_mu);
    while (!s->watch_quit) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(WATCH_PERIOD_S * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->watch_cv, &s->reg_mu, &ts);
        for (sv_job *j = s->reg; j && !s->watch_quit; j = j->reg_next) {
            pthread_mutex_lock(&j->mu);
            if (j->suspended && j->conn && !j->cancelled && hung_up(j->conn)) {
                j->cancelled = true;
                sv_cancel_locked(j);
                sv_wake_locked(j);   /* libmicrohttpd closes it and reports the request done */
            }
            pthread_mutex_unlock(&j->mu);
        }
    }
    pthread_mutex_unlock(&s->reg_mu);
    return NULL;
}

