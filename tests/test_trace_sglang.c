/* test_trace_sglang.c — SGLang's server telemetry read as step records: the
 * scheduler log (sglang-log) with and without milliseconds, interleaved
 * ranks, restarts, the decode log interval, speculation, retractions,
 * garbage and malformed numbers; Dynamo's forward-pass-metrics rows
 * (sglang-fpm); recognition from the content; and a realistic log through
 * the whole path into a cost fit. Every duration asserted is worked out by
 * hand in the comment above it. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/cost/cost_fit.h"
#include "testutil.h"
#include "traces/import/import.h"

/* Through a file, a binary trace and back: the whole import path. */
static int load(const char *text, tr_trace *t, rh_err *e)
{
    char in[256], out[256];
    tu_tmp_path("sglang_in.log", in, sizeof in);
    tu_tmp_path("sglang_out.rhtr", out, sizeof out);
    tu_write_file(in, text, strlen(text));
    tr_import_opts o;
    tr_import_opts_init(&o);
    tr_format f = TR_FMT_UNKNOWN;
    int rc = tr_import_file(in, &o, out, NULL, &f, e);
    if (rc == 0) rc = tr_trace_load(out, t, e);
    if (rc == 0) CU_ASSERT(f == TR_FMT_SGLANG_LOG || f == TR_FMT_SGLANG_FPM);
    unlink(in);
    unlink(out);
    return rc;
}

/* The error message of importing `text` (format recognised). */
static const char *load_error(const char *text, rh_err *e)
{
    tr_trace t;
    tr_trace_init(&t);
    tr_sink s = tr_trace_sink(&t);
    int rc = tr_read_mem(text, strlen(text), "bad.log", NULL, &s, e);
    CU_ASSERT_EQUAL(rc, -1);
    tr_trace_free(&t);
    return e->msg;
}

static void expect_step(const tr_step *s, double start, double duration, uint32_t prefill, uint32_t decode)
{
    CU_ASSERT_DOUBLE_EQUAL(s->start, start, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s->duration, duration, 1e-9);
    CU_ASSERT_EQUAL(s->prefill_tokens, prefill);
    CU_ASSERT_EQUAL(s->decode_seqs, decode);
    CU_ASSERT_EQUAL(s->flags & TR_STEP_ESTIMATED, TR_STEP_ESTIMATED);
}

static const char *hdr(const tr_trace *t, const char *key)
{
    const char *v = tr_header_get(&t->header, key);
    return v ? v : "(absent)";
}

static void test_log_with_ms(void)
{
    const char *log =
        "[2025-03-01 10:00:00.000] server_args=ServerArgs(model_path='org/m', tp_size=1, decode_log_interval=40, "
        "served_model_name='tiny')\n"
        "[2025-03-01 10:00:00.500 TP0] max_total_num_tokens=100000, chunked_prefill_size=1024, max_prefill_tokens=16384, "
        "max_running_requests=32, context_len=4096, available_gpu_mem=1.00 GB\n"
        "[2025-03-01 10:00:01.000 TP0] Prefill batch. #new-seq: 2, #new-token: 600, #cached-token: 100, token usage: 0.01, "
        "#running-req: 0, #queue-req: 1\n"
        "[2025-03-01 10:00:01.120 TP0] Prefill batch. #new-seq: 1, #new-token: 1024, #cached-token: 0, token usage: 0.02, "
        "#running-req: 2, #queue-req: 0\n"
        "[2025-03-01 10:00:01.270 TP0] Prefill batch. #new-seq: 1, #new-token: 200, #cached-token: 0, token usage: 0.03, "
        "#running-req: 2, #queue-req: 0\n"
        "[2025-03-01 10:00:02.000 TP0] Decode batch. #running-req: 4, #token: 2100, token usage: 0.02, "
        "gen throughput (token/s): 180.50, #queue-req: 0\n"
        "[2025-03-01 10:00:03.000 TP0] Decode batch. #running-req: 4, #token: 2260, token usage: 0.02, cuda graph: True, "
        "gen throughput (token/s): 160.00, #queue-req: 0\n"
        "[2025-03-01 10:00:03.800 TP0] Decode batch. #running-req: 2, #token: 1300, token usage: 0.01, cuda graph: True, "
        "gen throughput (token/s): 150.00, #queue-req: 0, \n";
    tr_trace t;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(load(log, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_steps, 6);
    CU_ASSERT_EQUAL(t.n_requests, 0);
    /* More prompts were queued (#queue-req 1): the next line is the next
     * forward pass, 1.120 - 1.000 s later. */
    expect_step(&t.steps[0], 0, 0.120, 600, 0);
    CU_ASSERT_EQUAL(t.steps[0].prefill_seqs, 2);
    CU_ASSERT_EQUAL(t.steps[0].prefill_context, 100);
    CU_ASSERT_EQUAL(t.steps[0].prefill_attn, 210000);   /* 600 x (100 + 600) / 2 */
    CU_ASSERT_EQUAL(t.steps[0].waiting, 1);
    CU_ASSERT_EQUAL(t.steps[0].pages_total, 100000);
    CU_ASSERT_EQUAL(t.steps[0].pages_used, 1000);       /* 0.01 x 100000 */
    /* 1024 new tokens fill chunked_prefill_size: a chunked prompt goes on. */
    expect_step(&t.steps[1], 0.120, 0.150, 1024, 0);
    /* Nothing queued and a Decode line next: not timed. */
    expect_step(&t.steps[2], 0.270, 0, 200, 0);
    /* The first Decode line: its interval began at startup. */
    expect_step(&t.steps[3], 1.0, 0, 0, 4);
    CU_ASSERT_EQUAL(t.steps[3].decode_context, 2100);
    CU_ASSERT_EQUAL(t.steps[3].pages_used, 2100);
    /* 40 decode steps in 1.000 s: 0.025 s each; mean batch 160 x 1.0 / 40 = 4. */
    expect_step(&t.steps[4], 2.0, 0.025, 0, 4);
    CU_ASSERT_EQUAL(t.steps[4].decode_context, 2180);   /* (2100 + 2260) / 2 */
    CU_ASSERT_EQUAL(t.steps[4].decode_tokens, 4);
    /* 0.8 s / 40 = 0.02 s; mean batch 150 x 0.8 / 40 = 3, between 4 and 2. */
    expect_step(&t.steps[5], 2.8, 0.020, 0, 3);
    CU_ASSERT_EQUAL(t.steps[5].running, 2);
    CU_ASSERT_STRING_EQUAL(t.header.model, "tiny");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "source"), "sglang-log");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.rank"), "TP0");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.timestamps"), "ms");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "max-total-tokens"), "100000");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "chunked-prefill-size"), "1024");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "context-length"), "4096");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.untimed-prefill-steps"), "1");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.untimed-decode-steps"), "1");
    CU_ASSERT_PTR_NULL(tr_header_get(&t.header, "tp-size"));
    tr_trace_free(&t);
}

static void test_log_without_ms(void)
{
    const char *log =
        "[2025-03-01 10:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.01, "
        "#running-req: 0, #queue-req: 3\n"
        "[2025-03-01 10:00:00 TP0] Prefill batch. #new-seq: 3, #new-token: 1536, #cached-token: 0, token usage: 0.03, "
        "#running-req: 1, #queue-req: 0\n"
        "[2025-03-01 10:00:01 TP0] Decode batch. #running-req: 4, #token: 2100, token usage: 0.02, "
        "gen throughput (token/s): 180.5, #queue-req: 0\n"
        "[2025-03-01 10:00:02 TP0] Decode batch. #running-req: 4, #token: 2260, token usage: 0.02, "
        "gen throughput (token/s): 180.5, #queue-req: 0\n"
        "[2025-03-01 10:00:03 TP0] Decode batch. #running-req: 3, #token: 1800, token usage: 0.20, "
        "gen throughput (token/s): 140.0, #queue-req: 0\n";
    tr_trace t;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(load(log, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_steps, 5);
    /* At 1 s resolution a gap says nothing: prefills are not timed. */
    expect_step(&t.steps[0], 0, 0, 512, 0);
    expect_step(&t.steps[1], 0, 0, 1536, 0);
    expect_step(&t.steps[2], 1, 0, 0, 4);
    /* 4 requests, one token each per step, 180.5 tokens/s: 4 / 180.5 s. */
    expect_step(&t.steps[3], 2, 0.022160665, 0, 4);
    /* The batch went from 4 to 3: taken midway, 3.5 / 140 = 0.025 s. */
    expect_step(&t.steps[4], 3, 0.025, 0, 4);
    /* No pool size logged: #token / usage once usage is at least 0.10. */
    CU_ASSERT_EQUAL(t.steps[3].pages_total, 0);
    CU_ASSERT_EQUAL(t.steps[4].pages_total, 9000);
    CU_ASSERT_EQUAL(t.steps[4].pages_used, 1800);
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.timestamps"), "s");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.untimed-prefill-steps"), "2");
    tr_trace_free(&t);
}

static void test_interleaved_ranks(void)
{
    /* TP1 logs first (enable-metrics-for-all-schedulers); TP0 is kept and
     * TP1's lines counted. */
    const char *tp =
        "[2025-03-01 10:00:00.000 TP1] Prefill batch, #new-seq: 1, #new-token: 999, #cached-token: 0, #running-req: 0, "
        "#queue-req: 0, \n"
        "[2025-03-01 10:00:00.000 TP0] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, #running-req: 0, "
        "#queue-req: 0, \n"
        "[2025-03-01 10:00:01.000 TP1] Decode batch, #running-req: 9, #token: 600, gen throughput (token/s): 40.00, \n"
        "[2025-03-01 10:00:01.000 TP0] Decode batch, #running-req: 1, #token: 513, gen throughput (token/s): 40.00, \n";
    tr_trace t;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(load(tp, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_steps, 2);
    CU_ASSERT_EQUAL(t.steps[0].prefill_tokens, 512);
    CU_ASSERT_EQUAL(t.steps[1].running, 1);
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.rank"), "TP0");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.other-rank-lines"), "2");
    tr_trace_free(&t);

    /* DP attention: each DP rank's first TP rank logs; DP0 TP0 is kept. */
    const char *dp =
        "[2025-03-01 10:00:00 DP1 TP1] Prefill batch. #new-seq: 1, #new-token: 300, #cached-token: 0\n"
        "[2025-03-01 10:00:00 DP0 TP0] Prefill batch. #new-seq: 1, #new-token: 100, #cached-token: 0\n"
        "[2025-03-01 10:00:00 DP1 TP1] Prefill batch. #new-seq: 1, #new-token: 301, #cached-token: 0\n"
        "[2025-03-01 10:00:01 DP0 TP0] Prefill batch. #new-seq: 1, #new-token: 101, #cached-token: 0\n";
    CU_ASSERT_EQUAL_FATAL(load(dp, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_steps, 2);
    CU_ASSERT_EQUAL(t.steps[0].prefill_tokens, 100);
    CU_ASSERT_EQUAL(t.steps[1].prefill_tokens, 101);
    CU_ASSERT_DOUBLE_EQUAL(t.steps[1].start, 1.0, 1e-12);
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.rank"), "DP0 TP0");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.other-rank-lines"), "2");
    tr_trace_free(&t);

    /* Every TP rank logs its pool at startup: tp-size from the ranks seen. */
    const char *pools =
        "[2025-03-01 10:00:00 TP1] max_total_num_tokens=7000, chunked_prefill_size=2048, max_running_requests=8\n"
        "[2025-03-01 10:00:00 TP0] max_total_num_tokens=7000, chunked_prefill_size=2048, max_running_requests=8\n"
        "[2025-03-01 10:00:00 TP3] max_total_num_tokens=7000, chunked_prefill_size=2048, max_running_requests=8\n"
        "[2025-03-01 10:00:01 TP0] Prefill batch. #new-seq: 1, #new-token: 10, #cached-token: 0\n";
    CU_ASSERT_EQUAL_FATAL(load(pools, &t, &e), 0);
    CU_ASSERT_STRING_EQUAL(hdr(&t, "tp-size"), "4");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "max-running-requests"), "8");
    CU_ASSERT_EQUAL(t.steps[0].pages_total, 7000);
    tr_trace_free(&t);
}

static void test_restarts(void)
{
    const char *log =
        "[2025-03-01 10:00:00.000 TP0] Prefill batch. #new-seq: 1, #new-token: 100, #queue-req: 2\n"
        "[2025-03-01 10:00:00.050 TP0] Prefill batch. #new-seq: 1, #new-token: 100, #queue-req: 1\n"
        "[2025-03-01 10:00:03.000] server_args=ServerArgs(model_path='m2', tp_size=1)\n"
        "[2025-03-01 10:00:04.000 TP0] max_total_num_tokens=5000, chunked_prefill_size=8192\n"
        "[2025-03-01 10:00:10.000 TP0] Prefill batch. #new-seq: 1, #new-token: 100, #queue-req: 1\n"
        "[2025-03-01 10:00:10.040 TP0] Prefill batch. #new-seq: 1, #new-token: 300, #queue-req: 1\n"
        "[2025-02-28 09:00:00.000 TP0] Prefill batch. #new-seq: 1, #new-token: 100, #queue-req: 1\n"
        "[2025-02-28 09:00:00.030 TP0] Prefill batch. #new-seq: 1, #new-token: 50, #queue-req: 0\n";
    tr_trace t;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(load(log, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_steps, 6);
    expect_step(&t.steps[0], 0, 0.050, 100, 0);
    /* The server restarted after it: no duration spans a restart. */
    expect_step(&t.steps[1], 0.050, 0, 100, 0);
    CU_ASSERT_EQUAL(t.steps[1].pages_total, 0);
    /* Time goes on forward across the restart: the real times are kept. */
    expect_step(&t.steps[2], 10.0, 0.040, 100, 0);
    CU_ASSERT_EQUAL(t.steps[2].pages_total, 5000);
    /* Then time goes backwards: a new segment laid right after step 3. */
    expect_step(&t.steps[3], 10.040, 0, 300, 0);
    expect_step(&t.steps[4], 10.040, 0.030, 100, 0);
    expect_step(&t.steps[5], 10.070, 0, 50, 0);
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.restarts"), "2");
    CU_ASSERT_STRING_EQUAL(t.header.model, "m2");
    tr_trace_free(&t);
}

static void test_decode_interval(void)
{
    /* Two Decode lines 1.000 s apart are 40 decode steps apart, not one:
     * 0.025 s a step (5 requests at 200 tokens/s agree: 5 / 200). */
    const char *forty =
        "[2025-03-01 10:00:00.000 TP0] Decode batch. #running-req: 5, #token: 900, gen throughput (token/s): 190.00\n"
        "[2025-03-01 10:00:01.000 TP0] Decode batch. #running-req: 5, #token: 1100, gen throughput (token/s): 200.00\n";
    tr_trace t;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(load(forty, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_steps, 2);
    expect_step(&t.steps[1], 1.0, 0.025, 0, 5);
    CU_ASSERT_EQUAL(t.steps[1].decode_context, 1000);
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.decode-log-interval"), "40");
    tr_trace_free(&t);

    /* --decode-log-interval 10, told by ServerArgs: 10 steps of 0.1 s at
     * 50 tokens/s (mean batch 50 x 1.0 / 10 = 5). */
    const char *ten =
        "[2025-03-01 09:59:59.000] server_args=ServerArgs(tp_size=1, decode_log_interval=10)\n"
        "[2025-03-01 10:00:00.000 TP0] Decode batch. #running-req: 5, #token: 900, gen throughput (token/s): 50.00\n"
        "[2025-03-01 10:00:01.000 TP0] Decode batch. #running-req: 5, #token: 950, gen throughput (token/s): 50.00\n";
    CU_ASSERT_EQUAL_FATAL(load(ten, &t, &e), 0);
    expect_step(&t.steps[1], 1.0, 0.1, 0, 5);
    tr_trace_free(&t);

    /* The same log without the ServerArgs line: 40 is assumed, the measured
     * mean batch (50 x 1.0 / 40 = 1.25) falls outside 5..5, so the interval
     * is not trusted and 5 / 50 = 0.1 s comes from the throughput. */
    CU_ASSERT_EQUAL_FATAL(load(strchr(ten, '\n') + 1, &t, &e), 0);
    expect_step(&t.steps[1], 1.0, 0.1, 0, 5);
    tr_trace_free(&t);

    /* A Prefill batch ran within the interval: its time is in the wall
     * time, so the decode step is not timed; nor after a 10 s silence. */
    const char *mixed =
        "[2025-03-01 10:00:00.000 TP0] Decode batch. #running-req: 5, gen throughput (token/s): 200.00\n"
        "[2025-03-01 10:00:00.500 TP0] Prefill batch. #new-seq: 1, #new-token: 64, #cached-token: 0\n"
        "[2025-03-01 10:00:01.000 TP0] Decode batch. #running-req: 6, gen throughput (token/s): 200.00\n"
        "[2025-03-01 10:00:30.000 TP0] Decode batch. #running-req: 6, gen throughput (token/s): 0.50\n"
        "[2025-03-01 10:00:31.200 TP0] Decode batch. #running-req: 6, gen throughput (token/s): 200.00\n";
    CU_ASSERT_EQUAL_FATAL(load(mixed, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_steps, 5);
    expect_step(&t.steps[2], 1.0, 0, 0, 6);
    expect_step(&t.steps[3], 30.0, 0, 0, 6);
    /* 1.2 s / 40 = 0.03 s, mean batch 200 x 1.2 / 40 = 6. */
    expect_step(&t.steps[4], 31.2, 0.030, 0, 6);
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.untimed-decode-steps"), "3");
    tr_trace_free(&t);
}

static void test_speculation_and_retraction(void)
{
    /* accept len 3: 3 tokens per request per step, 2 x 3 / 240 = 0.025 s;
     * accept len / accept rate = 4 tokens verified per request. */
    const char *log =
        "[2025-03-01 10:00:00 TP0] Decode batch, #running-req: 2, #token: 400, accept len: 3.00, accept rate: 0.75, "
        "cuda graph: True, gen throughput (token/s): 240.00, #queue-req: 0, \n"
        "[2025-03-01 10:00:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
        "#new_token_ratio: 0.5000 -> 0.7000\n"
        "[2025-03-01 10:00:01 TP0] Decode batch, #running-req: 2, #token: 500, accept len: 3.00, accept rate: 0.75, "
        "cuda graph: True, gen throughput (token/s): 240.00, #queue-req: 3, \n";
    tr_trace t;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(load(log, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_steps, 2);
    const tr_step *s = &t.steps[1];
    expect_step(s, 1, 0.025, 0, 2);
    CU_ASSERT_EQUAL(s->decode_tokens, 8);
    CU_ASSERT_EQUAL(s->spec_proposed, 6);
    CU_ASSERT_EQUAL(s->spec_accepted, 4);
    CU_ASSERT_EQUAL(s->retractions, 3);
    CU_ASSERT_EQUAL(s->waiting, 3);
    CU_ASSERT_EQUAL(t.steps[0].retractions, 0);
    tr_trace_free(&t);
}

static void test_garbage_lines(void)
{
    const char *log =
        "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  1.95it/s]\n"
        "\n"
        "[2025-03-01 10:00:00] INFO:     127.0.0.1:5000 - \"POST /generate HTTP/1.1\" 200 OK\n"
        "WARNING: Decode batch sizes above 256 are slow\n"
        "[2025-13-45 10:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 7\n"
        "[2025-03-01 10:00:00 TP0] Something about Prefill batch. #new-seq: 1, #new-token: 7\n"
        "[2025-03-01 10:00:00 TP0 Prefill batch. #new-seq: 1, #new-token: 7\n"
        "\x01\x02\xff\xfe binary noise [[[[ ]]]]\n"
        "sglang-1  | [2025-03-01 10:00:01 TP0] Prefill batch. #new-seq: 1, #new-token: 64, cache hit rate: 0.00%, "
        "#cached-token: 0, weird field, #running-req: 0\n"
        "[2025-03-01 10:00:02 TP0] Decode batch. #running-req: 1, input throughput (token/s): 9.9, #new-field: x, "
        "gen throughput (token/s): 50.00\n";
    tr_trace t;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(load(log, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_steps, 2);
    expect_step(&t.steps[0], 0, 0, 64, 0);
    expect_step(&t.steps[1], 1, 0, 0, 1);
    tr_trace_free(&t);
    const char *none = "[2025-03-01 10:00:00] INFO: started\nhello\n";
    CU_ASSERT_STRING_EQUAL(tr_format_name(tr_format_guess_mem(none, strlen(none), "x.log", &e)), "unknown");
}

static void test_malformed_numbers(void)
{
    rh_err e;
    const char *bad_tok = "[2025-03-01 10:00:00 TP0] Decode batch. #running-req: 1, gen throughput (token/s): 1.0\n"
                          "unrelated\n"
                          "[2025-03-01 10:00:01 TP0] Prefill batch. #new-seq: 1, #new-token: 5x2, #cached-token: 0\n";
    const char *m = load_error(bad_tok, &e);
    CU_ASSERT(strstr(m, "bad.log: line 3") && strstr(m, "'#new-token'") && strstr(m, "5x2"));
    const char *bad_thr = "[2025-03-01 10:00:01 TP0] Decode batch. #running-req: 2, gen throughput (token/s): fast\n";
    m = load_error(bad_thr, &e);
    CU_ASSERT(strstr(m, "line 1") && strstr(m, "'gen throughput (token/s)'") && strstr(m, "not a number"));
    const char *neg = "[2025-03-01 10:00:01 TP0] Decode batch. #running-req: -2, gen throughput (token/s): 1.0\n";
    m = load_error(neg, &e);
    CU_ASSERT(strstr(m, "line 1") && strstr(m, "'#running-req'") && strstr(m, "negative"));
    const char *missing = "[2025-03-01 10:00:01 TP0] Prefill batch. #new-seq: 1, #cached-token: 0\n";
    m = load_error(missing, &e);
    CU_ASSERT(strstr(m, "line 1") && strstr(m, "'#new-token'"));
    const char *pool = "[2025-03-01 10:00:01 TP0] max_total_num_tokens=lots, chunked_prefill_size=8192\n";
    m = load_error(pool, &e);
    CU_ASSERT(strstr(m, "line 1") && strstr(m, "'max_total_num_tokens'"));
    const char *nothing = "[2025-03-01 10:00:01 TP0] max_total_num_tokens=10, chunked_prefill_size=8192\n";
    m = load_error(nothing, &e);
    CU_ASSERT(strstr(m, "no 'Prefill batch' or 'Decode batch' lines") != NULL);

    /* Through the CLI: exit 1, one line naming the file and the line, and
     * nothing left at the output. */
    char in[256], out[256], cmd[1024], msg[2048];
    tu_tmp_path("sglang_bad.log", in, sizeof in);
    tu_tmp_path("sglang_bad.rhtr", out, sizeof out);
    tu_write_file(in, bad_tok, strlen(bad_tok));
    snprintf(cmd, sizeof cmd, "%s trace import %s -o %s", tu_bin(), in, out);
    CU_ASSERT_EQUAL(tu_run(cmd, msg, sizeof msg), 1);
    CU_ASSERT(strstr(msg, in) && strstr(msg, "line 3") && strstr(msg, "'#new-token'"));
    CU_ASSERT_PTR_NULL(strchr(msg, '\n') ? strchr(strchr(msg, '\n') + 1, '\n') : NULL);
    CU_ASSERT(!tu_file_exists(out));
    unlink(in);
}

static const char *FPM_PREFILL =
    "{\"schema\":\"dynamo.fpm.trace.v1\",\"source\":{\"namespace\":\"dynamo\",\"component\":\"backend\","
    "\"producer_id\":\"p1\"},\"capture_mode\":\"full\",\"observed_at_unix_ms\":1700000000100,\"fpm\":{\"version\":1,"
    "\"worker_id\":\"w1\",\"dp_rank\":0,\"counter_id\":7,\"wall_time\":0.1,\"scheduled_requests\":{"
    "\"num_prefill_requests\":2,\"sum_prefill_tokens\":1000,\"var_prefill_length\":0.0,\"sum_prefill_kv_tokens\":200,"
    "\"num_decode_requests\":0,\"sum_decode_kv_tokens\":0,\"var_decode_kv_tokens\":0.0},\"queued_requests\":{"
    "\"num_prefill_requests\":3,\"sum_prefill_tokens\":900,\"var_prefill_length\":0.0,\"num_decode_requests\":0,"
    "\"sum_decode_kv_tokens\":0,\"var_decode_kv_tokens\":0.0}}}\n";

static void test_fpm(void)
{
    char text[4096];
    snprintf(text, sizeof text,
             "%s"
             "{\"schema\":\"dynamo.fpm.trace.v1\",\"capture_mode\":\"full\",\"observed_at_unix_ms\":1700000000110,"
             "\"fpm\":{\"worker_id\":\"w1\",\"dp_rank\":0,\"wall_time\":0.0,\"scheduled_requests\":{},"
             "\"queued_requests\":{}}}\n"
             "{\"schema\":\"dynamo.fpm.trace.v1\",\"observed_at_unix_ms\":1700000000130,\"fpm\":{\"worker_id\":\"w1\","
             "\"dp_rank\":0,\"wall_time\":0.02,\"new_key\":[1,2],\"scheduled_requests\":{\"num_decode_requests\":4,"
             "\"sum_decode_kv_tokens\":4004},\"queued_requests\":{\"num_prefill_requests\":1}}}\n"
             "{\"schema\":\"dynamo.fpm.trace.v1\",\"observed_at_unix_ms\":1700000000140,\"fpm\":{\"worker_id\":\"w2\","
             "\"dp_rank\":0,\"wall_time\":0.03,\"scheduled_requests\":{\"num_decode_requests\":9}}}\n",
             FPM_PREFILL);
    tr_trace t;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(load(text, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(t.n_steps, 2);
    const tr_step *p = &t.steps[0], *d = &t.steps[1];
    CU_ASSERT_DOUBLE_EQUAL(p->start, 0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(p->duration, 0.1, 1e-12);
    CU_ASSERT_EQUAL(p->prefill_tokens, 1000);
    CU_ASSERT_EQUAL(p->prefill_seqs, 2);
    CU_ASSERT_EQUAL(p->prefill_context, 200);
    CU_ASSERT_EQUAL(p->prefill_attn, 600000);       /* 1000 x (200 + 1000) / 2 */
    CU_ASSERT_EQUAL(p->waiting, 3);
    CU_ASSERT_EQUAL(p->running, 2);
    CU_ASSERT_EQUAL(p->flags, 0);                   /* measured, not estimated */
    /* Started 0.130 - 0.020 s after the first row's 0.100 - 0.100. */
    CU_ASSERT_DOUBLE_EQUAL(d->start, 0.110, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(d->duration, 0.02, 1e-12);
    CU_ASSERT_EQUAL(d->decode_seqs, 4);
    CU_ASSERT_EQUAL(d->decode_tokens, 4);
    CU_ASSERT_EQUAL(d->decode_context, 4000);       /* 4004 minus the 4 tokens being decoded */
    CU_ASSERT_EQUAL(d->waiting, 1);
    CU_ASSERT_STRING_EQUAL(hdr(&t, "source"), "sglang-fpm");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "fpm.capture_mode"), "full");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "fpm.worker_id"), "w1");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "fpm.other-worker-rows"), "1");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "fpm.idle-heartbeats"), "1");
    tr_trace_free(&t);

    rh_err e2;
    const char *m = load_error("{\"schema\":\"dynamo.fpm.trace.v2\",\"fpm\":{}}\n", &e2);
    CU_ASSERT(strstr(m, "line 1") && strstr(m, "dynamo.fpm.trace.v1"));
    char bad[4096];
    snprintf(bad, sizeof bad, "%s%s", FPM_PREFILL,
             "{\"schema\":\"dynamo.fpm.trace.v1\",\"observed_at_unix_ms\":1,\"fpm\":{\"wall_time\":\"slow\","
             "\"scheduled_requests\":{}}}\n");
    m = load_error(bad, &e2);
    CU_ASSERT(strstr(m, "bad.log: line 2") && strstr(m, "'fpm.wall_time'"));
    snprintf(bad, sizeof bad, "%s%s", FPM_PREFILL,
             "{\"schema\":\"dynamo.fpm.trace.v1\",\"observed_at_unix_ms\":1,\"fpm\":{\"wall_time\":0.1,"
             "\"scheduled_requests\":{\"sum_prefill_tokens\":-5}}}\n");
    m = load_error(bad, &e2);
    CU_ASSERT(strstr(m, "line 2") && strstr(m, "'fpm.scheduled_requests.sum_prefill_tokens'") && strstr(m, "negative"));
    snprintf(bad, sizeof bad, "%s%s", FPM_PREFILL, "{\"schema\":\"dynamo.fpm.trace.v1\",\n");
    m = load_error(bad, &e2);
    CU_ASSERT(strstr(m, "line 2") && strstr(m, "invalid JSON"));
}

static void test_recognition(void)
{
    rh_err e;
    const char *later = "Loading weights...\nsome noise\n[2025-03-01 10:00:00 TP0] Prefill batch. #new-seq: 1\n";
    CU_ASSERT_EQUAL(tr_format_guess_mem(later, strlen(later), "a", &e), TR_FMT_SGLANG_LOG);
    const char *startup = "[2025-03-01 10:00:00] server_args=ServerArgs(model_path='x')\n";
    CU_ASSERT_EQUAL(tr_format_guess_mem(startup, strlen(startup), "a", &e), TR_FMT_SGLANG_LOG);
    CU_ASSERT_EQUAL(tr_format_guess_mem(FPM_PREFILL, strlen(FPM_PREFILL), "a", &e), TR_FMT_SGLANG_FPM);
    CU_ASSERT_EQUAL(tr_format_guess_mem("\x1f\x8b\x08\x00....", 8, "f.jsonl.gz", &e), TR_FMT_UNKNOWN);
    CU_ASSERT(strstr(e.msg, "f.jsonl.gz") && strstr(e.msg, "gzip -dc"));
    CU_ASSERT_EQUAL(tr_format_parse("sglang-log"), TR_FMT_SGLANG_LOG);
    CU_ASSERT_EQUAL(tr_format_parse("sglang"), TR_FMT_SGLANG_LOG);
    CU_ASSERT_EQUAL(tr_format_parse("sglang-fpm"), TR_FMT_SGLANG_FPM);
    CU_ASSERT_EQUAL(tr_format_parse("dynamo-fpm"), TR_FMT_SGLANG_FPM);
    CU_ASSERT_STRING_EQUAL(tr_format_name(TR_FMT_SGLANG_FPM), "sglang-fpm");
}

/* tests/fixtures/sglang/server_ms.log: a 105-line log shaped like SGLang's
 * (ms timestamps, TP0 and some TP1 lines, access-log noise), written from a
 * small scheduler whose steps cost prefill 6 ms + 45 us/token + 0.2 ns per
 * attention pair and decode 9 ms + 60 us/request + 30 ns/context token. */
static void test_realistic_log_to_fit(void)
{
    tr_trace t;
    rh_err e = {{0}};
    tr_sink s;
    tr_trace_init(&t);
    s = tr_trace_sink(&t);
    CU_ASSERT_EQUAL_FATAL(tr_read("tests/fixtures/sglang/server_ms.log", NULL, &s, NULL, &e), 0);
    CU_ASSERT_EQUAL(t.n_steps, 77);
    size_t prefill = 0, decode = 0;
    for (size_t i = 0; i < t.n_steps; i++) {
        const tr_step *st = &t.steps[i];
        if (i) CU_ASSERT(st->start >= t.steps[i - 1].start);
        if (st->duration <= 0) continue;
        if (st->prefill_tokens) {
            prefill++;
            double truth = 0.006 + 4.5e-5 * st->prefill_tokens + 2e-10 * (double)st->prefill_attn;
            CU_ASSERT(st->duration > truth * 0.98 && st->duration < truth * 1.02);
        } else {
            decode++;
            CU_ASSERT(st->duration > 0.009 && st->duration < 0.012);
        }
    }
    CU_ASSERT_EQUAL(prefill, 26);
    CU_ASSERT_EQUAL(decode, 10);
    CU_ASSERT_STRING_EQUAL(t.header.model, "llama-3.1-8b");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "tp-size"), "2");
    CU_ASSERT_STRING_EQUAL(hdr(&t, "sglang.other-rank-lines"), "16");

    cost_fit_opts o;
    cost_fit_opts_default(&o);
    cost_fit_result r;
    CU_ASSERT_EQUAL_FATAL(cost_fit_steps(t.steps, t.n_steps, &o, &r, &e), 0);
    CU_ASSERT_EQUAL(r.used, 36);
    CU_ASSERT(r.coef.per_prefill_token_s > 4.0e-5 && r.coef.per_prefill_token_s < 5.0e-5);
    CU_ASSERT(r.rms < 0.02);
    tr_trace_free(&t);
}

void register_test_trace_sglang(void)
{
    CU_pSuite s = CU_add_suite("trace_sglang", NULL, NULL);
    CU_add_test(s, "log with milliseconds: prefill gaps, decode intervals, startup knobs", test_log_with_ms);
    CU_add_test(s, "log without milliseconds: throughput only", test_log_without_ms);
    CU_add_test(s, "interleaved TP and DP ranks: TP0 kept", test_interleaved_ranks);
    CU_add_test(s, "restarts: banner and time going backwards", test_restarts);
    CU_add_test(s, "decode log interval: 40, 10, not trusted, prefill or idle inside", test_decode_interval);
    CU_add_test(s, "speculative accept len and retractions", test_speculation_and_retraction);
    CU_add_test(s, "garbage and unknown fields are ignored", test_garbage_lines);
    CU_add_test(s, "malformed numbers name the line and field", test_malformed_numbers);
    CU_add_test(s, "forward-pass metrics (dynamo.fpm.trace.v1)", test_fpm);
    CU_add_test(s, "recognised from the content", test_recognition);
    CU_add_test(s, "a realistic log through to a cost fit", test_realistic_log_to_fit);
}
