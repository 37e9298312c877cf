/* probe.c — `rehearse probe --base-url URL -o PROBE.rhtr`: the measurement
 * campaign of client/probe.h against any OpenAI-compatible server, every
 * token's time recorded client-side, for `rehearse fit`. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "client/probe.h"
#include "util/args.h"

static const char *help =
    "usage: rehearse probe --base-url URL -o PROBE.rhtr [flags]\n\n"
    "Measures a running OpenAI-compatible server (rehearse serve, SGLang, vLLM) with\n"
    "a designed campaign, recording every token's time client-side: lone prompts of\n"
    "log-spaced lengths (TTFT against length), decodes at concurrency 1 to N (ITL\n"
    "against batch), decodes at long contexts, a prefill arriving while decodes run,\n"
    "a repeated prompt (prefix hits) and a closed-loop burst. The plan is printed\n"
    "first; the campaign stays inside --budget-s. The KV pool and the scheduler knobs\n"
    "the server reports (/get_server_info: SGLang and rehearse serve) go in the trace's\n"
    "header, where fit and validate read them. Then:\n"
    "  rehearse fit PROBE.rhtr --model M --gpu G --tp N -o COST\n\n"
    "  --base-url URL        the server (or --host H --port P: http://127.0.0.1:30000)\n"
    "  --model NAME          the served model's name (default: the server's first)\n"
    "  --api-key KEY         sent as Authorization: Bearer KEY (default $OPENAI_API_KEY)\n"
    "  --budget-s S          wall seconds for the campaign (600)\n"
    "  --max-context N       longest prompt + output (default: the server's max_model_len, else 8192)\n"
    "  --max-concurrency N   the largest batch and the burst's clients (32)\n"
    "  --vocab-size N        prompt ids from [0, N) (256, within every model's vocabulary)\n"
    "  --seed N              seeds the prompts and the burst's lengths (1)\n"
    "  -o PROBE.rhtr         the client-side trace to write\n";

static void on_signal(int sig)
{
    (void)sig;
    bench_stop();
}

static int fail(const char *msg)
{
    fprintf(stderr, "rehearse probe: %s\n", msg);
    return 1;
}

int probe_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(help, stdout);
        return 0;
    }
    probe_opts o;
    probe_opts_default(&o);
    const char *base = NULL, *host = "127.0.0.1", *model = NULL, *key = NULL, *out = NULL, *name;
    uint32_t port = 30000, max_context = 0;
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    while ((name = rh_args_next(&a))) {
        const char *v = rh_args_value(&a, &e);
        if (!v) return fail(e.msg);
        unsigned long long u;
        int rc = 0;
        if (!strcmp(name, "base-url")) base = v;
        else if (!strcmp(name, "host")) host = v;
        else if (!strcmp(name, "port")) rc = rh_parse_u32(v, "--port", 1, 65535, &port, &e);
        else if (!strcmp(name, "model")) model = v;
        else if (!strcmp(name, "api-key")) key = v;
        else if (!strcmp(name, "o") || !strcmp(name, "output")) out = v;
        else if (!strcmp(name, "budget-s")) {
            rc = rh_parse_double(v, "--budget-s", &o.budget_s, &e);
            if (rc == 0 && !(o.budget_s > 0)) rc = rh_fail(&e, "--budget-s must be > 0 (got %s)", v);
        } else if (!strcmp(name, "max-context")) rc = rh_parse_u32(v, "--max-context", 128, 1u << 24, &max_context, &e);
        else if (!strcmp(name, "max-concurrency")) rc = rh_parse_u32(v, "--max-concurrency", 1, 4096, &o.max_concurrency, &e);
        else if (!strcmp(name, "vocab-size")) rc = rh_parse_u32(v, "--vocab-size", 2, 1u << 24, &o.vocab, &e);
        else if (!strcmp(name, "seed")) {
            rc = rh_parse_u64(v, "--seed", &u, &e);
            o.seed = u;
        } else rc = rh_fail(&e, "unknown flag --%s (see rehearse probe --help)", name);
        if (rc < 0) return fail(e.msg);
    }
    if (a.npos) return fail("probe takes no positional arguments (see --help)");
    if (!out) return fail("no output given (-o PROBE.rhtr)");
    char url[300];
    if (!base) {
        snprintf(url, sizeof url, "http://%s:%u", host, port);
        base = url;
    }
    if (!key) key = getenv("OPENAI_API_KEY");
    bench_config c = {.base_url = base, .endpoint = "/v1/completions", .api = BENCH_API_COMPLETIONS,
                      .model = model, .api_key = key, .stream = 1, .request_timeout = 600};
    char *found = NULL;
    bench_server_facts served;
    if (bench_server_info(&c, model ? NULL : &found, &served, &e) < 0) return fail(e.msg);
    if (found) c.model = found;
    o.max_context = max_context ? max_context : served.max_model_len ? served.max_model_len : 8192;
    /* One request must fit the server's pool, or the server refuses it:
     * the plan stays inside what the server says it holds. */
    bool by_pool = !max_context && served.pool_tokens && served.pool_tokens < o.max_context;
    if (by_pool) o.max_context = (uint32_t)served.pool_tokens;
    probe_plan p;
    if (probe_plan_make(&o, &p, &e) < 0) {
        free(found);
        return fail(e.msg);
    }
    printf("probing %s (model %s, context %u%s) for at most %g s\n", base, c.model ? c.model : "?", o.max_context,
           by_pool ? ": the KV pool the server reports" : max_context || !served.max_model_len ? ""
                                                        : ": the server's max_model_len", o.budget_s);
    probe_plan_print(stdout, &p);
    fflush(stdout);
    bench_result *r = calloc(p.d.n, sizeof *r);
    if (!r) {
        probe_plan_free(&p);
        free(found);
        return fail("out of memory");
    }
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    size_t skipped = 0;
    int rc = probe_execute(&c, &p, o.budget_s, r, &skipped, &e);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    /* failed: by the server or the connection; cut: stopped by the budget
     * (or a signal) in flight, an abort that says nothing of the server */
    size_t ok = 0, failed = 0, cut = 0;
    for (size_t i = 0; i < p.d.n; i++)
        if (r[i].sent) {
            if (!r[i].error) ok++;
            else if (r[i].finish == TR_FINISH_ERROR) failed++;
            else cut++;
        }
    if (rc == 0) {
        tr_header h;
        tr_header_init(&h);
        char buf[64];
        int bad = tr_header_set_model(&h, c.model ? c.model : "") < 0 || tr_header_set(&h, "source", "rehearse probe") < 0 ||
                  tr_header_set(&h, "base_url", base) < 0;
        snprintf(buf, sizeof buf, "%u", o.max_context);
        bad |= tr_header_set(&h, "probe.max_context", buf) < 0;
        if (served.pool_tokens) {   /* the server's pool, the knob rehearse fit and sim read from a header */
            snprintf(buf, sizeof buf, "%llu", (unsigned long long)served.pool_tokens);
            bad |= tr_header_set(&h, "max-total-tokens", buf) < 0;
        }
        /* and the knobs it schedules with: fit and validate simulate with them
         * (the simulator's own defaults for a cost file with no GPU, a 2048
         * chunk, are not a server's: fitted against a server chunking at
         * 8192, 16 prompts of 4k tokens arriving together came back with
         * every TPOT 1.5-2.5x the measured one) */
        for (int k = 0; k < served.n_knobs; k++) bad |= tr_header_set(&h, served.knob[k][0], served.knob[k][1]) < 0;
        for (size_t k = 0; k < p.n_runs; k++) {
            char key_[32], val[64];
            snprintf(key_, sizeof key_, "probe.run.%zu", k + 1);
            snprintf(val, sizeof val, "%s %zu %zu %u", p.runs[k].name, p.runs[k].start, p.runs[k].n,
                     p.runs[k].concurrency);
            bad |= tr_header_set(&h, key_, val) < 0;
        }
        rc = bad ? rh_fail(&e, "out of memory") : bench_write_trace(out, &p.d, r, &h, &e);
        tr_header_free(&h);
    }
    if (rc == 0)
        printf("probe: %zu requests measured, %zu failed, %zu cut by the budget, %zu runs skipped for it; wrote %s\n",
               ok, failed, cut, skipped, out);
    if (rc == 0 && ok == 0) rc = rh_fail(&e, "no request completed against %s", base);
    /* A failed request measured nothing, and a fit of the rest is fitted to
     * what the server chose to serve: said, with the first reason, and the
     * exit status says it too. */
    const char *why = NULL;
    for (size_t i = 0; i < p.d.n && !why; i++)
        if (r[i].sent && r[i].error && r[i].finish == TR_FINISH_ERROR) why = r[i].error;
    if (rc == 0 && failed)
        rc = rh_fail(&e, "%zu of %zu requests failed (the first: %.300s); %s holds them as failed, and rehearse fit "
                         "refuses it unless --allow-failed", failed, ok + failed + cut, why ? why : "?", out);
    bench_results_free(r, p.d.n);
    probe_plan_free(&p);
    free(found);
    return rc < 0 ? fail(e.msg) : 0;
}
