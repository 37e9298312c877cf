/* bench.c — `rehearse bench`: flags, help and exit codes. The work is in
 * the bench_* modules; this file only turns flags into their inputs. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/bench_flags.h"
#include "cli/cli.h"
#include "client/bench.h"
#include "client/bench_json.h"
#include "client/bench_summary.h"
#include "engine/model/tokenizer.h"
#include "util/args.h"
#include "util/fs.h"
#include "util/progress.h"

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
    "  --backend B                 as vLLM's and SGLang's clients name them: vllm, openai (both\n"
    "                              /v1/completions), vllm-chat, openai-chat (/v1/chat/completions),\n"
    "                              sglang (SGLang's /generate), sglang-oai, sglang-oai-chat; the\n"
    "                              sglang ones print and save SGLang's summary, the others vLLM's\n"
    "  --endpoint PATH             /v1/completions (prompt as token ids, default),\n"
    "                              /v1/chat/completions (prompt as text) or /generate\n"
    "  --model NAME                default: the first id in GET /v1/models\n"
    "  --served-model-name NAME    the name sent in requests (default --model's); --model then\n"
    "                              names the model in the result file and its file name\n"
    "  --api-key KEY               sent as a bearer token (default $OPENAI_API_KEY)\n"
    "  --header NAME=VALUE ...     more HTTP headers (several after one flag, or repeated)\n"
    "  --extra-body JSON           an object merged into every request body, last, so its\n"
    "                              fields win (also --extra-request-body)\n"
    "  --ignore-eos                ask for exactly the output length (the default unless\n"
    "                              --backend vllm/openai, whose default, as vLLM's, is not to)\n"
    "  --disable-ignore-eos        let the model stop at EOS (SGLang's flag)\n"
    "  --disable-stream            one JSON answer per request; TTFT then equals E2E\n"
    "  --request-timeout S         give up on a request after S seconds (default none)\n"
    "  --num-warmups N             N requests before the run, not measured (default 0)\n"
    "  --warmup-requests N         SGLang's: N requests before the run, the test request among them\n"
    "  --ready-check-timeout-sec S ask a server that does not answer again each second for S\n"
    "                              seconds before giving up (default 0: once)\n"
    "  --temperature T --top-p P --top-k K --min-p P --presence-penalty X --frequency-penalty X\n"
    "  --repetition-penalty X      sampling parameters sent in every request (/generate: in its\n"
    "                              sampling_params); default temperature 0, the rest the server's\n"
    "  --disable-tqdm              no progress bar\n"
    "  One test request goes first, as vLLM's client sends one: a broken setup fails\n"
    "  there with the server's message.\n"
    "\n"
    "dataset:\n"
    "  --dataset NAME [FILE]       random (default), shared-prefix, trace FILE (any trace\n"
    "                              `rehearse trace` reads) or sharegpt FILE (ShareGPT's JSON: each\n"
    "                              conversation's first turn sent as text, its reply's length the\n"
    "                              output), custom FILE (vLLM's: JSONL of {\"prompt\": TEXT}, sent as\n"
    "                              text, each asking for its \"output_tokens\" or --custom-output-len,\n"
    "                              default 256); the other clients' names: mooncake FILE (a trace at\n"
    "                              its timestamps), burstgpt FILE (its lengths at --request-rate),\n"
    "                              random-ids (random), prefix_repetition (shared-prefix with vLLM's\n"
    "                              --prefix-repetition-prefix-len 256, -suffix-len 256, -num-prefixes\n"
    "                              10, -output-len 128), generated-shared-prefix; also\n"
    "                              --dataset-name NAME --dataset-path FILE. A trace request's LoRA\n"
    "                              adapter goes as \"model\": \"NAME\" (vllm, openai), \"MODEL:NAME\"\n"
    "                              (sglang-oai*) or /generate's \"lora_path\" (sglang)\n"
    "  --tokenizer FILE|ID         the model's tokenizer.json (or its directory), or a Hugging Face\n"
    "                              id an installed tokenizer serves (meta-llama/Llama-3*, Qwen/Qwen3*,\n"
    "                              deepseek-ai/DeepSeek-V3*|R1*): counts text prompts' tokens, and\n"
    "                              gives the vocabulary size\n"
    "  --sharegpt-output-len L     every ShareGPT request asks for L tokens\n"
    "  --num-prompts N             requests to send (default 1000; a trace: all of it;\n"
    "                              shared-prefix: groups x prompts per group)\n"
    "  --random-input-len L        default 1024\n"
    "  --random-output-len L       default 128\n"
    "  --random-range-ratio X      lengths uniform in [L(1-X), L(1+X)], X in [0, 1) (default 0);\n"
    "                              under --backend sglang*, SGLang's meaning: [L*X, L], X in [0, 1]\n"
    "  Under --backend sglang* SGLang's defaults hold: --random-output-len 1024, --seed 1 and\n"
    "  --random-range-ratio 0 (lengths uniform in [1, L]).\n"
    "  --random-input --random-output   the older names of --random-input-len/-output-len\n"
    "  --random-prefix-len L       tokens every random prompt shares, before its own (default 0)\n"
    "  --gsp-num-groups G          shared-prefix: groups (default 64)\n"
    "  --gsp-prompts-per-group P   prompts per group (default 16)\n"
    "  --gsp-system-prompt-len L   tokens a group shares (default 2048)\n"
    "  --gsp-question-len L        tokens of each prompt's own (default 128)\n"
    "  --gsp-output-len L          output tokens (default 256)\n"
    "  --vocab-size V              prompt ids are drawn from [0, V) (default: the vocab_size\n"
    "                              the server reports on /v1/models; else it must be given)\n"
    "  --seed S                    seeds lengths, prompts and arrivals (default 0)\n"
    "\n"
    "load:\n"
    "  --request-rate R            requests per second, or inf (default inf; a trace keeps its\n"
    "                              recorded arrivals unless this is given)\n"
    "  --burstiness B              gamma arrivals of shape B: 1 is Poisson, < 1 burstier (default 1)\n"
    "  --max-concurrency C         at most C requests outstanding (default unlimited; a\n"
    "                              closed-loop trace: its client count)\n"
    "  --rate-scale X              a trace's arrivals run X times faster (default 1)\n"
    "  --ramp-up-strategy linear|exponential --ramp-up-start-rps A --ramp-up-end-rps B\n"
    "                              vLLM's ramp: request i of N sent at a rate moving from A to B\n"
    "                              with i/(N-1), linearly or geometrically (instead of --request-rate)\n"
    "\n"
    "output:\n"
    "  --result-json FILE          the summary as JSON with vLLM's field names, plus the run's settings\n"
    "  --save-result               the same into --result-dir (default .; made when missing) as\n"
    "                              --result-filename (default\n"
    "                              vLLM's BACKEND-RATEqps[-concurrencyC]-MODEL-DATE.json)\n"
    "  --append-result             with --save-result: append one JSON line to the file, not replace it\n"
    "  --label L                   the --save-result file name starts with L, not the backend\n"
    "  --metadata KEY=VALUE ...    string keys added to the result file (vLLM's)\n"
    "  --output-file FILE          SGLang's: append the summary as one JSON line\n"
    "  --save-detailed             add per-request lengths, TTFTs, ITLs, latencies, start and queue\n"
    "                              times (the wait for a --max-concurrency slot) and errors to\n"
    "                              the JSON (also --output-details)\n"
    "  --percentile-metrics LIST   metrics printed and saved with percentiles: ttft,tpot,itl,e2el\n"
    "                              (default ttft,tpot,itl)\n"
    "  --metric-percentiles LIST   the percentiles, e.g. 50,95,99 (default 99)\n"
    "  --goodput KEY:MS ...        SLOs for goodput, vLLM's form: ttft:MS tpot:MS e2el:MS\n"
    "  --record-trace FILE         the client-side trace: each request's send time, lengths,\n"
    "                              TTFT, token times and finish reason, for `rehearse sim`\n"
    "  --trace-block-size B        block size of the recorded prompt hashes (default 16)\n"
    "  --slo-ttft MS --slo-tpot MS --slo-e2e MS   goodput counts requests within every bound given\n"
    "  --verbose                   one line on stderr per failed request\n"
    "\n"
    "Exit status: 0 when at least one request completed; 1 on bad flags, an unreachable server,\n"
    "a run where every request failed, or an output that could not be written.\n";

#define MAX_HEADERS 32

typedef struct opts {
    const char *base_url, *host, *endpoint, *model, *api_key, *dataset, *dataset_path;
    const char *result_json, *record_trace;
    const char *backend;            /* NULL: not given */
    const char *extra_body_arg, *percentile_metrics, *metric_percentiles;
    const char *result_dir, *result_filename, *output_file, *tokenizer_path;
    unsigned long long sharegpt_output_len;
    char *extra_body;               /* the object's members, braces off (owned) */
    char *headers[MAX_HEADERS];     /* "Name: value" (owned) */
    size_t n_headers;
    unsigned long long port, num_prompts, max_concurrency, seed, vocab, trace_block, num_warmups;
    int num_prompts_set, rate_set, dataset_set, stream, verbose, save_detailed, vocab_set, endpoint_set;
    int ratio_set, save_result, keep_eos, eos_set;
    int out_len_set, seed_set, disable_tqdm, append_result, ramp_exponential;
    const char *served_model_name, *label, *ramp_strategy;
    double ramp_start, ramp_end, ready_timeout;   /* ramp rates NaN: not given */
    json_t *sampling;               /* --temperature, --top-p, ...: sent in every request (owned) */
    char *sampling_members;         /* the same as JSON members, braces off (owned) */
    json_t *metadata;               /* --metadata KEY=VALUE ...: keys of the result file (owned) */
    bench_shared_prefix_opts rep;   /* --prefix-repetition-*: vLLM's prefix_repetition dataset */
    int rep_set, custom_output_set;
    uint32_t custom_output_len;
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
    o->ramp_start = o->ramp_end = NAN;
    o->rep = (bench_shared_prefix_opts){.num_groups = 10, .prompts_per_group = 1, .system_prompt_len = 256,
                                        .question_len = 256, .output_len = 128};
    o->custom_output_len = 256;
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

/* --goodput ttft:MS tpot:MS e2el:MS: the pairs are the words that follow. */
static int take_goodput(opts *o, rh_args *a, rh_err *e)
{
    int taken = 0;
    while (a->i < a->argc && a->argv[a->i][0] != '-') {
        const char *v = a->argv[a->i++];
        const char *c = strchr(v, ':');
        char *end = NULL;
        double ms = c ? strtod(c + 1, &end) : -1;
        if (!c || !c[1] || (end && *end) || !(ms >= 0))
            return rh_fail(e, "--goodput: '%s' must be KEY:MS with KEY ttft, tpot or e2el and MS >= 0", v);
        size_t k = (size_t)(c - v);
        if (k == 4 && !strncmp(v, "ttft", 4)) o->slo.ttft_ms = ms;
        else if (k == 4 && !strncmp(v, "tpot", 4)) o->slo.tpot_ms = ms;
        else if (k == 4 && !strncmp(v, "e2el", 4)) o->slo.e2e_ms = ms;
        else return rh_fail(e, "--goodput: '%.*s' is not ttft, tpot or e2el", (int)k, v);
        taken++;
    }
    return taken ? 0 : rh_fail(e, "--goodput needs at least one KEY:MS (ttft:500 tpot:50 e2el:2000)");
}

/* One flag with its value; 1 if the name is not a bench flag. */
static int take_flag(opts *o, rh_args *a, const char *n, rh_err *e)
{
    char flag[140];
    snprintf(flag, sizeof flag, "--%s", n);
    static const char *const booleans[] = {"disable-stream", "verbose",    "save-detailed",      "output-details",
                                           "save-result",    "ignore-eos", "disable-ignore-eos", "disable-tqdm",
                                           "append-result",  NULL};
    for (int i = 0; booleans[i]; i++) {
        if (strcmp(n, booleans[i])) continue;
        if (rh_args_no_value(a, e) < 0) return -1;
        switch (i) {
        case 0: o->stream = 0; break;
        case 1: o->verbose = 1; break;
        case 2:
        case 3: o->save_detailed = 1; break;
        case 4: o->save_result = 1; break;
        case 7: o->disable_tqdm = 1; break;
        case 8: o->append_result = 1; break;
        default:
            o->keep_eos = i == 6;
            o->eos_set = 1;
            break;
        }
        return 0;
    }
    if (!strcmp(n, "goodput")) return take_goodput(o, a, e);
    if (!strcmp(n, "header")) return bench_take_headers(a, o->headers, &o->n_headers, MAX_HEADERS, e);
    if (!strcmp(n, "metadata")) return bench_take_metadata(a, &o->metadata, e);
    if (!bench_takes_value(n)) return 1;
    const char *v = rh_args_value(a, e);
    if (!v) return -1;
    int sp = bench_take_sampling(n, v, &o->sampling, e);
    if (sp <= 0) return sp;
    if (!strcmp(n, "base-url")) o->base_url = v;
    else if (!strcmp(n, "host")) o->host = v;
    else if (!strcmp(n, "port")) {
        if (rh_parse_u64(v, flag, &o->port, e) < 0) return -1;
        if (o->port == 0 || o->port > 65535) return rh_fail(e, "--port: %llu is not a TCP port", o->port);
    } else if (!strcmp(n, "endpoint")) {
        o->endpoint = v;
        o->endpoint_set = 1;
    } else if (!strcmp(n, "backend")) o->backend = v;
    else if (!strcmp(n, "extra-body") || !strcmp(n, "extra-request-body")) o->extra_body_arg = v;
    else if (!strcmp(n, "percentile-metrics")) o->percentile_metrics = v;
    else if (!strcmp(n, "metric-percentiles")) o->metric_percentiles = v;
    else if (!strcmp(n, "result-dir")) o->result_dir = v;
    else if (!strcmp(n, "result-filename")) o->result_filename = v;
    else if (!strcmp(n, "output-file")) o->output_file = v;
    else if (!strcmp(n, "tokenizer")) o->tokenizer_path = v;
    else if (!strcmp(n, "sharegpt-output-len")) {
        if (rh_parse_u64(v, flag, &o->sharegpt_output_len, e) < 0) return -1;
        if (o->sharegpt_output_len < 1 || o->sharegpt_output_len > BENCH_MAX_TOKENS)
            return rh_fail(e, "--sharegpt-output-len: %llu is outside [1, %u]", o->sharegpt_output_len, BENCH_MAX_TOKENS);
    }
    else if (!strcmp(n, "served-model-name")) o->served_model_name = v;
    else if (!strcmp(n, "label")) o->label = v;
    else if (!strcmp(n, "ready-check-timeout-sec")) {
        if (rh_parse_double(v, flag, &o->ready_timeout, e) < 0) return -1;
        if (!(o->ready_timeout >= 0 && o->ready_timeout <= 86400))
            return rh_fail(e, "--ready-check-timeout-sec: '%s' is outside [0, 86400]", v);
    } else if (!strcmp(n, "ramp-up-strategy")) {
        if (strcmp(v, "linear") && strcmp(v, "exponential"))
            return rh_fail(e, "--ramp-up-strategy: '%s' is not linear or exponential", v);
        o->ramp_strategy = v;
        o->ramp_exponential = !strcmp(v, "exponential");
    } else if (!strcmp(n, "ramp-up-start-rps") || !strcmp(n, "ramp-up-end-rps")) {
        double *x = n[8] == 's' ? &o->ramp_start : &o->ramp_end;
        if (rh_parse_double(v, flag, x, e) < 0) return -1;
        if (!(*x >= 0 && isfinite(*x))) return rh_fail(e, "%s: '%s' must be a rate of 0 or above", flag, v);
    } else if (!strcmp(n, "warmup-requests")) {
        /* SGLang's: N requests before the run, the test request among them */
        unsigned long long w;
        if (rh_parse_u64(v, flag, &w, e) < 0) return -1;
        if (w > 100001) return rh_fail(e, "--warmup-requests: %llu is too many", w);
        o->num_warmups = w ? w - 1 : 0;
    } else if (!strcmp(n, "num-warmups")) {
        if (rh_parse_u64(v, flag, &o->num_warmups, e) < 0) return -1;
        if (o->num_warmups > 100000) return rh_fail(e, "--num-warmups: %llu is too many", o->num_warmups);
    }
    else if (!strcmp(n, "model")) o->model = v;
    else if (!strcmp(n, "api-key")) o->api_key = v;
    else if (!strcmp(n, "request-timeout")) return parse_positive(v, flag, &o->request_timeout, e);
    else if (!strcmp(n, "dataset") || !strcmp(n, "dataset-name")) {
        o->dataset = v;
        o->dataset_set = 1;
        /* `--dataset trace FILE`: the file may follow as the next word. */
        if (bench_takes_file(v) && a->i < a->argc && a->argv[a->i][0] != '-') o->dataset_path = a->argv[a->i++];
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
    else if (!strcmp(n, "random-input-len") || !strcmp(n, "random-input"))
        return parse_len(v, flag, 1, &o->rnd.input_len, e);
    else if (!strcmp(n, "random-output-len") || !strcmp(n, "random-output")) {
        o->out_len_set = 1;
        return parse_len(v, flag, 1, &o->rnd.output_len, e);
    }
    else if (!strcmp(n, "random-prefix-len")) return parse_len(v, flag, 0, &o->rnd.prefix_len, e);
    else if (!strcmp(n, "random-range-ratio")) {
        if (rh_parse_double(v, flag, &o->rnd.range_ratio, e) < 0) return -1;
        o->ratio_set = 1;
    } else if (!strcmp(n, "prefix-repetition-prefix-len")) {
        o->rep_set = 1;
        return parse_len(v, flag, 0, &o->rep.system_prompt_len, e);
    } else if (!strcmp(n, "prefix-repetition-suffix-len")) {
        o->rep_set = 1;
        return parse_len(v, flag, 1, &o->rep.question_len, e);
    } else if (!strcmp(n, "prefix-repetition-num-prefixes")) {
        o->rep_set = 1;
        return parse_len(v, flag, 1, &o->rep.num_groups, e);
    } else if (!strcmp(n, "prefix-repetition-output-len")) {
        o->rep_set = 1;
        return parse_len(v, flag, 1, &o->rep.output_len, e);
    } else if (!strcmp(n, "custom-output-len")) {
        o->custom_output_set = 1;
        return parse_len(v, flag, 1, &o->custom_output_len, e);
    } else if (!strcmp(n, "gsp-num-groups")) return parse_len(v, flag, 1, &o->gsp.num_groups, e);
    else if (!strcmp(n, "gsp-prompts-per-group")) return parse_len(v, flag, 1, &o->gsp.prompts_per_group, e);
    else if (!strcmp(n, "gsp-system-prompt-len")) return parse_len(v, flag, 0, &o->gsp.system_prompt_len, e);
    else if (!strcmp(n, "gsp-question-len")) return parse_len(v, flag, 1, &o->gsp.question_len, e);
    else if (!strcmp(n, "gsp-output-len")) return parse_len(v, flag, 1, &o->gsp.output_len, e);
    else if (!strcmp(n, "vocab-size")) {
        if (rh_parse_u64(v, flag, &o->vocab, e) < 0) return -1;
        if (o->vocab < 2 || o->vocab > 0x7fffffffull) return rh_fail(e, "--vocab-size: %llu is outside [2, 2^31)", o->vocab);
        o->vocab_set = 1;
    } else if (!strcmp(n, "seed")) {
        o->seed_set = 1;
        return rh_parse_u64(v, flag, &o->seed, e);
    }
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

/* The clients' --backend names: what each sends, and whose summary. */
typedef struct backend_kind {
    const char *name;
    bench_api api;
    const char *endpoint;
    bench_style style;
    int keep_eos;               /* vLLM's client sends ignore_eos only with --ignore-eos */
} backend_kind;

static const backend_kind BACKENDS[] = {
    {"vllm", BENCH_API_COMPLETIONS, "/v1/completions", BENCH_STYLE_VLLM, 1},
    {"openai", BENCH_API_COMPLETIONS, "/v1/completions", BENCH_STYLE_VLLM, 1},
    {"vllm-chat", BENCH_API_CHAT, "/v1/chat/completions", BENCH_STYLE_VLLM, 1},
    {"openai-chat", BENCH_API_CHAT, "/v1/chat/completions", BENCH_STYLE_VLLM, 1},
    {"sglang", BENCH_API_GENERATE, "/generate", BENCH_STYLE_SGLANG, 0},
    {"sglang-native", BENCH_API_GENERATE, "/generate", BENCH_STYLE_SGLANG, 0},
    {"sglang-oai", BENCH_API_COMPLETIONS, "/v1/completions", BENCH_STYLE_SGLANG, 0},
    {"sglang-oai-chat", BENCH_API_CHAT, "/v1/chat/completions", BENCH_STYLE_SGLANG, 0},
};

/* The backend given, or the one the endpoint implies (ignore_eos kept on:
 * rehearse's own default). */
static backend_kind backend_of(const opts *o)
{
    if (o->backend)
        for (size_t i = 0; i < sizeof BACKENDS / sizeof *BACKENDS; i++)
            if (!strcmp(o->backend, BACKENDS[i].name)) return BACKENDS[i];
    if (strstr(o->endpoint, "/generate")) return (backend_kind){"sglang", BENCH_API_GENERATE, NULL, BENCH_STYLE_SGLANG, 0};
    if (strstr(o->endpoint, "chat")) return (backend_kind){"openai-chat", BENCH_API_CHAT, NULL, BENCH_STYLE_VLLM, 0};
    return (backend_kind){"openai", BENCH_API_COMPLETIONS, NULL, BENCH_STYLE_VLLM, 0};
}

/* --extra-body: a JSON object, kept as its members so the body writer can
 * append them. */
static int take_extra_body(opts *o, rh_err *e)
{
    if (!o->extra_body_arg) return 0;
    json_error_t je;
    json_t *j = json_loads(o->extra_body_arg, 0, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        return rh_fail(e, "--extra-body: '%.80s' is not a JSON object%s%s", o->extra_body_arg, j ? "" : ": ",
                       j ? "" : je.text);
    }
    o->extra_body = bench_json_members(j, e);
    json_decref(j);
    return o->extra_body ? 0 : -1;
}

static void opts_free(opts *o)
{
    free(o->extra_body);
    free(o->sampling_members);
    json_decref(o->sampling);
    json_decref(o->metadata);
    for (size_t i = 0; i < o->n_headers; i++) free(o->headers[i]);
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
    if (o->backend) {
        backend_kind b = backend_of(o);
        if (strcmp(b.name, o->backend))
            return rh_fail(e, "--backend: '%s' is not vllm, openai, vllm-chat, openai-chat, sglang, sglang-oai or "
                              "sglang-oai-chat", o->backend);
        if (!o->endpoint_set) o->endpoint = b.endpoint;
        if (!o->eos_set) o->keep_eos = b.keep_eos;
        /* SGLang's client's defaults: --random-output-len 1024, --seed 1,
         * --random-range-ratio 0 (its meaning below: lengths uniform in
         * [1, L], half of L on average). */
        if (b.style == BENCH_STYLE_SGLANG) {
            if (!o->out_len_set) o->rnd.output_len = 1024;
            if (!o->seed_set) o->seed = 1;
        }
        /* SGLang's --random-range-ratio R: lengths uniform in [L*R, L]. The
         * same interval as rehearse's [C(1-X), C(1+X)] with C = L(1+R)/2 and
         * X = (1-R)/(1+R) (R = 0 starts at one token). */
        if (b.style == BENCH_STYLE_SGLANG && !strcmp(o->dataset, "random")) {
            double r = o->rnd.range_ratio;
            if (!(r >= 0 && r <= 1))
                return rh_fail(e, "--random-range-ratio: %g must be in [0, 1] under --backend %s (SGLang's meaning)", r,
                               o->backend);
            bench_random_opts *x = &o->rnd;
            for (int k = 0; k < 2; k++) {
                uint32_t *len = k ? &x->output_len : &x->input_len;
                double lo = fmax(1.0, r * *len), hi = *len;
                *len = (uint32_t)ceil((lo + hi) / 2);
                if (k == 0) x->range_ratio = hi > lo ? (hi - lo) / (hi + lo) : 0;
            }
            printf("--random-range-ratio %g%s under --backend %s: lengths uniform in [L*%g, L], as SGLang's client "
                   "draws them (vLLM's meaning is [L(1-X), L(1+X)])\n", r, o->ratio_set ? "" : " (SGLang's default)",
                   o->backend, r);
        }
    }
    if (take_extra_body(o, e) < 0) return -1;
    if (o->sampling && !(o->sampling_members = bench_json_members(o->sampling, e))) return -1;
    if (o->ramp_strategy) {
        if (isnan(o->ramp_start) || isnan(o->ramp_end))
            return rh_fail(e, "--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps");
        if (o->rate_set) return rh_fail(e, "--ramp-up-strategy and --request-rate conflict: the ramp sets the rate");
        if (o->ramp_exponential && !(o->ramp_start > 0))
            return rh_fail(e, "--ramp-up-start-rps must be above 0 with --ramp-up-strategy exponential");
    } else if (!isnan(o->ramp_start) || !isnan(o->ramp_end))
        return rh_fail(e, "--ramp-up-start-rps and --ramp-up-end-rps need --ramp-up-strategy linear|exponential");
    if (o->endpoint[0] != '/') return rh_fail(e, "--endpoint: '%s' must be a path such as /v1/completions", o->endpoint);
    if (strncmp(o->base_url ? o->base_url : "http://", "http://", 7) && strncmp(o->base_url, "https://", 8))
        return rh_fail(e, "--base-url: '%s' must start with http:// or https://", o->base_url);
    /* the other clients' names: SGLang's generated-shared-prefix and
     * random-ids, vLLM's prefix_repetition (its lengths: --prefix-repetition-*,
     * --num-prompts spread over the prefixes), a Mooncake trace replayed at
     * its timestamps (SGLang's), BurstGPT's lengths at --request-rate (vLLM's) */
    if (!strcmp(o->dataset, "generated-shared-prefix")) o->dataset = "shared-prefix";
    if (!strcmp(o->dataset, "random-ids")) o->dataset = "random";
    if (!strcmp(o->dataset, "mooncake")) o->dataset = "trace";
    if (!strcmp(o->dataset, "burstgpt")) {
        if (o->rate_scale != 1)
            return rh_fail(e, "--rate-scale does not apply to --dataset burstgpt: its lengths are sent at "
                              "--request-rate");
        o->dataset = "trace";
        o->rate_set = 1;
    }
    if (!strcmp(o->dataset, "prefix_repetition") || !strcmp(o->dataset, "prefix-repetition")) {
        o->dataset = "shared-prefix";
        o->gsp = o->rep;
        o->gsp.prompts_per_group = (uint32_t)((o->num_prompts + o->rep.num_groups - 1) / o->rep.num_groups);
        o->num_prompts_set = 1;
    } else if (o->rep_set)
        return rh_fail(e, "--prefix-repetition-* are for --dataset prefix_repetition");
    if (strcmp(o->dataset, "random") && strcmp(o->dataset, "shared-prefix") && strcmp(o->dataset, "trace") &&
        strcmp(o->dataset, "sharegpt") && strcmp(o->dataset, "custom"))
        return rh_fail(e, "--dataset: '%s' is not random, shared-prefix, trace, sharegpt, custom, mooncake, burstgpt, "
                          "prefix_repetition, random-ids or generated-shared-prefix", o->dataset);
    if (bench_takes_file(o->dataset) && !o->dataset_path)
        return rh_fail(e, "--dataset %s needs a file: --dataset %s FILE", o->dataset, o->dataset);
    if (o->dataset_path && !o->dataset_set) o->dataset = "trace";
    if (o->dataset_path && !bench_takes_file(o->dataset))
        return rh_fail(e, "--dataset-path is for --dataset trace, sharegpt, custom, mooncake or burstgpt");
    if (o->custom_output_set && strcmp(o->dataset, "custom"))
        return rh_fail(e, "--custom-output-len is for --dataset custom");
    if (o->sharegpt_output_len && strcmp(o->dataset, "sharegpt"))
        return rh_fail(e, "--sharegpt-output-len is for --dataset sharegpt");
    if (o->rate_scale != 1 && strcmp(o->dataset, "trace"))
        return rh_fail(e, "--rate-scale applies to --dataset trace (use --request-rate)");
    if (o->rate_scale != 1 && o->rate_set)
        return rh_fail(e, "--rate-scale and --request-rate conflict: the first scales a trace's arrivals, "
                          "the second replaces them");
    return 0;
}

static int build_dataset(const opts *o, const tokenizer *tok, bench_dataset *d, rh_err *e)
{
    int rc;
    if (!strcmp(o->dataset, "custom")) {
        bench_custom_opts g = {.num_prompts = o->num_prompts, .output_len = o->custom_output_len, .seed = o->seed,
                               .tok = tok};
        rc = bench_dataset_custom(d, o->dataset_path, &g, e);
    } else if (!strcmp(o->dataset, "sharegpt")) {
        bench_sharegpt_opts g = {.num_prompts = o->num_prompts, .output_len = (uint32_t)o->sharegpt_output_len,
                                 .seed = o->seed, .tok = tok};
        rc = bench_dataset_sharegpt(d, o->dataset_path, &g, e);
    } else if (!strcmp(o->dataset, "trace")) {
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
    if (o->ramp_strategy)
        bench_dataset_set_ramp(d, o->ramp_exponential, o->ramp_start, o->ramp_end, o->burstiness, o->seed);
    else if (strcmp(o->dataset, "trace") || o->rate_set)
        bench_dataset_set_rate(d, o->request_rate, o->burstiness, o->seed);
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
    if (o->ramp_strategy) {
        printf("Traffic request rate: ramp-up %s from %g to %g req/s\n", o->ramp_strategy, o->ramp_start, o->ramp_end);
        printf("Burstiness factor: %g (%s)\n", o->burstiness, o->burstiness == 1 ? "Poisson process" : "gamma distribution");
    } else if (strcmp(o->dataset, "trace") || o->rate_set) {
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

/* A view of the dataset's first n items (wrapping), all at time 0: the
 * initial test request and the warmups. Shares the items' hashes. */
static int first_items(const bench_dataset *d, size_t n, bench_dataset *v, rh_err *e)
{
    *v = *d;
    v->items = calloc(n, sizeof *v->items);
    if (!v->items) return rh_fail(e, "out of memory");
    for (size_t i = 0; i < n; i++) {
        v->items[i] = d->items[i % d->n];
        v->items[i].arrival = 0;
        v->items[i].after = -1;
    }
    v->n = n;
    return 0;
}

/* Runs n of the first items outside the measurement; the first failure's
 * message in e (-1) when every one failed. */
static int run_unmeasured(const bench_config *c, const bench_dataset *d, size_t n, const char *what, rh_err *e)
{
    bench_dataset v;
    if (first_items(d, n, &v, e) < 0) return -1;
    bench_config q = *c;
    q.progress = 0;
    q.log = NULL;
    bench_result *r = calloc(n, sizeof *r);
    bench_run_info info;
    int rc = r ? bench_run(&q, &v, r, &info, e) : rh_fail(e, "out of memory");
    size_t ok = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) ok += r[i].sent && !r[i].error;
    if (rc == 0 && !ok)
        rc = rh_fail(e, "%s failed: %s (check --backend, --endpoint, --model and --vocab-size)", what,
                     first_error(r, n) ? first_error(r, n) : "no answer");
    bench_results_free(r, n);
    free(v.items);
    return rc;
}

/* vLLM's --save-result name: BACKEND-RATEqps[-concurrencyC]-MODEL-DATE.json. */
static void result_name(const opts *o, const bench_config *c, const char *backend, char *out, size_t cap)
{
    char rate[32], conc[48] = "", date[32];
    if (isfinite(o->request_rate)) snprintf(rate, sizeof rate, "%.1f", o->request_rate);
    else snprintf(rate, sizeof rate, "inf");
    if (c->max_concurrency) snprintf(conc, sizeof conc, "-concurrency%llu", (unsigned long long)c->max_concurrency);
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    const char *model = o->model ? o->model : c->model ? c->model : "model", *slash = strrchr(model, '/');
    if (o->result_filename) snprintf(out, cap, "%s/%s", o->result_dir ? o->result_dir : ".", o->result_filename);
    else
        snprintf(out, cap, "%s/%s-%sqps%s-%s-%s.json", o->result_dir ? o->result_dir : ".",
                 o->label ? o->label : backend, rate, conc, slash ? slash + 1 : model, date);
}

static int run(opts *o, rh_err *e)
{
    char url[512];
    if (!o->base_url) {
        snprintf(url, sizeof url, "http://%s:%llu", o->host, o->port);
        o->base_url = url;
    }
    if (!o->api_key) o->api_key = getenv("OPENAI_API_KEY");
    /* --result-dir is made before the run (vLLM makes it too), so a folder
     * that cannot be made fails here, not after the results are in. */
    if (o->save_result && o->result_dir && rh_mkdir_p(o->result_dir) < 0)
        return rh_fail(e, "--result-dir: cannot create %s: %s", o->result_dir, strerror(errno));
    backend_kind bk = backend_of(o);
    bench_selection sel;
    if (bench_selection_parse(&sel, o->percentile_metrics, o->metric_percentiles, e) < 0) return -1;
    tokenizer *tok = NULL;
    if (o->tokenizer_path) {
        /* a file or folder, else a Hugging Face id an installed tokenizer serves */
        char buf[4400];
        struct stat st;
        const char *path = o->tokenizer_path;
        if (stat(path, &st) != 0 && !(path = tok_installed_for_id(o->tokenizer_path, buf, sizeof buf)))
            return rh_fail(e, "--tokenizer: '%s' is neither a tokenizer.json (or its folder) nor the Hugging Face id "
                              "of an installed tokenizer (meta-llama/Llama-3*, Qwen/Qwen3*, deepseek-ai/DeepSeek-V3* "
                              "or -R1*; `make node-deps` installs them)", o->tokenizer_path);
        if (!(tok = tok_load(path, e))) return rh_prefix(e, "--tokenizer");
    }
    bench_dataset d;
    if (build_dataset(o, tok, &d, e) < 0) {
        tok_free(tok);
        return -1;
    }
    uint32_t tok_vocab = tok ? tok_vocab_size(tok) : 0;
    tok_free(tok);
    bench_config c = {
        .base_url = o->base_url,
        .endpoint = o->endpoint,
        .api = bk.api,
        .model = o->served_model_name ? o->served_model_name : o->model,
        .api_key = o->api_key,
        .stream = o->stream,
        .max_concurrency = o->max_concurrency ? o->max_concurrency : d.closed_loop_clients,
        .request_timeout = o->request_timeout,
        .progress = !o->disable_tqdm,
        .sampling = o->sampling_members,
        .log = o->verbose ? stderr : NULL,
        .keep_eos = o->keep_eos,
        .extra_body = o->extra_body,
        .headers = (const char *const *)o->headers,
        .n_headers = o->n_headers,
        .keep_text = o->save_detailed,
        .lora_prefix = bk.style == BENCH_STYLE_SGLANG,
    };
    char *found = NULL;
    bench_server_facts facts;
    bench_result *r = NULL;
    int rc = bench_server_info(&c, c.model ? NULL : &found, &facts, e);
    /* --ready-check-timeout-sec S: a server still starting is asked again
     * each second until S seconds have passed (vLLM's wait for readiness). */
    double until = rh_now() + o->ready_timeout;
    while (rc < 0 && rh_now() < until) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
        rc = bench_server_info(&c, c.model ? NULL : &found, &facts, e);
    }
    if (rc == 0 && found) c.model = found;
    /* Token-id prompts must stay inside the model's vocabulary: the server's
     * word for it, or the user's (chat sends words, not ids). */
    bool ids = c.api != BENCH_API_CHAT && strcmp(o->dataset, "sharegpt") && strcmp(o->dataset, "custom");
    if (rc == 0 && !o->vocab_set && ids) {
        if (facts.vocab_size) d.vocab = facts.vocab_size;
        else if (tok_vocab) d.vocab = tok_vocab;
        else
            rc = rh_fail(e, "%s does not say its vocabulary size and the prompts are token ids: pass --vocab-size V "
                            "(vocab_size in the model's config.json) or --tokenizer FILE",
                         c.base_url);
    }
    if (rc == 0) rc = run_unmeasured(&c, &d, 1, "the initial test request", e);
    if (rc == 0) {
        printf("Initial test run completed. Starting main benchmark run...\n");
        if (o->num_warmups) {
            printf("Warming up with %llu requests...\n", o->num_warmups);
            rc = run_unmeasured(&c, &d, (size_t)o->num_warmups, "every warmup request", e);
        }
    }
    if (rc == 0) {
        print_settings(o, &c, &d);
        raise_fd_limit();
        if (!(r = calloc(d.n, sizeof *r))) rc = rh_fail(e, "out of memory for %zu results", d.n);
    }
    bench_run_info info;
    bench_scrape before, after;
    int scraped = 0;
    if (rc == 0) scraped = bench_scrape_metrics(&c, &before) == 0;
    if (rc == 0) {
        struct sigaction sa, old_int, old_term;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
        rc = bench_run(&c, &d, r, &info, e);
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        if (scraped) scraped = bench_scrape_metrics(&c, &after) == 0;
    }
    metrics_summary s;
    bench_peaks pk;
    if (rc == 0) rc = bench_summarize(&d, r, &o->slo, &s, e);
    if (rc == 0) {
        bench_peaks_of(&d, r, s.duration, &pk);
        bench_table t = {.backend = bk.name, .max_concurrency = c.max_concurrency, .request_rate = o->request_rate,
                         .goodput = o->slo.ttft_ms > 0 || o->slo.tpot_ms > 0 || o->slo.e2e_ms > 0};
        if (bench_print_summary(stdout, bk.style, &s, &d, r, &sel, &pk, &t) < 0) rc = rh_fail(e, "out of memory");
        if (info.interrupted) printf("%-40s %-10s\n", "Run:", "interrupted");
        fflush(stdout);
        const char *err = first_error(r, d.n);
        if (err && !o->verbose)
            fprintf(stderr, "rehearse bench: %llu requests failed; the first: %s (--verbose lists each)\n",
                    (unsigned long long)s.failed, err);
    }
    int recorded = !strcmp(o->dataset, "trace") && !o->rate_set;
    bench_json_settings js = {&o->slo,     o->dataset, recorded ? NAN : o->request_rate, o->burstiness, o->rate_scale,
                              o->seed,     o->save_detailed, bk.name, bk.style, &sel, &pk, o->rnd.input_len,
                              o->rnd.output_len, o->rnd.range_ratio, scraped ? &before : NULL,
                              scraped ? &after : NULL, o->model, NULL, 0};
    json_t *extra = o->metadata ? json_deep_copy(o->metadata) : json_object();
    if (extra && o->ramp_strategy) {
        json_object_set_new(extra, "ramp_up_strategy", json_string(o->ramp_strategy));
        json_object_set_new(extra, "ramp_up_start_rps", json_real(o->ramp_start));
        json_object_set_new(extra, "ramp_up_end_rps", json_real(o->ramp_end));
    }
    if (extra && o->label) json_object_set_new(extra, "label", json_string(o->label));
    js.extra = extra;
    if (rc == 0 && o->result_json) rc = bench_write_json(o->result_json, &c, &d, r, &s, &info, &js, e);
    if (rc == 0 && o->save_result) {
        char path[1024];
        result_name(o, &c, bk.name, path, sizeof path);
        js.append = o->append_result;
        rc = bench_write_json(path, &c, &d, r, &s, &info, &js, e);
        js.append = 0;
        if (rc == 0) printf("Results saved to %s\n", path);
    }
    if (rc == 0 && o->output_file) rc = bench_append_jsonl(o->output_file, &c, &d, r, &s, &js, e);
    if (rc == 0 && o->record_trace) {
        tr_header h;
        tr_header_init(&h);
        rc = bench_trace_header(&h, &c, &d, &js, e);
        if (rc == 0) rc = bench_write_trace(o->record_trace, &d, r, &h, e);
        tr_header_free(&h);
    }
    if (rc == 0 && s.completed == 0) rc = rh_fail(e, "no request completed against %s", c.base_url);
    json_decref(extra);
    if (r) bench_results_free(r, d.n);
    bench_dataset_free(&d);
    free(found);
    return rc;
}

int bench_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return 0;
    }
    opts o;
    rh_err e;
    int rc = parse(&o, argc, argv, &e);
    if (rc == 0) rc = run(&o, &e);
    if (rc < 0) fprintf(stderr, "rehearse bench: %s\n", e.msg);
    opts_free(&o);
    return rc < 0 ? 1 : 0;
}
