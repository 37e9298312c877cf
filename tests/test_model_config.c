/* test_model_config.c — presets against the published parameter counts,
 * config.json reading against the presets it describes, the writer against
 * the reader, RoPE scaling against its defining properties, and every kind
 * of malformed config.json against a message naming the file and field. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/model/config.h"
#include "testutil.h"

static void test_presets_match_published_sizes(void)
{
    /* Parameter counts as the model cards and transformers report them. */
    const struct { const char *name; unsigned long long params; } known[] = {
        {"llama-2-7b", 6738415616ull},   {"mistral-7b", 7241732096ull}, {"llama-3-8b", 8030261248ull},
        {"llama-3.1-8b", 8030261248ull}, {"qwen2.5-7b", 7615616512ull}, {"llama-3-70b", 70553706496ull},
        {"qwen2.5-72b", 72706203648ull},
    };
    model_config c;
    rh_err e;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        CU_ASSERT_FATAL(model_preset(known[i].name, &c, &e) == 0);
        if (model_param_count(&c) != known[i].params)
            printf("\n  %s: %llu parameters\n", known[i].name, (unsigned long long)model_param_count(&c));
        CU_ASSERT_EQUAL(model_param_count(&c), known[i].params);
    }
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    CU_ASSERT(c.hidden_size >= 256 && c.hidden_size <= 512 && c.n_layers <= 8);
    CU_ASSERT(c.vocab_size >= 259);   /* the byte tokenizer's ids fit */
    CU_ASSERT(c.n_kv_heads < c.n_heads);   /* tests exercise GQA */
    CU_ASSERT_FATAL(model_preset("llama-100m", &c, &e) == 0);
    CU_ASSERT(model_param_count(&c) > 95000000ull && model_param_count(&c) < 105000000ull);
    /* Llama-3-8B in f32: 32 layers x 8 KV heads x 128 x 2 (K and V) x 4 bytes. */
    CU_ASSERT_FATAL(model_preset("llama-3-8b", &c, &e) == 0);
    CU_ASSERT_EQUAL(model_kv_bytes_per_token(&c), 32ull * 8 * 128 * 2 * 4);

    CU_ASSERT_EQUAL(model_preset("gpt-5", &c, &e), -1);
    CU_ASSERT(strstr(e.msg, "gpt-5") && strstr(e.msg, "tiny-llama"));
}

static const char *write_tmp(const char *name, const char *text, char *buf, size_t n)
{
    tu_tmp_path(name, buf, n);
    CU_ASSERT_FATAL(tu_write_file(buf, text, strlen(text)) == 0);
    return buf;
}

/* A config.json shaped like Meta's Llama-3.1-8B one reads back as the preset;
 * without _name_or_path a config is named by its model_type. */
static void test_reads_hugging_face_configs(void)
{
    const char *llama31 =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
        " \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009], \"hidden_act\": \"silu\","
        " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336,"
        " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
        " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
        " \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0,"
        " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192,"
        " \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false,"
        " \"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"vocab_size\": 128256}";
    char path[512];
    model_config c, p;
    rh_err e;
    CU_ASSERT_FATAL(model_config_load(write_tmp("llama31.json", llama31, path, sizeof path), &c, &e) == 0);
    CU_ASSERT_FATAL(model_preset("llama-3.1-8b", &p, &e) == 0);
    CU_ASSERT_EQUAL(model_param_count(&c), model_param_count(&p));
    CU_ASSERT_EQUAL(c.rope_type, MODEL_ROPE_LLAMA3);
    CU_ASSERT_EQUAL(c.rope_original_max_position, 8192);
    CU_ASSERT_EQUAL(c.eos_token_id, 128001);
    CU_ASSERT_EQUAL(c.n_kv_heads, 8);
    CU_ASSERT_EQUAL(c.head_dim, 128);
    CU_ASSERT_FALSE(c.qkv_bias);
    CU_ASSERT_STRING_EQUAL(c.name, "llama");

    const char *qwen =
        "{\"model_type\": \"qwen2\", \"hidden_size\": 3584, \"intermediate_size\": 18944, \"num_hidden_layers\": 28,"
        " \"num_attention_heads\": 28, \"num_key_value_heads\": 4, \"vocab_size\": 152064,"
        " \"max_position_embeddings\": 32768, \"rope_theta\": 1000000.0, \"rms_norm_eps\": 1e-06,"
        " \"sliding_window\": 131072, \"use_sliding_window\": false, \"tie_word_embeddings\": false,"
        " \"bos_token_id\": 151643, \"eos_token_id\": 151643, \"rope_scaling\": null,"
        " \"_name_or_path\": \"Qwen/Qwen2.5-7B\"}";
    CU_ASSERT_FATAL(model_config_load(write_tmp("qwen.json", qwen, path, sizeof path), &c, &e) == 0);
    CU_ASSERT_FATAL(model_preset("qwen2.5-7b", &p, &e) == 0);
    CU_ASSERT_EQUAL(model_param_count(&c), model_param_count(&p));
    CU_ASSERT(c.qkv_bias && !c.o_bias);
    CU_ASSERT_EQUAL(c.sliding_window, 0);   /* use_sliding_window false */
    CU_ASSERT_STRING_EQUAL(c.name, "Qwen2.5-7B");

    const char *mistral =
        "{\"model_type\": \"mistral\", \"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 32,"
        " \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"vocab_size\": 32000, \"sliding_window\": 4096,"
        " \"max_position_embeddings\": 32768, \"rope_theta\": 10000.0, \"rms_norm_eps\": 1e-05}";
    CU_ASSERT_FATAL(model_config_load(write_tmp("mistral.json", mistral, path, sizeof path), &c, &e) == 0);
    CU_ASSERT_FATAL(model_preset("mistral-7b", &p, &e) == 0);
    CU_ASSERT_EQUAL(model_param_count(&c), model_param_count(&p));
    CU_ASSERT_EQUAL(c.sliding_window, 4096);
}

/* Every preset written as config.json reads back with the same fields. */
static void test_writer_and_reader_agree(void)
{
    const char *names[] = {"tiny-llama", "llama-100m", "mistral-7b", "llama-3.1-8b", "qwen2.5-7b", "llama-3-70b"};
    char path[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        model_config a, b;
        rh_err e;
        CU_ASSERT_FATAL(model_preset(names[i], &a, &e) == 0);
        tu_tmp_path("roundtrip-config.json", path, sizeof path);
        CU_ASSERT_FATAL(model_config_save(&a, path, &e) == 0);
        CU_ASSERT_FATAL(model_config_resolve(path, &b, &e) == 0);
        CU_ASSERT(memcmp(&a, &b, sizeof a) == 0);
        if (memcmp(&a, &b, sizeof a)) printf("\n  %s differs after a round trip\n", names[i]);
    }
}

/* Llama 3.1's scaling: short wavelengths kept, long ones slowed by the
 * factor, the band between blended monotonically. */
static void test_llama3_rope_scaling(void)
{
    model_config c, plain;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("llama-3.1-8b", &c, &e) == 0);
    plain = c;
    plain.rope_type = MODEL_ROPE_DEFAULT;
    float s[64], p[64];
    model_rope_inv_freq(&c, s);
    model_rope_inv_freq(&plain, p);
    int kept = 0, slowed = 0, blended = 0;
    for (int i = 0; i < 64; i++) {
        CU_ASSERT_DOUBLE_EQUAL(p[i], 1.0 / pow(500000.0, 2.0 * i / 128), 1e-6 * p[i]);
        double wavelen = 2 * M_PI / p[i];
        if (wavelen < 8192.0 / 4) kept += s[i] == p[i];
        else if (wavelen > 8192.0 / 1) slowed += fabs(s[i] - p[i] / 8) <= 1e-6 * p[i];
        else blended += s[i] < p[i] && s[i] > p[i] / 8;
        if (i) CU_ASSERT(s[i] < s[i - 1]);
    }
    CU_ASSERT_EQUAL(kept + slowed + blended, 64);
    CU_ASSERT(kept > 0 && slowed > 0 && blended > 0);
    c.rope_type = MODEL_ROPE_LINEAR;
    model_rope_inv_freq(&c, s);
    for (int i = 0; i < 64; i++) CU_ASSERT_DOUBLE_EQUAL(s[i], p[i] / 8, 1e-6 * p[i]);
}

static void expect_bad(const char *json, const char *needle)
{
    char path[512];
    model_config c;
    rh_err e = {{0}};
    write_tmp("bad-config.json", json, path, sizeof path);
    CU_ASSERT_EQUAL(model_config_load(path, &c, &e), -1);
    int ok = strstr(e.msg, needle) && strstr(e.msg, "bad-config.json");
    if (!ok) printf("\n  expected '%s' in: %s\n", needle, e.msg);
    CU_ASSERT(ok);
}

#define BASE "\"model_type\": \"llama\", \"vocab_size\": 512, \"num_hidden_layers\": 2, \"intermediate_size\": 64, "

static void test_malformed_configs(void)
{
    expect_bad("{\"model_type\": \"llama\",", ":1:");                       /* truncated JSON: line:column */
    expect_bad("[1, 2]", "expected a JSON object");
    expect_bad("{\"hidden_size\": 64}", "'model_type' is missing");
    expect_bad("{\"model_type\": \"gpt2\"}", "'model_type': 'gpt2'");
    expect_bad("{" BASE "\"num_attention_heads\": 4}", "'hidden_size' is missing");
    expect_bad("{" BASE "\"hidden_size\": \"64\", \"num_attention_heads\": 4}", "'hidden_size': expected an integer");
    expect_bad("{" BASE "\"hidden_size\": -64, \"num_attention_heads\": 4}", "'hidden_size'");
    expect_bad("{" BASE "\"hidden_size\": 64.5, \"num_attention_heads\": 4}", "'hidden_size'");
    expect_bad("{" BASE "\"hidden_size\": 64, \"num_attention_heads\": 5}", "'num_attention_heads'");
    expect_bad("{" BASE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"num_key_value_heads\": 3}",
               "'num_key_value_heads'");
    expect_bad("{" BASE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"num_key_value_heads\": 0}",
               "'num_key_value_heads'");
    expect_bad("{" BASE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"hidden_act\": \"gelu\"}", "'hidden_act'");
    expect_bad("{" BASE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"rms_norm_eps\": 0}", "'rms_norm_eps'");
    expect_bad("{" BASE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"rope_theta\": \"big\"}", "'rope_theta'");
    expect_bad("{" BASE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": \"yarn\", "
               "\"factor\": 4}}",
               "'rope_scaling.rope_type': 'yarn'");
    expect_bad("{" BASE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": \"llama3\", "
               "\"factor\": 8}}",
               "low_freq_factor");
    expect_bad("{" BASE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"tie_word_embeddings\": 1}",
               "'tie_word_embeddings'");
    expect_bad("{" BASE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"eos_token_id\": 9999}", "'eos_token_id'");
    expect_bad("{" BASE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"head_dim\": 15}", "'head_dim'");
    expect_bad("{\"model_type\": \"llama\", \"vocab_size\": 99999999999, \"num_hidden_layers\": 2, "
               "\"intermediate_size\": 64, \"hidden_size\": 64, \"num_attention_heads\": 4}",
               "'vocab_size'");
    expect_bad("{" BASE "\"hidden_size\": 64, \"hidden_size\": 64, \"num_attention_heads\": 4}", "duplicate");

    model_config c;
    rh_err e;
    CU_ASSERT_EQUAL(model_config_resolve("no/such/config.json", &c, &e), -1);
    CU_ASSERT(strstr(e.msg, "no/such/config.json") != NULL);
}

/* The CLI front: info on a preset, and a malformed file is exit 1 with the message. */
static void test_model_cli(void)
{
    char out[4096], cmd[1024], path[512];
    snprintf(cmd, sizeof cmd, "%s model info llama-3-8b --json", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "\"parameters\": 8030261248") != NULL);
    write_tmp("cli-bad.json", "{\"model_type\": \"llama\"}", path, sizeof path);
    snprintf(cmd, sizeof cmd, "%s model info %s", tu_bin(), path);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
    CU_ASSERT(strstr(out, "cli-bad.json") && strstr(out, "'vocab_size' is missing"));
    snprintf(cmd, sizeof cmd, "%s model generate tiny-llama --prompt 'abc' -n 5 --ignore-eos", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT(strstr(out, "4 prompt + 5 generated tokens") != NULL);   /* BOS + 3 bytes */
}

void register_test_model_config(void)
{
    CU_pSuite s = CU_add_suite("model_config", NULL, NULL);
    CU_add_test(s, "presets match the published parameter counts", test_presets_match_published_sizes);
    CU_add_test(s, "Hugging Face config.json files read as their presets", test_reads_hugging_face_configs);
    CU_add_test(s, "config writer and reader agree", test_writer_and_reader_agree);
    CU_add_test(s, "llama3 and linear RoPE scaling", test_llama3_rope_scaling);
    CU_add_test(s, "malformed config.json names file and field", test_malformed_configs);
    CU_add_test(s, "rehearse model info and generate", test_model_cli);
}
