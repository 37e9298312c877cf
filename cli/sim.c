/* sim.c — `rehearse sim TRACE --cost COST [knobs] [-o RESULT] [--json]`,
 * or `--cluster CLUSTER.json` for replicas that differ (sim/cluster.h). */
#include "cli/cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/speculative/hist.h"
#include "sim/lua/lua_api.h"
#include "sim/cluster.h"
#include "sim/intervals.h"
#include "sim/result.h"
#include "sim/sim.h"
#include "util/progress.h"
#include "traces/import/import.h"
#include "util/args.h"
#include "util/atomic_file.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: rehearse sim TRACE --cost COST [knobs] [-o RESULT] [--json]\n"
               "       rehearse sim TRACE --cluster CLUSTER.json [--cost COST] [knobs] ...\n\n"
               "Replays TRACE through the scheduler on a virtual clock, pricing each step with\n"
               "the cost model COST (a JSON file: linear, table, fit or roofline), and prints the\n"
               "serving metrics (vLLM's definitions). -o writes the simulated run as a trace.\n\n"
               "  --cost FILE               cost model (required, unless every group of --cluster names one)\n"
               "  --cluster FILE            replicas that differ: groups with their own cost model and\n"
               "                            knobs, the router and the network (JSON; see sim/cluster.h)\n"
               "  -o, --output FILE         write the simulated run (requests with times, steps)\n"
               "  --json                    print the summary as JSON (vLLM field names)\n"
               "  --result FILE             write the whole result as JSON (metrics, time series)\n"
               "  --per-request             include per-request outcomes in --result\n"
               "  --progress                draw a progress bar even when stderr is not a terminal\n"
               "  --intervals K             prediction intervals: K more runs, each step's GPU time drawn with\n"
               "                            the cost file's per-step noise (fit.step_noise, from rehearse fit)\n"
               "                            and each fitted term from its 95%% interval (fit.intervals); prints\n"
               "                            every metric's p5, p50 and p95 over the runs\n"
               "  --step-noise SIGMA        the per-step noise instead (lognormal sigma; 0: none)\n"
               "  --intervals-fixed-terms   draw only the steps' noise, the terms as fitted\n"
               "simulator knobs:\n%s"
               "scheduler knobs:\n%s",
            sim_config_help(), core_config_help());
}

/* Closed-loop traces (synthesized with N clients) say so in their header.
 * A recording made with speculation carries its accepted-length histogram,
 * which a simulation with speculation on takes unless told otherwise. */
static int apply_trace_defaults(sim_config *cfg, const tr_trace *t, int concurrency_given, int accept_given,
                                rh_err *e)
{
    const char *clients = tr_header_get(&t->header, "clients");
    if (!concurrency_given && clients) {
        long v = atol(clients);
        if (v > 0) cfg->max_concurrency = (uint32_t)v;
    }
    const char *hist = tr_header_get(&t->header, SPEC_HIST_KEY);
    if (!accept_given && hist && cfg->core.spec_steps &&
        sim_config_set(cfg, "speculative-accept-hist", hist, e) < 0)
        return rh_prefix(e, "the trace's header key %s", SPEC_HIST_KEY);
    return 0;
}

/* One line per replica under the cluster's table: where the work went. */
static void print_replicas(const sim_result *r)
{
    if (!r->n_replicas) return;
    printf("%-8s %10s %10s %10s %14s %14s %10s\n", "replica", "requests", "steps", "busy (s)", "TTFT p50 (ms)",
           "TTFT p99 (ms)", "hit rate");
    for (uint32_t k = 0; k < r->n_replicas; k++) {
        const sim_replica_result *x = &r->replicas[k];
        if (r->pd_prefill) printf("%s", k < r->pd_prefill ? "P" : "D");
        printf("%-*u %10llu %10llu %10.2f %14.2f %14.2f %10.3f", r->pd_prefill ? 7 : 8, k, (unsigned long long)x->routed,
               (unsigned long long)x->steps, x->busy_s, x->summary.ttft_ms.median, x->summary.ttft_ms.p99,
               x->summary.cache_hit_rate);
        if (x->group_name && *x->group_name) printf("  %s (%u GPU%s)", x->group_name, x->gpus, x->gpus == 1 ? "" : "s");
        printf("\n");
    }
    printf("load imbalance (most / mean): requests %.3f, busy time %.3f\n", r->imbalance_requests, r->imbalance_busy);
    if (r->pd_prefill)
        printf("prefill-decode: %u prefill + %u decode replicas on %u GPUs; KV transfer mean %.3f ms; goodput per GPU "
               "%.4f req/s\n",
               r->pd_prefill, r->n_replicas - r->pd_prefill, r->gpus, 1e3 * r->kv_transfer_mean_s,
               r->gpus ? r->summary.request_goodput / r->gpus : 0);
}

/* K more runs of the same configuration with the steps and the fitted
 * terms drawn (sim/intervals.h). */
static int intervals(const sim_config *cfg, const tr_trace *t, const char *cost_path, const char *cluster_path,
                     sim_interval_opts *iv, json_t **out, rh_err *e)
{
    if (cluster_path) return rh_fail(e, "--intervals runs one cost model: not with --cluster");
    json_error_t je;
    json_t *j = json_load_file(cost_path, 0, &je);
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(j);
    if (!text) return rh_fail(e, "%s:%d: %s", cost_path, je.line, je.text);
    bool gpu_only;
    if (iv->sigma < 0 && !(sim_cost_step_noise(text, &gpu_only) > 0))
        fprintf(stderr, "rehearse sim: %s holds no fit.step_noise (a cost file rehearse fit wrote from a probe "
                        "has it): the runs draw no step noise; give one with --step-noise\n", cost_path);
    iv->progress = 1;
    sim_config c = *cfg;
    c.out_path = NULL;
    int rc = sim_intervals_run(&c, t, text, cost_path, iv, out, e);
    free(text);
    return rc;
}

static void print_intervals(json_t *b, const metrics_summary *point)
{
    static const char *const rows[] = {"request_throughput", "output_throughput", "request_goodput",
                                       "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
                                       "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms",
                                       "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms"};
    (void)point;
    json_t *m = json_object_get(b, "metrics");
    json_t *drawn = json_object_get(b, "terms_drawn");
    printf("Prediction intervals over %lld runs (step noise sigma %.4g%s%s)\n",
           (long long)json_integer_value(json_object_get(b, "runs")), json_number_value(json_object_get(b, "sigma")),
           json_array_size(drawn) ? ", fitted terms drawn from their 95% intervals" : "",
           json_array_size(drawn) ? "" : ", terms as fitted");
    printf("%-22s %12s %12s %12s\n", "metric", "p5", "p50", "p95");
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        json_t *r = json_object_get(m, rows[i]);
        if (!r) continue;
        printf("%-22s %12.4g %12.4g %12.4g\n", rows[i], json_number_value(json_object_get(r, "p5")),
               json_number_value(json_object_get(r, "p50")), json_number_value(json_object_get(r, "p95")));
    }
}

int sim_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    sim_config cfg;
    sim_config_default(&cfg);
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    const char *cost_path = NULL, *result_path = NULL, *cluster_path = NULL, *name;
    int json = 0, concurrency_given = 0, per_request = 0, accept_given = 0;
    sim_interval_opts iv;
    sim_interval_opts_default(&iv);
    iv.runs = 0;
    while ((name = rh_args_next(&a))) {
        const char *v;
        if (!strcmp(name, "json")) {
            json = 1;
        } else if (!strcmp(name, "progress")) {
            rh_progress_force(1);
        } else if (!strcmp(name, "per-request")) {
            per_request = 1;
        } else if (!strcmp(name, "intervals")) {
            if (!(v = rh_args_value(&a, &e)) || rh_parse_u32(v, "--intervals", 2, 100000, &iv.runs, &e) < 0) goto bad;
        } else if (!strcmp(name, "step-noise")) {
            if (!(v = rh_args_value(&a, &e)) || rh_parse_double(v, "--step-noise", &iv.sigma, &e) < 0) goto bad;
            if (!(iv.sigma >= 0 && iv.sigma <= 5)) {
                rh_fail(&e, "--step-noise must be in [0, 5] (got %s)", v);
                goto bad;
            }
        } else if (!strcmp(name, "intervals-fixed-terms")) {
            iv.draw_terms = false;
        } else if (!strcmp(name, "result")) {
            if (!(result_path = rh_args_value(&a, &e))) goto bad;
        } else if (!strcmp(name, "cost")) {
            if (!(cost_path = rh_args_value(&a, &e))) goto bad;
        } else if (!strcmp(name, "cluster")) {
            if (!(cluster_path = rh_args_value(&a, &e))) goto bad;
        } else if (!strcmp(name, "o") || !strcmp(name, "output")) {
            if (!(cfg.out_path = rh_args_value(&a, &e))) goto bad;
        } else {
            /* Boolean knobs (--disable-radix-cache) take no value unless it is
             * written --name=value. */
            if (sim_config_takes_value(name) == 0) v = a.inline_val ? rh_args_value(&a, &e) : "true";
            else if (!(v = rh_args_value(&a, &e))) goto bad;
            int rc = sim_config_set(&cfg, name, v, &e);
            if (rc < 0) goto bad;
            if (rc == 0) {
                snprintf(e.msg, sizeof e.msg, "unknown flag --%s (see rehearse sim --help)", name);
                goto bad;
            }
            if (!strcmp(name, "max-concurrency")) concurrency_given = 1;
            if (!strncmp(name, "speculative-accept-", 19) || !strncmp(name, "speculative_accept_", 19))
                accept_given = 1;
        }
    }
    if (a.npos != 1) {
        rh_fail(&e, "sim takes one TRACE file (got %d); see rehearse sim --help", a.npos);
        goto bad;
    }
    if (!cost_path && !cluster_path) {
        rh_fail(&e, "sim needs --cost FILE (a cost model); see rehearse sim --help");
        goto bad;
    }
    cfg.progress = 1;   /* a bar on a terminal or with --progress, else a heartbeat in a long run (progress.h) */
    if (core_config_validate(&cfg.core, &e) < 0) goto bad;

    cost_model *cost = NULL;
    if (cost_path && !(cost = cost_load(cost_path, &e))) goto bad;
    tr_trace t;
    if (tr_trace_load(a.pos[0], &t, &e) < 0) {
        cost_free(cost);
        goto bad;
    }
    sim_cluster cl = {0};
    sim_result res;
    int rc = apply_trace_defaults(&cfg, &t, concurrency_given, accept_given, &e);
    if (rc == 0 && cluster_path) {
        rc = sim_cluster_load(cluster_path, &cfg, cost, &cl, &e);
        if (rc == 0) rc = sim_cluster_run(&cl, &t, &res, &e);
    } else if (rc == 0) {
        rc = sim_run(&cfg, &t, cost, &res, &e);
    }
    if (rc < 0) {
        tr_trace_free(&t);
        sim_cluster_free(&cl);
        cost_free(cost);
        goto bad;
    }
    if (res.pool_how[0] && !json) fprintf(stderr, "rehearse sim: %s\n", res.pool_how);
    if (res.defaults_how[0] && !json) fprintf(stderr, "rehearse sim: %s\n", res.defaults_how);
    if (res.spec_note[0]) fprintf(stderr, "rehearse sim: note: %s\n", res.spec_note);
    if (res.router_errors)
        fprintf(stderr, "rehearse sim: warning: %llu router script error%s, each pick least-outstanding's (%s%s)\n",
                (unsigned long long)res.router_errors, res.router_errors == 1 ? "" : "s", res.router_error,
                res.router_errors > 1 ? ", ..." : "");
    if (res.router_trips)
        fprintf(stderr, "rehearse sim: warning: the router script's breaker tripped %llu time%s (--router-max-failures)\n",
                (unsigned long long)res.router_trips, res.router_trips == 1 ? "" : "s");
    uint64_t refused = res.summary.failed_context_length + res.summary.failed_kv_pool;
    if (refused)
        fprintf(stderr, "rehearse sim: warning: %llu request%s refused, counted as failed (%s%s)\n",
                (unsigned long long)refused, refused == 1 ? "" : "s", res.refusal, refused > 1 ? ", ..." : "");
    if (result_path) {
        json_t *o = sim_result_to_json(&res, per_request);
        char *text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
        json_decref(o);
        if (!text || rh_write_file_atomic(result_path, text, strlen(text), &e) < 0) {
            if (!text) rh_fail(&e, "out of memory");
            free(text);
            sim_result_free(&res);
            sim_cluster_free(&cl);
            cost_free(cost);
            tr_trace_free(&t);
            goto bad;
        }
        free(text);
    }
    json_t *bounds = NULL;
    if (iv.runs && intervals(&cfg, &t, cost_path, cluster_path, &iv, &bounds, &e) < 0) {
        sim_result_free(&res);
        sim_cluster_free(&cl);
        cost_free(cost);
        tr_trace_free(&t);
        goto bad;
    }
    tr_trace_free(&t);
    if (json) {
        json_t *o = metrics_to_json(&res.summary);
        json_object_set_new(o, "sim_wall_s", json_real(res.wall_s));
        json_object_set_new(o, "kv_pool_tokens", json_integer((json_int_t)res.pool_tokens));
        if (res.n_replicas) {
            json_object_set_new(o, "replicas", sim_replicas_to_json(&res));
            json_object_set_new(o, "imbalance_requests", json_real(res.imbalance_requests));
            json_object_set_new(o, "imbalance_busy", json_real(res.imbalance_busy));
        }
        json_object_set_new(o, "gpus", json_integer(res.gpus));
        if (res.router_errors) json_object_set_new(o, "router_errors", json_integer((json_int_t)res.router_errors));
        if (res.router_trips) json_object_set_new(o, "router_breaker_trips", json_integer((json_int_t)res.router_trips));
        json_object_set_new(o, "request_goodput_per_gpu", json_real(res.gpus ? res.summary.request_goodput / res.gpus : 0));
        if (res.pd_prefill) {
            json_object_set_new(o, "prefill_replicas", json_integer(res.pd_prefill));
            json_object_set_new(o, "decode_replicas", json_integer(res.n_replicas - res.pd_prefill));
            json_object_set_new(o, "mean_kv_transfer_ms", json_real(1e3 * res.kv_transfer_mean_s));
        }
        if (bounds) json_object_set(o, "intervals", bounds);
        json_dumpf(o, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
        json_decref(o);
    } else {
        metrics_print(stdout, &res.summary, res.n_replicas ? "Simulated Cluster Result" : "Simulated Serving Result");
        print_replicas(&res);
        if (bounds) print_intervals(bounds, &res.summary);
    }
    json_decref(bounds);
    sim_result_free(&res);
    sim_cluster_free(&cl);   /* after the result: its replicas borrow the groups' names */
    cost_free(cost);
    return 0;
bad:
    fprintf(stderr, "rehearse sim: %s\n", e.msg);
    return 1;
}
