/* test_bench_sse.c — the event splitter gives the same events however the
 * bytes are cut; the chunk parser reads every shape servers send; error
 * bodies yield the server's message. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "client/bench_sse.h"
#include "traces/trace.h"

typedef struct events {
    char all[4096];         /* events joined with '|' */
    int n;
} events;

static int collect(void *ctx, const char *data, size_t n)
{
    events *ev = ctx;
    size_t len = strlen(ev->all);
    if (len + n + 2 < sizeof ev->all) {
        memcpy(ev->all + len, data, n);
        ev->all[len + n] = '|';
        ev->all[len + n + 1] = '\0';
    }
    ev->n++;
    return 0;
}

static const char stream[] =
    ": keep-alive comment\r\n"
    "data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n"
    "event: message\n"
    "data:{\"choices\":[{\"text\":\"b\"}]}\n\n"
    "data: line one\n"
    "data: line two\n"
    "\n"
    "id: 7\n"
    "data: [DONE]";           /* no final blank line: finish() delivers it */

static const char expected[] = "{\"choices\":[{\"text\":\"a\"}]}|{\"choices\":[{\"text\":\"b\"}]}|line one\nline two|[DONE]|";

static void feed_in_pieces(size_t piece, events *ev)
{
    bench_sse s;
    bench_sse_init(&s);
    memset(ev, 0, sizeof *ev);
    rh_err e;
    size_t n = strlen(stream);
    for (size_t at = 0; at < n; at += piece) {
        size_t k = n - at < piece ? n - at : piece;
        CU_ASSERT_EQUAL(bench_sse_feed(&s, stream + at, k, collect, ev, &e), 0);
    }
    CU_ASSERT_EQUAL(bench_sse_finish(&s, collect, ev, &e), 0);
    bench_sse_free(&s);
}

static void test_any_split_gives_the_same_events(void)
{
    events ev;
    for (size_t piece = 1; piece <= strlen(stream); piece++) {
        feed_in_pieces(piece, &ev);
        CU_ASSERT_EQUAL(ev.n, 4);
        CU_ASSERT_STRING_EQUAL(ev.all, expected);
    }
    /* Every two-way cut. */
    size_t n = strlen(stream);
    for (size_t cut = 0; cut <= n; cut++) {
        bench_sse s;
        bench_sse_init(&s);
        memset(&ev, 0, sizeof ev);
        rh_err e;
        bench_sse_feed(&s, stream, cut, collect, &ev, &e);
        bench_sse_feed(&s, stream + cut, n - cut, collect, &ev, &e);
        bench_sse_finish(&s, collect, &ev, &e);
        bench_sse_free(&s);
        CU_ASSERT_STRING_EQUAL(ev.all, expected);
    }
}

static int stop_at_second(void *ctx, const char *data, size_t n)
{
    (void)data;
    (void)n;
    return ++*(int *)ctx == 2 ? -1 : 0;
}

static void test_callback_can_stop(void)
{
    bench_sse s;
    bench_sse_init(&s);
    int count = 0;
    rh_err e;
    CU_ASSERT_EQUAL(bench_sse_feed(&s, stream, strlen(stream), stop_at_second, &count, &e), -1);
    CU_ASSERT_EQUAL(count, 2);
    bench_sse_free(&s);
}

static bench_chunk parse(const char *json, int chat)
{
    bench_chunk c;
    rh_err e;
    CU_ASSERT_EQUAL(bench_parse_chunk(json, strlen(json), chat, &c, &e), 0);
    return c;
}

static void test_chunk_shapes(void)
{
    bench_chunk c = parse("{\"choices\":[{\"index\":0,\"text\":\" hi\",\"finish_reason\":null}],\"usage\":null}", 0);
    CU_ASSERT(c.content && !c.done && !c.has_usage && c.finish == -1 && !c.error[0]);
    c = parse("{\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}", 0);
    CU_ASSERT(!c.content);                          /* empty text is not content */
    CU_ASSERT_EQUAL(c.finish, TR_FINISH_LENGTH);
    c = parse("{\"choices\":[{\"text\":\"x\",\"finish_reason\":\"stop\"}]}", 0);
    CU_ASSERT_EQUAL(c.finish, TR_FINISH_STOP);
    c = parse("{\"choices\":[{\"text\":\"x\",\"finish_reason\":\"abort\"}]}", 0);
    CU_ASSERT_EQUAL(c.finish, TR_FINISH_ABORT);
    c = parse("{\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}", 1);
    CU_ASSERT(!c.content);                          /* the role-only first chat chunk */
    c = parse("{\"choices\":[{\"delta\":{\"content\":\"y\"}}]}", 1);
    CU_ASSERT(c.content);
    c = parse("{\"choices\":[{\"delta\":{\"content\":null,\"reasoning_content\":\"think\"}}]}", 1);
    CU_ASSERT(c.content);
    c = parse("{\"choices\":[{\"message\":{\"content\":\"whole\"},\"finish_reason\":\"length\"}]}", 1);
    CU_ASSERT(c.content);
    c = parse("{\"choices\":[{\"delta\":{\"content\":\"y\"}}]}", 0);
    CU_ASSERT(!c.content);                          /* completions read text, not delta */
    c = parse("{\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":34,"
              "\"prompt_tokens_details\":{\"cached_tokens\":8}}}", 0);
    CU_ASSERT(c.has_usage && c.prompt_tokens == 12 && c.completion_tokens == 34);
    CU_ASSERT(c.has_cached && c.cached_tokens == 8);
    c = parse("{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"prompt_tokens_details\":null}}", 0);
    CU_ASSERT(c.has_usage && !c.has_cached);
    c = parse("[DONE]", 0);
    CU_ASSERT(c.done);
    c = parse("{\"error\":{\"message\":\"too long\",\"code\":400}}", 0);
    CU_ASSERT_STRING_EQUAL(c.error, "too long");
    c = parse("{\"object\":\"error\",\"message\":\"bad model\"}", 0);
    CU_ASSERT_STRING_EQUAL(c.error, "bad model");
    c = parse("{\"error\":{\"code\":500}}", 0);
    CU_ASSERT_STRING_EQUAL(c.error, "{\"code\":500}");
}

static void test_malformed_chunks(void)
{
    const char *bad[] = {"{\"choices\": [", "[1,2]", "nonsense", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bench_chunk c;
        rh_err e;
        CU_ASSERT_EQUAL(bench_parse_chunk(bad[i], strlen(bad[i]), 0, &c, &e), -1);
        CU_ASSERT(strstr(e.msg, "malformed event") != NULL);
    }
}

static void test_error_bodies(void)
{
    char out[128];
    const char *b1 = "{\"error\":{\"message\":\"The model `x` does not exist.\",\"type\":\"NotFoundError\"}}";
    bench_error_message(b1, strlen(b1), out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "The model `x` does not exist.");
    const char *b2 = "{\"detail\":\"Not Found\"}";
    bench_error_message(b2, strlen(b2), out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "Not Found");
    const char *b3 = "<html>502 Bad Gateway</html>\nmore";
    bench_error_message(b3, strlen(b3), out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "<html>502 Bad Gateway</html>");
    bench_error_message("", 0, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "");
    char tiny[8];
    bench_error_message(b3, strlen(b3), tiny, sizeof tiny);
    CU_ASSERT_STRING_EQUAL(tiny, "<html>5");
}

void register_test_bench_sse(void)
{
    CU_pSuite s = CU_add_suite("bench_sse", NULL, NULL);
    CU_add_test(s, "any split gives the same events", test_any_split_gives_the_same_events);
    CU_add_test(s, "callback can stop", test_callback_can_stop);
    CU_add_test(s, "chunk shapes", test_chunk_shapes);
    CU_add_test(s, "malformed chunks", test_malformed_chunks);
    CU_add_test(s, "error bodies", test_error_bodies);
}
