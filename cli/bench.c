/* bench.c — `rehearse bench`: flags, help and exit codes. The work is in
 * the bench_* modules; this file only turns flags into their inputs. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "client/bench.h"
#include "client/bench_json.h"
#include "util/args.h"

static const char usage_text[] =
    "usage: rehearse bench [--base-url URL | --host H --port P] [--dataset random|shared-prefix|trace FILE]\n"
    "                      [--num-prompts N] [--request-rate R] [--max-concurrency C] [options]\n"
    "\n"
    "A load generator for any OpenAI-compatible server (rehearse serve, SGLang, vLLM): sends\n"
    "streaming requests on a schedule over one libcurl multi loop and measures TTFT, TPOT, ITL\n"
    "and E2E as vLLM's and SGLang's benchmark clients define them.\n"
    "\n"
    "server:\n"
    "  --base-url URL              server root (default http://HOST:PORT)\n"
    "  --host H --port P           default 127.0.0.1 and 30000\n"
    "  --endpoint PATH             /v1/completions (prompt as token ids, default) or\n"
    "                              /v1/chat/completions (prompt as text)\n"
    "  --model NAME                default: the first id in GET /v1/models\n"
    "  --api-key KEY               sent as a bearer token (default $OPENAI_API_KEY)\n"
    "  --disable-stream            one JSON answer per request; TTFT then equals E2E\n"
    "  --request-timeout S         give up on a request after S seconds (default none)\n"
    "\n"
    "dataset:\n"
    "  --dataset NAME [FILE]       random (default), shared-prefix, or trace FILE (any trace\n"
    "                              `rehearse trace` reads); also --dataset-name NAME --dataset-path FILE\n"
    "  --num-prompts N             requests to send (default 1000; a trace: all of it;\n"
    "                              shared-prefix: groups x prompts per group)\n"
    "  --random-input-len L        default 1024\n"
    "  --random-output-len L       default 128\n"
    "  --random-range-ratio X      lengths uniform in [L(1-X), L(1+X)], X in [0, 1) (default 0)\n"
    "  --random-prefix-len L       tokens every random prompt shares, before its own (default 0)\n"
    "  --gsp-num-groups G          shared-prefix: groups (default 64)\n"
    "  --gsp-prompts-per-group P   prompts per group (default 16)\n"
    "  --gsp-system-prompt-len L   tokens a group shares (default 2048)\n"
    "  --gsp-question-len L        tokens of each prompt's own (default 128)\n"
    "  --gsp-output-len L          output tokens (default 256)\n"
    "  --vocab-size V              prompt ids are drawn from [0, V) (default 32000)\n"
    "  --seed S                    seeds lengths, prompts and arrivals (default 0)\n"
    "\n"
    "load:\n"
    "  --request-rate R            requests per second, or inf (default inf; a trace keeps its\n"
    "                              recorded arrivals unless this is given)\n"
    "  --burstiness B              gamma arrivals of shape B: 1 is Poisson, < 1 burstier (default 1)\n"
    "  --max-concurrency C         at most C requests outstanding (default unlimited; a\n"
    "                              closed-loop trace: its client count)\n"
    "  --rate-scale X              a trace's arrivals run X times faster (default 1)\n"
    "\n"
    "output:\n"
    "  --result-json FILE          the summary as JSON with vLLM's field names, plus the run's settings\n"
    "  --save-detailed             add per-request lengths, TTFTs, ITLs and errors to the JSON\n"
    "  --record-trace FILE         the client-side trace: each request's send time, lengths,\n"
    "                              TTFT, token times and finish reason, for `rehearse sim`\n"
    "  --trace-block-size B        block size of the recorded prompt hashes (default 16)\n"
    "  --slo-ttft MS --slo-tpot MS --slo-e2e MS   goodput counts requests within every bound given\n"
    "  --verbose                   one line on stderr per failed request\n"
    "\n"
    "Exit status: 0 when at least one request completed; 1 on bad flags, an unreachable server,\n"
    "a run where every request failed, or an output that could not be written.\n";

typedef struct opts {
    const char *base_url, *host, *endpoint, *model, *api_key, *dataset, *dataset_path;
    const char *result_json, *record_trace;
    unsigned long long port, num_prompts, max_concurrency, seed, vocab, trace_block;
    int num_prompts_set, rate_set, dataset_set, stream, verbose, save_detailed;
    double request_rate, burstiness, rate_scale, request_timeout;
    bench_random_opts rnd;
    bench_shared_prefix_opts gsp;
    metrics_slo slo;
} opts;

static void defaults(opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 30000;
    o->endpoint = "/v1/completions";
    o->dataset = "random";
    o->num_prompts = 1000;
    o->vocab = BENCH_DEFAULT_VOCAB;
    o->trace_block = 16;
    o->stream = 1;
    o->request_rate = INFINITY;
    o->burstiness = 1;
    o->rate_scale = 1;
    o->rnd.input_len = 1024;
    o->rnd.output_len = 128;
    o->gsp = (bench_shared_prefix_opts){.num_groups = 64, .prompts_per_group = 16, .system_prompt_len = 2048,
                                        .question_len = 128, .output_len = 256};
}

static int parse_len(const char *v, const char *flag, uint32_t min, uint32_t *out, rh_err *e)
{
    unsigned long long x;
    if (rh_parse_u64(v, flag, &x, e) < 0) return -1;
    if (x < min || x > BENCH_MAX_TOKENS)
        return rh_fail(e, "%s: %llu is outside [%u, %u]", flag, x, min, BENCH_MAX_TOKENS);
    *out = (uint32_t)x;
    return 0;
}

static int parse_positive(const char *v, const char *flag, double *out, rh_err *e)
{
    if (rh_parse_double(v, flag, out, e) < 0) return -1;
    if (!(*out > 0)) return rh_fail(e, "%s: '%s' must be above 0", flag, v);
    return 0;
}

/* One flag with its value; 1 if the name is not a bench flag. */
static int take_flag(opts *o, rh_args *a, const char *n, rh_err *e)
{
    char flag[140];
    snprintf(flag, sizeof flag, "--%s", n);
    static const char *const booleans[] = {"disable-stream", "verbose", "save-detailed", NULL};
    for (int i = 0; booleans[i]; i++) {
        if (strcmp(n, booleans[i])) continue;
        if (rh_args_no_value(a, e) < 0) return -1;
        if (i == 0) o->stream = 0;
        else if (i == 1) o->verbose = 1;
        else o->save_detailed = 1;
        return 0;
    }
    const char *v = rh_args_value(a, e);
    if (!v) return -1;
    if (!strcmp(n, "base-url")) o->base_url = v;
    else if (!strcmp(n, "host")) o->host = v;
    else if (!strcmp(n, "port")) {
        if (rh_parse_u64(v, flag, &o->port, e) < 0) return -1;
        if (o->port == 0 || o->port > 65535) return rh_fail(e, "--port: %llu is not a TCP port", o->port);
    } else if (!strcmp(n, "endpoint")) o->endpoint = v;
    else if (!strcmp(n, "model")) o->model = v;
    else if (!strcmp(n, "api-key")) o->api_key = v;
    else if (!strcmp(n, "request-timeout")) return parse_positive(v, flag, &o->request_timeout, e);
    else if (!strcmp(n, "dataset") || !strcmp(n, "dataset-name")) {
        o->dataset = v;
        o->dataset_set = 1;
        /* `--dataset trace FILE`: the file may follow as the next word. */
        if (!strcmp(v, "trace") && a->i < a->argc && a->argv[a->i][0] != '-') o->dataset_path = a->argv[a->i++];
    } else if (!strcmp(n, "dataset-path")) o->dataset_path = v;
    else if (!strcmp(n, "num-prompts")) {
        if (rh_parse_u64(v, flag, &o->num_prompts, e) < 0) return -1;
        if (o->num_prompts == 0 || o->num_prompts > 100000000ull)
            return rh_fail(e, "--num-prompts: %llu is outside [1, 100000000]", o->num_prompts);
        o->num_prompts_set = 1;
    } else if (!strcmp(n, "request-rate")) {
        o->rate_set = 1;
        if (!strcasecmp(v, "inf") || !strcasecmp(v, "infinity")) o->request_rate = INFINITY;
        else return parse_positive(v, flag, &o->request_rate, e);
    } else if (!strcmp(n, "burstiness")) return parse_positive(v, flag, &o->burstiness, e);
    else if (!strcmp(n, "max-concurrency")) {
        if (rh_parse_u64(v, flag, &o->max_concurrency, e) < 0) return -1;
        if (o->max_concurrency == 0) return rh_fail(e, "--max-concurrency must be at least 1");
    } else if (!strcmp(n, "rate-scale")) return parse_positive(v, flag, &o->rate_scale, e);
    else if (!strcmp(n, "random-input-len")) return parse_len(v, flag, 1, &o->rnd.input_len, e);
    else if (!strcmp(n, "random-output-len")) return parse_len(v, flag, 1, &o->rnd.output_len, e);
    else if (!strcmp(n, "random-prefix-len")) return parse_len(v, flag, 0, &o->rnd.prefix_len, e);
    else if (!strcmp(n, "random-range-ratio")) {
        if (rh_parse_double(v, flag, &o->rnd.range_ratio, e) < 0) return -1;
    } else if (!strcmp(n, "gsp-num-groups")) return parse_len(v, flag, 1, &o->gsp.num_groups, e);
    else if (!strcmp(n, "gsp-prompts-per-group")) return parse_len(v, flag, 1, &o->gsp.prompts_per_group, e);
    else if (!strcmp(n, "gsp-system-prompt-len")) return parse_len(v, flag, 0, &o->gsp.system_prompt_len, e);
    else if (!strcmp(n, "gsp-question-len")) return parse_len(v, flag, 1, &o->gsp.question_len, e);
    else if (!strcmp(n, "gsp-output-len")) return parse_len(v, flag, 1, &o->gsp.output_len, e);
    else if (!strcmp(n, "vocab-size")) {
        if (rh_parse_u64(v, flag, &o->vocab, e) < 0) return -1;
        if (o->vocab < 2 || o->vocab > 0x7fffffffull) return rh_fail(e, "--vocab-size: %llu is outside [2, 2^31)", o->vocab);
    } else if (!strcmp(n, "seed")) return rh_parse_u64(v, flag, &o->seed, e);
    else if (!strcmp(n, "trace-block-size")) {
        if (rh_parse_u64(v, flag, &o->trace_block, e) < 0) return -1;
        if (o->trace_block > 1u << 20) return rh_fail(e, "--trace-block-size: %llu is too large", o->trace_block);
    } else if (!strcmp(n, "result-json")) o->result_json = v;
    else if (!strcmp(n, "record-trace")) o->record_trace = v;
    else if (!strcmp(n, "slo-ttft")) return parse_positive(v, flag, &o->slo.ttft_ms, e);
    else if (!strcmp(n, "slo-tpot")) return parse_positive(v, flag, &o->slo.tpot_ms, e);
    else if (!strcmp(n, "slo-e2e")) return parse_positive(v, flag, &o->slo.e2e_ms, e);
    else return 1;
    return 0;
}

static int parse(opts *o, int argc, char **argv, rh_err *e)
{
    defaults(o);
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    const char *n;
    while ((n = rh_args_next(&a))) {
        int rc = take_flag(o, &a, n, e);
        if (rc < 0) return -1;
        if (rc > 0) return rh_fail(e, "unknown flag --%s (rehearse bench --help lists them)", n);
    }
    if (a.npos) return rh_fail(e, "unexpected argument '%s'", a.pos[0]);
    if (o->endpoint[0] != '/') return rh_fail(e, "--endpoint: '%s' must be a path such as /v1/completions", o->endpoint);
    if (strncmp(o->base_url ? o->base_url : "http://", "http://", 7) && strncmp(o->base_url, "https://", 8))
        return rh_fail(e, "--base-url: '%s' must start with http:// or https://", o->base_url);
    if (!strcmp(o->dataset, "generated-shared-prefix")) o->dataset = "shared-prefix";
    if (strcmp(o->dataset, "random") && strcmp(o->dataset, "shared-prefix") && strcmp(o->dataset, "trace"))
        return rh_fail(e, "--dataset: '%s' is not random, shared-prefix or trace", o->dataset);
    if (!strcmp(o->dataset, "trace") && !o->dataset_path)
        return rh_fail(e, "--dataset trace needs a file: --dataset trace FILE");
    if (o->dataset_path && !o->dataset_set) o->dataset = "trace";
    if (o->dataset_path && strcmp(o->dataset, "trace")) return rh_fail(e, "--dataset-path is for --dataset trace");
    if (o->rate_scale != 1 && strcmp(o->dataset, "trace"))
        return rh_fail(e, "--rate-scale applies to --dataset trace (use --request-rate)");
    if (o->rate_scale != 1 && o->rate_set)
        return rh_fail(e, "--rate-scale and --request-rate conflict: the first scales a trace's arrivals, "
                          "the second replaces them");
    return 0;
}

static int build_dataset(const opts *o, bench_dataset *d, rh_err *e)
{
    int rc;
    if (!strcmp(o->dataset, "trace")) {
        bench_trace_opts t = {.num_prompts = o->num_prompts_set ? o->num_prompts : 0, .rate_scale = o->rate_scale};
        rc = bench_dataset_trace(d, o->dataset_path, &t, e);
    } else if (!strcmp(o->dataset, "shared-prefix")) {
        bench_shared_prefix_opts g = o->gsp;
        g.num_prompts = o->num_prompts_set ? o->num_prompts : 0;
        g.seed = o->seed;
        rc = bench_dataset_shared_prefix(d, &g, (uint32_t)o->trace_block, e);
    } else {
        bench_random_opts r = o->rnd;
        r.num_prompts = o->num_prompts;
        r.seed = o->seed;
        if ((uint64_t)r.prefix_len + (uint64_t)ceil(r.input_len * (1 + r.range_ratio)) > BENCH_MAX_TOKENS)
            return rh_fail(e, "--random-prefix-len plus --random-input-len is above %u tokens", BENCH_MAX_TOKENS);
        rc = bench_dataset_random(d, &r, (uint32_t)o->trace_block, e);
    }
    if (rc < 0) return -1;
    d->vocab = (uint32_t)o->vocab;
    d->prompt_seed = o->seed;
    if (strcmp(o->dataset, "trace") || o->rate_set) bench_dataset_set_rate(d, o->request_rate, o->burstiness, o->seed);
    return 0;
}

/* Every outstanding request holds a socket: lift the soft limit on open
 * files to the hard one, so a run at high concurrency is not cut at 1024. */
static void raise_fd_limit(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
    }
}

static void on_signal(int sig)
{
    (void)sig;
    bench_stop();
}

static void print_settings(const opts *o, const bench_config *c, const bench_dataset *d)
{
    printf("Server: %s%s, model %s\n", c->base_url, c->endpoint, c->model);
    printf("Dataset: %s, %zu requests\n", d->name, d->n);
    if (strcmp(o->dataset, "trace") || o->rate_set) {
        if (isfinite(o->request_rate)) printf("Traffic request rate: %g req/s\n", o->request_rate);
        else printf("Traffic request rate: inf\n");
        printf("Burstiness factor: %g (%s)\n", o->burstiness, o->burstiness == 1 ? "Poisson process" : "gamma distribution");
    } else {
        printf("Traffic: the trace's arrivals%s\n", o->rate_scale != 1 ? ", time-scaled" : "");
    }
    if (c->max_concurrency) printf("Maximum request concurrency: %llu\n", (unsigned long long)c->max_concurrency);
    fflush(stdout);
}

/* The first failure, so a run where things went wrong says why without --verbose. */
static const char *first_error(const bench_result *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].sent && r[i].error) return r[i].error;
    return NULL;
}

int bench_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return 0;
    }
    opts o;
    rh_err e;
    if (parse(&o, argc, argv, &e) < 0) {
        fprintf(stderr, "rehearse bench: %s\n", e.msg);
        return 1;
    }
    char url[512];
    if (!o.base_url) {
        snprintf(url, sizeof url, "http://%s:%llu", o.host, o.port);
        o.base_url = url;
    }
    if (!o.api_key) o.api_key = getenv("OPENAI_API_KEY");
    bench_dataset d;
    if (build_dataset(&o, &d, &e) < 0) {
        fprintf(stderr, "rehearse bench: %s\n", e.msg);
        return 1;
    }
    bench_config c = {
        .base_url = o.base_url,
        .endpoint = o.endpoint,
        .api = strstr(o.endpoint, "chat") ? BENCH_API_CHAT : BENCH_API_COMPLETIONS,
        .model = o.model,
        .api_key = o.api_key,
        .stream = o.stream,
        .max_concurrency = o.max_concurrency ? o.max_concurrency : d.closed_loop_clients,
        .request_timeout = o.request_timeout,
        .progress = 1,
        .log = o.verbose ? stderr : NULL,
    };
    char *found = NULL;
    if (bench_probe(&c, o.model ? NULL : &found, &e) < 0) {
        fprintf(stderr, "rehearse bench: %s\n", e.msg);
        bench_dataset_free(&d);
        return 1;
    }
    if (found) c.model = found;
    print_settings(&o, &c, &d);
    raise_fd_limit();
    bench_result *r = calloc(d.n, sizeof *r);
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    bench_run_info info;
    int rc = r ? bench_run(&c, &d, r, &info, &e) : rh_fail(&e, "out of memory for %zu results", d.n);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    metrics_summary s;
    if (rc == 0) rc = bench_summarize(&d, r, &o.slo, &s, &e);
    if (rc == 0) {
        metrics_print(stdout, &s, "Serving Benchmark Result");
        printf("%-40s %12llu\n", "Max requests in flight:", (unsigned long long)info.max_inflight);
        if (info.interrupted) printf("%-40s %12s\n", "Run:", "interrupted");
        fflush(stdout);
        const char *err = first_error(r, d.n);
        if (err && !o.verbose)
            fprintf(stderr, "rehearse bench: %llu requests failed; the first: %s (--verbose lists each)\n",
                    (unsigned long long)s.failed, err);
    }
    int recorded = !strcmp(o.dataset, "trace") && !o.rate_set;
    bench_json_settings js = {&o.slo, o.dataset, recorded ? NAN : o.request_rate, o.burstiness, o.rate_scale, o.seed,
                              o.save_detailed};
    if (rc == 0 && o.result_json) rc = bench_write_json(o.result_json, &c, &d, r, &s, &info, &js, &e);
    if (rc == 0 && o.record_trace) {
        tr_header h;
        tr_header_init(&h);
        rc = bench_trace_header(&h, &c, &d, &js, &e);
        if (rc == 0) rc = bench_write_trace(o.record_trace, &d, r, &h, &e);
        tr_header_free(&h);
    }
    if (rc == 0 && s.completed == 0) rc = rh_fail(&e, "no request completed against %s", c.base_url);
    if (rc < 0) fprintf(stderr, "rehearse bench: %s\n", e.msg);
    bench_results_free(r, d.n);
    bench_dataset_free(&d);
    free(found);
    return rc < 0 ? 1 : 0;
}
