/* test_model_weights.c — weights and the safetensors format.
 *
 * Half conversions against the definition of nearest rounding; safetensors
 * written and read back; a dummy model saved and loaded (one file and
 * sharded) computing bit-identical logits to the original; bf16 weights equal
 * to the rounded originals; the parameter count against the tensors actually
 * stored; and files with a missing tensor, a wrong shape or dtype, or a
 * broken header rejected with a message naming the file and tensor. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/runner.h"
#include "testutil.h"
#include "util/half.h"

static uint64_t rng = 4242;

static float frand(void)
{
    return (float)(rh_splitmix_unit(&rng) * 2.0 - 1.0);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- half precision --------------------------------------------------- */

/* |value(h) - x| is minimal among h and its neighbours, ties to even. */
static int is_nearest(float x, uint16_t h, float (*to32)(uint16_t))
{
    double v = to32(h), err = fabs(v - x);
    for (int d = -1; d <= 1; d += 2) {
        uint16_t nb = (uint16_t)(h + d);
        if ((nb & 0x7fff) == 0x7fff) continue;
        double nv = to32(nb);
        if (isnan(nv) || ((nb ^ h) & 0x8000)) continue;
        double ne = fabs(nv - x);
        if (ne < err || (ne == err && (nb & 1) == 0 && (h & 1))) return 0;
    }
    return 1;
}

static void test_half_conversions(void)
{
    /* Every finite 16-bit pattern survives a trip through f32. */
    int bad_f16 = 0, bad_bf16 = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) != 0x7c00 && rh_f32_to_f16(rh_f16_to_f32((uint16_t)h)) != h) bad_f16++;
        if ((h & 0x7f80) != 0x7f80 && rh_f32_to_bf16(rh_bf16_to_f32((uint16_t)h)) != h) bad_bf16++;
    }
    CU_ASSERT_EQUAL(bad_f16, 0);
    CU_ASSERT_EQUAL(bad_bf16, 0);
    CU_ASSERT_EQUAL(rh_f16_to_f32(0x3c00), 1.0f);
    CU_ASSERT_EQUAL(rh_f16_to_f32(0x0001), ldexpf(1, -24));   /* smallest subnormal */
    CU_ASSERT_EQUAL(rh_f32_to_f16(65520.0f), 0x7c00);          /* rounds up to infinity */
    CU_ASSERT(isnan(rh_f16_to_f32(rh_f32_to_f16(NAN))));
    CU_ASSERT(isnan(rh_bf16_to_f32(rh_f32_to_bf16(NAN))));
    /* Random values across the ranges round to the nearest representable. */
    int near16 = 1, near_bf = 1;
    for (int i = 0; i < 20000; i++) {
        float x = ldexpf(frand(), (int)(rh_splitmix_unit(&rng) * 40) - 26);
        near16 &= is_nearest(x, rh_f32_to_f16(x), rh_f16_to_f32);
        near_bf &= is_nearest(x, rh_f32_to_bf16(x), rh_bf16_to_f32);
    }
    CU_ASSERT(near16);
    CU_ASSERT(near_bf);
}

/* ---- safetensors ------------------------------------------------------ */

static void test_safetensors_round_trip(void)
{
    float a[6], b[35], c[1] = {3.25f};
    for (int i = 0; i < 6; i++) a[i] = frand() * 100;
    for (int i = 0; i < 35; i++) b[i] = frand();
    st_out outs[4] = {
        {"a.f32", ST_F32, 2, {2, 3}, a},
        {"b.f16", ST_F16, 3, {5, 1, 7}, b},
        {"b.bf16", ST_BF16, 1, {35}, b},
        {"scalar", ST_F32, 0, {0}, c},
    };
    char path[512];
    rh_err e;
    tu_tmp_path("round.safetensors", path, sizeof path);
    CU_ASSERT_FATAL(st_write(path, outs, 4, &e) == 0);
    st_file *f = st_open(path, &e);
    CU_ASSERT_FATAL(f != NULL);
    CU_ASSERT_EQUAL(f->n, 4);
    float got[35];
    for (int i = 0; i < 4; i++) {
        const st_tensor *t = st_find(f, outs[i].name);
        CU_ASSERT_FATAL(t != NULL);
        CU_ASSERT_EQUAL(t->dtype, outs[i].dtype);
        CU_ASSERT_EQUAL(t->ndim, outs[i].ndim);
        uint64_t numel = 1;
        for (uint32_t d = 0; d < t->ndim; d++) {
            CU_ASSERT_EQUAL(t->shape[d], outs[i].shape[d]);
            numel *= outs[i].shape[d];
        }
        CU_ASSERT_EQUAL(t->numel, numel);
        CU_ASSERT_FATAL(st_read_f32(t, got) == 0);
        for (uint64_t k = 0; k < numel; k++) {
            float want = outs[i].data[k];
            if (t->dtype == ST_F16) want = rh_f16_to_f32(rh_f32_to_f16(want));
            if (t->dtype == ST_BF16) want = rh_bf16_to_f32(rh_f32_to_bf16(want));
            CU_ASSERT_EQUAL(f32_bits(got[k]), f32_bits(want));
        }
    }
    CU_ASSERT_PTR_NULL(st_find(f, "nope"));
    st_close(f);
}

static void write_raw(const char *path, const char *header, size_t data_len)
{
    size_t hl = strlen(header);
    FILE *fp = fopen(path, "wb");
    for (int i = 0; i < 8; i++) fputc((int)((uint64_t)hl >> (8 * i)) & 0xff, fp);
    fwrite(header, 1, hl, fp);
    for (size_t i = 0; i < data_len; i++) fputc(0, fp);
    fclose(fp);
}

static void expect_open_error(const char *header, size_t data_len, const char *needle)
{
    char path[512];
    rh_err e = {{0}};
    tu_tmp_path("bad.safetensors", path, sizeof path);
    write_raw(path, header, data_len);
    CU_ASSERT_PTR_NULL(st_open(path, &e));
    int ok = strstr(e.msg, needle) && strstr(e.msg, "bad.safetensors");
    if (!ok) printf("\n  expected '%s' in: %s\n", needle, e.msg);
    CU_ASSERT(ok);
}

static void test_safetensors_bad_files(void)
{
    char path[512];
    rh_err e;
    tu_tmp_path("short.safetensors", path, sizeof path);
    tu_write_file(path, "abc", 3);
    CU_ASSERT_PTR_NULL(st_open(path, &e));
    CU_ASSERT(strstr(e.msg, "too short") != NULL);
    tu_write_file(path, "\xff\xff\xff\xff\0\0\0\0{}", 10);
    CU_ASSERT_PTR_NULL(st_open(path, &e));
    CU_ASSERT(strstr(e.msg, "header length") != NULL);
    CU_ASSERT_PTR_NULL(st_open("build/tmp/does-not-exist.safetensors", &e));
    CU_ASSERT(strstr(e.msg, "does-not-exist") != NULL);

    expect_open_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], ", 8, "header");
    expect_open_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4, "'w'");
    expect_open_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8, "the shape needs 12");
    expect_open_error("{\"w\": {\"dtype\": \"F7\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, "unknown dtype 'F7'");
    expect_open_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", 8, "'shape'");
    expect_open_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [2]}}", 8, "'data_offsets'");
    expect_open_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], "
                      "\"data_offsets\": [0, 8]}}",
                      8, "too large");
    expect_open_error("[1, 2]", 0, "expected a JSON object");
}

/* ---- model save and load ---------------------------------------------- */

static model *tiny(uint64_t seed, int untied)
{
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    if (untied) {
        c.tie_embeddings = false;
        c.qkv_bias = c.o_bias = true;
    }
    model *m = model_new_dummy(&c, seed, 0, &e);
    CU_ASSERT_FATAL(m != NULL);
    return m;
}

/* Logits of every position of a fixed 30-token prompt. */
static float *logits_of(const model *m)
{
    runner_config rc = {16, 2, 0, NULL};
    rh_err e;
    runner *r = runner_new(m, &rc, &e);
    CU_ASSERT_FATAL(r != NULL);
    int32_t tok[30];
    for (int i = 0; i < 30; i++) tok[i] = (i * 37 + 11) % 500;
    uint32_t pages[2] = {0, 1};
    runner_seq s = {tok, 30, 0, pages, 2, 30, NULL};
    const float *lg;
    CU_ASSERT_FATAL(runner_forward(r, &s, 1, &lg, &e) == 0);
    size_t bytes = (size_t)30 * m->cfg.vocab_size * sizeof(float);
    float *copy = malloc(bytes);
    memcpy(copy, lg, bytes);
    runner_free(r);
    return copy;
}

static void save_dir(const model *m, const char *name, st_dtype dt, char *dir, size_t n)
{
    rh_err e;
    tu_tmp_path(name, dir, n);
    int rc = model_save(m, dir, dt, &e);
    if (rc) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(rc == 0);
}

static void test_dummy_weights_are_seeded(void)
{
    model *a = tiny(1, 0), *b = tiny(1, 0), *c = tiny(2, 0);
    size_t n = (size_t)a->cfg.vocab_size * a->cfg.hidden_size * sizeof(float);
    CU_ASSERT(memcmp(a->w.embed, b->w.embed, n) == 0);
    CU_ASSERT(memcmp(a->w.layers[3].w_down, b->w.layers[3].w_down, 256 * 768 * sizeof(float)) == 0);
    CU_ASSERT(memcmp(a->w.embed, c->w.embed, n) != 0);
    CU_ASSERT(a->w.lm_head == a->w.embed);   /* tied */
    model_free(a);
    model_free(b);
    model_free(c);
}

static void test_save_load_same_logits(void)
{
    for (int untied = 0; untied < 2; untied++) {
        model *m = tiny(7, untied);
        float *want = logits_of(m);
        char dir[512];
        rh_err e;
        save_dir(m, "model-f32", ST_F32, dir, sizeof dir);
        model *l = model_load(dir, NULL, 0, &e);
        if (!l) printf("\n  %s\n", e.msg);
        CU_ASSERT_FATAL(l != NULL);
        CU_ASSERT_EQUAL(l->cfg.tie_embeddings, m->cfg.tie_embeddings);
        CU_ASSERT_EQUAL(l->arena, NULL);   /* aligned f32: used in place from the mapping */
        float *got = logits_of(l);
        CU_ASSERT(memcmp(got, want, (size_t)30 * m->cfg.vocab_size * sizeof(float)) == 0);

        /* Every parameter the config counts is a stored element, and no more. */
        char file[600];
        snprintf(file, sizeof file, "%s/model.safetensors", dir);
        st_file *f = st_open(file, &e);
        uint64_t stored = 0;
        for (size_t i = 0; i < f->n; i++) stored += f->tensors[i].numel;
        CU_ASSERT_EQUAL(stored, model_param_count(&m->cfg));
        st_close(f);
        free(got);
        model_free(l);
        free(want);
        model_free(m);
    }
}

static void test_bf16_and_f16_weights(void)
{
    model *m = tiny(9, 1);
    size_t n = (size_t)m->cfg.hidden_size * m->cfg.intermediate_size;
    st_dtype dts[2] = {ST_BF16, ST_F16};
    for (int k = 0; k < 2; k++) {
        char dir[512];
        rh_err e;
        save_dir(m, k ? "model-f16" : "model-bf16", dts[k], dir, sizeof dir);
        model *l = model_load(dir, NULL, 0, &e);
        CU_ASSERT_FATAL(l != NULL);
        CU_ASSERT_PTR_NOT_NULL(l->arena);   /* converted */
        int same = 1;
        for (size_t i = 0; i < n; i++) {
            float x = m->w.layers[2].w_up[i];
            float want = k ? rh_f16_to_f32(rh_f32_to_f16(x)) : rh_bf16_to_f32(rh_f32_to_bf16(x));
            same &= f32_bits(l->w.layers[2].w_up[i]) == f32_bits(want);
        }
        CU_ASSERT(same);
        CU_ASSERT_EQUAL(f32_bits(l->w.lm_head[1000]),
                        f32_bits(k ? rh_f16_to_f32(rh_f32_to_f16(m->w.lm_head[1000]))
                                   : rh_bf16_to_f32(rh_f32_to_bf16(m->w.lm_head[1000]))));
        model_free(l);
    }
    model_free(m);
}

/* Copies a safetensors file, dropping one tensor, transposing another's
 * shape, or relabelling one's dtype (same bytes). */
typedef struct edit {
    const char *skip, *reshape, *redtype;
    const char *only_even, *only_odd;   /* shard: keep tensors at even / odd positions */
} edit;

static void rewrite(const char *src, const char *dst, edit ed)
{
    rh_err e;
    st_file *f = st_open(src, &e);
    CU_ASSERT_FATAL(f != NULL);
    json_t *h = json_object();
    uint64_t off = 0;
    size_t kept = 0;
    const st_tensor **order = calloc(f->n, sizeof *order);
    for (size_t i = 0; i < f->n; i++) {
        const st_tensor *t = &f->tensors[i];
        if (ed.skip && !strcmp(t->name, ed.skip)) continue;
        if ((ed.only_even && i % 2) || (ed.only_odd && !(i % 2))) continue;
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->ndim; d++) {
            uint32_t dd = (ed.reshape && !strcmp(t->name, ed.reshape)) ? t->ndim - 1 - d : d;
            json_array_append_new(shape, json_integer((json_int_t)t->shape[dd]));
        }
        const char *dt = (ed.redtype && !strcmp(t->name, ed.redtype)) ? "I32" : t->dtype_name;
        json_object_set_new(h, t->name, json_pack("{s:s,s:o,s:[I,I]}", "dtype", dt, "shape", shape, "data_offsets",
                                                  (json_int_t)off, (json_int_t)(off + t->nbytes)));
        off += t->nbytes;
        order[kept++] = t;
    }
    char *text = json_dumps(h, JSON_COMPACT);
    size_t tl = strlen(text), hl = (tl + 7) / 8 * 8;
    FILE *fp = fopen(dst, "wb");
    for (int i = 0; i < 8; i++) fputc((int)((uint64_t)hl >> (8 * i)) & 0xff, fp);
    fwrite(text, 1, tl, fp);
    for (size_t i = tl; i < hl; i++) fputc(' ', fp);
    for (size_t i = 0; i < kept; i++) fwrite(order[i]->data, 1, order[i]->nbytes, fp);
    fclose(fp);
    free(text);
    free(order);
    json_decref(h);
    st_close(f);
}

static void expect_load_error(const char *dir, edit ed, const char *needle1, const char *needle2)
{
    char src[600], dst[600];
    snprintf(src, sizeof src, "%s/model.safetensors", dir);
    tu_tmp_path("edited.safetensors", dst, sizeof dst);
    rewrite(src, dst, ed);
    model_config c;
    rh_err e = {{0}};
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    CU_ASSERT_PTR_NULL(model_load(dst, &c, 0, &e));
    int ok = strstr(e.msg, needle1) && strstr(e.msg, needle2) && strstr(e.msg, "edited.safetensors");
    if (!ok) printf("\n  expected '%s' and '%s' in: %s\n", needle1, needle2, e.msg);
    CU_ASSERT(ok);
}

static void test_load_errors_name_the_tensor(void)
{
    model *m = tiny(3, 0);
    char dir[512];
    save_dir(m, "model-src", ST_F32, dir, sizeof dir);
    expect_load_error(dir, (edit){.skip = "model.layers.2.mlp.up_proj.weight"},
                      "'model.layers.2.mlp.up_proj.weight'", "missing");
    expect_load_error(dir, (edit){.reshape = "model.layers.1.mlp.down_proj.weight"},
                      "'model.layers.1.mlp.down_proj.weight'", "shape [768, 256] but the config needs [256, 768]");
    expect_load_error(dir, (edit){.redtype = "model.norm.weight"}, "'model.norm.weight'", "dtype I32");
    /* The right file for another config: every tensor's shape differs. */
    model_config other;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("llama-100m", &other, &e) == 0);
    char file[600];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    CU_ASSERT_PTR_NULL(model_load(file, &other, 0, &e));
    CU_ASSERT(strstr(e.msg, "model.embed_tokens.weight") && strstr(e.msg, "shape"));
    /* A directory without weights. */
    tu_tmp_path("empty-dir", file, sizeof file);
    mkdir(file, 0755);
    CU_ASSERT_PTR_NULL(model_load(file, &other, 0, &e));
    CU_ASSERT(strstr(e.msg, "model.safetensors") != NULL);
    model_free(m);
}

/* A model split across two shards and an index loads to the same logits. */
static void test_sharded_model(void)
{
    model *m = tiny(5, 1);
    float *want = logits_of(m);
    char dir[512], src[600], p[600];
    save_dir(m, "model-sharded", ST_F32, dir, sizeof dir);
    snprintf(src, sizeof src, "%s/model.safetensors", dir);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    rewrite(src, p, (edit){.only_even = "yes"});
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    rewrite(src, p, (edit){.only_odd = "yes"});
    rh_err e;
    st_file *f = st_open(src, &e);
    json_t *map = json_object();
    for (size_t i = 0; i < f->n; i++)
        json_object_set_new(map, f->tensors[i].name,
                            json_string(i % 2 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors"));
    st_close(f);
    remove(src);
    json_t *idx = json_pack("{s:{s:i},s:o}", "metadata", "total_size", 0, "weight_map", map);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    json_dump_file(idx, p, 0);
    json_decref(idx);
    model *l = model_load(dir, NULL, 0, &e);
    if (!l) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(l != NULL);
    CU_ASSERT_EQUAL(l->n_files, 2);
    float *got = logits_of(l);
    CU_ASSERT(memcmp(got, want, (size_t)30 * m->cfg.vocab_size * sizeof(float)) == 0);
    free(got);
    free(want);
    model_free(l);
    model_free(m);
}

void register_test_model_weights(void)
{
    CU_pSuite s = CU_add_suite("model_weights", NULL, NULL);
    CU_add_test(s, "f16 and bf16 conversions round to nearest", test_half_conversions);
    CU_add_test(s, "safetensors round trip (f32, f16, bf16)", test_safetensors_round_trip);
    CU_add_test(s, "malformed safetensors files are errors", test_safetensors_bad_files);
    CU_add_test(s, "dummy weights depend only on the seed", test_dummy_weights_are_seeded);
    CU_add_test(s, "a saved and loaded model computes the same logits", test_save_load_same_logits);
    CU_add_test(s, "bf16 and f16 weights load as their rounded values", test_bf16_and_f16_weights);
    CU_add_test(s, "missing tensor, wrong shape or dtype name the tensor", test_load_errors_name_the_tensor);
    CU_add_test(s, "a sharded model loads through its index", test_sharded_model);
}
