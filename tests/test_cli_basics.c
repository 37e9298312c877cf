/* test_cli_basics.c — what a user types first: `rehearse --version`, and a
 * progress bar that shows in a pipe when asked (--progress) and stays out
 * of a log when not. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static void test_version(void)
{
    char out[1024], cmd[512];
    snprintf(cmd, sizeof cmd, "%s --version", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT(strncmp(out, "rehearse 0.", 11) == 0);
    snprintf(cmd, sizeof cmd, "%s --help", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--version"));
}

static void test_progress_in_a_pipe(void)
{
    char trace[256], cost[256], out[8192], cmd[1024];
    tu_tmp_path("cli-basics.rhtr", trace, sizeof trace);
    tu_tmp_path("cli-basics.json", cost, sizeof cost);
    const char *lin = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5, "
                      "\"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}\n";
    CU_ASSERT_FATAL(tu_write_file(cost, lin, strlen(lin)) == 0);
    snprintf(cmd, sizeof cmd, "%s trace synth --requests 200 -o %s", tu_bin(), trace);
    CU_ASSERT_FATAL(tu_run(cmd, out, sizeof out) == 0);
    /* stdout to /dev/null, stderr into the pipe tu_run reads */
    snprintf(cmd, sizeof cmd, "%s sim %s --cost %s --progress 2>&1 >/dev/null", tu_bin(), trace, cost);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "sim: 200/200 (100%)"));   /* whole lines, no carriage returns */
    CU_ASSERT_PTR_NULL(strchr(out, '\r'));
    snprintf(cmd, sizeof cmd, "%s sim %s --cost %s 2>&1 >/dev/null", tu_bin(), trace, cost);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NULL(strstr(out, "sim:"));   /* a short run in a pipe: no heartbeat */
}

/* A trace of unknown format read by a command without --format: the
 * message names the command that takes it, never a flag this one lacks. */
static void test_format_hint(void)
{
    char path[256], cmd[1024], out[4096];
    tu_tmp_path("unknown_format.csv", path, sizeof path);
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs("a,b,c\n1,2,3\n", f);
    fclose(f);
    static const char *const cmds[] = {"trace stats", "trace slice -o /dev/null",
                                       "bench --base-url http://127.0.0.1:1 --dataset trace"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        snprintf(cmd, sizeof cmd, "%s %s %s", tu_bin(), cmds[i], path);
        int rc = tu_run(cmd, out, sizeof out);
        int ok = rc != 0 && strstr(out, "rehearse trace import --format") && !strstr(out, "pass --format");
        if (!ok) printf("\n  %s: %d %s\n", cmds[i], rc, out);
        CU_ASSERT(ok);
    }
}

void register_test_cli_basics(void)
{
    CU_pSuite s = CU_add_suite("command line basics", NULL, NULL);
    CU_add_test(s, "--version", test_version);
    CU_add_test(s, "--progress draws in a pipe; a short run without it stays quiet", test_progress_in_a_pipe);
    CU_add_test(s, "an unknown trace format: the hint names trace import --format", test_format_hint);
}
