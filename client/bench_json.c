/* bench_json.c — see bench_json.h (the JSON half; the trace header is in
 * bench_record.c with the rest of the trace output). */
#include "client/bench_json.h"
#include "util/json_file.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* vLLM writes a rate of inf as the string "inf"; JSON has no infinity. */
static json_t *rate_json(double rate)
{
    if (isnan(rate)) return json_null();
    if (!isfinite(rate)) return json_string("inf");
    return json_real(rate);
}

static json_t *detailed(const bench_dataset *d, const bench_result *r)
{
    json_t *in = json_array(), *out = json_array(), *ttft = json_array(), *itl = json_array(), *err = json_array(),
           *send = json_array(), *e2e = json_array(), *texts = json_array(), *queue = json_array();
    for (size_t i = 0; i < d->n; i++) {
        if (!r[i].sent) continue;
        json_array_append_new(in, json_integer(r[i].input_len ? r[i].input_len : d->items[i].input_len));
        json_array_append_new(out, json_integer(r[i].error ? 0 : r[i].output_len));
        json_array_append_new(ttft, json_real(r[i].error ? 0 : r[i].ttft));
        json_array_append_new(e2e, json_real(r[i].e2e));
        json_array_append_new(send, json_real(r[i].send));
        /* the wait between the planned arrival and the send: for a slot
         * under --max-concurrency, or for the session's previous turn */
        double wait = r[i].send - d->items[i].arrival;
        json_array_append_new(queue, json_real(wait > 0 ? wait : 0));
        json_t *gaps = json_array();
        for (uint32_t k = 1; k < r[i].n_chunks; k++)
            json_array_append_new(gaps, json_real(r[i].chunk_times[k] - r[i].chunk_times[k - 1]));
        json_array_append_new(itl, gaps);
        json_array_append_new(err, json_string(r[i].error ? r[i].error : ""));
        json_t *t = r[i].text ? json_string(r[i].text) : NULL;
        json_array_append_new(texts, t ? t : json_string(""));   /* invalid UTF-8 from a server: left empty */
    }
    /* Seconds, as vLLM's per-request arrays are. */
    json_t *o = json_object();
    json_object_set_new(o, "input_lens", in);
    json_object_set_new(o, "output_lens", out);
    json_object_set_new(o, "ttfts", ttft);
    json_object_set_new(o, "itls", itl);
    json_object_set_new(o, "e2els", e2e);
    json_object_set_new(o, "latencies", json_deep_copy(e2e));   /* vLLM's name for them */
    json_object_set_new(o, "queue_times", queue);
    json_object_set_new(o, "send_times", send);
    json_object_set_new(o, "start_times", json_deep_copy(send));   /* vLLM's name for them */
    json_object_set_new(o, "errors", err);
    json_object_set_new(o, "generated_texts", texts);
    return o;
}

/* The summary's server-side keys: from the server's counters when it
 * exports them (the run's deltas), else left out; a client cannot see a
 * server's steps, batches or KV use, and a 0 would read as a measurement. */
static void server_side(json_t *o, const metrics_summary *s, const bench_scrape *b, const bench_scrape *a)
{
    static const char *const never[] = {"policy_errors", "mean_batch_size", "max_batch_size", "mean_kv_use",
                                        "max_kv_use",    "mean_waiting",    "max_waiting",    "busy_time", NULL};
    for (int i = 0; never[i]; i++) json_object_del(o, never[i]);
    bool have[BS_N] = {false};
    double d[BS_N] = {0};
    for (int k = 0; k < BS_N; k++) {
        have[k] = b && a && b->has[k] && a->has[k];
        d[k] = have[k] ? a->v[k] - b->v[k] : 0;
    }
    if (have[BS_PREEMPTIONS]) json_object_set_new(o, "retractions", json_integer((json_int_t)d[BS_PREEMPTIONS]));
    else json_object_del(o, "retractions");
    /* The client's own count of cached tokens (from each usage) stands when
     * the server reported any; else the server's counters. */
    if (!s->cached_tokens && have[BS_CACHE_QUERIES] && have[BS_CACHE_HITS]) {
        json_object_set_new(o, "cached_tokens", json_integer((json_int_t)d[BS_CACHE_HITS]));
        json_object_set_new(o, "cache_hit_rate", json_real(d[BS_CACHE_QUERIES] > 0 ? d[BS_CACHE_HITS] / d[BS_CACHE_QUERIES] : 0));
    }
    if (have[BS_SPEC_DRAFT_TOKENS] && have[BS_SPEC_ACCEPTED] && have[BS_SPEC_DRAFTS]) {
        json_object_set_new(o, "spec_proposed_tokens", json_integer((json_int_t)d[BS_SPEC_DRAFT_TOKENS]));
        json_object_set_new(o, "spec_accepted_tokens", json_integer((json_int_t)d[BS_SPEC_ACCEPTED]));
        json_object_set_new(o, "spec_accept_rate",
                            json_real(d[BS_SPEC_DRAFT_TOKENS] > 0 ? d[BS_SPEC_ACCEPTED] / d[BS_SPEC_DRAFT_TOKENS] : 0));
        json_object_set_new(o, "mean_accepted_length",
                            json_real(d[BS_SPEC_DRAFTS] > 0 ? 1 + d[BS_SPEC_ACCEPTED] / d[BS_SPEC_DRAFTS] : 1));
        /* the same under vLLM's names (its rate in percent) */
        json_object_set_new(o, "spec_decode_acceptance_rate",
                            json_real(d[BS_SPEC_DRAFT_TOKENS] > 0 ? 100 * d[BS_SPEC_ACCEPTED] / d[BS_SPEC_DRAFT_TOKENS] : 0));
        json_object_set_new(o, "spec_decode_acceptance_length",
                            json_real(d[BS_SPEC_DRAFTS] > 0 ? 1 + d[BS_SPEC_ACCEPTED] / d[BS_SPEC_DRAFTS] : 1));
        json_object_set_new(o, "spec_decode_num_drafts", json_integer((json_int_t)d[BS_SPEC_DRAFTS]));
        json_object_set_new(o, "spec_decode_draft_tokens", json_integer((json_int_t)d[BS_SPEC_DRAFT_TOKENS]));
        json_object_set_new(o, "spec_decode_accepted_tokens", json_integer((json_int_t)d[BS_SPEC_ACCEPTED]));
        /* position k: drafts whose k-th token was accepted, over drafts */
        json_t *pp = json_array();
        int np = a->n_positions > b->n_positions ? a->n_positions : b->n_positions;
        for (int k = 0; k < np; k++)
            json_array_append_new(pp, json_real(d[BS_SPEC_DRAFTS] > 0
                                                    ? (a->accepted_at[k] - b->accepted_at[k]) / d[BS_SPEC_DRAFTS]
                                                    : 0));
        json_object_set_new(o, "spec_decode_per_position_acceptance_rates", pp);
    } else {
        json_object_del(o, "spec_proposed_tokens");
        json_object_del(o, "spec_accepted_tokens");
        json_object_del(o, "spec_accept_rate");
        json_object_del(o, "mean_accepted_length");
    }
    if (have[BS_STEPS] && have[BS_STEP_TOKENS]) {
        json_object_set_new(o, "steps", json_integer((json_int_t)d[BS_STEPS]));
        json_object_set_new(o, "mean_tokens_per_step", json_real(d[BS_STEPS] > 0 ? d[BS_STEP_TOKENS] / d[BS_STEPS] : 0));
    } else {
        json_object_del(o, "steps");
        json_object_del(o, "mean_tokens_per_step");
    }
}

/* o as one compact line at the end of path (made when missing). */
static int append_line(const char *path, json_t *o, rh_err *e)
{
    char *line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    if (!line) return rh_fail(e, "%s: out of memory", path);
    FILE *f = fopen(path, "a");
    int rc = 0;
    if (!f) rc = rh_fail(e, "%s: cannot open to append: %s", path, strerror(errno));
    else {
        int bad = fprintf(f, "%s\n", line) < 0;
        if (fclose(f) != 0 || bad) rc = rh_fail(e, "%s: cannot write: %s", path, strerror(errno));
    }
    free(line);
    return rc;
}

int bench_write_json(const char *path, const bench_config *c, const bench_dataset *d, const bench_result *r,
                     const metrics_summary *s, const bench_run_info *info, const bench_json_settings *js, rh_err *e)
{
    json_t *o = metrics_to_json(s);
    if (!o) return rh_fail(e, "%s: out of memory", path);
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    json_object_set_new(o, "date", json_string(date));
    json_object_set_new(o, "backend", json_string(js->backend));
    json_object_set_new(o, "tokenizer_id", json_null());
    if (!(js->slo->ttft_ms > 0 || js->slo->tpot_ms > 0 || js->slo->e2e_ms > 0))
        json_object_set_new(o, "request_goodput", json_null());   /* as vLLM writes it without --goodput */
    server_side(o, s, js->before, js->after);
    if (bench_summary_json(o, BENCH_STYLE_VLLM, d, r, js->sel, js->peaks) < 0) {
        json_decref(o);
        return rh_fail(e, "%s: out of memory", path);
    }
    json_object_set_new(o, "base_url", json_string(c->base_url));
    json_object_set_new(o, "endpoint", json_string(c->endpoint));
    json_object_set_new(o, "model_id", json_string(js->model_id ? js->model_id : c->model ? c->model : ""));
    json_object_set_new(o, "dataset", json_string(js->dataset));
    json_object_set_new(o, "dataset_name", json_string(d->name));
    json_object_set_new(o, "num_prompts", json_integer((json_int_t)d->n));
    json_object_set_new(o, "request_rate", rate_json(js->request_rate));
    json_object_set_new(o, "burstiness", json_real(js->burstiness));
    json_object_set_new(o, "rate_scale", json_real(js->rate_scale));
    json_object_set_new(o, "max_concurrency",
                        c->max_concurrency ? json_integer((json_int_t)c->max_concurrency) : json_null());
    json_object_set_new(o, "seed", json_integer((json_int_t)js->seed));
    json_object_set_new(o, "stream", json_boolean(c->stream));
    json_object_set_new(o, "max_inflight", json_integer((json_int_t)info->max_inflight));
    json_object_set_new(o, "interrupted", json_boolean(info->interrupted));
    json_object_set_new(o, "slo_ttft_ms", js->slo->ttft_ms > 0 ? json_real(js->slo->ttft_ms) : json_null());
    json_object_set_new(o, "slo_tpot_ms", js->slo->tpot_ms > 0 ? json_real(js->slo->tpot_ms) : json_null());
    json_object_set_new(o, "slo_e2el_ms", js->slo->e2e_ms > 0 ? json_real(js->slo->e2e_ms) : json_null());
    if (js->save_detailed) {
        json_t *det = detailed(d, r);
        json_object_update(o, det);
        json_decref(det);
    }
    if (js->extra) json_object_update(o, (json_t *)js->extra);
    int rc = js->append ? append_line(path, o, e)
                        : rh_json_save(o, path, JSON_INDENT(2) | JSON_REAL_PRECISION(17), "the result file", e);
    json_decref(o);
    return rc;
}

int bench_append_jsonl(const char *path, const bench_config *c, const bench_dataset *d, const bench_result *r,
                       const metrics_summary *s, const bench_json_settings *js, rh_err *e)
{
    json_t *o = json_pack("{s:s,s:s,s:o,s:o,s:I,s:I,s:f,s:f,s:I,s:I,s:I,s:f,s:f,s:f,s:f}", "backend", js->backend,
                          "dataset_name", d->name, "request_rate", rate_json(js->request_rate), "max_concurrency",
                          c->max_concurrency ? json_integer((json_int_t)c->max_concurrency) : json_null(),
                          "random_input_len", (json_int_t)js->random_input_len, "random_output_len",
                          (json_int_t)js->random_output_len, "random_range_ratio", js->random_range_ratio,
                          "duration", s->duration, "completed", (json_int_t)s->completed, "total_input_tokens",
                          (json_int_t)s->total_input_tokens, "total_output_tokens", (json_int_t)s->total_output_tokens,
                          "request_throughput", s->request_throughput, "input_throughput", s->input_throughput,
                          "output_throughput", s->output_throughput, "total_throughput", s->total_token_throughput);
    if (!o || bench_summary_json(o, BENCH_STYLE_SGLANG, d, r, js->sel, js->peaks) < 0) {
        json_decref(o);
        return rh_fail(e, "%s: out of memory", path);
    }
    json_object_set_new(o, "failed", json_integer((json_int_t)s->failed));
    /* SGLang's: output tokens counted again from the text; the client keeps
     * the server's usage count, which is what a retokenization gives back */
    json_object_set_new(o, "total_output_tokens_retokenized", json_integer((json_int_t)s->total_output_tokens));
    /* SGLang's mean speculative accept length, from the server's counters
     * over the run; null when it does not speculate or export them */
    const bench_scrape *b = js->before, *a = js->after;
    double drafts = b && a && b->has[BS_SPEC_DRAFTS] && a->has[BS_SPEC_ACCEPTED] && b->has[BS_SPEC_ACCEPTED]
                        ? a->v[BS_SPEC_DRAFTS] - b->v[BS_SPEC_DRAFTS] : 0;
    json_object_set_new(o, "accept_length",
                        drafts > 0 ? json_real(1 + (a->v[BS_SPEC_ACCEPTED] - b->v[BS_SPEC_ACCEPTED]) / drafts)
                                   : json_null());
    if (js->save_detailed) {
        json_t *det = detailed(d, r);
        json_object_update(o, det);
        json_decref(det);
    }
    int rc = append_line(path, o, e);
    json_decref(o);
    return rc;
}
