/* test_hardening_inputs.c — careless input gets one clear message, or
 * works: a trace piped in (a pipe, /dev/stdin, a FIFO) reads as the file
 * does; a directory says it is one; negative arrivals and requests with
 * nothing to serve are refused with their line; --max-total-tokens 0 and
 * --max-concurrency 0 are refused instead of meaning the default; a request
 * too large for the pool is named once. The binary links no CUDA library:
 * --backend cuda loads librehearse_cuda.so, and where it cannot, says where
 * it looked or what it found instead. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "test_hardening_util.h"
#include "testutil.h"
#include "traces/trace.h"

static char trace[256], cost[256], out[1 << 16], want[1 << 16];

static int setup(void)
{
    tu_tmp_path("hin.rhtr", trace, sizeof trace);
    tu_tmp_path("hin-cost.json", cost, sizeof cost);
    tr_trace t;
    tr_trace_init(&t);
    rh_err e;
    for (uint32_t i = 0; i < 40; i++) {
        tr_request r = {.id = i, .arrival = 0.01 * i, .input_len = 30 + i, .output_len = 3};
        if (tr_trace_add_request(&t, &r, &e) < 0) return -1;
    }
    int rc = tr_trace_save(&t, trace, &e);
    tr_trace_free(&t);
    const char *lin = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5, "
                      "\"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}";
    return rc < 0 || tu_write_file(cost, lin, strlen(lin)) != 0 ? -1 : 0;
}

static int run(const char *fmt, const char *a, const char *b, char *buf)
{
    char cmd[2048], args[1024];
    snprintf(args, sizeof args, fmt, a, b);
    snprintf(cmd, sizeof cmd, "%s %s", tu_bin(), args);
    return tu_run(cmd, buf, sizeof out);
}

static void test_piped_traces_read_as_files(void)
{
    CU_ASSERT_EQUAL_FATAL(run("trace stats %s --json", trace, "", want), 0);
    char cmd[2048];
    /* a pipe, through /dev/stdin */
    snprintf(cmd, sizeof cmd, "cat %s | %s trace stats /dev/stdin --json", trace, tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    /* the same numbers; only the name of the input differs */
    const char *a = strstr(want, "\"requests\""), *b = strstr(out, "\"requests\"");
    CU_ASSERT(a && b && !strncmp(a, b, 200));
    if (!b) printf("\n    %s\n", out);
    /* a FIFO */
    char fifo[256];
    tu_tmp_path("hin.fifo", fifo, sizeof fifo);
    remove(fifo);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    snprintf(cmd, sizeof cmd, "(cat %s > %s &) ; %s trace stats %s --json", trace, fifo, tu_bin(), fifo);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    b = strstr(out, "\"requests\"");
    CU_ASSERT(a && b && !strncmp(a, b, 200));
    remove(fifo);
    /* a text format piped into import */
    char imported[256];
    tu_tmp_path("hin-piped.rhtr", imported, sizeof imported);
    snprintf(cmd, sizeof cmd,
             "printf 'TIMESTAMP,ContextTokens,GeneratedTokens\\n2023-11-16 18:15:46.68,374,44\\n"
             "2023-11-16 18:15:47.00,12,3\\n' | %s trace import /dev/stdin -o %s",
             tu_bin(), imported);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "imported 2 requests from /dev/stdin (azure)"));
    /* a directory */
    CU_ASSERT_EQUAL(run("trace stats %s", "build/tmp", "", out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "build/tmp: a directory, not a trace file"));
    CU_ASSERT_EQUAL(run("sim %s --cost %s", "build/tmp", cost, out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "a directory"));
}

static void test_refused_with_their_line(void)
{
    char path[256];
    tu_tmp_path("hin-neg.jsonl", path, sizeof path);
    const char *neg = "{\"rehearse_trace\": 1}\n"
                      "{\"type\": \"request\", \"arrival\": 0.5, \"input_len\": 10, \"output_len\": 2}\n"
                      "{\"type\": \"request\", \"arrival\": -4.5, \"input_len\": 10, \"output_len\": 2}\n";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, neg, strlen(neg)), 0);
    CU_ASSERT_EQUAL(run("trace stats %s", path, "", out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "line 3: field 'arrival' is -4.5: negative"));
    CU_ASSERT_EQUAL(run("trace slice %s --first 2 -o build/tmp/hin-neg-out.rhtr", path, "", out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "line 3"));
    const char *empty = "{\"rehearse_trace\": 1}\n"
                        "{\"type\": \"request\", \"arrival\": 0, \"input_len\": 0, \"output_len\": 0}\n";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, empty, strlen(empty)), 0);
    CU_ASSERT_EQUAL(run("sim %s --cost %s", path, cost, out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "line 2: a request with no input and no output tokens"));
    tu_tmp_path("hin-empty.csv", path, sizeof path);
    const char *csv = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,0,0\n";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, csv, strlen(csv)), 0);
    CU_ASSERT_EQUAL(run("trace stats %s", path, "", out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "line 3: a request with no input and no output tokens"));
}

static void test_zero_is_not_the_default(void)
{
    CU_ASSERT_EQUAL(run("sim %s --cost %s --max-total-tokens 0", trace, cost, out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--max-total-tokens 0"));
    CU_ASSERT_EQUAL(run("sim %s --cost %s --max-concurrency 0", trace, cost, out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--max-concurrency must be"));
    CU_ASSERT_EQUAL(run("replay %s --model tiny-llama --max-concurrency 0 -o build/tmp/hin-r.rhtr", trace, "", out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--max-concurrency must be at least 1"));
    /* Requests too large for the pool: refused alone, the first named once. */
    CU_ASSERT_EQUAL(run("sim %s --cost %s --max-total-tokens 48", trace, cost, out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "exceeds the KV pool"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "24 requests refused"));
    const char *first = strstr(out, "request ");
    CU_ASSERT(first && !strstr(first + 8, "request "));
    if (first && strstr(first + 8, "request ")) printf("\n    %s\n", out);
}

/* The CUDA backend is a library loaded when --backend cuda asks for it, so
 * every other command starts without mapping cuBLAS, and a machine without
 * CUDA runs the same binary. */
static void test_cuda_loaded_only_when_asked(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ldd %s", tu_bin());
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NULL(strstr(out, "libcublas"));
    CU_ASSERT_PTR_NULL(strstr(out, "libcudart"));
    CU_ASSERT_PTR_NULL(strstr(out, "libnccl"));

    const char *replay = "replay %s --backend cuda --model tiny-llama -o build/tmp/hin-cuda.rhtr";
    snprintf(cmd, sizeof cmd, "REHEARSE_CUDA_LIB=/nonexistent/librehearse_cuda.so %s", tu_bin());
    char line[1536];
    snprintf(line, sizeof line, "%s %s", cmd, replay);
    snprintf(cmd, sizeof cmd, line, trace);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "/nonexistent/librehearse_cuda.so"));
    /* A library that is not the backend is refused, not called. */
    snprintf(line, sizeof line, "REHEARSE_CUDA_LIB=%s %s %s", "build/tmp/hin-cost.json", tu_bin(), replay);
    snprintf(cmd, sizeof cmd, line, trace);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "hin-cost.json"));
    /* A checkout's ./rehearse finds the one built beside it in build/. */
    if (!tu_file_exists("build/librehearse_cuda.so")) {
        printf("\n    skipped the build/ lookup: this build has no CUDA backend (no nvcc)\n");
        return;
    }
    CU_ASSERT_NOT_EQUAL(run(replay, trace, "", out), 0);   /* no GPU here, or it ran */
    CU_ASSERT_PTR_NULL(strstr(out, "has no CUDA backend"));
    if (strstr(out, "has no CUDA backend")) printf("\n    %s\n", out);
}

static void test_setup_failed(void)
{
    CU_FAIL("could not write the suite's trace and cost file under build/tmp");
}

void register_test_hardening_inputs(void)
{
    CU_pSuite s = CU_add_suite("hardening_inputs", NULL, NULL);
    if (setup() < 0) {
        CU_add_test(s, "setup", test_setup_failed);
        return;
    }
    CU_add_test(s, "piped, FIFO and directory inputs", test_piped_traces_read_as_files);
    CU_add_test(s, "negative arrivals and empty requests refused with their line", test_refused_with_their_line);
    CU_add_test(s, "0 given is refused, not read as the default", test_zero_is_not_the_default);
    CU_add_test(s, "the CUDA backend loaded only when asked, its absence explained", test_cuda_loaded_only_when_asked);
}
