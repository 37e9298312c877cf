/* test_spec_replay.c — speculation from recording to simulation: `rehearse
 * replay` with n-gram drafts produces the same tokens as each prompt alone,
 * records per-request and per-step draft counts that agree, and writes the
 * accepted-length histogram into the header, whose weighted sum is the
 * accepted drafts; the simulator takes that histogram (explicitly, and by
 * default when simulating the recording with speculation on) and predicts
 * the recorded mean accepted length; recordings without the histogram fall
 * back to their steps' acceptance rate; bad speculative flags write nothing. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/replay.h"
#include "engine/speculative/hist.h"
#include "engine_helpers.h"
#include "traces/import/import.h"
#include "traces/metrics/metrics.h"
#include "sim/sim.h"
#include "testutil.h"
#include "traces/prompt.h"

#define NR 12
#define IN 64
#define OUT 24

typedef struct outs {
    int32_t tokens[NR][OUT];
    uint32_t len[NR];
} outs;

static void on_output(void *ctx, uint64_t index, const int32_t *tokens, uint32_t n)
{
    outs *o = ctx;
    if (index >= NR || n > OUT) return;
    memcpy(o->tokens[index], tokens, n * sizeof *tokens);
    o->len[index] = n;
}

/* Prompts that repeat one 4-token block (every block hash of a request is
 * the same), so lookup finds what the model tends to continue with. */
static void make_trace(tr_trace *t)
{
    tr_trace_init(t);
    t->header.block_size = 4;
    uint64_t h[IN / 4];
    for (uint32_t i = 0; i < NR; i++) {
        for (uint32_t b = 0; b < IN / 4; b++) h[b] = 1000 + i;
        tr_request q = {.id = i, .arrival = 0, .input_len = IN, .output_len = OUT, .n_hashes = IN / 4, .hashes = h};
        rh_err e;
        CU_ASSERT_FATAL(tr_trace_add_request(t, &q, &e) == 0);
    }
}

static int parse_counts(const char *text, uint64_t *c, uint32_t max)
{
    uint32_t n = 0;
    const char *p = text;
    while (*p && n < max) {
        char *end;
        c[n++] = strtoull(p, &end, 10);
        p = *end == ',' ? end + 1 : end;
    }
    return (int)n;
}

static void test_replay_records_histogram_sim_uses_it(void)
{
    char out[256], cost[256], cmd[2048], text[16384];
    tu_tmp_path("spec-replay-rec.rhtr", out, sizeof out);
    tu_tmp_path("spec-replay-cost.json", cost, sizeof cost);
    model *m = eh_tiny_model();
    tr_trace in, rec;
    make_trace(&in);
    static outs o;
    memset(&o, 0, sizeof o);
    replay_config c;
    replay_config_default(&c);
    c.engine.m = m;
    c.engine.core.max_total_tokens = 8192;
    c.engine.core.spec_steps = 3;
    c.engine.spec.algorithm = SPEC_NGRAM;
    c.max_concurrency = 4;
    c.out_path = out;
    c.on_output = on_output;
    c.ctx = &o;
    replay_result res;
    rh_err e;
    int rc = replay_run(&c, &in, &res, &e);
    if (rc) printf("\n    %s", e.msg);
    CU_ASSERT_FATAL(rc == 0);

    /* Tokens as alone. */
    uint32_t bad = 0;
    for (uint32_t i = 0; i < NR; i++) {
        int32_t p[IN], ref[OUT];
        tr_prompt_tokens(&in.requests[i], 4, m->cfg.vocab_size, 0, p);
        CU_ASSERT_EQUAL_FATAL(eh_reference(m, p, IN, (kern_sampling){0, 1, 0}, 0, OUT, ref), OUT);
        bad += eh_mismatches("spec replay", i, o.tokens[i], o.len[i], ref, OUT);
    }
    CU_ASSERT_EQUAL(bad, 0);

    /* Counts: requests, steps, header histogram and the result agree. */
    CU_ASSERT_FATAL(tr_trace_load(out, &rec, &e) == 0);
    uint64_t rq_prop = 0, rq_acc = 0, st_prop = 0, st_acc = 0, slots_unverified = 0;
    for (size_t i = 0; i < rec.n_requests; i++) {
        rq_prop += rec.requests[i].spec_proposed;
        rq_acc += rec.requests[i].spec_accepted;
    }
    for (size_t i = 0; i < rec.n_steps; i++) {
        st_prop += rec.steps[i].spec_proposed;
        st_acc += rec.steps[i].spec_accepted;
        /* n-gram proposes for every slot, so a step's decode work (one
         * token per decode plus its slots) is what it verified. */
        slots_unverified += rec.steps[i].decode_tokens - rec.steps[i].decode_seqs - rec.steps[i].spec_proposed;
    }
    const char *hist = tr_header_get(&rec.header, SPEC_HIST_KEY);
    CU_ASSERT_FATAL(hist != NULL);
    uint64_t h[8] = {0}, weighted = 0, verifies = 0;
    CU_ASSERT_EQUAL(parse_counts(hist, h, 8), 4);      /* 3 draft slots: lengths 0..3 */
    for (int j = 0; j < 4; j++) {
        weighted += (uint64_t)j * h[j];
        verifies += h[j];
    }
    printf("\n    histogram %s; %llu/%llu drafts accepted", hist, (unsigned long long)st_acc, (unsigned long long)st_prop);
    CU_ASSERT(rq_acc > 0);
    CU_ASSERT_EQUAL(rq_prop, st_prop);
    CU_ASSERT_EQUAL(rq_acc, st_acc);
    CU_ASSERT_EQUAL(weighted, st_acc);
    CU_ASSERT_EQUAL(res.spec_accepted, st_acc);
    CU_ASSERT_EQUAL(res.spec_proposed, st_prop);
    CU_ASSERT_EQUAL(slots_unverified, 0);
    CU_ASSERT(verifies > NR && st_prop <= 3 * verifies && st_prop > 2 * verifies);
    CU_ASSERT_STRING_EQUAL(tr_header_get(&rec.header, "speculative-algorithm"), "NGRAM");
    CU_ASSERT_EQUAL(rec.n_requests, NR);

    /* The simulator reads the histogram back, as given ... */
    sim_config sc;
    sim_config_default(&sc);
    CU_ASSERT_EQUAL(sim_config_set(&sc, "speculative-accept-hist-from", out, &e), 1);
    CU_ASSERT_EQUAL(sc.accept.hist_n, 4);
    for (int j = 0; j < 4; j++) CU_ASSERT_DOUBLE_EQUAL(sc.accept.hist[j], (double)h[j], 0);

    /* ... and by default when simulating the recording with speculation on,
     * predicting the recorded mean accepted length. */
    metrics_summary ms;
    CU_ASSERT_FATAL(metrics_of_trace(out, NULL, &ms, &e) > 0);
    snprintf(cmd, sizeof cmd, "%s fit %s -o %s --draft-ratio 0 && %s sim %s --cost %s --speculative-num-steps 3 --json",
             tu_bin(), out, cost, tu_bin(), out, cost);
    rc = tu_run(cmd, text, sizeof text);
    if (rc) printf("\n    %s", text);
    CU_ASSERT_FATAL(rc == 0);
    const char *brace = strchr(strstr(text, "wrote"), '{');
    json_error_t je;
    json_t *j = brace ? json_loads(brace, 0, &je) : NULL;
    CU_ASSERT_FATAL(j != NULL);
    double sim_len = json_real_value(json_object_get(j, "mean_accepted_length"));
    printf("\n    mean accepted length: recorded %.3f, simulated %.3f", ms.mean_accepted_len, sim_len);
    CU_ASSERT(ms.mean_accepted_len > 1.2);
    CU_ASSERT_DOUBLE_EQUAL(sim_len, ms.mean_accepted_len, 0.1 * ms.mean_accepted_len);
    json_decref(j);

    /* `rehearse validate` runs both with speculation and compares acceptance. */
    char trace[256], vdir[256];
    tu_tmp_path("spec-validate-in.rhtr", trace, sizeof trace);
    tu_tmp_path("spec-validate", vdir, sizeof vdir);
    CU_ASSERT_FATAL(tr_trace_save(&in, trace, &e) == 0);
    snprintf(cmd, sizeof cmd,
             "%s validate %s --model tiny-llama --cost %s -o %s --max-total-tokens 8192 --max-concurrency 4 "
             "--speculative-algorithm NGRAM --speculative-num-steps 3 --json 2>/dev/null",
             tu_bin(), trace, cost, vdir);
    rc = tu_run(cmd, text, sizeof text);
    if (rc) printf("\n    %s", text);
    CU_ASSERT_EQUAL(rc, 0);
    json_t *v = json_loads(text, 0, &je);
    CU_ASSERT_FATAL(v != NULL);
    int found = 0;
    json_t *rows = json_object_get(json_object_get(v, "table"), "rows");
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *row = json_array_get(rows, i);
        const char *name = json_string_value(json_array_get(row, 0));
        if (!name || strcmp(name, "mean_accepted_length")) continue;
        found = 1;
        double meas = json_real_value(json_array_get(row, 1)), sim = json_real_value(json_array_get(row, 2));
        printf("\n    validate: mean accepted length measured %.3f, simulated %.3f", meas, sim);
        CU_ASSERT(meas > 1.2);
        CU_ASSERT_DOUBLE_EQUAL(sim, meas, 0.1 * meas);
    }
    CU_ASSERT(found);
    json_decref(v);
    unlink(trace);

    /* An explicit rate wins over the header. */
    snprintf(cmd, sizeof cmd, "%s sim %s --cost %s --speculative-num-steps 3 --speculative-accept-rate 0 --json",
             tu_bin(), out, cost);
    rc = tu_run(cmd, text, sizeof text);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(strstr(text, "\"spec_accepted_tokens\": 0,") != NULL);

    tr_trace_free(&rec);
    tr_trace_free(&in);
    model_free(m);
    unlink(out);
    unlink(cost);
}

/* Without the header key: the steps' acceptance rate; without any drafts:
 * a message naming the file. */
static void test_accept_from_recording_fallbacks(void)
{
    char path[256];
    tu_tmp_path("spec-steps-only.rhtr", path, sizeof path);
    tr_trace t;
    tr_trace_init(&t);
    rh_err e;
    for (int i = 0; i < 3; i++) {
        tr_step s = {.index = (uint64_t)i, .start = i, .duration = 0.5, .decode_seqs = 2, .decode_tokens = 8,
                     .spec_proposed = 6, .spec_accepted = (uint32_t)(i + 1)};
        CU_ASSERT_FATAL(tr_trace_add_step(&t, &s, &e) == 0);
    }
    CU_ASSERT_FATAL(tr_trace_save(&t, path, &e) == 0);
    sim_config sc;
    sim_config_default(&sc);
    sc.accept.hist_n = 3;
    CU_ASSERT_EQUAL(sim_config_set(&sc, "speculative_accept_hist_from", path, &e), 1);
    CU_ASSERT_EQUAL(sc.accept.hist_n, 0);
    CU_ASSERT_DOUBLE_EQUAL(sc.accept.alpha, 6.0 / 18.0, 1e-12);
    tr_trace_free(&t);

    tr_trace_init(&t);
    tr_step s = {.index = 0, .start = 0, .duration = 0.5, .decode_seqs = 2, .decode_tokens = 2};
    CU_ASSERT_FATAL(tr_trace_add_step(&t, &s, &e) == 0);
    CU_ASSERT_FATAL(tr_trace_save(&t, path, &e) == 0);
    CU_ASSERT_EQUAL(sim_config_set(&sc, "speculative-accept-hist-from", path, &e), -1);
    CU_ASSERT(strstr(e.msg, "recorded no drafts") != NULL && strstr(e.msg, path) != NULL);
    CU_ASSERT_EQUAL(sim_config_set(&sc, "speculative-accept-hist-from", "/nonexistent/rec.rhtr", &e), -1);
    tr_trace_free(&t);
    unlink(path);
}

/* Bad speculative flags exit 1 with one message and record nothing. */
static void test_replay_spec_flags(void)
{
    char trace[256], out[256], cmd[2048], text[8192];
    tu_tmp_path("spec-flags.rhtr", trace, sizeof trace);
    tu_tmp_path("spec-flags-rec.rhtr", out, sizeof out);
    tr_trace t;
    make_trace(&t);
    rh_err e;
    CU_ASSERT_FATAL(tr_trace_save(&t, trace, &e) == 0);
    tr_trace_free(&t);
    const char *bad[][2] = {
        {"--speculative-algorithm EAGLE9", "NGRAM or DRAFT"},
        {"--speculative-algorithm DRAFT --speculative-draft-layers 9", "only 4 layers"},
        {"--speculative-num-steps 2", "--speculative-algorithm"},
        {"--speculative-draft-layers 2", "need --speculative-algorithm DRAFT"},
        {"--speculative-algorithm NGRAM --speculative-ngram-min-match-window-size 5 "
         "--speculative-ngram-max-match-window-size 2", "exceeds the max"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unlink(out);
        snprintf(cmd, sizeof cmd, "%s replay %s --model tiny-llama -o %s --max-total-tokens 4096 %s", tu_bin(), trace,
                 out, bad[i][0]);
        int rc = tu_run(cmd, text, sizeof text);
        if (rc != 1 || !strstr(text, bad[i][1])) printf("\n    %s -> %d: %s", bad[i][0], rc, text);
        CU_ASSERT_EQUAL(rc, 1);
        CU_ASSERT(strstr(text, bad[i][1]) != NULL);
        CU_ASSERT(!tu_file_exists(out));
    }
    /* A good one, through the command line, with self-speculation. */
    snprintf(cmd, sizeof cmd,
             "%s replay %s --model tiny-llama -o %s --max-total-tokens 4096 --max-concurrency 4 "
             "--speculative-algorithm DRAFT --speculative-draft-layers 2 --speculative-num-steps 2",
             tu_bin(), trace, out);
    int rc = tu_run(cmd, text, sizeof text);
    if (rc) printf("\n    %s", text);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(strstr(text, "speculative:") != NULL);
    tr_trace rec;
    CU_ASSERT_FATAL(tr_trace_load(out, &rec, &e) == 0);
    CU_ASSERT_STRING_EQUAL(tr_header_get(&rec.header, "speculative-draft-model"), "tiny-llama[0:2]");
    CU_ASSERT(tr_header_get(&rec.header, SPEC_HIST_KEY) != NULL);
    tr_trace_free(&rec);
    snprintf(cmd, sizeof cmd, "%s replay --help", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, text, sizeof text), 0);
    CU_ASSERT(strstr(text, "--speculative-algorithm") && strstr(text, SPEC_HIST_KEY));
    unlink(trace);
    unlink(out);
}

void register_test_spec_replay(void)
{
    CU_pSuite s = CU_add_suite("spec_replay", NULL, NULL);
    CU_add_test(s, "replay records the histogram; sim uses it", test_replay_records_histogram_sim_uses_it);
    CU_add_test(s, "acceptance from a recording: fallbacks", test_accept_from_recording_fallbacks);
    CU_add_test(s, "replay's speculative flags", test_replay_spec_flags);
}
