/* test_compat.c — rehearse serve as other projects' clients see it: the
 * official OpenAI Node SDK (tests/compat/openai_sdk.cjs: models,
 * completions, chat, streaming with usage, stop, seed, logprobs, n, errors)
 * and the request bodies vLLM's and SGLang's benchmark clients send, written
 * from their documented shapes, replayed against /v1/completions,
 * /v1/chat/completions and /generate. Without node or the SDK (installed by
 * `make node-deps` into build/node) the SDK test says so and skips. */
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_serve_util.h"
#include "testutil.h"

static ts_shared shared;

static server *the_server(void)
{
    return ts_shared_server(&shared, NULL);
}

static bool have_node(void)
{
    char out[256];
    return tu_run("node --version", out, sizeof out) == 0;
}

static void test_openai_node_sdk(void)
{
    const char *mods = getenv("REHEARSE_NODE_MODULES");
    char pkg[1024];
    snprintf(pkg, sizeof pkg, "%s/openai/package.json", mods ? mods : "build/node/node_modules");
    struct stat st;
    if (!have_node() || stat(pkg, &st) != 0) {
        printf("\n  skipped: %s (make node-deps installs the OpenAI SDK when node and npm are there) ",
               have_node() ? "the OpenAI Node SDK is not installed" : "node is not installed");
        return;
    }
    char dir[PATH_MAX], cmd[PATH_MAX + 512], out[16384];
    if (!realpath(pkg, dir)) {   /* absolute: node resolves a bare path as a package name */
        printf("\n  skipped: %s cannot be resolved ", pkg);
        return;
    }
    *strrchr(dir, '/') = '\0';   /* .../node_modules/openai */
    *strrchr(dir, '/') = '\0';   /* .../node_modules */
    snprintf(cmd, sizeof cmd, "node tests/compat/openai_sdk.cjs '%s' '%s' tiny-llama", dir, server_url(the_server()));
    int rc = tu_run(cmd, out, sizeof out);
    if (rc) printf("\n%s\n", out);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(strstr(out, "checks passed, 0 failed") != NULL);
}

/* A streamed body: 200, content, and a usage of `want` completion tokens
 * (meta_info's for /generate). */
static void replay(const char *path, const char *body, long want)
{
    ts_stream s = ts_stream_at(server_url(the_server()), path, body, 0, NULL);
    size_t i;
    json_t *ev;
    long tokens = -1;
    int content = 0;
    json_array_foreach(s.events, i, ev)
    {
        json_t *u = json_object_get(ev, "usage");
        if (json_is_object(u)) tokens = (long)json_integer_value(json_object_get(u, "completion_tokens"));
        json_t *m = json_object_get(ev, "meta_info");
        if (json_is_object(m)) tokens = (long)json_integer_value(json_object_get(m, "completion_tokens"));
        json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        const char *t = json_string_value(json_object_get(ch, "text"));
        const char *d = json_string_value(json_object_get(json_object_get(ch, "delta"), "content"));
        const char *g = json_string_value(json_object_get(ev, "text"));
        content += (t && *t) || (d && *d) || (g && *g);
    }
    int ok = s.status == 200 && s.done && !s.bad && content > 0 && tokens == want;
    if (!ok) printf("\n    %s %s: HTTP %ld, %d content events, %ld tokens\n", path, body, s.status, content, tokens);
    CU_ASSERT(ok);
    json_decref(s.events);
}

static void test_benchmark_client_bodies(void)
{
    /* vLLM's benchmark client, completions (backend vllm/openai): a text
     * prompt, repetition_penalty 1, logprobs null, ignore_eos false. */
    replay("/v1/completions",
           "{\"model\": \"tiny-llama\", \"prompt\": \"The quick brown fox\", \"temperature\": 0.0, "
           "\"repetition_penalty\": 1.0, \"max_tokens\": 12, \"logprobs\": null, \"stream\": true, "
           "\"stream_options\": {\"include_usage\": true}, \"ignore_eos\": true}",
           12);
    /* ... and chat (backend openai-chat): content as text parts,
     * max_completion_tokens. */
    replay("/v1/chat/completions",
           "{\"model\": \"tiny-llama\", \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
           "\"text\": \"Tell me a story\"}]}], \"temperature\": 0.0, \"max_completion_tokens\": 9, \"stream\": true, "
           "\"stream_options\": {\"include_usage\": true}, \"ignore_eos\": true}",
           9);
    /* SGLang's, backend sglang-oai: best_of 1 among them. */
    replay("/v1/completions",
           "{\"model\": \"tiny-llama\", \"prompt\": [11, 22, 33, 44, 55], \"temperature\": 0.0, \"best_of\": 1, "
           "\"max_tokens\": 7, \"stream\": true, \"ignore_eos\": true, \"stream_options\": {\"include_usage\": true}}",
           7);
    /* ... and backend sglang: /generate with input_ids, lora_path null,
     * return_logprob false, logprob_start_len -1. */
    replay("/generate",
           "{\"input_ids\": [11, 22, 33, 44, 55], \"sampling_params\": {\"temperature\": 0.0, \"max_new_tokens\": 5, "
           "\"ignore_eos\": true}, \"stream\": true, \"lora_path\": null, \"return_logprob\": false, "
           "\"logprob_start_len\": -1}",
           5);
}

static int cleanup(void)
{
    return ts_shared_stop(&shared);
}

void register_test_compat(void)
{
    CU_pSuite s = CU_add_suite("compat", NULL, cleanup);
    CU_add_test(s, "the official OpenAI Node SDK drives rehearse serve", test_openai_node_sdk);
    CU_add_test(s, "vLLM's and SGLang's benchmark request bodies, replayed", test_benchmark_client_bodies);
}
