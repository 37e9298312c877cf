/* test_trace_synth.c — the synthesizer is byte-identical for a seed and
 * its rates and length means fall within statistical tolerance on 100k
 * samples; closed loop, shared prefixes and multi-turn sessions have the
 * structure they promise; slice cuts and rescales as documented. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "trace_helpers.h"
#include "traces/import/import.h"
#include "traces/tools/slice.h"
#include "traces/tools/stats.h"
#include "traces/tools/synth.h"

#define N 100000

static int add_header(void *ctx, const tr_header *h, rh_err *e)
{
    tr_trace *t = ctx;
    (void)e;
    tr_header_free(&t->header);
    return tr_header_copy(&t->header, h);
}

static int add_record(void *ctx, const tr_record *r, rh_err *e)
{
    return tr_trace_add_request(ctx, &r->req, e);
}

static void synth_mem(const tr_synth_opts *o, tr_trace *t)
{
    tr_trace_init(t);
    tr_sink s = {t, add_header, add_record};
    rh_err e = {{0}};
    int rc = tr_synth(o, &s, &e);
    if (rc) printf("\n    %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

static void gaps_moments(const tr_trace *t, double *mean, double *cv2)
{
    double s = 0, s2 = 0;
    size_t n = t->n_requests - 1;
    for (size_t i = 1; i < t->n_requests; i++) {
        double g = t->requests[i].arrival - t->requests[i - 1].arrival;
        s += g;
        s2 += g * g;
    }
    *mean = s / (double)n;
    *cv2 = (s2 / (double)n - *mean * *mean) / (*mean * *mean);
}

static double mean_len(const tr_trace *t, int output)
{
    double s = 0;
    for (size_t i = 0; i < t->n_requests; i++) s += output ? t->requests[i].output_len : t->requests[i].input_len;
    return s / (double)t->n_requests;
}

static void test_byte_identical(void)
{
    const char *flags[] = {
        "--requests 3000",
        "--requests 3000 --arrival gamma --burstiness 0.3 --turns 4 --sessions 7",
        "--arrival closed-loop --clients 5 --prefix-groups 3 --prompts-per-group 9 --system-prompt-len 700 --turns 2",
        "--requests 2000 --input-dist uniform --input-range-ratio 0.9 --output-dist fixed --block-size 64",
    };
    for (int k = 0; k < 4; k++) {
        char a[256], b[256], c[256], cmd[2048], out[512];
        tu_tmp_path("synth_a.rhtr", a, sizeof a);
        tu_tmp_path("synth_b.rhtr", b, sizeof b);
        tu_tmp_path("synth_c.rhtr", c, sizeof c);
        snprintf(cmd, sizeof cmd, "%s trace synth %s --seed 9 -o %s && %s trace synth %s --seed 9 -o %s && "
                 "%s trace synth %s --seed 10 -o %s && cmp -s %s %s && ! cmp -s %s %s",
                 tu_bin(), flags[k], a, tu_bin(), flags[k], b, tu_bin(), flags[k], c, a, b, a, c);
        int rc = tu_run(cmd, out, sizeof out);
        if (rc) printf("\n    %s: %s\n", flags[k], out);
        CU_ASSERT_EQUAL(rc, 0);
        unlink(a), unlink(b), unlink(c);
    }
}

static void test_poisson_and_lengths(void)
{
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    o.requests = N;
    o.rate = 50;
    o.input = (tr_len_dist){TR_LEN_LOGNORMAL, 1000, 0, 1.0};
    o.output = (tr_len_dist){TR_LEN_UNIFORM, 300, 0.5, 0};
    tr_trace t;
    synth_mem(&o, &t);
    CU_ASSERT_EQUAL(t.n_requests, N);
    double mean, cv2;
    gaps_moments(&t, &mean, &cv2);
    /* Standard errors on 100k exponential gaps: 0.32% of the mean, ~0.9% of
     * the squared CV; the tolerances are about five of them. */
    CU_ASSERT_DOUBLE_EQUAL(mean, 1.0 / 50, 0.016 / 50);
    CU_ASSERT_DOUBLE_EQUAL(cv2, 1.0, 0.05);
    /* lognormal sigma 1: sd = mean * sqrt(e - 1) -> SE 0.41% */
    CU_ASSERT_DOUBLE_EQUAL(mean_len(&t, 0), 1000, 25);
    /* uniform [150, 450]: SE 0.27 tokens */
    CU_ASSERT_DOUBLE_EQUAL(mean_len(&t, 1), 300, 2);
    uint32_t lo = UINT32_MAX, hi = 0;
    for (size_t i = 0; i < t.n_requests; i++) {
        lo = t.requests[i].output_len < lo ? t.requests[i].output_len : lo;
        hi = t.requests[i].output_len > hi ? t.requests[i].output_len : hi;
    }
    CU_ASSERT_EQUAL(lo, 150);
    CU_ASSERT_EQUAL(hi, 450);
    /* Arrivals are whole microseconds, ids count up. */
    int ok = 1;
    for (size_t i = 0; i < t.n_requests && ok; i++)
        ok = t.requests[i].id == i && t.requests[i].arrival == (double)llround(t.requests[i].arrival * 1e6) / 1e6 &&
             t.requests[i].n_hashes == tr_blocks(t.requests[i].input_len, 512);
    CU_ASSERT(ok);
    CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "arrival"), "poisson");
    tr_trace_free(&t);
}

static void test_gamma_and_fixed(void)
{
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    o.requests = N;
    o.arrival = TR_ARRIVAL_GAMMA;
    o.rate = 20;
    o.burstiness = 0.25;
    o.input = (tr_len_dist){TR_LEN_FIXED, 777, 0, 0};
    o.output = (tr_len_dist){TR_LEN_LOGNORMAL, 200, 0, 0.5};
    tr_trace t;
    synth_mem(&o, &t);
    double mean, cv2;
    gaps_moments(&t, &mean, &cv2);
    /* gamma shape 0.25: CV 2, so the mean's SE is 0.63%; the squared CV is
     * 1/shape = 4 with an SE near 1.6%. */
    CU_ASSERT_DOUBLE_EQUAL(mean, 1.0 / 20, 0.035 / 20);
    CU_ASSERT_DOUBLE_EQUAL(cv2, 4.0, 0.4);
    CU_ASSERT_DOUBLE_EQUAL(mean_len(&t, 0), 777, 0);
    CU_ASSERT_DOUBLE_EQUAL(mean_len(&t, 1), 200, 200 * 0.53 / sqrt(N) * 5);
    tr_trace_free(&t);
}

static void test_closed_loop(void)
{
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    o.requests = 500;
    o.arrival = TR_ARRIVAL_CLOSED;
    o.clients = 12;
    o.turns = 3;
    tr_trace t;
    synth_mem(&o, &t);
    CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "arrival"), "closed-loop");
    CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "clients"), "12");
    int ok = 1;
    for (size_t i = 0; i < t.n_requests && ok; i++) {
        ok = t.requests[i].arrival == 0;
        /* Closed loop lists each session's turns one after another. */
        if (ok && i % 3) ok = t.requests[i].session_id == t.requests[i - 1].session_id &&
                              t.requests[i].turn == t.requests[i - 1].turn + 1;
    }
    CU_ASSERT(ok);
    tr_trace_free(&t);
}

static double hit_ratio(const tr_trace *t)
{
    tr_stats_acc *a = tr_stats_new();
    tr_sink s = tr_stats_sink(a);
    rh_err e;
    s.header(s.ctx, &t->header, &e);
    for (size_t i = 0; i < t->n_requests; i++) {
        tr_record r = {.kind = TR_REQUEST};
        r.req = t->requests[i];
        s.record(s.ctx, &r, &e);
    }
    tr_stats st;
    tr_stats_finish(a, &st, &e);
    tr_stats_free(a);
    return st.prefix_hit_ratio;
}

static void test_shared_prefix_groups(void)
{
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    o.groups = 4;
    o.prompts_per_group = 8;
    o.system_prompt = 1024;   /* two full blocks of 512 */
    o.input = (tr_len_dist){TR_LEN_FIXED, 100, 0, 0};
    o.requests = 32;
    tr_trace t;
    synth_mem(&o, &t);
    /* 32 prompts of 1124 tokens, 3 blocks each; in each group the first
     * prompt misses its 2 system blocks and the 7 others hit them. */
    CU_ASSERT_DOUBLE_EQUAL(hit_ratio(&t), 56.0 / 96.0, 1e-12);
    int ok = 1;
    for (size_t i = 0; i < t.n_requests && ok; i++) ok = t.requests[i].input_len == 1124 && t.requests[i].n_hashes == 3;
    CU_ASSERT(ok);
    tr_trace_free(&t);
    /* A second pass repeats every prompt: all of its blocks hit. */
    o.requests = 64;
    synth_mem(&o, &t);
    CU_ASSERT_DOUBLE_EQUAL(hit_ratio(&t), (56.0 + 96.0) / 192.0, 1e-12);
    for (size_t i = 32; i < 64; i++) {
        int found = 0;
        for (size_t j = 0; j < 32 && !found; j++)
            found = t.requests[j].input_len == t.requests[i].input_len &&
                    !memcmp(t.requests[j].hashes, t.requests[i].hashes, 3 * sizeof(uint64_t));
        CU_ASSERT(found);
    }
    tr_trace_free(&t);
}

static void test_multi_turn(void)
{
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    o.requests = 20000;
    o.turns = 5;
    o.sessions = 6;
    o.block_size = 64;
    tr_trace t;
    synth_mem(&o, &t);
    /* Per session: turn k's prompt is turn k-1's prompt + output + a new
     * message, and its hashes start with turn k-1's full blocks. */
    const tr_request **last = calloc(t.n_requests + 2, sizeof *last);
    int ok = 1, turns_seen = 0;
    for (size_t i = 0; i < t.n_requests && ok; i++) {
        const tr_request *r = &t.requests[i];
        ok = r->session_id >= 1 && r->session_id <= t.n_requests;
        if (!ok) break;
        const tr_request *p = last[r->session_id];
        if (r->turn == 0) {
            ok = p == NULL;
        } else {
            turns_seen++;
            uint32_t keep = p->input_len / 64;
            ok = p && r->turn == p->turn + 1 && r->input_len > p->input_len + p->output_len &&
                 r->n_hashes == tr_blocks(r->input_len, 64) && !memcmp(r->hashes, p->hashes, keep * sizeof(uint64_t)) &&
                 r->hashes[keep] > p->hashes[p->n_hashes - 1];
        }
        ok = ok && r->turn < 5;
        last[r->session_id] = r;
    }
    CU_ASSERT(ok);
    CU_ASSERT(turns_seen > 15000);
    CU_ASSERT(hit_ratio(&t) > 0.5);
    free(last);
    tr_trace_free(&t);
}

/* Adapters follow Zipf(alpha) over 1..N: the counts of the most and the
 * tenth most popular against their closed-form shares (5 standard
 * deviations), uniform at alpha 0; everything else equals the trace drawn
 * without adapters; a session keeps its adapter through its turns. */
static void test_adapters(void)
{
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    o.requests = 20000;
    tr_trace base, t;
    synth_mem(&o, &base);
    o.adapters = 100;
    synth_mem(&o, &t);
    CU_ASSERT_EQUAL_FATAL(t.n_requests, base.n_requests);
    double h = 0;
    for (int k = 1; k <= 100; k++) h += 1.0 / k;
    uint32_t count[101] = {0};
    int same = 1;
    for (size_t i = 0; i < t.n_requests; i++) {
        const tr_request *a = &t.requests[i], *b = &base.requests[i];
        same &= a->arrival == b->arrival && a->input_len == b->input_len && a->output_len == b->output_len &&
                a->n_hashes == b->n_hashes && b->adapter == 0;
        CU_ASSERT_FATAL(a->adapter >= 1 && a->adapter <= 100);
        count[a->adapter]++;
    }
    CU_ASSERT(same);
    /* trace stats counts them: 100 adapters, the first the most used */
    tr_stats_acc *acc = tr_stats_new();
    tr_sink ss = tr_stats_sink(acc);
    rh_err se;
    CU_ASSERT_EQUAL_FATAL(tr_synth(&o, &ss, &se), 0);
    tr_stats st;
    CU_ASSERT_EQUAL(tr_stats_finish(acc, &st, &se), 0);
    CU_ASSERT(st.adapters == 100 && st.adapter_requests == 20000 && st.top_adapter_requests == count[1]);
    tr_stats_free(acc);
    int ks[] = {1, 10};
    for (int i = 0; i < 2; i++) {
        double p = 1.0 / ks[i] / h, mean = p * 20000, sd = sqrt(20000 * p * (1 - p));
        CU_ASSERT(fabs(count[ks[i]] - mean) < 5 * sd);
    }
    tr_trace_free(&t);
    o.adapter_zipf = 0;
    synth_mem(&o, &t);
    memset(count, 0, sizeof count);
    for (size_t i = 0; i < t.n_requests; i++) count[t.requests[i].adapter]++;
    uint32_t lo = UINT32_MAX, hi = 0;
    for (int k = 1; k <= 100; k++) lo = count[k] < lo ? count[k] : lo, hi = count[k] > hi ? count[k] : hi;
    CU_ASSERT(lo > 200 - 5 * 14 && hi < 200 + 5 * 14);   /* sd of Binomial(20000, 0.01) is 14.07 */
    tr_trace_free(&t);
    tr_trace_free(&base);

    o.turns = 4;
    o.adapter_zipf = 1;
    synth_mem(&o, &t);
    uint32_t *of = calloc(t.n_requests + 2, sizeof *of);
    int kept = 1, distinct = 0;
    for (size_t i = 0; i < t.n_requests; i++) {
        const tr_request *r = &t.requests[i];
        if (r->turn == 0) of[r->session_id] = r->adapter, distinct += r->adapter != t.requests[0].adapter;
        else kept &= of[r->session_id] == r->adapter;
    }
    CU_ASSERT(kept);
    CU_ASSERT(distinct > 100);
    CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "synth.adapters"), "100");
    free(of);
    tr_trace_free(&t);
}

/* Lengths drawn from `text` (a trace file named `name`): two kinds of
 * request, each drawn about half the time, and nothing else. */
static void lengths_from(const char *name, const char *text)
{
    char src[256], out[256], cmd[1024], msg[1024];
    tu_tmp_path(name, src, sizeof src);
    tu_tmp_path("synth_rs.rhtr", out, sizeof out);
    tu_write_file(src, text, strlen(text));
    snprintf(cmd, sizeof cmd, "%s trace synth --requests 1000 --rate 10 --lengths-from %s -o %s", tu_bin(), src,
             out);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, msg, sizeof msg), 0);
    tr_trace t;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(out, &t, &e), 0);
    int a = 0, b = 0;
    for (size_t i = 0; i < t.n_requests; i++) {
        a += t.requests[i].input_len == 11 && t.requests[i].output_len == 5;
        b += t.requests[i].input_len == 700 && t.requests[i].output_len == 9;
    }
    CU_ASSERT_EQUAL(a + b, 1000);
    CU_ASSERT(a > 400 && b > 400);
    CU_ASSERT(t.requests[999].arrival > 50 && t.requests[999].arrival < 150);   /* arrivals of its own */
    tr_trace_free(&t);
    unlink(src), unlink(out);
}

static void test_lengths_from_another_trace(void)
{
    lengths_from("synth_src.jsonl", "{\"rehearse_trace\":1,\"block_size\":0}\n"
                                    "{\"type\":\"request\",\"arrival\":0,\"input_len\":11,\"output_len\":5}\n"
                                    "{\"type\":\"request\",\"arrival\":1,\"input_len\":700,\"output_len\":9}\n");
    /* Vidur's length-only traces have no arrivals to keep. */
    lengths_from("synth_src.csv", "num_prefill_tokens,num_decode_tokens\n11,5\n700,9\n");
}

static void slice_mem(const tr_trace *in, const tr_slice_opts *o, tr_trace *out)
{
    tr_trace_init(out);
    tr_sink down = {out, add_header, add_record};
    tr_slicer *s = tr_slicer_new(o, &down);
    tr_sink sink = tr_slicer_sink(s);
    rh_err e;
    CU_ASSERT_EQUAL(sink.header(sink.ctx, &in->header, &e), 0);
    for (size_t i = 0; i < in->n_requests; i++) {
        tr_record r = {.kind = TR_REQUEST};
        r.req = in->requests[i];
        if (sink.record(sink.ctx, &r, &e) != 0) break;
    }
    tr_slicer_free(s);
}

static void test_slice(void)
{
    tr_synth_opts so;
    tr_synth_opts_init(&so);
    so.requests = N;
    so.rate = 100;
    so.groups = 10;
    so.prompts_per_group = 1000;
    so.system_prompt = 2048;
    tr_trace t, u;
    synth_mem(&so, &t);

    tr_slice_opts o;
    tr_slice_opts_init(&o);
    o.from = 100;
    o.to = 200;
    slice_mem(&t, &o, &u);
    size_t expect = 0;
    for (size_t i = 0; i < t.n_requests; i++) expect += t.requests[i].arrival >= 100 && t.requests[i].arrival < 200;
    CU_ASSERT_EQUAL(u.n_requests, expect);
    CU_ASSERT(u.n_requests > 9000 && u.requests[0].arrival >= 0 && u.requests[u.n_requests - 1].arrival < 100);
    CU_ASSERT(tr_header_get(&u.header, "slice") != NULL);
    tr_trace_free(&u);

    tr_slice_opts_init(&o);
    o.sample = 0.25;
    o.first = 20000;
    slice_mem(&t, &o, &u);
    CU_ASSERT_EQUAL(u.n_requests, 20000);
    /* about a quarter of the first ~80000 were kept */
    CU_ASSERT(u.requests[u.n_requests - 1].id > 76000 && u.requests[u.n_requests - 1].id < 84000);
    tr_trace_free(&u);

    tr_slice_opts_init(&o);
    o.rate_scale = 2;
    o.input_scale = 2;
    o.output_scale = 0.5;
    slice_mem(&t, &o, &u);
    CU_ASSERT_EQUAL_FATAL(u.n_requests, t.n_requests);
    int ok = 1;
    for (size_t i = 0; i < u.n_requests && ok; i++) {
        const tr_request *a = &t.requests[i], *b = &u.requests[i];
        ok = fabs(b->arrival - a->arrival / 2) < 1e-9 && b->input_len == a->input_len * 2 &&
             b->output_len == (uint32_t)llround(a->output_len * 0.5 < 1 ? 1 : a->output_len * 0.5) &&
             b->n_hashes == tr_blocks(b->input_len, 512);
    }
    CU_ASSERT(ok);
    /* Shared prefixes stay shared: requests of one group (same first block)
     * share their first four blocks after doubling, and nothing else does. */
    ok = 1;
    for (size_t i = 1; i < 2000 && ok; i++)
        for (size_t j = 0; j < i && ok; j += 97) {
            int same = t.requests[i].hashes[0] == t.requests[j].hashes[0];
            int same4 = !memcmp(u.requests[i].hashes, u.requests[j].hashes, 4 * sizeof(uint64_t));
            ok = same == same4;
        }
    CU_ASSERT(ok);
    CU_ASSERT_DOUBLE_EQUAL(hit_ratio(&u), hit_ratio(&t), 0.01);
    tr_trace_free(&u);

    /* Length bounds drop exactly the requests past them, after scaling. */
    tr_slice_opts_init(&o);
    o.input_scale = 1.5;
    o.max_input_len = 4500;
    o.max_total_len = 4700;
    slice_mem(&t, &o, &u);
    size_t fits = 0;
    for (size_t i = 0; i < t.n_requests; i++) {
        uint64_t in = (uint64_t)llround(t.requests[i].input_len * 1.5);
        fits += in <= 4500 && in + t.requests[i].output_len <= 4700;
    }
    CU_ASSERT_EQUAL(u.n_requests, fits);
    CU_ASSERT(fits > 1000 && fits < t.n_requests);
    ok = 1;
    for (size_t i = 0; i < u.n_requests && ok; i++)
        ok = u.requests[i].input_len <= 4500 && u.requests[i].input_len + u.requests[i].output_len <= 4700;
    CU_ASSERT(ok);
    tr_trace_free(&u);
    tr_trace_free(&t);
}

void register_test_trace_synth(void)
{
    CU_pSuite s = CU_add_suite("trace_synth", NULL, NULL);
    CU_add_test(s, "byte-identical for a seed, different for another", test_byte_identical);
    CU_add_test(s, "Poisson rate, lognormal and uniform means (100k)", test_poisson_and_lengths);
    CU_add_test(s, "gamma burstiness and fixed lengths (100k)", test_gamma_and_fixed);
    CU_add_test(s, "closed loop", test_closed_loop);
    CU_add_test(s, "shared-prefix groups share their blocks", test_shared_prefix_groups);
    CU_add_test(s, "multi-turn sessions extend the previous turn", test_multi_turn);
    CU_add_test(s, "adapters: Zipf popularity, the rest unchanged, one per session", test_adapters);
    CU_add_test(s, "lengths drawn from another trace, or a length-only one", test_lengths_from_another_trace);
    CU_add_test(s, "slice: window, sample, first N, rate and length scales, length bounds", test_slice);
}
