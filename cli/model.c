/* model.c — `rehearse model`: inspect a model's shape, generate text with it,
 * save seeded weights as a Hugging Face directory. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/generate.h"
#include "engine/model/tokenizer.h"
#include "util/args.h"
#include "util/mem.h"
#include "engine/model/peft.h"
#include "util/progress.h"

static const char *usage_text =
    "usage: rehearse model info MODEL [--json]\n"
    "       rehearse model list\n"
    "       rehearse model generate MODEL [--prompt TEXT] [-n N] [sampling and engine flags]\n"
    "       rehearse model save MODEL -o DIR [--dtype f32|f16|bf16] [--weight-seed S]\n"
    "       rehearse model save-lora MODEL -o DIR [--rank R] [--alpha A] [--target-modules LIST]\n"
    "                                [--dtype f32|f16|bf16] [--seed S]\n"
    "                            a seeded LoRA adapter for MODEL in PEFT's format (adapter_config.json,\n"
    "                            adapter_model.safetensors): rank 8, alpha 16, all seven modules by default\n"
    "\n"
    "MODEL is a preset name, a config.json, or a Hugging Face model directory\n"
    "(config.json + model.safetensors or model.safetensors.index.json).\n"
    "Presets: %s.\n"
    "\n"
    "generate flags:\n"
    "  --prompt TEXT        prompt text (default \"Once upon a time\")\n"
    "  -n, --max-new-tokens N   tokens to generate (default 32)\n"
    "  --temperature T      0 is greedy (default 0)\n"
    "  --top-p P            nucleus mass in (0, 1] (default 1)\n"
    "  --top-k K            keep the K most likely; 0 is off (default 0)\n"
    "  --seed S             the request's sampling stream (default 0)\n"
    "  --chunked-prefill-size N  prefill the prompt N tokens a step (default: all at once)\n"
    "  --page-size N        KV page size in tokens (default 16)\n"
    "  --weights PATH       safetensors file, index or directory (default: the MODEL\n"
    "                       directory's weights, else seeded dummy weights)\n"
    "  --weight-seed S      seed of the dummy weights (default 0)\n"
    "  --tokenizer PATH     tokenizer.json (default: the MODEL directory's, else bytes)\n"
    "  --ignore-eos         do not stop at the end-of-sequence token\n";

static void usage(FILE *f)
{
    fprintf(f, usage_text, model_preset_names());
}

static int fail(const char *msg)
{
    fprintf(stderr, "rehearse model: %s\n", msg);
    return 1;
}

static const char *rope_name(model_rope_type t)
{
    return t == MODEL_ROPE_LINEAR ? "linear" : t == MODEL_ROPE_LLAMA3 ? "llama3" : "default";
}

static void print_info(const model_config *c, int json)
{
    uint64_t params = model_param_count(c), kv = model_kv_bytes_per_token(c);
    if (json) {
        printf("{\"name\": \"%s\", \"arch\": \"%s\", \"vocab_size\": %u, \"hidden_size\": %u, "
               "\"intermediate_size\": %u, \"num_layers\": %u, \"num_heads\": %u, \"num_kv_heads\": %u, "
               "\"head_dim\": %u, \"context_length\": %u, \"sliding_window\": %u, \"rope_theta\": %g, "
               "\"rope_scaling\": \"%s\", \"tie_word_embeddings\": %s, \"qkv_bias\": %s, \"parameters\": %llu, "
               "\"weight_bytes_f32\": %llu, \"weight_bytes_bf16\": %llu, \"kv_bytes_per_token_f32\": %llu, "
               "\"kv_bytes_per_token_bf16\": %llu}\n",
               c->name, c->arch, c->vocab_size, c->hidden_size, c->intermediate_size, c->n_layers, c->n_heads,
               c->n_kv_heads, c->head_dim, c->max_position, c->sliding_window, c->rope_theta, rope_name(c->rope_type),
               c->tie_embeddings ? "true" : "false", c->qkv_bias ? "true" : "false", (unsigned long long)params,
               (unsigned long long)(params * 4), (unsigned long long)(params * 2), (unsigned long long)kv,
               (unsigned long long)(kv / 2));
        return;
    }
    char a[32], b[32], k1[32], k2[32];
    printf("%s (%s)\n", c->name, c->arch);
    printf("  layers %u, hidden %u, intermediate %u, vocab %u\n", c->n_layers, c->hidden_size, c->intermediate_size,
           c->vocab_size);
    printf("  attention: %u heads, %u KV heads (GQA %u:1), head_dim %u%s%s\n", c->n_heads, c->n_kv_heads,
           c->n_heads / c->n_kv_heads, c->head_dim, c->qkv_bias ? ", QKV bias" : "",
           c->sliding_window ? ", sliding window" : "");
    printf("  context %u, RoPE theta %g (%s scaling), RMSNorm eps %g, %s embeddings\n", c->max_position,
           c->rope_theta, rope_name(c->rope_type), (double)c->rms_norm_eps, c->tie_embeddings ? "tied" : "untied");
    printf("  parameters %llu (%.3f B): weights %s in f32, %s in bf16\n", (unsigned long long)params,
           (double)params / 1e9, rh_fmt_bytes(params * 4, a, sizeof a), rh_fmt_bytes(params * 2, b, sizeof b));
    printf("  KV cache per token: %s in f32, %s in bf16\n", rh_fmt_bytes(kv, k1, sizeof k1),
           rh_fmt_bytes(kv / 2, k2, sizeof k2));
}

static int cmd_info(int argc, char **argv)
{
    rh_args a;
    rh_err e;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    int json = 0;
    const char *n;
    while ((n = rh_args_next(&a))) {
        if (!strcmp(n, "json")) json = 1;
        else return fprintf(stderr, "rehearse model info: unknown flag --%s\n", n), 1;
    }
    if (a.npos != 1) return fail("info needs one MODEL (rehearse model --help)");
    model_config c;
    if (model_config_resolve(a.pos[0], &c, &e)) return fail(e.msg);
    print_info(&c, json);
    return 0;
}

static int cmd_list(void)
{
    char names[512];
    snprintf(names, sizeof names, "%s", model_preset_names());
    for (char *tok = strtok(names, ", "); tok; tok = strtok(NULL, ", ")) {
        model_config c;
        rh_err e;
        if (model_preset(tok, &c, &e)) continue;
        char b[32];
        printf("%-14s %-8s %8.3f B params  %s f32  context %u\n", c.name, c.arch,
               (double)model_param_count(&c) / 1e9, rh_fmt_bytes(model_param_count(&c) * 4, b, sizeof b),
               c.max_position);
    }
    return 0;
}

static int cmd_generate(int argc, char **argv)
{
    rh_args a;
    rh_err e;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    const char *prompt = "Once upon a time", *weights = NULL, *tok_path = NULL, *v;
    unsigned long long max_new = 32, seed = 0, wseed = 0, chunk = 0, page = 16, top_k = 0;
    double temp = 0, top_p = 1;
    int ignore_eos = 0;
    const char *n;
    while ((n = rh_args_next(&a))) {
        if (!strcmp(n, "ignore-eos")) {
            if (rh_args_no_value(&a, &e)) return fail(e.msg);
            ignore_eos = 1;
            continue;
        }
        if (!(v = rh_args_value(&a, &e))) return fail(e.msg);
        int r = 0;
        if (!strcmp(n, "prompt")) prompt = v;
        else if (!strcmp(n, "n") || !strcmp(n, "max-new-tokens")) r = rh_parse_u64(v, "--max-new-tokens", &max_new, &e);
        else if (!strcmp(n, "temperature")) r = rh_parse_double(v, "--temperature", &temp, &e);
        else if (!strcmp(n, "top-p")) r = rh_parse_double(v, "--top-p", &top_p, &e);
        else if (!strcmp(n, "top-k")) r = rh_parse_u64(v, "--top-k", &top_k, &e);
        else if (!strcmp(n, "seed")) r = rh_parse_u64(v, "--seed", &seed, &e);
        else if (!strcmp(n, "weight-seed")) r = rh_parse_u64(v, "--weight-seed", &wseed, &e);
        else if (!strcmp(n, "chunked-prefill-size")) r = rh_parse_u64(v, "--chunked-prefill-size", &chunk, &e);
        else if (!strcmp(n, "page-size")) r = rh_parse_u64(v, "--page-size", &page, &e);
        else if (!strcmp(n, "weights")) weights = v;
        else if (!strcmp(n, "tokenizer")) tok_path = v;
        else return fprintf(stderr, "rehearse model generate: unknown flag --%s\n", n), 1;
        if (r) return fail(e.msg);
    }
    if (a.npos != 1) return fail("generate needs one MODEL (rehearse model --help)");
    if (max_new > (1u << 20) || top_k > UINT32_MAX || chunk > UINT32_MAX || !page || page > (1u << 16))
        return fail("--max-new-tokens, --top-k, --chunked-prefill-size or --page-size is out of range");
    gen_params gp = {{(float)temp, (float)top_p, (uint32_t)top_k}, seed, (uint32_t)chunk, (uint32_t)max_new, -1, NULL};
    if (runner_sampling_check(&gp.sampling, &e)) return fail(e.msg);

    const char *spec = a.pos[0];
    model *m = model_open(spec, weights, wseed, 0, &e);
    if (!m) return fail(e.msg);
    char installed[4400];
    tok_path = tok_path_for(spec, tok_path, m->cfg.vocab_size, installed, sizeof installed);
    tokenizer *tk = tok_path ? tok_load(tok_path, &e) : tok_new_bytes();
    if (!tk) {
        model_free(m);
        return fail(tok_path ? e.msg : "out of memory");
    }
    int rc = 1;
    int32_t *ids = NULL, *out = NULL;
    size_t n_ids = 0;
    runner *r = NULL;
    if (tok_vocab_size(tk) > m->cfg.vocab_size) {
        snprintf(e.msg, sizeof e.msg, "the tokenizer's %u ids do not fit the model's vocabulary of %u",
                 tok_vocab_size(tk), m->cfg.vocab_size);
        goto done;
    }
    if (tok_encode(tk, prompt, strlen(prompt), 1, &ids, &n_ids, &e)) goto done;
    if (!ignore_eos) gp.stop_id = m->cfg.eos_token_id >= 0 ? m->cfg.eos_token_id : tok_eos(tk);
    uint64_t len = n_ids + max_new;
    if (len > m->cfg.max_position) {
        snprintf(e.msg, sizeof e.msg, "%zu prompt tokens + %llu new pass the context length %u", n_ids, max_new,
                 m->cfg.max_position);
        goto done;
    }
    runner_config rcfg = {(uint32_t)page, (uint32_t)((len + page - 1) / page), 0, NULL};
    if (!(r = runner_new(m, &rcfg, &e))) goto done;
    if (!(out = malloc((max_new ? max_new : 1) * sizeof *out))) {
        snprintf(e.msg, sizeof e.msg, "out of memory");
        goto done;
    }
    rh_progress pg;
    rh_progress_begin(&pg, "generating", len);
    gp.progress = &pg;
    double t0 = rh_now();
    int64_t made = gen_run(r, ids, (uint32_t)n_ids, &gp, out, &e);
    rh_progress_end(&pg);
    if (made < 0) goto done;
    double el = rh_now() - t0;
    size_t tl;
    char *text = tok_decode(tk, out, (size_t)made, 1, &tl);
    if (text) {
        fwrite(prompt, 1, strlen(prompt), stdout);
        fwrite(text, 1, tl, stdout);
        putchar('\n');
        free(text);
    }
    fprintf(stderr, "rehearse model: %zu prompt + %lld generated tokens in %.3f s (%.1f tokens/s)\n", n_ids,
            (long long)made, el, el > 0 ? (double)(n_ids + (size_t)made) / el : 0.0);
    rc = 0;
done:
    if (rc) fail(e.msg);
    free(out);
    free(ids);
    runner_free(r);
    model_free(m);
    tok_free(tk);
    return rc;
}

static int cmd_save(int argc, char **argv)
{
    rh_args a;
    rh_err e;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    const char *out = NULL, *v, *n;
    unsigned long long wseed = 0;
    st_dtype dt = ST_F32;
    while ((n = rh_args_next(&a))) {
        if (!(v = rh_args_value(&a, &e))) return fail(e.msg);
        if (!strcmp(n, "o")) out = v;
        else if (!strcmp(n, "weight-seed")) {
            if (rh_parse_u64(v, "--weight-seed", &wseed, &e)) return fail(e.msg);
        } else if (!strcmp(n, "dtype")) {
            if (st_dtype_parse(v, &dt)) return fail("--dtype: expected f32, f16 or bf16");
        } else {
            return fprintf(stderr, "rehearse model save: unknown flag --%s\n", n), 1;
        }
    }
    if (a.npos != 1 || !out) return fail("save needs one MODEL and -o DIR (rehearse model --help)");
    model_config c;
    if (model_config_resolve(a.pos[0], &c, &e)) return fail(e.msg);
    model *m = model_new_dummy(&c, wseed, 0, &e);
    if (!m) return fail(e.msg);
    int r = model_save(m, out, dt, &e);
    model_free(m);
    if (r) return fail(e.msg);
    printf("wrote %s/config.json and %s/model.safetensors (%s)\n", out, out, st_dtype_name(dt));
    return 0;
}

static int cmd_save_lora(int argc, char **argv)
{
    rh_args a;
    rh_err e;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    const char *out = NULL, *v, *n;
    unsigned long long seed = 1, rank = 8;
    double alpha = 0;
    uint32_t targets = LORA_ALL_MODULES;
    st_dtype dt = ST_F32;
    while ((n = rh_args_next(&a))) {
        if (!(v = rh_args_value(&a, &e))) return fail(e.msg);
        if (!strcmp(n, "o")) out = v;
        else if (!strcmp(n, "seed")) {
            if (rh_parse_u64(v, "--seed", &seed, &e)) return fail(e.msg);
        } else if (!strcmp(n, "rank") || !strcmp(n, "r")) {
            if (rh_parse_u64(v, "--rank", &rank, &e)) return fail(e.msg);
            if (rank < 1 || rank > 4096) return fail("--rank: must be 1..4096");
        } else if (!strcmp(n, "alpha") || !strcmp(n, "lora-alpha")) {
            if (rh_parse_double(v, "--alpha", &alpha, &e)) return fail(e.msg);
            if (!(alpha > 0)) return fail("--alpha: must be > 0");
        } else if (!strcmp(n, "target-modules")) {
            if (lora_targets_parse(v, &targets, &e)) return fail(e.msg);
        } else if (!strcmp(n, "dtype")) {
            if (st_dtype_parse(v, &dt)) return fail("--dtype: expected f32, f16 or bf16");
        } else {
            return fprintf(stderr, "rehearse model save-lora: unknown flag --%s\n", n), 1;
        }
    }
    if (a.npos != 1 || !out) return fail("save-lora needs one MODEL and -o DIR (rehearse model --help)");
    model_config c;
    if (model_config_resolve(a.pos[0], &c, &e)) return fail(e.msg);
    if (model_lora_save_seeded(out, &c, (uint32_t)rank, alpha > 0 ? alpha : 2.0 * (double)rank, targets, seed, dt, &e))
        return fail(e.msg);
    printf("wrote %s/adapter_config.json and %s/adapter_model.safetensors (rank %llu, %s)\n", out, out, rank,
           st_dtype_name(dt));
    return 0;
}

int model_main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help") || rh_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(sub, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(sub, "list")) return cmd_list();
    if (!strcmp(sub, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(sub, "save")) return cmd_save(argc - 1, argv + 1);
    if (!strcmp(sub, "save-lora")) return cmd_save_lora(argc - 1, argv + 1);
    fprintf(stderr, "rehearse model: unknown subcommand '%s'\n", sub);
    usage(stderr);
    return 1;
}
