/* test_core.c — known answers of the scheduler core: chunking, slot limits,
 * lpm, retraction, prefix sharing (tokens and trace block hashes), mixed
 * chunks, speculative slots, the vLLM preset, aborts and bad input. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "test_core_harness.h"
#include "engine/core/core.h"
#include "engine/core/internal.h"

static harness H;

static core_config base_cfg(void)
{
    core_config cfg;
    core_config_default(&cfg);
    return cfg;
}

/* A 20,000-token prompt under chunk 8192 prefills as 8192, 8192, 3616; a
 * short request arriving meanwhile waits for the chunk budget the third
 * chunk leaves, then shares that step. */
static void test_chunked_prefill(void)
{
    core_config cfg = base_cfg();
    h_new(&H, &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h_add(&H, 1, 20000, 4, 0));
    core_seq s[4];
    core_batch b;
    CU_ASSERT_EQUAL(h_step_with(&H, 0.0, NULL, s, 4, &b), 1);
    CU_ASSERT(s[0].prefill && !s[0].samples);
    CU_ASSERT_EQUAL(s[0].start, 0);
    CU_ASSERT_EQUAL(s[0].n_new, 8192);
    CU_ASSERT_EQUAL(s[0].n_pages, 512);
    CU_ASSERT_EQUAL(H.last.prefill_tokens, 8192);
    CU_ASSERT_EQUAL(H.last.prefill_attn, 8192ull * 8192);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h_add(&H, 2, 100, 3, 0.5));
    CU_ASSERT_EQUAL(h_step_with(&H, 1.0, NULL, s, 4, &b), 1);   /* the chunk takes the whole budget */
    CU_ASSERT_EQUAL(s[0].id, 1);
    CU_ASSERT_EQUAL(s[0].start, 8192);
    CU_ASSERT_EQUAL(s[0].n_new, 8192);
    CU_ASSERT_EQUAL(H.last.prefill_context, 8192);
    CU_ASSERT_EQUAL(H.last.waiting, 1);
    CU_ASSERT_EQUAL(h_step_with(&H, 2.0, NULL, s, 4, &b), 2);
    CU_ASSERT_EQUAL(s[0].id, 1);
    CU_ASSERT_EQUAL(s[0].start, 16384);
    CU_ASSERT_EQUAL(s[0].n_new, 3616);
    CU_ASSERT(s[0].samples);
    CU_ASSERT_EQUAL(s[1].id, 2);
    CU_ASSERT_EQUAL(s[1].n_new, 100);
    CU_ASSERT_EQUAL(H.last.prefill_tokens, 3716);
    CU_ASSERT_EQUAL(H.last.prefill_seqs, 2);
    CU_ASSERT_EQUAL(H.last.decode_seqs, 0);
    CU_ASSERT_EQUAL(H.req[1].first_token_step, 2);
    CU_ASSERT_EQUAL(H.req[2].first_token_step, 2);
    /* Then both decode: context 20000 and 100. */
    CU_ASSERT_EQUAL(h_step_with(&H, 3.0, NULL, s, 4, &b), 2);
    CU_ASSERT(!s[0].prefill && s[0].start == 20000 && s[0].n_new == 1);
    CU_ASSERT_EQUAL(H.last.decode_context, 20100);
    CU_ASSERT_DOUBLE_EQUAL(H.last.duration, 0.01, 1e-9);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    double now = 4;
    h_drain(&H, &now, 100);
    CU_ASSERT_EQUAL(H.req[1].tokens, 4);
    CU_ASSERT_EQUAL(H.req[2].tokens, 3);
    CU_ASSERT_EQUAL(H.req[1].finish, TR_FINISH_LENGTH);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_free(H.c);

    /* -1: no chunking, the whole prompt in one step even past max-prefill-tokens. */
    cfg.chunked_prefill_size = -1;
    h_new(&H, &cfg);
    h_add(&H, 1, 20000, 2, 0);
    CU_ASSERT_EQUAL(h_step_with(&H, 0.0, NULL, s, 4, &b), 1);
    CU_ASSERT_EQUAL(s[0].n_new, 20000);
    CU_ASSERT(s[0].samples);
    core_free(H.c);
}

static void test_max_running(void)
{
    core_config cfg = base_cfg();
    cfg.max_running_requests = 2;
    h_new(&H, &cfg);
    for (uint64_t i = 1; i <= 6; i++) h_add(&H, i, 50 + 10 * (uint32_t)i, 5 + (uint32_t)i, 0);
    double now = 0;
    uint64_t steps = 0;
    while (!core_idle(H.c) && steps < 200) {
        core_batch b;
        core_seq s[8];
        uint32_t n = h_step_with(&H, now, NULL, s, 8, &b);
        CU_ASSERT(n <= 2);
        CU_ASSERT(H.last.running <= 2);
        core_stats st;
        core_get_stats(H.c, &st);
        CU_ASSERT(st.running <= 2);
        CU_ASSERT_EQUAL(h_check(&H), 0);
        now += 0.01;
        steps++;
    }
    CU_ASSERT(core_idle(H.c));
    CU_ASSERT_EQUAL(H.max_running_seen, 2);
    for (uint64_t i = 1; i <= 6; i++) CU_ASSERT_EQUAL(H.req[i].tokens, 5 + i);
    /* fcfs: admitted in arrival order */
    for (uint32_t i = 0; i < 6; i++) CU_ASSERT_EQUAL(H.order[i], i + 1);
    core_free(H.c);
}

static void fill_tokens(int32_t *t, uint32_t n, int32_t base)
{
    for (uint32_t i = 0; i < n; i++) t[i] = base + (int32_t)i;
}

static core_req *add_tokens(harness *h, uint64_t id, const int32_t *tok, uint32_t n, uint32_t max_new)
{
    core_req_desc d = {.id = id, .prompt_len = n, .max_new_tokens = max_new, .prompt_tokens = tok};
    rh_err e;
    core_req *r = core_add(h->c, &d, 0, &e);
    if (!r) printf("\n  core_add: %s\n", e.msg);
    return r;
}

/* lpm offers the request with the longest cached prefix first; fcfs the oldest. */
static void run_lpm_case(core_policy policy, uint64_t expect[3])
{
    core_config cfg = base_cfg();
    cfg.policy = policy;
    cfg.max_running_requests = 1;
    h_new(&H, &cfg);
    int32_t a[64], b[64], c3[64], d[64];
    fill_tokens(a, 64, 1000);
    fill_tokens(b, 64, 5000);            /* shares nothing */
    fill_tokens(c3, 64, 1000);
    c3[50] = -1;                         /* shares 3 full pages (48 tokens) with a */
    fill_tokens(d, 64, 1000);
    d[40] = -2;                          /* shares 2 full pages (32 tokens) */
    add_tokens(&H, 1, a, 64, 2);
    double now = 0;
    h_drain(&H, &now, 10);               /* a's pages are now cached */
    add_tokens(&H, 2, b, 64, 2);
    add_tokens(&H, 3, c3, 64, 2);
    add_tokens(&H, 4, d, 64, 2);
    h_drain(&H, &now, 20);
    CU_ASSERT_EQUAL(H.n_order, 4);
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(H.order[1 + i], expect[i]);
    CU_ASSERT_EQUAL(H.req[3].cached, 48);
    CU_ASSERT_EQUAL(H.req[4].cached, 32);
    CU_ASSERT_EQUAL(H.req[2].cached, 0);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_free(H.c);
}

/* dfs-weight against SGLang's walk, worked by hand. Cached: prompts A and B
 * (4 pages each; a match leaves the last to compute, so at most 3). Queued:
 *   1 x1 [B0]   2 y1 [A0 A1 A2]   3 y2 [A0 A1]   4 z []
 *   5 x2 [B0]   6 y3 [A0 A1 A2]   7 x3 [B0]      8 x4 [B0 B1]
 * B0 weighs 4 (x1 x2 x3 x4), A0 3: B's subtree first; in it B1's x4, then
 * B0's own x1 x2 x3; then A2's y1 y3, A1's own y2; z, matching nothing,
 * last. lpm takes the longest matches first instead. */
static void run_dfs_case(core_policy policy, const uint64_t expect[8])
{
    core_config cfg = base_cfg();
    cfg.policy = policy;
    h_new(&H, &cfg);
    int32_t a[64], b[64], t[8][64];
    fill_tokens(a, 64, 1000);
    fill_tokens(b, 64, 5000);
    add_tokens(&H, 100, a, 64, 1);
    add_tokens(&H, 101, b, 64, 1);
    double now = 0;
    h_drain(&H, &now, 10);   /* A's and B's pages are cached */
    static const struct {
        int from_a, diverge;   /* the token that differs: the match ends at its page */
    } q[8] = {{0, 20}, {1, 50}, {1, 40}, {-1, 0}, {0, 20}, {1, 50}, {0, 20}, {0, 40}};
    for (int i = 0; i < 8; i++) {
        if (q[i].from_a < 0) fill_tokens(t[i], 64, 9000);
        else memcpy(t[i], q[i].from_a ? a : b, sizeof a);
        if (q[i].from_a >= 0) t[i][q[i].diverge] = -1 - i;
        CU_ASSERT_PTR_NOT_NULL_FATAL(add_tokens(&H, (uint64_t)i + 1, t[i], 64, 2));
    }
    cand_list cl;
    policy_order(H.c, now, &cl);
    CU_ASSERT_EQUAL_FATAL(cl.n, 8);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cl.v);
    for (int i = 0; i < 8; i++) {
        if (cl.v[i]->id != expect[i]) printf("\n  %s: position %d is %llu, want %llu", cfg.policy == CORE_POLICY_LPM ?
                                             "lpm" : "dfs-weight", i, (unsigned long long)cl.v[i]->id,
                                             (unsigned long long)expect[i]);
        CU_ASSERT_EQUAL(cl.v[i]->id, expect[i]);
    }
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_free(H.c);
}

static void test_dfs_weight(void)
{
    static const uint64_t dfs[8] = {8, 1, 5, 7, 2, 6, 3, 4}, lpm[8] = {2, 6, 3, 8, 1, 5, 7, 4};
    run_dfs_case(CORE_POLICY_DFS_WEIGHT, dfs);
    run_dfs_case(CORE_POLICY_LPM, lpm);
}

static void test_lpm(void)
{
    uint64_t lpm[3] = {3, 4, 2}, fcfs[3] = {2, 3, 4};
    run_lpm_case(CORE_POLICY_LPM, lpm);
    run_lpm_case(CORE_POLICY_FCFS, fcfs);
}

/* 12 pages of 16 tokens, no prefix cache, conservativeness 0 (running
 * requests reserve nothing). A and B (32-token prompts, 100 tokens out) are
 * admitted in steps 0 and 1; C never fits beside them. From step 2 both
 * decode; every 16 tokens each takes a page, and at context 96 (step 66)
 * they hold all 12 pages: B (same output and prompt as A, later in the batch)
 * is retracted with 65 tokens out, and the ratio rises to (65 + 20) / 100. */
static void test_retraction_known_answer(void)
{
    core_config cfg = base_cfg();
    cfg.max_total_tokens = 12 * 16;
    cfg.disable_radix_cache = true;
    cfg.schedule_conservativeness = 0;
    h_new(&H, &cfg);
    h_add(&H, 1, 32, 100, 0);
    h_add(&H, 2, 32, 100, 0);
    h_add(&H, 3, 32, 100, 0);
    double now = 0;
    int64_t retract_step = -1;
    uint32_t b_out_at_retract = 0;
    for (int i = 0; i < 1000 && !core_idle(H.c); i++) {
        uint32_t before = H.req[2].retracted;
        h_step(&H, now);
        now += 0.01;
        if (H.req[2].retracted != before && retract_step < 0) {
            retract_step = (int64_t)H.last.index;
            b_out_at_retract = H.req[2].output_len;
            CU_ASSERT_EQUAL(H.last.retractions, 1);
            CU_ASSERT_EQUAL(H.last.decode_seqs, 1);
            core_stats st;
            core_get_stats(H.c, &st);
            CU_ASSERT_DOUBLE_EQUAL(st.new_token_ratio, 0.85, 1e-12);
        }
        CU_ASSERT_EQUAL_FATAL(h_check(&H), 0);
    }
    CU_ASSERT(core_idle(H.c));
    CU_ASSERT_EQUAL(H.req[1].admit_step, 0);
    CU_ASSERT_EQUAL(retract_step, 66);
    CU_ASSERT_EQUAL(b_out_at_retract, 65);
    CU_ASSERT_EQUAL(H.total_retractions, 1);
    CU_ASSERT_EQUAL(H.req[1].retracted, 0);
    CU_ASSERT_EQUAL(H.req[3].retracted, 0);
    CU_ASSERT_EQUAL(H.req[2].retracted, 1);
    CU_ASSERT_EQUAL(H.req[2].admitted, 2);
    for (uint64_t i = 1; i <= 3; i++) {
        CU_ASSERT_EQUAL(H.req[i].tokens, 100);   /* the retracted one too: nothing lost, nothing doubled */
        CU_ASSERT_EQUAL(H.req[i].finished, 1);
        CU_ASSERT_EQUAL(H.req[i].finish, TR_FINISH_LENGTH);
    }
    /* C was admitted before B went back (fcfs: B re-queued behind it). */
    CU_ASSERT_EQUAL(H.order[2], 3);
    CU_ASSERT_EQUAL(H.order[3], 2);
    core_stats st;
    core_get_stats(H.c, &st);
    CU_ASSERT_EQUAL(st.pages_free, 12);
    CU_ASSERT_EQUAL(st.retractions, 1);
    core_free(H.c);
}

/* Runs A (id 1) and B (id 2) on 12 pages of 16 tokens, no prefix cache,
 * nothing reserved for running requests, B added after A has run
 * `b_after` steps. Returns the id of the first request retracted (0: none)
 * and, through *out_a and *out_b, both output counts when that step began. */
static uint64_t first_retracted(uint32_t a_prompt, uint32_t b_prompt, int b_after, uint32_t *out_a,
                                uint32_t *out_b)
{
    core_config cfg = base_cfg();
    cfg.max_total_tokens = 12 * 16;
    cfg.disable_radix_cache = true;
    cfg.schedule_conservativeness = 0;
    h_new(&H, &cfg);
    h_add(&H, 1, a_prompt, 100, 0);
    double now = 0;
    uint64_t first = 0;
    for (int i = 0; i < 1000 && (!core_idle(H.c) || i <= b_after); i++) {
        if (i == b_after) h_add(&H, 2, b_prompt, 100, now);
        uint32_t a = H.req[1].tokens, b = H.req[2].tokens;
        h_step(&H, now);
        now += 0.01;
        if (!first && (H.req[1].retracted || H.req[2].retracted)) {
            first = H.req[1].retracted ? 1 : 2;
            *out_a = a;
            *out_b = b;
        }
        CU_ASSERT_EQUAL_FATAL(h_check(&H), 0);
    }
    CU_ASSERT(core_idle(H.c));
    for (uint64_t i = 1; i <= 2; i++) CU_ASSERT_EQUAL(H.req[i].tokens, 100);
    core_free(H.c);
    return first;
}

/* SGLang retracts the request with the fewest output tokens first, and among
 * equal outputs the one with the longest prompt. B arrives after A's fifth
 * step and A waits one step for B's prefill, so A is 4 tokens ahead when the
 * pool fills: B goes, although A's prompt is the longer. With equal outputs
 * (both arrive at once; B is admitted in the step after A's, in which A
 * waits) the longer prompt goes: A, although B is later in the batch. */
static void test_retraction_order(void)
{
    uint32_t out_a = 0, out_b = 0;
    CU_ASSERT_EQUAL(first_retracted(48, 16, 5, &out_a, &out_b), 2);
    CU_ASSERT_EQUAL(out_a, out_b + 4);
    CU_ASSERT(out_b > 0);
    out_a = out_b = 0;
    CU_ASSERT_EQUAL(first_retracted(48, 32, 0, &out_a, &out_b), 1);
    CU_ASSERT_EQUAL(out_a, out_b);
    CU_ASSERT(out_a > 0);
}

/* Pages keyed without content (a simulated prompt without block hashes,
 * simulated output) can match only their own request. Such a prompt's pages
 * enter the tree when the request is retracted, so it re-matches them when
 * it recomputes, and no such page outlives its request in the tree. */
static void test_unique_pages(void)
{
    core_config cfg = base_cfg();
    cfg.max_total_tokens = 12 * 16;
    cfg.schedule_conservativeness = 0;
    h_new(&H, &cfg);
    h_add(&H, 1, 32, 100, 0);
    h_add(&H, 2, 32, 100, 0);
    h_add(&H, 3, 32, 100, 0);
    double now = 0;
    uint32_t admissions_b = 0;
    for (int i = 0; i < 1000 && !core_idle(H.c); i++) {
        h_step(&H, now);
        now += 0.01;
        if (H.req[2].admitted > admissions_b) {
            admissions_b = H.req[2].admitted;
            /* On its second admission B finds its own two prompt pages. */
            if (admissions_b == 2) CU_ASSERT_EQUAL(H.req[2].cached, 32);
        }
        CU_ASSERT_EQUAL_FATAL(h_check(&H), 0);
    }
    CU_ASSERT(core_idle(H.c));
    CU_ASSERT_EQUAL(H.req[2].retracted, 1);
    CU_ASSERT_EQUAL(admissions_b, 2);
    for (uint64_t i = 1; i <= 3; i++) CU_ASSERT_EQUAL(H.req[i].tokens, 100);
    core_stats st;
    core_get_stats(H.c, &st);
    CU_ASSERT_EQUAL(st.pages_free, 12);      /* nothing left cached: nobody could match it */
    CU_ASSERT_EQUAL(st.pages_cached, 0);
    core_free(H.c);
}

/* Four requests share a 256-token system prompt: the first computes it, the
 * others find its 16 pages cached and hold them once. */
static void test_shared_system_prompt(void)
{
    core_config cfg = base_cfg();
    h_new(&H, &cfg);
    int32_t tok[4][320];
    for (int r = 0; r < 4; r++) {
        fill_tokens(tok[r], 256, 7);
        fill_tokens(tok[r] + 256, 64, 100000 * (r + 1));
    }
    add_tokens(&H, 1, tok[0], 320, 8);
    double now = 0;
    h_step(&H, now);                     /* prefill of the first: its prompt is cached after it */
    for (int r = 1; r < 4; r++) add_tokens(&H, (uint64_t)r + 1, tok[r], 320, 8);
    h_step(&H, now + 1);
    CU_ASSERT_EQUAL(H.last.prefill_seqs, 3);
    CU_ASSERT_EQUAL(H.last.prefill_tokens, 3 * 64);
    CU_ASSERT_EQUAL(H.last.prefill_context, 3 * 256);
    core_stats st;
    core_get_stats(H.c, &st);
    /* 20 pages for the first (16 shared + 4 own), 4 own for each other */
    CU_ASSERT_EQUAL(st.pages_used, 20 + 3 * 4);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    for (int r = 2; r <= 4; r++) CU_ASSERT_EQUAL(H.req[r].cached, 256);
    h_drain(&H, &now, 100);
    core_get_stats(H.c, &st);
    CU_ASSERT_EQUAL(st.cached_tokens, 3 * 256);
    CU_ASSERT_EQUAL(st.prompt_tokens, 4 * 320);
    CU_ASSERT_EQUAL(st.pages_used, 0);
    /* Everything full is cached: 16 shared + 4 x 4 tail pages (327 tokens: 20 full pages each). */
    CU_ASSERT_EQUAL(st.pages_cached, 16 + 4 * 4);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_free(H.c);

    /* Disabled cache: nothing shared, nothing cached. */
    cfg.disable_radix_cache = true;
    h_new(&H, &cfg);
    add_tokens(&H, 1, tok[0], 320, 8);
    h_step(&H, 0);
    add_tokens(&H, 2, tok[1], 320, 8);
    h_step(&H, 1);
    CU_ASSERT_EQUAL(H.req[2].cached, 0);
    now = 2;
    h_drain(&H, &now, 100);
    core_get_stats(H.c, &st);
    CU_ASSERT_EQUAL(st.pages_cached, 0);
    CU_ASSERT_EQUAL(st.pages_free, st.pages_total);
    core_free(H.c);
}

/* Output tokens extend the chain: a second turn whose prompt is the first
 * turn's prompt + answer finds both cached. */
static void test_multi_turn_tokens(void)
{
    core_config cfg = base_cfg();
    h_new(&H, &cfg);
    int32_t p1[40], answer[24], p2[80];
    fill_tokens(p1, 40, 1);
    fill_tokens(answer, 24, 900);
    add_tokens(&H, 1, p1, 40, 24);
    double now = 0;
    for (int i = 0; i < 100 && !core_idle(H.c); i++) {
        core_batch b;
        uint32_t n = core_schedule(H.c, now, &b);
        core_seq_result res[4] = {{0}};
        for (uint32_t k = 0; k < n; k++) res[k].tokens = &answer[H.req[1].tokens];
        rh_err e;
        CU_ASSERT_EQUAL(core_complete(H.c, &b, res, now, &e), 0);
        now += 1;
    }
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + 40, answer, sizeof answer);
    fill_tokens(p2 + 64, 16, 5555);
    add_tokens(&H, 2, p2, 80, 2);
    h_step(&H, now);
    /* 63 tokens known with K and V (the last answer token was never fed
     * back): pages 0..2 (48 tokens) are full and cached. */
    CU_ASSERT_EQUAL(H.req[2].cached, 48);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_free(H.c);

    /* Without tokens on the results, output pages never match. */
    h_new(&H, &cfg);
    add_tokens(&H, 1, p1, 40, 24);
    now = 0;
    h_drain(&H, &now, 100);
    add_tokens(&H, 2, p2, 80, 2);
    h_step(&H, now);
    CU_ASSERT_EQUAL(H.req[2].cached, 32);   /* the prompt's two full pages only */
    core_free(H.c);
}

/* Priority scheduling: one request runs at a time, five wait with
 * priorities; the order they are admitted in is the order a stable sort of
 * the queue by priority gives (higher first, SGLang's; lower first with
 * low_priority_values_first, vLLM's), fcfs within a priority, and plain
 * queue order when it is off. Under lof, priority first, then the longest
 * output. */
static const int32_t prio_of[6] = {0, 0, 5, 5, -1, 9};      /* requests 2..6: index id - 1 */
static const uint32_t prio_out[6] = {4, 4, 3, 8, 4, 4};

static void admitted_order(const core_config *cfg, uint64_t *order)
{
    h_new(&H, cfg);
    h_add(&H, 1, 32, 4, 0);
    double now = 0;
    h_step(&H, now);   /* request 1 runs */
    for (uint64_t id = 2; id <= 6; id++) {
        core_req_desc d = {.id = id, .prompt_len = 32, .max_new_tokens = prio_out[id - 1], .priority = prio_of[id - 1]};
        rh_err e = {{0}};
        CU_ASSERT_PTR_NOT_NULL(core_add(H.c, &d, 0, &e));
    }
    h_drain(&H, &now, 200);
    for (uint64_t k = 0; k < 5; k++) order[k] = 2 + k;
    for (uint64_t a = 0; a < 5; a++)   /* by admission step */
        for (uint64_t b = a + 1; b < 5; b++)
            if (H.req[order[b]].admit_step < H.req[order[a]].admit_step) {
                uint64_t t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_free(H.c);
}

/* The reference: insertion sort (stable) of 2..6 by the key. */
static void expected_order(int sign, bool lof, uint64_t *order)
{
    for (uint64_t k = 0; k < 5; k++) order[k] = 2 + k;
    for (int a = 1; a < 5; a++)
        for (int b = a; b > 0; b--) {
            int64_t x = (int64_t)sign * prio_of[order[b] - 1], y = (int64_t)sign * prio_of[order[b - 1] - 1];
            bool before = x > y || (x == y && lof && prio_out[order[b] - 1] > prio_out[order[b - 1] - 1]);
            if (!before) break;
            uint64_t t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
}

static void test_priority_scheduling(void)
{
    struct { bool on, low, lof; core_preset preset; int sign; } cases[] = {
        {false, false, false, CORE_PRESET_SGLANG, 0}, {true, false, false, CORE_PRESET_SGLANG, 1},
        {true, true, false, CORE_PRESET_SGLANG, -1},  {true, false, true, CORE_PRESET_SGLANG, 1},
        {true, true, false, CORE_PRESET_VLLM, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        core_config cfg = base_cfg();
        cfg.max_running_requests = 1;
        cfg.preset = cases[i].preset;
        cfg.enable_priority_scheduling = cases[i].on;
        cfg.low_priority_values_first = cases[i].low;
        if (cases[i].lof) cfg.policy = CORE_POLICY_LOF;
        uint64_t got[5], want[5];
        admitted_order(&cfg, got);
        expected_order(cases[i].sign, cases[i].lof, want);
        for (int k = 0; k < 5; k++) CU_ASSERT_EQUAL(got[k], want[k]);
        if (memcmp(got, want, sizeof got))
            printf("\n    case %zu: admitted %llu %llu %llu %llu %llu, expected %llu %llu %llu %llu %llu\n", i,
                   (unsigned long long)got[0], (unsigned long long)got[1], (unsigned long long)got[2],
                   (unsigned long long)got[3], (unsigned long long)got[4], (unsigned long long)want[0],
                   (unsigned long long)want[1], (unsigned long long)want[2], (unsigned long long)want[3],
                   (unsigned long long)want[4]);
    }
    /* The knobs by name: SGLang's two, vLLM's one. */
    core_config cfg = base_cfg();
    rh_err e;
    CU_ASSERT_EQUAL(core_config_set(&cfg, "scheduling-policy", "priority", &e), 1);
    CU_ASSERT(cfg.enable_priority_scheduling && cfg.low_priority_values_first);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "scheduling-policy", "fcfs", &e), 1);
    CU_ASSERT(!cfg.enable_priority_scheduling);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "scheduling-policy", "lifo", &e), -1);
    CU_ASSERT_EQUAL(core_config_set(&cfg, "schedule-policy", "priority", &e), 1);
    CU_ASSERT(cfg.policy == CORE_POLICY_FCFS && cfg.enable_priority_scheduling && !cfg.low_priority_values_first);
    CU_ASSERT_EQUAL(core_config_takes_value("enable-priority-scheduling"), 0);
    CU_ASSERT_EQUAL(core_config_takes_value("schedule-low-priority-values-first"), 0);
}

/* Mooncake-style block hashes (512 tokens each) map onto 32 pages of 16. */
static void test_block_hashes(void)
{
    core_config cfg = base_cfg();
    h_new(&H, &cfg);
    uint64_t h1[3] = {11, 12, 13}, h2[3] = {11, 12, 99}, h3[2] = {11, 77};
    core_req_desc d = {.id = 1, .prompt_len = 1500, .max_new_tokens = 2, .block_hashes = h1, .n_block_hashes = 3,
                       .block_size = 512};
    rh_err e;
    CU_ASSERT_PTR_NOT_NULL(core_add(H.c, &d, 0, &e));
    double now = 0;
    h_drain(&H, &now, 10);
    d.id = 2;
    d.block_hashes = h2;
    d.prompt_len = 1536;
    CU_ASSERT_PTR_NOT_NULL(core_add(H.c, &d, 0, &e));
    d.id = 3;
    d.block_hashes = h3;
    d.n_block_hashes = 2;
    d.prompt_len = 1024;
    CU_ASSERT_PTR_NOT_NULL(core_add(H.c, &d, 0, &e));
    h_step(&H, now);
    CU_ASSERT_EQUAL(H.req[2].cached, 1024);
    CU_ASSERT_EQUAL(H.req[3].cached, 512);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_free(H.c);

    /* Pages larger than a block (page 1024 over 512-token blocks) key both blocks. */
    cfg.page_size = 1024;
    cfg.max_total_tokens = 1024 * 64;
    cfg.chunked_prefill_size = 8192;
    h_new(&H, &cfg);
    uint64_t k1[4] = {1, 2, 3, 4}, k2[4] = {1, 2, 3, 5}, k3[4] = {1, 9, 3, 4};
    d = (core_req_desc){.id = 1, .prompt_len = 2048 + 10, .max_new_tokens = 2, .block_hashes = k1, .n_block_hashes = 4,
                        .block_size = 512};
    core_add(H.c, &d, 0, &e);
    now = 0;
    h_drain(&H, &now, 10);
    d.id = 2;
    d.block_hashes = k2;
    core_add(H.c, &d, 0, &e);
    d.id = 3;
    d.block_hashes = k3;
    core_add(H.c, &d, 0, &e);
    h_step(&H, now);
    CU_ASSERT_EQUAL(H.req[2].cached, 1024);   /* blocks 3 and 4 share page 1: 5 != 4 */
    CU_ASSERT_EQUAL(H.req[3].cached, 0);      /* block 2 differs inside page 0 */
    core_free(H.c);
}

/* Mixed chunk: decodes ride with the prefill, and their tokens come out of
 * the chunk budget. */
static void test_mixed_chunk(void)
{
    core_config cfg = base_cfg();
    cfg.enable_mixed_chunk = true;
    cfg.chunked_prefill_size = 64;
    h_new(&H, &cfg);
    h_add(&H, 1, 20, 50, 0);
    h_add(&H, 2, 20, 50, 0);
    double now = 0;
    h_step(&H, now);                     /* both prefill */
    CU_ASSERT_EQUAL(H.last.prefill_seqs, 2);
    h_add(&H, 3, 200, 5, 0);
    core_seq s[8];
    core_batch b;
    CU_ASSERT_EQUAL(h_step_with(&H, 1, NULL, s, 8, &b), 3);
    CU_ASSERT_EQUAL(b.decode_seqs, 2);
    CU_ASSERT_EQUAL(b.prefill_seqs, 1);
    CU_ASSERT_EQUAL(b.prefill_tokens, 48);   /* 64 - 2 decode tokens, floored to a page */
    CU_ASSERT_EQUAL(s[2].id, 3);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    h_drain(&H, &now, 200);
    CU_ASSERT_EQUAL(H.req[3].tokens, 5);
    core_free(H.c);

    /* The same without mixing: the prefill stalls the decodes. */
    cfg.enable_mixed_chunk = false;
    h_new(&H, &cfg);
    h_add(&H, 1, 20, 50, 0);
    h_add(&H, 2, 20, 50, 0);
    h_step(&H, 0);
    h_add(&H, 3, 200, 5, 0);
    CU_ASSERT_EQUAL(h_step_with(&H, 1, NULL, s, 8, &b), 1);
    CU_ASSERT_EQUAL(b.prefill_tokens, 64);
    CU_ASSERT_EQUAL(b.decode_seqs, 0);
    core_free(H.c);
}

/* Draft slots: k per decode, capped by what max_new_tokens leaves; rejected
 * slots roll back and their pages return to the pool. */
static void test_speculative_slots(void)
{
    core_config cfg = base_cfg();
    cfg.spec_steps = 3;                  /* 4 draft tokens: 3 slots */
    cfg.disable_radix_cache = true;
    h_new(&H, &cfg);
    h_add(&H, 1, 15, 6, 0);
    h_step(&H, 0);                       /* prefill: 1 token */
    core_seq s[2];
    core_batch b;
    uint32_t n = core_schedule(H.c, 1, &b);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT_EQUAL(b.seqs[0].n_spec, 3);
    CU_ASSERT_EQUAL(b.seqs[0].n_new, 4);
    CU_ASSERT_EQUAL(b.seqs[0].start, 15);
    CU_ASSERT_EQUAL(b.seqs[0].n_pages, 2);  /* positions 15..18 cross into page 1 */
    CU_ASSERT_EQUAL(b.spec_steps, 3);
    CU_ASSERT_EQUAL(b.decode_tokens, 4);
    core_seq_result res = {.proposed = 3, .accepted = 0};
    rh_err e;
    CU_ASSERT_EQUAL(core_complete(H.c, &b, &res, 1.5, &e), 0);
    CU_ASSERT_EQUAL(H.last.spec_proposed, 3);
    CU_ASSERT_EQUAL(H.last.spec_accepted, 0);
    CU_ASSERT_EQUAL(H.last.pages_used, 1);  /* kv 16: the second page was rolled back */
    CU_ASSERT_EQUAL(h_check(&H), 0);
    /* out = 2: 4 left, so 3 slots again; accept 2 -> out 5 */
    n = core_schedule(H.c, 2, &b);
    CU_ASSERT_EQUAL(b.seqs[0].n_spec, 3);
    res = (core_seq_result){.proposed = 3, .accepted = 2};
    CU_ASSERT_EQUAL(core_complete(H.c, &b, &res, 2.5, &e), 0);
    CU_ASSERT_EQUAL(H.req[1].tokens, 5);
    /* 1 left: no slot */
    n = core_schedule(H.c, 3, &b);
    CU_ASSERT_EQUAL(b.seqs[0].n_spec, 0);
    CU_ASSERT_EQUAL(b.spec_steps, 0);
    res = (core_seq_result){.proposed = 1, .accepted = 1};
    CU_ASSERT_EQUAL(core_complete(H.c, &b, &res, 3, &e), -1);   /* more drafts than slots */
    CU_ASSERT(strstr(e.msg, "request 1") != NULL);
    CU_ASSERT_EQUAL(core_complete(H.c, &b, NULL, 3, &e), 0);
    CU_ASSERT_EQUAL(H.req[1].tokens, 6);
    CU_ASSERT_EQUAL(H.req[1].finished, 1);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_free(H.c);

    /* Off while more requests run than --speculative-disable-by-batch-size. */
    cfg.spec_disable_batch_size = 2;
    h_new(&H, &cfg);
    for (uint64_t i = 1; i <= 3; i++) h_add(&H, i, 15, 20, 0);
    h_step(&H, 0);
    CU_ASSERT_EQUAL(h_step_with(&H, 1, NULL, s, 2, &b), 3);
    CU_ASSERT_EQUAL(b.decode_tokens, 3);
    CU_ASSERT_EQUAL(b.spec_steps, 0);
    core_free(H.c);
}

/* vLLM: running first under one budget, then waiting; chunks not aligned. */
static void test_vllm_budget(void)
{
    core_config cfg = base_cfg();
    cfg.preset = CORE_PRESET_VLLM;
    cfg.chunked_prefill_size = 64;
    h_new(&H, &cfg);
    h_add(&H, 1, 30, 50, 0);
    h_add(&H, 2, 30, 50, 0);
    core_seq s[8];
    core_batch b;
    CU_ASSERT_EQUAL(h_step_with(&H, 0, NULL, s, 8, &b), 2);
    CU_ASSERT_EQUAL(s[0].n_new, 30);
    CU_ASSERT_EQUAL(s[1].n_new, 30);
    h_add(&H, 3, 100, 5, 0);
    CU_ASSERT_EQUAL(h_step_with(&H, 1, NULL, s, 8, &b), 3);
    CU_ASSERT(!s[0].prefill && !s[1].prefill);
    CU_ASSERT_EQUAL(s[2].id, 3);
    CU_ASSERT_EQUAL(s[2].n_new, 62);
    CU_ASSERT(!s[2].samples);
    CU_ASSERT_EQUAL(h_step_with(&H, 2, NULL, s, 8, &b), 3);
    CU_ASSERT_EQUAL(s[2].start, 62);
    CU_ASSERT_EQUAL(s[2].n_new, 38);
    CU_ASSERT(s[2].samples);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_free(H.c);
}

/* vLLM preemption: the newest running request goes, its full pages stay
 * cached, and it comes back first and finds them. */
static void test_vllm_preempt(void)
{
    core_config cfg = base_cfg();
    cfg.preset = CORE_PRESET_VLLM;
    cfg.max_total_tokens = 10 * 16;
    h_new(&H, &cfg);
    h_add(&H, 1, 32, 60, 0);
    h_add(&H, 2, 32, 60, 0);
    h_add(&H, 3, 16, 4, 0);
    double now = 0;
    int64_t pre_step = -1;
    for (int i = 0; i < 400 && !core_idle(H.c); i++) {
        h_step(&H, now);
        now += 0.01;
        if (H.req[2].retracted && pre_step < 0) pre_step = (int64_t)H.last.index;
        if (H.last.index == 40) h_add(&H, 4, 16, 2, now);   /* no page for it; the preempted one goes ahead */
        CU_ASSERT_EQUAL_FATAL(h_check(&H), 0);
    }
    CU_ASSERT(core_idle(H.c));
    /* Step 0 admits all three (2 + 2 + 1 pages); 3 finishes at step 3
     * leaving one cached page; 1 and 2 take a page each at context 48
     * (step 17) and 64 (step 33, evicting 3's page) and hold all 10 at
     * context 80 (step 49): 2, the newest, is preempted. Its 5 full pages
     * stay cached, 1's next page evicts the leaf of them, and when 1
     * finishes 2 comes back and finds the other 4 (64 tokens), ahead of 4,
     * which has waited since step 41 for a page. */
    CU_ASSERT_EQUAL(pre_step, 49);
    CU_ASSERT_EQUAL(H.req[1].retracted, 0);
    CU_ASSERT_EQUAL(H.req[2].retracted, 1);
    CU_ASSERT_EQUAL(H.req[2].admitted, 2);
    CU_ASSERT_EQUAL(H.req[2].admit_step, 60);
    CU_ASSERT_EQUAL(H.req[2].cached, 64);
    CU_ASSERT_EQUAL(H.n_order, 5);
    CU_ASSERT_EQUAL(H.order[3], 2);
    CU_ASSERT_EQUAL(H.order[4], 4);
    for (uint64_t i = 1; i <= 3; i++) CU_ASSERT_EQUAL(H.req[i].tokens, i == 3 ? 4u : 60u);
    CU_ASSERT_EQUAL(H.req[4].tokens, 2);
    core_free(H.c);
}

/* Abort from every state, including while the batch is in flight. */
static void test_abort(void)
{
    core_config cfg = base_cfg();
    cfg.chunked_prefill_size = 64;
    h_new(&H, &cfg);
    h_add(&H, 1, 20, 10, 0);
    h_add(&H, 2, 100, 10, 0);
    h_add(&H, 3, 20, 10, 0);
    h_add(&H, 4, 20, 10, 0);
    core_seq s[4];
    core_batch b;
    CU_ASSERT_EQUAL(h_step_with(&H, 0, NULL, s, 4, &b), 2);   /* 1 whole, 2 chunked */
    CU_ASSERT_EQUAL(s[1].n_new, 32);
    CU_ASSERT_EQUAL(core_abort(H.c, 4, 0.5), 0);      /* waiting */
    CU_ASSERT_EQUAL(core_abort(H.c, 4, 0.5), -1);     /* unknown now */
    CU_ASSERT_EQUAL(core_abort(H.c, 2, 0.6), 0);      /* chunked */
    CU_ASSERT_EQUAL(h_check(&H), 0);
    CU_ASSERT_EQUAL(core_schedule(H.c, 1, &b), 1);    /* 3's prefill (1 waits: prefill first) */
    CU_ASSERT_EQUAL(b.seqs[0].id, 3);
    CU_ASSERT_EQUAL(core_abort(H.c, 3, 1.1), 0);      /* admitted into the batch in flight */
    CU_ASSERT_EQUAL(h_check(&H), 0);
    rh_err e;
    CU_ASSERT_EQUAL(core_complete(H.c, &b, NULL, 1.2, &e), 0);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    CU_ASSERT_EQUAL(core_schedule(H.c, 2, &b), 1);    /* 1 decodes */
    CU_ASSERT(!b.seqs[0].prefill);
    CU_ASSERT_EQUAL(core_abort(H.c, 1, 2.1), 0);      /* decoding, in flight */
    CU_ASSERT_EQUAL(core_complete(H.c, &b, NULL, 2.2, &e), 0);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    CU_ASSERT(core_idle(H.c));
    for (uint64_t i = 1; i <= 4; i++) {
        CU_ASSERT_EQUAL(H.req[i].aborted, 1);
        CU_ASSERT_EQUAL(H.req[i].finish, TR_FINISH_ABORT);
    }
    CU_ASSERT_EQUAL(H.req[1].tokens, 1);              /* the aborted step committed nothing */
    CU_ASSERT_EQUAL(H.req[3].tokens, 0);
    core_stats st;
    core_get_stats(H.c, &st);
    CU_ASSERT_EQUAL(st.aborted, 4);
    CU_ASSERT_EQUAL(st.pages_used, 0);
    CU_ASSERT_EQUAL(core_schedule(H.c, 3, &b), 0);
    /* The id can be used again. */
    CU_ASSERT_PTR_NOT_NULL(h_add(&H, 1, 5, 1, 3));
    double now = 3;
    h_drain(&H, &now, 5);
    CU_ASSERT_EQUAL(H.req[1].finished, 1);
    core_free(H.c);
}

static void test_bad_input(void)
{
    core_config cfg = base_cfg();
    cfg.context_length = 1000;
    cfg.max_total_tokens = 4096;
    h_new(&H, &cfg);
    rh_err e;
    core_req_desc d = {.id = 7, .prompt_len = 0, .max_new_tokens = 5};
    CU_ASSERT_PTR_NULL(core_add(H.c, &d, 0, &e));
    CU_ASSERT(strstr(e.msg, "request 7") && strstr(e.msg, "prompt_len"));
    d.prompt_len = 10;
    d.max_new_tokens = 0;
    CU_ASSERT_PTR_NULL(core_add(H.c, &d, 0, &e));
    CU_ASSERT(strstr(e.msg, "max_new_tokens") != NULL);
    d.prompt_len = 900;
    d.max_new_tokens = 200;
    CU_ASSERT_PTR_NULL(core_add(H.c, &d, 0, &e));
    CU_ASSERT(strstr(e.msg, "--context-length") != NULL);
    uint64_t hs[1] = {5};
    d = (core_req_desc){.id = 8, .prompt_len = 10, .max_new_tokens = 1, .block_hashes = hs, .n_block_hashes = 1};
    CU_ASSERT_PTR_NULL(core_add(H.c, &d, 0, &e));
    CU_ASSERT(strstr(e.msg, "block_size") != NULL);
    d = (core_req_desc){.id = 9, .prompt_len = 10, .max_new_tokens = 1};
    CU_ASSERT_PTR_NOT_NULL(core_add(H.c, &d, 0, &e));
    CU_ASSERT_PTR_NULL(core_add(H.c, &d, 0, &e));
    CU_ASSERT(strstr(e.msg, "already") != NULL);
    core_batch b;
    CU_ASSERT_EQUAL(core_schedule(H.c, 0, &b), 1);
    core_batch fake = b;
    fake.n = 5;
    CU_ASSERT_EQUAL(core_complete(H.c, &fake, NULL, 0, &e), -1);
    CU_ASSERT(strstr(e.msg, "not the one in flight") != NULL);
    core_batch second;
    CU_ASSERT_EQUAL(core_schedule(H.c, 0, &second), 0);   /* one batch at a time */
    CU_ASSERT_EQUAL(core_complete(H.c, &b, NULL, 0, &e), 0);
    CU_ASSERT_EQUAL(core_complete(H.c, &b, NULL, 0, &e), -1);
    CU_ASSERT_EQUAL(h_check(&H), 0);
    core_free(H.c);

    cfg = base_cfg();
    cfg.max_total_tokens = 4096;
    h_new(&H, &cfg);
    d = (core_req_desc){.id = 1, .prompt_len = 4000, .max_new_tokens = 200};
    CU_ASSERT_PTR_NULL(core_add(H.c, &d, 0, &e));
    CU_ASSERT(strstr(e.msg, "KV pool") != NULL);
    core_free(H.c);
}

static void collect(void *ctx, const char *name, const char *value)
{
    rh_err e;
    CU_ASSERT_EQUAL(core_config_set(ctx, name, value, &e), 1);
}

static void test_config(void)
{
    core_config a, b;
    core_config_default(&a);
    rh_err e;
    CU_ASSERT_EQUAL(core_config_validate(&a, &e), 0);
    CU_ASSERT_EQUAL(core_config_set(&a, "chunked-prefill-size", "4096", &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&a, "max_running_requests", "64", &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&a, "schedule-policy", "lof", &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&a, "scheduler", "vllm", &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&a, "radix-eviction-policy", "lfu", &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&a, "enable-mixed-chunk", NULL, &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&a, "max-total-tokens", "100000", &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&a, "speculative-num-steps", "2", &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&a, "schedule-conservativeness", "0.5", &e), 1);
    CU_ASSERT_EQUAL(core_config_set(&a, "port", "80", &e), 0);
    CU_ASSERT_EQUAL(core_config_set(&a, "page-size", "abc", &e), -1);
    CU_ASSERT(strstr(e.msg, "--page-size") != NULL);
    CU_ASSERT_EQUAL(core_config_set(&a, "schedule-policy", "sjf", &e), -1);
    CU_ASSERT(strstr(e.msg, "fcfs") != NULL);
    CU_ASSERT_EQUAL(core_config_set(&a, "disable-radix-cache", "maybe", &e), -1);
    CU_ASSERT_EQUAL(core_config_set(&a, "chunked-prefill-size", "0", &e), -1);
    CU_ASSERT_EQUAL(core_config_takes_value("disable-radix-cache"), 0);
    CU_ASSERT_EQUAL(core_config_takes_value("seed"), 1);
    CU_ASSERT_EQUAL(core_config_takes_value("nope"), -1);
    CU_ASSERT(strstr(core_config_help(), "--chunked-prefill-size N") != NULL);
    CU_ASSERT(strstr(core_config_help(), "--policy-script FILE") != NULL);
    CU_ASSERT_EQUAL(core_config_validate(&a, &e), 0);
    /* Round trip through the text form. */
    core_config_default(&b);
    core_config_foreach(&a, collect, &b);
    CU_ASSERT_EQUAL(b.chunked_prefill_size, 4096);
    CU_ASSERT_EQUAL(b.max_running_requests, 64);
    CU_ASSERT_EQUAL(b.policy, CORE_POLICY_LOF);
    CU_ASSERT_EQUAL(b.preset, CORE_PRESET_VLLM);
    CU_ASSERT_EQUAL(b.evict, CORE_EVICT_LFU);
    CU_ASSERT(b.enable_mixed_chunk);
    CU_ASSERT_EQUAL(b.max_total_tokens, 100000);
    CU_ASSERT_EQUAL(b.spec_steps, 2);
    CU_ASSERT_EQUAL(b.schedule_conservativeness, 0.5);
    /* Impossible combinations. */
    core_config_default(&b);
    b.max_total_tokens = 8;
    CU_ASSERT_EQUAL(core_config_validate(&b, &e), -1);
    CU_ASSERT(strstr(e.msg, "--max-total-tokens") != NULL);
    core_config_default(&b);
    b.chunked_prefill_size = 8;
    CU_ASSERT_EQUAL(core_config_validate(&b, &e), -1);
    core_config_default(&b);
    b.policy = CORE_POLICY_LUA;
    CU_ASSERT_EQUAL(core_config_validate(&b, &e), -1);
    CU_ASSERT(strstr(e.msg, "--policy-script") != NULL);
    core_config_default(&b);
    b.spec_draft_tokens = 3;
    CU_ASSERT_EQUAL(core_config_validate(&b, &e), -1);
    core_config_default(&b);
    b.max_running_requests = 0;
    CU_ASSERT_PTR_NULL(core_new(&b, NULL, &e));
    CU_ASSERT(strstr(e.msg, "--max-running-requests") != NULL);
    /* max_total_tokens resolves the pool. */
    core_config_default(&b);
    b.max_total_tokens = 1000;
    core *c = core_new(&b, NULL, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(core_get_config(c)->total_pages, 62);
    core_stats st;
    core_get_stats(c, &st);
    CU_ASSERT_EQUAL(st.pages_total, 62);
    CU_ASSERT_DOUBLE_EQUAL(st.new_token_ratio, 0.7, 1e-12);
    core_free(c);
}

/* vLLM's flag names set the knobs ours do: one config by each set of
 * names, compared whole; its on/off prefix-cache flags, their values and
 * errors; --help lists every alias. */
static void test_config_vllm_names(void)
{
    static const char *const pairs[][4] = {
        {"max-num-seqs", "max-running-requests", "48", "max-num-seqs"},
        {"max_num_batched_tokens", "chunked-prefill-size", "2048", "max-num-batched-tokens"},
        {"block-size", "page-size", "32", "block-size"},
        {"max-model-len", "context-length", "8192", "max-model-len"},
        {"radix-eviction-policy", "radix-eviction", "lfu", "radix-eviction-policy"},
    };
    core_config theirs, ours;
    core_config_default(&theirs);
    core_config_default(&ours);
    rh_err e;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        CU_ASSERT_EQUAL(core_config_set(&theirs, pairs[i][0], pairs[i][2], &e), 1);
        CU_ASSERT_EQUAL(core_config_set(&ours, pairs[i][1], pairs[i][2], &e), 1);
        CU_ASSERT_STRING_EQUAL(core_config_canonical(pairs[i][0]), pairs[i][1]);
        char flag[64];
        snprintf(flag, sizeof flag, "also --%s", pairs[i][3]);
        CU_ASSERT(strstr(core_config_help(), flag) != NULL);
    }
    CU_ASSERT_EQUAL(memcmp(&theirs, &ours, sizeof theirs), 0);
    CU_ASSERT_EQUAL(theirs.max_running_requests, 48);
    CU_ASSERT_EQUAL(theirs.page_size, 32);
    /* the prefix cache by vLLM's switches */
    CU_ASSERT_EQUAL(core_config_takes_value("no-enable-prefix-caching"), 0);
    CU_ASSERT_EQUAL(core_config_takes_value("enable_prefix_caching"), 0);
    CU_ASSERT_STRING_EQUAL(core_config_canonical("no-enable-prefix-caching"), "disable-radix-cache");
    CU_ASSERT_EQUAL(core_config_set(&theirs, "no-enable-prefix-caching", NULL, &e), 1);
    CU_ASSERT(theirs.disable_radix_cache);
    CU_ASSERT_EQUAL(core_config_set(&theirs, "enable-prefix-caching", NULL, &e), 1);
    CU_ASSERT(!theirs.disable_radix_cache);
    CU_ASSERT_EQUAL(core_config_set(&theirs, "enable_prefix_caching", "false", &e), 1);   /* a Lua key */
    CU_ASSERT(theirs.disable_radix_cache);
    CU_ASSERT_EQUAL(core_config_set(&theirs, "enable-prefix-caching", "yes", &e), -1);
    CU_ASSERT(strstr(e.msg, "--enable-prefix-caching") != NULL);
    CU_ASSERT(strstr(core_config_help(), "--no-enable-prefix-caching") != NULL);
    CU_ASSERT_PTR_NULL(core_config_canonical("max-num-partial-prefills"));
}

/* SGLang's ratio: init 0.7 x conservativeness, decaying by (init - min)/600
 * per decode step to min = 0.14 x init. */
static void test_ratio_decay(void)
{
    core_config cfg = base_cfg();
    cfg.schedule_conservativeness = 0.5;
    h_new(&H, &cfg);
    h_add(&H, 1, 10, 1000, 0);
    double now = 0;
    for (int i = 0; i < 101; i++) h_step(&H, now += 0.01);   /* 1 prefill + 100 decodes */
    core_stats st;
    core_get_stats(H.c, &st);
    double init = 0.35, min = 0.35 * 0.14;
    CU_ASSERT_DOUBLE_EQUAL(st.new_token_ratio, init - 100 * (init - min) / 600, 1e-12);
    for (int i = 0; i < 600; i++) h_step(&H, now += 0.01);
    core_get_stats(H.c, &st);
    CU_ASSERT_DOUBLE_EQUAL(st.new_token_ratio, min, 1e-12);
    core_abort(H.c, 1, now);
    core_batch b;
    CU_ASSERT_EQUAL(core_schedule(H.c, now, &b), 0);        /* idle resets it */
    core_get_stats(H.c, &st);
    CU_ASSERT_DOUBLE_EQUAL(st.new_token_ratio, init, 1e-12);
    core_free(H.c);
}

void register_test_core(void)
{
    CU_pSuite s = CU_add_suite("core", NULL, NULL);
    CU_add_test(s, "20000-token prompt chunks as 8192, 8192, 3616", test_chunked_prefill);
    CU_add_test(s, "max-running-requests caps the running set", test_max_running);
    CU_add_test(s, "lpm picks the longest cached prefix", test_lpm);
    CU_add_test(s, "dfs-weight walks the matched prefixes heaviest subtree first, as SGLang", test_dfs_weight);
    CU_add_test(s, "small pool retracts exactly when expected", test_retraction_known_answer);
    CU_add_test(s, "sglang retracts the fewest outputs first, then the longest prompt", test_retraction_order);
    CU_add_test(s, "content-less pages: re-matched after retraction, dropped at finish", test_unique_pages);
    CU_add_test(s, "shared system prompt hits the cache", test_shared_system_prompt);
    CU_add_test(s, "output tokens extend the prefix chain", test_multi_turn_tokens);
    CU_add_test(s, "trace block hashes map onto pages", test_block_hashes);
    CU_add_test(s, "priority scheduling: admitted as a stable sort by priority (either sign), fcfs or lof within", test_priority_scheduling);
    CU_add_test(s, "mixed chunk batches decodes with a prefill", test_mixed_chunk);
    CU_add_test(s, "speculative slots, caps and rollback", test_speculative_slots);
    CU_add_test(s, "vllm: one budget, running first", test_vllm_budget);
    CU_add_test(s, "vllm: preempt the newest, recompute from cache", test_vllm_preempt);
    CU_add_test(s, "abort from every state", test_abort);
    CU_add_test(s, "bad input is refused with a message", test_bad_input);
    CU_add_test(s, "config set, help, validate, round trip", test_config);
    CU_add_test(s, "vLLM's flag names set the same knobs", test_config_vllm_names);
    CU_add_test(s, "new-token ratio decays as SGLang's", test_ratio_decay);
}
