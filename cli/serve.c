/* serve.c — `rehearse serve --model M [flags] [scheduler knobs]`.
 *
 * SIGINT or SIGTERM: stop admitting (503), let what runs finish for up to
 * --shutdown-timeout seconds, abort the rest, close the recording; a second
 * signal aborts at once. Signals are blocked in every thread and taken here
 * with sigtimedwait, so no handler ever runs inside the server's threads. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/serve_sim.h"
#include "cli/serving.h"
#include "engine/serve/server.h"
#include "engine/speculative/vllm_config.h"
#include "util/args.h"
#include "util/progress.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rehearse serve --model MODEL [flags] [scheduler knobs]\n\n"
            "Serves MODEL with the real engine behind an OpenAI-compatible HTTP API:\n"
            "POST /v1/completions and /v1/chat/completions (streaming as server-sent events),\n"
            "GET /v1/models, /health and /metrics (Prometheus, vLLM's metric names). With\n"
            "--record-trace every request and step is recorded live; a killed server leaves\n"
            "a trace readable up to its last second. SIGINT/SIGTERM stop admitting, let\n"
            "running requests finish (--shutdown-timeout), then close the recording.\n"
            "Chat messages are rendered by the tokenizer's Jinja chat_template (its\n"
            "tokenizer_config.json, or a request's own chat_template) as apply_chat_template\n"
            "renders them; a tokenizer without one makes them \"ROLE: CONTENT\" lines after\n"
            "its BOS, ending with \"assistant:\". Text prompts get the BOS.\n\n"
            "  --tokenizer PATH            tokenizer.json or its directory (default: MODEL's, else bytes)\n"
            "  --served-model-name NAME    the model's name in the API (default: the model's)\n"
            "  --host ADDR                 IPv4 address to bind (127.0.0.1; 0.0.0.0 for every interface)\n"
            "  --port N                    port (30000; 0: any free port, printed at start)\n"
            "  --api-key KEY               require \"Authorization: Bearer KEY\" on /v1/ (401 otherwise)\n"
            "  --record-trace FILE         record every request and step to FILE as they happen\n"
            "  --max-queued-requests N     requests waiting for admission beyond N get 429 (0: no limit)\n"
            "  --max-connections N         open connections beyond N get 503 (4096)\n"
            "  --max-connections-per-client N  one client's (IP address's) connections beyond N get 503,\n"
            "                              a few past N are closed at accept (half of --max-connections)\n"
            "  --header-timeout S          a request's whole header must arrive within S seconds of the\n"
            "                              connection opening (of the last answer's end plus --idle-timeout\n"
            "                              on a kept-alive one), however it trickles in, else the socket is\n"
            "                              closed unanswered, as nginx's client_header_timeout (10)\n"
            "  --idle-timeout S            a connection with no request in progress for S seconds is\n"
            "                              closed; a request waiting for tokens never times out (30)\n"
            "  --max-body-bytes N          larger request bodies get 413 (33554432)\n"
            "  --http-threads N            HTTP and tokenizer threads (4)\n"
            "  --disable-overlap-schedule  prepare each step after the previous one computed, not during it\n"
            "  --shutdown-timeout S        seconds running requests get to finish at shutdown (30)\n"
            "  --stream-interval N         a stream's tokens go out N at a time, the first at once (1; SGLang's)\n"
            "  --backend sim --cost COST   no weights: each step takes the time COST gives its batch (tokens\n"
            "                              are made up); the KV pool is what COST's GPU holds unless\n"
            "                              --max-total-tokens says. An emulated server with known physics\n"
            "  --noise X                   with --backend sim: each step times exp(X z), z standard normal,\n"
            "                              seeded by --seed (0)\n"
            "  SGLang's deployment flags --ep-size, --dp-size, --enable-dp-attention, --moe-a2a-backend,\n"
            "  --deepep-mode, --enable-two-batch-overlap, --enable-eplb, --expert-imbalance,\n"
            "  --cuda-graph-max-bs, --disable-cuda-graph, --moe-dense-tp-size, --ep-num-redundant-experts\n"
            "                              price the steps of --backend sim as rehearse sim does; the\n"
            "                              engine itself runs without them (tensor-parallel attention, no\n"
            "                              CUDA graphs), and says so at start\n"
            "the engine:\n%s"
            "speculative decoding:\n%s"
            "scheduler knobs (--seed also seeds requests that give no seed):\n%s",
            engine_flags_help(), spec_config_help(), core_config_help());
}

static int bad(const char *msg)
{
    fprintf(stderr, "rehearse serve: %s\n", msg);
    return 1;
}

/* --backend sim and its flags. */
typedef struct sim_flags {
    bool on;
    const char *cost;
    double noise;
    sim_config serving;      /* the serving flags (--ep-size, --enable-dp-attention, ...) that price the steps */
    bool serving_given;
    char serving_names[256]; /* the serving flags given, for the notice when the engine ignores them */
} sim_flags;

/* The simulator's serving flags, which a --backend sim server prices its
 * steps with (sim.h's SIM_SERVE_*). */
static bool is_serving_flag(const char *name)
{
    static const char *const names[] = {"ep-size", "expert-parallel-size", "enable-dp-attention", "dp-size",
                                        "moe-a2a-backend", "deepep-mode", "enable-two-batch-overlap",
                                        "expert-imbalance", "enable-eplb", "cuda-graph-max-bs",
                                        "disable-cuda-graph", "moe-dense-tp-size", "ep-num-redundant-experts"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i])) return true;
    return false;
}

/* The server's own flags; 1 handled, 0 not one of them, -1 bad value. */
static int own_flag(server_config *c, const char *name, rh_args *a, double *grace, sim_flags *sim, rh_err *e)
{
    if (!strcmp(name, "backend") || !strcmp(name, "cost") || !strcmp(name, "noise")) {
        const char *v = rh_args_value(a, e);
        if (!v) return -1;
        if (!strcmp(name, "cost")) sim->cost = v;
        else if (!strcmp(name, "noise")) {
            if (rh_parse_double(v, "--noise", &sim->noise, e) < 0) return -1;
            if (!(sim->noise >= 0 && sim->noise <= 1)) return rh_fail(e, "--noise must be in [0, 1] (got %s)", v);
        } else if (!strcmp(v, "sim")) sim->on = true;
        else return engine_flag_set(&c->engine, name, v, e);
        return 1;
    }
    if (!strcmp(name, "speculative-config")) {   /* vLLM's */
        static spec_vllm given;   /* the draft model's name lives as long as the server */
        const char *v = rh_args_value(a, e);
        if (!v || spec_vllm_parse(v, &given, e) < 0) return -1;
        return spec_vllm_apply(&given, &c->engine.spec, &c->engine.core, e) < 0 ? -1 : 1;
    }
    if (!strcmp(name, "disable-overlap-schedule")) {
        if (rh_args_no_value(a, e) < 0) return -1;
        c->disable_overlap = true;
        return sim_config_set(&sim->serving, name, "", e) < 0 ? -1 : 1;
    }
    if (is_serving_flag(name)) {
        int takes = sim_config_takes_value(name);
        const char *v = takes ? rh_args_value(a, e) : (a->inline_val ? rh_args_value(a, e) : "");
        if (!v || sim_config_set(&sim->serving, name, v, e) < 0) return -1;
        sim->serving_given = true;
        size_t n = strlen(sim->serving_names);
        if (!strstr(sim->serving_names, name) && n + strlen(name) + 5 < sizeof sim->serving_names)
            snprintf(sim->serving_names + n, sizeof sim->serving_names - n, "%s--%s", n ? ", " : "", name);
        return 1;
    }
    int own = engine_flag_takes_value(name);
    if (own) {
        const char *v = rh_args_value(a, e);
        return v ? engine_flag_set(&c->engine, name, v, e) : -1;
    }
    static const char *valued[] = {"tokenizer", "served-model-name", "host", "port", "api-key", "record-trace",
                                   "max-queued-requests", "max-connections", "max-connections-per-client",
                                   "header-timeout", "idle-timeout", "max-body-bytes", "http-threads",
                                   "shutdown-timeout", "stream-interval"};
    size_t i = 0, n = sizeof valued / sizeof valued[0];
    while (i < n && strcmp(name, valued[i])) i++;
    if (i == n) return 0;
    const char *v = rh_args_value(a, e);
    if (!v) return -1;
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", name);
    unsigned long long u;
    uint32_t u32 = 0;
    double d;
    if (!strcmp(name, "tokenizer")) c->tokenizer = v;
    else if (!strcmp(name, "served-model-name")) c->served_model_name = v;
    else if (!strcmp(name, "host")) c->host = v;
    else if (!strcmp(name, "api-key")) c->api_key = v;
    else if (!strcmp(name, "record-trace")) c->record_path = v;
    else if (!strcmp(name, "port")) {
        if (rh_parse_u32(v, flag, 0, 65535, &u32, e) < 0) return -1;
        c->port = (uint16_t)u32;
    } else if (!strcmp(name, "max-queued-requests")) {
        if (rh_parse_u32(v, flag, 0, UINT32_MAX, &c->max_queued_requests, e) < 0) return -1;
    } else if (!strcmp(name, "max-connections")) {
        if (rh_parse_u32(v, flag, 1, 1000000, &c->max_connections, e) < 0) return -1;
    } else if (!strcmp(name, "max-connections-per-client")) {
        if (rh_parse_u32(v, flag, 1, 1000000, &c->max_connections_per_client, e) < 0) return -1;
    } else if (!strcmp(name, "header-timeout")) {
        if (rh_parse_u32(v, flag, 1, 3600, &c->header_timeout_s, e) < 0) return -1;
    } else if (!strcmp(name, "idle-timeout")) {
        if (rh_parse_u32(v, flag, 1, 86400, &c->idle_timeout_s, e) < 0) return -1;
    } else if (!strcmp(name, "stream-interval")) {
        if (rh_parse_u32(v, flag, 1, 1u << 20, &c->stream_interval, e) < 0) return -1;
    } else if (!strcmp(name, "http-threads")) {
        if (rh_parse_u32(v, flag, 0, 256, &c->http_threads, e) < 0) return -1;
    } else if (!strcmp(name, "max-body-bytes")) {
        if (rh_parse_u64(v, flag, &u, e) < 0) return -1;
        c->max_body_bytes = (size_t)u;
    } else {
        if (rh_parse_double(v, flag, &d, e) < 0) return -1;
        if (!(d >= 0)) return rh_fail(e, "--shutdown-timeout must be >= 0 seconds (got %s)", v);
        *grace = d;
    }
    return 1;
}

static uint64_t live(void *s) { return server_live_requests(s); }
static void drain(void *s) { server_drain(s); }

static int run(server_config *cfg, double grace)
{
    sigset_t set;
    serving_prepare(&set);

    rh_err e = {{0}};
    server *s = server_start(cfg, &e);
    if (!s) return bad(e.msg);
    fprintf(stderr, "rehearse serve: serving '%s' (tokenizer: %s, overlap scheduling %s%s%s)\n", server_model_name(s),
            server_tokenizer_kind(s), cfg->disable_overlap ? "off" : "on", cfg->record_path ? ", recording to " : "",
            cfg->record_path ? cfg->record_path : "");
    printf("listening on %s\n", server_url(s));
    fflush(stdout);

    serving_wait("serve", &set, grace, &(serving_ops){s, live, drain}, "aborting");
    if (server_stop(s, &e) < 0) return bad(e.msg);
    fprintf(stderr, "rehearse serve: stopped%s%s\n", cfg->record_path ? "; recorded " : "",
            cfg->record_path ? cfg->record_path : "");
    return 0;
}

/* A node other than 0 serves no HTTP: its ranks follow node 0's batches. */
static int follow(const engine_config *g)
{
    const tp_config *t = &g->tp;
    rh_err e = {{0}};
    if (tp_config_check(t, g->kernels, &e) < 0) return bad(e.msg);
    uint32_t per = tp_ranks_per_node(t);
    fprintf(stderr, "rehearse serve: node %u of %u: ranks %u..%u follow node 0 (%s)\n", t->node_rank, t->nnodes,
            t->node_rank * per, t->node_rank * per + per - 1, t->dist_init_addr);
    if (engine_follow(g, &e) < 0) return bad(e.msg);
    fprintf(stderr, "rehearse serve: node 0 stopped; node %u done\n", t->node_rank);
    return 0;
}

int serve_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    server_config cfg;
    server_config_default(&cfg);
    double grace = 30;
    sim_flags sim = {0};
    sim_config_default(&sim.serving);
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    const char *name;
    while ((name = rh_args_next(&a))) {
        int rc = own_flag(&cfg, name, &a, &grace, &sim, &e);
        if (rc < 0) return bad(e.msg);
        if (rc > 0) continue;
        if (spec_config_is_knob(name)) {
            const char *v = rh_args_value(&a, &e);
            if (!v || spec_config_set(&cfg.engine.spec, name, v, &e) < 0) return bad(e.msg);
            continue;
        }
        int takes = core_config_takes_value(name);
        if (takes < 0) {
            fprintf(stderr, "rehearse serve: unknown flag --%s (see rehearse serve --help)\n", name);
            return 1;
        }
        const char *v = takes ? rh_args_value(&a, &e) : (a.inline_val ? rh_args_value(&a, &e) : "true");
        if (!v || core_config_set(&cfg.engine.core, name, v, &e) < 0) return bad(e.msg);
    }
    if (a.npos) {
        snprintf(e.msg, sizeof e.msg, "serve takes no positional arguments (got '%s'); see rehearse serve --help", a.pos[0]);
        return bad(e.msg);
    }
    if (!cfg.engine.model && !sim.on) return bad("serve needs --model MODEL (a preset name, config.json or directory)");
    if ((sim.cost || sim.noise > 0) && !sim.on) return bad("--cost and --noise go with --backend sim");
    if (sim.serving_given && !sim.on)   /* a deployment's flags, accepted, and never silently */
        fprintf(stderr, "rehearse serve: %s: no effect on this engine (tensor-parallel attention, no CUDA graphs); "
                        "they price the steps of --backend sim\n", sim.serving_names);
    if (sim.on && !sim.cost) return bad("--backend sim needs --cost COST (the cost model that prices each step)");
    if (core_config_validate(&cfg.engine.core, &e) < 0) return bad(e.msg);
    cfg.seed = cfg.engine.core.seed;
    if (cfg.engine.tp.node_rank) return follow(&cfg.engine);
    serve_sim *priced = NULL;
    if (sim.on && !(priced = serve_sim_new(sim.cost, sim.noise, cfg.seed, &sim.serving, &cfg.engine, &e)))
        return bad(e.msg);
    int rc = run(&cfg, grace);
    serve_sim_free(priced);
    return rc;
}
