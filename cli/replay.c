/* replay.c — `rehearse replay TRACE --model M [knobs] -o RECORDED`. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/replay.h"
#include "traces/import/import.h"
#include "traces/metrics/metrics.h"
#include "util/args.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rehearse replay TRACE --model MODEL -o RECORDED [flags] [scheduler knobs]\n\n"
            "Serves TRACE's requests with the real engine on the wall clock, at their arrival\n"
            "times (open loop) or through N clients (--max-concurrency), generating exactly\n"
            "each request's output length, and records every request (TTFT, token times,\n"
            "cached tokens) and every step (measured duration) in RECORDED. Prompt ids come\n"
            "from the trace's block hashes, so shared prefixes hit the prefix cache for real.\n\n"
            "  -o, --output FILE         the recording (required; written only if the run succeeds)\n"
            "  --max-concurrency N       closed loop with N clients (default: the trace's clients, else open loop)\n"
            "  --rate-scale X            send at arrival / X (1)\n"
            "  --prompt-seed S           seed of the prompt token ids (0)\n"
            "  --temperature T, --top-p P, --top-k K   sampling (greedy by default)\n"
            "  --json                    print the summary as JSON (vLLM field names)\n"
            "  --progress                draw the progress bar even when stderr is not a terminal\n"
            "the engine (a node other than 0 of --nnodes follows node 0's batches, then exits):\n%s"
            "speculative decoding (the recording's header gets the accepted-length histogram,\n"
            "key spec_accept_hist, which rehearse sim uses):\n%s"
            "scheduler knobs (--seed also seeds sampling):\n%s",
            engine_flags_help(), spec_config_help(), core_config_help());
}

static int bad(const char *msg)
{
    fprintf(stderr, "rehearse replay: %s\n", msg);
    return 1;
}

static void print_summary(const replay_config *c, const replay_result *res, int json)
{
    metrics_summary s;
    rh_err e = {{0}};
    int have = metrics_of_trace(c->out_path, NULL, &s, &e);   /* the recording read back as any consumer reads it */
    double tok_s = res->wall_s > 0 ? (double)(res->prompt_tokens - res->cached_tokens + res->output_tokens) / res->wall_s : 0;
    if (json) {
        json_t *o = have > 0 ? metrics_to_json(&s) : json_object();
        json_object_set_new(o, "replay_wall_s", json_real(res->wall_s));
        json_object_set_new(o, "replay_steps", json_integer((json_int_t)res->steps));
        json_object_set_new(o, "replay_refused", json_integer((json_int_t)res->refused));
        json_object_set_new(o, "replay_computed_tokens_per_s", json_real(tok_s));
        json_dumpf(o, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
        json_decref(o);
        return;
    }
    if (have > 0) metrics_print(stdout, &s, "Replay Result");
    else if (have < 0) fprintf(stderr, "rehearse replay: summary unavailable: %s\n", e.msg);
    printf("replayed %llu requests (%llu refused) in %.3f s: %llu steps, %llu prompt tokens (%llu cached), "
           "%llu output tokens, %.1f computed tokens/s\n",
           (unsigned long long)res->requests, (unsigned long long)res->refused, res->wall_s,
           (unsigned long long)res->steps, (unsigned long long)res->prompt_tokens,
           (unsigned long long)res->cached_tokens, (unsigned long long)res->output_tokens, tok_s);
    if (res->spec_proposed)
        printf("speculative: %llu drafts proposed, %llu accepted (%.1f%%)\n", (unsigned long long)res->spec_proposed,
               (unsigned long long)res->spec_accepted, 100.0 * (double)res->spec_accepted / (double)res->spec_proposed);
    printf("recorded %s\n", c->out_path);
}

int replay_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    replay_config cfg;
    replay_config_default(&cfg);
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    int json = 0, force_progress = 0, concurrency_given = 0;
    const char *name;
    while ((name = rh_args_next(&a))) {
        if (!strcmp(name, "json") || !strcmp(name, "progress")) {
            if (rh_args_no_value(&a, &e) < 0) return bad(e.msg);
            if (name[0] == 'j') json = 1;
            else force_progress = 1;
            continue;
        }
        if (replay_config_takes_value(name) > 0) {
            const char *v = rh_args_value(&a, &e);
            if (!v || replay_config_set(&cfg, name, v, &e) < 0) return bad(e.msg);
            if (!strcmp(name, "max-concurrency")) concurrency_given = 1;
            continue;
        }
        int takes = core_config_takes_value(name);
        if (takes < 0) {
            fprintf(stderr, "rehearse replay: unknown flag --%s (see rehearse replay --help)\n", name);
            return 1;
        }
        const char *v = takes ? rh_args_value(&a, &e) : (a.inline_val ? rh_args_value(&a, &e) : "true");
        if (!v || core_config_set(&cfg.engine.core, name, v, &e) < 0) return bad(e.msg);
    }
    if (a.npos != 1) {
        snprintf(e.msg, sizeof e.msg, "replay takes one TRACE file (got %d); see rehearse replay --help", a.npos);
        return bad(e.msg);
    }
    if (!cfg.engine.model) return bad("replay needs --model MODEL (a preset name, config.json or directory)");
    if (cfg.engine.tp.node_rank) {
        /* This node holds some ranks only; node 0 reads the trace and records. */
        if (core_config_validate(&cfg.engine.core, &e) < 0 || engine_follow(&cfg.engine, &e) < 0) return bad(e.msg);
        return 0;
    }
    if (!cfg.out_path) return bad("replay needs -o RECORDED (the file to record the run in)");
    if (core_config_validate(&cfg.engine.core, &e) < 0) return bad(e.msg);
    if (runner_sampling_check(&cfg.sampling, &e) < 0) return bad(e.msg);
    /* An unknown model is refused before the trace is read. */
    model_config mc;
    if (model_config_resolve(cfg.engine.model, &mc, &e)) return bad(e.msg);

    tr_trace t;
    if (tr_trace_load(a.pos[0], &t, &e) < 0) {
        tr_trace_free(&t);
        return bad(e.msg);
    }
    const char *clients = tr_header_get(&t.header, "clients");
    if (!concurrency_given && clients && atol(clients) > 0) cfg.max_concurrency = (uint32_t)atol(clients);
    cfg.trace_name = a.pos[0];
    cfg.progress = force_progress ? 2 : 1;
    replay_result res;
    int rc = replay_run(&cfg, &t, &res, &e);
    tr_trace_free(&t);
    if (rc < 0) return bad(e.msg);
    print_summary(&cfg, &res, json);
    return 0;
}
