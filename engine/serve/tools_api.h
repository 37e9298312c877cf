/* tools_api.h — the small endpoints tools and load balancers call beside
 * the completions: their bodies in, their answers out, no server state.
 *
 *   /version     {"version": "<release>"} (SGLang and vLLM answer so).
 *   /tokenize    vLLM's: {"prompt": str} or {"messages": [...]} (the chat
 *                template applied), "add_special_tokens" (default true:
 *                BOS as completions add it), "model" checked as everywhere
 *                -> {"count", "max_model_len", "tokens", "token_strs": null}.
 *                The prompt is tokenized exactly as /v1/completions and
 *                /v1/chat/completions tokenize it.
 *   /detokenize  vLLM's: {"tokens": [id]} -> {"prompt": text}.
 *   /abort_request  SGLang's body {"rid": str} or {"abort_all": true}:
 *                parsed here, acted on by the server (sv_abort_request). */
#ifndef RH_TOOLS_API_H
#define RH_TOOLS_API_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/serve/openai.h"

char *ta_version(size_t *n);
/* Each: a malloc'd JSON answer (*n bytes), or NULL with e filled. */
char *ta_tokenize(const char *body, size_t len, const oa_limits *lim, size_t *n, oa_error *e);
char *ta_detokenize(const char *body, size_t len, const oa_limits *lim, size_t *n, oa_error *e);
/* 0 with rid (or all) set, or -1 with e filled. */
int ta_parse_abort(const char *body, size_t len, char *rid, size_t rid_cap, bool *all, oa_error *e);

#endif
