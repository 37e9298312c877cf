/* proxy_impl.h — the router proxy's private state, shared by proxy.c (life
 * cycle, workers' state, the health poller, /metrics), proxy_http.c
 * (libmicrohttpd, forwarding with libcurl) and proxy_record.c (the trace).
 * Never include elsewhere.
 *
 * Threads: libmicrohttpd's listener and one thread per client connection
 * (each forwards its own requests, moving the worker's bytes with its own
 * curl handle, so a blocked worker holds only its own clients); the health
 * poller; the connection guard's (util/conn_guard.h: it only shuts down
 * sockets whose header is late); the caller's (rp_start, rp_drain,
 * rp_stop).
 *
 * Locks: p->mu (the workers' state and the router core), p->rec_mu (the
 * trace writer) and p->poll_mu (the poller's wake-up) are each taken alone:
 * no thread holds two at once, so there is no order to break. Fields marked
 *   (const)  are set before any thread starts and only read after;
 *   (mu)     are read and written under p->mu;
 *   (rec)    under p->rec_mu;
 *   (poll)   under p->poll_mu;
 *   (atomic) by anyone, without a lock;
 *   (conn)   by the thread of the connection that owns the object. */
#ifndef RH_ROUTER_PROXY_IMPL_H
#define RH_ROUTER_PROXY_IMPL_H

#include <curl/curl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "client/bench.h"
#include "client/bench_xfer.h"
#include "router/proxy.h"
#include "util/conn_guard.h"

typedef struct rp_worker {
    char url[512];              /* (const) canonical, no trailing '/' */
    /* (mu) */
    bool healthy;
    uint32_t outstanding;       /* sent by us, not finished */
    double kv_use;              /* from its /metrics; 0 when it says none */
    uint64_t requests, errors;
    /* (atomic) bumped whenever the worker is found not answering (refused,
     * reset, timed out): requests in flight to it that were sent under an
     * older value give up on it. */
    atomic_uint_fast64_t down_epoch;
} rp_worker;

struct rproxy {
    rp_config cfg;              /* (const); cfg.workers points at w[].url */
    const char **urls;          /* (const) */
    rp_worker *w;               /* (const) the array; its fields as marked */
    uint32_t n;                 /* (const) */
    char url[128];              /* (const) */
    double t0;                  /* (const) rh_now() at start: the trace's zero */
    struct MHD_Daemon *d;       /* (const) while serving */
    rh_guard *guard;            /* (const) while serving; its own lock */
    uint32_t client_cap;        /* (const) open connections one client address may hold */

    pthread_mutex_t mu;
    router *core;               /* (mu) */
    router_replica *view;       /* (mu) scratch: what the core is told */

    pthread_mutex_t rec_mu;
    tr_writer *rec;             /* (rec) NULL: not recording, or stopped */
    bool rec_failed;            /* (rec) */
    uint64_t rec_written, rec_flushed;  /* (rec) records written, and those handed to the kernel */
    rh_err rec_err;             /* (rec) the first failure */

    pthread_mutex_t poll_mu;
    pthread_cond_t poll_cv;
    bool poll_quit;             /* (poll) */
    pthread_t poller;           /* (const) */
    bool poller_started;        /* (const) */

    atomic_bool draining, quit;
    atomic_uint_fast64_t live;  /* routed requests whose client is not yet answered in full */
    atomic_uint_fast64_t next_id;
};

/* proxy.c */
/* Marks worker i unhealthy (a transport failure: connection refused or
 * reset, a timeout) and says so on stderr once, naming it and why. */
void rp_worker_down(rproxy *p, uint32_t i, const char *why, bool cut_inflight);
/* The worker for a request with this prefix: picked by the core over every
 * worker's state, its outstanding and request counts raised; -1 when none
 * is healthy. */
int rp_pick(rproxy *p, const uint64_t *hashes, uint32_t n_hashes, uint64_t *epoch);
/* A request to worker i ended; failed: counted in its errors. */
void rp_finished(rproxy *p, uint32_t i, bool failed);
/* The first healthy worker at or after `from` (-1: none). */
int rp_first_healthy(rproxy *p, uint32_t from);
char *rp_metrics_text(rproxy *p, size_t *len);   /* malloc'd */
/* Prometheus text: the value of metric `name` (the largest over its label
 * sets), or -1 when absent. */
double rp_prom_value(const char *text, const char *name);

/* proxy_http.c */
int rp_http_start(rproxy *p, rh_err *e);
void rp_http_stop(rproxy *p);
/* An OpenAI error body {"error": {"message", "type", "param", "code"}}, malloc'd. */
char *rp_error_json(const char *message, const char *type, const char *code, size_t *len);

/* proxy_conn.c: the client connections (util/conn_guard.h holds them) */
/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION (cls: the rproxy): each
 * connection registered with the deadline of its first header, and taken
 * off before its socket closes. */
void rp_conn_event(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode code);
/* A request's header is in: its deadline off, the idle timeout on. The
 * client's open connections when they are more than p->client_cap (the
 * caller answers 429), else 0. */
uint64_t rp_conn_header_in(rproxy *p, struct MHD_Connection *c);
/* A response ended: the connection waits for the next request under the
 * idle timeout, its header due by the idle plus the header timeout. */
void rp_conn_response_done(rproxy *p, struct MHD_Connection *c);
/* Whether the client of a request being forwarded has gone: its socket
 * was closed or reset, or it shut its sending half (nginx's verdict as
 * well: such a client is taken to have left). *pending is set when it has
 * sent bytes not yet read (a pipelined request): the socket then polls
 * readable whether or not the client left, so callers stop waiting on it. */
bool rp_client_gone(int fd, bool *pending);

/* proxy_record.c */
int rp_record_open(rproxy *p, const char *model, rh_err *e);
/* One finished request: the observer's verdict as a trace record, handed
 * to the kernel (a whole zstd frame written) before this returns, so a
 * response sent after it survives a killed router in the trace. */
void rp_record(rproxy *p, uint64_t id, int worker, const rp_prompt *prompt, bench_xfer *obs, bench_result *res,
               CURLcode rc, bool aborted);
void rp_record_flush(rproxy *p);
int rp_record_close(rproxy *p, rh_err *e);

#endif
