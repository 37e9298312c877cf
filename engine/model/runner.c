/* runner.c — see runner.h.
 *
 * Per call: validate the batch, flatten it into the arrays the kernels take
 * (token ids, positions, row offsets, concatenated page tables, logit rows),
 * copy them to the backend when it is not host memory, run forward_run, and
 * bring the logits back. Buffers grow to the largest batch seen and stay.
 *
 * Tensor parallel: rank 0 broadcasts the flattened arrays (a fixed header
 * first, so followers can size their buffers) before computing; followers
 * receive them in runner_follow and run the same forward pass on their
 * shard. Decode graphs are keyed by (sequences, context bucket) and
 * recorded on the second sighting of a key, so the first run has grown
 * every buffer; any buffer that moves invalidates them all. */
#include "engine/model/runner.h"
#include "engine/model/peft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/forward.h"
#include "util/half.h"
#include "util/mem.h"

/* A host array and its backend copy (the same memory on host backends). */
typedef struct staged {
    void *host, *dev;
    size_t cap;
} staged;

enum { ST_TOKENS, ST_POS, ST_ROW0, ST_START, ST_PT0, ST_PAGES, ST_LROWS, ST_HDR, ST_COUNT };

/* The header rank 0 broadcasts before each batch. */
enum { HDR_OP, HDR_N, HDR_ROWS, HDR_PAGES, HDR_CTX, HDR_WORDS = 8 };
enum { OP_STOP = 0, OP_BATCH = 1 };

#define GRAPH_SLOTS 32

typedef struct graph_slot {
    uint32_t n, bucket;
    uint64_t gen;               /* layout generation it was recorded against */
    int seen, failed;
    void *g;
} graph_slot;

struct runner {
    const model *m;
    const kern_table *K;
    model_shard *sh;                 /* the weights this backend computes with */
    const model_config *c;           /* the shard's shape (heads and MLP width per rank) */
    const kern_comm *comm;
    int graphs;
    uint64_t gen;                    /* bumped whenever a buffer moves */
    graph_slot slots[GRAPH_SLOTS];
    uint32_t page_size, total_pages;
    float **k_pools, **v_pools;      /* [n_layers] backend */
    float *inv_freq;                 /* backend */
    fwd_buffers buf;
    uint64_t rows_cap, logit_cap, ctx_cap;
    staged arr[ST_COUNT];
    float *host_logits;              /* == buf.logits on host backends */
    kern_cand *cand;                 /* sampling scratch, vocab entries */
    fwd_lora_seg *segs;              /* the batch's LoRA segments (host) */
    uint32_t cap_segs;
    uint64_t lora_u_cap;             /* floats in buf.lora_u */
    /* the host tier (runner_host_tier): per layer K and V pages in host memory */
    void **host_k, **host_v;
    uint32_t host_pages;
    uint64_t page_bytes;             /* one layer's K (or V) page */
};

struct runner_lora {
    fwd_lora w;
    float **a, **b;                  /* per layer and module, backend; NULL where absent */
    size_t n;
    uint64_t bytes;
};

/* n f32 weights into backend memory in the backend's weight dtype (the
 * GEMM reads its weights so). -1 out of memory. */
static int upload_weights(runner *r, void *dst, const float *src, size_t n)
{
    if (r->K->weight_dtype != KERN_BF16) {
        r->K->copy_in(dst, src, n * sizeof(float));
        return 0;
    }
    uint16_t *h = malloc(n * sizeof *h);
    if (!h) return -1;
    for (size_t i = 0; i < n; i++) h[i] = rh_f32_to_bf16(src[i]);
    r->K->copy_in(dst, h, n * sizeof *h);
    free(h);
    return 0;
}

runner_lora *runner_lora_load(runner *r, const model_lora *l, rh_err *e)
{
    const model_config *c = r->c;
    if (r->comm && r->comm->size > 1) return rh_fail(e, "adapter %s: LoRA under tensor parallel is not served", l->name), NULL;
    if (l->n_layers != c->n_layers)
        return rh_fail(e, "adapter %s: %u layers, the model has %u", l->name, l->n_layers, c->n_layers), NULL;
    runner_lora *h = calloc(1, sizeof *h);
    size_t n = (size_t)c->n_layers * LORA_N_MODULES;
    if (h) h->a = calloc(n, sizeof *h->a), h->b = calloc(n, sizeof *h->b);
    if (!h || !h->a || !h->b) goto oom;
    h->n = n;
    h->w = (fwd_lora){.rank = l->rank, .a = h->a, .b = h->b};
    for (size_t i = 0; i < n; i++) {
        if (!l->a[i]) continue;
        uint32_t in, out;
        lora_module_dims(c, (int)(i % LORA_N_MODULES), &in, &out);
        size_t na = (size_t)l->rank * in, nb = (size_t)out * l->rank, wsz = kern_dtype_size(r->K->weight_dtype);
        h->a[i] = r->K->alloc(na * wsz);
        h->b[i] = r->K->alloc(nb * wsz);
        if (!h->a[i] || !h->b[i] || upload_weights(r, h->a[i], l->a[i], na) < 0 ||
            upload_weights(r, h->b[i], l->b[i], nb) < 0)
            goto oom;
        h->bytes += (na + nb) * wsz;
    }
    return h;
oom:
    runner_lora_free(r, h);
    rh_fail(e, "adapter %s: out of memory loading it", l->name);
    return NULL;
}

void runner_lora_free(runner *r, runner_lora *h)
{
    if (!h) return;
    for (size_t i = 0; i < h->n; i++) {
        if (h->a && h->a[i]) r->K->free(h->a[i]);
        if (h->b && h->b[i]) r->K->free(h->b[i]);
    }
    free(h->a);
    free(h->b);
    free(h);
}

uint64_t runner_lora_bytes(const runner_lora *h)
{
    return h ? h->bytes : 0;
}

const model_config *runner_model(const runner *r) { return &r->m->cfg; }
uint32_t runner_page_size(const runner *r) { return r->page_size; }
uint32_t runner_total_pages(const runner *r) { return r->total_pages; }

int runner_host_tier(runner *r, uint32_t pages, rh_err *e)
{
    if (r->host_k) return rh_fail(e, "runner: the host tier is already set up");
    if (r->comm) return rh_fail(e, "runner: a host KV tier under tensor parallel is not supported");
    uint32_t L = r->m->cfg.n_layers;
    double want = (double)pages * (double)r->page_bytes * 2 * L;
    if (!pages || want > (double)rh_mem_available())
        return rh_fail(e, "runner: a host KV tier of %u pages takes %.2f GB; %.2f GB of host memory is available", pages,
                       want / 1e9, (double)rh_mem_available() / 1e9);
    r->host_k = calloc(L, sizeof *r->host_k);
    r->host_v = calloc(L, sizeof *r->host_v);
    bool ok = r->host_k && r->host_v;
    for (uint32_t l = 0; ok && l < L; l++) {
        /* malloc, not calloc: a slot is always written before it is read */
        r->host_k[l] = malloc((size_t)pages * r->page_bytes);
        r->host_v[l] = malloc((size_t)pages * r->page_bytes);
        ok = r->host_k[l] && r->host_v[l];
    }
    if (!ok) {
        for (uint32_t l = 0; r->host_k && l < L; l++) free(r->host_k[l]), free(r->host_v ? r->host_v[l] : NULL);
        free(r->host_k), free(r->host_v);
        r->host_k = r->host_v = NULL;
        return rh_fail(e, "runner: out of memory for a host KV tier of %u pages", pages);
    }
    r->host_pages = pages;
    return 0;
}

int runner_copy_pages(runner *r, const runner_page_copy *c, uint32_t n, rh_err *e)
{
    for (uint32_t i = 0; i < n; i++)
        if (c[i].gpu_page >= r->total_pages || c[i].host_slot >= r->host_pages)
            return rh_fail(e, "runner: copy %u names page %u of %u and host slot %u of %u", i, c[i].gpu_page,
                           r->total_pages, c[i].host_slot, r->host_pages);
    uint64_t pb = r->page_bytes;
    for (uint32_t i = 0; i < n; i++) {
        /* Every layer's K and V page: SGLang's layer-first host layout, the
         * loads one layer after another as its load_to_device_per_layer. */
        for (uint32_t l = 0; l < r->m->cfg.n_layers; l++) {
            char *dk = (char *)r->k_pools[l] + (uint64_t)c[i].gpu_page * pb;
            char *dv = (char *)r->v_pools[l] + (uint64_t)c[i].gpu_page * pb;
            char *hk = (char *)r->host_k[l] + (uint64_t)c[i].host_slot * pb;
            char *hv = (char *)r->host_v[l] + (uint64_t)c[i].host_slot * pb;
            if (c[i].to_host) {
                r->K->copy_out(hk, dk, pb);
                r->K->copy_out(hv, dv, pb);
            } else {
                r->K->copy_in(dk, hk, pb);
                r->K->copy_in(dv, hv, pb);
            }
        }
    }
    return 0;
}

static void free_graphs(runner *r)
{
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (r->slots[i].g) r->K->graph_free(r->slots[i].g);
    memset(r->slots, 0, sizeof r->slots);
}

static void free_buffers(runner *r)
{
    free_graphs(r);
    r->gen++;
    float **all[] = {&r->buf.x, &r->buf.xn, &r->buf.q, &r->buf.att, &r->buf.k, &r->buf.v, &r->buf.gate,
                     &r->buf.up, &r->buf.cos, &r->buf.sin, &r->buf.scores, &r->buf.lm_tmp, &r->buf.logits};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (*all[i]) r->K->free(*all[i]);
        *all[i] = NULL;
    }
    if (!r->K->host_memory) free(r->host_logits);
    r->host_logits = NULL;
    r->rows_cap = r->logit_cap = r->ctx_cap = 0;
}

void runner_free(runner *r)
{
    if (!r) return;
    free_graphs(r);
    for (uint32_t l = 0; r->k_pools && l < r->m->cfg.n_layers; l++) {
        if (r->k_pools[l]) r->K->free(r->k_pools[l]);
        if (r->v_pools && r->v_pools[l]) r->K->free(r->v_pools[l]);
    }
    free(r->k_pools);
    free(r->v_pools);
    for (uint32_t l = 0; r->host_k && l < r->m->cfg.n_layers; l++) {
        free(r->host_k[l]);
        free(r->host_v[l]);
    }
    free(r->host_k);
    free(r->host_v);
    if (r->inv_freq) r->K->free(r->inv_freq);
    free_buffers(r);
    for (int i = 0; i < ST_COUNT; i++) {
        if (!r->K->host_memory && r->arr[i].dev) r->K->free(r->arr[i].dev);
        free(r->arr[i].host);
    }
    free(r->cand);
    free(r->segs);
    if (r->buf.lora_u) r->K->free(r->buf.lora_u);
    model_shard_free(r->sh);
    free(r);
}

runner *runner_new(const model *m, const runner_config *rc, rh_err *e)
{
    return runner_new_tp(m, rc, NULL, e);
}

void runner_set_graphs(runner *r, int on)
{
    free_graphs(r);
    r->graphs = on && r->K->graph_begin && !r->comm;
}

runner *runner_new_tp(const model *m, const runner_config *rc, const kern_comm *comm, rh_err *e)
{
    const model_config *c = &m->cfg;
    const kern_table *K = rc->kernels ? rc->kernels : kern_cpu();
    uint32_t tp = comm ? comm->size : 1, rank = comm ? comm->rank : 0;
    if (!rc->page_size || rc->page_size > (1u << 16))
        return rh_fail(e, "runner: page size %u is outside [1, 65536]", rc->page_size), NULL;
    if (!rc->total_pages) return rh_fail(e, "runner: the KV pool needs at least one page"), NULL;
    if (!tp || rank >= tp) return rh_fail(e, "runner: rank %u of a tensor-parallel group of %u", rank, tp), NULL;
    if (c->n_kv_heads % tp)
        return rh_fail(e, "runner: --tp-size %u must divide the %u KV heads of '%s'", tp, c->n_kv_heads, c->name), NULL;
    uint64_t pool_elems = (uint64_t)rc->total_pages * rc->page_size * (c->n_kv_heads / tp) * c->head_dim;
    uint64_t pool_bytes = pool_elems * kern_dtype_size(K->kv_dtype);
    uint64_t kv_bytes = pool_bytes * 2 * c->n_layers;
    /* On a device the weights share its memory with the pool. */
    uint64_t weights = K->host_memory ? 0 : model_shard_bytes(c, K, tp);
    uint64_t have = rc->mem_limit ? rc->mem_limit : K->mem_available ? K->mem_available() : rh_mem_available();
    if (have && kv_bytes + weights > have) {
        char a[32], b[32];
        rh_fail(e, "runner: a KV pool of %u pages x %u tokens for '%s' needs %s%s but only %s of %s memory is %s",
                rc->total_pages, rc->page_size, c->name, rh_fmt_bytes(kv_bytes, a, sizeof a),
                weights ? " beside the weights" : "", rh_fmt_bytes(have, b, sizeof b), K->name,
                rc->mem_limit ? "allowed" : "available");
        return NULL;
    }
    kern_attn_shape shape = {c->n_heads / tp, c->n_kv_heads / tp, c->head_dim, rc->page_size, c->sliding_window, 0};
    const char *why = K->check_shape ? K->check_shape(&shape) : NULL;
    if (why) return rh_fail(e, "runner: the %s backend cannot run '%s': %s", K->name, c->name, why), NULL;
    runner *r = calloc(1, sizeof *r);
    if (!r) return rh_fail(e, "runner: out of memory"), NULL;
    r->m = m;
    r->K = K;
    r->comm = comm;
    r->graphs = K->graph_begin && !comm;
    if (!(r->sh = model_shard_new(m, K, rank, tp, e))) {
        free(r);
        return NULL;
    }
    r->c = &r->sh->cfg;
    r->page_size = rc->page_size;
    r->total_pages = rc->total_pages;
    r->page_bytes = pool_bytes / rc->total_pages;
    r->k_pools = calloc(c->n_layers, sizeof *r->k_pools);
    r->v_pools = calloc(c->n_layers, sizeof *r->v_pools);
    r->cand = malloc((size_t)c->vocab_size * sizeof *r->cand);
    r->inv_freq = r->K->alloc(c->head_dim / 2 * sizeof(float));
    if (!r->k_pools || !r->v_pools || !r->cand || !r->inv_freq) goto oom;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        r->k_pools[l] = r->K->alloc(pool_bytes);
        r->v_pools[l] = r->K->alloc(pool_bytes);
        if (!r->k_pools[l] || !r->v_pools[l]) goto oom;
    }
    float inv[512];   /* head_dim <= 1024 (config validation) */
    model_rope_inv_freq(c, inv);
    r->K->copy_in(r->inv_freq, inv, c->head_dim / 2 * sizeof(float));
    return r;
oom:
    runner_free(r);
    rh_fail(e, "runner: out of memory allocating the KV pool for '%s'", c->name);
    return NULL;
}

/* ---- buffers ---------------------------------------------------------- */

static int staged_reserve(runner *r, staged *s, size_t bytes)
{
    if (bytes <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < bytes) cap *= 2;
    void *h = realloc(s->host, cap);
    if (!h) return -1;
    s->host = h;
    free_graphs(r);   /* they read the old buffers */
    r->gen++;
    if (r->K->host_memory) {
        s->dev = h;
    } else {
        if (s->dev) r->K->free(s->dev);
        if (!(s->dev = r->K->alloc(cap))) {
            s->cap = 0;
            return -1;
        }
    }
    s->cap = cap;
    return 0;
}

static void staged_upload(runner *r, staged *s, size_t bytes)
{
    if (!r->K->host_memory) r->K->copy_in(s->dev, s->host, bytes);
}

static float *alloc_floats(runner *r, uint64_t n)
{
    return r->K->alloc((size_t)(n ? n : 1) * sizeof(float));
}

/* Grows the activations to hold `rows` rows, `lrows` logit rows and a
 * context of `ctx` positions; keeps them when large enough. */
static int reserve_buffers(runner *r, uint64_t rows, uint64_t lrows, uint64_t ctx)
{
    if (rows <= r->rows_cap && lrows <= r->logit_cap && ctx <= r->ctx_cap) return 0;
    const model_config *c = r->c;
    uint64_t R = rows > r->rows_cap ? rows : r->rows_cap;
    uint64_t L = lrows > r->logit_cap ? lrows : r->logit_cap;
    uint64_t C = ctx > r->ctx_cap ? ctx : r->ctx_cap;
    free_buffers(r);
    uint64_t d = c->hidden_size, qd = (uint64_t)c->n_heads * c->head_dim;
    uint64_t kvd = (uint64_t)c->n_kv_heads * c->head_dim, f = c->intermediate_size;
    fwd_buffers *b = &r->buf;
    b->x = alloc_floats(r, R * d);
    b->xn = alloc_floats(r, R * d);
    b->q = alloc_floats(r, R * qd);
    b->att = alloc_floats(r, R * qd);
    b->k = alloc_floats(r, R * kvd);
    b->v = alloc_floats(r, R * kvd);
    b->gate = alloc_floats(r, R * f);
    b->up = alloc_floats(r, R * f);
    b->cos = alloc_floats(r, R * (c->head_dim / 2));
    b->sin = alloc_floats(r, R * (c->head_dim / 2));
    b->scores = alloc_floats(r, C);
    b->lm_tmp = alloc_floats(r, L * d);
    b->logits = alloc_floats(r, L * c->vocab_size);
    r->host_logits = r->K->host_memory ? b->logits : malloc((size_t)(L ? L : 1) * c->vocab_size * sizeof(float));
    if (!b->x || !b->xn || !b->q || !b->att || !b->k || !b->v || !b->gate || !b->up || !b->cos || !b->sin ||
        !b->scores || !b->lm_tmp || !b->logits || !r->host_logits) {
        free_buffers(r);
        return -1;
    }
    r->rows_cap = R;
    r->logit_cap = L;
    r->ctx_cap = C;
    return 0;
}

/* ---- one batch -------------------------------------------------------- */

static int check_seq(const runner *r, const runner_seq *s, uint32_t i, rh_err *e)
{
    const model_config *c = &r->m->cfg;
    if (!s->n_new) return rh_fail(e, "batch sequence %u: no new tokens", i);
    if (!s->tokens) return rh_fail(e, "batch sequence %u: token ids are missing", i);
    if (s->n_logits > s->n_new)
        return rh_fail(e, "batch sequence %u: asks for %u logits but computes %u positions", i, s->n_logits, s->n_new);
    uint64_t end = (uint64_t)s->start + s->n_new;
    if (end > c->max_position)
        return rh_fail(e, "batch sequence %u: positions %u..%llu pass the context length %u of '%s'", i, s->start,
                       (unsigned long long)(end - 1), c->max_position, c->name);
    for (uint32_t t = 0; t < s->n_new; t++)
        if (s->tokens[t] < 0 || (uint32_t)s->tokens[t] >= c->vocab_size)
            return rh_fail(e, "batch sequence %u: token %u (position %llu): id %d is outside the vocabulary of %u", i, t,
                           (unsigned long long)s->start + t, s->tokens[t], c->vocab_size);
    uint64_t need = (end + r->page_size - 1) / r->page_size;
    if (!s->pages || s->n_pages < need)
        return rh_fail(e, "batch sequence %u: page table has %u pages but positions up to %llu need %llu", i,
                       s->pages ? s->n_pages : 0, (unsigned long long)(end - 1), (unsigned long long)need);
    for (uint64_t p = 0; p < need; p++)
        if (s->pages[p] >= r->total_pages)
            return rh_fail(e, "batch sequence %u: page table entry %llu: page %u is outside the pool of %u pages", i,
                           (unsigned long long)p, s->pages[p], r->total_pages);
    return 0;
}

/* Grows every buffer a batch of this size needs. */
static int reserve_batch(runner *r, uint64_t n, uint64_t rows, uint64_t lrows, uint64_t ctx, uint64_t pages)
{
    return reserve_buffers(r, rows, lrows, ctx) ||
           staged_reserve(r, &r->arr[ST_TOKENS], rows * sizeof(int32_t)) ||
           staged_reserve(r, &r->arr[ST_POS], rows * sizeof(uint32_t)) ||
           staged_reserve(r, &r->arr[ST_ROW0], (n + 1) * sizeof(uint32_t)) ||
           staged_reserve(r, &r->arr[ST_START], n * sizeof(uint32_t)) ||
           staged_reserve(r, &r->arr[ST_PT0], (n + 1) * sizeof(uint32_t)) ||
           staged_reserve(r, &r->arr[ST_PAGES], pages * sizeof(uint32_t)) ||
           staged_reserve(r, &r->arr[ST_LROWS], (lrows ? lrows : 1) * sizeof(uint32_t)) ||
           staged_reserve(r, &r->arr[ST_HDR], HDR_WORDS * sizeof(uint32_t));
}

/* The arrays of a batch, in the order they are broadcast, and their sizes. */
static void batch_arrays(uint64_t n, uint64_t rows, uint64_t pages, int which[6], size_t bytes[6])
{
    const int w[6] = {ST_TOKENS, ST_POS, ST_ROW0, ST_START, ST_PT0, ST_PAGES};
    const size_t b[6] = {rows * 4, rows * 4, (n + 1) * 4, n * 4, (n + 1) * 4, pages * 4};
    memcpy(which, w, sizeof w);
    memcpy(bytes, b, sizeof b);
}

/* The slot of a decode batch's graph, or NULL when this batch runs eagerly. */
static graph_slot *graph_for(runner *r, const runner_seq *seqs, uint32_t n, uint64_t rows, uint64_t lrows,
                             uint64_t ctx)
{
    if (!r->graphs || rows != n || lrows != n) return NULL;
    for (uint32_t i = 0; i < n; i++)
        if (seqs[i].n_logits != 1) return NULL;
    uint32_t bucket = kern_ctx_bucket((uint32_t)ctx);
    graph_slot *fresh = NULL;
    for (int i = 0; i < GRAPH_SLOTS; i++) {
        graph_slot *g = &r->slots[i];
        if (g->seen && g->n == n && g->bucket == bucket) return g;
        if (!g->seen && !fresh) fresh = g;
    }
    if (!fresh) {   /* full: start over rather than track use */
        free_graphs(r);
        fresh = &r->slots[0];
    }
    *fresh = (graph_slot){n, bucket, r->gen, 0, 0, NULL};
    return fresh;
}

/* Runs forward over the staged batch: from a graph when one is recorded,
 * recording it on the key's second sighting, else kernel by kernel. */
static void run_staged(runner *r, const fwd_batch *b, graph_slot *g)
{
    const kern_table *K = r->K;
    if (g && g->gen != r->gen) {   /* buffers moved since it was seen */
        if (g->g) K->graph_free(g->g);
        *g = (graph_slot){g->n, g->bucket, r->gen, 0, 0, NULL};
    }
    if (g && g->g) {
        if (K->graph_launch(g->g) == 0) return;
        K->graph_free(g->g);
        g->g = NULL;
        g->failed = 1;
    }
    if (g && g->seen && !g->failed && K->graph_begin() == 0) {
        forward_run_tp(K, r->c, &r->sh->w, r->inv_freq, r->k_pools, r->v_pools, r->page_size, b, &r->buf, r->comm);
        g->g = K->graph_end();
        if (g->g && K->graph_launch(g->g) == 0) return;
        if (g->g) K->graph_free(g->g);
        g->g = NULL;
        g->failed = 1;   /* recording failed: nothing ran, so run it eagerly below */
    }
    if (g) g->seen = 1;
    forward_run_tp(K, r->c, &r->sh->w, r->inv_freq, r->k_pools, r->v_pools, r->page_size, b, &r->buf, r->comm);
}

static fwd_batch staged_batch(runner *r, uint32_t n, uint64_t rows, uint64_t lrows)
{
    return (fwd_batch){
        .rows = (uint32_t)rows,
        .tokens = r->arr[ST_TOKENS].dev,
        .positions = r->arr[ST_POS].dev,
        .attn = {n, r->arr[ST_ROW0].dev, r->arr[ST_START].dev, r->arr[ST_PT0].dev, r->arr[ST_PAGES].dev},
        .n_logits = (uint32_t)lrows,
        .logit_rows = r->arr[ST_LROWS].dev,
        .h_row0 = r->arr[ST_ROW0].host,
        .h_start = r->arr[ST_START].host,
    };
}

static int tp_group(const runner *r)
{
    return r->comm && r->comm->size > 1;
}

/* Rank 0: header, then the arrays, to every follower. */
static void broadcast_batch(runner *r, uint32_t op, uint64_t n, uint64_t rows, uint64_t pages, uint64_t ctx)
{
    staged *h = &r->arr[ST_HDR];
    uint32_t *hdr = h->host;
    memset(hdr, 0, HDR_WORDS * sizeof *hdr);
    hdr[HDR_OP] = op;
    hdr[HDR_N] = (uint32_t)n;
    hdr[HDR_ROWS] = (uint32_t)rows;
    hdr[HDR_PAGES] = (uint32_t)pages;
    hdr[HDR_CTX] = (uint32_t)ctx;
    staged_upload(r, h, HDR_WORDS * sizeof *hdr);
    r->comm->broadcast(r->comm->ctx, h->dev, HDR_WORDS * sizeof *hdr);
    if (op != OP_BATCH) return;
    int which[6];
    size_t bytes[6];
    batch_arrays(n, rows, pages, which, bytes);
    for (int i = 0; i < 6; i++) r->comm->broadcast(r->comm->ctx, r->arr[which[i]].dev, bytes[i]);
}

void runner_release_followers(runner *r)
{
    if (tp_group(r) && r->comm->rank == 0 && !reserve_batch(r, 0, 0, 0, 0, 0))
        broadcast_batch(r, OP_STOP, 0, 0, 0, 0);
}

int runner_follow(runner *r, rh_err *e)
{
    if (!tp_group(r) || r->comm->rank == 0) return rh_fail(e, "runner: only ranks other than 0 follow");
    /* The header buffer exists before the first batch: reserve for nothing. */
    if (reserve_batch(r, 0, 0, 0, 0, 0)) return rh_fail(e, "runner: out of memory");
    staged *h = &r->arr[ST_HDR];
    r->comm->broadcast(r->comm->ctx, h->dev, HDR_WORDS * sizeof(uint32_t));
    if (!r->K->host_memory) r->K->copy_out(h->host, h->dev, HDR_WORDS * sizeof(uint32_t));
    uint32_t hdr[HDR_WORDS];
    memcpy(hdr, h->host, sizeof hdr);
    if (hdr[HDR_OP] != OP_BATCH) return 0;
    uint64_t n = hdr[HDR_N], rows = hdr[HDR_ROWS], pages = hdr[HDR_PAGES], ctx = hdr[HDR_CTX];
    if (reserve_batch(r, n, rows, 0, ctx, pages))
        return rh_fail(e, "batch of %llu tokens: out of memory for the activations", (unsigned long long)rows);
    int which[6];
    size_t bytes[6];
    batch_arrays(n, rows, pages, which, bytes);
    for (int i = 0; i < 6; i++) {
        staged *a = &r->arr[which[i]];
        r->comm->broadcast(r->comm->ctx, a->dev, bytes[i]);
        if (!r->K->host_memory) r->K->copy_out(a->host, a->dev, bytes[i]);
    }
    fwd_batch b = staged_batch(r, (uint32_t)n, rows, 0);
    run_staged(r, &b, NULL);
    return 1;
}

/* The batch's runs of consecutive sequences under one adapter, and a
 * shrink buffer for the largest rank among them. */
static int lora_segments(runner *r, const runner_seq *seqs, uint32_t n, fwd_batch *b, rh_err *e)
{
    uint32_t row = 0, k = 0, rank = 0;
    for (uint32_t i = 0; i < n; i++) {
        const runner_lora *h = seqs[i].lora;
        if (h) {
            if (k && r->segs[k - 1].w == &h->w && r->segs[k - 1].row0 + r->segs[k - 1].rows == row) {
                r->segs[k - 1].rows += seqs[i].n_new;
            } else {
                if (k == r->cap_segs) {
                    uint32_t cap = r->cap_segs ? r->cap_segs * 2 : 16;
                    fwd_lora_seg *s = realloc(r->segs, cap * sizeof *s);
                    if (!s) return rh_fail(e, "runner: out of memory");
                    r->segs = s;
                    r->cap_segs = cap;
                }
                r->segs[k++] = (fwd_lora_seg){row, seqs[i].n_new, &h->w};
            }
            if (h->w.rank > rank) rank = h->w.rank;
        }
        row += seqs[i].n_new;
    }
    b->lora = r->segs;
    b->n_lora = k;
    if (!k) return 0;
    if (tp_group(r)) return rh_fail(e, "runner: LoRA under tensor parallel is not served");
    uint64_t need = (uint64_t)row * rank;
    if (need > r->lora_u_cap) {
        if (r->buf.lora_u) r->K->free(r->buf.lora_u);
        r->buf.lora_u = r->K->alloc(need * sizeof(float));
        r->lora_u_cap = r->buf.lora_u ? need : 0;
        if (!r->buf.lora_u) return rh_fail(e, "runner: out of memory for LoRA's activations");
    }
    return 0;
}

int runner_forward(runner *r, const runner_seq *seqs, uint32_t n, const float **logits, rh_err *e)
{
    *logits = NULL;
    if (!n) return 0;
    uint64_t rows = 0, lrows = 0, ctx = 0, pages = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (check_seq(r, &seqs[i], i, e)) return -1;
        uint64_t end = (uint64_t)seqs[i].start + seqs[i].n_new;
        rows += seqs[i].n_new;
        lrows += seqs[i].n_logits;
        pages += (end + r->page_size - 1) / r->page_size;
        if (end > ctx) ctx = end;
    }
    if (rows > UINT32_MAX || pages > UINT32_MAX) return rh_fail(e, "batch of %llu tokens is too large", (unsigned long long)rows);
    if (tp_group(r) && r->comm->rank != 0) return rh_fail(e, "runner: rank %u follows rank 0 (runner_follow)", r->comm->rank);
    const model_config *c = r->c;
    if (reserve_batch(r, n, rows, lrows, ctx, pages))
        return rh_fail(e, "batch of %llu tokens: out of memory for the activations", (unsigned long long)rows);

    int32_t *tok = r->arr[ST_TOKENS].host;
    uint32_t *pos = r->arr[ST_POS].host, *row0 = r->arr[ST_ROW0].host, *start = r->arr[ST_START].host;
    uint32_t *pt0 = r->arr[ST_PT0].host, *pg = r->arr[ST_PAGES].host, *lr = r->arr[ST_LROWS].host;
    uint32_t row = 0, pt = 0, li = 0;
    for (uint32_t i = 0; i < n; i++) {
        const runner_seq *s = &seqs[i];
        row0[i] = row;
        start[i] = s->start;
        pt0[i] = pt;
        uint32_t need = (uint32_t)(((uint64_t)s->start + s->n_new + r->page_size - 1) / r->page_size);
        memcpy(pg + pt, s->pages, need * sizeof *pg);
        pt += need;
        for (uint32_t t = 0; t < s->n_new; t++) {
            tok[row + t] = s->tokens[t];
            pos[row + t] = s->start + t;
        }
        for (uint32_t t = s->n_new - s->n_logits; t < s->n_new; t++) lr[li++] = row + t;
        row += s->n_new;
    }
    row0[n] = row;
    pt0[n] = pt;
    int which[6];
    size_t bytes[6];
    batch_arrays(n, rows, pages, which, bytes);
    for (int i = 0; i < 6; i++) staged_upload(r, &r->arr[which[i]], bytes[i]);
    staged_upload(r, &r->arr[ST_LROWS], lrows * sizeof(uint32_t));
    if (tp_group(r)) broadcast_batch(r, OP_BATCH, n, rows, pages, ctx);

    fwd_batch b = staged_batch(r, n, rows, lrows);
    if (lora_segments(r, seqs, n, &b, e) < 0) return -1;
    run_staged(r, &b, b.n_lora ? NULL : graph_for(r, seqs, n, rows, lrows, ctx));
    if (!r->K->host_memory && lrows)
        r->K->copy_out(r->host_logits, r->buf.logits, (size_t)lrows * c->vocab_size * sizeof(float));
    *logits = r->host_logits;
    return 0;
}

int32_t runner_sample(runner *r, const float *row, const kern_sampling *p, uint64_t *rng)
{
    return r->K->sample(row, r->m->cfg.vocab_size, p, rng, r->cand);
}

int runner_sampling_check(const kern_sampling *p, rh_err *e)
{
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return rh_fail(e, "temperature: %g must be a finite number >= 0", (double)p->temperature);
    if (!(p->top_p > 0) || p->top_p > 1) return rh_fail(e, "top_p: %g must be in (0, 1]", (double)p->top_p);
    return 0;
}
