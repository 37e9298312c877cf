/* bench_body.h — the JSON body of one benchmark request.
 *
 * /v1/completions gets the prompt as token ids (`prompt: [ids]`, which vLLM,
 * SGLang and our server accept), so the server computes exactly the tokens we
 * chose and prefix sharing is exact. /v1/chat/completions takes text only:
 * each id becomes one common English word, so equal ids give equal text and
 * shared prefixes stay shared; the server's token count is then close to,
 * not exactly, the dataset's (the usage's prompt_tokens is recorded).
 * SGLang's /generate gets `input_ids` and `sampling_params` as
 * sglang.bench_serving sends them. Every request asks for max_tokens at
 * temperature 0 (unless `sampling` sets one) with ignore_eos (unless
 * keep_eos); `sampling` members go where the API takes sampling parameters
 * (the top level, or /generate's sampling_params); extra members come last. */
#ifndef RH_BENCH_BODY_H
#define RH_BENCH_BODY_H

#include <stddef.h>
#include <stdint.h>

typedef struct bench_body_opts {
    const char *model_json;     /* the model name already JSON-encoded, quotes included */
    int chat, stream;
    int generate;               /* SGLang's /generate: input_ids and sampling_params */
    int keep_eos;               /* ignore_eos false */
    const char *sampling;       /* JSON members ("top_p":0.9,...), or NULL; with "temperature"
                                   in them, the default temperature 0 is not sent */
    const char *extra;          /* JSON object members appended at the top level, or NULL */
    int32_t priority;           /* sent as "priority" (SGLang's and vLLM's) when nonzero */
    const char *lora_path;      /* /generate: sent as "lora_path" (JSON-encoded, quotes included), or NULL */
} bench_body_opts;

/* malloc'd NUL-terminated body (length in *len), or NULL when out of memory.
 * text, when not NULL, is the prompt as text (the ids are then unused). */
char *bench_request_body(const bench_body_opts *o, const int32_t *tokens, uint32_t n_tokens, const char *text,
                         uint32_t max_tokens, size_t *len);

/* `s` as a JSON string literal, quotes included (malloc'd), or NULL. */
char *bench_json_string(const char *s);

/* The word that stands for token id `id` in a chat prompt. */
const char *bench_word(int32_t id);

#endif
