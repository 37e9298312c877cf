/* test_serve.c — the server end to end, in this process, over real HTTP on a
 * free loopback port: every answer (plain, streamed, chat, batched, cut by
 * stop strings or ids) equals the same prompt generated alone with the same
 * seed, token by token, with overlap scheduling on and off and with many
 * requests at once; /metrics moves as the requests say; a client that hangs
 * up has its request aborted and its pages freed; the live recording replays
 * through the simulator; and `rehearse bench` measures TTFTs that agree with
 * the server's own records. */
#include <pthread.h>
#include <time.h>

#include "client/bench.h"
#include "engine/serve/server_text.h"
#include "sim/cost/cost.h"
#include "sim/sim.h"
#include "test_serve_util.h"
#include "testutil.h"
#include "traces/import/import.h"
#include "traces/prompt.h"

#define VOCAB 512

static model *tiny;
static tokenizer *bytes;

static const model *the_model(void)
{
    if (!tiny) tiny = eh_tiny_model();
    return tiny;
}

static const tokenizer *byte_tok(void)
{
    if (!bytes) bytes = tok_new_bytes();
    return bytes;
}

/* A completions body for ids with sampling; extra is spliced in ("" or ",\"k\":v"). */
static char *body_for(const int32_t *ids, uint32_t n, uint32_t max_tokens, double temp, uint64_t seed, bool stream,
                      const char *extra)
{
    char *p = ts_ids_json(ids, n);
    char *b = malloc(strlen(p) + strlen(extra) + 400);
    sprintf(b,
            "{\"model\":\"tiny-llama\",\"prompt\":%s,\"max_tokens\":%u,\"temperature\":%g,\"top_p\":0.9,\"top_k\":40,"
            "\"seed\":%llu,\"ignore_eos\":true,\"return_token_ids\":true,\"stream\":%s,"
            "\"stream_options\":{\"include_usage\":true}%s}",
            p, max_tokens, temp, (unsigned long long)seed, stream ? "true" : "false", extra);
    free(p);
    return b;
}

static kern_sampling sampling_of(double temp)
{
    return (kern_sampling){.temperature = (float)temp, .top_p = 0.9f, .top_k = 40};
}

/* Token ids, text and finish of a plain response's choice i. */
static uint32_t plain_ids(const ts_resp *r, size_t i, int32_t *out, uint32_t cap)
{
    json_t *ch = json_array_get(json_object_get(r->json, "choices"), i);
    return ts_ids_of(json_object_get(ch, "token_ids"), out, cap);
}

static const char *plain_field(const ts_resp *r, size_t i, const char *name)
{
    json_t *ch = json_array_get(json_object_get(r->json, "choices"), i);
    return json_string_value(json_object_get(ch, name));
}

static json_int_t usage_of(json_t *o, const char *name)
{
    return json_integer_value(json_object_get(json_object_get(o, "usage"), name));
}

/* A stream's choice `index`: its ids and text concatenated, its finish. */
typedef struct streamed {
    int32_t ids[2048];
    uint32_t n;
    char text[8192];
    size_t len;
    char finish[16];
    int finishes;               /* events carrying a finish_reason */
    json_t *usage;
    int errors;
} streamed;

static void gather(const ts_stream *st, int index, streamed *out)
{
    memset(out, 0, sizeof *out);
    for (size_t k = 0; k < json_array_size(st->events); k++) {
        json_t *ev = json_array_get(st->events, k);
        if (json_object_get(ev, "error")) out->errors++;
        json_t *u = json_object_get(ev, "usage");
        if (json_is_object(u)) out->usage = u;
        json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        if (!ch || json_integer_value(json_object_get(ch, "index")) != index) continue;
        out->n += ts_ids_of(json_object_get(ch, "token_ids"), out->ids + out->n, 2048 - out->n);
        json_t *t = json_object_get(ch, "text");
        if (!t) t = json_object_get(json_object_get(ch, "delta"), "content");
        if (json_is_string(t) && out->len + json_string_length(t) < sizeof out->text) {
            memcpy(out->text + out->len, json_string_value(t), json_string_length(t));
            out->len += json_string_length(t);
        }
        json_t *f = json_object_get(ch, "finish_reason");
        if (json_is_string(f)) {
            snprintf(out->finish, sizeof out->finish, "%s", json_string_value(f));
            out->finishes++;
        }
    }
}

/* ---- outputs equal offline generation ---- */
static void check_one(server *s, uint64_t k, double temp)
{
    const model *m = the_model();
    uint32_t n = 12 + 17 * (uint32_t)k, max = 24;
    int32_t prompt[128], want[64], got[64];
    eh_random_prompt(100 + k, VOCAB, prompt, n);
    uint64_t seed = 1000 + k;
    int64_t nw = eh_reference(m, prompt, n, sampling_of(temp), seed, max, want);
    CU_ASSERT_EQUAL_FATAL(nw, max);

    char *b = body_for(prompt, n, max, temp, seed, false, "");
    ts_resp r = ts_post(s, "/v1/completions", b);
    free(b);
    CU_ASSERT_EQUAL_FATAL(r.status, 200);
    uint32_t ng = plain_ids(&r, 0, got, 64);
    CU_ASSERT_EQUAL(eh_mismatches("plain", k, got, ng, want, max), 0);
    CU_ASSERT_STRING_EQUAL(plain_field(&r, 0, "finish_reason"), "length");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r.json, "object")), "text_completion");
    CU_ASSERT_EQUAL(usage_of(r.json, "prompt_tokens"), n);
    CU_ASSERT_EQUAL(usage_of(r.json, "completion_tokens"), max);
    CU_ASSERT_EQUAL(usage_of(r.json, "total_tokens"), n + max);

    b = body_for(prompt, n, max, temp, seed, true, "");
    ts_stream st = ts_stream_post(s, "/v1/completions", b, 0);
    free(b);
    CU_ASSERT_EQUAL(st.status, 200);
    CU_ASSERT(st.done);
    CU_ASSERT_EQUAL(st.bad, 0);
    streamed sm;
    gather(&st, 0, &sm);
    CU_ASSERT_EQUAL(eh_mismatches("streamed", k, sm.ids, sm.n, want, max), 0);
    CU_ASSERT_STRING_EQUAL(sm.finish, "length");
    CU_ASSERT_EQUAL(sm.finishes, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sm.usage);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(sm.usage, "completion_tokens")), max);
    /* The stream's text is the plain answer's text, cut differently. */
    const char *text = plain_field(&r, 0, "text");
    CU_ASSERT_FATAL(text != NULL);
    CU_ASSERT_EQUAL(sm.len, strlen(text));
    CU_ASSERT(!memcmp(sm.text, text, sm.len));
    /* ... which is the ids' bytes made valid UTF-8. */
    char bytes[64 * 512];
    size_t nb = 0;
    for (uint32_t i = 0; i < max; i++) nb += sv_token_bytes(byte_tok(), want[i], bytes + nb, 512);
    size_t cl;
    char *clean = sv_utf8_clean(bytes, nb, &cl);
    CU_ASSERT(cl == strlen(text) && !memcmp(clean, text, cl));
    free(clean);
    ts_stream_free(&st);
    ts_resp_free(&r);
}

static void test_answers_equal_offline_generation(void)
{
    for (int overlap = 1; overlap >= 0; overlap--) {
        server_config c = ts_config(the_model());
        c.disable_overlap = !overlap;
        server *s = ts_start(&c);
        for (uint64_t k = 0; k < 3; k++) check_one(s, k, k == 0 ? 0.0 : 0.8);
        ts_stop(s);
    }
}

/* Many at once: every answer still equals its prompt generated alone. */
typedef struct job_arg {
    server *s;
    uint32_t k;
    int mismatches, status;
} job_arg;

static void *one_job(void *p)
{
    job_arg *a = p;
    const model *m = the_model();
    uint32_t n = 8 + 23 * a->k % 90, max = 16 + a->k % 9;
    int32_t prompt[128], want[64];
    eh_random_prompt(500 + a->k, VOCAB, prompt, n);
    eh_reference(m, prompt, n, sampling_of(0.7), 77 + a->k, max, want);
    char *b = body_for(prompt, n, max, 0.7, 77 + a->k, a->k % 2, "");
    if (a->k % 2) {
        ts_stream st = ts_stream_post(a->s, "/v1/completions", b, 0);
        streamed sm;
        gather(&st, 0, &sm);
        a->status = (int)st.status;
        a->mismatches = (int)eh_mismatches("concurrent stream", a->k, sm.ids, sm.n, want, max);
        ts_stream_free(&st);
    } else {
        ts_resp r = ts_post(a->s, "/v1/completions", b);
        int32_t got[64];
        uint32_t ng = plain_ids(&r, 0, got, 64);
        a->status = (int)r.status;
        a->mismatches = (int)eh_mismatches("concurrent plain", a->k, got, ng, want, max);
        ts_resp_free(&r);
    }
    free(b);
    return NULL;
}

static void test_concurrent_requests_equal_offline(void)
{
    server_config c = ts_config(the_model());
    c.engine.core.chunked_prefill_size = 48;   /* long prompts are chunked among decodes */
    server *s = ts_start(&c);
    enum { N = 10 };
    pthread_t t[N];
    job_arg a[N];
    for (uint32_t k = 0; k < N; k++) {
        a[k] = (job_arg){.s = s, .k = k};
        pthread_create(&t[k], NULL, one_job, &a[k]);
    }
    for (uint32_t k = 0; k < N; k++) {
        pthread_join(t[k], NULL);
        CU_ASSERT_EQUAL(a[k].status, 200);
        CU_ASSERT_EQUAL(a[k].mismatches, 0);
    }
    core_stats st;
    server_core_stats(s, &st);
    CU_ASSERT_EQUAL(st.finished, N);
    CU_ASSERT_EQUAL(st.running, 0);
    CU_ASSERT_EQUAL(st.pages_used, 0);
    ts_stop(s);
}

/* ---- prompts as text, chat, batches ---- */
static void test_text_chat_and_batched_prompts(void)
{
    const model *m = the_model();
    server_config c = ts_config(m);
    server *s = ts_start(&c);
    int32_t want[32], got[32];
    kern_sampling greedy = {0, 1, 0};

    /* Text: the byte tokenizer's BOS, then the bytes. */
    ts_resp r = ts_post(s, "/v1/completions",
                        "{\"prompt\":\"Hello\",\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true}");
    CU_ASSERT_EQUAL_FATAL(r.status, 200);
    int32_t hello[] = {TOK_BYTE_BOS, 'H', 'e', 'l', 'l', 'o'};
    eh_reference(m, hello, 6, greedy, 0, 12, want);
    CU_ASSERT_EQUAL(usage_of(r.json, "prompt_tokens"), 6);
    CU_ASSERT_EQUAL(eh_mismatches("text prompt", 0, got, plain_ids(&r, 0, got, 32), want, 12), 0);
    ts_resp_free(&r);

    /* Chat: the simple template, role by role, then "assistant:". */
    const char *chat = "system: be brief\nuser: hi\nassistant:";
    int32_t tmpl[64];
    uint32_t nt = 0;
    tmpl[nt++] = TOK_BYTE_BOS;
    for (const char *p = chat; *p; p++) tmpl[nt++] = (unsigned char)*p;
    eh_reference(m, tmpl, nt, greedy, 0, 10, want);
    r = ts_post(s, "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":[{\"type\":"
                "\"text\",\"text\":\"hi\"}]}],\"max_tokens\":10,\"temperature\":0,\"ignore_eos\":true,"
                "\"return_token_ids\":true}");
    CU_ASSERT_EQUAL_FATAL(r.status, 200);
    CU_ASSERT_EQUAL(usage_of(r.json, "prompt_tokens"), nt);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r.json, "object")), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(r.json, "choices"), 0), "message");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(msg, "role")), "assistant");
    CU_ASSERT_EQUAL(eh_mismatches("chat", 0, got, plain_ids(&r, 0, got, 32), want, 10), 0);
    ts_resp_free(&r);

    /* Chat streamed: the role comes first, then content; the same ids. */
    ts_stream st = ts_stream_post(s, "/v1/chat/completions",
                                  "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\","
                                  "\"content\":\"hi\"}],\"max_tokens\":10,\"temperature\":0,\"ignore_eos\":true,"
                                  "\"return_token_ids\":true,\"stream\":true}",
                                  0);
    CU_ASSERT_EQUAL(st.status, 200);
    json_t *first = json_array_get(st.events, 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(first, "object")), "chat.completion.chunk");
    json_t *delta = json_object_get(json_array_get(json_object_get(first, "choices"), 0), "delta");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(delta, "role")), "assistant");
    streamed sm;
    gather(&st, 0, &sm);
    CU_ASSERT_EQUAL(eh_mismatches("chat stream", 0, sm.ids, sm.n, want, 10), 0);
    CU_ASSERT_PTR_NULL(sm.usage);   /* include_usage was not asked for */
    ts_stream_free(&st);

    /* A batch of id prompts: one choice each, in order, each as if alone. */
    int32_t p0[20], p1[33], w0[16], w1[16];
    eh_random_prompt(7, VOCAB, p0, 20);
    eh_random_prompt(8, VOCAB, p1, 33);
    eh_reference(m, p0, 20, greedy, 0, 16, w0);
    eh_reference(m, p1, 33, greedy, 0, 16, w1);
    char *j0 = ts_ids_json(p0, 20), *j1 = ts_ids_json(p1, 33), body[2048];
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof body,
                 "{\"prompt\":[%s,%s],\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true,"
                 "\"stream\":%s,\"stream_options\":{\"include_usage\":true}}",
                 j0, j1, stream ? "true" : "false");
        if (!stream) {
            r = ts_post(s, "/v1/completions", body);
            CU_ASSERT_EQUAL_FATAL(r.status, 200);
            CU_ASSERT_EQUAL(json_array_size(json_object_get(r.json, "choices")), 2);
            CU_ASSERT_EQUAL(eh_mismatches("batch 0", 0, got, plain_ids(&r, 0, got, 32), w0, 16), 0);
            CU_ASSERT_EQUAL(eh_mismatches("batch 1", 1, got, plain_ids(&r, 1, got, 32), w1, 16), 0);
            CU_ASSERT_EQUAL(usage_of(r.json, "prompt_tokens"), 53);
            CU_ASSERT_EQUAL(usage_of(r.json, "completion_tokens"), 32);
            ts_resp_free(&r);
        } else {
            st = ts_stream_post(s, "/v1/completions", body, 0);
            gather(&st, 0, &sm);
            CU_ASSERT_EQUAL(eh_mismatches("batch stream 0", 0, sm.ids, sm.n, w0, 16), 0);
            CU_ASSERT_STRING_EQUAL(sm.finish, "length");
            CU_ASSERT_PTR_NOT_NULL_FATAL(sm.usage);
            CU_ASSERT_EQUAL(json_integer_value(json_object_get(sm.usage, "completion_tokens")), 32);
            gather(&st, 1, &sm);
            CU_ASSERT_EQUAL(eh_mismatches("batch stream 1", 1, sm.ids, sm.n, w1, 16), 0);
            CU_ASSERT_STRING_EQUAL(sm.finish, "length");
            ts_stream_free(&st);
        }
    }
    free(j0);
    free(j1);

    /* /v1/models and /health. */
    r = ts_request(s, "GET", "/v1/models", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 200);
    json_t *m0 = json_array_get(json_object_get(r.json, "data"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(m0, "id")), "tiny-llama");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(m0, "max_model_len")), 2048);
    ts_resp_free(&r);
    r = ts_request(s, "GET", "/health", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 200);
    ts_resp_free(&r);
    ts_stop(s);
}

/* ---- stop strings and stop ids ---- */
static void test_stop_strings_and_ids(void)
{
    const model *m = the_model();
    server_config c = ts_config(m);
    server *s = ts_start(&c);
    int32_t prompt[24], want[96], got[96];
    eh_random_prompt(31, VOCAB, prompt, 24);
    kern_sampling greedy = {0, 1, 0};
    uint32_t max = 96;
    CU_ASSERT_FATAL(eh_reference(m, prompt, 24, greedy, 0, max, want) == max);
    char *pj = ts_ids_json(prompt, 24), body[4096];

    /* A stop string: two printable tokens from the middle of the output. */
    uint32_t k = 4;
    while (k + 1 < max && !(want[k] > 32 && want[k] < 127 && want[k + 1] > 32 && want[k + 1] < 127 && want[k] != '"' &&
                            want[k] != '\\' && want[k + 1] != '"' && want[k + 1] != '\\'))
        k++;
    CU_ASSERT_FATAL(k + 1 < max);
    char stop[3] = {(char)want[k], (char)want[k + 1], 0};
    /* Expected: the shortest output whose text holds the stop string, and
     * its text up to the first occurrence. */
    char bytes[96 * 8];
    size_t nb = 0, cl = 0;
    uint32_t need = 0;
    char *clean = NULL;
    for (uint32_t i = 0; i < max && !need; i++) {
        nb += sv_token_bytes(byte_tok(), want[i], bytes + nb, 8);
        free(clean);
        clean = sv_utf8_clean(bytes, nb, &cl);
        if (strstr(clean, stop)) need = i + 1;
    }
    CU_ASSERT_FATAL(need > 0 && need <= k + 2);
    size_t cut = (size_t)(strstr(clean, stop) - clean);
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof body,
                 "{\"prompt\":%s,\"max_tokens\":%u,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true,"
                 "\"stop\":[\"%s\",\"never-appears-here\"],\"stream\":%s}",
                 pj, max, stop, stream ? "true" : "false");
        if (!stream) {
            ts_resp r = ts_post(s, "/v1/completions", body);
            CU_ASSERT_EQUAL_FATAL(r.status, 200);
            CU_ASSERT_STRING_EQUAL(plain_field(&r, 0, "finish_reason"), "stop");
            const char *text = plain_field(&r, 0, "text");
            CU_ASSERT(strlen(text) == cut && !memcmp(text, clean, cut));
            CU_ASSERT_EQUAL(usage_of(r.json, "completion_tokens"), need);
            CU_ASSERT_EQUAL(eh_mismatches("stop string", 0, got, plain_ids(&r, 0, got, 96), want, need), 0);
            ts_resp_free(&r);
        } else {
            ts_stream st = ts_stream_post(s, "/v1/completions", body, 0);
            streamed sm;
            gather(&st, 0, &sm);
            CU_ASSERT_STRING_EQUAL(sm.finish, "stop");
            /* Held back while it might have been the stop string: never sent. */
            CU_ASSERT(sm.len == cut && !memcmp(sm.text, clean, cut));
            CU_ASSERT_EQUAL(eh_mismatches("stop string stream", 0, sm.ids, sm.n, want, need), 0);
            ts_stream_free(&st);
        }
    }
    free(clean);

    /* A stop id: the output ends with its first occurrence. */
    int32_t sid = want[9];
    uint32_t first = 0;
    while (want[first] != sid) first++;
    snprintf(body, sizeof body,
             "{\"prompt\":%s,\"max_tokens\":%u,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true,"
             "\"stop_token_ids\":[%d]}",
             pj, max, sid);
    ts_resp r = ts_post(s, "/v1/completions", body);
    CU_ASSERT_EQUAL_FATAL(r.status, 200);
    CU_ASSERT_STRING_EQUAL(plain_field(&r, 0, "finish_reason"), "stop");
    CU_ASSERT_EQUAL(eh_mismatches("stop id", 0, got, plain_ids(&r, 0, got, 96), want, first + 1), 0);
    ts_resp_free(&r);
    /* ... also given in "stop" as a number. */
    snprintf(body, sizeof body,
             "{\"prompt\":%s,\"max_tokens\":%u,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true,"
             "\"stop\":[%d]}",
             pj, max, sid);
    r = ts_post(s, "/v1/completions", body);
    CU_ASSERT_EQUAL(usage_of(r.json, "completion_tokens"), first + 1);
    ts_resp_free(&r);
    free(pj);
    core_stats st;
    CU_ASSERT(server_wait_idle(s, 5) == 0);
    server_core_stats(s, &st);
    CU_ASSERT_EQUAL(st.pages_used, 0);   /* stopped requests gave their pages back */
    ts_stop(s);
}

/* ---- /metrics ---- */
static void test_metrics_move(void)
{
    server_config c = ts_config(the_model());
    server *s = ts_start(&c);
    ts_resp before = ts_request(s, "GET", "/metrics", NULL, NULL);
    CU_ASSERT_EQUAL_FATAL(before.status, 200);
    CU_ASSERT_EQUAL(ts_metric(before.body, "vllm:time_to_first_token_seconds_count"), 0);
    CU_ASSERT_EQUAL(ts_metric(before.body, "vllm:num_requests_running"), 0);
    int32_t prompt[40];
    eh_random_prompt(9, VOCAB, prompt, 40);
    for (int i = 0; i < 3; i++) {
        if (i == 2) prompt[39] ^= 1;   /* the same first 39 tokens: two full pages come from the cache */
        char *b = body_for(prompt, 40, 10, 0, 0, i == 1, "");
        if (i == 1) {
            ts_stream st = ts_stream_post(s, "/v1/completions", b, 0);
            ts_stream_free(&st);
        } else {
            ts_resp r = ts_post(s, "/v1/completions", b);
            CU_ASSERT_EQUAL(r.status, 200);
            json_t *details = json_object_get(json_object_get(r.json, "usage"), "prompt_tokens_details");
            if (i == 2) {
                CU_ASSERT_EQUAL(json_integer_value(json_object_get(details, "cached_tokens")), 32);
            }
            ts_resp_free(&r);
        }
        free(b);
    }
    CU_ASSERT(server_wait_idle(s, 5) == 0);
    ts_resp after = ts_request(s, "GET", "/metrics", NULL, NULL);
    const char *t = after.body;
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:time_to_first_token_seconds_count"), 3);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:e2e_request_latency_seconds_count"), 3);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:time_per_output_token_seconds_count"), 3);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:request_queue_time_seconds_count"), 3);
    /* 9 gaps each, fewer only if two tokens shared a time (they never do here). */
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:inter_token_latency_seconds_count"), 27);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:prompt_tokens_total"), 120);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:generation_tokens_total"), 30);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:request_success_total{finished_reason=\"length\""), 3);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:request_success_total{finished_reason=\"stop\""), 0);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:num_requests_running"), 0);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:num_requests_waiting"), 0);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:kv_cache_usage_perc"), 0);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:prefix_cache_queries_total"), 120);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:prefix_cache_hits_total"), 32 + 32);   /* the second and third requests */
    CU_ASSERT_DOUBLE_EQUAL(ts_metric(t, "vllm:gpu_prefix_cache_hit_rate"), 64.0 / 120, 1e-12);
    CU_ASSERT(ts_metric(t, "rehearse:steps_total") >= 30);
    CU_ASSERT_EQUAL(ts_metric(t, "vllm:spec_decode_num_draft_tokens_total"), 0);
    /* Buckets are cumulative and end at the count; the sum is the TTFTs'. */
    double last = 0;
    int buckets = 0;
    for (const char *p = strstr(t, "vllm:time_to_first_token_seconds_bucket"); p;
         p = strstr(p + 1, "vllm:time_to_first_token_seconds_bucket")) {
        double v = strtod(strchr(p, '}') + 2, NULL);
        CU_ASSERT(v >= last);
        last = v;
        buckets++;
    }
    CU_ASSERT(buckets > 10);
    CU_ASSERT_EQUAL(last, 3);
    CU_ASSERT(ts_metric(t, "vllm:time_to_first_token_seconds_sum") > 0);
    /* While a request runs, the gauges say so. */
    ts_resp_free(&before);
    ts_resp_free(&after);
    ts_stop(s);
}

/* ---- a client that hangs up ---- */
static int idle_pred(const core_stats *st, void *ctx)
{
    (void)ctx;
    return st->running == 0 && st->waiting == 0;
}

static int running_pred(const core_stats *st, void *ctx)
{
    return st->running >= *(uint32_t *)ctx;
}

typedef struct timeout_arg {
    server *s;
    const char *body;
    long status;
} timeout_arg;

static void *post_with_timeout(void *p)
{
    timeout_arg *a = p;
    char url[256];
    snprintf(url, sizeof url, "%s/v1/completions", server_url(a->s));
    CURL *c = curl_easy_init();
    ts_buf b = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, a->body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, ts_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 400L);
    curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
    curl_easy_cleanup(c);
    free(b.p);
    return NULL;
}

static void test_hang_up_aborts_and_frees_pages(void)
{
    char path[256];
    tu_tmp_path("serve-hangup.rhtr", path, sizeof path);
    server_config c = ts_config(the_model());
    c.record_path = path;
    server *s = ts_start(&c);
    int32_t prompt[40];
    eh_random_prompt(3, VOCAB, prompt, 40);

    /* Mid-stream: the client reads three events and closes. */
    char *b = body_for(prompt, 40, 1800, 0, 0, true, "");
    ts_stream st = ts_stream_post(s, "/v1/completions", b, 3);
    free(b);
    CU_ASSERT_EQUAL(st.status, 200);
    CU_ASSERT(st.n_events >= 3);
    ts_stream_free(&st);
    CU_ASSERT(ts_wait_stats(s, idle_pred, NULL, 10));
    core_stats cs;
    server_core_stats(s, &cs);
    CU_ASSERT_EQUAL(cs.aborted, 1);
    CU_ASSERT_EQUAL(cs.finished, 0);
    CU_ASSERT_EQUAL(cs.pages_used, 0);

    /* A plain request whose client gives up while it computes: only the
     * watch thread can notice, the connection being suspended. */
    eh_random_prompt(4, VOCAB, prompt, 40);
    b = body_for(prompt, 40, 1800, 0, 0, false, "");
    timeout_arg ta = {s, b, 0};
    pthread_t t;
    pthread_create(&t, NULL, post_with_timeout, &ta);
    uint32_t one = 1;
    CU_ASSERT(ts_wait_stats(s, running_pred, &one, 10));
    pthread_join(t, NULL);
    free(b);
    CU_ASSERT_EQUAL(ta.status, 0);   /* no answer: it gave up */
    CU_ASSERT(ts_wait_stats(s, idle_pred, NULL, 10));
    server_core_stats(s, &cs);
    CU_ASSERT_EQUAL(cs.aborted, 2);
    CU_ASSERT_EQUAL(cs.pages_used, 0);
    ts_stop(s);

    /* Both are in the recording, as aborted, with the tokens they got. */
    tr_trace tr;
    rh_err e;
    CU_ASSERT_FATAL(tr_trace_load(path, &tr, &e) == 0);
    CU_ASSERT_EQUAL(tr.n_requests, 2);
    for (size_t i = 0; i < tr.n_requests; i++) {
        const tr_request *q = &tr.requests[i];
        CU_ASSERT_EQUAL(q->finish, TR_FINISH_ABORT);
        CU_ASSERT(q->output_len >= (i == 0 ? 3u : 1u) && q->output_len < 1800);
        CU_ASSERT_EQUAL(q->n_times, q->output_len);
        CU_ASSERT_EQUAL(q->input_len, 40);
    }
    tr_trace_free(&tr);
}

/* ---- the recording replays through the simulator ---- */
static void test_recording_replays_in_simulator(void)
{
    char path[256];
    tu_tmp_path("serve-record.rhtr", path, sizeof path);
    const model *m = the_model();
    for (int overlap = 1; overlap >= 0; overlap--) {
        server_config c = ts_config(m);
        c.record_path = path;
        c.disable_overlap = !overlap;
        server *s = ts_start(&c);
        /* Pairs sharing a 64-token prefix, one at a time: the prefix cache
         * hits on every second request. */
        int32_t prompt[100];
        uint32_t lens[6] = {70, 90, 66, 99, 80, 65};
        for (int i = 0; i < 6; i++) {
            eh_random_prompt(40 + i / 2, VOCAB, prompt, 64);
            eh_random_prompt(90 + i, VOCAB, prompt + 64, lens[i] - 64);
            char *b = body_for(prompt, lens[i], 8 + i, 0, 0, i % 2, "");
            if (i % 2) {
                ts_stream st = ts_stream_post(s, "/v1/completions", b, 0);
                ts_stream_free(&st);
            } else {
                ts_resp r = ts_post(s, "/v1/completions", b);
                ts_resp_free(&r);
            }
            free(b);
        }
        ts_stop(s);

        tr_trace t;
        rh_err e;
        CU_ASSERT_FATAL(tr_trace_load(path, &t, &e) == 0);
        CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "source"), "rehearse serve");
        CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "overlap-schedule"), overlap ? "on" : "off");
        CU_ASSERT_EQUAL(t.header.block_size, 16);
        CU_ASSERT_STRING_EQUAL(t.header.model, "tiny-llama");
        CU_ASSERT_EQUAL_FATAL(t.n_requests, 6);
        uint32_t hidden = 0;
        for (size_t i = 0; i < t.n_steps; i++) {
            CU_ASSERT(t.steps[i].sched_time > 0 && t.steps[i].sched_time < 1);
            CU_ASSERT(t.steps[i].duration > 0);
            hidden += (t.steps[i].flags & TR_STEP_SCHED_HIDDEN) != 0;
        }
        /* Every step but the first of each request follows a forward. */
        if (overlap) {
            CU_ASSERT(hidden + 6 >= t.n_steps && hidden > 0);
        } else {
            CU_ASSERT_EQUAL(hidden, 0);
        }
        for (size_t i = 0; i < 6; i++) {
            const tr_request *q = &t.requests[i];
            CU_ASSERT_EQUAL(q->input_len, lens[i]);
            CU_ASSERT_EQUAL(q->output_len, 8 + i);
            CU_ASSERT_EQUAL(q->finish, TR_FINISH_LENGTH);
            CU_ASSERT_EQUAL(q->cached_tokens, i % 2 ? 64 : 0);
            CU_ASSERT_EQUAL(q->n_hashes, lens[i] / 16);
            CU_ASSERT(q->ttft > 0 && q->e2e >= q->ttft);
            CU_ASSERT_DOUBLE_EQUAL(q->token_times[0], q->ttft, 1e-9);
            if (i % 2) {
                CU_ASSERT_EQUAL(q->hashes[3], t.requests[i - 1].hashes[3]);
            }
        }
        /* The simulator reads it and, one request at a time, hits the cache
         * exactly where the server did. */
        sim_config sc;
        sim_config_default(&sc);
        sc.core = c.engine.core;
        sc.max_concurrency = 1;
        cost_linear_coef coef = {1e-3, 1e-5, 1e-4, 0, 0};
        cost_model *cost = cost_linear_new(&coef);
        sim_result sr;
        CU_ASSERT_FATAL(sim_run(&sc, &t, cost, &sr, &e) == 0);
        CU_ASSERT_EQUAL(sr.summary.completed, 6);
        for (size_t i = 0; i < 6; i++) CU_ASSERT_EQUAL(sr.requests[i].cached_tokens, t.requests[i].cached_tokens);
        sim_result_free(&sr);
        cost_free(cost);
        /* And its metrics summary reads back what was served. */
        metrics_summary ms;
        CU_ASSERT_EQUAL(metrics_of_trace(path, NULL, &ms, &e), 1);
        CU_ASSERT_EQUAL(ms.completed, 6);
        CU_ASSERT_EQUAL(ms.total_output_tokens, 8 + 9 + 10 + 11 + 12 + 13);
        tr_trace_free(&t);
    }
}

/* ---- rehearse bench against the server ---- */
static void test_bench_agrees_with_server_records(void)
{
    char path[256];
    tu_tmp_path("serve-bench.rhtr", path, sizeof path);
    server_config c = ts_config(the_model());
    c.record_path = path;
    server *s = ts_start(&c);
    bench_dataset d;
    bench_random_opts o = {.num_prompts = 12, .input_len = 64, .output_len = 16, .range_ratio = 0.5, .seed = 5};
    rh_err e;
    CU_ASSERT_FATAL(bench_dataset_random(&d, &o, 16, &e) == 0);
    d.vocab = VOCAB;
    bench_config bc;
    memset(&bc, 0, sizeof bc);
    bc.base_url = server_url(s);
    bc.endpoint = "/v1/completions";
    bc.api = BENCH_API_COMPLETIONS;
    bc.model = "tiny-llama";
    bc.stream = 1;
    bc.max_concurrency = 4;
    bench_result *r = calloc(d.n, sizeof *r);
    bench_run_info info;
    CU_ASSERT_FATAL(bench_run(&bc, &d, r, &info, &e) == 0);
    ts_stop(s);

    tr_trace t;
    CU_ASSERT_FATAL(tr_trace_load(path, &t, &e) == 0);
    CU_ASSERT_EQUAL_FATAL(t.n_requests, d.n);
    double diff[64];
    size_t nd = 0;
    for (size_t i = 0; i < d.n; i++) {
        CU_ASSERT_PTR_NULL(r[i].error);
        int32_t ids[128];
        uint64_t h[8];
        bench_item_tokens(&d, i, ids);
        uint32_t nh = tr_prompt_block_hashes(ids, d.items[i].input_len, 16, 0, h);
        const tr_request *q = NULL;
        for (size_t k = 0; k < t.n_requests && !q; k++)
            if (t.requests[k].input_len == d.items[i].input_len && t.requests[k].n_hashes == nh &&
                !memcmp(t.requests[k].hashes, h, nh * sizeof *h))
                q = &t.requests[k];
        CU_ASSERT_PTR_NOT_NULL_FATAL(q);
        CU_ASSERT_EQUAL(r[i].output_len, q->output_len);
        CU_ASSERT_EQUAL(r[i].input_len, q->input_len);
        /* The client sends before the server receives and reads after the
         * token was ready: its TTFT is the server's plus the trip. */
        CU_ASSERT(r[i].ttft >= q->ttft);
        diff[nd++] = r[i].ttft - q->ttft;
    }
    rh_summary sm;
    rh_summarize(diff, nd, &sm);
    if (sm.median >= 0.05) printf("\n    client TTFT exceeds the server's by %.1f ms (median)\n", 1e3 * sm.median);
    CU_ASSERT(sm.median < 0.05);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    tr_trace_free(&t);
}

/* ---- speculative decoding through the server ---- */
static void test_speculative_decoding(void)
{
    char path[256];
    tu_tmp_path("serve-spec.rhtr", path, sizeof path);
    const model *m = the_model();
    server_config c = ts_config(m);
    c.engine.spec.algorithm = SPEC_NGRAM;
    c.engine.core.spec_steps = 3;
    c.record_path = path;
    server *s = ts_start(&c);
    /* A repeating prompt: the n-gram drafter finds its suffix earlier. */
    int32_t prompt[48], want[40], got[40];
    for (uint32_t i = 0; i < 48; i++) prompt[i] = (int32_t)(7 + 13 * (i % 6));
    for (int k = 0; k < 2; k++) {
        double temp = k ? 0.8 : 0;
        CU_ASSERT_FATAL(eh_reference(m, prompt, 48, sampling_of(temp), 5, 40, want) == 40);
        char *b = body_for(prompt, 48, 40, temp, 5, k == 1, "");
        if (k == 0) {
            ts_resp r = ts_post(s, "/v1/completions", b);
            CU_ASSERT_EQUAL(r.status, 200);
            CU_ASSERT_EQUAL(eh_mismatches("ngram plain", 0, got, plain_ids(&r, 0, got, 40), want, 40), 0);
            ts_resp_free(&r);
        } else {
            ts_stream st = ts_stream_post(s, "/v1/completions", b, 0);
            streamed sm;
            gather(&st, 0, &sm);
            CU_ASSERT_EQUAL(eh_mismatches("ngram stream", 1, sm.ids, sm.n, want, 40), 0);
            ts_stream_free(&st);
        }
        free(b);
    }
    CU_ASSERT(server_wait_idle(s, 5) == 0);
    ts_resp r = ts_request(s, "GET", "/metrics", NULL, NULL);
    double drafts = ts_metric(r.body, "vllm:spec_decode_num_drafts_total");
    double proposed = ts_metric(r.body, "vllm:spec_decode_num_draft_tokens_total");
    double accepted = ts_metric(r.body, "vllm:spec_decode_num_accepted_tokens_total");
    double first = ts_metric(r.body, "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny-llama\",position=\"0\",engine=\"0\"}");
    ts_resp_free(&r);
    ts_stop(s);
    CU_ASSERT(drafts > 0 && proposed >= drafts && accepted <= proposed && first <= accepted);
    /* The recording counts the same drafts, request by request. */
    tr_trace t;
    rh_err e;
    CU_ASSERT_FATAL(tr_trace_load(path, &t, &e) == 0);
    double rec_proposed = 0, rec_accepted = 0, step_proposed = 0;
    for (size_t i = 0; i < t.n_requests; i++) {
        rec_proposed += t.requests[i].spec_proposed;
        rec_accepted += t.requests[i].spec_accepted;
    }
    for (size_t i = 0; i < t.n_steps; i++) step_proposed += t.steps[i].spec_proposed;
    CU_ASSERT_EQUAL(rec_proposed, proposed);
    CU_ASSERT_EQUAL(rec_accepted, accepted);
    CU_ASSERT_EQUAL(step_proposed, proposed);
    tr_trace_free(&t);
}

/* ---- the engine in three parts, as the scheduler thread drives it ---- */
typedef struct captured {
    int32_t out[4][64];
    uint32_t n[4];
    int finished[4], aborted[4];
} captured;

static void capture(void *ctx, const engine_event *ee)
{
    captured *c = ctx;
    uint64_t i = (uint64_t)(uintptr_t)ee->user;
    if (ee->ev.kind == CORE_EV_TOKENS)
        for (uint32_t k = 0; k < ee->ev.n_tokens; k++) c->out[i][c->n[i]++] = ee->tokens[k];
    if (ee->ev.kind == CORE_EV_FINISHED) c->finished[i]++;
    if (ee->ev.kind == CORE_EV_ABORTED) c->aborted[i]++;
}

static void *run_step(void *g)
{
    rh_err e;
    return (void *)(intptr_t)engine_step_run(g, &e);
}

static void test_engine_in_three_parts(void)
{
    const model *m = the_model();
    captured cap;
    memset(&cap, 0, sizeof cap);
    engine_config ec;
    engine_config_default(&ec);
    ec.m = m;
    ec.core.max_total_tokens = 4096;
    ec.hooks = (engine_hooks){.ctx = &cap, .on_event = capture};
    rh_err e;
    engine *g = engine_new(&ec, &e);
    CU_ASSERT_FATAL(g != NULL);
    int32_t prompt[4][40], want[4][64];
    kern_sampling sp = {0.9f, 1, 0};
    for (uint32_t i = 0; i < 4; i++) {
        eh_random_prompt(60 + i, VOCAB, prompt[i], 20 + 5 * i);
        eh_reference(m, prompt[i], 20 + 5 * i, sp, 9 + i, 30, want[i]);
    }
    engine_request r = {.id = 0, .prompt = prompt[0], .prompt_len = 20, .max_tokens = 30, .sampling = sp, .seed = 9,
                        .ignore_eos = true, .user = (void *)(uintptr_t)0};
    CU_ASSERT_FATAL(engine_add(g, &r, engine_now(g), &e) == 0);
    int steps = 0;
    while (!engine_idle(g)) {
        int rc = engine_step_begin(g, &e);
        CU_ASSERT_FATAL(rc == 1);
        CU_ASSERT(engine_step_begin(g, &e) < 0);   /* one batch in flight at a time */
        pthread_t t;
        pthread_create(&t, NULL, run_step, g);
        /* Meanwhile, on this thread: arrivals, and an abort that waits. */
        if (steps == 2 || steps == 5 || steps == 7) {
            uint32_t i = steps == 2 ? 1 : steps == 5 ? 2 : 3;
            r = (engine_request){.id = i, .prompt = prompt[i], .prompt_len = 20 + 5 * i, .max_tokens = 30,
                                 .sampling = sp, .seed = 9 + i, .ignore_eos = true, .user = (void *)(uintptr_t)i};
            CU_ASSERT(engine_add(g, &r, engine_now(g), &e) == 0);
        }
        if (steps == 12) CU_ASSERT(engine_abort(g, 3) == 0);
        void *ret;
        pthread_join(t, &ret);
        CU_ASSERT_EQUAL((intptr_t)ret, 0);
        if (steps == 12) CU_ASSERT_EQUAL(cap.aborted[3], 0);   /* not before the batch is committed */
        CU_ASSERT_FATAL(engine_step_end(g, &e) == 1);
        if (steps == 12) CU_ASSERT_EQUAL(cap.aborted[3], 1);
        steps++;
    }
    for (uint32_t i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(cap.finished[i], 1);
        CU_ASSERT_EQUAL(eh_mismatches("three parts", i, cap.out[i], cap.n[i], want[i], 30), 0);
    }
    CU_ASSERT(cap.n[3] > 0 && cap.n[3] < 30);
    CU_ASSERT_EQUAL(eh_mismatches("three parts, aborted", 3, cap.out[3], cap.n[3], want[3], cap.n[3]), 0);
    core_stats st;
    core_get_stats(engine_core(g), &st);
    CU_ASSERT_EQUAL(st.pages_used, 0);
    CU_ASSERT(core_check(engine_core(g), &e) == 0);
    engine_free(g);
}

static int cleanup(void)
{
    model_free(tiny);
    tok_free(bytes);
    tiny = NULL;
    bytes = NULL;
    return 0;
}

void register_test_serve(void)
{
    CU_pSuite s = CU_add_suite("serve", NULL, cleanup);
    CU_add_test(s, "the engine in three parts: adds and aborts while a batch computes on another thread",
                test_engine_in_three_parts);
    CU_add_test(s, "plain and streamed answers equal offline generation, overlap on and off",
                test_answers_equal_offline_generation);
    CU_add_test(s, "ten requests at once, chunked among decodes, each as if alone", test_concurrent_requests_equal_offline);
    CU_add_test(s, "text prompts, chat template, batched prompts, models and health", test_text_chat_and_batched_prompts);
    CU_add_test(s, "stop strings (held back while unsure) and stop ids", test_stop_strings_and_ids);
    CU_add_test(s, "/metrics counters and histograms move as the requests say", test_metrics_move);
    CU_add_test(s, "a client that hangs up is aborted and its pages freed", test_hang_up_aborts_and_frees_pages);
    CU_add_test(s, "the live recording replays through the simulator", test_recording_replays_in_simulator);
    CU_add_test(s, "rehearse bench TTFTs agree with the server's records", test_bench_agrees_with_server_records);
    CU_add_test(s, "n-gram speculative decoding: the same tokens, counted in /metrics and the recording",
                test_speculative_decoding);
}
