/* test_replay.c — `rehearse replay` end to end, each result checked against a
 * second computation: a slice of a real trace replays with one record per
 * request, step records whose token counts add up to the requests', and the
 * same tokens each prompt generates alone; the recording loads, fits and
 * simulates; prefix hits land exactly where block hashes are shared, as the
 * simulator (keyed by the hashes themselves) finds them; closed and open
 * loop send when the simulator would; refused requests are recorded as
 * errors; bad command lines write nothing. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/replay.h"
#include "engine_helpers.h"
#include "sim/sim.h"
#include "testutil.h"
#include "traces/import/import.h"
#include "traces/prompt.h"

typedef struct outputs {
    uint32_t n;
    int32_t **tokens;          /* per trace index */
    uint32_t *len;
    char warning[1024];
    uint32_t warnings;
} outputs;

static void on_output(void *ctx, uint64_t index, const int32_t *tokens, uint32_t n)
{
    outputs *o = ctx;
    if (index >= o->n) return;
    free(o->tokens[index]);
    o->tokens[index] = malloc((n ? n : 1) * sizeof *tokens);
    memcpy(o->tokens[index], tokens, n * sizeof *tokens);
    o->len[index] = n;
}

static void on_warning(void *ctx, const char *msg)
{
    outputs *o = ctx;
    if (!o->warnings++) snprintf(o->warning, sizeof o->warning, "%s", msg);
}

static void outputs_init(outputs *o, uint32_t n)
{
    memset(o, 0, sizeof *o);
    o->n = n;
    o->tokens = calloc(n, sizeof *o->tokens);
    o->len = calloc(n, sizeof *o->len);
}

static void outputs_free(outputs *o)
{
    for (uint32_t i = 0; i < o->n; i++) free(o->tokens[i]);
    free(o->tokens);
    free(o->len);
}

static replay_config config(const model *m, const char *out, outputs *o)
{
    replay_config c;
    replay_config_default(&c);
    c.engine.m = m;
    c.engine.core.max_total_tokens = 16384;
    c.out_path = out;
    c.on_output = on_output;
    c.on_warning = on_warning;
    c.ctx = o;
    return c;
}

static int replay(const replay_config *c, const tr_trace *t, replay_result *res)
{
    rh_err e;
    int rc = replay_run(c, t, res, &e);
    if (rc) printf("\n  replay: %s\n", e.msg);
    return rc;
}

static int load(const char *path, tr_trace *t)
{
    rh_err e;
    int rc = tr_trace_load(path, t, &e);
    if (rc) printf("\n  %s\n", e.msg);
    return rc;
}

/* The recorded requests in trace order (the recording holds them in finish order). */
static const tr_request *recorded(const tr_trace *rec, uint64_t id)
{
    for (size_t i = 0; i < rec->n_requests; i++)
        if (rec->requests[i].id == id) return &rec->requests[i];
    return NULL;
}

/* Every request's outputs equal its prompt generated alone. */
static uint32_t compare_with_alone(const model *m, const tr_trace *t, const outputs *o, uint64_t prompt_seed)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < t->n_requests; i++) {
        const tr_request *q = &t->requests[i];
        int32_t *p = malloc(q->input_len * sizeof *p), *ref = malloc(q->output_len * sizeof *ref);
        tr_prompt_tokens(q, t->header.block_size, m->cfg.vocab_size, prompt_seed, p);
        int64_t made = eh_reference(m, p, q->input_len, (kern_sampling){0, 1, 0}, 0, q->output_len, ref);
        bad += eh_mismatches("replay", q->id, o->tokens[i], o->len[i], ref, (uint32_t)made);
        free(p);
        free(ref);
    }
    return bad;
}

/* The request records match the trace and are internally consistent; the
 * step records add up to them. */
static void check_recording(const tr_trace *in, const tr_trace *rec)
{
    CU_ASSERT_EQUAL(rec->n_requests, in->n_requests);
    uint64_t computed = 0, decodes = 0;
    for (size_t i = 0; i < in->n_requests; i++) {
        const tr_request *q = &in->requests[i], *r = recorded(rec, q->id);
        CU_ASSERT_FATAL(r != NULL);
        CU_ASSERT(r->flags & TR_REQ_MEASURED);
        CU_ASSERT_EQUAL(r->finish, TR_FINISH_LENGTH);
        CU_ASSERT_EQUAL(r->input_len, q->input_len);
        CU_ASSERT_EQUAL(r->output_len, q->output_len);
        CU_ASSERT_EQUAL(r->n_hashes, q->n_hashes);
        CU_ASSERT_EQUAL(r->n_times, r->output_len);
        CU_ASSERT_EQUAL(r->retractions, 0);
        CU_ASSERT(r->ttft > 0 && r->token_times[0] == r->ttft && r->token_times[r->n_times - 1] == r->e2e);
        for (uint32_t k = 1; k < r->n_times; k++) CU_ASSERT(r->token_times[k] >= r->token_times[k - 1]);
        computed += r->input_len - r->cached_tokens;
        decodes += r->output_len - 1;
    }
    uint64_t prefill = 0, decode = 0, finished = 0;
    for (size_t i = 0; i < rec->n_steps; i++) {
        const tr_step *s = &rec->steps[i];
        CU_ASSERT_EQUAL(s->index, i);
        CU_ASSERT(s->duration > 0 && s->sched_time >= 0);
        if (i) CU_ASSERT(s->start >= rec->steps[i - 1].start + rec->steps[i - 1].duration);
        prefill += s->prefill_tokens;
        decode += s->decode_tokens;
        finished += s->finished;
    }
    CU_ASSERT_EQUAL(prefill, computed);
    CU_ASSERT_EQUAL(decode, decodes);
    CU_ASSERT_EQUAL(finished, in->n_requests);
    CU_ASSERT_STRING_EQUAL(rec->header.model, "tiny-llama");
    CU_ASSERT(strncmp(rec->header.hardware, "cpu", 3) == 0);
    CU_ASSERT_EQUAL(rec->header.block_size, in->header.block_size);
    CU_ASSERT_STRING_EQUAL(tr_header_get(&rec->header, "source"), "rehearse replay");
    CU_ASSERT_STRING_EQUAL(tr_header_get(&rec->header, "max-total-tokens"), "16384");
    CU_ASSERT_STRING_EQUAL(tr_header_get(&rec->header, "context-length"), "2048");
}

static void test_shared_trace_slice(void)
{
    char src[512], sliced[256], out[256], cost[256], cmd[2048], text[8192];
    if (!tu_shared_file("mooncake_conversation_trace.jsonl", src, sizeof src)) return;
    tu_tmp_path("replay-slice.rhtr", sliced, sizeof sliced);
    tu_tmp_path("replay-slice-rec.rhtr", out, sizeof out);
    tu_tmp_path("replay-slice-cost.json", cost, sizeof cost);
    snprintf(cmd, sizeof cmd, "%s trace slice %s -o %s --first 8 --length-scale 0.02", tu_bin(), src, sliced);
    int rc = tu_run(cmd, text, sizeof text);
    if (rc) printf("\n  %s\n", text);
    CU_ASSERT_FATAL(rc == 0);
    tr_trace in, rec;
    CU_ASSERT_FATAL(load(sliced, &in) == 0);
    CU_ASSERT_EQUAL_FATAL(in.n_requests, 8);

    model *m = eh_tiny_model();
    outputs o;
    outputs_init(&o, 8);
    replay_config c = config(m, out, &o);
    replay_result res;
    CU_ASSERT_FATAL(replay(&c, &in, &res) == 0);
    CU_ASSERT_EQUAL(res.requests, 8);
    CU_ASSERT_EQUAL(res.completed, 8);
    CU_ASSERT_EQUAL(res.refused, 0);
    CU_ASSERT_EQUAL(compare_with_alone(m, &in, &o, 0), 0);
    CU_ASSERT_FATAL(load(out, &rec) == 0);
    check_recording(&in, &rec);
    CU_ASSERT_EQUAL(rec.n_steps, res.steps);

    /* The recording is a trace like any other: fit a cost model to its steps,
     * simulate it, and the simulator completes every request. */
    snprintf(cmd, sizeof cmd, "%s fit %s -o %s && %s sim %s --cost %s --json", tu_bin(), out, cost, tu_bin(), out, cost);
    rc = tu_run(cmd, text, sizeof text);
    if (rc) printf("\n  %s\n", text);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(strstr(text, "\"completed\": 8") != NULL);
    tr_trace_free(&rec);
    tr_trace_free(&in);
    outputs_free(&o);
    model_free(m);
    unlink(sliced);
    unlink(out);
    unlink(cost);
}

/* ---- prefix sharing ---- */

static void add_request(tr_trace *t, uint64_t id, double arrival, uint32_t in, uint32_t out, const uint64_t *h,
                        uint32_t nh)
{
    tr_request q = {.id = id, .arrival = arrival, .input_len = in, .output_len = out, .hashes = h, .n_hashes = nh};
    rh_err e;
    CU_ASSERT_FATAL(tr_trace_add_request(t, &q, &e) == 0);
}

/* Requests one after another (one client), block size = page size = 16. */
static void sharing_trace(tr_trace *t)
{
    static const uint64_t a[] = {1, 2, 3, 4}, b[] = {1, 2, 5}, c[] = {7, 8}, d[] = {1, 2, 3, 4},
                          e[] = {9, 2, 3, 4, 10}, f[] = {7, 8}, g[] = {1, 2, 5, 11, 12};
    tr_trace_init(t);
    t->header.block_size = 16;
    add_request(t, 0, 0, 70, 4, a, 4);    /* 4 full blocks, 6 private tokens */
    add_request(t, 1, 0, 50, 3, b, 3);    /* shares 2 blocks with 0 */
    add_request(t, 2, 0, 40, 5, c, 2);    /* nothing */
    add_request(t, 3, 0, 64, 2, d, 4);    /* all of 0's blocks; one page stays to compute */
    add_request(t, 4, 0, 80, 3, e, 5);    /* same blocks 1-3 as 0, another first: nothing */
    add_request(t, 5, 0, 33, 2, f, 2);    /* 2's blocks */
    add_request(t, 6, 0, 90, 3, g, 5);    /* 1's 3 blocks (its third block is full there) */
}

/* What a prefix cache holding every earlier request's full blocks serves:
 * the longest common run of leading hashes, in whole blocks, leaving at
 * least one token to compute. */
static uint32_t expected_cached(const tr_trace *t, size_t i, uint32_t page)
{
    uint32_t bs = t->header.block_size, best = 0;
    const tr_request *q = &t->requests[i];
    uint32_t full_q = q->input_len / bs < q->n_hashes ? q->input_len / bs : q->n_hashes;
    for (size_t j = 0; j < i; j++) {
        const tr_request *p = &t->requests[j];
        uint32_t full_p = p->input_len / bs < p->n_hashes ? p->input_len / bs : p->n_hashes, k = 0;
        while (k < full_q && k < full_p && q->hashes[k] == p->hashes[k]) k++;
        if (k > best) best = k;
    }
    uint32_t cached = best * bs, limit = (q->input_len - 1) / page * page;
    return cached < limit ? cached : limit;
}

static void test_prefix_hits_where_hashes_are_shared(void)
{
    tr_trace t;
    sharing_trace(&t);
    char out[256];
    tu_tmp_path("replay-sharing.rhtr", out, sizeof out);
    model *m = eh_tiny_model();
    outputs o;
    outputs_init(&o, (uint32_t)t.n_requests);
    replay_config c = config(m, out, &o);
    c.max_concurrency = 1;
    replay_result res;
    CU_ASSERT_FATAL(replay(&c, &t, &res) == 0);
    CU_ASSERT_EQUAL(compare_with_alone(m, &t, &o, 0), 0);

    /* The simulator keys its cache by the block hashes, not by tokens. */
    sim_config sc;
    sim_config_default(&sc);
    sc.core = c.engine.core;
    sc.max_concurrency = 1;
    cost_linear_coef coef = {1e-3, 1e-5, 1e-4, 0, 0};
    cost_model *cost = cost_linear_new(&coef);
    sim_result sr;
    rh_err e;
    CU_ASSERT_FATAL(sim_run(&sc, &t, cost, &sr, &e) == 0);

    tr_trace rec;
    CU_ASSERT_FATAL(load(out, &rec) == 0);
    check_recording(&t, &rec);
    uint32_t hits = 0;
    for (size_t i = 0; i < t.n_requests; i++) {
        const tr_request *r = recorded(&rec, t.requests[i].id);
        uint32_t want = expected_cached(&t, i, 16);
        if (r->cached_tokens != want || sr.requests[i].cached_tokens != want)
            printf("\n    request %zu: engine cached %u, simulator %u, hashes say %u\n", i, r->cached_tokens,
                   sr.requests[i].cached_tokens, want);
        CU_ASSERT_EQUAL(r->cached_tokens, want);
        CU_ASSERT_EQUAL(sr.requests[i].cached_tokens, want);
        hits += want > 0;
    }
    CU_ASSERT_EQUAL(hits, 4);
    tr_trace_free(&rec);
    sim_result_free(&sr);
    cost_free(cost);

    /* With the cache off nothing is served from it. */
    c.engine.core.disable_radix_cache = true;
    CU_ASSERT_FATAL(replay(&c, &t, &res) == 0);
    CU_ASSERT_FATAL(load(out, &rec) == 0);
    for (size_t i = 0; i < rec.n_requests; i++) CU_ASSERT_EQUAL(rec.requests[i].cached_tokens, 0);
    CU_ASSERT_EQUAL(res.cached_tokens, 0);
    tr_trace_free(&rec);

    tr_trace_free(&t);
    outputs_free(&o);
    model_free(m);
    unlink(out);
}

/* ---- sending ---- */

static void test_closed_and_open_loop_sending(void)
{
    model *m = eh_tiny_model();
    char out[256];
    tu_tmp_path("replay-loop.rhtr", out, sizeof out);
    outputs o;
    outputs_init(&o, 6);
    tr_trace t, rec;
    tr_trace_init(&t);
    for (uint32_t i = 0; i < 6; i++) add_request(&t, i, 0, 20 + 7 * i, 3 + i, NULL, 0);

    /* Two clients: never more than two requests out, and every later send is
     * the moment an earlier request finished. */
    replay_config c = config(m, out, &o);
    c.max_concurrency = 2;
    replay_result res;
    CU_ASSERT_FATAL(replay(&c, &t, &res) == 0);
    CU_ASSERT_FATAL(load(out, &rec) == 0);
    check_recording(&t, &rec);
    for (size_t i = 0; i < rec.n_requests; i++) {
        const tr_request *r = &rec.requests[i];
        uint32_t overlapping = 0, freed_by = 0;
        for (size_t j = 0; j < rec.n_requests; j++) {
            const tr_request *s = &rec.requests[j];
            if (s->arrival <= r->arrival && r->arrival < s->arrival + s->e2e) overlapping++;
            if (j != i && fabs(s->arrival + s->e2e - r->arrival) < 1e-9) freed_by++;
        }
        CU_ASSERT(overlapping <= 2);
        if (r->arrival > 0) CU_ASSERT(freed_by >= 1);
    }
    tr_trace_free(&rec);

    /* Open loop: each request is sent at its arrival / rate_scale. */
    for (uint32_t i = 0; i < 6; i++) t.requests[i].arrival = 0.02 * i;
    c.max_concurrency = 0;
    c.rate_scale = 2;
    CU_ASSERT_FATAL(replay(&c, &t, &res) == 0);
    CU_ASSERT_FATAL(load(out, &rec) == 0);
    for (uint32_t i = 0; i < 6; i++) CU_ASSERT_EQUAL(recorded(&rec, i)->arrival, 0.02 * i / 2);
    CU_ASSERT(res.wall_s >= 0.05);
    tr_trace_free(&rec);
    tr_trace_free(&t);
    outputs_free(&o);
    model_free(m);
    unlink(out);
}

static void test_refused_request_recorded_as_error(void)
{
    model *m = eh_tiny_model();
    char out[256];
    tu_tmp_path("replay-refused.rhtr", out, sizeof out);
    outputs o;
    outputs_init(&o, 3);
    tr_trace t, rec;
    tr_trace_init(&t);
    add_request(&t, 10, 0, 30, 4, NULL, 0);
    add_request(&t, 11, 0, 3000, 4, NULL, 0);      /* past tiny-llama's 2048 positions */
    add_request(&t, 12, 0, 25, 4, NULL, 0);
    replay_config c = config(m, out, &o);
    replay_result res;
    CU_ASSERT_FATAL(replay(&c, &t, &res) == 0);
    CU_ASSERT_EQUAL(res.refused, 1);
    CU_ASSERT_EQUAL(res.completed, 2);
    CU_ASSERT_EQUAL(o.warnings, 1);
    CU_ASSERT(strstr(o.warning, "context length 2048") != NULL && strstr(o.warning, "11") != NULL);
    CU_ASSERT_FATAL(load(out, &rec) == 0);
    CU_ASSERT_EQUAL(rec.n_requests, 3);
    const tr_request *r = recorded(&rec, 11);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_EQUAL(r->finish, TR_FINISH_ERROR);
    CU_ASSERT_EQUAL(r->output_len, 0);
    CU_ASSERT_EQUAL(recorded(&rec, 10)->finish, TR_FINISH_LENGTH);
    CU_ASSERT_EQUAL(recorded(&rec, 12)->finish, TR_FINISH_LENGTH);
    tr_trace_free(&rec);
    tr_trace_free(&t);
    outputs_free(&o);
    model_free(m);
    unlink(out);
}

/* ---- the command line ---- */

static void expect_cli_error(const char *args, const char *out, const char *words)
{
    char cmd[2048], text[4096];
    snprintf(cmd, sizeof cmd, "%s replay %s", tu_bin(), args);
    int rc = tu_run(cmd, text, sizeof text);
    CU_ASSERT_EQUAL(rc, 1);
    if (!strstr(text, words)) printf("\n    '%s' said '%s', lacking '%s'\n", args, text, words);
    CU_ASSERT(strstr(text, words) != NULL);
    CU_ASSERT(strncmp(text, "rehearse replay: ", 17) == 0);
    CU_ASSERT(strchr(text, '\n') == text + strlen(text) - 1);      /* one line */
    CU_ASSERT_FALSE(tu_file_exists(out));
}

static void test_command_line(void)
{
    char in[256], out[256], args[1024], cmd[2048], text[8192];
    tu_tmp_path("replay-cli-in.rhtr", in, sizeof in);
    tu_tmp_path("replay-cli-out.rhtr", out, sizeof out);
    tr_trace t;
    tr_trace_init(&t);
    add_request(&t, 1, 0, 30, 4, NULL, 0);
    add_request(&t, 2, 0.01, 40, 5, NULL, 0);
    rh_err e;
    CU_ASSERT_FATAL(tr_trace_save(&t, in, &e) == 0);
    tr_trace_free(&t);

    snprintf(args, sizeof args, "build/tmp/no-such-trace.rhtr --model tiny-llama -o %s", out);
    expect_cli_error(args, out, "no-such-trace");
    snprintf(args, sizeof args, "%s --model no-such-model -o %s", in, out);
    expect_cli_error(args, out, "no-such-model");
    snprintf(args, sizeof args, "%s --model tiny-llama -o %s --chunked-prefill-size lots", in, out);
    expect_cli_error(args, out, "--chunked-prefill-size");
    snprintf(args, sizeof args, "%s --model tiny-llama -o %s --no-such-flag 3", in, out);
    expect_cli_error(args, out, "--no-such-flag");
    snprintf(args, sizeof args, "%s --model tiny-llama", in);
    expect_cli_error(args, out, "-o");
    snprintf(args, sizeof args, "%s --model tiny-llama -o %s --max-total-tokens 10000000000", in, out);
    expect_cli_error(args, out, "KV pool");

    snprintf(cmd, sizeof cmd, "%s replay %s --model tiny-llama -o %s --max-total-tokens 4096 --json", tu_bin(), in, out);
    int rc = tu_run(cmd, text, sizeof text);
    if (rc) printf("\n  %s\n", text);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(strstr(text, "\"completed\": 2") != NULL);
    tr_trace rec;
    CU_ASSERT_FATAL(load(out, &rec) == 0);
    CU_ASSERT_EQUAL(rec.n_requests, 2);
    CU_ASSERT_STRING_EQUAL(tr_header_get(&rec.header, "input"), in);
    tr_trace_free(&rec);
    unlink(in);
    unlink(out);
}

void register_test_replay(void)
{
    CU_pSuite s = CU_add_suite("replay", NULL, NULL);
    CU_add_test(s, "a shared trace slice replays, adds up, fits and simulates", test_shared_trace_slice);
    CU_add_test(s, "prefix hits exactly where block hashes are shared", test_prefix_hits_where_hashes_are_shared);
    CU_add_test(s, "closed and open loop send as the simulator does", test_closed_and_open_loop_sending);
    CU_add_test(s, "a request past the context is recorded as an error", test_refused_request_recorded_as_error);
    CU_add_test(s, "bad command lines write nothing; a good one records", test_command_line);
}
