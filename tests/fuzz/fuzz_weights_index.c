/* fuzz_weights_index.c — a sharded model's model.safetensors.index.json is
 * outside input: any bytes either load the model or fail with a message
 * naming the index, whatever its weight_map names (missing files, the
 * directory itself, "..", config.json, the same shard twice). A loaded model
 * has every weight the config needs. The shards are a small model saved
 * once, split in two files, in a directory of this process's own. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[128], index_path[192];
static model_config cfg;

static void setup(void)
{
    rh_err e;
    if (model_preset("tiny-llama", &cfg, &e)) abort();
    cfg.n_layers = 1;
    cfg.hidden_size = 16;
    cfg.intermediate_size = 32;
    cfg.vocab_size = 32;
    cfg.n_heads = 2;
    cfg.n_kv_heads = 1;
    cfg.head_dim = 8;
    cfg.bos_token_id = 1;
    cfg.eos_token_id = 2;
    snprintf(dir, sizeof dir, "/tmp/fuzz-index-%d", (int)getpid());
    mkdir(dir, 0755);
    model *m = model_new_dummy(&cfg, 1, 0, &e);
    if (!m || model_save(m, dir, ST_BF16, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        abort();
    }
    model_free(m);
    /* The same file under two shard names: weight_map may name either. */
    char a[256], b[256];
    snprintf(a, sizeof a, "%s/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/model-00001-of-00002.safetensors", dir);
    if (rename(a, b)) abort();
    snprintf(a, sizeof a, "%s/model-00002-of-00002.safetensors", dir);
    if (link(b, a)) abort();
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) setup();
    FILE *f = fopen(index_path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    rh_err e = {{0}};
    model *m = model_load(index_path, &cfg, 0, &e);
    if (!m) {
        if (!e.msg[0]) abort();
        return 0;
    }
    if (!m->w.embed || !m->w.final_norm || !m->w.lm_head) abort();
    for (uint32_t i = 0; i < cfg.n_layers; i++) {
        const model_layer *l = &m->w.layers[i];
        if (!l->attn_norm || !l->wq || !l->wk || !l->wv || !l->wo || !l->ffn_norm || !l->w_gate || !l->w_up ||
            !l->w_down)
            abort();
    }
    model_free(m);
    return 0;
}
