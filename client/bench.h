/* bench.h — `rehearse bench`: a load generator for any OpenAI-compatible
 * server (ours, SGLang, vLLM), measuring what their own benchmark clients
 * measure.
 *
 * Data flows one way: a dataset (random, shared-prefix, or a trace) gives the
 * requests and their planned arrivals; bench_run sends them over libcurl's
 * multi interface from one thread, streaming, and times every content chunk;
 * the results feed traces/metrics (the same summary the simulator prints), an
 * optional JSON file, and an optional client-side trace (traces/trace.h) that
 * the simulator can replay.
 *
 * Definitions (vLLM's and SGLang's benchmark clients):
 *   send   when the request is handed to the transport, after any wait for a
 *          concurrency slot or for the previous turn of its session;
 *   TTFT   send -> first chunk with non-empty content;
 *   ITL    gaps between successive content chunks;
 *   E2E    send -> end of the response;
 *   output tokens: the final usage's completion_tokens, else content chunks.
 * A request fails on a transport error, an HTTP error, a malformed event, an
 * error event, or a stream without content; failures count in `failed`. */
#ifndef RH_BENCH_H
#define RH_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "traces/metrics/metrics.h"
#include "traces/trace.h"
#include "util/err.h"

/* Lengths above this are refused: no server takes a 16M-token prompt, and a
 * typo must not make the client allocate gigabytes. */
#define BENCH_MAX_TOKENS (1u << 24)

/* Llama-2's vocabulary, within range for most served models (--vocab-size
 * for smaller ones). */
#define BENCH_DEFAULT_VOCAB 32000u

/* ---- dataset ----
 * Prompt token ids are made when a request is sent, not stored: item i's ids
 * are tr_prompt_tokens() of {id, input_len, hashes} with the dataset's
 * gen_block_size (traces/prompt.h), so a trace's block hashes become real
 * shared token prefixes on the server. */
typedef struct bench_item {
    uint64_t id;
    double arrival;             /* planned send, s from the run start */
    uint32_t input_len, output_len;
    uint32_t n_hashes;          /* hashes that generate the prompt (gen_block_size) */
    uint64_t *hashes;           /* owned by the dataset */
    uint64_t session_id;        /* 0: none */
    uint32_t turn;
    int64_t after;              /* index of the item that must finish first (same session), or -1 */
    int32_t priority;           /* the trace's; sent as the request's "priority" when nonzero */
    const char *adapter;        /* the trace's LoRA adapter by name (in the dataset's adapter_pool), or NULL */
    const char *text;           /* a text prompt (ShareGPT) sent as text, or NULL: token ids;
                                   in the dataset's text_pool */
} bench_item;

typedef struct bench_dataset {
    bench_item *items;          /* sorted by arrival */
    size_t n;
    uint32_t gen_block_size;    /* block size of items' hashes for prompt generation */
    uint32_t trace_block_size;  /* block size of the hashes recorded in --record-trace */
    int hashes_from_source;     /* 1: record the items' own hashes (a trace dataset) */
    uint32_t closed_loop_clients; /* > 0: the trace is closed-loop with this many clients */
    uint32_t vocab;             /* prompt ids are drawn from [0, vocab) */
    uint64_t prompt_seed;       /* seeds the prompt ids (traces/prompt.h) */
    char *name;                 /* "random", "shared-prefix", or the trace path */
    uint64_t *hash_pool;        /* owns every item's hashes */
    char *text_pool;            /* owns every item's text (NUL-separated), or NULL */
    char *adapter_pool;         /* owns the adapter names items point at (NUL-separated), or NULL */
} bench_dataset;

typedef struct bench_random_opts {
    size_t num_prompts;
    uint32_t input_len, output_len;
    double range_ratio;         /* lengths uniform in [L(1-x), L(1+x)], x in [0, 1) */
    uint32_t prefix_len;        /* tokens shared by every prompt, before the random part */
    uint64_t seed;
} bench_random_opts;

typedef struct bench_shared_prefix_opts {
    uint32_t num_groups, prompts_per_group;
    uint32_t system_prompt_len, question_len, output_len;
    size_t num_prompts;         /* 0: groups * prompts per group; else the first N after shuffling */
    uint64_t seed;
} bench_shared_prefix_opts;

typedef struct bench_trace_opts {
    size_t num_prompts;         /* 0: all; else the first N by arrival */
    double rate_scale;          /* arrivals divided by this (2 = twice as fast) */
} bench_trace_opts;

int bench_dataset_random(bench_dataset *d, const bench_random_opts *o, uint32_t record_block_size, rh_err *e);
int bench_dataset_shared_prefix(bench_dataset *d, const bench_shared_prefix_opts *o, uint32_t record_block_size,
                                rh_err *e);
/* Any trace tr_trace_load reads; keeps arrivals (offset from the first,
 * divided by rate_scale), lengths, hashes and sessions. */
int bench_dataset_trace(bench_dataset *d, const char *path, const bench_trace_opts *o, rh_err *e);
/* Replaces the arrivals with a gamma process of `rate` req/s (inf: all at 0):
 * shape `burstiness`, mean interval 1/rate, first request at 0 — vLLM's
 * schedule (burstiness 1 is Poisson). Items keep their order. */
void bench_dataset_set_rate(bench_dataset *d, double rate, double burstiness, uint64_t seed);
/* vLLM's --ramp-up-strategy: request i of n is sent at a rate that moves
 * from start_rps to end_rps with i/(n-1), linearly or geometrically
 * (exponential; start_rps > 0); each gap drawn as bench_dataset_set_rate
 * draws it at that rate. A rate of 0 (a linear ramp's start) sends at once. */
void bench_dataset_set_ramp(bench_dataset *d, int exponential, double start_rps, double end_rps, double burstiness,
                            uint64_t seed);
void bench_dataset_free(bench_dataset *d);

/* ShareGPT's format (a JSON array of {"conversations": [{"from": "human",
 * "value": ...}, {"from": "gpt", "value": ...}, ...]}, as vLLM's and SGLang's
 * clients read it): each conversation's first turn is the prompt, sent as
 * text, and the reply's token count the output length (or output_len when
 * it is given). Lengths count with `tok` (the model's tokenizer; NULL: one
 * token per byte, an upper bound the server's usage replaces). As vLLM's
 * client: conversations of fewer than two turns are skipped, and pairs with
 * fewer than 4 tokens either side, a prompt over 1024 or more than 2048
 * together (unless output_len is given). Shuffled with the seed, then the
 * first num_prompts. Errors name the file and the entry. */
typedef struct tokenizer tokenizer;
/* A text's length in tokens by tok (NULL: one per byte), at most
 * BENCH_MAX_TOKENS. */
int bench_count_tokens(const tokenizer *tok, const char *s, size_t n, uint32_t *out, rh_err *e);
typedef struct bench_sharegpt_opts {
    size_t num_prompts;
    uint32_t output_len;        /* 0: the reply's length */
    uint64_t seed;
    const tokenizer *tok;
} bench_sharegpt_opts;
int bench_dataset_sharegpt(bench_dataset *d, const char *path, const bench_sharegpt_opts *o, rh_err *e);
/* vLLM's `custom` dataset: JSONL lines of {"prompt": TEXT} (and, when
 * given, "output_tokens": N), each prompt sent as text and counted with
 * `tok` (NULL: one token per byte); the output length the line's, else
 * output_len. Shuffled with the seed, then the first num_prompts. */
typedef struct bench_custom_opts {
    size_t num_prompts;
    uint32_t output_len;
    uint64_t seed;
    const tokenizer *tok;
} bench_custom_opts;
int bench_dataset_custom(bench_dataset *d, const char *path, const bench_custom_opts *o, rh_err *e);
/* The prompt ids of item i (its input_len of them) into out. */
void bench_item_tokens(const bench_dataset *d, size_t i, int32_t *out);

/* ---- running ---- */
/* COMPLETIONS: /v1/completions with token ids; CHAT: /v1/chat/completions
 * with words; GENERATE: SGLang's /generate with input_ids (each event holds
 * the whole text so far: a chunk counts when completion_tokens grew). */
typedef enum bench_api { BENCH_API_COMPLETIONS = 0, BENCH_API_CHAT = 1, BENCH_API_GENERATE = 2 } bench_api;

typedef struct bench_config {
    const char *base_url;       /* scheme://host:port, no trailing slash needed */
    const char *endpoint;       /* "/v1/completions" or "/v1/chat/completions" */
    bench_api api;
    const char *model;
    const char *api_key;        /* NULL: no Authorization header */
    int stream;                 /* 0: one JSON response; TTFT = E2E */
    uint64_t max_concurrency;   /* 0: unlimited */
    double request_timeout;     /* s per request, 0: none */
    int progress;               /* draw a progress bar */
    int keep_eos;               /* 1: send ignore_eos false (vLLM's default; --disable-ignore-eos) */
    const char *extra_body;     /* JSON object members ("a":1,"b":2) added to every body, or NULL:
                                   they come last, so they override the client's own */
    const char *sampling;       /* JSON members ("temperature":0.7,"top_p":0.9) sent as each request's
                                   sampling parameters (client/bench_body.h), or NULL: greedy */
    int keep_text;              /* keep each request's generated text (bench_result.text) */
    int lora_prefix;            /* an item's adapter goes as "model": "MODEL:NAME" (SGLang's OpenAI API),
                                   else "NAME" (vLLM's); /generate sends "lora_path": "NAME" */
    const char *const *headers; /* more "Name: value" headers, n_headers of them */
    size_t n_headers;
    FILE *log;                  /* one line per failed request, or NULL */
} bench_config;

typedef struct bench_result {
    double send;                /* s from the run start */
    double ttft, e2e;           /* s from send; ttft 0 when no content came */
    uint32_t input_len;         /* usage.prompt_tokens when given, else the dataset's */
    uint32_t output_len;        /* usage.completion_tokens when given, else content chunks */
    uint32_t cached_tokens;     /* usage.prompt_tokens_details.cached_tokens when given */
    int has_cached;
    uint32_t n_chunks;          /* content chunks received */
    double *chunk_times;        /* n_chunks times, s from send */
    int finish;                 /* enum tr_finish; LENGTH or STOP when it succeeded */
    long http_status;           /* 0: no response */
    char *error;                /* NULL when it succeeded */
    char *text;                 /* the generated text (bench_config.keep_text), else NULL */
    int sent;                   /* 0: never sent (run interrupted) */
} bench_result;

typedef struct bench_run_info {
    double t0;                  /* rh_now() at the run start; sends are offsets from it */
    double wall;                /* s from the run start to the last completion */
    uint64_t max_inflight;      /* most requests outstanding at once */
    int interrupted;            /* stopped by SIGINT/SIGTERM or bench_stop() */
} bench_run_info;

/* GET base_url/v1/models: 0 and the first model id (malloc'd, when `model`
 * is not NULL) if the server answers; -1 with a message naming the URL if it
 * cannot be reached or answers with an error. */
int bench_probe(const bench_config *c, char **model, rh_err *e);
/* What /v1/models says of the first model (0: not said). */
typedef struct bench_server_facts {
    uint32_t max_model_len;     /* vLLM's, SGLang's and ours */
    uint32_t vocab_size;        /* ours */
    uint64_t pool_tokens;       /* the KV pool: /get_server_info's max_total_num_tokens (SGLang's and ours); 0
                                   when the server does not say (vLLM) */
    /* The scheduler knobs /get_server_info reports (SGLang's and ours), by
     * rehearse's flag names ({"chunked-prefill-size", "8192"}): what a
     * simulation of this server must schedule with. */
    int n_knobs;
    char knob[10][2][40];
} bench_server_facts;
/* The same, with the facts /v1/models and /get_server_info give (facts may
 * be NULL). */
int bench_server_info(const bench_config *c, char **model, bench_server_facts *facts, rh_err *e);
/* The server's own counters (its Prometheus /metrics, vLLM's names, which
 * rehearse serve and vLLM export), read before and after a run so the
 * summary's server-side figures are the server's. Each counter is summed
 * over its label sets; has[] says which the server exports. Other clients'
 * requests in the meantime count too. */
enum { BS_PREEMPTIONS, BS_CACHE_QUERIES, BS_CACHE_HITS, BS_SPEC_DRAFTS, BS_SPEC_DRAFT_TOKENS, BS_SPEC_ACCEPTED,
       BS_STEPS, BS_STEP_TOKENS, BS_N };
#define BENCH_SPEC_POSITIONS 16
typedef struct bench_scrape {
    double v[BS_N];
    int has[BS_N];
    /* vllm:spec_decode_num_accepted_tokens_per_pos_total by its position label */
    double accepted_at[BENCH_SPEC_POSITIONS];
    int n_positions;            /* 1 + the highest position seen, 0: none */
} bench_scrape;
/* 0 when /metrics answered with at least one of them, else -1 (no error:
 * a server without /metrics simply has no server-side figures). */
int bench_scrape_metrics(const bench_config *c, bench_scrape *s);

/* An empty dataset of n items (ids 0..n-1, no session order) with room for
 * n_hashes hashes in hash_pool: for a caller that designs its own. */
int bench_dataset_new(bench_dataset *d, size_t n, size_t n_hashes, const char *name, rh_err *e);

/* Sends every item of `d` at its arrival, honouring max_concurrency and
 * session order; fills out[0 .. d->n). -1 only when the run could not start
 * (out of memory, curl); failed requests are results, not errors. */
int bench_run(const bench_config *c, const bench_dataset *d, bench_result *out, bench_run_info *info, rh_err *e);
/* Asks a running bench_run to stop sending and abort what is in flight
 * (async-signal-safe). */
void bench_stop(void);
void bench_results_free(bench_result *r, size_t n);

/* ---- results ---- */
/* The measured request of item i as a trace record, without block hashes.
 * Token times are the content chunks' times fitted to output_len entries (a
 * chunk that carried several tokens repeats its time at the end, which adds
 * no gap); they point into `times`, which must hold r->output_len doubles
 * (or d->items[i].output_len for a failed request, which has none). */
void bench_result_request(const bench_dataset *d, size_t i, const bench_result *r, tr_request *out, double *times);
/* Feeds every sent result into a fresh metrics object and summarizes. */
int bench_summarize(const bench_dataset *d, const bench_result *r, const metrics_slo *slo, metrics_summary *s,
                    rh_err *e);
/* Writes the client-side trace: a header (model, base URL, endpoint, dataset,
 * run settings as key/values) and one measured request per sent item. */
int bench_write_trace(const char *path, const bench_dataset *d, const bench_result *r, const tr_header *h,
                      rh_err *e);

#endif
