/* trace_stats.c — `rehearse trace stats`.
 *
 * The summary is built as one JSON object whatever the output form, so a
 * later section (measured-run metrics for traces whose requests carry
 * TTFT and token times) is one more json_object_set_new on the root, in
 * the place marked below; the text form prints the same sections. */
#include "traces/metrics/metrics.h"
#include "cli/trace_cmds.h"
#include "traces/tools/stats.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char stats_help[] =
    "usage: rehearse trace stats IN [--json]\n\n"
    "Summarises a trace (any format rehearse reads):\n"
    "  requests, steps, failed, measured, sessions;\n"
    "  span (last minus first arrival) and arrival rate ((requests - 1) / span);\n"
    "  input and output length mean, median, p90, p99 and max (numpy's percentiles);\n"
    "  the ideal prefix hit ratio: the fraction of prompt blocks whose block hash,\n"
    "  with the same prefix, was seen in an earlier request (an unbounded cache).\n\n"
    "A trace whose requests are measured (a recorded engine run, a simulated run, a\n"
    "benchmark client's trace) also gets the serving metrics, as vLLM's benchmark\n"
    "defines them: TTFT, TPOT, ITL and E2E latency, throughputs, goodput, cache hits.\n\n"
    "  --json            print one JSON object instead of text\n"
    "  --slo-ttft MS, --slo-tpot MS, --slo-e2e MS   SLOs for goodput (measured runs)\n"
    "  --input-format F  the input's format when it cannot be recognised\n"
    "  --model NAME, --block-size N   as for import (BurstGPT, Mooncake input)\n";

static json_t *summary_json(const rh_summary *s)
{
    return json_pack("{s:f,s:f,s:f,s:f,s:f}", "mean", s->mean, "median", s->median, "p90", s->p90, "p99", s->p99,
                     "max", s->max);
}

static json_t *trace_json(const char *in, tr_format f, const tr_header *h, const tr_stats *s)
{
    json_t *cfg = json_object();
    for (uint32_t i = 0; i < h->n_kv; i++) json_object_set_new(cfg, h->kv[i].key, json_string(h->kv[i].value));
    json_t *root = json_object();
    json_object_set_new(root, "file", json_string(in));
    json_object_set_new(root, "format", json_string(tr_format_name(f)));
    json_object_set_new(root, "model", json_string(h->model));
    json_object_set_new(root, "hardware", json_string(h->hardware));
    json_object_set_new(root, "block_size", json_integer(h->block_size));
    json_object_set_new(root, "config", cfg);
    json_object_set_new(root, "requests", json_integer((json_int_t)s->requests));
    json_object_set_new(root, "steps", json_integer((json_int_t)s->steps));
    json_object_set_new(root, "failed", json_integer((json_int_t)s->failed));
    json_object_set_new(root, "measured", json_integer((json_int_t)s->measured));
    json_object_set_new(root, "sessions", json_integer((json_int_t)s->sessions));
    json_object_set_new(root, "truncated", json_boolean(s->truncated));
    json_object_set_new(root, "first_arrival_s", json_real(s->first_arrival));
    json_object_set_new(root, "span_s", json_real(s->span));
    json_object_set_new(root, "arrival_rate", json_real(s->rate));
    json_object_set_new(root, "input_len", summary_json(&s->input));
    json_object_set_new(root, "output_len", summary_json(&s->output));
    json_object_set_new(root, "total_input_tokens", json_integer((json_int_t)s->input_tokens));
    json_object_set_new(root, "total_output_tokens", json_integer((json_int_t)s->output_tokens));
    json_object_set_new(root, "blocks", json_integer((json_int_t)s->blocks));
    json_object_set_new(root, "block_hits", json_integer((json_int_t)s->block_hits));
    json_object_set_new(root, "prefix_hit_ratio", json_real(s->prefix_hit_ratio));
    json_object_set_new(root, "adapters", json_integer((json_int_t)s->adapters));
    json_object_set_new(root, "adapter_requests", json_integer((json_int_t)s->adapter_requests));
    json_object_set_new(root, "top_adapter_requests", json_integer((json_int_t)s->top_adapter_requests));
    return root;
}

static void print_text(const char *in, tr_format f, const tr_header *h, const tr_stats *s)
{
    const char *arrival = tr_header_get(h, "arrival"), *clients = tr_header_get(h, "clients");
    printf("trace        %s (%s)%s\n", in, tr_format_name(f), s->truncated ? "  [cut short: no end marker]" : "");
    printf("model        %s   hardware %s   block size %u\n", *h->model ? h->model : "-",
           *h->hardware ? h->hardware : "-", h->block_size);
    printf("requests     %llu   (failed %llu, measured %llu, sessions %llu)   steps %llu\n",
           (unsigned long long)s->requests, (unsigned long long)s->failed, (unsigned long long)s->measured,
           (unsigned long long)s->sessions, (unsigned long long)s->steps);
    if (arrival && !strcmp(arrival, "closed-loop"))
        printf("arrivals     closed loop, %s clients\n", clients ? clients : "?");
    else
        printf("span         %.3f s   arrival rate %.4f req/s\n", s->span, s->rate);
    printf("%-12s %12s %12s %12s %12s %12s\n", "tokens", "mean", "median", "p90", "p99", "max");
    const rh_summary *rows[2] = {&s->input, &s->output};
    const char *names[2] = {"input len", "output len"};
    for (int i = 0; i < 2; i++)
        printf("%-12s %12.2f %12.1f %12.1f %12.1f %12.0f\n", names[i], rows[i]->mean, rows[i]->median, rows[i]->p90,
               rows[i]->p99, rows[i]->max);
    if (s->blocks)
        printf("prefix hits  %.4f of %llu blocks (ideal: unbounded cache)\n", s->prefix_hit_ratio,
               (unsigned long long)s->blocks);
    else
        printf("prefix hits  - (no block hashes)\n");
    if (s->adapters)
        printf("adapters     %llu LoRA adapters over %llu requests (%llu on the base); the most used takes %.1f%%\n",
               (unsigned long long)s->adapters, (unsigned long long)s->adapter_requests,
               (unsigned long long)(s->requests - s->adapter_requests),
               100.0 * (double)s->top_adapter_requests / (double)s->adapter_requests);
}

/* Two sinks fed by one read. */
typedef struct tee {
    tr_sink a, b;
} tee;

static int tee_header(void *ctx, const tr_header *h, rh_err *e)
{
    tee *t = ctx;
    if (t->a.header && t->a.header(t->a.ctx, h, e) < 0) return -1;
    return t->b.header ? t->b.header(t->b.ctx, h, e) : 0;
}

static int tee_record(void *ctx, const tr_record *r, rh_err *e)
{
    tee *t = ctx;
    int ra = t->a.record(t->a.ctx, r, e);
    if (ra < 0) return -1;
    int rb = t->b.record(t->b.ctx, r, e);
    return rb < 0 ? -1 : (ra > 0 && rb > 0);
}

int trace_cmd_stats(int argc, char **argv)
{
    rh_args a;
    tr_import_opts o;
    if (!trace_cli_start(argc, argv, stats_help, &a, &o)) return 0;
    rh_err e = {{0}};
    int json = 0;
    metrics_slo slo = {0};
    const char *in = NULL, *name;
    while ((name = rh_args_next(&a))) {
        int r = trace_cli_input_flag(&a, name, &o, &e);
        if (r < 0) return trace_cli_fail("stats", &e);
        if (r) continue;
        if (!strcmp(name, "json")) {
            if (rh_args_no_value(&a, &e) < 0) return trace_cli_fail("stats", &e);
            json = 1;
        } else if (!strcmp(name, "slo-ttft") || !strcmp(name, "slo-tpot") || !strcmp(name, "slo-e2e")) {
            double *slot = name[4] == 'e' ? &slo.e2e_ms : name[5] == 't' ? &slo.ttft_ms : &slo.tpot_ms;
            char flag[32];
            snprintf(flag, sizeof flag, "--%s", name);
            const char *v = rh_args_value(&a, &e);
            if (!v || rh_parse_double(v, flag, slot, &e) < 0) return trace_cli_fail("stats", &e);
        } else {
            rh_fail(&e, "unknown flag --%s (see --help)", name);
            return trace_cli_fail("stats", &e);
        }
    }
    if (trace_cli_one_input(&a, &in, &e) < 0) return trace_cli_fail("stats", &e);
    /* One read feeds both: the trace's shape, and for measured runs the
     * serving metrics (the module the simulator and the benchmark client
     * report with). A pipe is read once. */
    tr_stats_acc *acc = tr_stats_new();
    metrics_reader mr;
    if (!acc || metrics_reader_init(&mr, &slo, &e) < 0) {
        tr_stats_free(acc);
        if (!e.msg[0]) rh_fail(&e, "out of memory");
        return trace_cli_fail("stats", &e);
    }
    tee t = {tr_stats_sink(acc), metrics_reader_sink(&mr)};
    tr_sink both = {&t, tee_header, tee_record};
    tr_format f = TR_FMT_UNKNOWN;
    int truncated = 0;
    tr_stats s;
    tr_header h = {0};
    metrics_summary ms;
    int have = 0;
    int rc = tr_read_as(in, &o, &both, &truncated, &f, &e);
    if (rc == 0) rc = tr_stats_finish(acc, &s, &e);
    if (rc == 0) {
        s.truncated = truncated;
        if (tr_header_copy(&h, tr_stats_header(acc)) < 0) rc = rh_fail(&e, "out of memory");
    }
    if (rc == 0 && (have = metrics_reader_finish(&mr, truncated, &ms)) < 0) rc = rh_fail(&e, "out of memory");
    tr_stats_free(acc);
    metrics_reader_free(&mr);
    if (rc < 0) return trace_cli_fail("stats", &e);
    json_t *root = trace_json(in, f, &h, &s);
    if (have > 0) json_object_set_new(root, "metrics", metrics_to_json(&ms));
    if (json) {
        char *txt = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
        if (txt) puts(txt);
        free(txt);
    } else {
        print_text(in, f, &h, &s);
        if (have > 0) {
            putchar('\n');
            metrics_print(stdout, &ms, "Measured Serving Metrics");
        }
    }
    json_decref(root);
    tr_header_free(&h);
    return 0;
}
