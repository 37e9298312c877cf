/* test_engine.c — the engine's results against a second computation: every
 * request's tokens against the same prompt generated alone (greedy and
 * seeded sampling; with chunking, mixed batches, both schedulers, retraction
 * and recompute, prefix reuse, drafts accepted or rejected), step records
 * against the requests' token counts, and the clock's readings against the
 * step times. Also stops, aborts, refused requests and pool sizing. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_helpers.h"

#define MAXR 16
#define MAXT 64

typedef struct out_rec {
    int32_t tokens[MAXT];
    uint32_t n;
    int admitted, finished, aborted, finish;
    uint32_t plen;
    uint32_t cached, retractions, spec_proposed, spec_accepted;
    /* What prefills compute: at each admission, prompt + outputs so far -
     * cached; an admission retracted before its last chunk ran computed
     * part of that, one that sampled computed all of it. */
    uint64_t admission, computed, interrupted;
    uint32_t prefills_sampled;
    int sampled;               /* the current admission has sampled */
} out_rec;

typedef struct harness {
    engine *g;
    out_rec out[MAXR];
    uint64_t steps, prefill_tokens, decode_tokens, spec_proposed, spec_accepted, retractions, finished;
    int inconsistent;          /* an event whose tokens disagree with its output */
    int64_t abort_on_token;    /* abort this id from inside the hook at its first token; -1: none */
    int add_in_hook;           /* try engine_add from the hook; result kept */
    int add_in_hook_rc;
    double clock;              /* the fake clock's reading */
    int use_fake_clock;
    int step_clock_bad;        /* a step record whose times are not the fake clock's */
} harness;

static void on_event(void *ctx, const engine_event *ee)
{
    harness *h = ctx;
    out_rec *o = ee->user;
    switch (ee->ev.kind) {
    case CORE_EV_ADMITTED:
        o->admitted++;
        o->cached = ee->ev.cached_tokens;
        o->admission = o->plen + o->n - ee->ev.cached_tokens;
        o->sampled = 0;
        break;
    case CORE_EV_RETRACTED:
        if (!o->sampled) o->interrupted += o->admission;
        break;
    case CORE_EV_TOKENS:
        if (!o->sampled) {
            o->sampled = 1;
            o->computed += o->admission;
            o->prefills_sampled++;
        }
        for (uint32_t i = 0; i < ee->ev.n_tokens && o->n < MAXT; i++) o->tokens[o->n++] = ee->tokens[i];
        if (o->n != ee->ev.output_len || memcmp(o->tokens, ee->output, o->n * sizeof *o->tokens)) h->inconsistent++;
        o->spec_proposed += ee->ev.spec_proposed;
        o->spec_accepted += ee->ev.spec_accepted;
        if (h->abort_on_token >= 0 && (uint64_t)h->abort_on_token == ee->ev.id) {
            CU_ASSERT_EQUAL(engine_abort(h->g, ee->ev.id), 0);
            h->abort_on_token = -1;
        }
        if (h->add_in_hook) {
            int32_t p[2] = {1, 2};
            engine_request r = {.id = 999, .prompt = p, .prompt_len = 2, .max_tokens = 1, .sampling = {0, 1, 0}};
            rh_err e;
            h->add_in_hook_rc = engine_add(h->g, &r, 0, &e);
            h->add_in_hook = 0;
        }
        break;
    case CORE_EV_FINISHED:
        o->finished++;
        o->finish = ee->ev.finish;
        o->retractions = ee->ev.retractions;
        h->finished++;
        break;
    case CORE_EV_ABORTED:
        o->aborted++;
        o->finish = ee->ev.finish;
        break;
    default:
        break;
    }
}

static void on_step(void *ctx, const tr_step *s)
{
    harness *h = ctx;
    h->steps++;
    h->prefill_tokens += s->prefill_tokens;
    h->decode_tokens += s->decode_tokens;
    h->spec_proposed += s->spec_proposed;
    h->spec_accepted += s->spec_accepted;
    h->retractions += s->retractions;
    if (h->use_fake_clock) {
        /* The clock advances by 1 per reading: a step reads it once before
         * scheduling and once before committing, never in between. */
        if (s->start != floor(s->start) || s->duration != 1.0) h->step_clock_bad++;
    }
    if (!(s->duration >= 0) || !(s->sched_time >= 0)) h->step_clock_bad++;
}

static double fake_clock(void *ctx)
{
    harness *h = ctx;
    return h->clock++;
}

static engine_config base_config(const model *m, harness *h)
{
    engine_config c;
    engine_config_default(&c);
    c.m = m;
    c.core.max_total_tokens = 8192;
    c.core.chunked_prefill_size = 64;
    c.hooks = (engine_hooks){.ctx = h, .on_event = on_event, .on_step = on_step};
    if (h->use_fake_clock) {
        c.clock = fake_clock;
        c.clock_ctx = h;
    }
    return c;
}

static engine *start(harness *h, const engine_config *c)
{
    rh_err e;
    h->g = engine_new(c, &e);
    if (!h->g) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(h->g != NULL);
    return h->g;
}

static void add(harness *h, uint64_t id, const int32_t *prompt, uint32_t n, uint32_t max_tokens, kern_sampling sp,
                uint64_t seed)
{
    engine_request r = {.id = id, .prompt = prompt, .prompt_len = n, .max_tokens = max_tokens, .sampling = sp,
                        .seed = seed, .ignore_eos = true, .user = &h->out[id]};
    h->out[id].plen = n;
    rh_err e;
    int rc = engine_add(h->g, &r, engine_now(h->g), &e);
    if (rc) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(rc == 0);
}

static void run_all(harness *h)
{
    rh_err e;
    int rc;
    while ((rc = engine_step(h->g, &e)) > 0) {}
    if (rc < 0) printf("\n  %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(engine_idle(h->g));
    CU_ASSERT_EQUAL(core_check(engine_core(h->g), &e), 0);
}

/* ---- a fixed workload and its references ---- */

#define NREQ 8
static const uint32_t plen[NREQ] = {5, 17, 33, 64, 100, 150, 7, 250};
static const uint32_t nout[NREQ] = {12, 8, 16, 5, 10, 3, 20, 6};
static int32_t prompts[NREQ][256];

static void make_prompts(uint32_t vocab)
{
    for (uint32_t i = 0; i < NREQ; i++) eh_random_prompt(1000 + i, vocab, prompts[i], plen[i]);
}

static const kern_sampling greedy = {0, 1, 0};
static const kern_sampling sampled = {0.9f, 0.95f, 50};

static void references(const model *m, kern_sampling sp, int32_t ref[NREQ][MAXT])
{
    for (uint32_t i = 0; i < NREQ; i++)
        CU_ASSERT_EQUAL_FATAL(eh_reference(m, prompts[i], plen[i], sp, 77 + i, nout[i], ref[i]), nout[i]);
}

/* Adds half the workload, runs two steps, adds the rest, runs to the end: so
 * batches mix prefill chunks, decodes and late arrivals. */
static void run_workload(harness *h, kern_sampling sp)
{
    for (uint32_t i = 0; i < NREQ / 2; i++) add(h, i, prompts[i], plen[i], nout[i], sp, 77 + i);
    rh_err e;
    CU_ASSERT_EQUAL(engine_step(h->g, &e), 1);
    CU_ASSERT_EQUAL(engine_step(h->g, &e), 1);
    for (uint32_t i = NREQ / 2; i < NREQ; i++) add(h, i, prompts[i], plen[i], nout[i], sp, 77 + i);
    run_all(h);
}

static uint32_t compare_all(const char *what, harness *h, int32_t ref[NREQ][MAXT])
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < NREQ; i++) {
        bad += eh_mismatches(what, i, h->out[i].tokens, h->out[i].n, ref[i], nout[i]);
        CU_ASSERT_EQUAL(h->out[i].finished, 1);
        CU_ASSERT_EQUAL(h->out[i].finish, TR_FINISH_LENGTH);
    }
    CU_ASSERT_EQUAL(h->inconsistent, 0);
    return bad;
}

/* Step records add up to the requests: an admission computes the prompt and
 * outputs so far minus what the cache served (part of it when retracted
 * before its last chunk), and its last chunk samples a token; every other
 * output token comes from a decode. */
static void check_token_sums(harness *h, uint32_t n)
{
    uint64_t computed = 0, interrupted = 0, decodes = 0;
    for (uint32_t i = 0; i < n; i++) {
        computed += h->out[i].computed;
        interrupted += h->out[i].interrupted;
        decodes += h->out[i].n - h->out[i].prefills_sampled;
    }
    if (h->prefill_tokens < computed || h->prefill_tokens > computed + interrupted ||
        (h->spec_proposed == 0 && h->decode_tokens != decodes))
        printf("\n    steps computed %llu prefill and %llu decode tokens; requests say %llu (+ up to %llu) and %llu\n",
               (unsigned long long)h->prefill_tokens, (unsigned long long)h->decode_tokens,
               (unsigned long long)computed, (unsigned long long)interrupted, (unsigned long long)decodes);
    if (interrupted == 0) CU_ASSERT_EQUAL(h->prefill_tokens, computed);
    CU_ASSERT(h->prefill_tokens >= computed && h->prefill_tokens <= computed + interrupted);
    if (h->spec_proposed == 0) CU_ASSERT_EQUAL(h->decode_tokens, decodes);
    CU_ASSERT_EQUAL(h->finished, n);
}

static void test_batched_greedy_equals_alone(void)
{
    model *m = eh_tiny_model();
    make_prompts(m->cfg.vocab_size);
    static int32_t ref[NREQ][MAXT];
    references(m, greedy, ref);
    const char *names[] = {"sglang", "sglang mixed", "vllm", "vllm unchunked"};
    for (int v = 0; v < 4; v++) {
        harness h = {.abort_on_token = -1};
        engine_config c = base_config(m, &h);
        c.core.enable_mixed_chunk = v == 1;
        c.core.preset = v >= 2 ? CORE_PRESET_VLLM : CORE_PRESET_SGLANG;
        if (v == 3) c.core.chunked_prefill_size = -1;
        start(&h, &c);
        run_workload(&h, greedy);
        CU_ASSERT_EQUAL(compare_all(names[v], &h, ref), 0);
        check_token_sums(&h, NREQ);
        CU_ASSERT(h.steps > NREQ);
        engine_free(h.g);
    }
    model_free(m);
}

/* Tensor parallel on the CPU backend: the ranks are threads, each with a
 * slice of the heads and MLP, summing partial products after attention and
 * the MLP. The tokens must be those of the request alone on one rank. */
static void test_tensor_parallel_equals_alone(void)
{
    model *m = eh_tiny_model();
    make_prompts(m->cfg.vocab_size);
    static int32_t ref[NREQ][MAXT];
    references(m, greedy, ref);
    for (uint32_t tp = 2; tp <= 4; tp *= 2) {
        harness h = {.abort_on_token = -1};
        engine_config c = base_config(m, &h);
        c.tp.tp_size = tp;
        start(&h, &c);
        run_workload(&h, greedy);
        char what[32];
        snprintf(what, sizeof what, "tp %u", tp);
        CU_ASSERT_EQUAL(compare_all(what, &h, ref), 0);
        check_token_sums(&h, NREQ);
        tr_header hd;
        tr_header_init(&hd);
        CU_ASSERT_EQUAL(engine_describe(h.g, &hd), 0);
        const char *v = tr_header_get(&hd, "tp-size");
        CU_ASSERT(v && (uint32_t)atoi(v) == tp);
        tr_header_free(&hd);
        engine_free(h.g);
    }
    model_free(m);
}

static void expect_tp_refused(const model *m, tp_config t, const char *words)
{
    harness h = {.abort_on_token = -1};
    engine_config c = base_config(m, &h);
    c.tp = t;
    rh_err e = {{0}};
    engine *g = engine_new(&c, &e);
    CU_ASSERT_PTR_NULL(g);
    if (g) engine_free(g);
    if (!strstr(e.msg, words)) printf("\n    said '%s', wanted '%s'\n", e.msg, words);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, words));
}

static void test_tensor_parallel_refusals(void)
{
    model *m = eh_tiny_model();
    /* tiny-llama has 4 KV heads: 3 ranks cannot split them. */
    expect_tp_refused(m, (tp_config){3, 1, 0, NULL}, "--tp-size 3 must divide");
    expect_tp_refused(m, (tp_config){2, 2, 0, "127.0.0.1:29500"}, "several nodes need --backend cuda");
    expect_tp_refused(m, (tp_config){4, 3, 0, NULL}, "multiple of --nnodes 3");
    expect_tp_refused(m, (tp_config){2, 2, 2, NULL}, "--node-rank 2 must be below --nnodes 2");
    expect_tp_refused(m, (tp_config){0, 1, 0, NULL}, "--tp-size must be at least 1");
    /* The flags, as every engine front parses them. */
    engine_config c;
    engine_config_default(&c);
    rh_err e;
    CU_ASSERT_EQUAL(engine_flag_set(&c, "tp-size", "4", &e), 1);
    CU_ASSERT_EQUAL(c.tp.tp_size, 4);
    CU_ASSERT_EQUAL(engine_flag_set(&c, "nnodes", "2", &e), 1);
    CU_ASSERT_EQUAL(engine_flag_set(&c, "node-rank", "1", &e), 1);
    CU_ASSERT_EQUAL(engine_flag_set(&c, "dist-init-addr", "10.0.0.1:29500", &e), 1);
    CU_ASSERT_EQUAL(c.tp.nnodes, 2);
    CU_ASSERT_EQUAL(c.tp.node_rank, 1);
    CU_ASSERT_STRING_EQUAL(c.tp.dist_init_addr, "10.0.0.1:29500");
    CU_ASSERT_EQUAL(engine_flag_set(&c, "tp-size", "0", &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--tp-size"));
    CU_ASSERT_EQUAL(engine_flag_set(&c, "dist-init-addr", "nowhere", &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "HOST:PORT"));
    CU_ASSERT_EQUAL(engine_flag_set(&c, "node-rank", "x", &e), -1);
    CU_ASSERT_EQUAL(engine_flag_set(&c, "backend", "tpu", &e), -1);
    CU_ASSERT_EQUAL(engine_flag_set(&c, "chunked-prefill-size", "8", &e), 0);
    /* Each flag sets its own field and only that one: every flag of the
     * table, each a fresh config compared field by field with a default. */
    static const struct { const char *flag, *value; } each[] = {
        {"model", "tiny-llama"}, {"weights", "w.safetensors"}, {"weight-seed", "7"}, {"backend", "cpu"},
        {"mem-fraction-static", "0.5"}, {"tp-size", "3"}, {"tp", "5"}, {"nnodes", "6"}, {"node-rank", "2"},
        {"dist-init-addr", "h:1"},
    };
    for (size_t i = 0; i < sizeof each / sizeof each[0]; i++) {
        engine_config d, x;
        engine_config_default(&d);
        engine_config_default(&x);
        CU_ASSERT_EQUAL(engine_flag_takes_value(each[i].flag), 1);
        CU_ASSERT_EQUAL_FATAL(engine_flag_set(&x, each[i].flag, each[i].value, &e), 1);
        int changed = (x.model != d.model) + (x.weights != d.weights) + (x.weight_seed != d.weight_seed) +
                      (x.kernels != d.kernels) + (x.mem_fraction != d.mem_fraction) + (x.tp.tp_size != d.tp.tp_size) +
                      (x.tp.nnodes != d.tp.nnodes) + (x.tp.node_rank != d.tp.node_rank) +
                      (x.tp.dist_init_addr != d.tp.dist_init_addr);
        CU_ASSERT_EQUAL(changed, 1);
        if (changed != 1) printf("\n  --%s %s changed %d fields\n", each[i].flag, each[i].value, changed);
    }
    engine_config x;
    engine_config_default(&x);
    CU_ASSERT(engine_flag_set(&x, "weight-seed", "7", &e) == 1 && x.weight_seed == 7);
    CU_ASSERT(engine_flag_set(&x, "mem-fraction-static", "0.5", &e) == 1 && x.mem_fraction == 0.5);
    CU_ASSERT(engine_flag_set(&x, "tp", "5", &e) == 1 && x.tp.tp_size == 5);
    CU_ASSERT(engine_flag_set(&x, "nnodes", "6", &e) == 1 && x.tp.nnodes == 6 && x.tp.node_rank == 0);
    CU_ASSERT(engine_flag_set(&x, "backend", "cpu", &e) == 1 && x.kernels == kern_cpu());
    CU_ASSERT_EQUAL(engine_flag_set(&x, "mem-fraction-static", "1.5", &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--mem-fraction-static"));
    CU_ASSERT_EQUAL(engine_flag_set(&x, "nnodes", "0", &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--nnodes"));
    CU_ASSERT_PTR_NOT_NULL(strstr(engine_flags_help(), "--node-rank K"));
    CU_ASSERT_PTR_NOT_NULL(strstr(engine_flags_help(), "--dist-init-addr HOST:PORT"));
    /* A node other than 0 follows; it never runs a scheduler of its own. */
    c.m = m;
    c.tp = (tp_config){2, 1, 0, NULL};
    CU_ASSERT_EQUAL(engine_follow(&c, &e), -1);
    model_free(m);
}

static void test_sampled_streams_equal_alone(void)
{
    model *m = eh_tiny_model();
    make_prompts(m->cfg.vocab_size);
    static int32_t ref[NREQ][MAXT];
    references(m, sampled, ref);
    harness h = {.abort_on_token = -1};
    engine_config c = base_config(m, &h);
    c.core.enable_mixed_chunk = true;
    start(&h, &c);
    run_workload(&h, sampled);
    CU_ASSERT_EQUAL(compare_all("sampled", &h, ref), 0);
    /* Sampling really happened: some request differs from its greedy run. */
    static int32_t gref[NREQ][MAXT];
    references(m, greedy, gref);
    uint32_t differ = 0;
    for (uint32_t i = 0; i < NREQ; i++) differ += memcmp(gref[i], ref[i], nout[i] * sizeof(int32_t)) != 0;
    CU_ASSERT(differ > 0);
    engine_free(h.g);
    model_free(m);
}

/* A pool too small for every request at full length: the schedulers retract
 * (or preempt) and recompute prompt and outputs so far, and the tokens must
 * not change. Long outputs on short prompts make decode outgrow the pool. */
static void test_retraction_recomputes_the_same_tokens(void)
{
    enum { N = 8, OUT = 60 };
    model *m = eh_tiny_model();
    static int32_t p[N][40], ref[N][MAXT];
    for (uint32_t i = 0; i < N; i++) {
        eh_random_prompt(300 + i, m->cfg.vocab_size, p[i], 20 + i);
        CU_ASSERT_EQUAL_FATAL(eh_reference(m, p[i], 20 + i, greedy, 0, OUT, ref[i]), OUT);
    }
    for (int v = 0; v < 2; v++) {
        harness h = {.abort_on_token = -1};
        engine_config c = base_config(m, &h);
        c.core.preset = v ? CORE_PRESET_VLLM : CORE_PRESET_SGLANG;
        c.core.max_total_tokens = 20 * 16;      /* 20 pages; the requests end needing 44 */
        c.core.schedule_conservativeness = 0.05;
        start(&h, &c);
        for (uint32_t i = 0; i < N; i++) add(&h, i, p[i], 20 + i, OUT, greedy, 0);
        run_all(&h);
        uint32_t bad = 0;
        for (uint32_t i = 0; i < N; i++) {
            bad += eh_mismatches(v ? "vllm preempting" : "sglang retracting", i, h.out[i].tokens, h.out[i].n, ref[i], OUT);
            CU_ASSERT_EQUAL(h.out[i].finish, TR_FINISH_LENGTH);
        }
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT_EQUAL(h.inconsistent, 0);
        core_stats st;
        core_get_stats(engine_core(h.g), &st);
        CU_ASSERT(st.retractions > 0);
        CU_ASSERT_EQUAL(h.retractions, st.retractions);
        uint32_t retracted = 0;
        for (uint32_t i = 0; i < N; i++) retracted += h.out[i].retractions;
        CU_ASSERT_EQUAL(retracted, st.retractions);
        check_token_sums(&h, N);
        engine_free(h.g);
    }
    model_free(m);
}

/* A second request sharing 80 prompt tokens with a finished one reuses 5
 * cached pages and still produces what it produces alone. */
static void test_prefix_reuse_keeps_tokens(void)
{
    model *m = eh_tiny_model();
    int32_t a[100], b[120];
    eh_random_prompt(5, m->cfg.vocab_size, a, 100);
    memcpy(b, a, 80 * sizeof *b);
    eh_random_prompt(6, m->cfg.vocab_size, b + 80, 40);
    int32_t ra[MAXT], rb[MAXT];
    CU_ASSERT_EQUAL_FATAL(eh_reference(m, a, 100, greedy, 0, 10, ra), 10);
    CU_ASSERT_EQUAL_FATAL(eh_reference(m, b, 120, greedy, 0, 10, rb), 10);
    for (int disable = 0; disable < 2; disable++) {
        harness h = {.abort_on_token = -1};
        engine_config c = base_config(m, &h);
        c.core.disable_radix_cache = disable;
        start(&h, &c);
        add(&h, 0, a, 100, 10, greedy, 0);
        run_all(&h);
        add(&h, 1, b, 120, 10, greedy, 0);
        run_all(&h);
        CU_ASSERT_EQUAL(h.out[0].cached, 0);
        CU_ASSERT_EQUAL(h.out[1].cached, disable ? 0 : 80);
        CU_ASSERT_EQUAL(eh_mismatches("prefix reuse", 0, h.out[0].tokens, h.out[0].n, ra, 10), 0);
        CU_ASSERT_EQUAL(eh_mismatches("prefix reuse", 1, h.out[1].tokens, h.out[1].n, rb, 10), 0);
        CU_ASSERT_EQUAL(h.prefill_tokens, disable ? 220 : 140);
        engine_free(h.g);
    }
    model_free(m);
}

/* A prompt's pages evicted from a 12-page pool by two others come back from
 * the host tier (--enable-hierarchical-cache) with their K and V copied
 * out and in again: its second turn computes only what is new, under every
 * write policy, and still produces what it produces alone. Without the
 * tier the same turn recomputes all of it. */
static void test_host_tier_keeps_tokens(void)
{
    model *m = eh_tiny_model();
    int32_t a[100], o1[100], o2[100], b[120];
    eh_random_prompt(7, m->cfg.vocab_size, a, 100);
    eh_random_prompt(8, m->cfg.vocab_size, o1, 100);
    eh_random_prompt(9, m->cfg.vocab_size, o2, 100);
    memcpy(b, a, 96 * sizeof *b);
    eh_random_prompt(10, m->cfg.vocab_size, b + 96, 24);
    int32_t rb[MAXT];
    CU_ASSERT_EQUAL_FATAL(eh_reference(m, b, 120, greedy, 0, 10, rb), 10);
    for (int policy = -1; policy < 3; policy++) {
        harness h = {.abort_on_token = -1};
        engine_config c = base_config(m, &h);
        c.core.max_total_tokens = 12 * 16;
        c.core.enable_hierarchical_cache = policy >= 0;
        c.core.hicache_write_policy = (core_hicache_write)(policy >= 0 ? policy : 0);
        c.core.hicache_ratio = 4;
        start(&h, &c);
        CU_ASSERT_PTR_NOT_NULL_FATAL(h.g);
        add(&h, 0, a, 100, 10, greedy, 0);
        run_all(&h);
        if (policy == CORE_HICACHE_WRITE_THROUGH_SELECTIVE) {   /* a second use, so it is copied */
            add(&h, 3, a, 100, 4, greedy, 0);
            run_all(&h);
        }
        add(&h, 1, o1, 100, 10, greedy, 0);
        run_all(&h);
        add(&h, 2, o2, 100, 10, greedy, 0);
        run_all(&h);
        uint64_t before = h.prefill_tokens;
        add(&h, 4, b, 120, 10, greedy, 0);
        run_all(&h);
        CU_ASSERT_EQUAL(h.out[4].cached, policy >= 0 ? 96 : 0);
        CU_ASSERT_EQUAL(h.prefill_tokens - before, policy >= 0 ? 24 : 120);
        CU_ASSERT_EQUAL(eh_mismatches("host tier", 4, h.out[4].tokens, h.out[4].n, rb, 10), 0);
        engine_free(h.g);
    }
    model_free(m);
}

/* ---- drafts ---- */

typedef struct drafter_state {
    int32_t (*ref)[MAXT];      /* each request's reference output */
    int wrong;                 /* propose a token that is never right */
    uint32_t vocab, calls;
} drafter_state;

static uint32_t propose(void *ctx, uint64_t id, const int32_t *tokens, uint32_t n, uint32_t k, int32_t *out)
{
    drafter_state *d = ctx;
    (void)tokens;
    d->calls++;
    uint32_t done = n - plen[id];            /* outputs so far */
    uint32_t j = 0;
    for (; j < k && done + j < nout[id]; j++) {
        int32_t t = d->ref[id][done + j];
        out[j] = d->wrong ? (int32_t)((uint32_t)(t + 1) % d->vocab) : t;
    }
    return j;
}

static void test_drafts_verified_without_changing_tokens(void)
{
    model *m = eh_tiny_model();
    make_prompts(m->cfg.vocab_size);
    static int32_t ref[NREQ][MAXT];
    references(m, greedy, ref);
    uint64_t plain_steps = 0;
    for (int v = 0; v < 3; v++) {           /* no drafts, right drafts, wrong drafts */
        harness h = {.abort_on_token = -1};
        engine_config c = base_config(m, &h);
        drafter_state ds = {ref, v == 2, m->cfg.vocab_size, 0};
        spec_seam d = {.ctx = &ds, .propose = propose};
        if (v) {
            c.core.spec_steps = 3;
            c.drafter = &d;
        }
        start(&h, &c);
        for (uint32_t i = 0; i < NREQ; i++) add(&h, i, prompts[i], plen[i], nout[i], greedy, 77 + i);
        run_all(&h);
        CU_ASSERT_EQUAL(compare_all(v == 0 ? "no drafts" : v == 1 ? "right drafts" : "wrong drafts", &h, ref), 0);
        uint32_t proposed = 0, accepted = 0;
        for (uint32_t i = 0; i < NREQ; i++) {
            proposed += h.out[i].spec_proposed;
            accepted += h.out[i].spec_accepted;
        }
        CU_ASSERT_EQUAL(proposed, h.spec_proposed);
        CU_ASSERT_EQUAL(accepted, h.spec_accepted);
        if (v == 0) {
            plain_steps = h.steps;
            CU_ASSERT_EQUAL(proposed, 0);
        } else if (v == 1) {
            CU_ASSERT(proposed > 0);
            CU_ASSERT_EQUAL(accepted, proposed);
            CU_ASSERT(h.steps < plain_steps);
        } else {
            CU_ASSERT(proposed > 0);
            CU_ASSERT_EQUAL(accepted, 0);
            CU_ASSERT_EQUAL(h.steps, plain_steps);
        }
        engine_free(h.g);
    }
    model_free(m);
}

/* ---- stops, aborts, refusals ---- */

static void test_stop_ids_and_eos(void)
{
    model *m = eh_tiny_model();
    int32_t p[40], ref[MAXT];
    eh_random_prompt(9, m->cfg.vocab_size, p, 40);
    CU_ASSERT_EQUAL_FATAL(eh_reference(m, p, 40, greedy, 0, 20, ref), 20);
    int32_t stop = ref[5];
    uint32_t first = 0;
    while (ref[first] != stop) first++;
    /* A stop id, then the model's EOS (a model whose eos is that id). */
    model_config mc = m->cfg;
    mc.eos_token_id = stop;
    rh_err e;
    model *m2 = model_new_dummy(&mc, EH_WEIGHT_SEED, 0, &e);
    CU_ASSERT_FATAL(m2 != NULL);
    for (int v = 0; v < 3; v++) {
        harness h = {.abort_on_token = -1};
        engine_config c = base_config(v ? m2 : m, &h);
        start(&h, &c);
        engine_request r = {.id = 0, .prompt = p, .prompt_len = 40, .max_tokens = 20, .sampling = greedy,
                            .ignore_eos = v != 1, .user = &h.out[0]};
        if (v == 0) {
            r.stop_ids = &stop;
            r.n_stop_ids = 1;
        }
        CU_ASSERT_EQUAL_FATAL(engine_add(h.g, &r, 0, &e), 0);
        run_all(&h);
        uint32_t want = v == 2 ? 20 : first + 1;     /* v 2: EOS ignored */
        CU_ASSERT_EQUAL(h.out[0].n, want);
        CU_ASSERT_EQUAL(h.out[0].finish, v == 2 ? TR_FINISH_LENGTH : TR_FINISH_STOP);
        CU_ASSERT_EQUAL(eh_mismatches("stop", 0, h.out[0].tokens, h.out[0].n, ref, want), 0);
        engine_free(h.g);
    }
    model_free(m2);
    model_free(m);
}

static void test_aborts_outside_and_inside_hooks(void)
{
    model *m = eh_tiny_model();
    make_prompts(m->cfg.vocab_size);
    static int32_t ref[NREQ][MAXT];
    references(m, greedy, ref);
    harness h = {.abort_on_token = 2};
    engine_config c = base_config(m, &h);
    start(&h, &c);
    for (uint32_t i = 0; i < 4; i++) add(&h, i, prompts[i], plen[i], nout[i], greedy, 77 + i);
    rh_err e;
    CU_ASSERT_EQUAL(engine_step(h.g, &e), 1);
    CU_ASSERT_EQUAL(engine_abort(h.g, 1), 0);       /* outside: at once */
    CU_ASSERT_EQUAL(h.out[1].aborted, 1);
    CU_ASSERT_EQUAL(engine_abort(h.g, 1), -1);      /* gone */
    CU_ASSERT_EQUAL(engine_abort(h.g, 12345), -1);
    h.add_in_hook = 1;
    h.add_in_hook_rc = 0;
    run_all(&h);
    CU_ASSERT_EQUAL(h.add_in_hook_rc, -1);          /* refused inside a hook */
    CU_ASSERT_EQUAL(h.out[2].aborted, 1);           /* inside: after its batch */
    CU_ASSERT_EQUAL(h.out[2].finished, 0);
    CU_ASSERT_EQUAL(h.out[2].finish, TR_FINISH_ABORT);
    CU_ASSERT(h.out[2].n >= 1 && h.out[2].n < nout[2]);
    for (uint32_t i = 0; i < 4; i += 3) {
        CU_ASSERT_EQUAL(h.out[i].finished, 1);
        CU_ASSERT_EQUAL(eh_mismatches("abort", i, h.out[i].tokens, h.out[i].n, ref[i], nout[i]), 0);
    }
    core_stats st;
    core_get_stats(engine_core(h.g), &st);
    CU_ASSERT_EQUAL(st.aborted, 2);
    CU_ASSERT_EQUAL(st.pages_used, 0);
    engine_free(h.g);
    model_free(m);
}

static void expect_refused(engine *g, const engine_request *r, const char *words)
{
    rh_err e = {{0}};
    CU_ASSERT_EQUAL(engine_add(g, r, 0, &e), -1);
    if (!strstr(e.msg, words)) printf("\n    message '%s' lacks '%s'\n", e.msg, words);
    CU_ASSERT(strstr(e.msg, words) != NULL);
}

static void test_bad_requests_are_refused(void)
{
    model *m = eh_tiny_model();
    harness h = {.abort_on_token = -1};
    engine_config c = base_config(m, &h);
    c.core.context_length = 100;
    start(&h, &c);
    int32_t p[120] = {0};
    engine_request r = {.id = 1, .prompt = p, .prompt_len = 10, .max_tokens = 5, .sampling = greedy, .user = &h.out[1]};
    p[3] = (int32_t)m->cfg.vocab_size;
    expect_refused(h.g, &r, "outside the vocabulary");
    p[3] = -1;
    expect_refused(h.g, &r, "outside the vocabulary");
    p[3] = 0;
    r.prompt_len = 96;
    expect_refused(h.g, &r, "context length 100");
    r.prompt_len = 0;
    expect_refused(h.g, &r, "prompt is empty");
    r.prompt_len = 10;
    r.max_tokens = 0;
    expect_refused(h.g, &r, "max_tokens");
    r.max_tokens = 5;
    r.sampling.top_p = 0;
    expect_refused(h.g, &r, "top_p");
    r.sampling = greedy;
    rh_err e;
    CU_ASSERT_EQUAL(engine_add(h.g, &r, 0, &e), 0);
    expect_refused(h.g, &r, "already");              /* the same id twice */
    run_all(&h);
    CU_ASSERT_EQUAL(h.out[1].n, 5);
    engine_free(h.g);
    model_free(m);
}

/* ---- pool, clock and step records ---- */

static void test_pool_sizing(void)
{
    model *m = eh_tiny_model();
    uint64_t per_token = model_kv_bytes_per_token(&m->cfg);
    harness h = {.abort_on_token = -1};
    rh_err e;
    /* Given: exactly that many pages. */
    engine_config c = base_config(m, &h);
    c.core.max_total_tokens = 1000;
    start(&h, &c);
    CU_ASSERT_EQUAL(core_get_config(engine_core(h.g))->total_pages, 1000 / 16);
    CU_ASSERT_EQUAL(core_get_config(engine_core(h.g))->context_length, m->cfg.max_position);
    engine_free(h.g);
    /* From memory: the fraction of the limit, in whole pages. */
    c.core.max_total_tokens = 0;
    c.mem_limit = 64u << 20;
    c.mem_fraction = 0.5;
    start(&h, &c);
    uint64_t want = (32u << 20) / per_token / 16;
    CU_ASSERT_EQUAL(core_get_config(engine_core(h.g))->total_pages, want);
    engine_free(h.g);
    /* ... never more than every running request at full context. */
    c.core.max_running_requests = 2;
    c.core.context_length = 512;
    start(&h, &c);
    CU_ASSERT_EQUAL(core_get_config(engine_core(h.g))->total_pages, 2 * 512 / 16);
    engine_free(h.g);
    /* Too little memory, or a pool larger than the limit: one message. */
    c.mem_limit = 1000;
    CU_ASSERT_PTR_NULL(engine_new(&c, &e));
    CU_ASSERT(strstr(e.msg, "no room for a KV pool") != NULL);
    c.core.max_total_tokens = 1u << 20;
    CU_ASSERT_PTR_NULL(engine_new(&c, &e));
    CU_ASSERT(strstr(e.msg, "KV pool") != NULL);
    /* An unknown model by name. */
    c.m = NULL;
    c.model = "no-such-model";
    CU_ASSERT_PTR_NULL(engine_new(&c, &e));
    CU_ASSERT(strstr(e.msg, "no-such-model") != NULL);
    model_free(m);
}

/* The engine reads the caller's clock exactly twice per step; the step
 * records carry those readings. By name, the engine loads its own model. */
static void test_clock_and_model_by_name(void)
{
    harness h = {.abort_on_token = -1, .use_fake_clock = 1};
    engine_config c = base_config(NULL, &h);
    c.model = "tiny-llama";
    c.weight_seed = EH_WEIGHT_SEED;
    start(&h, &c);
    model *m = eh_tiny_model();
    make_prompts(m->cfg.vocab_size);
    static int32_t ref[NREQ][MAXT];
    references(m, greedy, ref);
    for (uint32_t i = 0; i < NREQ; i++) add(&h, i, prompts[i], plen[i], nout[i], greedy, 77 + i);
    run_all(&h);
    CU_ASSERT_EQUAL(compare_all("own model", &h, ref), 0);
    CU_ASSERT_EQUAL(h.step_clock_bad, 0);
    CU_ASSERT_STRING_EQUAL(engine_model(h.g)->name, "tiny-llama");
    CU_ASSERT(strncmp(engine_hardware(h.g), "cpu", 3) == 0);
    tr_header hd;
    tr_header_init(&hd);
    CU_ASSERT_EQUAL(engine_describe(h.g, &hd), 0);
    CU_ASSERT_STRING_EQUAL(hd.model, "tiny-llama");
    CU_ASSERT_STRING_EQUAL(tr_header_get(&hd, "max-total-tokens"), "8192");
    CU_ASSERT_STRING_EQUAL(tr_header_get(&hd, "chunked-prefill-size"), "64");
    tr_header_free(&hd);
    engine_free(h.g);
    model_free(m);
}

void register_test_engine(void)
{
    CU_pSuite s = CU_add_suite("engine", NULL, NULL);
    CU_add_test(s, "batched greedy tokens equal each request alone", test_batched_greedy_equals_alone);
    CU_add_test(s, "seeded sampling streams equal each request alone", test_sampled_streams_equal_alone);
    CU_add_test(s, "tensor parallel over 2 and 4 CPU ranks: tokens equal alone", test_tensor_parallel_equals_alone);
    CU_add_test(s, "tensor parallel: bad sizes and flags refused", test_tensor_parallel_refusals);
    CU_add_test(s, "retraction and preemption recompute the same tokens", test_retraction_recomputes_the_same_tokens);
    CU_add_test(s, "a reused prefix keeps the tokens", test_prefix_reuse_keeps_tokens);
    CU_add_test(s, "prefixes demoted to the host tier load back and keep the tokens", test_host_tier_keeps_tokens);
    CU_add_test(s, "drafts are verified without changing tokens", test_drafts_verified_without_changing_tokens);
    CU_add_test(s, "stop ids and EOS finish a request", test_stop_ids_and_eos);
    CU_add_test(s, "aborts outside and inside hooks", test_aborts_outside_and_inside_hooks);
    CU_add_test(s, "bad requests are refused with a message", test_bad_requests_are_refused);
    CU_add_test(s, "pool sizing: given, from memory, refused", test_pool_sizing);
    CU_add_test(s, "the caller's clock times the steps; model by name", test_clock_and_model_by_name);
}
