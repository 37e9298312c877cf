/* fuzz_bench_sse.c — a server's response is outside input: any bytes, cut
 * anywhere, go through the event splitter and the chunk parser without a
 * crash; events come out the same whether the bytes arrive whole or in two
 * pieces; error bodies always give a NUL-terminated message. The first byte
 * picks the cut and the API. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/bench_sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seen {
    uint64_t hash;
    size_t n;
    int chat;
} seen;

static int on_event(void *ctx, const char *d, size_t n)
{
    seen *s = ctx;
    bench_chunk c;
    rh_err e;
    if (bench_parse_chunk(d, n, s->chat, &c, &e) == 0 && c.error[0] && !memchr(c.error, 0, sizeof c.error)) abort();
    for (size_t i = 0; i < n; i++) s->hash = s->hash * 1099511628211ull ^ (uint8_t)d[i];
    s->hash = s->hash * 1099511628211ull ^ 0x100;
    s->n++;
    return 0;
}

static seen run(const char *p, size_t n, size_t cut, int chat)
{
    seen s = {1469598103934665603ull, 0, chat};
    bench_sse sse;
    bench_sse_init(&sse);
    rh_err e;
    if (cut > n) cut = n;
    bench_sse_feed(&sse, p, cut, on_event, &s, &e);
    bench_sse_feed(&sse, p + cut, n - cut, on_event, &s, &e);
    bench_sse_finish(&sse, on_event, &s, &e);
    bench_sse_free(&sse);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    int chat = data[0] & 1;
    size_t cut = data[0] >> 1;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    seen whole = run(p, n, n, chat), split = run(p, n, cut, chat);
    if (whole.n != split.n || whole.hash != split.hash) abort();
    char msg[64];
    bench_error_message(p, n, msg, sizeof msg);
    if (!memchr(msg, 0, sizeof msg)) abort();
    return 0;
}
