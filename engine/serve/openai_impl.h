/* openai_impl.h — what openai_parse.c (prompts, messages, stop, the body)
 * and openai_params.c (sampling, logit rules, logprobs, n, the refused
 * parameters) share. Never include elsewhere. */
#ifndef RH_OPENAI_IMPL_H
#define RH_OPENAI_IMPL_H

#include <jansson.h>

#include "engine/serve/openai.h"

/* A field that is absent or null counts as not given (NULL). */
json_t *oa_field(json_t *root, const char *name);
/* Each reads one field; absent leaves *out alone (*given 0). 0, or -1 with
 * e filled naming the field and the type it must have. */
int oa_get_bool(json_t *root, const char *name, bool *out, oa_error *e);
int oa_get_number(json_t *root, const char *name, double *out, int *given, oa_error *e);
int oa_get_int(json_t *root, const char *name, long long *out, int *given, oa_error *e);
int oa_bad_type(oa_error *e, const char *param, const char *want);

/* openai_params.c */
int oa_parse_refused(oa_kind kind, json_t *root, bool templated, oa_error *e);
int oa_parse_sampling(oa_request *r, json_t *root, const oa_limits *lim, oa_error *e);
/* After the prompts and max_tokens: min_tokens against max_tokens, and n
 * copies of each prompt. */
int oa_parse_choices(oa_request *r, json_t *root, oa_error *e);

#endif
