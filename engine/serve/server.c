/* server.c — see server.h. The server's life cycle, its jobs and the
 * watch thread; the scheduler is server_sched.c, HTTP is http.c. */
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/serve/server_impl.h"
#include "util/progress.h"

#define WATCH_PERIOD_S 0.05    /* how soon a hung-up client is noticed */
#define STOP_WAIT_S 5.0        /* for answers to drain at shutdown */

void server_config_default(server_config *c)
{
    memset(c, 0, sizeof *c);
    engine_config_default(&c->engine);
    c->host = "127.0.0.1";
    c->port = 30000;
    c->max_connections = 1024;
    c->max_body_bytes = 32u << 20;
    c->http_threads = 4;
}

double sv_clock(const server *s)
{
    return rh_now() - s->t0;
}

static double clock_cb(void *ctx)
{
    return sv_clock(ctx);
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- jobs ---- */
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
    j->choices = calloc(j->n_choices, sizeof *j->choices);
    j->started = calloc(j->n_choices, sizeof *j->started);
    pthread_mutex_init(&j->mu, NULL);
    atomic_fetch_add(&s->n_jobs, 1);
    if (!j->choices || !j->started) goto oom;
    uint64_t first = atomic_fetch_add(&s->next_id, j->n_choices);
    for (uint32_t i = 0; i < j->n_choices; i++) {
        sv_choice *c = &j->choices[i];
        c->job = j;
        c->index = i;
        c->id = first + i;
        sv_text_init(&c->text, (const char *const *)j->req.stop, j->req.n_stop);
    }
    snprintf(j->id, sizeof j->id, "%s-%016llx", j->req.kind == OA_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)(s->id_salt ^ (first * 0x9e3779b97f4a7c15ull)));
    j->ident = (oa_ident){.id = j->id, .created = (long long)time(NULL), .model = s->model_name};
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
        sv_text_free(&j->choices[i].text);
    }
    free(j->choices);
    free(j->started);
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

static void *watch_main(void *arg)
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

/* ---- life cycle ---- */
static int is_dir(const char *p)
{
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int open_tokenizer(server *s, rh_err *e)
{
    const char *path = s->cfg.tokenizer, *model = s->cfg.engine.model;
    char probe[4200];
    if (!path && is_dir(model)) {
        snprintf(probe, sizeof probe, "%s/tokenizer.json", model);
        struct stat st;
        if (stat(probe, &st) == 0) path = model;
    }
    uint32_t vocab = engine_model(s->g)->vocab_size;
    if (path) {
        if (!(s->tok = tok_load(path, e))) return -1;
        snprintf(s->tok_kind, sizeof s->tok_kind, "%s", path);
    } else if (vocab >= TOK_BYTE_VOCAB) {
        if (!(s->tok = tok_new_bytes())) return rh_fail(e, "out of memory");
        snprintf(s->tok_kind, sizeof s->tok_kind, "bytes");
    } else {
        snprintf(s->tok_kind, sizeof s->tok_kind, "none (token ids only)");
        return 0;
    }
    if (tok_vocab_size(s->tok) > vocab)
        return rh_fail(e, "the tokenizer's %u ids do not fit the model's vocabulary of %u", tok_vocab_size(s->tok), vocab);
    return 0;
}

static int open_recording(server *s, rh_err *e)
{
    if (!s->cfg.record_path) return 0;
    tr_header h;
    tr_header_init(&h);
    h.block_size = s->block_size;
    int rc = engine_describe(s->g, &h);
    rc |= tr_header_set(&h, "source", "rehearse serve");
    rc |= tr_header_set(&h, "served-model-name", s->model_name);
    rc |= tr_header_set(&h, "tokenizer", s->tok_kind);
    rc |= tr_header_set(&h, "overlap-schedule", s->cfg.disable_overlap ? "off" : "on");
    if (rc) {
        tr_header_free(&h);
        return rh_fail(e, "out of memory");
    }
    s->rec = rec_open(s->cfg.record_path, &h, REC_THREAD, e);
    tr_header_free(&h);
    return s->rec ? 0 : -1;
}

static void destroy(server *s)
{
    if (s->rec) rec_abort(s->rec);
    engine_free(s->g);
    tok_free(s->tok);
    prom_free(s->prom);
    free(s->hashes);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->reg_mu);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->runner_cv);
    pthread_cond_destroy(&s->idle_cv);
    pthread_cond_destroy(&s->watch_cv);
    free(s);
}

static void stop_threads(server *s)
{
    if (s->watch_started) {
        pthread_mutex_lock(&s->reg_mu);
        s->watch_quit = true;
        pthread_cond_signal(&s->watch_cv);
        pthread_mutex_unlock(&s->reg_mu);
        pthread_join(s->watch_thread, NULL);
        s->watch_started = false;
    }
    sv_http_stop(s);
    if (s->sched_started) {
        pthread_mutex_lock(&s->mu);
        s->quit = true;
        pthread_cond_broadcast(&s->wake);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->sched_thread, NULL);
        s->sched_started = false;
    }
    if (s->runner_started) {
        pthread_mutex_lock(&s->mu);
        s->runner_quit = true;
        pthread_cond_signal(&s->runner_cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->runner_thread, NULL);
        s->runner_started = false;
    }
}

server *server_start(const server_config *c, rh_err *e)
{
    if (c->max_body_bytes < 64) return rh_fail(e, "--max-body-bytes must be at least 64"), NULL;
    if (!c->max_connections) return rh_fail(e, "--max-connections must be at least 1"), NULL;
    if (!c->http_threads || c->http_threads > 256) return rh_fail(e, "--http-threads must be in 1..256"), NULL;
    server *s = calloc(1, sizeof *s);
    if (!s) return rh_fail(e, "out of memory"), NULL;
    s->cfg = *c;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->reg_mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->runner_cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    pthread_cond_init(&s->watch_cv, NULL);
    atomic_init(&s->draining, false);
    atomic_init(&s->broken, false);
    atomic_init(&s->next_id, 1);
    atomic_init(&s->n_jobs, 0);
    atomic_init(&s->n_queued, 0);
    atomic_init(&s->n_conns, 0);
    s->t0 = rh_now();

    engine_config ec = c->engine;
    ec.clock = clock_cb;
    ec.clock_ctx = s;
    ec.hooks = sv_engine_hooks(s);
    if (!(s->g = engine_new(&ec, e))) goto fail;
    const core_config *k = core_get_config(engine_core(s->g));
    s->block_size = k->page_size;
    s->pool_tokens = (uint64_t)k->total_pages * k->page_size;
    snprintf(s->model_name, sizeof s->model_name, "%s",
             c->served_model_name ? c->served_model_name : engine_model(s->g)->name);
    if (open_tokenizer(s, e) < 0) goto fail;
    s->lim = (oa_limits){.tok = s->tok, .vocab = engine_model(s->g)->vocab_size, .context = k->context_length,
                         .model = s->model_name};
    if (!(s->prom = prom_new(s->model_name))) {
        rh_fail(e, "out of memory");
        goto fail;
    }
    if (open_recording(s, e) < 0) goto fail;
    s->id_salt = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^ ((uint64_t)(uintptr_t)s >> 4);
    s->t0 = rh_now();   /* the clock and the recording start when serving does */
    core_stats st;
    core_get_stats(engine_core(s->g), &st);
    prom_core(s->prom, &st);
    s->stats = st;

    int err = 0;
    if (!c->disable_overlap) {
        if ((err = pthread_create(&s->runner_thread, NULL, sv_runner_main, s))) goto threads;
        s->runner_started = true;
    }
    if ((err = pthread_create(&s->sched_thread, NULL, sv_sched_main, s))) goto threads;
    s->sched_started = true;
    if ((err = pthread_create(&s->watch_thread, NULL, watch_main, s))) goto threads;
    s->watch_started = true;
    if (sv_http_start(s, e) < 0) goto stop;
    return s;
threads:
    rh_fail(e, "cannot start the server's threads: %s", strerror(err));
stop:
    stop_threads(s);
fail:
    destroy(s);
    return NULL;
}

uint16_t server_port(const server *s) { return s->port; }
const char *server_url(const server *s) { return s->url; }
const char *server_model_name(const server *s) { return s->model_name; }
const char *server_tokenizer_kind(const server *s) { return s->tok_kind; }

void server_drain(server *s)
{
    atomic_store(&s->draining, true);
}

uint64_t server_live_requests(server *s)
{
    return atomic_load(&s->n_jobs);
}

void server_abort_all(server *s)
{
    pthread_mutex_lock(&s->mu);
    s->abort_all = true;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

void server_core_stats(server *s, core_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

int server_wait_idle(server *s, double timeout_s)
{
    double end = rh_now() + timeout_s;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    while (s->stats.running || s->stats.waiting || s->inbox) {
        double left = end - rh_now();
        if (left <= 0) {
            rc = -1;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (left < 0.05 ? left : 0.05);
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - floor(t)) * 1e9);
        pthread_cond_timedwait(&s->idle_cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void wait_jobs(server *s, double seconds)
{
    double end = rh_now() + seconds;
    while (atomic_load(&s->n_jobs) && rh_now() < end) sleep_s(0.002);
}

int server_stop(server *s, rh_err *e)
{
    if (!s) return 0;
    atomic_store(&s->draining, true);
    server_abort_all(s);
    wait_jobs(s, STOP_WAIT_S);
    if (atomic_load(&s->n_jobs)) {
        /* Clients that do not read their answers: cut them off, so no
         * connection is left suspended when libmicrohttpd stops. */
        pthread_mutex_lock(&s->reg_mu);
        for (sv_job *j = s->reg; j; j = j->reg_next) {
            pthread_mutex_lock(&j->mu);
            j->cancelled = true;
            sv_cancel_locked(j);
            sv_wake_locked(j);
            pthread_mutex_unlock(&j->mu);
        }
        pthread_mutex_unlock(&s->reg_mu);
        wait_jobs(s, 1.0);
    }
    stop_threads(s);
    int rc = 0;
    if (s->rec) {
        recorder *r = s->rec;
        s->rec = NULL;
        rh_err re = {{0}};
        if (rec_close(r, &re) < 0 && !s->rec_failed) {
            s->rec_failed = true;
            s->fail = re;
        }
    }
    if (s->fail.msg[0]) rc = rh_fail(e, "%s", s->fail.msg);
    destroy(s);
    return rc;
}
