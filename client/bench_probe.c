/* bench_probe.c — before a run: is the server there, and which model does it
 * serve? One GET /v1/models, so an unreachable server is one clear message
 * rather than a run of failed requests. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/bench.h"
#include "client/bench_sse.h"
#include "client/bench_xfer.h"

typedef struct answer {
    char *p;
    size_t n;
} answer;

/* Keeps the first 1 MiB of the answer: a model list is far smaller. */
static size_t on_probe_data(char *p, size_t size, size_t nmemb, void *ctx)
{
    answer *a = ctx;
    size_t n = size * nmemb;
    if (a->n + n > (1u << 20)) return n;
    char *b = realloc(a->p, a->n + n + 1);
    if (!b) return 0;
    memcpy(b + a->n, p, n);
    a->n += n;
    b[a->n] = '\0';
    a->p = b;
    return n;
}

static uint32_t count_field(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    return json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) < (1 << 30)
               ? (uint32_t)json_integer_value(v)
               : 0;
}

/* The first model id of an OpenAI /v1/models answer, malloc'd, or NULL;
 * its max_model_len (vLLM's, SGLang's and ours) and vocab_size (ours) when
 * given. */
static char *first_model(const char *body, size_t n, bench_server_facts *f)
{
    json_t *root = json_loadb(body, n, 0, NULL);
    json_t *data = json_object_get(root, "data");
    json_t *first = json_array_get(data, 0);
    json_t *id = json_object_get(first, "id");
    if (f) {
        f->max_model_len = count_field(first, "max_model_len");
        f->vocab_size = count_field(first, "vocab_size");
    }
    char *m = json_is_string(id) ? strdup(json_string_value(id)) : NULL;
    json_decref(root);
    return m;
}

/* One GET of base_url + path into a (its first MiB), with the client's
 * headers; the HTTP status in *status, curl's detail in err. */
static CURLcode http_get(const bench_config *c, const char *path, long timeout_ms, answer *a, long *status,
                         char err[CURL_ERROR_SIZE])
{
    char *url = bench_join_url(c->base_url, path);
    struct curl_slist *h = bench_headers(c);
    CURL *easy = curl_easy_init();
    CURLcode rc = CURLE_OUT_OF_MEMORY;
    if (url && h && easy) {
        curl_easy_setopt(easy, CURLOPT_URL, url);
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_probe_data);
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, a);
        curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, err);
        curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, timeout_ms);
        rc = curl_easy_perform(easy);
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, status);
    }
    free(url);
    curl_slist_free_all(h);
    if (easy) curl_easy_cleanup(easy);
    return rc;
}

static const char *const SCRAPED[BS_N] = {
    "vllm:num_preemptions_total",          "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",        "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:iteration_tokens_total_count",   "vllm:iteration_tokens_total_sum",
};

/* Sums the samples of the names wanted in a Prometheus text exposition. */
static void read_exposition(const char *text, bench_scrape *s)
{
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        if (n && line[0] != '#') {
            size_t name = 0;
            while (name < n && line[name] != '{' && line[name] != ' ') name++;
            static const char per_pos[] = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
            const char *pos = name == sizeof per_pos - 1 && !strncmp(line, per_pos, name)
                                  ? memmem(line, n, "position=\"", 10) : NULL;
            const char *close = pos ? memchr(line, '}', n) : NULL;
            if (pos && close && pos < close) {
                int k = atoi(pos + 10);
                double x = strtod(close + 1, NULL);
                if (k >= 0 && k < BENCH_SPEC_POSITIONS) {
                    s->accepted_at[k] += x;
                    if (k + 1 > s->n_positions) s->n_positions = k + 1;
                }
            }
            for (int k = 0; k < BS_N; k++) {
                if (strlen(SCRAPED[k]) != name || strncmp(line, SCRAPED[k], name)) continue;
                const char *v = memchr(line, '}', n);
                v = v ? v + 1 : line + name;
                char num[64];
                size_t m = (size_t)(line + n - v) < sizeof num - 1 ? (size_t)(line + n - v) : sizeof num - 1;
                memcpy(num, v, m);
                num[m] = '\0';
                char *stop;
                double x = strtod(num, &stop);
                if (stop != num) {
                    s->v[k] += x;
                    s->has[k] = 1;
                }
            }
        }
        line = end ? end + 1 : NULL;
    }
}

int bench_scrape_metrics(const bench_config *c, bench_scrape *s)
{
    memset(s, 0, sizeof *s);
    answer a = {NULL, 0};
    long status = 0;
    char curl_err[CURL_ERROR_SIZE] = "";
    int found = 0;
    if (http_get(c, "/metrics", 10000, &a, &status, curl_err) == CURLE_OK && status < 300 && a.p) {
        read_exposition(a.p, s);
        for (int k = 0; k < BS_N; k++) found |= s->has[k];
    }
    free(a.p);
    return found ? 0 : -1;
}

/* SGLang's server_args names (which ours repeats) and rehearse's for the
 * knobs that decide how a server schedules. */
static const char *const knob_names[][2] = {
    {"chunked_prefill_size", "chunked-prefill-size"}, {"max_prefill_tokens", "max-prefill-tokens"},
    {"max_running_requests", "max-running-requests"}, {"page_size", "page-size"},
    {"schedule_policy", "schedule-policy"},           {"schedule_conservativeness", "schedule-conservativeness"},
    {"enable_mixed_chunk", "enable-mixed-chunk"},     {"disable_radix_cache", "disable-radix-cache"},
    {"scheduler", "scheduler"},
};

/* f's knobs from /get_server_info's object: those it sets (null: SGLang's
 * "chosen at start", which the server does not say). */
static void knobs_of(json_t *root, bench_server_facts *f)
{
    for (size_t i = 0; i < sizeof knob_names / sizeof knob_names[0] && f->n_knobs < 10; i++) {
        json_t *v = json_object_get(root, knob_names[i][0]);
        char *val = f->knob[f->n_knobs][1];
        size_t n = sizeof f->knob[0][1];
        if (json_is_integer(v)) snprintf(val, n, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v)) snprintf(val, n, "%.17g", json_real_value(v));
        else if (json_is_boolean(v)) snprintf(val, n, "%s", json_is_true(v) ? "true" : "false");
        else if (json_is_string(v) && strlen(json_string_value(v)) < n) snprintf(val, n, "%s", json_string_value(v));
        else continue;
        snprintf(f->knob[f->n_knobs++][0], sizeof f->knob[0][0], "%s", knob_names[i][1]);
    }
}

/* The pool a server reports, when it does: SGLang's /get_server_info (and
 * ours) carries max_total_num_tokens, and its scheduler knobs; vLLM has no
 * such endpoint (0, none). */
static void pool_of(const bench_config *c, bench_server_facts *f)
{
    answer a = {NULL, 0};
    long status = 0;
    char curl_err[CURL_ERROR_SIZE] = "";
    if (http_get(c, "/get_server_info", 10000, &a, &status, curl_err) == CURLE_OK && status < 300 && a.p) {
        json_t *root = json_loadb(a.p, a.n, 0, NULL);
        json_t *v = json_object_get(root, "max_total_num_tokens");
        if (json_is_integer(v) && json_integer_value(v) > 0) f->pool_tokens = (uint64_t)json_integer_value(v);
        if (json_is_object(root)) knobs_of(root, f);
        json_decref(root);
    }
    free(a.p);
}

int bench_probe(const bench_config *c, char **model, rh_err *e)
{
    return bench_server_info(c, model, NULL, e);
}

int bench_server_info(const bench_config *c, char **model, bench_server_facts *facts, rh_err *e)
{
    if (model) *model = NULL;
    if (facts) memset(facts, 0, sizeof *facts);
    if (bench_curl_init(e) < 0) return -1;
    answer a = {NULL, 0};
    long status = 0;
    char curl_err[CURL_ERROR_SIZE] = "";
    CURLcode rc = http_get(c, "/v1/models", 60000, &a, &status, curl_err);
    if (rc == CURLE_OUT_OF_MEMORY) {
        free(a.p);
        return rh_fail(e, "out of memory");
    }
    int ret = 0;
    if (rc != CURLE_OK) {
        ret = rh_fail(e, "cannot reach the server at %s: %s", c->base_url, curl_err[0] ? curl_err : curl_easy_strerror(rc));
    } else if (model) {
        /* A server without /v1/models is fine when --model names the model. */
        char msg[600];
        if (status >= 300) {
            bench_error_message(a.p ? a.p : "", a.n, msg, sizeof msg);
            ret = rh_fail(e, "%s/v1/models answered HTTP %ld (%s) and --model was not given", c->base_url, status,
                          msg);
        } else if (!(*model = first_model(a.p ? a.p : "", a.n, facts))) {
            ret = rh_fail(e, "%s/v1/models lists no model id and --model was not given", c->base_url);
        }
    } else if (facts && status < 300) {
        free(first_model(a.p ? a.p : "", a.n, facts));
    }
    free(a.p);
    if (ret == 0 && facts) pool_of(c, facts);
    return ret;
}
