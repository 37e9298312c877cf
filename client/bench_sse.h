/* bench_sse.h — reading an OpenAI streaming response: server-sent events
 * split out of arbitrary network chunks, and the JSON of each event.
 *
 * A stream is `data: {json}` events separated by blank lines and ended by
 * `data: [DONE]`. Bytes arrive cut anywhere (mid-line, mid-UTF-8), so the
 * splitter buffers a partial line across calls. Comment lines (`:`) and
 * other fields (`event:`, `id:`) are ignored; several data lines of one
 * event are joined with '\n' as the SSE rules say. */
#ifndef RH_BENCH_SSE_H
#define RH_BENCH_SSE_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Called with each complete event's data (NUL-terminated); returns 0 to go on,
 * -1 to stop feeding (the error is the callback's to keep). */
typedef int (*bench_sse_fn)(void *ctx, const char *data, size_t n);

typedef struct bench_sse {
    char *line;                 /* the partial line carried across feeds */
    size_t n_line, cap_line;
    char *data;                 /* data lines of the event being read */
    size_t n_data, cap_data;
    int has_data;
} bench_sse;

void bench_sse_init(bench_sse *s);
void bench_sse_free(bench_sse *s);
/* -1 when the callback stopped or memory ran out (e says which). */
int bench_sse_feed(bench_sse *s, const char *buf, size_t n, bench_sse_fn fn, void *ctx, rh_err *e);
/* End of stream: an event not closed by a blank line is still delivered. */
int bench_sse_finish(bench_sse *s, bench_sse_fn fn, void *ctx, rh_err *e);

/* What one event says. */
typedef struct bench_chunk {
    int done;                   /* data: [DONE] */
    int content;                /* non-empty text (completions) or delta content (chat) */
    int finish;                 /* enum tr_finish from finish_reason, or -1 when absent */
    int has_usage;
    uint32_t prompt_tokens, completion_tokens, cached_tokens;
    int has_cached;
    char error[512];            /* non-empty: the server sent an error object */
} bench_chunk;

/* Parses an event's data (a streamed chunk or a whole non-streamed response).
 * api (enum bench_api): 0 completions (choices[0].text), 1 chat
 * (choices[0].delta/message.content), 2 SGLang's /generate (text, and
 * meta_info's token counts and finish_reason.type as the usage and finish).
 * -1 with a message quoting the start of the data if it is not JSON. */
int bench_parse_chunk(const char *data, size_t n, int api, bench_chunk *c, rh_err *e);

/* The text an event adds (completions, chat: the delta; /generate: the
 * whole text so far), malloc'd and NUL-terminated ("" when none), or NULL
 * when the data is not JSON or memory ran out. */
char *bench_chunk_text(const char *data, size_t n, int api, size_t *len);

/* The server's message from an error body (OpenAI's {"error": {"message"}},
 * or {"message"}, {"detail"}, {"object": "error"}), else the body itself,
 * trimmed to fit `out`. */
void bench_error_message(const char *body, size_t n, char *out, size_t cap);

#endif
