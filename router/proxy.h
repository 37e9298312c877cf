/* proxy.h — `rehearse router`: an OpenAI-compatible HTTP proxy in front of
 * N workers (`rehearse serve` of any backend, SGLang, vLLM), each request
 * sent to the worker the router core (engine/router/router.h) picks from
 * the workers' state.
 *
 * Routed: POST /v1/completions, /v1/chat/completions and /generate. The body
 * goes to the worker unchanged (with the client's Authorization header);
 * the worker's status, Content-Type and body come back unchanged. A stream
 * (Content-Type text/event-stream) is passed on event by event as the bytes
 * arrive: what has arrived is written up to its last complete event, so a
 * cut stream never leaves the client half an event. Anything else is read
 * whole, then answered.
 * Also: GET /v1/models and /v1/models/{id} (the first healthy worker's,
 * passed through), GET /health (200 while any worker is healthy, else 503),
 * GET /metrics (Prometheus text, per worker: rehearse_router_requests_total,
 * rehearse_router_outstanding, _errors_total, _worker_healthy,
 * _worker_kv_use; and rehearse_router_live_requests,
 * rehearse_router_client_connections (open now),
 * rehearse_router_header_timeouts_total (closed by --header-timeout) and
 * rehearse_router_policy_errors_total, the Lua policy's failed calls).
 *
 * The state the core is given, per worker:
 *   healthy      the health poller's verdict, and the requests': a worker
 *                that refuses or resets a connection or times out is taken
 *                out at once; the poller (GET /health every
 *                health_interval_s, health_timeout_s to answer) brings it
 *                back when /health answers 2xx again;
 *   outstanding  the requests this router sent it and has not seen finish;
 *   kv_use       from its /metrics, read by the same poller:
 *                sglang:token_usage, else vllm:gpu_cache_usage_perc, else
 *                vllm:kv_cache_usage_perc (the largest over label sets);
 *                0 when it exports none.
 * A request to a worker that refuses the connection (nothing reached it)
 * is sent to the next pick; any other failure is the client's answer:
 * before the response started, a 502 OpenAI error naming the worker; in a
 * stream, a final `data: {"error": {...}}` event and `data: [DONE]`. When
 * the poller finds a worker not answering, its requests in flight end the
 * same way instead of waiting on it.
 *
 * Hostile or careless clients (router/proxy_conn.c):
 *   - a request's whole header is due header_timeout_s after the
 *     connection opened (a kept-alive one: idle_timeout_s + header_timeout_s
 *     after the last response ended), however slowly it trickles in, as
 *     nginx's client_header_timeout; past it the socket is closed
 *     unanswered. A connection silent for idle_timeout_s while none of its
 *     requests is being forwarded is closed (libmicrohttpd's timeout);
 *   - one client address holds at most max_connections_per_client (half
 *     of max_connections unless set): its next request gets 429
 *     too_many_connections naming the flag, and a few connections past it
 *     (rh_guard_client_margin, at most 64) are closed at accept, so one
 *     address's flood of silent or dripping sockets leaves the others their
 *     slots;
 *   - a client that leaves (closes, resets, or shuts down its sending half)
 *     while its request is forwarded, streamed or not, is noticed at once:
 *     the worker's connection is closed (SGLang and vLLM abort a request
 *     whose connection closes), its outstanding count drops, and nothing is
 *     answered;
 *   - a worker's answer that is not a stream is held whole up to
 *     max_response_bytes, and so is one event of a stream (a stream itself
 *     is passed on as it comes, never held); past that the client gets a
 *     502 response_too_large (in a stream: the final error event) and the
 *     worker's connection is closed.
 *
 * The prefix the core is given (cache-aware) is rp_prompt_hashes below.
 *
 * The recording (record_path): one measured request record per routed
 * request (tr_writer, live: a killed router leaves a readable trace, and
 * each record is in the kernel's hands before its client gets the end of
 * its answer, a stream's [DONE] held back until then, so after a SIGKILL
 * every completion a client received is in the trace), with
 * client-side timings taken as `rehearse bench --record-trace` takes them
 * (client/bench_xfer.h's observer on the bytes passed on): arrival when the
 * body was complete, TTFT, every content chunk's time, E2E, usage's token
 * counts when the worker gives them (else: prompt ids counted, a text
 * prompt one token per byte; content chunks). The worker that served it:
 * tr_request has no field for it, so it rides in the request's flags above
 * the format's own bits (FORMAT.md: "Other bits are kept as they are"):
 * flags >> RP_TRACE_WORKER_SHIFT is the worker's index + 1 (0: none was
 * healthy), and the header's keys router.worker.K give each index's URL
 * (with router.workers, router.policy, router.worker_flags_shift).
 * Token-id prompts carry their block hashes (header block_size =
 * prefix_block); text prompts none (their blocks are bytes, not tokens). */
#ifndef RH_ROUTER_PROXY_H
#define RH_ROUTER_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "engine/router/router.h"
#include "traces/trace.h"
#include "util/err.h"

#define RP_MAX_WORKERS 256u
#define RP_TRACE_WORKER_SHIFT 16

typedef struct rp_config {
    const char *const *workers; /* base URLs, n_workers of them */
    uint32_t n_workers;
    router_config core;         /* policy, seed, cache-aware thresholds, Lua script and limits; n_replicas
                                   is set from n_workers, guard_clock to the wall clock */
    const char *host;           /* IPv4 address to bind (127.0.0.1) */
    uint16_t port;              /* 0: any free port */
    const char *record_path;    /* NULL: no recording */
    uint32_t prefix_block;      /* bytes of text or token ids per prefix hash (64) */
    double health_interval_s;   /* 1 */
    double health_timeout_s;    /* 2 */
    double connect_timeout_s;   /* to a worker (5) */
    double request_timeout_s;   /* a whole routed request (0: none) */
    size_t max_body_bytes;      /* larger request bodies get 413 (32 MiB) */
    size_t max_response_bytes;  /* a worker's answer held whole (not a stream), or one event of a
                                   stream, larger than this: 502 (a final error event in a stream)
                                   and the worker's connection closed (8 MiB) */
    uint32_t max_connections;   /* open connections beyond are closed at accept (1024) */
    uint32_t max_connections_per_client;  /* one client address's open connections beyond this: 429,
                                   and a few past it (rh_guard_client_margin) closed at accept; 0: half
                                   of max_connections */
    uint32_t header_timeout_s;  /* a request's whole header must be in within this of the connection's
                                   start (a kept-alive one's: of the last response's end plus
                                   idle_timeout_s), or the socket is closed unanswered (10) */
    uint32_t idle_timeout_s;    /* a connection silent this long with no request being forwarded
                                   (between requests, mid-body, a client not reading) is closed (30) */
} rp_config;

void rp_config_default(rp_config *c);

/* A worker's base URL checked and made canonical (no trailing '/'):
 * http:// or https://, a host, an optional port 1-65535, an optional path;
 * no query, fragment, user info or spaces. 0, or -1 with a message naming
 * the URL and what is wrong. */
int rp_worker_url(const char *url, char *out, size_t cap, rh_err *e);

typedef struct rproxy rproxy;

/* Checks every worker URL, polls each worker's /health once (one not
 * answering starts unhealthy, and a warning naming it is printed on
 * stderr), opens the recording, starts the poller and listens. NULL with
 * e filled (naming the flag, the worker or the file). */
rproxy *rp_start(const rp_config *c, rh_err *e);
const char *rp_url(const rproxy *p);        /* "http://HOST:PORT" */
uint32_t rp_healthy_workers(const rproxy *p);
uint64_t rp_live_requests(const rproxy *p); /* routed, their answer not yet all sent */
/* Stops admitting: new requests get 503; those in flight go on. */
void rp_drain(rproxy *p);
/* Ends what is in flight (streams get an error event), stops listening and
 * the poller, closes the recording, frees p. -1 when the recording failed. */
int rp_stop(rproxy *p, rh_err *e);

/* ---- the prefix of a request, for cache-aware routing ----
 * Chained block hashes of the prompt: block k's hash is XXH3-64 of its
 * bytes seeded with block k-1's, so equal hashes mean equal prefixes, and
 * only full blocks count (a prompt shorter than one block has none).
 *   - token ids (completions' "prompt": [ids], /generate's "input_ids"):
 *     blocks of `block` ids, as traces/prompt.h's tr_prompt_block_hashes
 *     hashes them (int32 little-endian), seed RP_SEED_IDS;
 *   - text (completions' "prompt": "...", /generate's "text"): blocks of
 *     `block` bytes, seed RP_SEED_TEXT;
 *   - chat: the text "ROLE: CONTENT\n" for each message in order (content
 *     parts of type text joined), hashed as text.
 * A batch (a list of prompts) is hashed by its first. A body that is not
 * JSON, or has no prompt, has no hashes. */
#define RP_SEED_IDS 0x726f757465722d69ull   /* "router-i" */
#define RP_SEED_TEXT 0x726f757465722d74ull  /* "router-t" */

enum rp_api { RP_COMPLETIONS = 0, RP_CHAT = 1, RP_GENERATE = 2 };   /* as client/bench.h's bench_api */

/* The route a path names (-1: not routed). */
int rp_api_of_path(const char *path);

typedef struct rp_prompt {
    uint64_t *hashes;           /* malloc'd; NULL when n_hashes is 0 */
    uint32_t n_hashes;
    int by_ids;                 /* the prompt is token ids (hashes in token blocks) */
    uint32_t length;            /* prompt ids, or bytes of text */
    uint32_t max_tokens;        /* what the body asks (max_tokens, max_completion_tokens,
                                   sampling_params.max_new_tokens); else 16 */
    int stream;                 /* the body asks for a stream */
} rp_prompt;

/* What the router reads of a body of `api`. -1 only when out of memory. */
int rp_prompt_read(int api, const char *body, size_t n, uint32_t block, rp_prompt *out);
void rp_prompt_free(rp_prompt *p);
/* The hashes alone (into out, at most cap of them), for a caller (a test)
 * that routes with the core directly. */
uint32_t rp_prompt_hashes(int api, const char *body, size_t n, uint32_t block, uint64_t *out, uint32_t cap);
uint32_t rp_hash_text(const char *s, size_t n, uint32_t block, uint64_t *out, uint32_t cap);

/* The worker index a recorded request names, or -1 when none. */
int rp_trace_worker(const tr_request *r);

#endif
