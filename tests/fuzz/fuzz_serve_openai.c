/* fuzz_serve_openai.c — a request body is outside input: any bytes go
 * through the completions or chat parser without a crash, and a body it
 * accepts keeps its promises (prompts within the vocabulary and the context,
 * stop strings non-empty). Then the prompt's bytes play the model's output:
 * fed to the output text a few bytes at a time with the request's stop
 * strings, the text handed out is always valid UTF-8, never holds a stop
 * string, and is exactly the final text; and every response writer makes
 * JSON from it. The first byte picks the endpoint and how the text is cut. */
#include <math.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/openai.h"
#include "engine/serve/sglang_api.h"
#include "engine/serve/server_text.h"
#include "traces/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CONTEXT 256
#define VOCAB 512

static void check_json(char *s, size_t n, size_t skip)
{
    if (!s) return;   /* out of memory only */
    json_t *j = json_loadb(s + skip, n - skip, JSON_DISABLE_EOF_CHECK, NULL);
    if (!j) abort();
    json_decref(j);
    free(s);
}

static void play_output(const oa_request *r, const uint8_t *bytes, size_t n, size_t step, const tokenizer *tok)
{
    sv_text t;
    sv_text_init(&t, (const char *const *)r->stop, r->n_stop);
    char *sent = malloc(3 * n + 8);
    size_t n_sent = 0;
    for (size_t i = 0; i < n && !t.stopped; i += step) {
        size_t k = n - i < step ? n - i : step;
        if (sv_text_push(&t, (const char *)bytes + i, k) < 0) break;
        size_t m;
        const char *p = sv_text_take(&t, &m);
        memcpy(sent + n_sent, p, m);
        n_sent += m;
    }
    sv_text_finish(&t);
    size_t m;
    const char *p = sv_text_take(&t, &m);
    memcpy(sent + n_sent, p, m);
    n_sent += m;
    /* What went out is the text, whole, valid, and free of stop strings. */
    if (n_sent != t.len || (n_sent && memcmp(sent, t.text, n_sent))) abort();
    json_t *v = json_stringn(sent, n_sent);
    if (!v) abort();
    json_decref(v);
    sent[n_sent] = '\0';
    for (uint32_t s = 0; s < r->n_stop; s++)
        if (n_sent && memmem(sent, n_sent, r->stop[s], strlen(r->stop[s]))) abort();

    oa_ident id = {"cmpl-fuzz", 0, "m"};
    int32_t ids[4] = {1, 2, 3, 4};
    /* logprobs as the request asked (its top count, NAN and -inf among
     * them): the writers must still give valid JSON */
    static logprob_entry top[4 * LOGPROB_MAX_TOP];
    float lp[4] = {-0.5f, NAN, -INFINITY, -3};
    for (uint32_t k = 0; k < 4 * LOGPROB_MAX_TOP; k++) top[k] = (logprob_entry){(int32_t)(k % 300), -(float)k};
    uint32_t offset = 0;
    oa_choice_out c = {.text = sent, .len = n_sent, .ids = ids, .n_ids = 4, .finish = TR_FINISH_STOP,
                       .logprobs = lp + 0, .top = top, .prompt_ids = ids, .prompt_logprobs = lp, .prompt_top = top,
                       .n_prompt = 4, .tok = tok, .text_offset = &offset};
    oa_usage u = {1, 2, 3};
    size_t len;
    check_json(oa_response(r, &id, &c, 1, &u, &len), len, 0);
    check_json(oa_chunk(r, &id, 0, &c, true, &len), len, 6);
    check_json(oa_usage_chunk(r, &id, &u, &len), len, 6);
    if (r->kind == OA_GENERATE) {
        sg_choice sc[2] = {{.text = sent, .len = n_sent, .ids = ids, .n_ids = 4, .finish = TR_FINISH_STOP, .matched = 3},
                           {.text = sent, .len = n_sent, .finish = TR_FINISH_LENGTH, .matched = -1}};
        check_json(sg_response(&id, sc, 1, &len), len, 0);
        check_json(sg_response(&id, sc, 2, &len), len, 0);
        check_json(sg_event(&id, 1, true, &sc[1], &len), len, 6);
    }
    sv_text_free(&t);
    free(sent);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    oa_kind kind = data[0] & 1 ? OA_CHAT : OA_COMPLETIONS;
    size_t step = 1 + (data[0] >> 1) % 7;
    tokenizer *tk = tok_new_bytes();
    if (!tk) return 0;
    oa_limits lim = {.tok = tk, .vocab = VOCAB, .context = CONTEXT, .model = "m"};
    oa_request r;
    oa_error e;
    /* bit 4: SGLang's /generate body instead */
    bool generate = data[0] & 16;
    int rc = generate ? sg_parse_generate((const char *)data + 1, size - 1, &lim, &r, &e)
                      : oa_parse(kind, (const char *)data + 1, size - 1, &lim, &r, &e);
    if (rc == 0) {
        if (generate && r.kind != OA_GENERATE) abort();
        if (!r.n_prompts || r.max_tokens < 1) abort();
        for (uint32_t i = 0; i < r.n_prompts; i++) {
            if (!r.prompts[i].n || r.prompts[i].n + r.max_tokens > CONTEXT) abort();
            for (uint32_t k = 0; k < r.prompts[i].n; k++)
                if (r.prompts[i].ids[k] < 0 || r.prompts[i].ids[k] >= VOCAB) abort();
        }
        for (uint32_t i = 0; i < r.n_stop; i++)
            if (!r.stop[i][0]) abort();
        /* the logit rules as the engine will check them */
        if (r.top_logprobs > LOGPROB_MAX_TOP || r.rules.min_tokens > r.max_tokens || r.n < 1) abort();
        for (uint32_t i = 0; i < r.rules.n_bias; i++)
            if (r.rules.bias_ids[i] < 0 || r.rules.bias_ids[i] >= VOCAB || !(fabsf(r.rules.bias[i]) <= 100)) abort();
        play_output(&r, data + 1, size - 1, step, tk);
        oa_request_free(&r);
    } else {
        if (e.status < 400 || e.status > 599 || !e.message[0]) abort();
        size_t len;
        check_json(oa_error_json(&e, &len), len, 0);
    }
    tok_free(tk);
    return 0;
}
