/* router.c — `rehearse router --worker URL [--worker URL ...] [flags]`: the
 * OpenAI-compatible router of router/proxy.h in front of running workers.
 *
 * SIGINT or SIGTERM: stop admitting (503), let what runs finish for up to
 * --shutdown-timeout seconds, cut the rest off (streams get an error event),
 * close the recording; a second signal cuts off at once. Signals are
 * blocked in every thread and taken here with sigtimedwait, as `rehearse
 * serve` takes them. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/serving.h"
#include "router/proxy.h"
#include "util/args.h"
#include "util/progress.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rehearse router --worker URL [--worker URL ...] [flags]\n\n"
            "An OpenAI-compatible router in front of running workers (rehearse serve of any\n"
            "backend, SGLang, vLLM). POST /v1/completions, /v1/chat/completions and /generate go\n"
            "to the worker the router core picks (the policy the simulator's --router runs), the\n"
            "body unchanged; the worker's status, Content-Type and body come back unchanged,\n"
            "a stream event by event as it arrives. GET /v1/models (the first healthy worker's),\n"
            "/health (200 while a worker is healthy) and /metrics (per worker: requests,\n"
            "outstanding, errors, healthy, KV use). A worker that refuses, resets or times out\n"
            "is taken out of routing until its /health answers again; its requests in flight get\n"
            "an OpenAI error (502, or a final error event and [DONE] in a stream).\n\n"
            "  --worker URL                a worker's base URL (http://HOST:PORT); once per worker\n"
            "  --policy P                  round-robin, least-outstanding, least-kv, power-of-two,\n"
            "                              cache-aware or lua (round-robin)\n"
            "  --policy-script FILE        lua: a Lua file defining route(request, replicas) -> a worker's\n"
            "                              1-based index (engine/router/router.h), in the sandbox of the\n"
            "                              scheduler's Lua policies; implies --policy lua. An error makes\n"
            "                              that request least-outstanding's, counted in /metrics\n"
            "                              (rehearse_router_policy_errors_total), the first on stderr\n"
            "  --policy-max-instructions N Lua instructions one route() call may run (10000000)\n"
            "  --policy-max-memory BYTES   memory the script's Lua state may hold (67108864)\n"
            "  --policy-max-failures N     failures in a row after which route() is not called for a\n"
            "                              back-off of 64 picks, doubling while it keeps failing\n"
            "                              (least outstanding meanwhile; each trip on stderr and in\n"
            "                              rehearse_router_policy_breaker_trips_total); 0: never (16)\n"
            "  --policy-max-seconds S      wall time one route() call may take (1); picks are made one\n"
            "                              at a time, so a slow script delays every request's\n"
            "  --host ADDR                 IPv4 address to bind (127.0.0.1; 0.0.0.0 for every interface)\n"
            "  --port N                    port (30000; 0: any free port, printed at start)\n"
            "  --record-trace FILE         a client-side trace of every request routed, the worker in\n"
            "                              each record's flags (router/proxy.h), written live\n"
            "  --seed N                    seeds power-of-two's draws (0)\n"
            "  --cache-threshold X         cache-aware: the prompt share a worker's tree must match (0.5)\n"
            "  --balance-abs-threshold X   cache-aware: balanced while the most and least outstanding\n"
            "                              differ by at most X (32)\n"
            "  --balance-rel-threshold X   ... or the most is at most X times the least (1.0001)\n"
            "  --max-tree-blocks N         cache-aware: prefix blocks remembered per worker (65536)\n"
            "  --prefix-block N            bytes of text, or token ids, per prefix hash (64)\n"
            "  --health-interval S         seconds between health checks of every worker (1)\n"
            "  --health-timeout S          a worker's /health must answer within S seconds (2)\n"
            "  --connect-timeout S         seconds to connect to a worker (5)\n"
            "  --request-timeout S         a routed request's limit, end to end (0: none)\n"
            "  --max-body-bytes N          larger request bodies get 413 (33554432)\n"
            "  --max-response-bytes N      a worker's answer (not streamed), or one event of a stream,\n"
            "                              larger than N: the client gets 502 (a final error event in a\n"
            "                              stream) and the worker's connection is closed (8388608)\n"
            "  --max-connections N         open client connections beyond N are closed at accept (1024)\n"
            "  --max-connections-per-client N  one client's (IP address's) connections beyond N get 429,\n"
            "                              a few past N are closed at accept (half of --max-connections)\n"
            "  --header-timeout S          a request's whole header must arrive within S seconds of the\n"
            "                              connection opening (of the last answer's end plus --idle-timeout\n"
            "                              on a kept-alive one), however it trickles in, else the socket is\n"
            "                              closed unanswered, as nginx's client_header_timeout (10)\n"
            "  --idle-timeout S            a connection silent for S seconds while no request of it is\n"
            "                              forwarded (between requests, mid-body) is closed (30)\n"
            "  --shutdown-timeout S        seconds requests in flight get to finish at shutdown (30)\n");
}

static int bad(const char *msg)
{
    fprintf(stderr, "rehearse router: %s\n", msg);
    return 1;
}

static int seconds(const char *v, const char *flag, double lo_excl, double *out, rh_err *e)
{
    if (rh_parse_double(v, flag, out, e) < 0) return -1;
    if (!(*out > lo_excl) || *out > 1e6)
        return rh_fail(e, "%s must be %s seconds (got %s)", flag, lo_excl < 0 ? ">= 0" : "> 0", v);
    return 0;
}

/* One flag; 0, or -1 with e naming it. */
static int flag(rp_config *c, const char *name, const char *v, const char ***workers, uint32_t *nw, double *grace,
                rh_err *e)
{
    char fl[64];
    snprintf(fl, sizeof fl, "--%s", name);
    uint32_t u = 0;
    unsigned long long ull;
    double d;
    if (!strcmp(name, "worker")) {
        if (*nw >= RP_MAX_WORKERS) return rh_fail(e, "--worker: at most %u workers", RP_MAX_WORKERS);
        const char **w = realloc(*workers, (*nw + 1) * sizeof *w);
        if (!w) return rh_fail(e, "out of memory");
        w[(*nw)++] = v;
        *workers = w;
        char canon[512];
        return rp_worker_url(v, canon, sizeof canon, e);
    }
    if (!strcmp(name, "policy")) {
        int pol = router_policy_parse(v);
        if (pol < 0)
            return rh_fail(e, "--policy: '%s' is not round-robin, least-outstanding, least-kv, power-of-two, "
                              "cache-aware or lua", v);
        c->core.policy = (router_policy)pol;
    } else if (!strcmp(name, "policy-script")) {
        c->core.lua_script = v;
        c->core.policy = ROUTER_LUA;
    } else if (!strcmp(name, "policy-max-instructions")) {
        if (rh_parse_u64(v, fl, &ull, e) < 0) return -1;
        if (ull < 1000 || ull > (1ull << 50)) return rh_fail(e, "--policy-max-instructions must be 1000..2^50 (got %s)", v);
        c->core.lua_max_instructions = ull;
    } else if (!strcmp(name, "policy-max-memory")) {
        if (rh_parse_u64(v, fl, &ull, e) < 0) return -1;
        if (ull < (1u << 20) || ull > (1ull << 40))
            return rh_fail(e, "--policy-max-memory must be 1048576..1099511627776 bytes (got %s)", v);
        c->core.lua_max_memory = ull;
    } else if (!strcmp(name, "policy-max-failures")) {
        if (rh_parse_u32(v, fl, 0, UINT32_MAX, &u, e) < 0) return -1;
        c->core.lua_max_failures = u;
    } else if (!strcmp(name, "policy-max-seconds")) {
        if (rh_parse_double(v, fl, &d, e) < 0) return -1;
        if (!(d >= 0.001 && d <= 3600)) return rh_fail(e, "--policy-max-seconds must be 0.001..3600 (got %s)", v);
        c->core.lua_max_seconds = d;
    } else if (!strcmp(name, "host")) c->host = v;
    else if (!strcmp(name, "port")) {
        if (rh_parse_u32(v, fl, 0, 65535, &u, e) < 0) return -1;
        c->port = (uint16_t)u;
    } else if (!strcmp(name, "record-trace")) c->record_path = v;
    else if (!strcmp(name, "seed")) {
        if (rh_parse_u64(v, fl, &ull, e) < 0) return -1;
        c->core.seed = ull;
    } else if (!strcmp(name, "cache-threshold")) {
        if (rh_parse_double(v, fl, &d, e) < 0) return -1;
        if (!(d >= 0 && d <= 1)) return rh_fail(e, "--cache-threshold must be in [0, 1] (got %s)", v);
        c->core.cache_threshold = d;
    } else if (!strcmp(name, "balance-abs-threshold")) {
        if (rh_parse_double(v, fl, &d, e) < 0) return -1;
        if (!(d >= 0) || d > 1e9) return rh_fail(e, "--balance-abs-threshold must be >= 0 (got %s)", v);
        c->core.balance_abs = d;
    } else if (!strcmp(name, "balance-rel-threshold")) {
        if (rh_parse_double(v, fl, &d, e) < 0) return -1;
        if (!(d >= 1) || d > 1e9) return rh_fail(e, "--balance-rel-threshold must be >= 1 (got %s)", v);
        c->core.balance_rel = d;
    } else if (!strcmp(name, "max-tree-blocks")) {
        if (rh_parse_u64(v, fl, &ull, e) < 0) return -1;
        if (ull < 2) return rh_fail(e, "--max-tree-blocks must be at least 2 (got %s)", v);
        c->core.max_tree_blocks = ull;
    } else if (!strcmp(name, "prefix-block")) {
        if (rh_parse_u32(v, fl, 1, 1u << 20, &c->prefix_block, e) < 0) return -1;
    } else if (!strcmp(name, "health-interval")) return seconds(v, fl, 0, &c->health_interval_s, e);
    else if (!strcmp(name, "health-timeout")) return seconds(v, fl, 0, &c->health_timeout_s, e);
    else if (!strcmp(name, "connect-timeout")) return seconds(v, fl, 0, &c->connect_timeout_s, e);
    else if (!strcmp(name, "request-timeout")) return seconds(v, fl, -1, &c->request_timeout_s, e);
    else if (!strcmp(name, "shutdown-timeout")) return seconds(v, fl, -1, grace, e);
    else if (!strcmp(name, "max-body-bytes")) {
        if (rh_parse_u64(v, fl, &ull, e) < 0) return -1;
        if (ull < 1) return rh_fail(e, "--max-body-bytes must be at least 1 (got %s)", v);
        c->max_body_bytes = (size_t)ull;
    } else if (!strcmp(name, "max-response-bytes")) {
        if (rh_parse_u64(v, fl, &ull, e) < 0) return -1;
        if (ull < 1024 || ull > (1ull << 32))
            return rh_fail(e, "--max-response-bytes must be 1024..4294967296 (got %s)", v);
        c->max_response_bytes = (size_t)ull;
    } else if (!strcmp(name, "max-connections")) {
        if (rh_parse_u32(v, fl, 1, 1000000, &c->max_connections, e) < 0) return -1;
    } else if (!strcmp(name, "max-connections-per-client")) {
        if (rh_parse_u32(v, fl, 1, 1000000, &c->max_connections_per_client, e) < 0) return -1;
    } else if (!strcmp(name, "header-timeout")) {
        if (rh_parse_u32(v, fl, 1, 3600, &c->header_timeout_s, e) < 0) return -1;
    } else if (!strcmp(name, "idle-timeout")) {
        if (rh_parse_u32(v, fl, 1, 86400, &c->idle_timeout_s, e) < 0) return -1;
    } else return rh_fail(e, "unknown flag --%s (see rehearse router --help)", name);
    return 0;
}

static uint64_t live(void *p) { return rp_live_requests(p); }
static void drain(void *p) { rp_drain(p); }

int router_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    rp_config cfg;
    rp_config_default(&cfg);
    double grace = 30;
    const char **workers = NULL;
    uint32_t nw = 0;
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    const char *name;
    while ((name = rh_args_next(&a))) {
        static const char *const known[] = {"worker", "policy", "policy-script", "policy-max-instructions",
                                            "policy-max-memory", "policy-max-seconds", "policy-max-failures", "host", "port", "record-trace", "seed",
                                            "cache-threshold", "balance-abs-threshold", "balance-rel-threshold",
                                            "max-tree-blocks", "prefix-block", "health-interval", "health-timeout",
                                            "connect-timeout", "request-timeout", "shutdown-timeout",
                                            "max-body-bytes", "max-response-bytes", "max-connections",
                                            "max-connections-per-client", "header-timeout", "idle-timeout"};
        size_t k = 0, nk = sizeof known / sizeof known[0];
        while (k < nk && strcmp(name, known[k])) k++;
        if (k == nk) {
            free(workers);
            fprintf(stderr, "rehearse router: unknown flag --%s (see rehearse router --help)\n", name);
            return 1;
        }
        const char *v = rh_args_value(&a, &e);
        if (!v || flag(&cfg, name, v, &workers, &nw, &grace, &e) < 0) {
            free(workers);
            return bad(e.msg);
        }
    }
    if (a.npos) {
        free(workers);
        snprintf(e.msg, sizeof e.msg, "router takes no positional arguments (got '%s'); each worker is --worker URL",
                 a.pos[0]);
        return bad(e.msg);
    }
    if (!nw) return bad("no --worker given: the router needs at least one worker URL (--worker http://HOST:PORT)");
    if (cfg.core.lua_script && cfg.core.policy != ROUTER_LUA) {
        free(workers);
        snprintf(e.msg, sizeof e.msg, "--policy-script %s given, but --policy is %s (drop one)", cfg.core.lua_script,
                 router_policy_name(cfg.core.policy));
        return bad(e.msg);
    }
    cfg.workers = workers;
    cfg.n_workers = nw;

    sigset_t set;
    serving_prepare(&set);

    rproxy *p = rp_start(&cfg, &e);
    if (!p) {
        free(workers);
        return bad(e.msg);
    }
    fprintf(stderr, "rehearse router: listening on %s, %u worker%s (%u healthy), policy %s%s%s\n", rp_url(p), nw,
            nw == 1 ? "" : "s", rp_healthy_workers(p), router_policy_name(cfg.core.policy),
            cfg.record_path ? ", recording to " : "", cfg.record_path ? cfg.record_path : "");
    printf("listening on %s\n", rp_url(p));
    fflush(stdout);

    serving_wait("router", &set, grace, &(serving_ops){p, live, drain}, "cutting off");
    int rc = rp_stop(p, &e);
    free(workers);
    if (rc < 0) return bad(e.msg);
    fprintf(stderr, "rehearse router: stopped%s%s\n", cfg.record_path ? "; recorded " : "",
            cfg.record_path ? cfg.record_path : "");
    return 0;
}
