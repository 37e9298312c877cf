/* test_sim.c — the simulator against closed forms and known phenomena:
 * one request and N identical requests priced by hand with a linear model,
 * Little's law on a long Poisson run, head-of-line blocking with and without
 * chunked prefill, speculative decoding with certain acceptance, determinism
 * of the written run, and a configuration that cannot serve the trace. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sim/sim.h"
#include "testutil.h"
#include "traces/import/import.h"

/* The example coefficients. */
static const cost_linear_coef K = {0.004, 2e-5, 1e-4, 1e-8, 1e-10};

static void add_req(tr_trace *t, uint64_t id, double at, uint32_t in, uint32_t out)
{
    tr_request r = {.id = id, .arrival = at, .input_len = in, .output_len = out};
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(t, &r, &e), 0);
}

static void cfg_init(sim_config *c)
{
    sim_config_default(c);
    c->core.max_total_tokens = 1 << 20;
    c->core.total_pages = 0;
}

static int run(const sim_config *c, const tr_trace *t, const cost_model *m, sim_result *res)
{
    rh_err e = {{0}};
    int rc = sim_run(c, t, m, res, &e);
    if (rc != 0) printf("\n  sim_run: %s\n", e.msg);
    return rc;
}

static double decode_step(uint32_t seqs, uint64_t ctx_sum)
{
    return K.base_s + K.per_decode_seq_s * seqs + K.per_context_token_s * (double)ctx_sum;
}

/* One 1000-token prompt, 10 output tokens, on an idle server: one prefill
 * step (TTFT), then 9 decode steps whose context grows by one each. */
static void test_one_request_closed_form(void)
{
    tr_trace t;
    tr_trace_init(&t);
    add_req(&t, 1, 0.5, 1000, 10);
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    sim_result res;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    double ttft = K.base_s + K.per_prefill_token_s * 1000 + K.per_attention_s * 1000.0 * 1000.0;
    double e2e = ttft;
    for (uint32_t j = 1; j <= 9; j++) e2e += decode_step(1, 999 + j);
    CU_ASSERT_EQUAL(res.summary.completed, 1);
    CU_ASSERT_DOUBLE_EQUAL(res.requests[0].ttft, ttft, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.requests[0].e2e, e2e, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.requests[0].send, 0.5, 0);
    CU_ASSERT_DOUBLE_EQUAL(res.summary.ttft_ms.mean, ttft * 1e3, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(res.summary.tpot_ms.mean, (e2e - ttft) / 9 * 1e3, 1e-9);
    CU_ASSERT_EQUAL(res.summary.steps, 10);
    CU_ASSERT_DOUBLE_EQUAL(res.summary.duration, e2e, 1e-12);
    sim_result_free(&res);
    cost_free(m);
    tr_trace_free(&t);
}

/* The request and output-token overheads run beside the GPU: a request
 * joins the scheduler when the tokenizer is done with it (one at a time),
 * a step's tokens reach their clients when the detokenizer has processed
 * them (its tokens one after another); the step and forward overheads are
 * in every step. Checked in closed form on one request, then on five that
 * arrive together (each waits for the tokenizer) and on four decoding
 * together (each step's delivery waits for the whole step's tokens). */
static void test_overheads_on_the_clock(void)
{
    const cost_overheads ov = {.step_s = 0.001, .forward_s = 0.0002, .request_s = 0.03, .output_token_s = 0.0005};
    double extra = ov.step_s + ov.forward_s;
    tr_trace t;
    tr_trace_init(&t);
    add_req(&t, 1, 0.5, 1000, 10);
    cost_model *m = cost_linear_new(&K);
    m->over = ov;
    sim_config c;
    cfg_init(&c);
    sim_result res;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    double prefill = K.base_s + K.per_prefill_token_s * 1000 + K.per_attention_s * 1000.0 * 1000.0 + extra;
    double ttft = ov.request_s + prefill + ov.output_token_s, e2e = ttft;
    for (uint32_t j = 1; j <= 9; j++) e2e += decode_step(1, 999 + j) + extra;
    CU_ASSERT_DOUBLE_EQUAL(res.requests[0].ttft, ttft, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.requests[0].e2e, e2e, 1e-12);
    sim_result_free(&res);
    tr_trace_free(&t);

    /* Five one-token requests at once: the k-th is tokenized by 0.03 (k+1). */
    tr_trace_init(&t);
    for (uint32_t k = 0; k < 5; k++) add_req(&t, k, 0, 100, 1);
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    double step = K.base_s + K.per_prefill_token_s * 100 + K.per_attention_s * 100.0 * 100.0 + extra;
    for (uint32_t k = 0; k < 5; k++)
        CU_ASSERT_DOUBLE_EQUAL(res.requests[k].ttft, ov.request_s * (k + 1) + step + ov.output_token_s, 1e-12);
    sim_result_free(&res);
    tr_trace_free(&t);

    /* Four decoding together, no tokenizer cost: every delivery waits for
     * the step's four tokens, so TTFT grows by 4 x 0.5 ms and the gaps stay. */
    m->over.request_s = 0;
    tr_trace_init(&t);
    for (uint32_t k = 0; k < 4; k++) add_req(&t, k, 0, 100, 3);
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    double prefill4 = K.base_s + K.per_prefill_token_s * 400 + K.per_attention_s * 4 * 100.0 * 100.0 + extra;
    double d1 = decode_step(4, 4 * 100) + extra, d2 = decode_step(4, 4 * 101) + extra;
    for (uint32_t k = 0; k < 4; k++) {
        CU_ASSERT_DOUBLE_EQUAL(res.requests[k].ttft, prefill4 + 4 * ov.output_token_s, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(res.requests[k].e2e, prefill4 + d1 + d2 + 4 * ov.output_token_s, 1e-12);
    }
    sim_result_free(&res);

    /* A closed-loop client sends its next request when the last token
     * reaches it, not when the step ends. */
    c.max_concurrency = 1;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    for (uint32_t k = 1; k < 4; k++)
        CU_ASSERT_DOUBLE_EQUAL(res.requests[k].send, res.requests[k - 1].send + res.requests[k - 1].e2e, 1e-12);
    sim_result_free(&res);
    tr_trace_free(&t);
    cost_free(m);
}

/* The arrival overhead (network, HTTP) is every request's at once; the
 * tokenizer after it takes them one at a time: a request is ready at
 * max(sent + arrival_s, the tokenizer free) + request_s. Three one-token
 * requests sent together with 10 ms of arrival and 3 ms of tokenizer are
 * ready at 13, 16 and 19 ms, each prefilled alone in a 2 ms step (the
 * server idle in between): TTFTs 15, 18 and 21 ms, where arrivals that
 * queued behind one another would give 15, 28 and 41. A fourth sent at
 * 100 ms finds the tokenizer long free: 15 ms. */
static void test_arrival_overhead_in_parallel(void)
{
    const cost_linear_coef k = {0.001, 1e-5, 0, 0, 0};
    cost_model *m = cost_linear_new(&k);
    m->over.arrival_s = 0.010;
    m->over.request_s = 0.003;
    tr_trace t;
    tr_trace_init(&t);
    for (uint32_t i = 0; i < 3; i++) add_req(&t, i + 1, 0, 100, 1);
    add_req(&t, 4, 0.1, 100, 1);
    sim_config c;
    cfg_init(&c);
    sim_result res;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    CU_ASSERT_EQUAL_FATAL(res.n_requests, 4);
    double step = k.base_s + k.per_prefill_token_s * 100, ready = 0;
    for (uint32_t i = 0; i < 4; i++) {
        double sent = i < 3 ? 0 : 0.1;
        ready = fmax(sent + m->over.arrival_s, ready) + m->over.request_s;
        CU_ASSERT_DOUBLE_EQUAL(res.requests[i].send, sent, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(res.requests[i].ttft, ready + step - sent, 1e-12);
    }
    static const double by_hand[] = {0.015, 0.018, 0.021, 0.015};
    for (uint32_t i = 0; i < 4; i++) CU_ASSERT_DOUBLE_EQUAL(res.requests[i].ttft, by_hand[i], 1e-12);
    CU_ASSERT_EQUAL(res.summary.steps, 4);
    sim_result_free(&res);
    tr_trace_free(&t);
    cost_free(m);
}

/* N identical requests arriving together share one prefill step and then
 * decode in lockstep. */
static void test_identical_requests_together(void)
{
    enum { N = 6 };
    tr_trace t;
    tr_trace_init(&t);
    for (int i = 0; i < N; i++) add_req(&t, (uint64_t)i + 1, 0, 1000, 8);
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    sim_result res;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    double ttft = K.base_s + K.per_prefill_token_s * 1000 * N + K.per_attention_s * 1e6 * N;
    double e2e = ttft;
    for (uint32_t j = 1; j <= 7; j++) e2e += decode_step(N, (uint64_t)N * (999 + j));
    CU_ASSERT_EQUAL(res.summary.completed, N);
    for (int i = 0; i < N; i++) {
        CU_ASSERT_DOUBLE_EQUAL(res.requests[i].ttft, ttft, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(res.requests[i].e2e, e2e, 1e-12);
    }
    CU_ASSERT_DOUBLE_EQUAL(res.summary.max_batch_size, N, 0);
    sim_result_free(&res);
    cost_free(m);
    tr_trace_free(&t);
}

static uint64_t rng_state = 42;
static double unit(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
}

/* Little's law, L = lambda W, on a long Poisson run: the time-average number
 * of requests in the system, taken from the step records (queue lengths
 * weighted by step duration), equals the completion rate times the mean
 * time in system, taken from the request records. */
static void test_littles_law(void)
{
    tr_trace t;
    tr_trace_init(&t);
    double at = 0;
    rng_state = 42;
    for (int i = 0; i < 6000; i++) {
        at += -log(1 - unit()) / 8.0;                /* 8 requests/s */
        add_req(&t, (uint64_t)i + 1, at, 200 + (uint32_t)(unit() * 1600), 20 + (uint32_t)(unit() * 300));
    }
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    char out[256];
    c.out_path = tu_tmp_path("little.rhtr", out, sizeof out);
    sim_result res;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    tr_trace run_t;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(out, &run_t, &e), 0);
    CU_ASSERT_EQUAL(run_t.n_requests, 6000);
    CU_ASSERT_EQUAL(run_t.n_steps, res.summary.steps);
    double area = 0, w = 0;
    for (size_t i = 0; i < run_t.n_steps; i++)
        area += (double)(run_t.steps[i].waiting + run_t.steps[i].running) * run_t.steps[i].duration;
    for (size_t i = 0; i < run_t.n_requests; i++) w += run_t.requests[i].e2e;
    double T = res.summary.duration;
    double L = area / T, lambda = (double)res.summary.completed / T, W = w / (double)run_t.n_requests;
    printf("\n  Little: L=%.3f  lambda*W=%.3f  (lambda %.3f/s, W %.3f s, busy %.0f%%) ", L, lambda * W, lambda, W,
           100 * res.summary.busy_time / T);
    CU_ASSERT(fabs(L - lambda * W) / (lambda * W) < 0.02);
    CU_ASSERT(res.summary.busy_time / T > 0.3);      /* loaded enough to queue */
    tr_trace_free(&run_t);
    sim_result_free(&res);
    cost_free(m);
    tr_trace_free(&t);
}

/* A 20,000-token prompt arrives just ahead of 8 short ones. */
static void hol_trace(tr_trace *t)
{
    tr_trace_init(t);
    add_req(t, 1, 0.0, 20000, 4);
    for (int i = 0; i < 8; i++) add_req(t, (uint64_t)i + 2, 0.001, 64, 4);
}

static double max_short_ttft(const sim_result *r)
{
    double mx = 0;
    for (uint64_t i = 1; i < r->n_requests; i++)
        if (r->requests[i].ttft > mx) mx = r->requests[i].ttft;
    return mx;
}

static void test_head_of_line_ttft(void)
{
    tr_trace t;
    hol_trace(&t);
    cost_model *m = cost_linear_new(&K);
    /* One chunk step: 8192 prompt tokens at most, attention at most 8192 x 20000. */
    double chunk_step = K.base_s + K.per_prefill_token_s * 8192 + K.per_attention_s * 8192.0 * 20000.0;
    double whole = K.base_s + K.per_prefill_token_s * 20000 + K.per_attention_s * 20000.0 * 20000.0;

    /* Chunking on, with the long prompt capped per step so short prompts share
     * the budget: a short request waits at most for the step in flight when it
     * arrives, then runs in the next one. */
    sim_config c;
    cfg_init(&c);
    c.core.preset = CORE_PRESET_VLLM;
    c.core.chunked_prefill_size = 8192;
    c.core.long_prefill_token_threshold = 4096;
    sim_result on;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &on), 0);
    double on_ttft = max_short_ttft(&on);

    /* Chunking off: the whole 20,000-token prefill runs first. */
    cfg_init(&c);
    c.core.chunked_prefill_size = -1;
    c.core.max_prefill_tokens = 16384;
    sim_result off;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &off), 0);
    double off_ttft = max_short_ttft(&off);
    printf("\n  short TTFT: chunked %.1f ms (chunk step %.1f ms), unchunked %.1f ms (whole prefill %.1f ms) ",
           on_ttft * 1e3, chunk_step * 1e3, off_ttft * 1e3, whole * 1e3);
    CU_ASSERT(on_ttft <= 2 * chunk_step);            /* the step in flight, then its own */
    CU_ASSERT(off_ttft >= whole);                    /* stalled behind the whole prefill */
    CU_ASSERT(off_ttft > 2 * on_ttft);
    /* The long request itself still completes, and its TTFT spans its chunks. */
    CU_ASSERT(on.requests[0].ttft >= 3 * K.base_s);
    CU_ASSERT_EQUAL(on.summary.completed, 9);
    sim_result_free(&on);
    sim_result_free(&off);
    cost_free(m);
    tr_trace_free(&t);
}

/* Requests already decoding when the long prompt arrives: with chunked
 * prefill mixed into decode steps their inter-token gap is at most one chunk
 * step; without chunking a gap spans the whole long prefill. */
static void test_head_of_line_decode_stall(void)
{
    tr_trace t;
    tr_trace_init(&t);
    for (int i = 0; i < 4; i++) add_req(&t, (uint64_t)i + 1, 0.0, 64, 400);
    add_req(&t, 9, 0.05, 20000, 2);
    cost_model *m = cost_linear_new(&K);
    double whole = K.base_s + K.per_prefill_token_s * 20000 + K.per_attention_s * 20000.0 * 20000.0;
    double chunk_step = K.base_s + K.per_prefill_token_s * 8192 + K.per_attention_s * 8192.0 * 20000.0 +
                        decode_step(4, 4 * 500) - K.base_s;
    sim_config c;
    cfg_init(&c);
    c.core.enable_mixed_chunk = true;
    sim_result on;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &on), 0);
    cfg_init(&c);
    c.core.chunked_prefill_size = -1;
    sim_result off;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &off), 0);
    printf("\n  decode max ITL: chunked+mixed %.1f ms (chunk step %.1f ms), unchunked %.1f ms (prefill %.1f ms) ",
           on.summary.itl_ms.max, chunk_step * 1e3, off.summary.itl_ms.max, whole * 1e3);
    CU_ASSERT(on.summary.itl_ms.max <= chunk_step * 1e3 + 1e-9);
    CU_ASSERT(off.summary.itl_ms.max >= whole * 1e3);
    sim_result_free(&on);
    sim_result_free(&off);
    cost_free(m);
    tr_trace_free(&t);
}

/* The linear price of one step record, by hand. */
static double linear_price(const tr_step *s)
{
    return K.base_s + K.per_prefill_token_s * s->prefill_tokens + K.per_decode_seq_s * s->decode_seqs +
           K.per_context_token_s * (double)s->decode_context + K.per_attention_s * (double)s->prefill_attn;
}

/* One decode and a 20,000-token prompt under --enable-mixed-chunk: the
 * prompt runs as three chunks, each in a step with the decode (a chunk is the
 * 8192 budget less the decode's token, cut to a page: 8176, 8176, 3648).
 * Every step lasts exactly its linear price, the clock is the sum of the
 * steps, and the decode's longest gap between tokens is the longest mixed
 * step. */
static void test_mixed_step_closed_form(void)
{
    tr_trace t;
    tr_trace_init(&t);
    add_req(&t, 1, 0.0, 64, 400);
    add_req(&t, 2, 0.05, 20000, 2);
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    c.core.enable_mixed_chunk = true;
    char out[256];
    c.out_path = tu_tmp_path("mixed.rhtr", out, sizeof out);
    sim_result res;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    tr_trace run_t;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(out, &run_t, &e), 0);
    static const uint32_t chunk[3] = {8176, 8176, 3648};
    uint32_t n_mixed = 0;
    uint64_t done = 0;
    double clock = 0, longest_mixed = 0;
    for (size_t i = 0; i < run_t.n_steps; i++) {
        const tr_step *s = &run_t.steps[i];
        CU_ASSERT_DOUBLE_EQUAL(s->duration, linear_price(s), 1e-12);
        if (s->start > clock + 1e-12) clock = s->start;   /* idle until an arrival */
        CU_ASSERT_DOUBLE_EQUAL(s->start, clock, 1e-9);
        clock += s->duration;
        if (s->prefill_seqs && s->decode_seqs) {
            CU_ASSERT_FATAL(n_mixed < 3);
            CU_ASSERT_EQUAL(s->prefill_tokens, chunk[n_mixed]);
            CU_ASSERT_EQUAL(s->prefill_attn, (uint64_t)chunk[n_mixed] * (done + chunk[n_mixed]));
            CU_ASSERT_EQUAL(s->decode_seqs, 1);
            double price = K.base_s + K.per_prefill_token_s * chunk[n_mixed] + K.per_decode_seq_s +
                           K.per_context_token_s * (double)s->decode_context +
                           K.per_attention_s * (double)chunk[n_mixed] * (double)(done + chunk[n_mixed]);
            CU_ASSERT_DOUBLE_EQUAL(s->duration, price, 1e-12);
            if (s->duration > longest_mixed) longest_mixed = s->duration;
            done += chunk[n_mixed++];
        }
    }
    CU_ASSERT_EQUAL(n_mixed, 3);
    CU_ASSERT_DOUBLE_EQUAL(res.summary.duration, clock, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(res.summary.itl_ms.max, longest_mixed * 1e3, 1e-9);
    tr_trace_free(&run_t);
    sim_result_free(&res);
    cost_free(m);
    tr_trace_free(&t);
}

/* TTFT counts from arrival, not from admission: a request arriving in the
 * middle of a long prefill waits for that step's end, then gets its own
 * prefill step (prefill first: the running request's decode waits). */
static void test_ttft_from_arrival(void)
{
    tr_trace t;
    tr_trace_init(&t);
    add_req(&t, 1, 0.0, 2000, 4);
    add_req(&t, 2, 0.02, 100, 4);
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    sim_result res;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    double first = K.base_s + K.per_prefill_token_s * 2000 + K.per_attention_s * 2000.0 * 2000.0;
    double own = K.base_s + K.per_prefill_token_s * 100 + K.per_attention_s * 100.0 * 100.0;
    CU_ASSERT(first > 0.02);   /* it does arrive mid-step */
    CU_ASSERT_DOUBLE_EQUAL(res.requests[0].ttft, first, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.requests[1].send, 0.02, 0);
    CU_ASSERT_DOUBLE_EQUAL(res.requests[1].ttft, first - 0.02 + own, 1e-12);
    sim_result_free(&res);
    cost_free(m);
    tr_trace_free(&t);
}

/* With every draft accepted, a decode commits k + 1 tokens per step. */
static void test_speculation_certain_accept(void)
{
    tr_trace t;
    tr_trace_init(&t);
    add_req(&t, 1, 0, 100, 41);
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    c.core.spec_steps = 3;
    c.accept.alpha = 1.0;
    sim_result res;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    /* 1 token from prefill, then 40 more at 4 per decode step: 10 steps. */
    CU_ASSERT_EQUAL(res.summary.steps, 11);
    CU_ASSERT_EQUAL(res.requests[0].output_len, 41);
    CU_ASSERT_DOUBLE_EQUAL(res.summary.spec_accept_rate, 1.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.summary.mean_accepted_len, 4.0, 1e-12);
    sim_result_free(&res);
    /* Never accepted: one token per step again, 40 decode steps. */
    c.accept.alpha = 0.0;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    CU_ASSERT_EQUAL(res.summary.steps, 41);
    CU_ASSERT_DOUBLE_EQUAL(res.summary.spec_accept_rate, 0.0, 1e-12);
    sim_result_free(&res);
    cost_free(m);
    tr_trace_free(&t);
}

static long slurp_size(const char *p, char **buf)
{
    FILE *f = fopen(p, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    *buf = malloc((size_t)n + 1);
    if (fread(*buf, 1, (size_t)n, f) != (size_t)n) n = -1;
    fclose(f);
    return n;
}

/* Same seed, same bytes: the written run of a simulation with random draft
 * acceptance is identical across runs; another seed differs. */
static void test_deterministic_output(void)
{
    tr_trace t;
    tr_trace_init(&t);
    rng_state = 7;
    double at = 0;
    for (int i = 0; i < 300; i++) {
        at += -log(1 - unit()) / 20.0;
        add_req(&t, (uint64_t)i + 1, at, 50 + (uint32_t)(unit() * 900), 5 + (uint32_t)(unit() * 100));
    }
    cost_model *m = cost_linear_new(&K);
    char p1[256], p2[256], p3[256];
    sim_config c;
    cfg_init(&c);
    c.core.spec_steps = 2;
    c.accept.alpha = 0.6;
    c.seed = 11;
    sim_result res;
    c.out_path = tu_tmp_path("det1.rhtr", p1, sizeof p1);
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    sim_result_free(&res);
    c.out_path = tu_tmp_path("det2.rhtr", p2, sizeof p2);
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    sim_result_free(&res);
    c.seed = 12;
    c.out_path = tu_tmp_path("det3.rhtr", p3, sizeof p3);
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    sim_result_free(&res);
    char *a, *b, *d;
    long na = slurp_size(p1, &a), nb = slurp_size(p2, &b), nd = slurp_size(p3, &d);
    CU_ASSERT(na > 0);
    CU_ASSERT(na == nb && memcmp(a, b, (size_t)na) == 0);
    CU_ASSERT(na != nd || memcmp(a, d, (size_t)na) != 0);
    free(a);
    free(b);
    free(d);
    cost_free(m);
    tr_trace_free(&t);
}

/* A request larger than the whole pool: one clear message naming it, and no
 * output file. */
/* A request no configuration can serve fails alone, as a server refuses it:
 * 100 requests, one longer than the context length and one larger than the
 * whole pool, give 98 completed, 2 failed with their reasons, and the other
 * 98 exactly as a run without the two (a refused request takes no step). */
static void test_unservable_requests_fail_alone(void)
{
    tr_trace all, rest;
    tr_trace_init(&all);
    tr_trace_init(&rest);
    for (uint32_t i = 0; i < 100; i++) {
        uint32_t in = 100 + 37 * (i % 11);
        if (i == 40) in = 3100;           /* 3120 tokens: over --context-length 3072 */
        if (i == 70) in = 2000;           /* 3000 tokens: within the context, over the pool of 2560 */
        add_req(&all, i, 0.05 * i, in, i == 70 ? 1000 : 20);
        if (i != 40 && i != 70) add_req(&rest, i, 0.05 * i, in, 20);
    }
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    c.core.max_total_tokens = 2560;
    c.core.context_length = 3072;
    char out[256];
    c.out_path = tu_tmp_path("unservable.rhtr", out, sizeof out);
    sim_result a, b;
    CU_ASSERT_EQUAL_FATAL(run(&c, &all, m, &a), 0);
    c.out_path = NULL;
    CU_ASSERT_EQUAL_FATAL(run(&c, &rest, m, &b), 0);
    CU_ASSERT_EQUAL(a.summary.completed, 98);
    CU_ASSERT_EQUAL(a.summary.failed, 2);
    CU_ASSERT_EQUAL(a.summary.failed_context_length, 1);
    CU_ASSERT_EQUAL(a.summary.failed_kv_pool, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(a.refusal, "request 40"));
    CU_ASSERT_EQUAL(b.summary.failed, 0);
    CU_ASSERT_DOUBLE_EQUAL(a.summary.ttft_ms.mean, b.summary.ttft_ms.mean, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(a.summary.ttft_ms.p99, b.summary.ttft_ms.p99, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(a.summary.tpot_ms.mean, b.summary.tpot_ms.mean, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(a.summary.duration, b.summary.duration, 1e-9);
    CU_ASSERT_EQUAL(a.summary.steps, b.summary.steps);
    /* The written run holds both, marked as errors. */
    tr_trace w;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(out, &w, &e), 0);
    uint32_t errors = 0;
    for (uint64_t i = 0; i < w.n_requests; i++) errors += w.requests[i].finish == TR_FINISH_ERROR;
    CU_ASSERT_EQUAL(w.n_requests, 100);
    CU_ASSERT_EQUAL(errors, 2);
    tr_trace_free(&w);
    sim_result_free(&a);
    sim_result_free(&b);
    cost_free(m);
    tr_trace_free(&all);
    tr_trace_free(&rest);
}

/* `rehearse trace stats` on a simulated run reads back, from the file's
 * token times, the metrics the simulator computed in memory. */
static void test_trace_stats_reads_run(void)
{
    tr_trace t;
    tr_trace_init(&t);
    rng_state = 3;
    double at = 0;
    for (int i = 0; i < 400; i++) {
        at += -log(1 - unit()) / 12.0;
        add_req(&t, (uint64_t)i + 1, at, 100 + (uint32_t)(unit() * 1500), 10 + (uint32_t)(unit() * 200));
    }
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    char out[256], cmd[512];
    static char buf[1 << 16];
    c.out_path = tu_tmp_path("stats-run.rhtr", out, sizeof out);
    sim_result res;
    CU_ASSERT_EQUAL_FATAL(run(&c, &t, m, &res), 0);
    snprintf(cmd, sizeof cmd, "%s trace stats --json %s", tu_bin(), out);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, buf, sizeof buf), 0);
    json_error_t je;
    json_t *root = json_loads(buf, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    json_t *mj = json_object_get(root, "metrics");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mj);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(mj, "completed")), 400);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(mj, "p99_ttft_ms")), res.summary.ttft_ms.p99, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(mj, "mean_tpot_ms")), res.summary.tpot_ms.mean, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(mj, "p99_itl_ms")), res.summary.itl_ms.p99, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(mj, "median_itl_ms")), res.summary.itl_ms.median, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(mj, "duration")), res.summary.duration, 1e-9);
    json_decref(root);
    sim_result_free(&res);
    cost_free(m);
    tr_trace_free(&t);
}

/* `rehearse sim` on bad input: one message naming the problem, exit 1, and
 * no output file. */
/* Priority scheduling on the virtual clock: 400 requests arriving faster
 * than 8 at a time can be served, one in four with priority 10. Off, the
 * priorities change nothing: every request's outcome equals that of the
 * same trace with them zeroed. On (SGLang's order), the priority-10
 * requests wait far less than the rest; with lower values first, the
 * other way round. */
static double median_of(double *v, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n ? v[n / 2] : NAN;
}

static void ttft_by_priority(const sim_config *c, const tr_trace *t, const cost_model *m, double *hi, double *lo,
                             sim_result *keep)
{
    sim_result res;
    CU_ASSERT_EQUAL_FATAL(run(c, t, m, &res), 0);
    double a[400], b[400];
    size_t na = 0, nb = 0;
    for (size_t i = 0; i < res.n_requests; i++) {
        if (t->requests[i].priority) a[na++] = res.requests[i].ttft;
        else b[nb++] = res.requests[i].ttft;
    }
    *hi = median_of(a, na);
    *lo = median_of(b, nb);
    if (keep) *keep = res;
    else sim_result_free(&res);
}

static void test_priority_scheduling_sim(void)
{
    tr_trace t, flat;
    tr_trace_init(&t);
    tr_trace_init(&flat);
    rh_err e;
    for (uint32_t i = 0; i < 400; i++) {
        tr_request r = {.id = i + 1, .arrival = i * 0.01, .input_len = 1000, .output_len = 100,
                        .priority = i % 4 == 0 ? 10 : 0};
        CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(&t, &r, &e), 0);
        r.priority = 0;
        CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(&flat, &r, &e), 0);
    }
    cost_model *m = cost_linear_new(&K);
    sim_config c;
    cfg_init(&c);
    c.core.max_running_requests = 8;
    double hi, lo, fhi, flo;
    sim_result off, zeroed;
    ttft_by_priority(&c, &t, m, &hi, &lo, &off);
    ttft_by_priority(&c, &flat, m, &fhi, &flo, &zeroed);
    int same = off.n_requests == zeroed.n_requests;
    for (size_t i = 0; same && i < off.n_requests; i++)
        same = off.requests[i].ttft == zeroed.requests[i].ttft && off.requests[i].e2e == zeroed.requests[i].e2e;
    CU_ASSERT(same);
    sim_result_free(&off);
    sim_result_free(&zeroed);
    printf("\n    median TTFT, priority 10 against 0: off %.2f / %.2f s", hi, lo);
    c.core.enable_priority_scheduling = true;
    ttft_by_priority(&c, &t, m, &hi, &lo, NULL);
    printf(", on %.2f / %.2f s", hi, lo);
    CU_ASSERT(hi < lo / 3);
    c.core.low_priority_values_first = true;
    ttft_by_priority(&c, &t, m, &hi, &lo, NULL);
    printf(", lower first %.2f / %.2f s\n", hi, lo);
    CU_ASSERT(lo < hi / 2);   /* the favoured class is now three in four: it queues behind itself more */
    cost_free(m);
    tr_trace_free(&t);
    tr_trace_free(&flat);
}

static void test_cli_bad_input(void)
{
    char trace[256], cost[256], badcost[256], out[256], cmd[2048], buf[4096];
    tu_tmp_path("cli-trace.rhtr", trace, sizeof trace);
    tu_tmp_path("cli-cost.json", cost, sizeof cost);
    tu_tmp_path("cli-badcost.json", badcost, sizeof badcost);
    tu_tmp_path("cli-out.rhtr", out, sizeof out);
    snprintf(cmd, sizeof cmd, "%s trace synth --requests 20 --rate 5 --seed 2 -o %s", tu_bin(), trace);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, buf, sizeof buf), 0);
    const char *lin = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5,"
                      " \"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(cost, lin, strlen(lin)), 0);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(badcost, "{\"kind\": \"linear\", \"version\": 1, \"base_s\": -1", 45), 0);
    struct { const char *args, *expect; } cases[] = {
        {"--chunky 5", "unknown flag --chunky"},
        {"--chunked-prefill-size 0", "chunked-prefill-size"},
        {"--max-running-requests 0", "max-running-requests"},
        {"--max-total-tokens 8", "max-total-tokens"},
        {"--rate-scale -2", "rate-scale"},
        {"--speculative-accept-rate 1.5", "speculative-accept-rate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s sim %s --cost %s %s -o %s", tu_bin(), trace, cost, cases[i].args, out);
        int rc = tu_run(cmd, buf, sizeof buf);
        if (rc != 1 || !strstr(buf, cases[i].expect)) printf("\n  case '%s': rc %d: %s", cases[i].args, rc, buf);
        CU_ASSERT_EQUAL(rc, 1);
        CU_ASSERT(strstr(buf, cases[i].expect) != NULL);
        CU_ASSERT(!tu_file_exists(out));
    }
    snprintf(cmd, sizeof cmd, "%s sim build/tmp/no-such-trace.rhtr --cost %s -o %s", tu_bin(), cost, out);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "no-such-trace.rhtr") != NULL);
    snprintf(cmd, sizeof cmd, "%s sim %s --cost %s -o %s", tu_bin(), trace, badcost, out);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "cli-badcost.json") != NULL);
    snprintf(cmd, sizeof cmd, "%s sim %s -o %s", tu_bin(), trace, out);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 1);
    CU_ASSERT(strstr(buf, "--cost") != NULL);
    CU_ASSERT(!tu_file_exists(out));
    /* And a good run writes the file and prints the table. */
    snprintf(cmd, sizeof cmd, "%s sim %s --cost %s -o %s", tu_bin(), trace, cost, out);
    CU_ASSERT_EQUAL(tu_run(cmd, buf, sizeof buf), 0);
    CU_ASSERT(strstr(buf, "Successful requests:") != NULL);
    CU_ASSERT(tu_file_exists(out));
}

void register_test_sim(void)
{
    CU_pSuite s = CU_add_suite("sim", NULL, NULL);
    CU_add_test(s, "one request, closed form", test_one_request_closed_form);
    CU_add_test(s, "N identical requests together", test_identical_requests_together);
    CU_add_test(s, "overheads on the clock: tokenizer, detokenizer, step and launches", test_overheads_on_the_clock);
    CU_add_test(s, "the arrival overhead in parallel, the tokenizer one at a time", test_arrival_overhead_in_parallel);
    CU_add_test(s, "Little's law on a Poisson run", test_littles_law);
    CU_add_test(s, "head-of-line: short TTFT", test_head_of_line_ttft);
    CU_add_test(s, "head-of-line: decode stall", test_head_of_line_decode_stall);
    CU_add_test(s, "mixed chunk steps priced and clocked exactly", test_mixed_step_closed_form);
    CU_add_test(s, "TTFT counts from arrival, mid-step", test_ttft_from_arrival);
    CU_add_test(s, "speculation with certain acceptance", test_speculation_certain_accept);
    CU_add_test(s, "deterministic output bytes", test_deterministic_output);
    CU_add_test(s, "a request no configuration can serve fails alone", test_unservable_requests_fail_alone);
    CU_add_test(s, "trace stats reads the run's metrics back", test_trace_stats_reads_run);
    CU_add_test(s, "bad input: one message, exit 1, nothing written", test_cli_bad_input);
    CU_add_test(s, "priority scheduling: off changes nothing; on, the favoured class waits less, either order",
                test_priority_scheduling_sim);
}
