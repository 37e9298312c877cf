/* test_router_util.h — shared by the test_router_*.c suites: emulated
 * `rehearse serve --backend sim` workers, `rehearse router` in front of
 * any worker URLs (each a child process), and one per-worker sample of the
 * router's /metrics. */
#ifndef RH_TEST_ROUTER_UTIL_H
#define RH_TEST_ROUTER_UTIL_H

#include <stdio.h>
#include <string.h>

#include "test_serve_util.h"
#include "testutil.h"

/* A linear cost file under build/tmp whose every step takes base_s. */
static inline int ru_cost_file(const char *name, double base_s, char *path, size_t cap)
{
    tu_tmp_path(name, path, cap);
    char json[256];
    int n = snprintf(json, sizeof json,
                     "{\"kind\": \"linear\", \"version\": 1, \"base_s\": %g, \"per_prefill_token_s\": 0, "
                     "\"per_decode_seq_s\": 0, \"per_context_token_s\": 0, \"per_attention_s\": 0}\n",
                     base_s);
    return tu_write_file(path, json, (size_t)n);
}

/* n emulated workers (--backend sim, the cost file given). */
static inline int ru_start_workers(tu_server *w, int n, const char *cost, const char *tag)
{
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "router-%s-w%d", tag, i);
        char *args[] = {"--backend", "sim", "--cost", (char *)cost, "--model", "tiny-llama", "--port", "0", NULL};
        if (tu_server_start(&w[i], name, args) < 0) {
            printf("\n    worker %d did not start\n", i);
            for (int j = 0; j < i; j++) tu_server_stop(&w[j]);
            return -1;
        }
    }
    return 0;
}

static inline void ru_stop_workers(tu_server *w, int n)
{
    for (int i = 0; i < n; i++)
        if (w[i].pid > 0) tu_server_stop(&w[i]);
}

/* `rehearse router --worker URL0 ... --port 0 EXTRA...` (extra ends with
 * NULL, or is NULL); says why on stdout when it does not start. */
static inline int ru_start_router(tu_server *r, const char *const *urls, int n, const char *tag, char *const extra[])
{
    char *args[64];
    int k = 0;
    for (int i = 0; i < n && k < 40; i++) {
        args[k++] = "--worker";
        args[k++] = (char *)urls[i];
    }
    args[k++] = "--port";
    args[k++] = "0";
    for (int i = 0; extra && extra[i] && k < 62; i++) args[k++] = extra[i];
    args[k] = NULL;
    char name[64];
    snprintf(name, sizeof name, "router-%s", tag);
    int rc = tu_command_start(r, name, "router", args);
    if (rc < 0) {
        char cmd[512], out[4096];
        snprintf(cmd, sizeof cmd, "cat %s", r->err);
        tu_run(cmd, out, sizeof out);
        printf("\n    the router did not start: %s\n", out);
    }
    return rc;
}

/* A per-worker sample of the router's /metrics (-1: absent). */
static inline double ru_worker_metric(const char *router_url, const char *name, const char *worker)
{
    ts_resp m = ts_request_at(router_url, "GET", "/metrics", NULL, NULL);
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s{worker=\"%s\"}", name, worker);
    double v = m.status == 200 ? ts_metric(m.body, prefix) : -1;
    ts_resp_free(&m);
    return v;
}

#endif
