/* test_hardening_security.c — what stands between the server and the
 * network: it listens on 127.0.0.1 unless told otherwise (as the kernel's
 * socket table shows, in this process and as `rehearse serve`); --api-key
 * guards every /v1/ route, is checked before any body is read, and cannot
 * be empty; bodies, prompts, max_tokens, batches, stop lists and JSON
 * nesting all have limits that answer 400/413 and leave the server serving. */
#include <arpa/inet.h>
#include <strings.h>

#include "test_hardening_util.h"
#include "test_serve_util.h"
#include "testutil.h"

static model *tiny;

static const model *the_model(void)
{
    if (!tiny) tiny = eh_tiny_model();
    return tiny;
}

/* The listening socket on `port` in /proc/net/tcp: its IPv4 address in
 * dotted form, or "" when none listens. */
static void listening_on(uint16_t port, char *addr, size_t n)
{
    addr[0] = '\0';
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f) return;
    char line[512];
    if (!fgets(line, sizeof line, f)) line[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        unsigned a = 0, p = 0, st = 0;
        if (sscanf(line, "%*d: %8x:%4x %*8x:%*4x %2x", &a, &p, &st) == 3 && p == port && st == 0x0A) {
            struct in_addr in = {.s_addr = a};   /* the kernel prints it in host order of the raw bytes */
            inet_ntop(AF_INET, &in, addr, (socklen_t)n);
        }
    }
    fclose(f);
}

static uint16_t port_of(const char *url)
{
    const char *c = strrchr(url, ':');
    return c ? (uint16_t)atoi(c + 1) : 0;
}

static void test_binds_loopback_unless_told(void)
{
    hu_watchdog(120);
    server_config c;
    server_config_default(&c);
    CU_ASSERT_STRING_EQUAL(c.host, "127.0.0.1");
    c = ts_config(the_model());
    server *s = ts_start(&c);
    char addr[64];
    listening_on(server_port(s), addr, sizeof addr);
    CU_ASSERT_STRING_EQUAL(addr, "127.0.0.1");
    ts_stop(s);
    /* The check can tell: told to, it listens on every interface. */
    c.host = "0.0.0.0";
    s = ts_start(&c);
    listening_on(server_port(s), addr, sizeof addr);
    CU_ASSERT_STRING_EQUAL(addr, "0.0.0.0");
    ts_stop(s);

    /* The command line too, with no --host. */
    hu_proc p;
    const char *args[] = {"--max-total-tokens", "4096", NULL};
    CU_ASSERT_FATAL(hu_spawn(&p, "bind", args, 0) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.url, "http://127.0.0.1:"));
    listening_on(port_of(p.url), addr, sizeof addr);
    CU_ASSERT_STRING_EQUAL(addr, "127.0.0.1");
    kill(p.pid, SIGTERM);
    CU_ASSERT_EQUAL(hu_exit_status(p.pid), 0);
}

static long status_of(server *s, const char *method, const char *path, const char *body, const char *header)
{
    ts_resp r = ts_request(s, method, path, body, header);
    long st = r.status;
    if (st == 401) {
        const char *code = json_string_value(json_object_get(json_object_get(r.json, "error"), "code"));
        if (!code || strcmp(code, "invalid_api_key")) st = -401;   /* a 401 that is not ours */
    }
    ts_resp_free(&r);
    return st;
}

/* The WWW-Authenticate header of a 401. */
static size_t grab_header(char *p, size_t size, size_t n, void *ctx)
{
    if (!strncasecmp(p, "WWW-Authenticate: Bearer", 24)) *(int *)ctx = 1;
    return size * n;
}

static void test_api_key(void)
{
    hu_watchdog(120);
    server_config c = ts_config(the_model());
    c.api_key = "k3y-with-entropy";
    server *s = ts_start(&c);
    const char *body = "{\"prompt\":[1,2,3],\"max_tokens\":2}";
    const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}";
    static const struct {
        const char *header;
        long want;
    } cases[] = {
        {NULL, 401},
        {"Authorization: Bearer", 401},
        {"Authorization: Bearer ", 401},
        {"Authorization: Basic k3y-with-entropy", 401},
        {"Authorization: k3y-with-entropy", 401},
        {"Authorization: Bearer k3y-with-entrop", 401},
        {"Authorization: Bearer k3y-with-entropy2", 401},
        {"Authorization: Bearer K3Y-WITH-ENTROPY", 401},
        {"X-Api-Key: k3y-with-entropy", 401},
        {"Authorization: Bearer k3y-with-entropy", 200},
        {"Authorization: bearer k3y-with-entropy", 200},   /* the scheme is case-insensitive */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long a = status_of(s, "POST", "/v1/completions", body, cases[i].header);
        long b = status_of(s, "POST", "/v1/chat/completions", chat, cases[i].header);
        long m = status_of(s, "GET", "/v1/models", NULL, cases[i].header);
        if (a != cases[i].want || b != cases[i].want || m != cases[i].want)
            printf("\n    %s: completions %ld, chat %ld, models %ld (want %ld)\n",
                   cases[i].header ? cases[i].header : "(none)", a, b, m, cases[i].want);
        CU_ASSERT(a == cases[i].want && b == cases[i].want && m == cases[i].want);
    }
    /* Unknown /v1/ routes are guarded too: nothing says what exists. */
    CU_ASSERT_EQUAL(status_of(s, "GET", "/v1/secret", NULL, NULL), 401);
    /* Checked on the headers: a big body without the key is never read
     * (nor buffered); the answer comes with the scheme to use. */
    size_t big = 8u << 20;
    char *huge = malloc(big + 1);
    memset(huge, ' ', big);
    huge[big] = '\0';
    memcpy(huge, "{\"prompt\":[1],", 14);
    huge[big - 1] = '}';
    CURL *h = curl_easy_init();
    int www = 0;
    char url[256];
    snprintf(url, sizeof url, "%s/v1/completions", server_url(s));
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, huge);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)big);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, grab_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &www);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ts_collect);
    ts_buf sink = {0};
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    curl_easy_perform(h);
    long st = 0;
    curl_off_t uploaded = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    curl_easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &uploaded);
    curl_easy_cleanup(h);
    free(sink.p);
    free(huge);
    CU_ASSERT_EQUAL(st, 401);
    CU_ASSERT(www);
    if (uploaded >= (curl_off_t)big) printf("\n    the whole %zu-byte body went up before the 401\n", big);
    CU_ASSERT(uploaded < (curl_off_t)big);
    /* Outside /v1/: health and metrics stay open for probes. */
    CU_ASSERT_EQUAL(status_of(s, "GET", "/health", NULL, NULL), 200);
    CU_ASSERT_EQUAL(status_of(s, "GET", "/metrics", NULL, NULL), 200);
    ts_stop(s);

    /* An empty key would let "Bearer " in: refused at start, and by the CLI. */
    c.api_key = "";
    rh_err e = {{0}};
    s = server_start(&c, &e);
    CU_ASSERT_PTR_NULL(s);
    if (s) server_stop(s, &e);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--api-key"));
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "%s serve --model tiny-llama --port 0 --max-total-tokens 4096 --api-key ''", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--api-key"));
}

static void expect_400(server *s, const char *what, const char *body, const char *code)
{
    ts_resp r = ts_post(s, "/v1/completions", body);
    const char *got = json_string_value(json_object_get(json_object_get(r.json, "error"), "code"));
    int ok = r.status == 400 && got && !strcmp(got, code);
    if (!ok) printf("\n    %s: HTTP %ld %.200s\n", what, r.status, r.body);
    CU_ASSERT(ok);
    ts_resp_free(&r);
}

static void test_limits(void)
{
    hu_watchdog(120);
    server_config c = ts_config(the_model());
    server *s = ts_start(&c);
    /* max_tokens: past the context, absurdly large, not an integer. */
    expect_400(s, "max_tokens 2^62", "{\"prompt\":[1],\"max_tokens\":4611686018427387904}", "context_length_exceeded");
    expect_400(s, "max_tokens 2^63-1", "{\"prompt\":[1],\"max_tokens\":9223372036854775807}", "context_length_exceeded");
    expect_400(s, "max_tokens 1e30", "{\"prompt\":[1],\"max_tokens\":1e30}", "invalid_type");
    expect_400(s, "max_tokens past the context", "{\"prompt\":[1],\"max_tokens\":2048}", "context_length_exceeded");
    /* A million-token prompt (5 MB of JSON, under the body limit). */
    size_t n = 1000000;
    char *b = malloc(n * 4 + 64);
    size_t k = (size_t)sprintf(b, "{\"prompt\":[");
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(b + k, "%s%zu", i ? "," : "", i % 400);
    sprintf(b + k, "],\"max_tokens\":1}");
    expect_400(s, "a million-token prompt", b, "context_length_exceeded");
    free(b);
    /* Batches and stop lists. */
    b = malloc(65 * 8 + 64);
    k = (size_t)sprintf(b, "{\"prompt\":[");
    for (int i = 0; i < 65; i++) k += (size_t)sprintf(b + k, "%s[%d]", i ? "," : "", i + 1);
    sprintf(b + k, "],\"max_tokens\":1}");
    expect_400(s, "65 prompts", b, "invalid_value");
    free(b);
    expect_400(s, "17 stop strings",
               "{\"prompt\":[1],\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\","
               "\"n\",\"o\",\"p\",\"q\"]}",
               "invalid_value");
    /* JSON nested 100,000 deep: refused by the parser's depth limit, not a
     * stack overflow. */
    size_t depth = 100000;
    b = malloc(2 * depth + 64);
    k = (size_t)sprintf(b, "{\"prompt\":");
    memset(b + k, '[', depth);
    memset(b + k + depth, ']', depth);
    strcpy(b + k + 2 * depth, "}");
    expect_400(s, "nested 100,000 deep", b, "invalid_json");
    free(b);
    /* Still serving, and none of it reached the engine. */
    ts_resp r = ts_post(s, "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":3}");
    CU_ASSERT_EQUAL(r.status, 200);
    ts_resp_free(&r);
    core_stats st;
    server_core_stats(s, &st);
    CU_ASSERT_EQUAL(st.finished, 1);
    ts_stop(s);
}

static int cleanup(void)
{
    hu_watchdog(0);
    model_free(tiny);
    tiny = NULL;
    return 0;
}

void register_test_hardening_security(void)
{
    CU_pSuite s = CU_add_suite("hardening_security", NULL, cleanup);
    CU_add_test(s, "binds 127.0.0.1 unless told otherwise, in-process and as rehearse serve", test_binds_loopback_unless_told);
    CU_add_test(s, "--api-key: Bearer on every /v1/ route, checked before the body, never empty", test_api_key);
    CU_add_test(s, "limits: max_tokens, prompt length, batches, stop lists, JSON depth", test_limits);
}
