/* test_serve_lora.c — LoRA adapters over the HTTP API: the adapter named
 * as SGLang names it ("BASE:NAME", /generate's lora_path) and as vLLM does
 * ("NAME") gives the same greedy tokens, which differ from the base's;
 * /v1/models lists the adapters with their folder and base; SGLang's and
 * vLLM's load and unload endpoints answer in their own shapes, refuse
 * duplicates and unknown names; /metrics carries vLLM's
 * vllm:lora_requests_info and a count per adapter; an unknown model is a
 * 404 naming it. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "engine/model/peft.h"
#include "test_serve_util.h"
#include "testutil.h"

static char dir_a[256], dir_b[256];

static void adapters(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    tu_tmp_path("srv_lora_a", dir_a, sizeof dir_a);
    tu_tmp_path("srv_lora_b", dir_b, sizeof dir_b);
    CU_ASSERT_FATAL(model_lora_save_seeded(dir_a, &c, 8, 16, LORA_ALL_MODULES, 21, ST_F32, &e) == 0);
    CU_ASSERT_FATAL(model_lora_save_seeded(dir_b, &c, 4, 8, LORA_ALL_MODULES, 22, ST_F32, &e) == 0);
}

/* The ids a completion or /generate returned, as text. */
static char *ids(server *s, const char *path, const char *body, long want)
{
    ts_resp r = ts_post(s, path, body);
    if (r.status != want) printf("\n    %s %s: HTTP %ld %s\n", path, body, r.status, r.body);
    CU_ASSERT_EQUAL(r.status, want);
    json_t *v = NULL;
    if (r.json && !strcmp(path, "/generate")) v = json_object_get(r.json, "output_ids");
    else if (r.json) v = json_object_get(json_array_get(json_object_get(r.json, "choices"), 0), "token_ids");
    char *out = v ? json_dumps(v, JSON_COMPACT) : strdup(r.body);
    ts_resp_free(&r);
    return out;
}

static void test_api(void)
{
    adapters();
    model *m = eh_tiny_model();
    server_config c = ts_config(m);
    char paths[600];
    snprintf(paths, sizeof paths, "a=%s", dir_a);
    c.engine.lora_paths = paths;
    server *s = ts_start(&c);

    const char *tail = "\"prompt\": [1, 2, 3, 4, 5, 6, 7], \"max_tokens\": 6, \"temperature\": 0, \"return_token_ids\": true}";
    char body[400];
    snprintf(body, sizeof body, "{\"model\": \"tiny-llama\", %s", tail);
    char *base = ids(s, "/v1/completions", body, 200);
    snprintf(body, sizeof body, "{\"model\": \"tiny-llama:a\", %s", tail);
    char *sg = ids(s, "/v1/completions", body, 200);
    snprintf(body, sizeof body, "{\"model\": \"a\", %s", tail);
    char *vl = ids(s, "/v1/completions", body, 200);
    char *gen = ids(s, "/generate",
                    "{\"input_ids\": [1, 2, 3, 4, 5, 6, 7], \"lora_path\": \"a\", "
                    "\"sampling_params\": {\"max_new_tokens\": 6, \"temperature\": 0}}",
                    200);
    CU_ASSERT_STRING_EQUAL(sg, vl);
    CU_ASSERT_STRING_EQUAL(sg, gen);
    CU_ASSERT_STRING_NOT_EQUAL(sg, base);
    free(base), free(sg), free(vl), free(gen);

    snprintf(body, sizeof body, "{\"model\": \"a\", %s", tail);
    ts_resp r = ts_post(s, "/v1/completions", body);
    CU_ASSERT(r.json && !strcmp(json_string_value(json_object_get(r.json, "model")), "a"));   /* named as asked */
    ts_resp_free(&r);
    snprintf(body, sizeof body, "{\"model\": \"b\", %s", tail);
    r = ts_post(s, "/v1/completions", body);
    CU_ASSERT_EQUAL(r.status, 404);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "model_not_found"));
    ts_resp_free(&r);

    /* load b (SGLang's shape), again (refused), through vLLM's path (text) */
    char load[700];
    snprintf(load, sizeof load, "{\"lora_name\": \"b\", \"lora_path\": \"%s\"}", dir_b);
    r = ts_post(s, "/load_lora_adapter", load);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT(r.json && json_is_true(json_object_get(r.json, "success")) &&
              json_object_get(json_object_get(r.json, "loaded_adapters"), "b"));
    ts_resp_free(&r);
    r = ts_post(s, "/v1/load_lora_adapter", load);
    CU_ASSERT_EQUAL(r.status, 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "already served"));
    ts_resp_free(&r);
    r = ts_post(s, "/load_lora_adapter", "{\"lora_name\": \"c\", \"lora_path\": \"/nonexistent/adapter\"}");
    CU_ASSERT_EQUAL(r.status, 400);
    CU_ASSERT(r.json && json_is_false(json_object_get(r.json, "success")) &&
              strstr(json_string_value(json_object_get(r.json, "error_message")), "adapter_config.json"));
    ts_resp_free(&r);
    r = ts_post(s, "/v1/load_lora_adapter", "{\"lora_name\": \"c\"}");
    CU_ASSERT_EQUAL(r.status, 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "lora_path"));
    ts_resp_free(&r);
    snprintf(body, sizeof body, "{\"model\": \"b\", %s", tail);
    char *b1 = ids(s, "/v1/completions", body, 200);
    CU_ASSERT_PTR_NULL(strstr(b1, "error"));
    free(b1);

    r = ts_request(s, "GET", "/v1/models", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 200);
    json_t *data = r.json ? json_object_get(r.json, "data") : NULL;
    CU_ASSERT_EQUAL_FATAL(json_array_size(data), 3);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(data, 1), "id")), "a");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(data, 2), "root")), dir_b);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(data, 2), "parent")), "tiny-llama");
    ts_resp_free(&r);

    r = ts_request(s, "GET", "/metrics", NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "vllm:lora_requests_info{max_lora=\"8\",running_lora_adapters=\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "rehearse:lora_requests_running{model_name=\"tiny-llama\",lora_name=\"b\"} 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "rehearse:lora_requests_waiting{model_name=\"tiny-llama\",lora_name=\"a\"} 0"));
    ts_resp_free(&r);

    r = ts_post(s, "/v1/unload_lora_adapter", "{\"lora_name\": \"b\"}");
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_STRING_EQUAL(r.body, "Success: LoRA adapter 'b' removed successfully");
    ts_resp_free(&r);
    r = ts_post(s, "/unload_lora_adapter", "{\"lora_name\": \"b\"}");
    CU_ASSERT_EQUAL(r.status, 404);
    CU_ASSERT(r.json && json_is_false(json_object_get(r.json, "success")));
    ts_resp_free(&r);
    r = ts_request(s, "GET", "/v1/models", NULL, NULL);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(r.json, "data")), 2);
    ts_resp_free(&r);
    ts_stop(s);
    model_free(m);
}

/* rehearse bench replays a trace whose requests name adapters lora-1 and
 * lora-2, as vLLM's client names them (the bare name) and as SGLang's does
 * (BASE:NAME, /generate's lora_path): the server counts each adapter's
 * requests, and together they are every request the client sent. */
static void test_bench_sends_adapters(void)
{
    adapters();
    char trace[256];
    tu_tmp_path("srv_lora_trace.rhtr", trace, sizeof trace);
    char cmd[1400], out[4096];
    snprintf(cmd, sizeof cmd, "%s trace synth --requests 24 --rate 200 --input-len 12 --output-len 3 "
             "--adapters 2 --adapter-zipf 0 --block-size 0 -o %s", tu_bin(), trace);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, out, sizeof out), 0);
    model *m = eh_tiny_model();
    server_config c = ts_config(m);
    char paths[600];
    snprintf(paths, sizeof paths, "lora-1=%s,lora-2=%s", dir_a, dir_b);
    c.engine.lora_paths = paths;
    server *s = ts_start(&c);
    const char *backends[3] = {"vllm", "sglang-oai", "sglang"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s bench --base-url %s --backend %s --model tiny-llama --dataset trace "
                 "--dataset-path %s --vocab-size 256 --num-warmups 0 2>&1", tu_bin(), server_url(s), backends[i], trace);
        int rc = tu_run(cmd, out, sizeof out);
        if (rc) printf("\n  %s\n", out);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "Successful requests:                     24"));
    }
    ts_resp r = ts_request(s, "GET", "/metrics", NULL, NULL);
    const char *a = strstr(r.body, "rehearse:lora_requests_total{model_name=\"tiny-llama\",lora_name=\"lora-1\"} ");
    const char *b = strstr(r.body, "rehearse:lora_requests_total{model_name=\"tiny-llama\",lora_name=\"lora-2\"} ");
    CU_ASSERT_FATAL(a && b);
    long na = strtol(strchr(a, '}') + 2, NULL, 10), nb = strtol(strchr(b, '}') + 2, NULL, 10);
    CU_ASSERT_EQUAL(na + nb, 3 * 25);   /* each run's 24, and the test request the client sends first (item 0) */
    CU_ASSERT(na > 0 && nb > 0);
    ts_resp_free(&r);
    ts_stop(s);
    model_free(m);
}

void register_test_serve_lora(void)
{
    CU_pSuite s = CU_add_suite("serve_lora", NULL, NULL);
    CU_add_test(s, "adapters by model name and lora_path, /v1/models, load and unload, /metrics", test_api);
    CU_add_test(s, "rehearse bench sends a trace's adapters as vLLM's and SGLang's clients do", test_bench_sends_adapters);
}
