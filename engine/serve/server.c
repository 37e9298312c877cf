/* server.c — see server.h. The server's life cycle: start, the public
 * calls, stop. Jobs and the watch thread are server_jobs.c; the scheduler
 * server_sched.c and server_deliver.c; HTTP http.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/serve/server_impl.h"
#include "util/progress.h"

#define STOP_WAIT_S 5.0        /* for answers to drain at shutdown */

void server_config_default(server_config *c)
{
    memset(c, 0, sizeof *c);
    engine_config_default(&c->engine);
    c->host = "127.0.0.1";
    c->port = 30000;
    c->max_connections = 4096;
    c->header_timeout_s = 10;
    c->idle_timeout_s = 30;
    c->max_body_bytes = 32u << 20;
    c->http_threads = 4;
    c->stream_interval = 1;
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

/* ---- life cycle ---- */
static int open_tokenizer(server *s, rh_err *e)
{
    char installed[4400];
    uint32_t vocab = engine_model(s->g)->vocab_size;
    const char *path = tok_path_for(s->cfg.engine.model, s->cfg.tokenizer, vocab, installed, sizeof installed);
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

/* The writer thread's failure (a full disk), said when it happens rather
 * than with the next request's record; serving goes on. */
static void recording_stopped(void *ctx, const char *msg)
{
    sv_say_recording_stopped(ctx, msg);
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
    if (!s->rec) return -1;
    rec_on_error(s->rec, recording_stopped, s);
    return 0;
}

static void destroy(server *s)
{
    if (s->rec) rec_abort(s->rec);
    engine_free(s->g);
    tok_free(s->tok);
    prom_free(s->prom);
    free(s->hashes);
    free(s->held);
    free(s->lora_list);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->reg_mu);
    pthread_mutex_destroy(&s->lora_mu);
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
    /* An empty key would admit anyone who sends "Bearer " (an unset
     * variable in `--api-key "$KEY"`): refuse it rather than serve open. */
    if (c->api_key && !*c->api_key)
        return rh_fail(e, "--api-key is empty: give a key, or leave the flag out to serve without one"), NULL;
    server *s = calloc(1, sizeof *s);
    if (!s) return rh_fail(e, "out of memory"), NULL;
    s->cfg = *c;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->reg_mu, NULL);
    pthread_mutex_init(&s->lora_mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->runner_cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    pthread_cond_init(&s->watch_cv, NULL);
    atomic_init(&s->draining, false);
    atomic_init(&s->broken, false);
    atomic_init(&s->rec_said, false);
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
    s->hicache = k->enable_hierarchical_cache;
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
    prom_cache_config(s->prom, k->page_size, k->total_pages, !k->disable_radix_cache);
    prom_max_running(s->prom, k->max_running_requests);
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
    if ((err = pthread_create(&s->watch_thread, NULL, sv_watch_main, s))) goto threads;
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
