/* sglang_api.h — SGLang's native /generate, as its documentation and its
 * benchmark client (sglang.bench_serving --backend sglang) define it.
 *
 * Request: {"text": str | [str], or "input_ids": [id] | [[id]],
 * "sampling_params": {max_new_tokens (default 128), min_new_tokens,
 * temperature, top_p, top_k, min_p, frequency_penalty, presence_penalty,
 * repetition_penalty, stop, stop_token_ids, ignore_eos, n, logit_bias,
 * skip_special_tokens, spaces_between_special_tokens, no_stop_trim},
 * "stream", "rid", "return_logprob" (false only), "logprob_start_len",
 * "lora_path" and "image_data" (empty only)}. It is checked as the
 * completions body it amounts to (openai.h), and a refusal names the field
 * as /generate spells it ("sampling_params.max_new_tokens").
 *
 * Response: per choice {"text", "output_ids", "meta_info": {"id",
 * "finish_reason" ({"type": "length", "length": N} | {"type": "stop",
 * "matched": id} | {"type": "abort"}, null while running), "prompt_tokens",
 * "completion_tokens", "cached_tokens", "e2e_latency"}}; one object for one
 * choice, else an array. A stream sends one such object per event, its text
 * the whole text so far (SGLang's default), then "data: [DONE]". */
#ifndef RH_SGLANG_API_H
#define RH_SGLANG_API_H

#include "engine/serve/openai.h"

/* Parses a /generate body into a request of kind OA_GENERATE. 0, or -1
 * with e filled (nothing to free then). */
int sg_parse_generate(const char *body, size_t n, const oa_limits *lim, oa_request *out, oa_error *e);

/* One choice as /generate reports it. */
typedef struct sg_choice {
    const char *text;           /* the whole text so far, valid UTF-8 */
    size_t len;
    const int32_t *ids;         /* output ids so far (non-streamed responses) */
    uint32_t n_ids;             /* completion tokens so far */
    int finish;                 /* enum tr_finish; 0 while running */
    int32_t matched;            /* the stop id that ended it, or -1 */
    uint32_t prompt_tokens, cached_tokens;
    uint32_t cached_host;       /* of cached_tokens, those loaded back from the host tier */
    bool tiers;                 /* a host tier runs: meta_info gets SGLang's cached_tokens_details */
    double e2e_latency;         /* s since the request arrived */
} sg_choice;

/* The whole response (an object, or an array for several choices). */
char *sg_response(const oa_ident *id, const sg_choice *c, uint32_t n, size_t *len);
/* One stream event: "data: {...}\n\n"; index is written for batches. */
char *sg_event(const oa_ident *id, uint32_t index, bool batch, const sg_choice *c, size_t *len);

#endif
