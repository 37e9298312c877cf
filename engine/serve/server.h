/* server.h — `rehearse serve`: the engine behind an OpenAI-compatible HTTP
 * server, recording what it serves.
 *
 * Threads, and what each owns:
 *   HTTP threads (libmicrohttpd's pool, epoll): read and check requests,
 *     tokenize prompts, write responses and stream chunks; a connection that
 *     waits on the engine is suspended, and resumed when there is something
 *     to send.
 *   the scheduler thread: owns the engine. It admits requests from an inbox,
 *     steps the engine, turns each step's tokens into text (detokenizing,
 *     stop strings), hands them to the connections, and records every
 *     request and step (engine/record, background writer thread).
 *   the runner thread (overlap scheduling, the default): computes step n
 *     (engine_step_run) while the scheduler thread prepares step n+1: it
 *     admits new arrivals, applies aborts, and detokenizes, streams, records
 *     and meters step n-1's tokens. Only the core's own commit and batch
 *     decision (engine_step_end, engine_step_begin) wait for the forward.
 *     With disable_overlap everything runs on the scheduler thread in turn.
 *   a watch thread: every 50 ms, notices suspended clients that hung up.
 * Each step record's sched_time is the scheduler thread's CPU time between
 * the launches of two forwards (the preparation of the step), and
 * TR_STEP_SCHED_HIDDEN says that preparation ran alongside the previous
 * step's forward.
 *
 * A request whose client disconnects is aborted and its pages freed; at
 * shutdown the server stops admitting (503), lets running requests finish
 * or aborts them, and closes the recording cleanly. The recording is live
 * (REC_THREAD): a killed server leaves a trace readable up to its last
 * second. A recording that cannot be written (a full disk) stops with one
 * message on stderr when it happens, keeps what it flushed (readable, cut
 * short), and serving goes on; server_stop then reports it. Requests
 * refused before reaching the engine (bad input, full queue) are not
 * recorded. */
#ifndef RH_SERVER_H
#define RH_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "util/err.h"

typedef struct server_config {
    engine_config engine;           /* model, weights, every core knob; the server sets hooks and clock */
    const char *tokenizer;          /* tokenizer.json or its directory; NULL: the model directory's, else
                                       bytes (when the vocabulary has room), else token ids only */
    const char *served_model_name;  /* NULL: the model's name */
    const char *host;               /* address to bind; "127.0.0.1" */
    uint16_t port;                  /* 0: any free port */
    const char *api_key;            /* non-NULL: /v1/ needs "Authorization: Bearer KEY" (401) */
    const char *record_path;        /* the live trace; NULL: none */
    uint32_t max_queued_requests;   /* requests waiting for admission beyond this: 429; 0: no limit */
    uint32_t max_connections;       /* open connections beyond this: 503 */
    uint32_t max_connections_per_client;  /* one client's (IP's) open connections beyond this: 503, and
                                       beyond it plus a margin (64 at most, half of what the cap
                                       leaves the others) refused at accept; 0: half of max_connections */
    uint32_t header_timeout_s;      /* a request's whole header must be in within this of the connection's
                                       start (a kept-alive one's: of the last response's end plus
                                       idle_timeout_s), or its socket is closed unanswered */
    uint32_t idle_timeout_s;        /* a connection with no request in progress is closed after this */
    size_t max_body_bytes;          /* larger bodies: 413 */
    uint32_t http_threads;          /* libmicrohttpd's thread pool */
    bool disable_overlap;           /* --disable-overlap-schedule */
    uint32_t stream_interval;       /* --stream-interval: a stream's tokens go out in runs of this many
                                       (the first at once, the last at the end); 1: each as it comes */
    uint64_t seed;                  /* sampling seeds of requests that give none */
} server_config;

/* 127.0.0.1, port 30000, 4096 connections (half of them per client), header
 * and idle timeouts of 10 and 30 s, 32 MiB bodies, 4 HTTP threads. */
void server_config_default(server_config *c);

typedef struct server server;

/* Loads the model, opens the recording, starts the threads and listens. */
server *server_start(const server_config *c, rh_err *e);
uint16_t server_port(const server *s);
const char *server_url(const server *s);          /* "http://HOST:PORT" */
const char *server_model_name(const server *s);
const char *server_tokenizer_kind(const server *s); /* "bytes", a path, or "none" */

/* Stops admitting: new completions get 503 and /health says so. */
void server_drain(server *s);
/* Requests (HTTP requests with a completion) not yet answered. */
uint64_t server_live_requests(server *s);
/* Aborts everything in flight (streams end with an error event). */
void server_abort_all(server *s);
/* The core's stats as of the scheduler's last step or idle moment. */
void server_core_stats(server *s, core_stats *out);
/* Waits up to timeout_s for the core to show `running` == 0 and
 * `waiting` == 0; 0 when it did, -1 on timeout. For tests and shutdown. */
int server_wait_idle(server *s, double timeout_s);
/* Aborts what is left, stops every thread, closes the recording, frees s.
 * -1 with a message when the recording could not be completed or the
 * engine broke while serving. */
int server_stop(server *s, rh_err *e);

#endif
