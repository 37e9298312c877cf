/* bench_xfer.h — one benchmark request from send to verdict, inside the
 * bench client (not a public API): its curl handle and JSON body, the stamp of
 * each content chunk taken as curl hands over the bytes, and the verdict that
 * fills its bench_result when the transfer ends. */
#ifndef RH_BENCH_XFER_H
#define RH_BENCH_XFER_H

#include <curl/curl.h>

#include "client/bench.h"
#include "client/bench_sse.h"

typedef struct bench_xfer {
    size_t item;
    bench_result *res;
    const bench_config *cfg;
    uint32_t max_tokens;
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    double t_send;                  /* absolute, rh_now() */
    double now;                     /* stamp of the bytes being parsed */
    long status;                    /* 0 until the headers are in */
    bench_sse sse;
    char *resp;                     /* error body or non-streamed answer */
    size_t n_resp, cap_resp;
    rh_dvec times;                  /* content chunks, s from send */
    uint64_t events;                /* server-sent events seen */
    int failed;                     /* our own verdict (malformed event, error event) */
    char msg[1100];
    int finish;                     /* from finish_reason, -1 when none seen */
    bench_chunk usage;              /* the last usage seen */
    char *text;                     /* the generated text so far (keep_text) */
    size_t n_text, cap_text;
    int text_oom;
    char curl_err[CURL_ERROR_SIZE];
} bench_xfer;

/* curl_global_init, once per process. */
int bench_curl_init(rh_err *e);
/* base + path with exactly one slash between them (malloc'd), or NULL. */
char *bench_join_url(const char *base, const char *path);
/* Content-Type, an empty Expect and the bearer token; NULL when out of memory. */
struct curl_slist *bench_headers(const bench_config *c);

/* The transfer of item i with its body built (scratch holds the item's
 * prompt ids) and its handle set up; NULL when out of memory. */
bench_xfer *bench_xfer_new(const bench_config *c, const bench_dataset *d, size_t i, const char *url,
                           const char *model_json, int32_t *scratch, bench_result *res);
/* A transfer whose bytes another moves (the router's proxy): no handle and
 * no body of its own; the owner marks the send, feeds it what arrives and
 * concludes it, and the result is timed and judged as bench's own are.
 * max_tokens is what the request asked for (the output length when the
 * response says none). NULL when out of memory. */
bench_xfer *bench_xfer_observer(const bench_config *c, uint32_t max_tokens, bench_result *res);
/* Response bytes as they arrive (status: the response's HTTP status):
 * stamped now, split into events and parsed (a stream), else kept whole.
 * -1 once the stream cannot be read (a malformed event, an error event, out
 * of memory): the verdict is kept, and later bytes need not be fed. */
int bench_xfer_feed(bench_xfer *x, long status, const char *p, size_t n);
/* Marks the send, s from t0; call right before handing the handle to curl. */
void bench_xfer_sent(bench_xfer *x, double t0);
/* The verdict once curl is done with it (rc), or when a stop took it down
 * (aborted): fills the result, which takes the chunk times. */
void bench_xfer_conclude(bench_xfer *x, CURLcode rc, int aborted, const bench_dataset *d);
void bench_xfer_free(bench_xfer *x);

#endif
