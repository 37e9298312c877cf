/* test_serve_api.c — the server's pure parts on their own: output text
 * (UTF-8 repair as Python's "replace" decoding does it, stop strings held
 * back until certain), the OpenAI request parser and response writers, and
 * the Prometheus exposition. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/openai.h"
#include "engine/serve/prom.h"
#include "engine/serve/server_text.h"
#include "traces/trace.h"

/* ---- text ---- */
static void test_utf8_repair(void)
{
    /* Expected values are CPython's bytes.decode("utf-8", "replace"). */
    static const struct {
        const char *in;
        size_t n;
        const char *out;
    } cases[] = {
        {"\x80", 1, "\xef\xbf\xbd"},
        {"\xc3\x41", 2, "\xef\xbf\xbd" "A"},
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf0\x9f\x98", 3, "\xef\xbf\xbd"},
        {"\xe2\x82\x41", 3, "\xef\xbf\xbd" "A"},
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"},
        {"a\xff" "b", 3, "a\xef\xbf\xbd" "b"},
        {"\xe0\x80\xaf", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"caf\xc3\xa9", 5, "caf\xc3\xa9"},
        {"a\0b", 3, "a\xef\xbf\xbd" "b"},   /* NUL too: clients cannot carry it */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        char *out = sv_utf8_clean(cases[i].in, cases[i].n, &n);
        CU_ASSERT_FATAL(out != NULL);
        CU_ASSERT(n == strlen(cases[i].out) && !memcmp(out, cases[i].out, n));
        /* Byte by byte through sv_text gives the same, and never hands out
         * half a character. */
        sv_text t;
        sv_text_init(&t, NULL, 0);
        char got[64];
        size_t at = 0;
        for (size_t k = 0; k < cases[i].n; k++) {
            CU_ASSERT_EQUAL(sv_text_push(&t, cases[i].in + k, 1), 0);
            size_t m;
            const char *p = sv_text_take(&t, &m);
            memcpy(got + at, p, m);
            at += m;
            json_t *valid = json_stringn(got, at);   /* jansson refuses invalid UTF-8 */
            CU_ASSERT_PTR_NOT_NULL(valid);
            json_decref(valid);
        }
        sv_text_finish(&t);
        size_t m;
        const char *p = sv_text_take(&t, &m);
        memcpy(got + at, p, m);
        at += m;
        CU_ASSERT(at == n && !memcmp(got, out, n));
        sv_text_free(&t);
        free(out);
    }
    /* A character split across two tokens waits for its second half. */
    sv_text t;
    sv_text_init(&t, NULL, 0);
    size_t m;
    sv_text_push(&t, "x\xc3", 2);
    CU_ASSERT(!strncmp(sv_text_take(&t, &m), "x", 1) && m == 1);
    sv_text_push(&t, "\xa9", 1);
    const char *p = sv_text_take(&t, &m);
    CU_ASSERT(m == 2 && !memcmp(p, "\xc3\xa9", 2));
    sv_text_free(&t);
}

static char taken[256];
static size_t n_taken;

static void take_all(sv_text *t)
{
    size_t m;
    const char *p = sv_text_take(t, &m);
    memcpy(taken + n_taken, p, m);
    n_taken += m;
    taken[n_taken] = '\0';
}

static void test_stop_strings(void)
{
    const char *stops[] = {"world", "cd", "bcx", "\xc3\xa9!"};
    sv_text t;
    /* Held back while it may be the stop string, dropped when it is. */
    sv_text_init(&t, stops, 1);
    n_taken = 0;
    CU_ASSERT_EQUAL(sv_text_push(&t, "hello wor", 9), 0);
    take_all(&t);
    CU_ASSERT_STRING_EQUAL(taken, "hello ");
    CU_ASSERT_EQUAL(sv_text_push(&t, "ld!", 3), 1);
    take_all(&t);
    CU_ASSERT_STRING_EQUAL(taken, "hello ");
    CU_ASSERT_STRING_EQUAL(t.text, "hello ");
    CU_ASSERT_EQUAL(sv_text_push(&t, "more", 4), 0);   /* over: ignored */
    CU_ASSERT_STRING_EQUAL(t.text, "hello ");
    sv_text_free(&t);
    /* Released once it cannot be. */
    sv_text_init(&t, stops, 1);
    n_taken = 0;
    sv_text_push(&t, "wo", 2);
    take_all(&t);
    CU_ASSERT_STRING_EQUAL(taken, "");
    sv_text_push(&t, "rm", 2);
    take_all(&t);
    CU_ASSERT_STRING_EQUAL(taken, "worm");
    /* One letter a token, across many. */
    const char *s = " the world";
    int hit = 0;
    for (const char *c = s; *c && !hit; c++) hit = sv_text_push(&t, c, 1);
    CU_ASSERT_EQUAL(hit, 1);
    take_all(&t);
    CU_ASSERT_STRING_EQUAL(taken, "worm the ");
    sv_text_free(&t);
    /* The earliest of several; inside one token. */
    sv_text_init(&t, stops + 1, 2);
    CU_ASSERT_EQUAL(sv_text_push(&t, "abcdbcx", 7), 1);
    CU_ASSERT_STRING_EQUAL(t.text, "ab");
    sv_text_free(&t);
    /* A multi-byte stop string split mid-character. */
    sv_text_init(&t, stops + 3, 1);
    n_taken = 0;
    sv_text_push(&t, "ok \xc3", 4);
    sv_text_push(&t, "\xa9", 1);
    take_all(&t);
    CU_ASSERT_STRING_EQUAL(taken, "ok ");
    CU_ASSERT_EQUAL(sv_text_push(&t, "!", 1), 1);
    CU_ASSERT_STRING_EQUAL(t.text, "ok ");
    sv_text_free(&t);
    /* At the end, what was held back is released. */
    sv_text_init(&t, stops, 1);
    n_taken = 0;
    sv_text_push(&t, "a wor", 5);
    sv_text_finish(&t);
    take_all(&t);
    CU_ASSERT_STRING_EQUAL(taken, "a wor");
    sv_text_free(&t);
}

static void test_token_bytes(void)
{
    tokenizer *tk = tok_new_bytes();
    char b[8];
    CU_ASSERT_EQUAL(sv_token_bytes(tk, 'A', b, sizeof b), 1);
    CU_ASSERT_EQUAL(b[0], 'A');
    CU_ASSERT_EQUAL(sv_token_bytes(tk, TOK_BYTE_EOS, b, sizeof b), 0);   /* special: no text */
    CU_ASSERT_EQUAL(sv_token_bytes(tk, 400, b, sizeof b), 3);            /* unknown: U+FFFD */
    CU_ASSERT(!memcmp(b, "\xef\xbf\xbd", 3));
    CU_ASSERT_EQUAL(sv_token_bytes(NULL, 'A', b, sizeof b), 0);
    tok_free(tk);
}

/* ---- the request parser ---- */
static oa_limits limits(tokenizer *tk)
{
    return (oa_limits){.tok = tk, .vocab = 512, .context = 100, .model = "tiny-llama"};
}

static int parse(oa_kind k, const char *body, oa_request *r, oa_error *e)
{
    tokenizer *tk = tok_new_bytes();
    oa_limits lim = limits(tk);
    int rc = oa_parse(k, body, strlen(body), &lim, r, e);
    tok_free(tk);
    return rc;
}

static void test_parse_requests(void)
{
    oa_request r;
    oa_error e;
    CU_ASSERT_FATAL(parse(OA_COMPLETIONS,
                          "{\"model\":\"tiny-llama\",\"prompt\":[5,6,7],\"max_tokens\":9,\"temperature\":0.5,"
                          "\"top_p\":0.8,\"top_k\":-1,\"seed\":-3,\"stop\":[\"x\",\"\",7],\"stop_token_ids\":[8],"
                          "\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                          "\"return_token_ids\":true,\"n\":1,\"logprobs\":null,\"unknown\":{\"a\":1}}",
                          &r, &e) == 0);
    CU_ASSERT_EQUAL(r.n_prompts, 1);
    CU_ASSERT_EQUAL(r.prompts[0].n, 3);
    CU_ASSERT_EQUAL(r.prompts[0].ids[2], 7);
    CU_ASSERT_EQUAL(r.max_tokens, 9);
    CU_ASSERT_DOUBLE_EQUAL(r.sampling.temperature, 0.5, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(r.sampling.top_p, 0.8, 1e-6);
    CU_ASSERT_EQUAL(r.sampling.top_k, 0);
    CU_ASSERT(r.has_seed && r.seed == (uint64_t)-3);
    CU_ASSERT_EQUAL(r.n_stop, 1);   /* the empty string is ignored */
    CU_ASSERT_STRING_EQUAL(r.stop[0], "x");
    CU_ASSERT_EQUAL(r.n_stop_ids, 2);
    CU_ASSERT(r.stop_ids[0] == 7 && r.stop_ids[1] == 8);
    CU_ASSERT(r.ignore_eos && r.stream && r.include_usage && r.return_token_ids);
    oa_request_free(&r);

    /* Defaults; a text prompt gets the BOS. */
    CU_ASSERT_FATAL(parse(OA_COMPLETIONS, "{\"prompt\":\"hi\"}", &r, &e) == 0);
    CU_ASSERT_EQUAL(r.max_tokens, 16);
    CU_ASSERT_DOUBLE_EQUAL(r.sampling.temperature, 1, 0);
    CU_ASSERT(!r.has_seed && !r.stream && !r.ignore_eos);
    CU_ASSERT(r.prompts[0].n == 3 && r.prompts[0].ids[0] == TOK_BYTE_BOS && r.prompts[0].ids[1] == 'h');
    oa_request_free(&r);
    /* A default that does not fit shrinks; an integral real is an integer. */
    CU_ASSERT_FATAL(parse(OA_COMPLETIONS, "{\"prompt\":\"0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890\"}", &r, &e) == 0);
    CU_ASSERT_EQUAL(r.max_tokens, 100 - 92);
    oa_request_free(&r);
    CU_ASSERT_FATAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"max_tokens\":16.0}", &r, &e) == 0);
    CU_ASSERT_EQUAL(r.max_tokens, 16);
    oa_request_free(&r);
    /* Batches of text and of ids. */
    CU_ASSERT_FATAL(parse(OA_COMPLETIONS, "{\"prompt\":[\"a\",\"bc\"]}", &r, &e) == 0);
    CU_ASSERT(r.n_prompts == 2 && r.prompts[1].n == 3);
    oa_request_free(&r);
    CU_ASSERT_FATAL(parse(OA_COMPLETIONS, "{\"prompt\":[[1,2],[3]]}", &r, &e) == 0);
    CU_ASSERT(r.n_prompts == 2 && r.prompts[0].n == 2 && r.prompts[1].ids[0] == 3);
    oa_request_free(&r);
    /* Chat: the template, and the rest of the context by default. */
    CU_ASSERT_FATAL(parse(OA_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_completion_tokens\":5}",
                          &r, &e) == 0);
    CU_ASSERT_EQUAL(r.max_tokens, 5);
    oa_request_free(&r);
    CU_ASSERT_FATAL(parse(OA_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r, &e) == 0);
    uint32_t n = (uint32_t)strlen("user: hi\nassistant:") + 1;
    CU_ASSERT_EQUAL(r.prompts[0].n, n);
    CU_ASSERT_EQUAL(r.max_tokens, 100 - n);
    oa_request_free(&r);

    /* Refusals name the field. */
    CU_ASSERT_EQUAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"top_p\":1.5}", &r, &e), -1);
    CU_ASSERT(e.status == 400 && !strcmp(e.param, "top_p") && !strcmp(e.code, "invalid_value"));
    /* Checked as the sampler holds it: a double that is 0 as a float. */
    CU_ASSERT_EQUAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"top_p\":1e-300}", &r, &e), -1);
    CU_ASSERT(e.status == 400 && e.param && !strcmp(e.param, "top_p") && !strcmp(e.code, "invalid_value"));
    CU_ASSERT_EQUAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"top_p\":1e-30}", &r, &e), 0);
    oa_request_free(&r);
    /* Another model names a LoRA adapter (whether it is served, the
     * scheduler says): vLLM's bare name, SGLang's BASE:NAME, or lora_path,
     * which the model overrides; a name with a colon left is no adapter. */
    CU_ASSERT_EQUAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"model\":\"x\"}", &r, &e), 0);
    CU_ASSERT_STRING_EQUAL(r.adapter, "x");
    oa_request_free(&r);
    CU_ASSERT_EQUAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"model\":\"tiny-llama:y\",\"lora_path\":\"z\"}", &r, &e), 0);
    CU_ASSERT_STRING_EQUAL(r.adapter, "y");
    oa_request_free(&r);
    CU_ASSERT_EQUAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"model\":\"tiny-llama\",\"lora_path\":\"z\"}", &r, &e), 0);
    CU_ASSERT_STRING_EQUAL(r.adapter, "z");
    oa_request_free(&r);
    CU_ASSERT_EQUAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"model\":\"tiny-llama\"}", &r, &e), 0);
    CU_ASSERT_STRING_EQUAL(r.adapter, "");
    oa_request_free(&r);
    CU_ASSERT_EQUAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"model\":\"a:b:c\"}", &r, &e), -1);
    CU_ASSERT(e.status == 404 && !strcmp(e.code, "model_not_found"));
    CU_ASSERT_EQUAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"lora_path\":7}", &r, &e), -1);
    CU_ASSERT(e.status == 400 && !strcmp(e.param, "lora_path"));
    CU_ASSERT_EQUAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"max_tokens\":100}", &r, &e), -1);
    CU_ASSERT(e.status == 400 && !strcmp(e.code, "context_length_exceeded"));
    CU_ASSERT_EQUAL(parse(OA_COMPLETIONS, "{\"prompt\":[1],\"max_tokens\":99}", &r, &e), 0);
    oa_request_free(&r);
    oa_limits lim = {.tok = NULL, .vocab = 512, .context = 100};
    CU_ASSERT_EQUAL(oa_parse(OA_COMPLETIONS, "{\"prompt\":\"text\"}", 17, &lim, &r, &e), -1);   /* no tokenizer */
    CU_ASSERT(e.status == 400 && !strcmp(e.param, "prompt"));
}

static void test_chat_template(void)
{
    json_t *m = json_loads("[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                           "\"text\":\"A\"},{\"type\":\"text\",\"text\":\"B\"}]},{\"role\":\"assistant\",\"content\":null}]",
                           0, NULL);
    size_t n;
    oa_error e;
    char *t = oa_chat_text(m, &n, &e);
    CU_ASSERT_STRING_EQUAL(t, "system: S\nuser: AB\nassistant: \nassistant:");
    CU_ASSERT_EQUAL(n, strlen(t));
    free(t);
    json_decref(m);
}

/* ---- writers ---- */
static void test_writers(void)
{
    oa_request r = {.kind = OA_COMPLETIONS, .return_token_ids = true};
    oa_ident id = {"cmpl-1", 1700000000, "m\"odel"};
    int32_t ids[] = {1, 2};
    oa_choice_out c[2] = {{.text = "ab", .len = 2, .ids = ids, .n_ids = 2, .finish = TR_FINISH_LENGTH},
                          {.text = "x\xff", .len = 2, .ids = ids, .n_ids = 1, .finish = TR_FINISH_STOP}};
    oa_usage u = {10, 3, 4};
    size_t n;
    char *s = oa_response(&r, &id, c, 2, &u, &n);
    json_t *j = json_loads(s, 0, NULL);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_EQUAL(n, strlen(s));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "model")), "m\"odel");
    json_t *ch = json_object_get(j, "choices");
    CU_ASSERT_EQUAL(json_array_size(ch), 2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(ch, 1), "finish_reason")), "stop");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(ch, 1), "text")), "x\xef\xbf\xbd");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(json_array_get(ch, 0), "token_ids")), 2);
    json_t *us = json_object_get(j, "usage");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(us, "total_tokens")), 13);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(us, "prompt_tokens_details"), "cached_tokens")), 4);
    json_decref(j);
    free(s);

    /* A chat chunk: the role first, then content only. */
    r.kind = OA_CHAT;
    r.return_token_ids = false;
    oa_choice_out d = {.text = "hi", .len = 2};
    s = oa_chunk(&r, &id, 3, &d, true, &n);
    CU_ASSERT(!strncmp(s, "data: {", 7) && !strcmp(s + n - 2, "\n\n"));
    j = json_loads(s + 6, JSON_DISABLE_EOF_CHECK, NULL);
    json_t *ch0 = json_array_get(json_object_get(j, "choices"), 0);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(ch0, "index")), 3);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(ch0, "delta"), "role")), "assistant");
    CU_ASSERT(json_is_null(json_object_get(ch0, "finish_reason")));
    json_decref(j);
    free(s);
    d = (oa_choice_out){.text = "", .finish = TR_FINISH_LENGTH};
    s = oa_chunk(&r, &id, 0, &d, false, &n);
    j = json_loads(s + 6, JSON_DISABLE_EOF_CHECK, NULL);
    ch0 = json_array_get(json_object_get(j, "choices"), 0);
    CU_ASSERT_EQUAL(json_object_size(json_object_get(ch0, "delta")), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(ch0, "finish_reason")), "length");
    json_decref(j);
    free(s);
    s = oa_usage_chunk(&r, &id, &u, &n);
    j = json_loads(s + 6, JSON_DISABLE_EOF_CHECK, NULL);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(j, "choices")), 0);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 3);
    json_decref(j);
    free(s);

    /* Errors: OpenAI's shape, null for what is not known. */
    oa_error e;
    oa_fail(&e, 429, NULL, "too_many_requests", "wait %d s", 3);
    s = oa_error_json(&e, &n);
    j = json_loads(s, 0, NULL);
    json_t *err = json_object_get(j, "error");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "message")), "wait 3 s");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "type")), "rate_limit_error");
    CU_ASSERT(json_is_null(json_object_get(err, "param")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "code")), "too_many_requests");
    json_decref(j);
    free(s);
}

/* ---- Prometheus ---- */
static double value_of(const char *text, const char *line_start)
{
    const char *p = strstr(text, line_start);
    if (!p) return -1;
    const char *end = strchr(p, '\n');
    while (end > p && end[-1] != ' ') end--;
    return strtod(end, NULL);
}

static void test_prometheus(void)
{
    prom *p = prom_new("a\"b");
    double t1[] = {1.5, 1.6, 1.6, 1.9};   /* two tokens together: one delivery */
    prom_request r1 = {.arrival = 1.0, .admitted = 1.2, .token_times = t1, .n_tokens = 4, .prompt_tokens = 7,
                       .finish = TR_FINISH_LENGTH};
    prom_request_done(p, &r1);
    prom_request r2 = {.arrival = 2.0, .admitted = 2.0, .token_times = NULL, .n_tokens = 0, .prompt_tokens = 3,
                       .finish = TR_FINISH_ABORT};
    prom_request_done(p, &r2);
    prom_request_params(p, 2, 16, 4);   /* a request of n = 2, max_tokens 16, its longer choice 4 tokens */
    tr_step st = {.sched_time = 0.25, .flags = TR_STEP_SCHED_HIDDEN, .retractions = 2};
    prom_step(p, &st);
    tr_step dec = {.decode_seqs = 3, .decode_context = 300, .decode_tokens = 3};
    prom_step(p, &dec);
    prom_cache_config(p, 16, 10, true);
    prom_max_running(p, 4);
    core_stats cs = {.running = 3, .waiting = 5, .pages_total = 10, .pages_used = 4, .prompt_tokens = 100,
                     .cached_tokens = 25, .new_token_ratio = 0.7};
    prom_core(p, &cs);
    prom_spec_counters sc = {.drafts = 2, .draft_tokens = 6, .accepted_tokens = 3, .accepted_at = {2, 1}};
    prom_spec_add(p, &sc);
    size_t n;
    char *t = prom_render(p, &n);
    CU_ASSERT_EQUAL(n, strlen(t));
    const char *L = "{model_name=\"a\\\"b\"}";   /* the label escaped */
    const char *LE = "{model_name=\"a\\\"b\",engine=\"0\"}";   /* vLLM's names: and its engine */
    char k[160];
#define V(name) (snprintf(k, sizeof k, "%s%s ", name, strncmp(name, "vllm:", 5) ? L : LE), value_of(t, k))
    CU_ASSERT_EQUAL(V("vllm:time_to_first_token_seconds_count"), 1);
    CU_ASSERT_DOUBLE_EQUAL(V("vllm:time_to_first_token_seconds_sum"), 0.5, 1e-12);
    CU_ASSERT_EQUAL(V("vllm:inter_token_latency_seconds_count"), 2);
    CU_ASSERT_DOUBLE_EQUAL(V("vllm:inter_token_latency_seconds_sum"), 0.4, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(V("vllm:time_per_output_token_seconds_sum"), 0.4 / 3, 1e-12);
    CU_ASSERT_EQUAL(V("vllm:e2e_request_latency_seconds_count"), 1);
    CU_ASSERT_EQUAL(V("vllm:request_queue_time_seconds_count"), 2);
    CU_ASSERT_EQUAL(V("vllm:prompt_tokens_total"), 10);
    CU_ASSERT_EQUAL(V("vllm:generation_tokens_total"), 4);
    CU_ASSERT_EQUAL(V("vllm:num_requests_running"), 3);
    CU_ASSERT_EQUAL(V("vllm:num_requests_waiting"), 5);
    CU_ASSERT_DOUBLE_EQUAL(V("vllm:kv_cache_usage_perc"), 0.4, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(V("vllm:gpu_cache_usage_perc"), 0.4, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(V("vllm:gpu_prefix_cache_hit_rate"), 0.25, 1e-12);
    CU_ASSERT_EQUAL(V("vllm:prefix_cache_hits_total"), 25);
    CU_ASSERT_EQUAL(V("vllm:num_preemptions_total"), 2);
    CU_ASSERT_EQUAL(V("vllm:spec_decode_num_accepted_tokens_total"), 3);
    CU_ASSERT_EQUAL(V("rehearse:steps_sched_hidden_total"), 1);
    CU_ASSERT_DOUBLE_EQUAL(V("rehearse:step_sched_seconds_total"), 0.25, 1e-12);
    /* vLLM's per-request parameters and prefill time per prompt token (0.3 s over 7) */
    CU_ASSERT_DOUBLE_EQUAL(V("vllm:time_per_prefill_token_request_seconds_sum"), 0.3 / 7, 1e-12);
    CU_ASSERT_EQUAL(V("vllm:time_per_prefill_token_request_seconds_count"), 1);
    CU_ASSERT_EQUAL(V("vllm:request_params_n_sum"), 2);
    CU_ASSERT_EQUAL(V("vllm:request_params_max_tokens_sum"), 16);
    CU_ASSERT_EQUAL(V("vllm:request_max_num_generation_tokens_sum"), 4);
    /* SGLang's scheduler gauges */
    CU_ASSERT_DOUBLE_EQUAL(V("sglang:spec_accept_rate"), 0.5, 1e-12);
    CU_ASSERT_EQUAL(V("sglang:max_total_num_tokens"), 160);
    CU_ASSERT_EQUAL(V("sglang:num_retracted_reqs"), 2);
    CU_ASSERT_EQUAL(V("sglang:num_retracted_requests_total"), 2);
    CU_ASSERT_DOUBLE_EQUAL(V("sglang:new_token_ratio"), 0.7, 1e-12);
    CU_ASSERT_EQUAL(V("sglang:decode_sum_seq_lens"), 303);
    CU_ASSERT_DOUBLE_EQUAL(V("sglang:utilization"), 0.75, 1e-12);   /* 3 of 4 running beats 0.4 / 0.9 */
#undef V
    CU_ASSERT_EQUAL(value_of(t, "vllm:request_success_total{finished_reason=\"abort\""), 1);
    CU_ASSERT_EQUAL(value_of(t, "vllm:request_success_total{finished_reason=\"length\""), 1);
    CU_ASSERT_EQUAL(value_of(t, "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"a\\\"b\",position=\"1\",engine=\"0\"}"), 1);
    /* The TTFT of 0.5 s lands in the 0.5 bucket and every one after it. */
    CU_ASSERT_EQUAL(value_of(t, "vllm:time_to_first_token_seconds_bucket{le=\"0.25\""), 0);
    CU_ASSERT_EQUAL(value_of(t, "vllm:time_to_first_token_seconds_bucket{le=\"0.5\""), 1);
    CU_ASSERT_EQUAL(value_of(t, "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\""), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "# TYPE vllm:time_to_first_token_seconds histogram\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "# TYPE vllm:prompt_tokens_total counter\n"));
    free(t);
    prom_free(p);
}

void register_test_serve_api(void)
{
    CU_pSuite s = CU_add_suite("serve_api", NULL, NULL);
    CU_add_test(s, "output text: UTF-8 repaired as Python's replace decoding, never half a character", test_utf8_repair);
    CU_add_test(s, "stop strings: held back while unsure, cut at the first, released at the end", test_stop_strings);
    CU_add_test(s, "token bytes: specials silent, unknown ids U+FFFD", test_token_bytes);
    CU_add_test(s, "request parser: every field, defaults, batches, chat, refusals", test_parse_requests);
    CU_add_test(s, "chat template", test_chat_template);
    CU_add_test(s, "responses, chunks, usage and errors in the OpenAI schema", test_writers);
    CU_add_test(s, "Prometheus exposition: vLLM names, histograms, escaped labels", test_prometheus);
}
