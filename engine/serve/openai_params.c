/* openai_params.c — the parameters that shape sampling: temperature, top_p,
 * top_k, seed, the logit rules (logit_bias, min_tokens, min_p, penalties),
 * logprobs, echo and n; and the parameters this server does not implement,
 * refused by name unless they ask for the default, so that no client ever
 * gets silently different behaviour. See openai.h for the accepted ranges. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/openai_impl.h"

/* ---- refused ---- */
typedef enum refuse_when {
    GIVEN,          /* any value but null */
    NONEMPTY,       /* a non-empty string, array or object */
    IS_TRUE,
    IS_FALSE,
} refuse_when;

typedef struct refused_param {
    const char *name;
    refuse_when when;
    unsigned kinds;     /* 1 completions, 2 chat; 4: only where the tokenizer has no chat template */
    const char *why;
} refused_param;

static const refused_param REFUSED[] = {
    {"suffix", NONEMPTY, 1, "text after the completion (insertion) is not supported"},
    {"tools", NONEMPTY, 3, "tool calling is not supported"},
    {"functions", NONEMPTY, 3, "function calling is not supported"},
    {"function_call", GIVEN, 3, "function calling is not supported"},
    {"guided_json", GIVEN, 3, "guided decoding is not supported"},
    {"guided_regex", GIVEN, 3, "guided decoding is not supported"},
    {"guided_choice", GIVEN, 3, "guided decoding is not supported"},
    {"guided_grammar", GIVEN, 3, "guided decoding is not supported"},
    {"structured_outputs", GIVEN, 3, "structured outputs are not supported"},
    {"allowed_token_ids", NONEMPTY, 3, "restricting the vocabulary is not supported (logit_bias of -100 is)"},
    {"bad_words", NONEMPTY, 3, "bad words are not supported (logit_bias of -100 is)"},
    {"prompt_logprobs", GIVEN, 3, "use echo with logprobs to score the prompt"},
    {"truncate_prompt_tokens", GIVEN, 3, "prompts are never truncated: a long one is refused"},
    {"include_stop_str_in_output", IS_TRUE, 3, "the stop string is never included in the output"},
    {"skip_special_tokens", IS_FALSE, 3, "special tokens are always left out of the text"},
    {"top_logprobs", GIVEN, 1, "completions take logprobs=N for the top N"},
    {"echo", IS_TRUE, 2, "echo is a completions parameter"},
    {"continue_final_message", IS_TRUE, 2, "the chat template always opens a new assistant turn"},
    {"add_generation_prompt", IS_FALSE, 2 | 4, "without a Jinja chat template a new assistant turn always opens"},
    {"chat_template", NONEMPTY, 2 | 4, "the tokenizer has no Jinja chat template, so none is rendered"},
    {"chat_template_kwargs", NONEMPTY, 2 | 4, "the tokenizer has no Jinja chat template to take them"},
};

static bool nonempty(json_t *v)
{
    if (json_is_string(v)) return json_string_length(v) > 0;
    if (json_is_array(v)) return json_array_size(v) > 0;
    if (json_is_object(v)) return json_object_size(v) > 0;
    return v != NULL;
}

static bool refused_value(json_t *v, refuse_when when)
{
    switch (when) {
    case GIVEN: return v != NULL;
    case NONEMPTY: return nonempty(v);
    case IS_TRUE: return v && !json_is_false(v);
    case IS_FALSE: return v && !json_is_true(v);
    }
    return false;
}

static int refuse(oa_error *e, const char *name, const char *why)
{
    return oa_fail(e, 400, name, "unsupported_parameter", "'%s' is not supported by this server: %s", name, why);
}

int oa_parse_refused(oa_kind kind, json_t *root, bool templated, oa_error *e)
{
    unsigned bit = kind == OA_CHAT ? 2 : 1;
    for (size_t i = 0; i < sizeof REFUSED / sizeof *REFUSED; i++) {
        const refused_param *p = &REFUSED[i];
        if ((p->kinds & 4) && templated) continue;
        if ((p->kinds & bit) && refused_value(oa_field(root, p->name), p->when)) return refuse(e, p->name, p->why);
    }
    json_t *tc = oa_field(root, "tool_choice");
    if (tc && !(json_is_string(tc) && (!strcmp(json_string_value(tc), "none") || !strcmp(json_string_value(tc), "auto"))))
        return refuse(e, "tool_choice", "tool calling is not supported");
    json_t *rf = oa_field(root, "response_format");
    if (rf) {
        json_t *type = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_string(type)) return oa_bad_type(e, "response_format", "an object with a string 'type'");
        if (strcmp(json_string_value(type), "text"))
            return refuse(e, "response_format", "only {\"type\": \"text\"}: JSON and schema outputs are not enforced");
    }
    json_t *so = oa_field(root, "stream_options");
    if (json_is_object(so) && refused_value(oa_field(so, "continuous_usage_stats"), IS_TRUE))
        return refuse(e, "stream_options", "continuous_usage_stats: usage comes once, in the closing event");
    return 0;
}

/* ---- sampling ---- */
static int parse_basic(oa_request *r, json_t *root, oa_error *e)
{
    double d;
    long long k;
    int given;
    r->sampling = (kern_sampling){.temperature = 1, .top_p = 1, .top_k = 0};
    if (oa_get_number(root, "temperature", &d, &given, e) < 0) return -1;
    if (given) {
        if (!(d >= 0) || !isfinite(d) || d > 1e6)
            return oa_fail(e, 400, "temperature", "invalid_value", "'temperature' must be >= 0 (got %g)", d);
        r->sampling.temperature = (float)d;
    }
    if (oa_get_number(root, "top_p", &d, &given, e) < 0) return -1;
    if (given) {
        /* Checked as the sampler holds it: a float (1e-300 is 0 there). */
        float f = (float)d;
        if (!(d > 0 && d <= 1) || !(f > 0 && f <= 1))
            return oa_fail(e, 400, "top_p", "invalid_value", "'top_p' must be in (0, 1] as a 32-bit float (got %g)", d);
        r->sampling.top_p = f;
    }
    if (oa_get_int(root, "top_k", &k, &given, e) < 0) return -1;
    if (given) {
        if (k < -1 || k > UINT32_MAX)
            return oa_fail(e, 400, "top_k", "invalid_value", "'top_k' must be -1 or 0 (off) or a positive count (got %lld)", k);
        r->sampling.top_k = k < 0 ? 0 : (uint32_t)k;
    }
    if (oa_get_int(root, "seed", &k, &given, e) < 0) return -1;
    r->has_seed = given;
    r->seed = (uint64_t)k;
    return 0;
}

/* A number in [lo, hi] (open at lo when lo_open), as a float. */
static int ranged(json_t *root, const char *name, double lo, bool lo_open, double hi, float *out, oa_error *e)
{
    double d;
    int given;
    if (oa_get_number(root, name, &d, &given, e) < 0) return -1;
    if (!given) return 0;
    if (!isfinite(d) || d > hi || (lo_open ? !(d > lo) : !(d >= lo)))
        return oa_fail(e, 400, name, "invalid_value", "'%s' must be in %s%g, %g] (got %g)", name, lo_open ? "(" : "[",
                       lo, hi, d);
    *out = (float)d;
    return 0;
}

/* {"id": bias}: ids as decimal strings, as OpenAI's schema has them. */
static int parse_logit_bias(oa_request *r, json_t *root, const oa_limits *lim, oa_error *e)
{
    json_t *lb = oa_field(root, "logit_bias");
    if (!lb) return 0;
    if (!json_is_object(lb)) return oa_bad_type(e, "logit_bias", "an object mapping token ids to biases");
    size_t n = json_object_size(lb);
    if (!n) return 0;
    if (n > lim->vocab)
        return oa_fail(e, 400, "logit_bias", "invalid_value", "'logit_bias' names %zu ids; the vocabulary has %u", n,
                       lim->vocab);
    int32_t *ids = malloc(n * sizeof *ids);
    float *bias = malloc(n * sizeof *bias);
    r->rules.bias_ids = ids;
    r->rules.bias = bias;
    if (!ids || !bias) return oa_fail(e, 500, NULL, NULL, "out of memory");
    const char *key;
    json_t *v;
    uint32_t k = 0;
    json_object_foreach(lb, key, v)
    {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (!key[0] || *end || id < 0 || id >= (long long)lim->vocab)
            return oa_fail(e, 400, "logit_bias", "invalid_value",
                           "'logit_bias' key '%.40s' must be a token id below the vocabulary of %u", key, lim->vocab);
        if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
            return oa_fail(e, 400, "logit_bias", "invalid_value", "'logit_bias[\"%.40s\"]' must be a number in [-100, 100]",
                           key);
        for (uint32_t i = 0; i < k; i++)
            if (ids[i] == (int32_t)id)
                return oa_fail(e, 400, "logit_bias", "invalid_value", "'logit_bias' names id %lld twice", id);
        ids[k] = (int32_t)id;
        bias[k++] = (float)json_number_value(v);
    }
    r->rules.n_bias = k;
    return 0;
}

static int parse_logprobs(oa_request *r, json_t *root, oa_error *e)
{
    json_t *lp = oa_field(root, "logprobs");
    long long k = 0;
    int given = 0;
    if (r->kind == OA_CHAT) {
        if (oa_get_bool(root, "logprobs", &r->logprobs, e) < 0) return -1;
        if (oa_get_int(root, "top_logprobs", &k, &given, e) < 0) return -1;
        if (given && k && !r->logprobs)
            return oa_fail(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs' set to true");
        if (given && (k < 0 || k > LOGPROB_MAX_TOP))
            return oa_fail(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' must be in [0, %d] (got %lld)",
                           LOGPROB_MAX_TOP, k);
        r->top_logprobs = (uint32_t)k;
        return 0;
    }
    if (lp && json_is_boolean(lp)) {   /* some clients send a boolean: true is the sampled id alone */
        r->logprobs = json_is_true(lp);
    } else {
        if (oa_get_int(root, "logprobs", &k, &given, e) < 0) return -1;
        if (given && (k < 0 || k > LOGPROB_MAX_TOP))
            return oa_fail(e, 400, "logprobs", "invalid_value", "'logprobs' must be in [0, %d] (got %lld)",
                           LOGPROB_MAX_TOP, k);
        r->logprobs = given;
        r->top_logprobs = (uint32_t)k;
    }
    return oa_get_bool(root, "echo", &r->echo, e);
}

int oa_parse_sampling(oa_request *r, json_t *root, const oa_limits *lim, oa_error *e)
{
    if (parse_basic(r, root, e) < 0) return -1;
    logit_rules *k = &r->rules;
    k->repetition = 1;
    if (ranged(root, "min_p", 0, false, 1, &k->min_p, e) < 0 ||
        ranged(root, "presence_penalty", -2, false, 2, &k->presence, e) < 0 ||
        ranged(root, "frequency_penalty", -2, false, 2, &k->frequency, e) < 0 ||
        ranged(root, "repetition_penalty", 0, true, 1e6, &k->repetition, e) < 0)
        return -1;
    if (parse_logit_bias(r, root, lim, e) < 0) return -1;
    if (oa_get_bool(root, "return_tokens_as_token_ids", &r->tokens_as_ids, e) < 0) return -1;
    return parse_logprobs(r, root, e);
}

/* ---- choices ---- */
int oa_parse_choices(oa_request *r, json_t *root, oa_error *e)
{
    long long v;
    int given;
    if (oa_get_int(root, "min_tokens", &v, &given, e) < 0) return -1;
    if (given && (v < 0 || v > r->max_tokens))
        return oa_fail(e, 400, "min_tokens", "invalid_value", "'min_tokens' must be in [0, max_tokens = %u] (got %lld)",
                       r->max_tokens, v);
    if (given) r->rules.min_tokens = (uint32_t)v;

    long long n = 1;
    if (oa_get_int(root, "n", &n, &given, e) < 0) return -1;
    if (n < 1) return oa_fail(e, 400, "n", "invalid_value", "'n' must be at least 1 (got %lld)", n);
    if ((unsigned long long)n * r->n_prompts > OA_MAX_PROMPTS)
        return oa_fail(e, 400, "n", "invalid_value", "%lld choices for each of %u prompts: at most %d are served at once",
                       n, r->n_prompts, OA_MAX_PROMPTS);
    long long best_of;
    if (oa_get_int(root, "best_of", &best_of, &given, e) < 0) return -1;
    if (given && best_of != n)
        return oa_fail(e, 400, "best_of", "unsupported_value",
                       "'best_of' must equal n (%lld): choices are never ranked and dropped (got %lld)", n, best_of);
    r->n = (uint32_t)n;
    if (n == 1) return 0;
    oa_prompt *p = calloc((size_t)n * r->n_prompts, sizeof *p);
    if (!p) return oa_fail(e, 500, NULL, NULL, "out of memory");
    bool ok = true;
    for (uint32_t i = 0; i < r->n_prompts; i++)
        for (uint32_t j = 0; j < n; j++) {
            oa_prompt *q = &p[(size_t)i * n + j];
            q->n = r->prompts[i].n;
            if (j == 0) {
                q->ids = r->prompts[i].ids;
            } else if ((q->ids = malloc(q->n * sizeof *q->ids))) {
                memcpy(q->ids, r->prompts[i].ids, q->n * sizeof *q->ids);
            } else {
                ok = false;
            }
        }
    free(r->prompts);
    r->prompts = p;
    r->n_prompts *= (uint32_t)n;
    return ok ? 0 : oa_fail(e, 500, NULL, NULL, "out of memory");
}
