/* logits.h — a request's own rules over a row of logits before it samples,
 * as OpenAI-compatible servers (vLLM, SGLang) define them, and the
 * log-probabilities reported back.
 *
 * logit_rules_apply, in vLLM's order: min_tokens masks the stop ids (EOS
 * and the request's stop ids) while fewer outputs exist; logit_bias adds to
 * its ids; repetition_penalty divides the positive and multiplies the
 * negative logits of every id in the prompt or the output; frequency and
 * presence penalties subtract count * frequency + presence for each id in
 * the output; min_p drops every id less likely than min_p times the most
 * likely at the request's temperature (off when greedy). Masked ids become
 * -inf, which every sampler treats as probability 0.
 *
 * logprob_top: the log-softmax of a row (the model's raw output, as vLLM
 * reports by default) at one id, and the k most likely ids, most likely
 * first, ties by the lower id. Pure: no allocation, no I/O. */
#ifndef RH_LOGITS_H
#define RH_LOGITS_H

#include <stdbool.h>
#include <stdint.h>

#define LOGPROB_MAX_TOP 20      /* vLLM's default max_logprobs */

typedef struct logit_rules {
    const int32_t *bias_ids;    /* logit_bias: ids below the vocabulary, each once */
    const float *bias;
    uint32_t n_bias;
    uint32_t min_tokens;        /* 0: off */
    float min_p;                /* 0: off */
    float presence, frequency;  /* 0: off */
    float repetition;           /* 1: off (0 counts as 1) */
} logit_rules;

/* Whether the rules change anything at all. */
bool logit_rules_active(const logit_rules *r);

/* The context a row is drawn in: the prompt, the outputs before this row,
 * and the ids that would stop the request. */
typedef struct logit_context {
    const int32_t *prompt;
    uint32_t n_prompt;
    const int32_t *out;
    uint32_t n_out;
    const int32_t *stops;       /* EOS (unless ignored) and the stop ids */
    uint32_t n_stops;
    float temperature;
} logit_context;

/* Applies the rules to row[vocab] in place. counts: [vocab] scratch, all
 * zero on entry and left all zero. */
void logit_rules_apply(const logit_rules *r, const logit_context *x, float *row, uint32_t vocab, uint32_t *counts);

typedef struct logprob_entry {
    int32_t id;
    float logprob;
} logprob_entry;

/* The log-probability of `id` under row; top[0..k) the k most likely
 * (k <= LOGPROB_MAX_TOP and <= vocab). */
float logprob_top(const float *row, uint32_t vocab, int32_t id, uint32_t k, logprob_entry *top);

#endif
