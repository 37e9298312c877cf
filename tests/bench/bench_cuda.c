/* bench_cuda.c — how close the CUDA backend comes to the GPU's ceilings.
 *
 *  0. Ceilings: device-to-device copy bandwidth (bytes read + written) and a
 *     plain cuBLAS bf16 GEMM of 8192^3.
 *  1. Decode at batch 1 on a Llama-3-8B-shaped bf16 model (all 32 layers,
 *     weights seeded on the device): time per token, kernel by kernel and
 *     replayed from a graph; bytes per token = every weight matrix but the
 *     embedding table (one row of it) + norms + the K/V read; the fraction
 *     of 4.8 TB/s (H200's datasheet) and of the measured copy bandwidth.
 *  2. Prefill GEMMs: our gemm path (f32 in and out, x rounded to bf16,
 *     cuBLAS underneath) against cuBLAS bf16 in and out on the 8B model's
 *     layer shapes at 512 and 4096 tokens.
 *     Also each decode-sized product alone (one row), our GEMV against
 *     cuBLAS, with W rotated through copies larger than L2, and grouped as
 *     the forward pass issues them (Q+K+V, gate+up: one launch each).
 *  3. Paged decode attention: one layer's attention at 4k and 32k context,
 *     batch 1 and 8, random page tables; the fraction of bandwidth.
 *  4. Prefill attention: a 2048-token chunk, TFLOP/s (no target; context).
 *  5. All-reduce times over message sizes on this machine's GPUs (1 GPU: a
 *     group of one), as `rehearse calibrate` will measure them.
 *  6. Kernel variants (cuda_set_variants): the decode token and the 32k
 *     decode attention under each, so one GPU run picks the defaults.
 * Prints a table; writes reports/bench/cuda.json. Without a GPU it says so
 * and writes a JSON that says so. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/forward.h"
#include "kernels/cuda/cuda.h"
#include "util/progress.h"

#define DATASHEET_BW 4.8e12
#define OUT_DIR "reports/bench"
#define OUT_FILE OUT_DIR "/cuda.json"

static const kern_table *K;
static void *owned[1024];
static int n_owned;

static void *dalloc(size_t bytes)
{
    void *p = K->alloc(bytes);
    if (!p) {
        fprintf(stderr, "bench_cuda: out of device memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    owned[n_owned++] = p;
    return p;
}

static void *drandom(size_t n, kern_dtype dt, float amp)
{
    static uint64_t seed = 1;
    void *p = dalloc(n * kern_dtype_size(dt));
    cuda_fill_uniform(p, n, dt, seed++, -amp, amp);
    return p;
}

static void *dcopy(const void *h, size_t bytes)
{
    void *p = dalloc(bytes);
    K->copy_in(p, h, bytes);
    return p;
}

static void check(const char *where)
{
    rh_err e;
    if (cuda_sync(&e)) {
        fprintf(stderr, "bench_cuda: %s: %s\n", where, e.msg);
        exit(1);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- 1. decode ---------------------------------------------------------- */

typedef struct dmodel {
    model_config c;
    model_weights w;
    model_layer layers[128];
    float *inv_freq;
    float **kp, **vp;
    float *kpv[128], *vpv[128];
    uint32_t page_size, pages;
} dmodel;

/* Llama-3-8B's shape with seeded bf16 weights (std 1/sqrt(fan_in)), and a
 * KV pool of random bf16 for `max_ctx` tokens. */
static void dmodel_init(dmodel *m, uint32_t max_ctx)
{
    rh_err e;
    if (model_preset("llama-3-8b", &m->c, &e)) exit(1);
    const model_config *c = &m->c;
    uint64_t d = c->hidden_size, f = c->intermediate_size, v = c->vocab_size;
    uint64_t qd = (uint64_t)c->n_heads * c->head_dim, kvd = (uint64_t)c->n_kv_heads * c->head_dim;
    float *ones = malloc(d * 4);
    for (uint64_t i = 0; i < d; i++) ones[i] = 1.0f;
    m->w.embed = drandom(v * d, KERN_BF16, 0.03f);
    m->w.lm_head = drandom(v * d, KERN_BF16, 0.03f);
    m->w.final_norm = dcopy(ones, d * 4);
    m->w.layers = m->layers;
    m->page_size = 16;
    m->pages = max_ctx / m->page_size + 2;
    m->kp = m->kpv;
    m->vp = m->vpv;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        model_layer *L = &m->layers[l];
        memset(L, 0, sizeof *L);
        L->attn_norm = dcopy(ones, d * 4);
        L->ffn_norm = dcopy(ones, d * 4);
        L->wq = drandom(qd * d, KERN_BF16, 1.7f / sqrtf((float)d));
        L->wk = drandom(kvd * d, KERN_BF16, 1.7f / sqrtf((float)d));
        L->wv = drandom(kvd * d, KERN_BF16, 1.7f / sqrtf((float)d));
        L->wo = drandom(d * qd, KERN_BF16, 1.7f / sqrtf((float)qd * 64));
        L->w_gate = drandom(f * d, KERN_BF16, 1.7f / sqrtf((float)d));
        L->w_up = drandom(f * d, KERN_BF16, 1.7f / sqrtf((float)d));
        L->w_down = drandom(d * f, KERN_BF16, 1.7f / sqrtf((float)f * 64));
        m->kpv[l] = drandom((size_t)m->pages * m->page_size * kvd, KERN_BF16, 1.0f);
        m->vpv[l] = drandom((size_t)m->pages * m->page_size * kvd, KERN_BF16, 1.0f);
    }
    float inv[512];
    model_rope_inv_freq(c, inv);
    m->inv_freq = dcopy(inv, c->head_dim / 2 * 4);
    free(ones);
    check("seeding the model");
}

/* Bytes one decode token must read: the weights it multiplies by, its
 * embedding row, the norms, and the K/V of ctx positions in every layer. */
static double decode_bytes(const model_config *c, uint32_t ctx)
{
    double d = c->hidden_size, f = c->intermediate_size, v = c->vocab_size;
    double qd = (double)c->n_heads * c->head_dim, kvd = (double)c->n_kv_heads * c->head_dim;
    double layer = (qd * d + 2 * kvd * d + d * qd + 3 * f * d) * 2 + 2 * d * 4;
    return c->n_layers * layer + v * d * 2 + d * 2 + d * 4 + (double)c->n_layers * ctx * kvd * 2 * 2;
}

typedef struct decode_row {
    uint32_t ctx;
    double eager_ms, graph_ms, bytes;
} decode_row;

static void bench_decode(dmodel *m, decode_row *r, int iters)
{
    const model_config *c = &m->c;
    uint32_t ctx = r->ctx, need = ctx / m->page_size + 1;
    uint32_t *pt = malloc(need * 4);
    for (uint32_t i = 0; i < need; i++) pt[i] = i;
    int32_t tok = 1234;
    uint32_t pos = ctx, row0[2] = {0, 1}, start[1] = {ctx}, pt0[2] = {0, need}, lrow = 0;
    fwd_buffers b = {0};
    uint64_t d = c->hidden_size, qd = (uint64_t)c->n_heads * c->head_dim, kvd = (uint64_t)c->n_kv_heads * c->head_dim;
    b.x = dalloc(d * 4), b.xn = dalloc(d * 4), b.q = dalloc(qd * 4), b.att = dalloc(qd * 4);
    b.k = dalloc(kvd * 4), b.v = dalloc(kvd * 4), b.gate = dalloc(c->intermediate_size * 4);
    b.up = dalloc(c->intermediate_size * 4), b.cos = dalloc(c->head_dim * 2), b.sin = dalloc(c->head_dim * 2);
    b.scores = dalloc(4), b.lm_tmp = dalloc(d * 4), b.logits = dalloc((size_t)c->vocab_size * 4);
    fwd_batch fb = {
        .rows = 1,
        .tokens = dcopy(&tok, 4),
        .positions = dcopy(&pos, 4),
        .attn = {1, dcopy(row0, 8), dcopy(start, 4), dcopy(pt0, 8), dcopy(pt, need * 4)},
        .n_logits = 1,
        .logit_rows = dcopy(&lrow, 4),
        .h_row0 = row0,
        .h_start = start,
    };
    cuda_timer *t = cuda_timer_new();
    for (int i = 0; i < 3; i++) forward_run(K, c, &m->w, m->inv_freq, m->kp, m->vp, m->page_size, &fb, &b);
    check("decode warm-up");
    cuda_timer_start(t);
    for (int i = 0; i < iters; i++) forward_run(K, c, &m->w, m->inv_freq, m->kp, m->vp, m->page_size, &fb, &b);
    r->eager_ms = cuda_timer_stop(t) / iters * 1e3;
    r->graph_ms = 0;
    if (K->graph_begin() == 0) {
        forward_run(K, c, &m->w, m->inv_freq, m->kp, m->vp, m->page_size, &fb, &b);
        void *g = K->graph_end();
        if (g) {
            for (int i = 0; i < 3; i++) K->graph_launch(g);
            cuda_timer_start(t);
            for (int i = 0; i < iters; i++) K->graph_launch(g);
            r->graph_ms = cuda_timer_stop(t) / iters * 1e3;
            K->graph_free(g);
        }
    }
    check("decode");
    r->bytes = decode_bytes(c, ctx + 1);
    cuda_timer_free(t);
    free(pt);
}

/* ---- 2. prefill GEMMs --------------------------------------------------- */

typedef struct gemm_row {
    const char *what;
    uint32_t m, n, k;
    double ours_tflops, ref_tflops;
} gemm_row;

static double time_calls(int ours, const void *x, const void *w, void *y, uint32_t m, uint32_t n, uint32_t k,
                         int reps)
{
    cuda_timer *t = cuda_timer_new();
    double s[16];
    for (int r = 0; r < reps + 2 && r < 16; r++) {
        cuda_timer_start(t);
        if (ours) K->gemm(x, w, NULL, y, m, n, k, 0);
        else cuda_ref_gemm_bf16(x, w, y, m, n, k);
        s[r] = cuda_timer_stop(t);
    }
    cuda_timer_free(t);
    qsort(s + 2, (size_t)reps, sizeof s[0], cmp_double);   /* two warm-ups left out */
    return s[2 + reps / 2];
}

static void bench_gemm(gemm_row *g)
{
    size_t xs = (size_t)g->m * g->k, ws = (size_t)g->n * g->k, ys = (size_t)g->m * g->n;
    int mark = n_owned;
    float *x = drandom(xs, KERN_F32, 1.0f), *y = dalloc(ys * 4);
    void *xb = drandom(xs, KERN_BF16, 1.0f), *w = drandom(ws, KERN_BF16, 0.05f), *yb = dalloc(ys * 2);
    double flops = 2.0 * g->m * g->n * g->k;
    g->ours_tflops = flops / time_calls(1, x, w, y, g->m, g->n, g->k, 9) / 1e12;
    g->ref_tflops = flops / time_calls(0, xb, w, yb, g->m, g->n, g->k, 9) / 1e12;
    check("gemm");
    while (n_owned > mark) K->free(owned[--n_owned]);
}

/* Decode-sized products (one row): the time to stream W, through our GEMV
 * and through cuBLAS. Copies of W rotate so that no call finds W in L2. */
typedef struct gemv_row {
    const char *what;
    uint32_t n, k;
    double gemv_us, cublas_us;
} gemv_row;

static void bench_gemv(gemv_row *g)
{
    size_t wbytes = (size_t)g->n * g->k * 2;
    int copies = (int)((512u << 20) / wbytes);
    if (copies < 2) copies = 2;
    if (copies > 64) copies = 64;
    int mark = n_owned;
    void *w[64];
    for (int i = 0; i < copies; i++) w[i] = drandom((size_t)g->n * g->k, KERN_BF16, 0.05f);
    float *x = drandom(g->k, KERN_F32, 1.0f), *y = dalloc((size_t)g->n * 4);
    cuda_timer *t = cuda_timer_new();
    for (int path = 0; path < 2; path++) {
        cuda_force_gemm(path ? CUDA_GEMM_CUBLAS : CUDA_GEMM_GEMV);
        for (int i = 0; i < copies; i++) K->gemm(x, w[i], NULL, y, 1, g->n, g->k, 0);   /* warm-up */
        double best = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            cuda_timer_start(t);
            for (int i = 0; i < copies; i++) K->gemm(x, w[i], NULL, y, 1, g->n, g->k, 0);
            double s = cuda_timer_stop(t) / copies;
            if (s < best) best = s;
        }
        if (path) g->cublas_us = best * 1e6;
        else g->gemv_us = best * 1e6;
    }
    cuda_force_gemm(CUDA_GEMM_AUTO);
    cuda_timer_free(t);
    check("gemv");
    while (n_owned > mark) K->free(owned[--n_owned]);
}

/* The same decode products grouped as the forward pass issues them (Q, K
 * and V in one gemm_group call; gate and up in one): microseconds for the
 * group, W copies rotating as above. */
typedef struct group_row {
    const char *what;
    uint32_t count, n[3], k;
    double us;
} group_row;

static void bench_gemv_group(group_row *g)
{
    size_t wbytes = 0;
    for (uint32_t p = 0; p < g->count; p++) wbytes += (size_t)g->n[p] * g->k * 2;
    int copies = (int)((512u << 20) / wbytes);
    if (copies < 2) copies = 2;
    if (copies > 16) copies = 16;
    int mark = n_owned;
    kern_gemm_out outs[16][3];
    float *x = drandom(g->k, KERN_F32, 1.0f);
    for (int i = 0; i < copies; i++)
        for (uint32_t p = 0; p < g->count; p++)
            outs[i][p] = (kern_gemm_out){drandom((size_t)g->n[p] * g->k, KERN_BF16, 0.05f), NULL,
                                         i ? outs[0][p].y : dalloc((size_t)g->n[p] * 4), g->n[p]};
    cuda_timer *t = cuda_timer_new();
    for (int i = 0; i < copies; i++) K->gemm_group(x, 1, g->k, g->count, outs[i]);   /* warm-up */
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        cuda_timer_start(t);
        for (int i = 0; i < copies; i++) K->gemm_group(x, 1, g->k, g->count, outs[i]);
        double sec = cuda_timer_stop(t) / copies;
        if (sec < best) best = sec;
    }
    g->us = best * 1e6;
    cuda_timer_free(t);
    check("gemv group");
    while (n_owned > mark) K->free(owned[--n_owned]);
}

/* ---- 3, 4. attention ---------------------------------------------------- */

typedef struct attn_row {
    const char *kind;
    uint32_t batch, ctx, n_new;
    double ms, bytes, flops;
} attn_row;

static void bench_attention(attn_row *a)
{
    const uint32_t H = 32, KVH = 8, HD = 128, PS = 16;
    kern_attn_shape s = {H, KVH, HD, PS, 0, 1.0f / sqrtf((float)HD)};
    uint32_t B = a->batch, per = (a->ctx + a->n_new + PS - 1) / PS, pages = per * B + 1;
    uint32_t rows = B * a->n_new, *row0 = malloc((B + 1) * 4), *start = malloc(B * 4), *pt0 = malloc((B + 1) * 4);
    uint32_t *perm = malloc((size_t)pages * 4);
    for (uint32_t i = 0; i < pages; i++) perm[i] = i;
    uint64_t st = 99;
    for (uint32_t i = pages - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(rh_splitmix_unit(&st) * (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (uint32_t i = 0; i < B; i++) {
        row0[i] = i * a->n_new;
        start[i] = a->ctx;
        pt0[i] = i * per;
    }
    row0[B] = rows;
    pt0[B] = B * per;
    int mark = n_owned;
    float *kp = drandom((size_t)pages * PS * KVH * HD, KERN_BF16, 1.0f);
    float *vp = drandom((size_t)pages * PS * KVH * HD, KERN_BF16, 1.0f);
    float *q = drandom((size_t)rows * H * HD, KERN_F32, 1.0f), *out = dalloc((size_t)rows * H * HD * 4);
    kern_attn_batch b = {B, dcopy(row0, (B + 1) * 4), dcopy(start, B * 4), dcopy(pt0, (B + 1) * 4),
                         dcopy(perm, (size_t)pages * 4)};
    cuda_timer *t = cuda_timer_new();
    double s_[12];
    for (int r = 0; r < 12; r++) {
        cuda_timer_start(t);
        K->plan(&b, row0, start, &s);
        K->attention(q, kp, vp, &b, &s, out, NULL);
        s_[r] = cuda_timer_stop(t);
    }
    qsort(s_ + 2, 10, sizeof s_[0], cmp_double);
    a->ms = s_[7] * 1e3;
    double keys = 0, pairs = 0;
    for (uint32_t i = 0; i < a->n_new; i++) pairs += a->ctx + i + 1;
    keys = (double)a->ctx + a->n_new;
    a->bytes = (double)B * keys * KVH * HD * 2 * 2;
    a->flops = (double)B * pairs * H * HD * 4;
    check("attention");
    cuda_timer_free(t);
    while (n_owned > mark) K->free(owned[--n_owned]);
    free(row0), free(start), free(pt0), free(perm);
}

/* ---- output ------------------------------------------------------------- */

static int write_json(json_t *root)
{
    mkdir("reports", 0755);
    mkdir(OUT_DIR, 0755);
    int r = json_dump_file(root, OUT_FILE ".tmp", JSON_INDENT(2));
    if (r == 0) r = rename(OUT_FILE ".tmp", OUT_FILE);
    if (r) fprintf(stderr, "bench_cuda: cannot write " OUT_FILE "\n");
    return r;
}

int main(void)
{
    const char *why = NULL;
    K = kern_cuda(&why);
    if (!K) {
        printf("bench_cuda: skipped: %s\n", why);
        json_t *root = json_pack("{s:s}", "skipped", why);
        int r = write_json(root);
        json_decref(root);
        return r ? 1 : 0;
    }
    char dev[160];
    cuda_device_describe(0, dev, sizeof dev);
    printf("bench_cuda on %s\n", dev);
    rh_progress pg;
    rh_progress_begin(&pg, "bench_cuda", 6);

    /* 0. ceilings */
    double copy_bw = cuda_copy_bandwidth((size_t)2 << 30, 10);
    gemm_row peak = {"8192^3", 8192, 8192, 8192, 0, 0};
    bench_gemm(&peak);
    rh_progress_update(&pg, 1);

    /* 1. decode */
    dmodel *m = calloc(1, sizeof *m);
    decode_row dec[2] = {{512, 0, 0, 0}, {8192, 0, 0, 0}};
    dmodel_init(m, 8192 + 16);
    for (int i = 0; i < 2; i++) bench_decode(m, &dec[i], 30);
    /* The same token under each kernel variant (cuda_set_variants), so one
     * run on a GPU says which to make the default. */
    struct {
        const char *what;
        int loads, attn;
        decode_row token;
        attn_row a32k;
    } var[5] = {{"GEMV 4 loads, attention pipelined", 0, 0, {512, 0, 0, 0}, {"decode", 1, 32768, 1, 0, 0, 0}},
                {"GEMV 8 loads, attention pipelined", 8, 0, {512, 0, 0, 0}, {"decode", 1, 32768, 1, 0, 0, 0}},
                {"GEMV 16 loads, attention pipelined", 16, 0, {512, 0, 0, 0}, {"decode", 1, 32768, 1, 0, 0, 0}},
                {"GEMV 4 loads, attention in turn", 0, CUDA_DECODE_IN_TURN, {512, 0, 0, 0},
                 {"decode", 1, 32768, 1, 0, 0, 0}},
                {"GEMV 16 loads, attention in turn", 16, CUDA_DECODE_IN_TURN, {512, 0, 0, 0},
                 {"decode", 1, 32768, 1, 0, 0, 0}}};
    for (int i = 0; i < 5; i++) {
        cuda_set_variants(var[i].loads, var[i].attn);
        bench_decode(m, &var[i].token, 20);
    }
    cuda_set_variants(0, 0);
    rh_progress_update(&pg, 2);
    while (n_owned > 0) K->free(owned[--n_owned]);
    free(m);

    /* 2. GEMMs */
    gemm_row gm[8];
    const uint32_t toks[2] = {512, 4096};
    const struct { const char *what; uint32_t n, k; } shapes[4] = {
        {"q/o 4096x4096", 4096, 4096}, {"k/v 1024x4096", 1024, 4096}, {"gate/up 14336x4096", 14336, 4096},
        {"down 4096x14336", 4096, 14336}};
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < 4; s++) {
            gm[t * 4 + s] = (gemm_row){shapes[s].what, toks[t], shapes[s].n, shapes[s].k, 0, 0};
            bench_gemm(&gm[t * 4 + s]);
        }
    gemv_row gv[5] = {{"q/o 4096x4096", 4096, 4096, 0, 0}, {"k/v 1024x4096", 1024, 4096, 0, 0},
                      {"gate/up 14336x4096", 14336, 4096, 0, 0}, {"down 4096x14336", 4096, 14336, 0, 0},
                      {"lm_head 128256x4096", 128256, 4096, 0, 0}};
    for (int i = 0; i < 5; i++) bench_gemv(&gv[i]);
    group_row gr[2] = {{"q+k+v 4096+1024+1024", 3, {4096, 1024, 1024}, 4096, 0},
                       {"gate+up 2x14336", 2, {14336, 14336, 0}, 4096, 0}};
    for (int i = 0; i < 2; i++) bench_gemv_group(&gr[i]);
    rh_progress_update(&pg, 3);

    /* 3, 4. attention */
    attn_row at[5] = {{"decode", 1, 4096, 1, 0, 0, 0}, {"decode", 1, 32768, 1, 0, 0, 0},
                      {"decode", 8, 32768, 1, 0, 0, 0}, {"decode", 64, 4096, 1, 0, 0, 0},
                      {"prefill", 1, 0, 2048, 0, 0, 0}};
    for (int i = 0; i < 5; i++) bench_attention(&at[i]);
    for (int i = 0; i < 5; i++) {
        cuda_set_variants(var[i].loads, var[i].attn);
        bench_attention(&var[i].a32k);
    }
    cuda_set_variants(0, 0);
    rh_progress_update(&pg, 4);

    /* 5. all-reduce */
    size_t ar_bytes[6] = {4096, 65536, 1 << 20, 8 << 20, 64 << 20, 256 << 20};
    double ar_s[6] = {0};
    rh_err e;
    int ar_ok = cuda_allreduce_times((uint32_t)cuda_device_count(), ar_bytes, 6, 10, ar_s, &e) == 0;
    if (!ar_ok) printf("all-reduce: %s\n", e.msg);
    rh_progress_update(&pg, 6);
    rh_progress_end(&pg);

    /* ---- table and JSON ---- */
    json_t *root = json_object();
    json_object_set_new(root, "device", json_string(dev));
    json_object_set_new(root, "copy_bandwidth_tbs", json_real(copy_bw / 1e12));
    json_object_set_new(root, "cublas_peak_tflops_8192", json_real(peak.ref_tflops));
    printf("\nceilings: copy %.2f TB/s (read + write), cuBLAS bf16 8192^3 %.0f TFLOP/s; datasheet HBM %.1f TB/s\n",
           copy_bw / 1e12, peak.ref_tflops, DATASHEET_BW / 1e12);

    printf("\ndecode, batch 1, Llama-3-8B shape bf16 (32 layers)\n");
    printf("  %-8s %10s %10s %10s %12s %12s\n", "context", "eager ms", "graph ms", "GB/token", "% of 4.8TB/s",
           "% of copy");
    json_t *ja = json_array();
    for (int i = 0; i < 2; i++) {
        double best = dec[i].graph_ms > 0 && dec[i].graph_ms < dec[i].eager_ms ? dec[i].graph_ms : dec[i].eager_ms;
        double bw = dec[i].bytes / (best * 1e-3);
        printf("  %-8u %10.3f %10.3f %10.2f %11.1f%% %11.1f%%\n", dec[i].ctx, dec[i].eager_ms, dec[i].graph_ms,
               dec[i].bytes / 1e9, 100 * bw / DATASHEET_BW, copy_bw > 0 ? 100 * bw / copy_bw : 0);
        json_array_append_new(ja, json_pack("{s:i,s:f,s:f,s:f,s:f,s:f}", "context", dec[i].ctx, "eager_ms",
                                            dec[i].eager_ms, "graph_ms", dec[i].graph_ms, "bytes_per_token",
                                            dec[i].bytes, "frac_of_datasheet_bw", bw / DATASHEET_BW,
                                            "frac_of_copy_bw", copy_bw > 0 ? bw / copy_bw : 0));
    }
    json_object_set_new(root, "decode_batch1_llama3_8b", ja);

    printf("\nprefill GEMMs (Llama-3-8B layer shapes): our path (f32 in/out) vs cuBLAS bf16\n");
    printf("  %-20s %6s %10s %10s %8s %12s\n", "layer", "tokens", "ours TF/s", "cuBLAS", "ratio", "% of peak");
    ja = json_array();
    double min_ratio = 1e9;
    for (int i = 0; i < 8; i++) {
        double ratio = gm[i].ours_tflops / gm[i].ref_tflops;
        if (ratio < min_ratio) min_ratio = ratio;
        printf("  %-20s %6u %10.0f %10.0f %7.0f%% %11.0f%%\n", gm[i].what, gm[i].m, gm[i].ours_tflops,
               gm[i].ref_tflops, 100 * ratio, 100 * gm[i].ours_tflops / peak.ref_tflops);
        json_array_append_new(ja, json_pack("{s:s,s:i,s:i,s:i,s:f,s:f,s:f}", "layer", gm[i].what, "m", gm[i].m, "n",
                                            gm[i].n, "k", gm[i].k, "ours_tflops", gm[i].ours_tflops, "cublas_tflops",
                                            gm[i].ref_tflops, "ratio", ratio));
    }
    json_object_set_new(root, "prefill_gemm", ja);
    json_object_set_new(root, "prefill_gemm_min_ratio", json_real(min_ratio));

    printf("\ndecode GEMV (1 row, bf16 W streamed from HBM): our kernel vs cuBLAS\n");
    printf("  %-20s %10s %10s %12s %10s\n", "layer", "ours us", "cuBLAS us", "ours % copy", "ours TB/s");
    ja = json_array();
    for (int i = 0; i < 5; i++) {
        double bw = (double)gv[i].n * gv[i].k * 2 / (gv[i].gemv_us * 1e-6);
        printf("  %-20s %10.2f %10.2f %11.1f%% %10.2f\n", gv[i].what, gv[i].gemv_us, gv[i].cublas_us,
               copy_bw > 0 ? 100 * bw / copy_bw : 0, bw / 1e12);
        json_array_append_new(ja, json_pack("{s:s,s:i,s:i,s:f,s:f,s:f}", "layer", gv[i].what, "n", gv[i].n, "k",
                                            gv[i].k, "gemv_us", gv[i].gemv_us, "cublas_us", gv[i].cublas_us,
                                            "gemv_tbs", bw / 1e12));
    }
    json_object_set_new(root, "decode_gemv", ja);

    /* Grouped as the forward pass runs them, against the same products one by one. */
    double apart[2] = {gv[0].gemv_us + 2 * gv[1].gemv_us, 2 * gv[2].gemv_us};
    printf("\ndecode products grouped (one gemm_group call) vs one launch each\n");
    printf("  %-22s %10s %10s %12s %10s\n", "group", "group us", "apart us", "group % copy", "TB/s");
    ja = json_array();
    for (int i = 0; i < 2; i++) {
        double bytes = 0;
        for (uint32_t p = 0; p < gr[i].count; p++) bytes += (double)gr[i].n[p] * gr[i].k * 2;
        double bw = bytes / (gr[i].us * 1e-6);
        printf("  %-22s %10.2f %10.2f %11.1f%% %10.2f\n", gr[i].what, gr[i].us, apart[i],
               copy_bw > 0 ? 100 * bw / copy_bw : 0, bw / 1e12);
        json_array_append_new(ja, json_pack("{s:s,s:f,s:f,s:f}", "group", gr[i].what, "group_us", gr[i].us,
                                            "apart_us", apart[i], "group_tbs", bw / 1e12));
    }
    json_object_set_new(root, "decode_gemv_grouped", ja);

    printf("\nattention, Llama-3-8B heads (32/8, head_dim 128), one layer, pages of 16 in random order\n");
    printf("  %-8s %6s %8s %6s %10s %12s %10s %8s\n", "kind", "batch", "context", "new", "ms", "% of 4.8TB/s",
           "% of copy", "TFLOP/s");
    ja = json_array();
    for (int i = 0; i < 5; i++) {
        double bw = at[i].bytes / (at[i].ms * 1e-3);
        printf("  %-8s %6u %8u %6u %10.4f %11.1f%% %9.1f%% %8.1f\n", at[i].kind, at[i].batch, at[i].ctx, at[i].n_new,
               at[i].ms, 100 * bw / DATASHEET_BW, copy_bw > 0 ? 100 * bw / copy_bw : 0,
               at[i].flops / (at[i].ms * 1e-3) / 1e12);
        json_array_append_new(ja, json_pack("{s:s,s:i,s:i,s:i,s:f,s:f,s:f,s:f}", "kind", at[i].kind, "batch",
                                            at[i].batch, "context", at[i].ctx, "new", at[i].n_new, "ms", at[i].ms,
                                            "frac_of_datasheet_bw", bw / DATASHEET_BW, "frac_of_copy_bw",
                                            copy_bw > 0 ? bw / copy_bw : 0, "tflops",
                                            at[i].flops / (at[i].ms * 1e-3) / 1e12));
    }
    json_object_set_new(root, "attention", ja);

    printf("\nkernel variants: decode token (context 512) and decode attention (batch 1, 32k)\n");
    printf("  %-36s %10s %12s %10s %12s\n", "variant", "token ms", "% of 4.8TB/s", "attn ms", "% of 4.8TB/s");
    ja = json_array();
    for (int i = 0; i < 5; i++) {
        const decode_row *t = &var[i].token;
        double tok = t->graph_ms > 0 && t->graph_ms < t->eager_ms ? t->graph_ms : t->eager_ms;
        double tbw = t->bytes / (tok * 1e-3), abw = var[i].a32k.bytes / (var[i].a32k.ms * 1e-3);
        printf("  %-36s %10.3f %11.1f%% %10.3f %11.1f%%\n", var[i].what, tok, 100 * tbw / DATASHEET_BW,
               var[i].a32k.ms, 100 * abw / DATASHEET_BW);
        json_array_append_new(ja, json_pack("{s:s,s:i,s:i,s:f,s:f,s:f,s:f}", "variant", var[i].what, "gemv_loads",
                                            var[i].loads ? var[i].loads : 4, "decode_attention", var[i].attn,
                                            "token_ms", tok, "token_frac_of_datasheet_bw", tbw / DATASHEET_BW,
                                            "attn_32k_ms", var[i].a32k.ms, "attn_frac_of_datasheet_bw",
                                            abw / DATASHEET_BW));
    }
    json_object_set_new(root, "variants", ja);

    ja = json_array();
    if (ar_ok) {
        printf("\nall-reduce (f32 sum) over %d GPU(s)\n", cuda_device_count());
        for (int i = 0; i < 6; i++) {
            printf("  %10zu bytes %10.1f us\n", ar_bytes[i], ar_s[i] * 1e6);
            json_array_append_new(ja, json_pack("{s:I,s:f}", "bytes", (json_int_t)ar_bytes[i], "seconds", ar_s[i]));
        }
    }
    json_object_set_new(root, "allreduce", ja);
    int r = write_json(root);
    json_decref(root);
    if (!r) printf("\nwrote " OUT_FILE "\n");
    return r ? 1 : 0;
}
