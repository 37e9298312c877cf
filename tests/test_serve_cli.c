/* test_serve_cli.c — `rehearse serve` as a process: flags and their
 * refusals; SIGTERM lets a running request finish and closes the recording
 * cleanly; SIGKILL leaves a recording readable up to its last second. */
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_serve_util.h"
#include "testutil.h"

extern char **environ;

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void test_flags(void)
{
    char cmd[1024], out[16384];
    snprintf(cmd, sizeof cmd, "%s serve --help", tu_bin());
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--disable-overlap-schedule"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--chunked-prefill-size"));   /* every core knob */
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"", "needs --model"},
        {"--model tiny-llama --bogus", "unknown flag --bogus"},
        {"--model no-such-model --port 0", "no-such-model"},
        {"--model tiny-llama --port 70000", "--port"},
        {"--model tiny-llama --port 0 --host nothost", "not an IPv4 address"},
        {"--model tiny-llama --chunked-prefill-size x", "chunked-prefill-size"},
        {"--model tiny-llama --shutdown-timeout -1", "--shutdown-timeout"},
        {"--model tiny-llama --port 0 --max-total-tokens 16384 --record-trace /no/such/dir/t.rhtr", "/no/such/dir"},
        {"--model tiny-llama extra", "positional"},
        {"--model tiny-llama --backend tpu", "not cpu or cuda"},
        {"--model tiny-llama --tensor-parallel-size 0", "--tp-size"},
        {"--model tiny-llama --speculative-config '{\"method\": \"eagle\", \"num_speculative_tokens\": 2}'",
         "method eagle"},
        {"--model tiny-llama --stream-interval 0", "--stream-interval"},
        {"--model tiny-llama --speculative-eagle-topk 4", "drafts a chain"},
        {"--model tiny-llama --gpu-memory-utilization 1.5", "--mem-fraction-static"},
        /* SGLang's and vLLM's names taken: it stops only at the recording it cannot open */
        {"--model tiny-llama --stream-interval 4 --speculative-eagle-topk 1 --gpu-memory-utilization 0.5 --port 0 "
         "--record-trace /no/such/dir/t.rhtr", "/no/such/dir"},
    };
    /* what SGLang and vLLM users type: their names listed, deployment flags taken and said to change nothing here */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--tensor-parallel-size"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "also --max-num-seqs"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--speculative-config"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--enable-dp-attention"));
    snprintf(cmd, sizeof cmd, "%s serve --model tiny-llama --dp-size 2 --enable-dp-attention --cuda-graph-max-bs 8 "
             "--tensor-parallel-size 1 --max-num-seqs 8 --port 0 --max-total-tokens 16384 "
             "--record-trace /no/such/dir/t.rhtr", tu_bin());
    int taken = tu_run(cmd, out, sizeof out);   /* flags taken: it stops only at the recording it cannot open */
    CU_ASSERT_EQUAL(taken, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--dp-size, --enable-dp-attention, --cuda-graph-max-bs: no effect on this engine"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "/no/such/dir"));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s serve %s", tu_bin(), bad[i].args);
        int rc = tu_run(cmd, out, sizeof out);
        if (rc != 1 || !strstr(out, bad[i].says)) printf("\n    serve %s: exit %d, %s\n", bad[i].args, rc, out);
        CU_ASSERT_EQUAL(rc, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i].says));
    }
    /* --backend sim without --model: the model the cost file names, said at
     * start (the run stops at the recording it cannot open); a cost file
     * naming none is refused by its name */
    char roof[256], lin[256];
    tu_tmp_path("roof.json", roof, sizeof roof);
    tu_tmp_path("lin.json", lin, sizeof lin);
    const char *r = "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"llama-3-8b\", \"gpu\": \"h100-sxm\"}";
    const char *l = "{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.01, \"per_prefill_token_s\": 1e-5,"
                    " \"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 0, \"per_attention_s\": 0}";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(roof, r, strlen(r)), 0);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(lin, l, strlen(l)), 0);
    snprintf(cmd, sizeof cmd, "REHEARSE_PRESETS=sim/cost/presets %s serve --backend sim --cost %s --port 0 "
             "--record-trace /no/such/dir/t.rhtr", tu_bin(), roof);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--model llama-3-8b, the model"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "/no/such/dir"));
    snprintf(cmd, sizeof cmd, "%s serve --backend sim --cost %s --port 0", tu_bin(), lin);
    CU_ASSERT_EQUAL(tu_run(cmd, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "names no model"));
    unlink(roof);
    unlink(lin);
}

/* A server process; its URL read from the line it prints. */
typedef struct proc {
    pid_t pid;
    char url[128];
    char out[256], err[256];
} proc;

static int spawn_server(proc *p, const char *record)
{
    tu_tmp_path("serve-cli.out", p->out, sizeof p->out);
    tu_tmp_path("serve-cli.err", p->err, sizeof p->err);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, p->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, p->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *argv[] = {(char *)tu_bin(), "serve", "--model", "tiny-llama", "--port", "0", "--max-total-tokens", "16384",
                    "--record-trace", (char *)record, NULL};
    int rc = posix_spawn(&p->pid, tu_bin(), &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) return -1;
    for (int i = 0; i < 1000; i++) {   /* up to 10 s to load and listen */
        FILE *f = fopen(p->out, "r");
        char line[256] = "";
        if (f) {
            if (!fgets(line, sizeof line, f)) line[0] = '\0';
            fclose(f);
        }
        if (!strncmp(line, "listening on ", 13)) {
            snprintf(p->url, sizeof p->url, "%.*s", (int)strcspn(line + 13, "\n"), line + 13);
            return 0;
        }
        nap(0.01);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    return -1;
}

static int exit_status(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

typedef struct streamer {
    const char *url;
    ts_stream st;
} streamer;

static void *stream_one(void *arg)
{
    streamer *s = arg;
    s->st = ts_stream_at(s->url, "/v1/completions",
                         "{\"prompt\":[1,2,3],\"max_tokens\":150,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}",
                         0, NULL);
    return NULL;
}

static double running(const char *url)
{
    ts_resp r = ts_request_at(url, "GET", "/metrics", NULL, NULL);
    double v = ts_metric(r.body, "vllm:num_requests_running");
    ts_resp_free(&r);
    return v;
}

static void test_sigterm_finishes_and_closes(void)
{
    char rec[256];
    tu_tmp_path("serve-cli-term.rhtr", rec, sizeof rec);
    proc p;
    CU_ASSERT_FATAL(spawn_server(&p, rec) == 0);
    for (int i = 0; i < 3; i++) {
        ts_resp r = ts_request_at(p.url, "POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":5,\"ignore_eos\":true}", NULL);
        CU_ASSERT_EQUAL(r.status, 200);
        ts_resp_free(&r);
    }
    /* A stream in flight when the signal comes: it is let finish. */
    streamer s = {.url = p.url};
    pthread_t t;
    pthread_create(&t, NULL, stream_one, &s);
    for (int i = 0; i < 500 && running(p.url) < 1; i++) nap(0.005);
    kill(p.pid, SIGTERM);
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(exit_status(p.pid), 0);
    CU_ASSERT_EQUAL(s.st.status, 200);
    CU_ASSERT(s.st.done);
    json_t *last = json_array_get(s.st.events, json_array_size(s.st.events) - 1);
    json_t *f = json_object_get(json_array_get(json_object_get(last, "choices"), 0), "finish_reason");
    CU_ASSERT(json_is_string(f) && !strcmp(json_string_value(f), "length"));
    ts_stream_free(&s.st);

    /* Closed cleanly: not truncated, everything there. */
    rh_err e;
    tr_reader *rd = tr_reader_open(rec, &e);
    CU_ASSERT_FATAL(rd != NULL);
    tr_record r;
    int n_req = 0, n_step = 0, rc;
    while ((rc = tr_reader_next(rd, &r, &e)) == 1) {
        if (r.kind == TR_REQUEST) {
            n_req++;
            CU_ASSERT_EQUAL(r.req.finish, TR_FINISH_LENGTH);
        } else {
            n_step++;
        }
    }
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(tr_reader_truncated(rd), 0);
    CU_ASSERT_EQUAL(n_req, 4);
    CU_ASSERT(n_step >= 150);
    tr_reader_close(rd);
}

static void test_sigkill_leaves_readable_trace(void)
{
    char rec[256];
    tu_tmp_path("serve-cli-kill.rhtr", rec, sizeof rec);
    proc p;
    CU_ASSERT_FATAL(spawn_server(&p, rec) == 0);
    for (int i = 0; i < 3; i++) {
        ts_resp r = ts_request_at(p.url, "POST", "/v1/completions", "{\"prompt\":[5,6,7],\"max_tokens\":4}", NULL);
        CU_ASSERT_EQUAL(r.status, 200);
        ts_resp_free(&r);
    }
    nap(1.3);   /* past the recorder's one-second flush */
    kill(p.pid, SIGKILL);
    CU_ASSERT_EQUAL(exit_status(p.pid), 128 + SIGKILL);
    rh_err e;
    tr_reader *rd = tr_reader_open(rec, &e);
    CU_ASSERT_FATAL(rd != NULL);
    tr_record r;
    int n_req = 0, rc;
    while ((rc = tr_reader_next(rd, &r, &e)) == 1) n_req += r.kind == TR_REQUEST;
    if (rc < 0) printf("\n    %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(tr_reader_truncated(rd), 1);
    CU_ASSERT_EQUAL(n_req, 3);
    tr_reader_close(rd);
}

void register_test_serve_cli(void)
{
    CU_pSuite s = CU_add_suite("serve_cli", NULL, NULL);
    CU_add_test(s, "flags, help and refusals", test_flags);
    CU_add_test(s, "SIGTERM: the running request finishes, the recording closes cleanly", test_sigterm_finishes_and_closes);
    CU_add_test(s, "SIGKILL: the recording is readable up to its last second", test_sigkill_leaves_readable_trace);
}
