/* openai.h — the OpenAI schema of /v1/completions and /v1/chat/completions:
 * a request body parsed into checked parameters, and the responses, stream
 * chunks and errors written back. Pure functions (jansson, the tokenizer):
 * no engine, no HTTP, no threads, so the parser is fuzzed on its own.
 *
 * Accepted (anything else in the body is ignored, as OpenAI servers do):
 *   model          must name the served model when given (else 404)
 *   prompt         completions: a string, an array of ids, an array of
 *                  strings or an array of id arrays (one choice each)
 *   messages       chat: [{role, content}], content a string, null or
 *                  [{type: "text", text}]; rendered by the chat template
 *   max_tokens     >= 1 (max_completion_tokens too); default 16 for
 *                  completions, the rest of the context for chat
 *   temperature >= 0 (default 1), top_p in (0, 1], top_k (0 or -1: off),
 *   seed, stop (a string, or an array of strings and/or token ids),
 *   stop_token_ids, ignore_eos, stream, stream_options.include_usage,
 *   return_token_ids (each choice and chunk also carries its token ids),
 *   n (choices per prompt; best_of only equal to n), logit_bias ({id:
 *   -100..100}), min_tokens (<= max_tokens), min_p in [0, 1],
 *   presence_penalty and frequency_penalty in [-2, 2], repetition_penalty
 *   > 0 (engine/model/logits.h), logprobs (completions: 0..20 top ids;
 *   chat: true, with top_logprobs 0..20), echo (completions: the prompt
 *   opens the text; with logprobs its ids are scored too),
 *   return_tokens_as_token_ids (logprobs name each token "token_id:N", as
 *   vLLM does), user (an end-user id: changes no output).
 * Refused with a 400 naming them unless they ask for the default
 * (openai_params.c): suffix, tools, tool_choice, functions, response_format
 * other than text, guided and structured outputs, allowed_token_ids,
 * bad_words, prompt_logprobs, truncate_prompt_tokens, chat's echo and
 * continue_final_message, stream_options.continuous_usage_stats, and the like.
 * Chat: with a tokenizer whose tokenizer_config.json carries a Jinja
 * chat_template, that template rendered as Hugging Face's
 * apply_chat_template does (text parts of a content joined by newlines),
 * with add_generation_prompt (default true), chat_template_kwargs as extra
 * variables and a request's own chat_template, then encoded without an added
 * BOS (the template writes it), as vLLM does. Without one: the tokenizer's
 * BOS, then "ROLE: CONTENT\n" per message, then "assistant:", and those
 * three options are refused. Text prompts are encoded with the BOS
 * prepended when the tokenizer has one.
 * Every refusal is an oa_error: HTTP status, message, the parameter at
 * fault and a code, written as {"error": {message, type, param, code}}. */
#ifndef RH_OPENAI_H
#define RH_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model/logits.h"
#include "engine/model/tokenizer.h"
#include "kernels/kernels.h"

#define OA_MAX_PROMPTS 64       /* choices one request may ask for */
#define OA_MAX_STOP 16          /* stop strings */
#define OA_MAX_STOP_LEN 256     /* bytes per stop string */
#define OA_MAX_STOP_IDS 256

typedef enum oa_kind { OA_COMPLETIONS = 0, OA_CHAT = 1, OA_GENERATE = 2 /* SGLang's /generate: sglang_api.h */ } oa_kind;

typedef struct oa_error {
    int status;                 /* 400, 401, 404, 413, 429, 500, 503 */
    char message[600];
    char type[40];              /* invalid_request_error, authentication_error, ... */
    char param[40];             /* "" when no parameter is at fault */
    char code[40];              /* "" for null */
} oa_error;

/* Fills e and returns -1. */
int oa_fail(oa_error *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

typedef struct oa_prompt {
    int32_t *ids;               /* owned */
    uint32_t n;
} oa_prompt;

typedef struct oa_request {
    oa_kind kind;
    oa_prompt *prompts;
    uint32_t n_prompts;
    uint32_t max_tokens;        /* resolved: given, or the default */
    kern_sampling sampling;
    bool has_seed;
    uint64_t seed;
    char **stop;                /* stop strings, non-empty, valid UTF-8 */
    uint32_t n_stop;
    int32_t *stop_ids;          /* from stop and stop_token_ids */
    uint32_t n_stop_ids;
    bool ignore_eos, stream, include_usage, return_token_ids;
    int32_t priority;           /* "priority" (vLLM's and SGLang's): its place in the queue under
                                   --enable-priority-scheduling; 0 when not given */
    logit_rules rules;          /* logit_bias (ids and biases owned), min_tokens, min_p, penalties */
    bool logprobs;              /* completions: logprobs >= 0; chat: logprobs true */
    uint32_t top_logprobs;      /* completions: logprobs N; chat: top_logprobs */
    bool echo;                  /* completions: the prompt opens the text (and the logprobs, with logprobs) */
    bool tokens_as_ids;         /* return_tokens_as_token_ids: logprobs name tokens "token_id:N" (vLLM) */
    uint32_t n;                 /* choices per prompt (>= 1): prompts holds n copies of each, prompt-major */
    char rid[40];               /* /generate's "rid": the response's id and /abort_request's key; "" when not given */
    char adapter[128];          /* the LoRA adapter: model "BASE:NAME" (SGLang) or "NAME" (vLLM), else
                                   "lora_path" (SGLang); "" for the base model. Whether it is served
                                   is the scheduler's to say (the registry is its own). */
} oa_request;

/* What the server serves, for checking a request. */
typedef struct oa_limits {
    const tokenizer *tok;       /* NULL: text is refused, token ids only */
    uint32_t vocab;             /* the model's vocabulary: ids must be below it */
    uint32_t context;           /* prompt + max_tokens must fit */
    const char *model;          /* the served model name */
} oa_limits;

/* Parses and checks a body. 0, or -1 with e filled (nothing to free then). */
int oa_parse(oa_kind kind, const char *body, size_t n, const oa_limits *lim, oa_request *out, oa_error *e);
void oa_request_free(oa_request *r);

/* The chat template applied to a messages array (a jansson json_t*, passed
 * as const void* to keep jansson out of this header): malloc'd text. */
char *oa_chat_text(const void *messages, size_t *len, oa_error *e);

/* ---- writing ---- */
typedef struct oa_choice_out {
    const char *text;           /* valid UTF-8 */
    size_t len;
    const int32_t *ids;         /* written when the request asked for token ids */
    uint32_t n_ids;
    int finish;                 /* enum tr_finish; 0 while the choice runs */
    /* When the request asked for logprobs: one per id, top_logprobs each. */
    const float *logprobs;
    const logprob_entry *top;
    /* Echo with logprobs: the prompt's ids and scores come first (the
     * first score is NAN: written as null). */
    const int32_t *prompt_ids;
    const float *prompt_logprobs;
    const logprob_entry *prompt_top;
    uint32_t n_prompt;
    const tokenizer *tok;       /* names the ids in logprobs */
    uint32_t *text_offset;      /* completions' text_offset: characters before this piece, advanced */
} oa_choice_out;

typedef struct oa_usage {
    uint64_t prompt, completion, cached;
} oa_usage;

/* Names each response carries. */
typedef struct oa_ident {
    const char *id;             /* "cmpl-..." or "chatcmpl-..." */
    long long created;          /* unix seconds */
    const char *model;
} oa_ident;

/* "stop", "length", or "abort" / "error" (never sent as a success). */
const char *oa_finish_reason(int finish);

/* The whole non-streamed response. malloc'd JSON, NULL when out of memory. */
char *oa_response(const oa_request *r, const oa_ident *id, const oa_choice_out *c, uint32_t n, const oa_usage *u,
                  size_t *len);
/* One server-sent event for one choice: "data: {...}\n\n". `first` adds the
 * chat role to the delta. */
char *oa_chunk(const oa_request *r, const oa_ident *id, uint32_t index, const oa_choice_out *c, bool first,
               size_t *len);
/* The closing usage event (stream_options.include_usage): empty choices. */
char *oa_usage_chunk(const oa_request *r, const oa_ident *id, const oa_usage *u, size_t *len);
/* {"error": {...}} and, for streams, the same as an event. */
char *oa_error_json(const oa_error *e, size_t *len);
char *oa_error_event(const oa_error *e, size_t *len);

#endif
