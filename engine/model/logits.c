/* logits.c — a request's logit rules and the log-probabilities reported
 * back; see logits.h for the order and the semantics. */
#include <math.h>

#include "engine/model/logits.h"

bool logit_rules_active(const logit_rules *r)
{
    return r && (r->n_bias || r->min_tokens || r->min_p > 0 || r->presence != 0 || r->frequency != 0 ||
                 (r->repetition != 0 && r->repetition != 1));
}

static void repetition(float *row, float rp, const int32_t *ids, uint32_t n, uint32_t *mark)
{
    for (uint32_t i = 0; i < n; i++) {
        int32_t t = ids[i];
        if (mark[t]) continue;
        mark[t] = 1;
        row[t] = row[t] > 0 ? row[t] / rp : row[t] * rp;
    }
}

void logit_rules_apply(const logit_rules *r, const logit_context *x, float *row, uint32_t vocab, uint32_t *counts)
{
    if (!logit_rules_active(r)) return;
    if (x->n_out < r->min_tokens)
        for (uint32_t i = 0; i < x->n_stops; i++)
            if (x->stops[i] >= 0 && (uint32_t)x->stops[i] < vocab) row[x->stops[i]] = -INFINITY;
    for (uint32_t i = 0; i < r->n_bias; i++) row[r->bias_ids[i]] += r->bias[i];

    if (r->repetition != 0 && r->repetition != 1) {
        /* Each distinct id once, whether it appears in the prompt, the
         * output or both; the marks are cleared on the way out. */
        repetition(row, r->repetition, x->prompt, x->n_prompt, counts);
        repetition(row, r->repetition, x->out, x->n_out, counts);
        for (uint32_t i = 0; i < x->n_prompt; i++) counts[x->prompt[i]] = 0;
        for (uint32_t i = 0; i < x->n_out; i++) counts[x->out[i]] = 0;
    }
    if (r->presence != 0 || r->frequency != 0) {
        for (uint32_t i = 0; i < x->n_out; i++) counts[x->out[i]]++;
        for (uint32_t i = 0; i < x->n_out; i++) {
            int32_t t = x->out[i];
            if (!counts[t]) continue;   /* already applied */
            row[t] -= (float)counts[t] * r->frequency + r->presence;
            counts[t] = 0;
        }
    }
    if (r->min_p > 0 && x->temperature > 0) {
        float best = -INFINITY;
        for (uint32_t i = 0; i < vocab; i++)
            if (row[i] > best) best = row[i];
        /* p(t) / p(best) < min_p  <=>  (row[t] - best) / T < log(min_p) */
        float floor = best + x->temperature * logf(r->min_p);
        for (uint32_t i = 0; i < vocab; i++)
            if (row[i] < floor) row[i] = -INFINITY;
    }
}

static bool ahead(float v, int32_t id, const logprob_entry *e)
{
    return v > e->logprob || (v == e->logprob && id < e->id);
}

float logprob_top(const float *row, uint32_t vocab, int32_t id, uint32_t k, logprob_entry *top)
{
    float best = -INFINITY;
    for (uint32_t i = 0; i < vocab; i++)
        if (row[i] > best) best = row[i];
    double sum = 0;
    for (uint32_t i = 0; i < vocab; i++) sum += exp((double)row[i] - best);
    float lse = best + (float)log(sum);

    if (k > vocab) k = vocab;
    if (k > LOGPROB_MAX_TOP) k = LOGPROB_MAX_TOP;
    uint32_t n = 0;
    for (uint32_t i = 0; i < vocab && k; i++) {
        float v = row[i];
        if (n == k && !ahead(v, (int32_t)i, &top[k - 1])) continue;
        uint32_t at = n < k ? n++ : k - 1;   /* the last slot is dropped when full */
        while (at > 0 && ahead(v, (int32_t)i, &top[at - 1])) {
            top[at] = top[at - 1];
            at--;
        }
        top[at] = (logprob_entry){(int32_t)i, v};
    }
    for (uint32_t i = 0; i < k; i++) top[i].logprob -= lse;
    return row[id] - lse;
}
