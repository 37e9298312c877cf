/* test_trace_import.c — each importer on small hand-made files (CRLF, no
 * final newline, offsets, missing fractions, rows out of order, failed rows,
 * sessions, model filter), format recognition, and every kind of bad input
 * through the CLI: exit status 1, one message naming the file, the line or
 * record and the field, and no output file. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "trace_helpers.h"
#include "traces/import/import.h"

static int load_text(const char *text, tr_format f, const char *model, tr_trace *t, rh_err *e)
{
    char path[256];
    tu_tmp_path("imp_in.txt", path, sizeof path);
    tu_write_file(path, text, strlen(text));
    tr_import_opts o;
    tr_import_opts_init(&o);
    o.format = f;
    o.model = model;
    int rc;
    if (f == TR_FMT_UNKNOWN && !model) {
        rc = tr_trace_load(path, t, e);   /* recognised from the content */
    } else {
        /* Through a binary file and back: the full import path. */
        char out[256];
        tu_tmp_path("imp_out.rhtr", out, sizeof out);
        rc = tr_import_file(path, &o, out, NULL, NULL, e);
        if (rc == 0) rc = tr_trace_load(out, t, e);
        unlink(out);
    }
    unlink(path);
    return rc;
}

static void expect_req(const tr_trace *t, size_t i, double arrival, uint32_t in, uint32_t out)
{
    CU_ASSERT_FATAL(i < t->n_requests);
    const tr_request *r = &t->requests[i];
    CU_ASSERT_EQUAL(r->id, i);
    CU_ASSERT_DOUBLE_EQUAL(r->arrival, arrival, 1e-12);
    CU_ASSERT_EQUAL(r->input_len, in);
    CU_ASSERT_EQUAL(r->output_len, out);
}

static void test_azure(void)
{
    tr_trace t;
    rh_err e = {{0}};
    const char *y2023 = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                        "2023-11-16 18:17:03.9799600,4808,10\r\n"
                        "2023-11-16 18:17:04.0319600,3180,8\r\n"
                        "2023-11-16 18:17:04.0781490,110,27";
    CU_ASSERT_EQUAL_FATAL(load_text(y2023, TR_FMT_UNKNOWN, NULL, &t, &e), 0);
    CU_ASSERT_EQUAL(t.n_requests, 3);
    expect_req(&t, 0, 0, 4808, 10);
    expect_req(&t, 1, 0.052, 3180, 8);
    expect_req(&t, 2, 0.098189, 110, 27);
    CU_ASSERT_STRING_EQUAL(tr_header_get(&t.header, "source"), "azure");
    tr_trace_free(&t);

    /* 2024: offsets, a missing fraction, rows out of order, a tie. */
    const char *y2024 = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                        "2024-05-10 00:00:01+00:00,100,10\n"
                        "2024-05-10 00:00:00.0085280+00:00,200,20\n"
                        "2024-05-10 02:00:00.5+02:00,300,30\n"
                        "2024-05-10 00:00:00.0085280+00:00,400,40\n";
    CU_ASSERT_EQUAL_FATAL(load_text(y2024, TR_FMT_AZURE, NULL, &t, &e), 0);
    CU_ASSERT_EQUAL(t.n_requests, 4);
    expect_req(&t, 0, 0, 200, 20);
    expect_req(&t, 1, 0, 400, 40);
    expect_req(&t, 2, 0.491472, 300, 30);
    expect_req(&t, 3, 0.991472, 100, 10);
    tr_trace_free(&t);
}

static void test_burstgpt(void)
{
    tr_trace t;
    rh_err e = {{0}};
    const char *six = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                      "5,ChatGPT,472,18,490,Conversation log\n"
                      "7,GPT-4,100,0,100,Conversation log\n"
                      "6,ChatGPT,50,20,70,API log\n";
    CU_ASSERT_EQUAL_FATAL(load_text(six, TR_FMT_UNKNOWN, NULL, &t, &e), 0);
    CU_ASSERT_EQUAL(t.n_requests, 3);
    expect_req(&t, 0, 0, 472, 18);
    expect_req(&t, 1, 1, 50, 20);
    expect_req(&t, 2, 2, 100, 0);
    CU_ASSERT_EQUAL(t.requests[2].flags, TR_REQ_FAILED);
    CU_ASSERT_EQUAL(t.requests[0].flags, 0);
    tr_trace_free(&t);

    CU_ASSERT_EQUAL_FATAL(load_text(six, TR_FMT_BURSTGPT, "gpt-4", &t, &e), 0);
    CU_ASSERT_EQUAL(t.n_requests, 1);
    expect_req(&t, 0, 0, 100, 0);
    CU_ASSERT_STRING_EQUAL(t.header.model, "gpt-4");
    tr_trace_free(&t);

    const char *eight = "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                        "19440110.0,aaa,43,GPT-4,906,446,1352,Conversation log\n"
                        "19440192.0,aaa,8,GPT-4,1779,0,1779,Conversation log\n"
                        "19440161.0,bbb,2,ChatGPT,36,29,65,Conversation log\n";
    CU_ASSERT_EQUAL_FATAL(load_text(eight, TR_FMT_UNKNOWN, NULL, &t, &e), 0);
    CU_ASSERT_EQUAL(t.n_requests, 3);
    expect_req(&t, 0, 0, 906, 446);
    expect_req(&t, 1, 51, 36, 29);
    expect_req(&t, 2, 82, 1779, 0);
    CU_ASSERT_EQUAL(t.requests[0].session_id, 1);
    CU_ASSERT_EQUAL(t.requests[0].turn, 0);
    CU_ASSERT_EQUAL(t.requests[1].session_id, 2);
    CU_ASSERT_EQUAL(t.requests[2].session_id, 1);
    CU_ASSERT_EQUAL(t.requests[2].turn, 1);
    CU_ASSERT_EQUAL(t.requests[2].flags, TR_REQ_FAILED);
    tr_trace_free(&t);
}

static void test_vidur_and_mooncake(void)
{
    tr_trace t;
    rh_err e = {{0}};
    CU_ASSERT_EQUAL_FATAL(load_text("arrived_at,num_prefill_tokens,num_decode_tokens,extra\n"
                                    "1.0,100,10,x\n0.25,200,20,y\n",
                                    TR_FMT_UNKNOWN, NULL, &t, &e), 0);
    CU_ASSERT_EQUAL(t.n_requests, 2);
    expect_req(&t, 0, 0, 200, 20);
    expect_req(&t, 1, 0.75, 100, 10);
    tr_trace_free(&t);

    /* Vidur's processed length-only traces: an offline batch in file order. */
    CU_ASSERT_EQUAL_FATAL(load_text("num_prefill_tokens,num_decode_tokens\n3000,120\n17,1\n900,40",
                                    TR_FMT_UNKNOWN, NULL, &t, &e), 0);
    CU_ASSERT_EQUAL(t.n_requests, 3);
    expect_req(&t, 0, 0, 3000, 120);
    expect_req(&t, 1, 0, 17, 1);
    expect_req(&t, 2, 0, 900, 40);
    CU_ASSERT_PTR_NOT_NULL(tr_header_get(&t.header, "arrivals"));
    tr_trace_free(&t);
    CU_ASSERT_EQUAL(load_text("num_prefill_tokens,num_decode_tokens\n3000\n", TR_FMT_UNKNOWN, NULL, &t, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "line 2: missing field 'num_decode_tokens'"));

    const char *moon = "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 10, \"hash_ids\": [0, 1]}\n"
                       "{\"timestamp\": 1500.5, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 2]}\n"
                       "{\"timestamp\": 1000, \"input_length\": 10, \"output_length\": 5, \"extra\": {\"a\": [1]}}\n";
    CU_ASSERT_EQUAL_FATAL(load_text(moon, TR_FMT_UNKNOWN, NULL, &t, &e), 0);
    CU_ASSERT_EQUAL(t.n_requests, 3);
    CU_ASSERT_EQUAL(t.header.block_size, 512);
    expect_req(&t, 0, 0, 1000, 10);
    expect_req(&t, 1, 1.0, 10, 5);
    expect_req(&t, 2, 1.5005, 600, 5);
    CU_ASSERT_EQUAL(t.requests[0].n_hashes, 2);
    CU_ASSERT_EQUAL(t.requests[1].n_hashes, 0);
    CU_ASSERT_EQUAL(t.requests[2].hashes[1], 2);
    tr_trace_free(&t);
}

static void test_guess(void)
{
    rh_err e;
    CU_ASSERT_EQUAL(tr_format_guess_mem("RHTRACE1xxxx", 12, "a", &e), TR_FMT_BINARY);
    CU_ASSERT_EQUAL(tr_format_guess_mem("{\"rehearse_trace\":1}", 20, "a", &e), TR_FMT_JSONL);
    CU_ASSERT_EQUAL(tr_format_guess_mem("{\"timestamp\":0,\"input_length\":1}", 32, "a", &e), TR_FMT_MOONCAKE);
    CU_ASSERT_EQUAL(tr_format_guess_mem("\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens", 42, "a", &e), TR_FMT_AZURE);
    CU_ASSERT_EQUAL(tr_format_guess_mem("Timestamp,Model,Request tokens", 30, "a", &e), TR_FMT_BURSTGPT);
    CU_ASSERT_EQUAL(tr_format_guess_mem("arrived_at,num_prefill_tokens", 29, "a", &e), TR_FMT_VIDUR);
    CU_ASSERT_EQUAL(tr_format_guess_mem("num_prefill_tokens,num_decode_tokens", 36, "a", &e), TR_FMT_VIDUR);
    CU_ASSERT_EQUAL(tr_format_guess_mem("time,in,out\n", 12, "x.csv", &e), TR_FMT_UNKNOWN);
    CU_ASSERT(strstr(e.msg, "x.csv: line 1") && strstr(e.msg, "--format"));
    CU_ASSERT_EQUAL(tr_format_guess_mem("{\"a\":1}", 7, "x.json", &e), TR_FMT_UNKNOWN);
    CU_ASSERT_EQUAL(tr_format_guess_mem("\x28\xB5\x2F\xFD....", 8, "x.zst", &e), TR_FMT_UNKNOWN);
    CU_ASSERT(strstr(e.msg, "zstd -d") != NULL);
    CU_ASSERT_EQUAL(tr_format_parse("splitwise"), TR_FMT_VIDUR);
    CU_ASSERT_EQUAL(tr_format_parse("nope"), TR_FMT_UNKNOWN);
}

/* Runs `trace import` on `content` and checks the failure contract. */
static void bad_input(const char *name, const void *content, size_t n, const char *extra_flags, const char *const *expect)
{
    char in[256], out[256], cmd[1024], msg[4096];
    tu_tmp_path(name, in, sizeof in);
    tu_tmp_path("bad_out.rhtr", out, sizeof out);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(in, content, n), 0);
    snprintf(cmd, sizeof cmd, "%s trace import %s %s -o %s", tu_bin(), extra_flags, in, out);
    int status = tu_run(cmd, msg, sizeof msg);
    CU_ASSERT_EQUAL(status, 1);
    int lines = 0;
    for (const char *p = msg; *p; p++) lines += *p == '\n';
    CU_ASSERT_EQUAL(lines, 1);
    int ok = strstr(msg, in) != NULL;
    for (int i = 0; expect[i]; i++) ok = ok && strstr(msg, expect[i]);
    if (!ok || lines != 1 || status != 1) printf("\n    %s -> status %d: %s", name, status, msg);
    CU_ASSERT(ok);
    CU_ASSERT(!tu_file_exists(out));
    snprintf(cmd, sizeof cmd, "ls build/tmp | grep -c 'bad_out.rhtr.*tmp' || true");
    tu_run(cmd, msg, sizeof msg);
    CU_ASSERT_EQUAL(atoi(msg), 0);
    unlink(in);
}

static void test_bad_inputs(void)
{
    /* A real binary trace to damage. */
    char good[256], cmd[1024], msg[1024];
    tu_tmp_path("bad_good.rhtr", good, sizeof good);
    snprintf(cmd, sizeof cmd, "%s trace synth --requests 20000 --seed 5 -o %s", tu_bin(), good);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, msg, sizeof msg), 0);
    size_t n = 0;
    char *bin = th_slurp(good, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bin);

    bad_input("bad_magic.rhtr", "\x01\x02garbage\x00\x05", 11, "", (const char *const[]){"byte 0", "not a trace", NULL});
    bad_input("bad_magic2.rhtr", "NOTRHTR1....", 12, "--format binary", (const char *const[]){"byte 0", "wrong magic", NULL});
    bad_input("bad_version.rhtr", "RHTRACE7....", 12, "", (const char *const[]){"byte 7", "RHTRACE7", NULL});
    bad_input("bad_cut.rhtr", bin, n * 2 / 3, "", (const char *const[]){"truncated zstd frame", "byte", "record", NULL});
    free(bin);
    unlink(good);

    const char *json = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1}\n"
                       "{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1}\n"
                       "{\"timestamp\": 9, \"input_length\": 10, \"output_length\": 1,}\n";
    bad_input("bad_json.jsonl", json, strlen(json), "", (const char *const[]){"line 3", "invalid JSON", NULL});
    const char *nofield = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1}\n{\"timestamp\": 5, \"input_length\": 10}\n";
    bad_input("bad_field.jsonl", nofield, strlen(nofield), "", (const char *const[]){"line 2", "'output_length'", NULL});
    const char *nocol = "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,4808\n";
    bad_input("bad_col.csv", nocol, strlen(nocol), "--format azure", (const char *const[]){"line 1", "missing column 'GeneratedTokens'", NULL});
    const char *shortrow = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0,12\n";
    bad_input("bad_row.csv", shortrow, strlen(shortrow), "", (const char *const[]){"line 3", "'GeneratedTokens'", NULL});
    const char *neg = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,-48,10\n";
    bad_input("bad_neg.csv", neg, strlen(neg), "", (const char *const[]){"line 2", "'ContextTokens'", "negative", NULL});
    const char *absurd = "{\"timestamp\": 0, \"input_length\": 99999999999, \"output_length\": 1}\n";
    bad_input("bad_big.jsonl", absurd, strlen(absurd), "", (const char *const[]){"line 1", "'input_length'", "absurd", NULL});
    const char *negb = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,ChatGPT,5,-1,4,API log\n";
    bad_input("bad_neg.burst.csv", negb, strlen(negb), "", (const char *const[]){"line 2", "'Response tokens'", "negative", NULL});
    const char *badtime = "arrived_at,num_prefill_tokens,num_decode_tokens\nsoon,1,1\n";
    bad_input("bad_time.csv", badtime, strlen(badtime), "", (const char *const[]){"line 2", "'arrived_at'", NULL});
    const char *baddate = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-16 18:17:03.9,48,10\n";
    bad_input("bad_date.csv", baddate, strlen(baddate), "", (const char *const[]){"line 2", "'TIMESTAMP'", NULL});
    bad_input("bad_0.csv", "", 0, "", (const char *const[]){"empty file", NULL});
    bad_input("bad_0.jsonl", "", 0, "--format mooncake", (const char *const[]){"empty file", NULL});
    bad_input("bad_0.rhtr", "", 0, "--format binary", (const char *const[]){"empty file", NULL});
    bad_input("bad_0b.csv", "", 0, "--format burstgpt", (const char *const[]){"empty file", NULL});
    bad_input("bad_hdr_only.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", 40, "", (const char *const[]){"no requests", NULL});
}

static void test_cli_usage_errors(void)
{
    char cmd[512], msg[2048];
    snprintf(cmd, sizeof cmd, "%s trace import", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, msg, sizeof msg), 1);
    CU_ASSERT(strstr(msg, "no input") != NULL);
    snprintf(cmd, sizeof cmd, "%s trace import x.csv", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, msg, sizeof msg), 1);
    CU_ASSERT(strstr(msg, "-o OUT") != NULL);
    snprintf(cmd, sizeof cmd, "%s trace stats --bogus x", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, msg, sizeof msg), 1);
    CU_ASSERT(strstr(msg, "--bogus") != NULL);
    snprintf(cmd, sizeof cmd, "%s trace nope", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, msg, sizeof msg), 1);
    const char *subs[] = {"import", "export", "cat", "stats", "slice", "synth"};
    for (int i = 0; i < 6; i++) {
        snprintf(cmd, sizeof cmd, "%s trace %s --help", tu_bin(), subs[i]);
        CU_ASSERT_EQUAL(tu_run(cmd, msg, sizeof msg), 0);
        CU_ASSERT(strstr(msg, "usage: rehearse trace") != NULL);
    }
    snprintf(cmd, sizeof cmd, "%s trace --help", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, msg, sizeof msg), 0);
}

void register_test_trace_import(void)
{
    CU_pSuite s = CU_add_suite("trace_import", NULL, NULL);
    CU_add_test(s, "Azure 2023 and 2024", test_azure);
    CU_add_test(s, "BurstGPT: both layouts, failed rows, sessions, model filter", test_burstgpt);
    CU_add_test(s, "vidur and Mooncake", test_vidur_and_mooncake);
    CU_add_test(s, "format recognition", test_guess);
    CU_add_test(s, "bad input: exit 1, one message, no output", test_bad_inputs);
    CU_add_test(s, "usage errors and --help", test_cli_usage_errors);
}
