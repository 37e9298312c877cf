/* server_impl.h — the server's private state, shared by server.c (life
 * cycle), server_jobs.c (jobs, the watch thread), server_sched.c (the
 * scheduler and runner threads), server_deliver.c (engine hooks, tokens to
 * connections, records) and http.c (libmicrohttpd). Never include elsewhere.
 *
 * A job is one HTTP completion request; each of its prompts is a choice,
 * one engine request. The HTTP side and the scheduler each hold a
 * reference to the job. Locks, always taken in this order:
 *   srv->reg_mu (the watch registry) -> job->mu -> srv->mu (inbox, flags).
 * Fields marked (sched) belong to the scheduler thread; (http) to whichever
 * HTTP thread serves the connection; (mu) are read and written under job->mu. */
#ifndef RH_SERVER_IMPL_H
#define RH_SERVER_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#include "engine/record/recorder.h"
#include "engine/serve/openai.h"
#include "engine/serve/prom.h"
#include "engine/serve/server.h"
#include "engine/serve/server_text.h"
#include "engine/model/tokenizer.h"
#include "util/conn_guard.h"

/* Text that grows (a /generate stream's whole text so far). */
typedef struct sbuf_text {
    char *p;
    size_t n, cap;
} sbuf_text;

/* One step's output of one choice, on its way to the connection. */
typedef struct sv_delivery {
    struct sv_delivery *next;
    uint32_t choice;
    char *text;                 /* valid UTF-8 */
    size_t len;
    int32_t *ids;
    uint32_t n_ids;
    float *lp;                  /* logprobs: one per id, and top_logprobs alternatives each; else NULL */
    logprob_entry *top;
    bool with_prompt;           /* echo with logprobs: the choice's prompt scores come first */
    uint32_t cached;            /* the choice's cached prompt tokens (/generate's meta_info) */
    uint32_t cached_host;       /* of which loaded back from the host tier */
    int32_t matched;            /* final, ended by a stop id: that id; else -1 */
    int finish;                 /* enum tr_finish; 0 while running */
} sv_delivery;

typedef struct sv_choice {
    struct sv_job *job;
    uint32_t index;
    uint64_t id;                /* the engine request's id */
    /* (sched) until the choice is done; read by HTTP once the job is done */
    int32_t *out;               /* committed ids, grown as they come (max_tokens may be the */
    double *times;              /*   whole context); when each was ready, server clock */
    uint32_t n_out, cap_out;    /* committed */
    uint32_t n_seen;            /* turned into text */
    uint32_t n_kept;            /* that count: a stop string ends the output early */
    uint32_t n_ids_sent;        /* handed out in deliveries */
    float *lp;                  /* logprobs asked: per committed id (grown with out) */
    logprob_entry *lp_top;      /*   and top_logprobs alternatives each */
    /* echo with logprobs: the prompt's scores, set on the first tokens and
     * never changed after, so deliveries and the response borrow them */
    float *plp;
    logprob_entry *plp_top;
    bool echo_sent;             /* echo: the prompt's text went out */
    double admitted_at;
    uint32_t cached, cached_host, retractions, spec_proposed, spec_accepted;
    bool queued;                /* counted in srv->n_queued */
    bool in_engine;             /* added, no FINISHED/ABORTED event yet */
    bool ended;                 /* no more tokens count */
    bool done;                  /* final delivery made, recorded */
    int finish;                 /* enum tr_finish once ended */
    sv_text text;
    bool dirty;
    bool held;                  /* ended, waiting for its record's flush (sv_deliver) */
    bool metered;               /* in /metrics (meter_and_record) */
    struct sv_choice *next_dirty;
} sv_choice;

enum sv_state { JOB_QUEUED = 0, JOB_RUNNING, JOB_REFUSED, JOB_DONE };

typedef struct sv_job {
    struct server *srv;
    pthread_mutex_t mu;
    int refs;                   /* (mu) */
    oa_request req;
    oa_ident ident;
    char id[48];
    double arrival;             /* s on the server clock, when the body was complete */
    uint64_t seed;
    uint32_t n_choices;
    sv_choice *choices;

    /* (mu) shared */
    int state;                  /* enum sv_state */
    oa_error err;               /* status != 0: the job failed or was refused with this */
    sv_delivery *head, *tail;
    uint32_t n_done;
    oa_usage usage;
    bool cancelled;             /* the client went away */
    bool cancel_queued;
    struct MHD_Connection *conn;/* NULL once the HTTP side let go */
    bool suspended;

    char **echo;                /* echo: each prompt's text, by prompt (choice / req.n); else NULL */
    size_t *echo_len;

    /* (http) */
    bool *started;              /* chat: the role was sent for choice i */
    uint32_t *text_offset;      /* completions' logprobs: characters written per choice */
    sbuf_text *sg_text;         /* /generate streams: each choice's whole text so far, and */
    uint32_t *sg_ids;           /*   its completion tokens so far */
    char *wbuf;                 /* stream bytes not yet written */
    size_t wn, wpos, wcap;
    bool stream_closed;         /* the last event is in wbuf */

    /* (sched) */
    uint32_t n_released;        /* choices done and out of the engine */
    struct sv_job *next_in;     /* inbox and cancel lists (srv->mu) */
    struct sv_job *live_prev, *live_next;
    /* (reg_mu) */
    struct sv_job *reg_prev, *reg_next;
    bool registered;
} sv_job;


/* An adapter load or unload asked over HTTP (server_lora.c). */
typedef struct sv_lora_op {
    bool load;                  /* else unload */
    char name[128], path[512];
    int status;                 /* 200, or the error's */
    char message[600];
} sv_lora_op;

/* An adapter as HTTP and /metrics see it. */
typedef struct sv_lora_entry {
    char name[128], path[512];
    uint32_t running, waiting;  /* its requests in the engine: decoding or prefilling, queued */
    uint64_t total;             /* every request it has taken */
} sv_lora_entry;

struct server {
    server_config cfg;
    char url[128];
    char model_name[256];
    char tok_kind[512];
    engine *g;
    tokenizer *tok;
    oa_limits lim;
    uint64_t pool_tokens;
    uint32_t block_size;        /* the recording's hash block: the page size */
    bool hicache;               /* a host KV tier: responses split cached tokens by tier (set at start) */
    prom *prom;
    recorder *rec;
    double t0;                  /* rh_now() at the server clock's zero */
    struct MHD_Daemon *d;
    uint16_t port;
    uint64_t id_salt;

    pthread_mutex_t mu;         /* inbox, cancels, flags, stats */
    pthread_cond_t wake;        /* to the scheduler: inbox, cancels, runner done, quit */
    pthread_cond_t runner_cv;   /* to the runner: go, quit */
    pthread_cond_t idle_cv;     /* to waiters: stats published */
    sv_job *inbox, *inbox_tail, *cancels;
    uint64_t flush_asked, flush_answered;   /* /flush_cache: asked by HTTP, answered by the scheduler */
    int64_t flush_result;       /* pages freed, or -1: requests were queued or running */
    bool quit, abort_all, runner_go, runner_done, runner_quit;
    int runner_rc;
    rh_err runner_err;
    core_stats stats;
    engine_spec_stats spec_pub; /* the speculative counters as last published */
    pthread_t sched_thread, runner_thread, watch_thread;
    bool sched_started, runner_started, watch_started;

    /* (sched) */
    sv_job *live;
    sv_choice *dirty;
    double cur_sched;           /* the step in flight: its preparation's CPU s */
    bool cur_hidden;
    rh_err fail;                /* the engine broke, or the recording failed */
    bool rec_failed;
    engine_spec_stats spec_seen;/* the speculative counters already in /metrics */
    uint64_t *hashes;           /* scratch for a prompt's block hashes */
    uint32_t cap_hashes;
    struct sv_held *held;       /* choices a step ended, until their records are flushed (server_deliver.c) */
    uint32_t n_held, cap_held;

    atomic_bool draining, broken;
    atomic_bool rec_said;       /* "the recording stopped" was printed (by whichever thread saw it first) */
    atomic_uint_fast64_t next_id, n_jobs, n_queued, n_conns;

    /* Open connections per client (for --max-connections-per-client) and
     * each header's deadline (--header-timeout): util/conn_guard.h, its
     * own lock; set by sv_http_start, freed by sv_http_stop. */
    rh_guard *guard;
    uint32_t client_cap;

    /* LoRA (server_lora.c). One load or unload at a time (lora_mu, taken
     * before mu): asked by HTTP under mu, done by the scheduler between
     * batches, answered under mu. The list of adapters, with their
     * requests, is the scheduler's copy for HTTP and /metrics (mu). */
    pthread_mutex_t lora_mu;
    uint64_t lora_asked, lora_answered;
    sv_lora_op lora_op;
    sv_lora_entry *lora_list;   /* (mu) */
    uint32_t n_lora_list;

    pthread_mutex_t reg_mu;     /* the watch registry */
    pthread_cond_t watch_cv;
    sv_job *reg;
    bool watch_quit;
};

/* server.c */
double sv_clock(const server *s);                   /* s since t0 */

/* server_jobs.c */
sv_job *sv_job_new(server *s, oa_request *req, double arrival);   /* takes req's contents; refs 1 */
void sv_job_unref(sv_job *j);
/* Hands a job to the scheduler with the connection suspended. 0, or -1 with
 * e filled (429 queue full, 503 draining): the caller answers e. */
int sv_submit(server *s, sv_job *j, struct MHD_Connection *conn, oa_error *e);
/* The HTTP side lets go (request completed or connection closed). */
void sv_release(sv_job *j);
/* Under j->mu: queue j for the scheduler to abort. */
void sv_cancel_locked(sv_job *j);
/* Aborts the in-flight jobs with id rid (all: every one); how many. */
uint32_t sv_abort_request(server *s, const char *rid, bool all);
/* Under j->mu: wake the connection if it is suspended. */
void sv_wake_locked(sv_job *j);
/* The watch thread: polls suspended connections for hang-ups. */
void *sv_watch_main(void *arg);

/* server_deliver.c */
engine_hooks sv_engine_hooks(server *s);
void sv_delivery_free(sv_delivery *d);
void sv_mark_dirty(server *s, sv_choice *c);     /* deliver() visits it next */
void sv_unqueue(server *s, sv_choice *c);        /* no longer counts as queued */
void sv_deliver(server *s);                      /* every dirty choice */
/* Prints "the recording stopped: MSG" once per server, from any thread. */
void sv_say_recording_stopped(server *s, const char *msg);
/* A choice that is done and out of the engine; the last of its job lets
 * the scheduler's reference go. */
void sv_release_choice(server *s, sv_choice *c);

/* server_sched.c */
/* /flush_cache from an HTTP thread: asks the scheduler and waits (at most
 * a few seconds) for its answer: the pages freed, -1 busy, -2 no answer. */
int64_t sv_flush_cache(server *s);
void *sv_sched_main(void *arg);
void *sv_runner_main(void *arg);

/* server_lora.c */
/* From an HTTP thread: loads or unloads an adapter through the scheduler
 * and waits for its answer; 0, or -1 with e (400 bad, 404 unknown, 503 no
 * answer). */
int sv_lora_op_ask(server *s, bool load, const char *name, const char *path, oa_error *e);
/* (sched) Serves an asked operation when no batch is in flight. */
void sv_lora_serve(server *s);
/* (sched) Whether an asked operation waits (s->mu held). */
bool sv_lora_waiting(const server *s);
/* (sched) The adapter list and its request counts, copied for HTTP (takes mu). */
void sv_lora_publish(server *s);
/* The adapter a job names: its id, or 0 with e filled (404) when not served. */
uint32_t sv_lora_resolve(server *s, const char *name, oa_error *e);

/* sglang_info.c: /get_server_info and /get_model_info bodies (malloc'd JSON) */
char *sv_server_info(server *s, size_t *len);
char *sv_model_info(server *s, size_t *len);

/* http.c */
int sv_http_start(server *s, rh_err *e);
void sv_http_stop(server *s);

#endif
