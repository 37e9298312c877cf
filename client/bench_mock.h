/* bench_mock.h — a scripted OpenAI-compatible streaming server, to check and
 * measure load generators without a model.
 *
 * Listens on a free loopback port (libmicrohttpd, a thread per connection).
 * POST /v1/completions and /v1/chat/completions stream max_tokens tokens on a
 * fixed schedule from the moment the request body is complete: the first
 * after `first_token_s`, then one every `itl_s` (grouped `tokens_per_chunk`
 * per event), each chunk sent at its absolute deadline so delays never
 * accumulate; then a usage chunk and `data: [DONE]`. stream=false answers once
 * at the end of the same schedule. GET /v1/models lists "mock-model".
 *
 * It keeps its own log of every request (when it was received, when each
 * chunk left), so a test can compare the client's measurements with the
 * server's truth on the same clock, and the most streams it had open at once.
 * With `cache_block` > 0 it reports usage.prompt_tokens_details.cached_tokens
 * as the longest prefix of whole blocks it has seen in earlier prompts — a
 * perfect prefix cache, so prefix sharing in a dataset shows up as hits. */
#ifndef RH_BENCH_MOCK_H
#define RH_BENCH_MOCK_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct bench_mock_opts {
    double first_token_s;       /* request received -> first token */
    double itl_s;               /* between tokens */
    uint32_t tokens_per_chunk;  /* tokens per event (0 means 1) */
    int no_usage;               /* 1: no usage chunk at the end */
    uint32_t fail_every;        /* k > 0: every k-th request (k, 2k, ...) gets HTTP 500 */
    uint32_t fail_from;         /* k > 0: the k-th request and every later one get HTTP 500 */
    uint32_t vocab_size;        /* > 0: /v1/models says it (as rehearse serve does; vLLM does not) */
    uint32_t max_prompt;        /* > 0: longer prompts get HTTP 400 */
    uint32_t malformed_after;   /* > 0: after this many tokens, a non-JSON event */
    uint32_t error_after;       /* > 0: after this many tokens, an error event */
    uint32_t cache_block;       /* > 0: report cached tokens at this block size */
    const char *api_key;        /* non-NULL: POSTs without "Authorization: Bearer KEY" get 401 */
} bench_mock_opts;

typedef struct bench_mock_request {
    double received;            /* rh_now() when the body was complete */
    uint64_t prompt_hash;       /* XXH3 of the prompt ids (or of the chat text) */
    uint32_t prompt_len;        /* ids, or words of a chat prompt */
    uint32_t max_tokens;
    uint32_t cached;            /* reported cached tokens */
    int chat, stream, status;   /* status: the HTTP status answered */
    uint32_t n_chunks;
    double *chunk_sent;         /* rh_now() as each content chunk was handed to the socket */
} bench_mock_request;

typedef struct bench_mock bench_mock;

bench_mock *bench_mock_start(const bench_mock_opts *o, rh_err *e);
uint16_t bench_mock_port(const bench_mock *m);
/* "http://127.0.0.1:PORT" */
const char *bench_mock_url(const bench_mock *m);
uint64_t bench_mock_max_concurrent(bench_mock *m);
/* The log so far, in the order the requests were received; valid until the
 * next call or bench_mock_stop. */
size_t bench_mock_requests(bench_mock *m, const bench_mock_request **out);
/* Stops listening, cuts open streams, frees everything. */
void bench_mock_stop(bench_mock *m);

/* The hash the mock logs for a prompt of token ids. */
uint64_t bench_mock_prompt_hash(const int32_t *ids, uint32_t n);

#endif
