/* test_bench_recipes.c — `rehearse bench` takes what users' vLLM and SGLang
 * benchmark recipes pass, with those clients' meanings: --result-dir made
 * when missing, SGLang's defaults under --backend sglang*, the sampling
 * flags in every request body, --warmup-requests, several --header values
 * after one flag, --metadata, --label, --served-model-name,
 * --append-result, the ramp-up flags; an unknown on/off flag is named
 * unknown. Against the mock server in this process. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/bench_body.h"
#include "client/bench_json.h"
#include "client/bench_mock.h"
#include "engine/model/tokenizer.h"
#include "traces/import/import.h"
#include "testutil.h"

static char out[16384];

static int bench(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "REHEARSE_PROGRESS=0 %s bench %s", tu_bin(), args);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc != 0) printf("\n  bench %s: %d\n%s\n", args, rc, out);
    return rc;
}

/* The result file lands in a --result-dir that did not exist, under the
 * --label's name, with the --metadata keys and --model as model_id while
 * requests name --served-model-name; --append-result adds lines. */
static void test_result_dir_label_metadata_append(void)
{
    bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.001, .vocab_size = 1000, .api_key = "k9"};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char dir[256], args[2048], path[512];
    tu_tmp_path("bench_results/a/b", dir, sizeof dir);
    /* two headers after one --header: the run needs the second */
    snprintf(args, sizeof args, "--base-url %s --num-prompts 3 --random-input-len 8 --random-output-len 2 "
             "--model org/base-model --served-model-name served --header X-Probe=1 'Authorization=Bearer k9' "
             "--save-result --result-dir %s --label mylabel --metadata version=0.3 tp=1 --disable-tqdm",
             bench_mock_url(m), dir);
    CU_ASSERT_EQUAL_FATAL(bench(args), 0);
    DIR *dd = opendir(dir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dd);
    struct dirent *de;
    path[0] = '\0';
    while ((de = readdir(dd)))
        if (de->d_name[0] != '.') snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    closedir(dd);
    CU_ASSERT_PTR_NOT_NULL(strstr(path, "/mylabel-inf"));
    CU_ASSERT_PTR_NOT_NULL(strstr(path, "-base-model-"));
    json_t *j = json_load_file(path, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "version")), "0.3");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "tp")), "1");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "model_id")), "org/base-model");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "completed")), 3);
    json_decref(j);

    /* --append-result: each run one more JSON line in the same file */
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "--base-url %s --num-prompts 2 --random-input-len 8 --random-output-len 2 "
                 "--model served --api-key k9 --save-result --result-dir %s --result-filename all.jsonl "
                 "--append-result", bench_mock_url(m), dir);
        CU_ASSERT_EQUAL(bench(args), 0);
    }
    snprintf(path, sizeof path, "%s/all.jsonl", dir);
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[1 << 16];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *l = json_loads(line, 0, NULL);
        CU_ASSERT(l && json_integer_value(json_object_get(l, "completed")) == 2);
        json_decref(l);
        lines++;
    }
    fclose(f);
    CU_ASSERT_EQUAL(lines, 2);
    bench_mock_stop(m);
}

/* Under --backend sglang-oai with none of the length flags: SGLang's
 * --random-output-len 1024, --random-range-ratio 0 (lengths uniform in
 * [1, L]) and --seed 1. */
static void test_sglang_defaults(void)
{
    bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.00001, .tokens_per_chunk = 64, .vocab_size = 1000};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char rec[256], json[256], args[2048];
    tu_tmp_path("bench_sglang_defaults.rhtr", rec, sizeof rec);
    tu_tmp_path("bench_sglang_defaults.json", json, sizeof json);
    snprintf(args, sizeof args, "--base-url %s --backend sglang-oai --num-prompts 30 --random-input-len 64 "
             "--record-trace %s --result-json %s", bench_mock_url(m), rec, json);
    CU_ASSERT_EQUAL_FATAL(bench(args), 0);
    tr_trace t;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(rec, &t, &e), 0);
    uint32_t in_lo = UINT32_MAX, in_hi = 0, out_lo = UINT32_MAX, out_hi = 0;
    for (size_t i = 0; i < t.n_requests; i++) {
        const tr_request *q = &t.requests[i];
        if (q->input_len < in_lo) in_lo = q->input_len;
        if (q->input_len > in_hi) in_hi = q->input_len;
        if (q->output_len < out_lo) out_lo = q->output_len;
        if (q->output_len > out_hi) out_hi = q->output_len;
    }
    tr_trace_free(&t);
    printf("\n  input %u..%u, output %u..%u", in_lo, in_hi, out_lo, out_hi);
    /* uniform in [1, 64] and [1, 1024]: 30 draws spread well below L/2
     * and above it (vLLM's defaults would give 64 and 128 exactly) */
    CU_ASSERT(in_lo >= 1 && in_hi <= 64 && in_lo < 24 && in_hi > 40);
    CU_ASSERT(out_lo >= 1 && out_hi <= 1024 && out_lo < 300 && out_hi > 700);
    json_t *j = json_load_file(json, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "seed")), 1);
    json_decref(j);
    bench_mock_stop(m);
}

/* --warmup-requests N (SGLang's): N requests before the run, the test
 * request among them; the ramp-up flags run and are saved. */
static void test_warmups_and_ramp(void)
{
    bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.001, .vocab_size = 1000};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char json[256], args[2048];
    tu_tmp_path("bench_ramp.json", json, sizeof json);
    snprintf(args, sizeof args, "--base-url %s --num-prompts 4 --random-input-len 8 --random-output-len 2 "
             "--warmup-requests 3 --ramp-up-strategy linear --ramp-up-start-rps 0 --ramp-up-end-rps 200 "
             "--ready-check-timeout-sec 5 --temperature 0.7 --top-p 0.9 --top-k 5 --min-p 0.1 "
             "--presence-penalty 0.5 --frequency-penalty 0.5 --repetition-penalty 1.1 --result-json %s",
             bench_mock_url(m), json);
    CU_ASSERT_EQUAL_FATAL(bench(args), 0);
    const bench_mock_request *q;
    CU_ASSERT_EQUAL(bench_mock_requests(m, &q), 3 + 4);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "ramp-up linear from 0 to 200 req/s"));
    json_t *j = json_load_file(json, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "ramp_up_strategy")), "linear");
    CU_ASSERT_EQUAL(json_real_value(json_object_get(j, "ramp_up_end_rps")), 200);
    json_decref(j);
    bench_mock_stop(m);
}

/* The sampling members go where each API takes them, once: the default
 * temperature 0 gives way to the user's. */
static void test_sampling_in_every_body(void)
{
    const char *samp = "\"temperature\":0.7,\"top_p\":0.9,\"top_k\":5";
    int32_t ids[3] = {1, 2, 3};
    size_t len;
    for (int generate = 0; generate < 2; generate++) {
        bench_body_opts o = {.model_json = "\"m\"", .stream = 1, .generate = generate, .sampling = samp};
        char *body = bench_request_body(&o, ids, 3, NULL, 16, &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(body);
        json_error_t je;
        json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
        if (!j) printf("\n  %s: %s\n", body, je.text);
        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        json_t *p = generate ? json_object_get(j, "sampling_params") : j;
        CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(p, "temperature")), 0.7, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(p, "top_p")), 0.9, 1e-12);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(p, "top_k")), 5);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(p, generate ? "max_new_tokens" : "max_tokens")), 16);
        json_decref(j);
        free(body);
        /* without them: greedy, as before */
        o.sampling = NULL;
        body = bench_request_body(&o, ids, 3, NULL, 16, &len);
        j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        p = generate ? json_object_get(j, "sampling_params") : j;
        CU_ASSERT_EQUAL(json_number_value(json_object_get(p, "temperature")), 0);
        CU_ASSERT_PTR_NULL(json_object_get(j, "priority"));   /* none: not sent */
        json_decref(j);
        free(body);
        /* a trace request's priority, top level in both APIs (SGLang's and vLLM's place) */
        o.priority = -7;
        body = bench_request_body(&o, ids, 3, NULL, 16, &len);
        j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "priority")), -7);
        json_decref(j);
        free(body);
    }
}

/* The result file's keys under vLLM's names: the server's speculative
 * counters over the run as spec_decode_* (the rate in percent, position k's
 * rate its accepted count over the drafts), the per-request latencies and
 * queue times; SGLang's line: accept_length and
 * total_output_tokens_retokenized. */
static void test_their_result_keys(void)
{
    rh_err e;
    bench_dataset d;
    CU_ASSERT_EQUAL_FATAL(bench_dataset_new(&d, 2, 0, "by hand", &e), 0);
    d.items[0].arrival = 0;
    d.items[1].arrival = 0.1;
    double c0[] = {0.1, 0.2}, c1[] = {0.3, 0.5};
    bench_result r[2] = {
        {.send = 0, .ttft = 0.1, .e2e = 0.2, .input_len = 4, .output_len = 2, .n_chunks = 2, .chunk_times = c0,
         .finish = TR_FINISH_LENGTH, .http_status = 200, .sent = 1},
        {.send = 0.25, .ttft = 0.3, .e2e = 0.5, .input_len = 4, .output_len = 2, .n_chunks = 2, .chunk_times = c1,
         .finish = TR_FINISH_LENGTH, .http_status = 200, .sent = 1}};
    metrics_summary s;
    CU_ASSERT_EQUAL_FATAL(bench_summarize(&d, r, &(metrics_slo){0}, &s, &e), 0);
    bench_scrape before = {0}, after = {0};
    for (int k = BS_SPEC_DRAFTS; k <= BS_SPEC_ACCEPTED; k++) before.has[k] = after.has[k] = 1;
    before.v[BS_SPEC_DRAFTS] = 10, after.v[BS_SPEC_DRAFTS] = 20;              /* 10 drafts */
    before.v[BS_SPEC_DRAFT_TOKENS] = 30, after.v[BS_SPEC_DRAFT_TOKENS] = 60;  /* of 3 tokens */
    before.v[BS_SPEC_ACCEPTED] = 5, after.v[BS_SPEC_ACCEPTED] = 20;           /* 15 accepted */
    before.n_positions = after.n_positions = 3;
    double at_before[3] = {2, 2, 1}, at_after[3] = {10, 7, 3};               /* 8, 5, 2 */
    memcpy(before.accepted_at, at_before, sizeof at_before);
    memcpy(after.accepted_at, at_after, sizeof at_after);
    bench_selection sel;
    CU_ASSERT_EQUAL_FATAL(bench_selection_parse(&sel, NULL, NULL, &e), 0);
    bench_peaks pk;
    bench_peaks_of(&d, r, s.duration, &pk);
    bench_json_settings js = {.slo = &(metrics_slo){0}, .dataset = "random", .request_rate = 10, .burstiness = 1,
                              .rate_scale = 1, .save_detailed = 1, .backend = "vllm", .sel = &sel, .peaks = &pk,
                              .before = &before, .after = &after};
    bench_config c = {.base_url = "http://x", .endpoint = "/v1/completions", .model = "m"};
    bench_run_info info = {0};
    char path[256], line[256];
    tu_tmp_path("bench_keys.json", path, sizeof path);
    tu_tmp_path("bench_keys.jsonl", line, sizeof line);
    CU_ASSERT_EQUAL_FATAL(bench_write_json(path, &c, &d, r, &s, &info, &js, &e), 0);
    json_t *j = json_load_file(path, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "spec_decode_acceptance_rate")), 50, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "spec_decode_acceptance_length")), 2.5, 1e-9);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "spec_decode_num_drafts")), 10);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "spec_decode_draft_tokens")), 30);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "spec_decode_accepted_tokens")), 15);
    json_t *pp = json_object_get(j, "spec_decode_per_position_acceptance_rates");
    CU_ASSERT_EQUAL_FATAL(json_array_size(pp), 3);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_array_get(pp, 0)), 0.8, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_array_get(pp, 2)), 0.2, 1e-9);
    json_t *lat = json_object_get(j, "latencies"), *queue = json_object_get(j, "queue_times");
    CU_ASSERT_EQUAL_FATAL(json_array_size(lat), 2);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_array_get(lat, 1)), 0.5, 1e-12);
    CU_ASSERT_TRUE(json_equal(lat, json_object_get(j, "e2els")));
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_array_get(queue, 0)), 0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_array_get(queue, 1)), 0.15, 1e-12);   /* planned 0.1, sent 0.25 */
    json_decref(j);
    CU_ASSERT_EQUAL_FATAL(bench_append_jsonl(line, &c, &d, r, &s, &js, &e), 0);
    j = json_load_file(line, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "accept_length")), 2.5, 1e-9);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "total_output_tokens_retokenized")), 4);
    json_decref(j);
    /* a server that does not speculate: SGLang writes null */
    js.before = js.after = NULL;
    remove(line);
    CU_ASSERT_EQUAL_FATAL(bench_append_jsonl(line, &c, &d, r, &s, &js, &e), 0);
    j = json_load_file(line, 0, NULL);
    CU_ASSERT(j && json_is_null(json_object_get(j, "accept_length")));
    json_decref(j);
    bench_dataset_free(&d);
}

/* Datasets under the other clients' names: custom JSONL (text prompts,
 * each line's output_tokens or --custom-output-len), prefix_repetition
 * (num_prompts spread over the prefixes, each sharing its prefix), mooncake
 * and burstgpt files, random-ids. */
static void test_datasets_by_their_names(void)
{
    bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.0001, .vocab_size = 1000, .cache_block = 16};
    rh_err e;
    bench_mock *m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char file[256], args[2048];
    tu_tmp_path("custom.jsonl", file, sizeof file);
    const char *text = "{\"prompt\": \"one two three\"}\n\n{\"prompt\": \"four five\", \"output_tokens\": 5}\n"
                       "{\"prompt\": \"six\"}\n";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(file, text, strlen(text)), 0);
    snprintf(args, sizeof args, "--base-url %s --dataset custom %s --custom-output-len 4", bench_mock_url(m), file);
    CU_ASSERT_EQUAL_FATAL(bench(args), 0);
    const bench_mock_request *q;
    size_t n = bench_mock_requests(m, &q);
    CU_ASSERT_EQUAL_FATAL(n, 1 + 3);
    int fives = 0, fours = 0;
    for (size_t i = 1; i < n; i++) {
        fives += q[i].max_tokens == 5;
        fours += q[i].max_tokens == 4;
    }
    CU_ASSERT(fives == 1 && fours == 2);
    bench_mock_stop(m);

    /* prefix_repetition: 12 prompts over 3 prefixes of 32 tokens, the
     * perfect cache of the mock hits each prefix after its first prompt */
    m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    snprintf(args, sizeof args, "--base-url %s --dataset prefix_repetition --num-prompts 12 "
             "--prefix-repetition-prefix-len 32 --prefix-repetition-suffix-len 8 --prefix-repetition-num-prefixes 3 "
             "--prefix-repetition-output-len 3 --max-concurrency 1", bench_mock_url(m));
    CU_ASSERT_EQUAL_FATAL(bench(args), 0);
    n = bench_mock_requests(m, &q);
    CU_ASSERT_EQUAL_FATAL(n, 1 + 12);
    int hits = 0;
    for (size_t i = 1; i < n; i++) {
        CU_ASSERT(q[i].prompt_len == 40 && q[i].max_tokens == 3);
        hits += q[i].cached >= 32;
    }
    CU_ASSERT(hits >= 12 - 3);
    bench_mock_stop(m);

    /* random-ids is random; a Mooncake file and a BurstGPT file by name */
    m = bench_mock_start(&mo, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char moon[256], burst[256];
    tu_tmp_path("moon.jsonl", moon, sizeof moon);
    tu_tmp_path("burst.csv", burst, sizeof burst);
    const char *mt = "{\"timestamp\": 0, \"input_length\": 20, \"output_length\": 2, \"hash_ids\": [1]}\n"
                     "{\"timestamp\": 10, \"input_length\": 30, \"output_length\": 3, \"hash_ids\": [1]}\n";
    const char *bt = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5,ChatGPT,21,2,23,Conversation log\n900,ChatGPT,22,3,25,Conversation log\n";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(moon, mt, strlen(mt)), 0);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(burst, bt, strlen(bt)), 0);
    snprintf(args, sizeof args, "--base-url %s --dataset random-ids --num-prompts 2 --random-input-len 8 "
             "--random-output-len 2", bench_mock_url(m));
    CU_ASSERT_EQUAL(bench(args), 0);
    snprintf(args, sizeof args, "--base-url %s --dataset mooncake %s --rate-scale 1000", bench_mock_url(m), moon);
    CU_ASSERT_EQUAL(bench(args), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "Dataset: ") && strstr(out, "2 requests"));
    /* BurstGPT's 900 s gap is not waited: its lengths at --request-rate (inf) */
    snprintf(args, sizeof args, "--base-url %s --dataset burstgpt %s", bench_mock_url(m), burst);
    CU_ASSERT_EQUAL(bench(args), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "Traffic request rate: inf"));
    n = bench_mock_requests(m, &q);
    CU_ASSERT_EQUAL(n, 3 + 3 + 3);
    CU_ASSERT(q[n - 1].prompt_len == 21 || q[n - 1].prompt_len == 22);
    bench_mock_stop(m);
}

/* --tokenizer by a Hugging Face id resolves the installed tokenizer (it
 * counts a custom file's prompt in that tokenizer's tokens); a name that
 * is neither a file nor such an id is refused, naming the flag. */
static void test_tokenizer_by_id(void)
{
    char buf[4400];
    if (!tok_installed("llama3", buf, sizeof buf)) {
        printf("\n  SKIPPED: the packaged Llama 3 tokenizer is not installed (make node-deps)\n");
    } else {
        char got[4400];
        CU_ASSERT_PTR_NOT_NULL(tok_installed_for_id("meta-llama/Llama-3.1-8B-Instruct", got, sizeof got));
        CU_ASSERT_STRING_EQUAL(got, buf);
        bench_mock_opts mo = {.first_token_s = 0.001, .itl_s = 0.0001, .vocab_size = 1000};
        rh_err e;
        bench_mock *m = bench_mock_start(&mo, &e);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        char file[256], json[256], args[2048];
        tu_tmp_path("custom_tok.jsonl", file, sizeof file);
        tu_tmp_path("custom_tok.json", json, sizeof json);
        const char *text = "{\"prompt\": \"Hello world, hello world\"}\n";
        CU_ASSERT_EQUAL_FATAL(tu_write_file(file, text, strlen(text)), 0);
        snprintf(args, sizeof args, "--base-url %s --dataset custom %s --custom-output-len 2 --tokenizer "
                 "meta-llama/Llama-3.1-8B-Instruct --disable-stream --result-json %s --save-detailed",
                 bench_mock_url(m), file, json);
        CU_ASSERT_EQUAL(bench(args), 0);
        bench_mock_stop(m);
    }
    CU_ASSERT_PTR_NULL(tok_installed_for_id("acme/NoSuchModel-7B", buf, sizeof buf));
    char args[512];
    snprintf(args, sizeof args, "REHEARSE_PROGRESS=0 %s bench --base-url http://127.0.0.1:1 --tokenizer "
             "acme/NoSuchModel-7B", tu_bin());
    CU_ASSERT_EQUAL(tu_run(args, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--tokenizer: 'acme/NoSuchModel-7B' is neither"));
}

static void test_bad_recipe_flags(void)
{
    const struct { const char *args, *says; } bad[] = {
        {"--disable-foo", "unknown flag --disable-foo"},
        {"--no-such-switch --num-prompts 2", "unknown flag --no-such-switch"},
        {"--metadata novalue", "--metadata: 'novalue' must be KEY=VALUE"},
        {"--top-p 1.5", "--top-p: 1.5 must be in (0, 1]"},
        {"--temperature -1", "--temperature: -1 must be 0 or above"},
        {"--top-k x", "--top-k"},
        {"--ramp-up-strategy linear", "needs --ramp-up-start-rps and --ramp-up-end-rps"},
        {"--ramp-up-strategy cubic", "--ramp-up-strategy: 'cubic' is not linear or exponential"},
        {"--ramp-up-start-rps 1 --ramp-up-end-rps 2", "need --ramp-up-strategy"},
        {"--ramp-up-strategy exponential --ramp-up-start-rps 0 --ramp-up-end-rps 9", "must be above 0"},
        {"--ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 2 --request-rate 3", "conflict"},
        {"--disable-tqdm=yes", "disable-tqdm"},
        {"--dataset custom", "--dataset custom needs a file"},
        {"--dataset custom /nonexistent.jsonl", "/nonexistent.jsonl: cannot open"},
        {"--prefix-repetition-num-prefixes 3", "are for --dataset prefix_repetition"},
        {"--custom-output-len 3", "--custom-output-len is for --dataset custom"},
        {"--dataset lmsys", "--dataset: 'lmsys' is not"},
        {"--dataset burstgpt x.csv --rate-scale 2", "--rate-scale does not apply to --dataset burstgpt"},
    };
    char args[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "REHEARSE_PROGRESS=0 %s bench --base-url http://127.0.0.1:1 %s", tu_bin(),
                 bad[i].args);
        int rc = tu_run(args, out, sizeof out);
        int ok = rc == 1 && strstr(out, bad[i].says) && !strstr(out, "needs a value");
        if (!ok) printf("\n  '%s' gave %d: %s\n", bad[i].args, rc, out);
        CU_ASSERT(ok);
    }
}

void register_test_bench_recipes(void)
{
    CU_pSuite s = CU_add_suite("bench_recipes", NULL, NULL);
    CU_add_test(s, "--result-dir made, --label, --metadata, --served-model-name, --header A B, --append-result",
                test_result_dir_label_metadata_append);
    CU_add_test(s, "SGLang's defaults under --backend sglang-oai", test_sglang_defaults);
    CU_add_test(s, "--warmup-requests, ramp-up, sampling and readiness flags run", test_warmups_and_ramp);
    CU_add_test(s, "sampling flags in every request body, once", test_sampling_in_every_body);
    CU_add_test(s, "bad recipe flags and unknown switches", test_bad_recipe_flags);
    CU_add_test(s, "datasets by their names: custom, prefix_repetition, random-ids, mooncake, burstgpt",
                test_datasets_by_their_names);
    CU_add_test(s, "--tokenizer by a Hugging Face id", test_tokenizer_by_id);
    CU_add_test(s, "vLLM's spec_decode_*, latencies, queue_times; SGLang's accept_length", test_their_result_keys);
}
