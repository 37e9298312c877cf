/* test_spec_engine.c — speculative decoding in the engine, every result
 * checked against a second computation: greedy output with each drafter
 * (n-gram, self-speculation, a separate draft model) is token for token the
 * output of the same prompt generated alone without drafts, at batch sizes 1
 * and 16, with chunked prefill and prefix-cache hits in play; seeded
 * sampling with n-gram drafts equals sampling without; the draft and target
 * KV pools hold no leaked page after any step (core_check and the drafter's
 * own check); --speculative-disable-by-batch-size switches drafting off
 * exactly when more requests run; retraction with drafts recomputes the same
 * tokens; the counters add up to the step records. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_helpers.h"

#define NREQ 16
#define MAXT 48
#define MAXP 260

typedef struct srec {
    int32_t tokens[MAXT];
    uint32_t n, cached, proposed, accepted;
    int finished;
} srec;

typedef struct sh {
    engine *g;
    srec out[NREQ + 2];
    uint64_t steps, proposed, accepted, spec_steps_over_limit, busy_steps, drafted_steps;
    uint32_t disable_limit;    /* for the disable test: decodes above which no drafts may run */
    int inconsistent;
} sh;

static void on_event(void *ctx, const engine_event *ee)
{
    sh *h = ctx;
    srec *o = ee->user;
    if (ee->ev.kind == CORE_EV_ADMITTED && !o->n) o->cached = ee->ev.cached_tokens;
    if (ee->ev.kind == CORE_EV_TOKENS) {
        for (uint32_t i = 0; i < ee->ev.n_tokens && o->n < MAXT; i++) o->tokens[o->n++] = ee->tokens[i];
        if (o->n != ee->ev.output_len) h->inconsistent++;
        o->proposed += ee->ev.spec_proposed;
        o->accepted += ee->ev.spec_accepted;
    }
    if (ee->ev.kind == CORE_EV_FINISHED) o->finished++;
}

static void on_step(void *ctx, const tr_step *s)
{
    sh *h = ctx;
    h->steps++;
    h->proposed += s->spec_proposed;
    h->accepted += s->spec_accepted;
    if (h->disable_limit && s->decode_seqs > h->disable_limit) {
        h->busy_steps++;
        if (s->spec_proposed || s->decode_tokens != s->decode_seqs) h->spec_steps_over_limit++;
    }
    if (s->spec_proposed) h->drafted_steps++;
}

/* ---- the workload ----
 * Two warm-up requests run first; then 16 requests, of which some begin
 * with a warm-up prompt (prefix-cache hits), some repeat a short phrase
 * (n-gram lookup hits), the rest are random; lengths span several chunks. */
static int32_t warm[2][MAXP], prompts[NREQ][MAXP];
static uint32_t warm_len[2] = {120, 90}, plen[NREQ], nout[NREQ];
static int32_t ref[NREQ][MAXT], warm_ref[2][MAXT];

static void make_workload(const model *m)
{
    uint32_t vocab = m->cfg.vocab_size;
    eh_random_prompt(500, vocab, warm[0], warm_len[0]);
    eh_random_prompt(501, vocab, warm[1], warm_len[1]);
    for (uint32_t i = 0; i < NREQ; i++) {
        plen[i] = 90 + (i * 37) % 110;
        nout[i] = 8 + (i * 7) % 20;
        eh_random_prompt(600 + i, vocab, prompts[i], plen[i]);
        if (i % 4 == 0) memcpy(prompts[i], warm[(i / 4) % 2], 80 * sizeof(int32_t));   /* 5 cached pages */
        if (i % 4 == 1)
            for (uint32_t t = 3 + i % 3; t < plen[i]; t++) prompts[i][t] = prompts[i][t - (3 + i % 3)];
    }
}

/* References are computed once per sampling setting (they take a while). */
static void make_references(const model *m, kern_sampling sp)
{
    static kern_sampling done;
    static int have;
    if (have && !memcmp(&done, &sp, sizeof sp)) return;
    done = sp;
    have = 1;
    for (uint32_t w = 0; w < 2; w++)
        CU_ASSERT_EQUAL_FATAL(eh_reference(m, warm[w], warm_len[w], sp, 7, 16, warm_ref[w]), 16);
    for (uint32_t i = 0; i < NREQ; i++)
        CU_ASSERT_EQUAL_FATAL(eh_reference(m, prompts[i], plen[i], sp, 100 + i, nout[i], ref[i]), nout[i]);
}

static engine_config base(const model *m, sh *h, uint32_t batch)
{
    engine_config c;
    engine_config_default(&c);
    c.m = m;
    c.core.max_total_tokens = 16384;
    c.core.chunked_prefill_size = 64;
    c.core.max_running_requests = batch;
    c.hooks = (engine_hooks){.ctx = h, .on_event = on_event, .on_step = on_step};
    return c;
}

/* Steps to the end, checking both pools after every step. */
static void run_checked(sh *h)
{
    rh_err e;
    int rc;
    const spec_drafter *d = engine_spec_drafter(h->g);
    while ((rc = engine_step(h->g, &e)) > 0) {
        if (core_check(engine_core(h->g), &e) < 0 || (d && spec_drafter_check(d, &e) < 0)) {
            printf("\n    after step %llu: %s", (unsigned long long)h->steps, e.msg);
            CU_FAIL("pool check");
            return;
        }
    }
    if (rc < 0) printf("\n    %s", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
}

static void add(sh *h, uint32_t slot, const int32_t *p, uint32_t n, uint32_t max_tokens, kern_sampling sp,
                uint64_t seed)
{
    engine_request r = {.id = slot, .prompt = p, .prompt_len = n, .max_tokens = max_tokens, .sampling = sp,
                        .seed = seed, .ignore_eos = true, .user = &h->out[slot]};
    rh_err e;
    int rc = engine_add(h->g, &r, engine_now(h->g), &e);
    if (rc) printf("\n    %s", e.msg);
    CU_ASSERT_FATAL(rc == 0);
}

/* Runs the warm-ups, then the 16 requests; returns mismatching tokens. */
static uint32_t run_workload(sh *h, const engine_config *c, kern_sampling sp, const char *what)
{
    rh_err e;
    h->g = engine_new(c, &e);
    if (!h->g) printf("\n    %s: %s", what, e.msg);
    CU_ASSERT_FATAL(h->g != NULL);
    for (uint32_t w = 0; w < 2; w++) add(h, NREQ + w, warm[w], warm_len[w], 16, sp, 7);
    run_checked(h);
    for (uint32_t i = 0; i < NREQ; i++) add(h, i, prompts[i], plen[i], nout[i], sp, 100 + i);
    run_checked(h);
    uint32_t bad = 0;
    for (uint32_t w = 0; w < 2; w++) bad += eh_mismatches(what, NREQ + w, h->out[NREQ + w].tokens, h->out[NREQ + w].n, warm_ref[w], 16);
    for (uint32_t i = 0; i < NREQ; i++) {
        bad += eh_mismatches(what, i, h->out[i].tokens, h->out[i].n, ref[i], nout[i]);
        CU_ASSERT_EQUAL(h->out[i].finished, 1);
    }
    CU_ASSERT_EQUAL(h->inconsistent, 0);
    return bad;
}

/* The engine's counters against the step records and the requests. */
static void check_counters(sh *h)
{
    engine_spec_stats st;
    engine_get_spec_stats(h->g, &st);
    uint64_t verifies = 0, weighted = 0, req_prop = 0, req_acc = 0;
    for (uint32_t j = 0; j < SPEC_HIST_BINS; j++) {
        verifies += st.hist[j];
        weighted += (uint64_t)j * st.hist[j];
        if (j >= st.hist_n) CU_ASSERT_EQUAL(st.hist[j], 0);
    }
    for (uint32_t i = 0; i < NREQ + 2; i++) {
        req_prop += h->out[i].proposed;
        req_acc += h->out[i].accepted;
    }
    CU_ASSERT_EQUAL(verifies, st.verifies);
    CU_ASSERT_EQUAL(weighted, st.accepted);
    CU_ASSERT_EQUAL(st.accepted, h->accepted);
    CU_ASSERT_EQUAL(st.proposed, h->proposed);
    CU_ASSERT_EQUAL(req_prop, h->proposed);
    CU_ASSERT_EQUAL(req_acc, h->accepted);
    if (st.verifies) CU_ASSERT_DOUBLE_EQUAL(st.mean_accepted_len, 1.0 + (double)st.accepted / st.verifies, 1e-12);
}

/* After everything finished the draft pool is whole again. */
static void check_drained(sh *h)
{
    const spec_drafter *d = engine_spec_drafter(h->g);
    if (!d) return;
    spec_draft_stats ds;
    spec_drafter_stats(d, &ds);
    CU_ASSERT_EQUAL(ds.requests, 0);
    CU_ASSERT_EQUAL(ds.pages_free, ds.pages_total);
    if (*spec_drafter_model(d)) CU_ASSERT(ds.forwards > 0);
}

static const kern_sampling greedy = {0, 1, 0};

static void greedy_equal(spec_algorithm alg, uint32_t layers, const model *draft, const char *name)
{
    model *m = eh_tiny_model();
    make_workload(m);
    make_references(m, greedy);
    for (uint32_t batch = 1; batch <= 16; batch += 15) {
        sh h = {0};
        engine_config c = base(m, &h, batch);
        c.spec.algorithm = alg;
        c.spec.draft_layers = layers;
        c.spec.draft_m = draft;
        c.core.spec_steps = 3;
        char what[96];
        snprintf(what, sizeof what, "%s, batch %u", name, batch);
        CU_ASSERT_EQUAL(run_workload(&h, &c, greedy, what), 0);
        uint32_t cached = 0;
        for (uint32_t i = 0; i < NREQ; i++) cached += h.out[i].cached;
        CU_ASSERT(cached >= 4 * 80);                  /* the shared prefixes hit */
        CU_ASSERT(h.proposed > 0);
        if (!draft) CU_ASSERT(h.accepted > 0);        /* lookup and self-speculation both land some */
        check_counters(&h);
        check_drained(&h);
        printf("\n    %s: %llu steps, %llu/%llu drafts accepted", what, (unsigned long long)h.steps,
               (unsigned long long)h.accepted, (unsigned long long)h.proposed);
        engine_free(h.g);
    }
    model_free(m);
}

static void test_ngram_greedy_equals_alone(void) { greedy_equal(SPEC_NGRAM, 0, NULL, "ngram"); }
static void test_self_speculation_greedy_equals_alone(void) { greedy_equal(SPEC_DRAFT, 2, NULL, "self-spec L=2"); }

static void test_draft_model_greedy_equals_alone(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    c.n_layers = 2;
    c.intermediate_size = 256;
    model *d = model_new_dummy(&c, 9, 0, &e);
    CU_ASSERT_FATAL(d != NULL);
    greedy_equal(SPEC_DRAFT, 0, d, "draft model");
    model_free(d);
}

/* Seeded sampling: certain drafts are verified by drawing each row's token
 * with the request's own stream, so the outputs equal sampling without
 * drafts draw for draw. Draft-model drafts come with their distribution
 * and go through rejection sampling (its distribution is checked in
 * test_spec.c); here the run must finish, stay consistent and repeat. */
static void test_sampling_with_drafts(void)
{
    model *m = eh_tiny_model();
    make_workload(m);
    const kern_sampling sp = {0.8f, 0.95f, 40};
    make_references(m, sp);
    sh h = {0};
    engine_config c = base(m, &h, 16);
    c.spec.algorithm = SPEC_NGRAM;
    c.core.spec_steps = 4;
    CU_ASSERT_EQUAL(run_workload(&h, &c, sp, "ngram sampled"), 0);
    CU_ASSERT(h.accepted > 0);
    engine_free(h.g);

    uint64_t first_accepted = 0;
    int32_t first_tokens[NREQ][MAXT];
    for (int run = 0; run < 2; run++) {
        sh d = {0};
        engine_config dc = base(m, &d, 16);
        dc.spec.algorithm = SPEC_DRAFT;
        dc.spec.draft_layers = 3;
        dc.core.spec_steps = 3;
        rh_err e;
        d.g = engine_new(&dc, &e);
        CU_ASSERT_FATAL(d.g != NULL);
        for (uint32_t i = 0; i < NREQ; i++) add(&d, i, prompts[i], plen[i], nout[i], sp, 100 + i);
        run_checked(&d);
        for (uint32_t i = 0; i < NREQ; i++) {
            CU_ASSERT_EQUAL(d.out[i].n, nout[i]);
            for (uint32_t t = 0; t < d.out[i].n; t++)
                CU_ASSERT(d.out[i].tokens[t] >= 0 && (uint32_t)d.out[i].tokens[t] < m->cfg.vocab_size);
        }
        CU_ASSERT(d.proposed > 0 && d.accepted > 0);
        check_counters(&d);
        check_drained(&d);
        if (run == 0) {
            first_accepted = d.accepted;
            for (uint32_t i = 0; i < NREQ; i++) memcpy(first_tokens[i], d.out[i].tokens, sizeof first_tokens[i]);
        } else {
            CU_ASSERT_EQUAL(d.accepted, first_accepted);
            for (uint32_t i = 0; i < NREQ; i++)
                CU_ASSERT_EQUAL(memcmp(first_tokens[i], d.out[i].tokens, nout[i] * sizeof(int32_t)), 0);
        }
        engine_free(d.g);
    }
    model_free(m);
}

/* --speculative-disable-by-batch-size 4 with 16 requests: no step with more
 * than 4 decodes drafts, steps with 4 or fewer do, and outputs stand. */
static void test_disable_by_batch_size(void)
{
    model *m = eh_tiny_model();
    make_workload(m);
    make_references(m, greedy);
    for (int alg = 0; alg < 2; alg++) {
        sh h = {.disable_limit = 4};
        engine_config c = base(m, &h, 16);
        c.spec.algorithm = alg ? SPEC_DRAFT : SPEC_NGRAM;
        c.core.spec_steps = 2;
        c.core.spec_disable_batch_size = 4;
        CU_ASSERT_EQUAL(run_workload(&h, &c, greedy, alg ? "draft, disabled above 4" : "ngram, disabled above 4"), 0);
        CU_ASSERT(h.busy_steps > 0);
        CU_ASSERT_EQUAL(h.spec_steps_over_limit, 0);
        CU_ASSERT(h.drafted_steps > 0);
        check_counters(&h);
        check_drained(&h);
        engine_free(h.g);
    }
    model_free(m);
}

/* A pool too small for the outputs: requests are retracted and recompute
 * with drafts in flight; tokens stand, and no page of either pool leaks. */
static void test_retraction_with_drafts(void)
{
    enum { N = 8, OUT = 40 };
    model *m = eh_tiny_model();
    static int32_t p[N][40], r[N][MAXT];
    for (uint32_t i = 0; i < N; i++) {
        eh_random_prompt(300 + i, m->cfg.vocab_size, p[i], 20 + i);
        for (uint32_t t = 4; t < 20 + i; t++) p[i][t] = p[i][t - 4];
        CU_ASSERT_EQUAL_FATAL(eh_reference(m, p[i], 20 + i, greedy, 0, OUT, r[i]), OUT);
    }
    for (int alg = 0; alg < 2; alg++) {
        sh h = {0};
        engine_config c = base(m, &h, 16);
        c.core.max_total_tokens = 20 * 16;
        c.core.schedule_conservativeness = 0.05;
        c.spec.algorithm = alg ? SPEC_DRAFT : SPEC_NGRAM;
        c.spec.draft_layers = 1;
        if (!alg) c.spec.draft_layers = 0;
        c.core.spec_steps = 3;
        rh_err e;
        h.g = engine_new(&c, &e);
        CU_ASSERT_FATAL(h.g != NULL);
        for (uint32_t i = 0; i < N; i++) add(&h, i, p[i], 20 + i, OUT, greedy, 0);
        run_checked(&h);
        uint32_t bad = 0;
        for (uint32_t i = 0; i < N; i++) bad += eh_mismatches("retracting with drafts", i, h.out[i].tokens, h.out[i].n, r[i], OUT);
        CU_ASSERT_EQUAL(bad, 0);
        core_stats st;
        core_get_stats(engine_core(h.g), &st);
        CU_ASSERT(st.retractions > 0);
        CU_ASSERT_EQUAL(st.pages_used, 0);
        CU_ASSERT(h.accepted > 0);
        check_drained(&h);
        engine_free(h.g);
    }
    model_free(m);
}

/* The drafter alone, on a draft pool of 4 pages: greedy drafts are what the
 * draft model (the target's first 2 layers) generates alone; a request that
 * cannot get pages while another drafts gets no drafts; one that is not
 * drafting is evicted to make room, and later catches up to the same drafts. */
static void test_draft_pool_eviction(void)
{
    model *m = eh_tiny_model();
    model half = *m;                       /* the same view the drafter builds */
    half.cfg.n_layers = 2;
    half.arena = NULL;
    half.files = NULL;
    half.n_files = 0;
    int32_t a[48], b[40], ga[3], gb[3];
    eh_random_prompt(11, m->cfg.vocab_size, a, 40);
    eh_random_prompt(12, m->cfg.vocab_size, b, 30);
    CU_ASSERT_EQUAL_FATAL(eh_reference(&half, a, 40, greedy, 0, 3, ga), 3);
    CU_ASSERT_EQUAL_FATAL(eh_reference(&half, b, 30, greedy, 0, 3, gb), 3);

    spec_config c;
    spec_config_default(&c);
    c.algorithm = SPEC_DRAFT;
    c.draft_layers = 2;
    spec_env env = {m, 16, 4, 0, NULL, 0};
    rh_err e;
    spec_drafter *d = spec_drafter_new(&c, &env, &e);
    CU_ASSERT_FATAL(d != NULL);
    CU_ASSERT_STRING_EQUAL(spec_drafter_model(d), "tiny-llama[0:2]");
    const spec_seam *seam = spec_drafter_seam(d);
    int32_t outa[3], outb[3];
    spec_draft x[2] = {{.id = 1, .tokens = a, .n = 40, .k = 3, .sampling = &greedy, .out = outa},
                         {.id = 2, .tokens = b, .n = 30, .k = 3, .sampling = &greedy, .out = outb}};
    /* a needs 3 pages (positions 0..41), b 2 more: b goes without. */
    CU_ASSERT_EQUAL_FATAL(seam->propose_batch(seam->ctx, x, 2, &e), 0);
    CU_ASSERT_EQUAL(x[0].n_out, 3);
    CU_ASSERT_EQUAL(x[1].n_out, 0);
    CU_ASSERT(x[0].q == NULL);
    CU_ASSERT_EQUAL(memcmp(outa, ga, sizeof ga), 0);
    CU_ASSERT_EQUAL(spec_drafter_check(d, &e), 0);
    seam->verified(seam->ctx, &x[0], 1);           /* one draft stood: a's KV keeps 41 positions */
    seam->verified(seam->ctx, &x[1], 0);
    CU_ASSERT_EQUAL(spec_drafter_check(d, &e), 0);
    spec_draft_stats st;
    spec_drafter_stats(d, &st);
    CU_ASSERT_EQUAL(st.pages_free, 1);

    /* b alone: a is not drafting, so its pages go to b. */
    spec_draft y = x[1];
    y.k = 3;
    CU_ASSERT_EQUAL_FATAL(seam->propose_batch(seam->ctx, &y, 1, &e), 0);
    CU_ASSERT_EQUAL(y.n_out, 3);
    CU_ASSERT_EQUAL(memcmp(outb, gb, sizeof gb), 0);
    spec_drafter_stats(d, &st);
    CU_ASSERT_EQUAL(st.evictions, 1);
    CU_ASSERT_EQUAL(spec_drafter_check(d, &e), 0);
    seam->verified(seam->ctx, &y, 3);

    /* a again, two tokens on (its first draft and a new one): it catches
     * up from nothing, evicting b, and drafts what generation says. */
    a[40] = ga[0];
    a[41] = 7;
    int32_t ga2[3];
    CU_ASSERT_EQUAL_FATAL(eh_reference(&half, a, 42, greedy, 0, 3, ga2), 3);
    spec_draft z = x[0];
    z.n = 42;
    z.k = 2;
    CU_ASSERT_EQUAL_FATAL(seam->propose_batch(seam->ctx, &z, 1, &e), 0);
    CU_ASSERT_EQUAL(z.n_out, 2);
    CU_ASSERT_EQUAL(memcmp(outa, ga2, 2 * sizeof *ga2), 0);
    CU_ASSERT_EQUAL(spec_drafter_check(d, &e), 0);
    seam->forget(seam->ctx, 1, z.state);
    seam->forget(seam->ctx, 2, y.state);
    spec_drafter_stats(d, &st);
    CU_ASSERT_EQUAL(st.requests, 0);
    CU_ASSERT_EQUAL(st.pages_free, 4);
    CU_ASSERT_EQUAL(spec_drafter_check(d, &e), 0);
    spec_drafter_free(d);
    model_free(m);
}

/* What the engine refuses: a draft model with another vocabulary, more
 * draft layers than the target has, slots without an algorithm. */
static void test_bad_spec_configs(void)
{
    model *m = eh_tiny_model();
    sh h = {0};
    rh_err e;
    engine_config c = base(m, &h, 4);
    c.spec.algorithm = SPEC_DRAFT;
    c.spec.draft_layers = 5;
    CU_ASSERT_PTR_NULL(engine_new(&c, &e));
    CU_ASSERT(strstr(e.msg, "only 4 layers") != NULL);

    model_config dc;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &dc, &e) == 0);
    dc.vocab_size = 600;
    model *other = model_new_dummy(&dc, 1, 0, &e);
    CU_ASSERT_FATAL(other != NULL);
    c.spec.draft_layers = 0;
    c.spec.draft_m = other;
    CU_ASSERT_PTR_NULL(engine_new(&c, &e));
    CU_ASSERT(strstr(e.msg, "vocabulary") != NULL);
    model_free(other);

    c = base(m, &h, 4);
    c.core.spec_steps = 2;
    CU_ASSERT_PTR_NULL(engine_new(&c, &e));
    CU_ASSERT(strstr(e.msg, "--speculative-algorithm") != NULL);

    /* An algorithm without a depth gets 3 draft steps. */
    c = base(m, &h, 4);
    c.spec.algorithm = SPEC_NGRAM;
    engine *g = engine_new(&c, &e);
    CU_ASSERT_FATAL(g != NULL);
    CU_ASSERT_EQUAL(core_get_config(engine_core(g))->spec_steps, 3);
    engine_spec_stats st;
    engine_get_spec_stats(g, &st);
    CU_ASSERT_EQUAL(st.hist_n, 4);
    engine_free(g);
    model_free(m);
}

void register_test_spec_engine(void)
{
    CU_pSuite s = CU_add_suite("spec_engine", NULL, NULL);
    CU_add_test(s, "n-gram drafts: greedy equals alone (batch 1, 16)", test_ngram_greedy_equals_alone);
    CU_add_test(s, "self-speculation: greedy equals alone (batch 1, 16)", test_self_speculation_greedy_equals_alone);
    CU_add_test(s, "draft model: greedy equals alone (batch 1, 16)", test_draft_model_greedy_equals_alone);
    CU_add_test(s, "sampling with drafts", test_sampling_with_drafts);
    CU_add_test(s, "disable by batch size", test_disable_by_batch_size);
    CU_add_test(s, "retraction with drafts leaks no page", test_retraction_with_drafts);
    CU_add_test(s, "draft pool: eviction, no room, drafts equal generation", test_draft_pool_eviction);
    CU_add_test(s, "bad speculative configs", test_bad_spec_configs);
}
