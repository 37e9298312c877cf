/* bench_flags.c — see bench_flags.h. */
#include "cli/bench_flags.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The flags that take one value; any other name is not a bench flag (or
 * one the caller takes without a value, or with several). */
static const char *const VALUED[] = {
    "base-url", "host", "port", "endpoint", "backend", "extra-body", "extra-request-body", "percentile-metrics",
    "metric-percentiles", "result-dir", "result-filename", "output-file", "tokenizer", "sharegpt-output-len",
    "num-warmups", "warmup-requests", "model", "served-model-name", "api-key", "request-timeout", "dataset",
    "dataset-name", "dataset-path", "num-prompts", "request-rate", "burstiness", "max-concurrency", "rate-scale",
    "random-input-len", "random-input", "random-output-len", "random-output", "random-prefix-len",
    "random-range-ratio", "gsp-num-groups", "gsp-prompts-per-group", "gsp-system-prompt-len", "gsp-question-len",
    "gsp-output-len", "vocab-size", "seed", "trace-block-size", "result-json", "record-trace", "slo-ttft",
    "slo-tpot", "slo-e2e", "temperature", "top-p", "top-k", "min-p", "presence-penalty", "frequency-penalty",
    "repetition-penalty", "label", "ready-check-timeout-sec", "ramp-up-strategy", "ramp-up-start-rps",
    "ramp-up-end-rps", "prefix-repetition-prefix-len", "prefix-repetition-suffix-len", "prefix-repetition-num-prefixes",
    "prefix-repetition-output-len", "custom-output-len", NULL};

int bench_takes_value(const char *name)
{
    for (int i = 0; VALUED[i]; i++)
        if (!strcmp(VALUED[i], name)) return 1;
    return 0;
}

int bench_takes_file(const char *name)
{
    return !strcmp(name, "trace") || !strcmp(name, "sharegpt") || !strcmp(name, "mooncake") ||
           !strcmp(name, "burstgpt") || !strcmp(name, "custom");
}

/* The words after a flag that takes several (vLLM's nargs="+"): up to the
 * next flag. */
static const char *next_word(rh_args *a)
{
    if (a->i < a->argc && a->argv[a->i][0] != '-') return a->argv[a->i++];
    return NULL;
}

/* NAME=VALUE (vLLM's form) or "NAME: VALUE". */
static int take_header(const char *v, char **headers, size_t *n, size_t max, rh_err *e)
{
    const char *eq = strchr(v, '='), *colon = strchr(v, ':');
    const char *sep = eq && (!colon || eq < colon) ? eq : colon;
    if (!sep || sep == v) return rh_fail(e, "--header: '%s' must be NAME=VALUE", v);
    for (const char *p = v; *p; p++)
        if (*p == '\r' || *p == '\n') return rh_fail(e, "--header: '%s' holds a line break", v);
    if (*n == max) return rh_fail(e, "--header: at most %zu headers", max);
    size_t k = (size_t)(sep - v);
    const char *val = sep + 1;
    while (*val == ' ') val++;
    char *h = malloc(k + strlen(val) + 3);
    if (!h) return rh_fail(e, "out of memory");
    sprintf(h, "%.*s: %s", (int)k, v, val);
    headers[(*n)++] = h;
    return 0;
}

int bench_take_headers(rh_args *a, char **headers, size_t *n, size_t max, rh_err *e)
{
    const char *v = rh_args_value(a, e);
    if (!v) return -1;
    do {
        if (take_header(v, headers, n, max, e) < 0) return -1;
    } while ((v = next_word(a)));
    return 0;
}

int bench_take_metadata(rh_args *a, json_t **meta, rh_err *e)
{
    const char *v = rh_args_value(a, e);
    if (!v) return -1;
    if (!*meta && !(*meta = json_object())) return rh_fail(e, "out of memory");
    do {
        const char *eq = strchr(v, '=');
        if (!eq || eq == v) return rh_fail(e, "--metadata: '%s' must be KEY=VALUE", v);
        char key[128];
        int k = (int)(eq - v) < 127 ? (int)(eq - v) : 127;
        snprintf(key, sizeof key, "%.*s", k, v);
        json_t *val = json_string(eq + 1);
        if (!val) return rh_fail(e, "--metadata: '%s' is not UTF-8", v);
        json_object_set_new(*meta, key, val);
    } while ((v = next_word(a)));
    return 0;
}

int bench_take_sampling(const char *name, const char *v, json_t **sampling, rh_err *e)
{
    static const char *const names[] = {"temperature", "top-p", "top-k", "min-p", "presence-penalty",
                                        "frequency-penalty", "repetition-penalty", NULL};
    int k = 0;
    while (names[k] && strcmp(names[k], name)) k++;
    if (!names[k]) return 1;
    char flag[64], key[64];
    snprintf(flag, sizeof flag, "--%s", name);
    snprintf(key, sizeof key, "%s", name);
    for (char *p = key; *p; p++)
        if (*p == '-') *p = '_';
    json_t *val;
    if (k == 2) {
        long long x;
        if (rh_parse_i64(v, flag, &x, e) < 0) return -1;
        if (x < -1 || x > 1 << 30) return rh_fail(e, "--top-k: %lld must be -1 (off) or a count of tokens", x);
        val = json_integer(x);
    } else {
        double x;
        if (rh_parse_double(v, flag, &x, e) < 0) return -1;
        if (!isfinite(x)) return rh_fail(e, "%s: '%s' is not a finite number", flag, v);
        if (k == 0 && x < 0) return rh_fail(e, "--temperature: %g must be 0 or above", x);
        if (k == 1 && !(x > 0 && x <= 1)) return rh_fail(e, "--top-p: %g must be in (0, 1]", x);
        if (k == 3 && !(x >= 0 && x <= 1)) return rh_fail(e, "--min-p: %g must be in [0, 1]", x);
        if (k == 6 && !(x > 0)) return rh_fail(e, "--repetition-penalty: %g must be above 0", x);
        val = json_real(x);
    }
    if (!*sampling && !(*sampling = json_object())) {
        json_decref(val);
        return rh_fail(e, "out of memory");
    }
    json_object_set_new(*sampling, key, val);
    return 0;
}

char *bench_json_members(const json_t *obj, rh_err *e)
{
    char *text = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(17));
    if (!text) {
        rh_fail(e, "out of memory");
        return NULL;
    }
    size_t n = strlen(text);
    memmove(text, text + 1, n - 2);   /* {"a":1} -> "a":1 */
    text[n - 2] = '\0';
    return text;
}
