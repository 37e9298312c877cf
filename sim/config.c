/* config.c — the simulator's own knobs by CLI name; core knobs pass through
 * to engine/core so both fronts (CLI and Lua) accept exactly the same names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/speculative/hist.h"
#include "engine/speculative/vllm_config.h"
#include "sim/sim.h"
#include "util/args.h"


/* An accepted-length histogram given as "c0,c1,...,ck" (counts of verifies
 * that accepted 0, 1, ... k drafts). */
static int parse_hist(sim_accept_model *a, const char *v, rh_err *e)
{
    uint32_t n = 0;
    const char *p = v;
    while (*p) {
        char *end;
        double x = strtod(p, &end);
        if (end == p || x < 0 || n >= sizeof a->hist / sizeof a->hist[0])
            return rh_fail(e, "--speculative-accept-hist: '%s' is not a list of up to 33 non-negative counts", v);
        a->hist[n++] = x;
        p = end;
        if (*p == ',') p++;
        else if (*p) return rh_fail(e, "--speculative-accept-hist: unexpected '%c' in '%s'", *p, v);
    }
    double total = 0;
    for (uint32_t i = 0; i < n; i++) total += a->hist[i];
    if (n == 0 || total <= 0) return rh_fail(e, "--speculative-accept-hist: '%s' holds no counts", v);
    a->hist_n = n;
    return 0;
}

/* The acceptance of a recorded run: its header's accepted-length histogram
 * (engine/speculative/hist.h, written by `rehearse replay`), else the acceptance
 * rate of its step records (a recording whose header was written live, as a
 * server writes it, cannot hold the histogram). */
static int accept_from_trace(sim_config *c, const char *path, rh_err *e)
{
    tr_reader *r = tr_reader_open(path, e);
    if (!r) return rh_prefix(e, "--speculative-accept-hist-from");
    const char *hist = tr_header_get(tr_reader_header(r), SPEC_HIST_KEY);
    if (hist) {
        int rc = parse_hist(&c->accept, hist, e);
        tr_reader_close(r);
        return rc < 0 ? rh_prefix(e, "%s: header key %s", path, SPEC_HIST_KEY) : 1;
    }
    uint64_t proposed = 0, accepted = 0;
    tr_record rec;
    int got;
    while ((got = tr_reader_next(r, &rec, e)) > 0)
        if (rec.kind == TR_STEP) {
            proposed += rec.step.spec_proposed;
            accepted += rec.step.spec_accepted;
        }
    tr_reader_close(r);
    if (got < 0) return -1;
    if (!proposed)
        return rh_fail(e, "--speculative-accept-hist-from %s: the run recorded no drafts (no %s in its header, "
                          "no proposed tokens in its steps)", path, SPEC_HIST_KEY);
    c->accept.alpha = (double)accepted / (double)proposed;
    c->accept.hist_n = 0;
    return 1;
}

static int set_slo(double *slot, const char *flag, const char *v, rh_err *e)
{
    double d;
    if (rh_parse_double(v, flag, &d, e) < 0) return -1;
    if (d < 0) return rh_fail(e, "%s must be >= 0 ms (got %s)", flag, v);
    *slot = d;
    return 1;
}

int sim_config_set(sim_config *c, const char *name_in, const char *v, rh_err *e)
{
    char name[96];
    rh_knob_name(name_in, name, sizeof name);
    double d;
    unsigned long long u;
    if (!strcmp(name, "rate-scale")) {
        if (rh_parse_double(v, "--rate-scale", &d, e) < 0) return -1;
        if (d <= 0) return rh_fail(e, "--rate-scale must be > 0 (got %s)", v);
        c->rate_scale = d;
    } else if (!strcmp(name, "max-concurrency")) {
        if (rh_parse_u64(v, "--max-concurrency", &u, e) < 0) return -1;
        if (u < 1 || u > UINT32_MAX)
            return rh_fail(e, "--max-concurrency must be 1..%u (got %s); leave it out for an open loop", UINT32_MAX, v);
        c->max_concurrency = (uint32_t)u;
    } else if (!strcmp(name, "tp-size") || !strcmp(name, "tp") || !strcmp(name, "tensor-parallel-size")) {
        if (rh_parse_u64(v, "--tp-size", &u, e) < 0) return -1;
        if (u < 1 || u > 1024) return rh_fail(e, "--tp-size must be 1..1024 (got %s)", v);
        c->tp = (uint32_t)u;
    } else if (!strcmp(name, "speculative-algorithm")) {
        if (!strcasecmp(v, "ngram")) c->spec_draft_model = 0;
        else if (!strcasecmp(v, "draft") || !strcasecmp(v, "standalone") || !strcasecmp(v, "eagle") ||
                 !strcasecmp(v, "mtp"))
            c->spec_draft_model = 1;
        else if (!strcasecmp(v, "eagle3") || !strcasecmp(v, "nextn")) c->spec_draft_model = 1;
        else return rh_fail(e, "--speculative-algorithm: '%s' is not NGRAM, DRAFT (STANDALONE), EAGLE, EAGLE3, NEXTN or MTP", v);
    } else if (!strcmp(name, "speculative-config")) {   /* vLLM's JSON */
        spec_vllm given;
        if (spec_vllm_parse(v, &given, e) < 0) return -1;
        c->spec_draft_model = given.drafts_by_model;
        c->core.spec_steps = given.num_tokens;
    } else if (!strcmp(name, "stream-interval")) {   /* checked, and changes nothing (the help says why) */
        if (rh_parse_u64(v, "--stream-interval", &u, e) < 0) return -1;
        if (u < 1 || u > (1u << 20)) return rh_fail(e, "--stream-interval must be 1..1048576 (got %s)", v);
    } else if (!strcmp(name, "speculative-eagle-topk")) {
        if (rh_parse_u64(v, "--speculative-eagle-topk", &u, e) < 0) return -1;
        if (u < 1 || u > 64) return rh_fail(e, "--speculative-eagle-topk must be 1..64 (got %s)", v);
        c->spec_topk = (uint32_t)u;
    } else if (!strcmp(name, "speculative-accept-rate")) {
        if (rh_parse_double(v, "--speculative-accept-rate", &d, e) < 0) return -1;
        if (d < 0 || d > 1) return rh_fail(e, "--speculative-accept-rate must be in [0, 1] (got %s)", v);
        c->accept.alpha = d;
        c->accept.hist_n = 0;
    } else if (!strcmp(name, "speculative-accept-hist")) {
        if (parse_hist(&c->accept, v, e) < 0) return -1;
    } else if (!strcmp(name, "speculative-accept-hist-from")) {
        return accept_from_trace(c, v, e);
    } else if (!strcmp(name, "slo-ttft")) {
        return set_slo(&c->slo.ttft_ms, "--slo-ttft", v, e);
    } else if (!strcmp(name, "slo-tpot")) {
        return set_slo(&c->slo.tpot_ms, "--slo-tpot", v, e);
    } else if (!strcmp(name, "slo-e2e")) {
        return set_slo(&c->slo.e2e_ms, "--slo-e2e", v, e);
    } else if (!strcmp(name, "sim-seed")) {
        if (rh_parse_u64(v, "--sim-seed", &u, e) < 0) return -1;
        c->seed = u;
    } else if (!strcmp(name, "series-points")) {
        if (rh_parse_u64(v, "--series-points", &u, e) < 0) return -1;
        if (u < 1 || u > 1000000) return rh_fail(e, "--series-points must be 1..1000000 (got %s)", v);
        c->series_points = (uint32_t)u;
    } else if (!strcmp(name, "policy-fallback")) {
        if (!strcmp(v, "true") || !strcmp(v, "1")) c->policy_fallback = true;
        else if (!strcmp(v, "false") || !strcmp(v, "0")) c->policy_fallback = false;
        else return rh_fail(e, "--policy-fallback takes no value (or true/false), not '%s'", v);
    } else if (!strcmp(name, "mem-fraction-static") || !strcmp(name, "gpu-memory-utilization")) {
        const char *flag = name[0] == 'm' ? "--mem-fraction-static" : "--gpu-memory-utilization";
        if (rh_parse_double(v, flag, &d, e) < 0) return -1;
        if (!(d > 0 && d <= 1)) return rh_fail(e, "%s must be in (0, 1] (got %s)", flag, v);
        if (name[0] == 'm') c->mem_fraction_static = d;
        else c->gpu_memory_utilization = d;
    } else if (!strcmp(name, "replicas")) {
        if (rh_parse_u64(v, "--replicas", &u, e) < 0) return -1;
        if (u < 1 || u > 4096) return rh_fail(e, "--replicas must be 1..4096 (got %s)", v);
        c->replicas = (uint32_t)u;
    } else if (!strcmp(name, "router") || !strcmp(name, "router-policy")) {
        int p = router_policy_parse(v);
        if (p < 0)
            return rh_fail(e, "--router: '%s' is not round-robin, least-outstanding, least-kv, power-of-two, "
                              "cache-aware or lua", v);
        c->router.policy = (router_policy)p;
    } else if (!strcmp(name, "router-script")) {
        c->router.lua_script = v;
        c->router.policy = ROUTER_LUA;
    } else if (!strcmp(name, "router-max-instructions") || !strcmp(name, "router-max-memory")) {
        const char *flag = name[11] == 'i' ? "--router-max-instructions" : "--router-max-memory";
        if (rh_parse_u64(v, flag, &u, e) < 0) return -1;
        if (name[11] == 'i' && (u < 1000 || u > (1ull << 50)))
            return rh_fail(e, "--router-max-instructions must be 1000..2^50 (got %s)", v);
        if (name[11] == 'm' && (u < (1u << 20) || u > (1ull << 40)))
            return rh_fail(e, "--router-max-memory must be 1048576..1099511627776 bytes (got %s)", v);
        if (name[11] == 'i') c->router.lua_max_instructions = u;
        else c->router.lua_max_memory = u;
    } else if (!strcmp(name, "router-max-failures")) {
        if (rh_parse_u64(v, "--router-max-failures", &u, e) < 0) return -1;
        if (u > UINT32_MAX) return rh_fail(e, "--router-max-failures must be 0..4294967295 (got %s)", v);
        c->router.lua_max_failures = (uint32_t)u;
    } else if (!strcmp(name, "router-max-seconds")) {
        if (rh_parse_double(v, "--router-max-seconds", &d, e) < 0) return -1;
        if (!(d >= 0.001 && d <= 3600)) return rh_fail(e, "--router-max-seconds must be 0.001..3600 (got %s)", v);
        c->router.lua_max_seconds = d;
    } else if (!strcmp(name, "network-delay-ms")) {
        if (rh_parse_double(v, "--network-delay-ms", &d, e) < 0) return -1;
        if (!(d >= 0) || d > 1e6) return rh_fail(e, "--network-delay-ms must be >= 0 (got %s)", v);
        c->network_delay_s = d / 1000;
    } else if (!strcmp(name, "cache-threshold")) {
        if (rh_parse_double(v, "--cache-threshold", &d, e) < 0) return -1;
        if (!(d >= 0 && d <= 1)) return rh_fail(e, "--cache-threshold must be in [0, 1] (got %s)", v);
        c->router.cache_threshold = d;
    } else if (!strcmp(name, "balance-abs-threshold") || !strcmp(name, "balance-rel-threshold")) {
        const char *flag = name[8] == 'a' ? "--balance-abs-threshold" : "--balance-rel-threshold";
        if (rh_parse_double(v, flag, &d, e) < 0) return -1;
        if (!(d >= 0) || d > 1e9) return rh_fail(e, "%s must be >= 0 (got %s)", flag, v);
        if (name[8] == 'a') c->router.balance_abs = d;
        else c->router.balance_rel = d;
    } else if (!strcmp(name, "prefill-replicas") || !strcmp(name, "decode-replicas")) {
        const char *flag = name[0] == 'p' ? "--prefill-replicas" : "--decode-replicas";
        if (rh_parse_u64(v, flag, &u, e) < 0) return -1;
        if (u > 4096 || (u < 1 && name[0] == 'd')) return rh_fail(e, "%s must be %s..4096 (got %s)", flag, name[0] == 'p' ? "0" : "1", v);
        if (name[0] == 'p') c->pd_prefill = (uint32_t)u;
        else c->replicas = (uint32_t)u;
    } else if (!strcmp(name, "prefill-tp") || !strcmp(name, "decode-tp")) {
        const char *flag = name[0] == 'p' ? "--prefill-tp" : "--decode-tp";
        if (rh_parse_u64(v, flag, &u, e) < 0) return -1;
        if (u < 1 || u > 1024) return rh_fail(e, "%s must be 1..1024 (got %s)", flag, v);
        if (name[0] == 'p') c->pd_prefill_tp = (uint32_t)u;
        else c->pd_decode_tp = (uint32_t)u;
    } else if (!strcmp(name, "pd-link")) {
        if (sim_pd_link(v, &c->pd_link_Bps, &c->pd_link_latency_s) < 0)
            return rh_fail(e, "--pd-link: '%s' is not nvlink, ib or rdma (or give --pd-link-gbps and --pd-link-latency-us)", v);
    } else if (!strcmp(name, "pd-link-gbps")) {
        if (rh_parse_double(v, "--pd-link-gbps", &d, e) < 0) return -1;
        if (!(d > 0) || d > 1e6) return rh_fail(e, "--pd-link-gbps must be > 0 GB/s (got %s)", v);
        c->pd_link_Bps = d * 1e9;
    } else if (!strcmp(name, "pd-link-latency-us")) {
        if (rh_parse_double(v, "--pd-link-latency-us", &d, e) < 0) return -1;
        if (!(d >= 0) || d > 1e9) return rh_fail(e, "--pd-link-latency-us must be >= 0 (got %s)", v);
        c->pd_link_latency_s = d * 1e-6;
    } else if (!strcmp(name, "hicache-storage-backend")) {
        if (!strcmp(v, "none")) c->hicache_storage = false;
        else if (!strcmp(v, "mooncake") || !strcmp(v, "file")) c->hicache_storage = true;
        else return rh_fail(e, "--hicache-storage-backend: '%s' is not mooncake, file or none", v);
    } else if (!strcmp(name, "hicache-storage-prefetch-policy")) {
        /* A fetch is priced into the step that admits its request, which
         * waits for all of it: SGLang's wait_complete. best_effort and
         * timeout start the fetch when the request arrives and admit it
         * with what landed meanwhile, which is not modelled. */
        if (strcmp(v, "wait_complete"))
            return rh_fail(e, "--hicache-storage-prefetch-policy %s: only wait_complete is simulated (a fetch "
                              "starts when its request is admitted and the step waits for all of it)", v);
    } else if (!strcmp(name, "hicache-storage-size")) {
        if (rh_parse_double(v, "--hicache-storage-size", &d, e) < 0) return -1;
        if (!(d > 0) || d > 1e9) return rh_fail(e, "--hicache-storage-size must be > 0 GB (got %s)", v);
        c->storage_gb = d;
    } else if (!strcmp(name, "hicache-storage-link")) {
        if (sim_pd_link(v, &c->storage_Bps, &c->storage_latency_s) < 0)
            return rh_fail(e, "--hicache-storage-link: '%s' is not nvlink, ib or rdma (or give "
                              "--hicache-storage-gbps and --hicache-storage-latency-us)", v);
    } else if (!strcmp(name, "hicache-storage-gbps")) {
        if (rh_parse_double(v, "--hicache-storage-gbps", &d, e) < 0) return -1;
        if (!(d > 0) || d > 1e6) return rh_fail(e, "--hicache-storage-gbps must be > 0 GB/s (got %s)", v);
        c->storage_Bps = d * 1e9;
    } else if (!strcmp(name, "hicache-storage-latency-us")) {
        if (rh_parse_double(v, "--hicache-storage-latency-us", &d, e) < 0) return -1;
        if (!(d >= 0) || d > 1e9) return rh_fail(e, "--hicache-storage-latency-us must be >= 0 (got %s)", v);
        c->storage_latency_s = d * 1e-6;
    } else if (!strcmp(name, "pd-kv-bytes-per-token")) {
        if (rh_parse_double(v, "--pd-kv-bytes-per-token", &d, e) < 0) return -1;
        if (!(d > 0) || d > 1e12) return rh_fail(e, "--pd-kv-bytes-per-token must be > 0 (got %s)", v);
        c->pd_kv_bytes_per_token = d;
    } else if (!strcmp(name, "moe-dense-tp-size") || !strcmp(name, "ep-num-redundant-experts")) {
        const char *flag = name[0] == 'm' ? "--moe-dense-tp-size" : "--ep-num-redundant-experts";
        if (rh_parse_u64(v, flag, &u, e) < 0) return -1;
        if (u > 65536) return rh_fail(e, "%s must be 0..65536 (got %s)", flag, v);
        if (name[0] == 'm') c->serve_flags.dense_tp = (uint32_t)u, c->serve_set |= SIM_SERVE_DENSE_TP;
        else c->serve_flags.redundant_experts = (uint32_t)u, c->serve_set |= SIM_SERVE_REDUNDANT;
    } else if (!strcmp(name, "ep-size") || !strcmp(name, "expert-parallel-size") || !strcmp(name, "dp-size") ||
               !strcmp(name, "cuda-graph-max-bs")) {
        const char *flag = name[0] == 'e' ? "--ep-size" : name[0] == 'd' ? "--dp-size" : "--cuda-graph-max-bs";
        if (rh_parse_u64(v, flag, &u, e) < 0) return -1;
        if (u > 4096 || (u < 1 && name[0] != 'c')) return rh_fail(e, "%s must be %s..4096 (got %s)", flag, name[0] == 'c' ? "0" : "1", v);
        if (name[0] == 'e') c->serve_flags.ep = (uint32_t)u, c->serve_set |= SIM_SERVE_EP;
        else if (name[0] == 'd') c->serve_dp_size = (uint32_t)u, c->serve_set |= SIM_SERVE_DP_SIZE;
        else c->serve_flags.cuda_graph_max_bs = (int32_t)u, c->serve_set |= SIM_SERVE_GRAPH_BS;
    } else if (!strcmp(name, "enable-dp-attention") || !strcmp(name, "enable-two-batch-overlap") ||
               !strcmp(name, "disable-cuda-graph") || !strcmp(name, "disable-overlap-schedule") ||
               !strcmp(name, "enable-eplb")) {
        bool on;
        if (!strcmp(v, "true") || !strcmp(v, "1") || !*v) on = true;
        else if (!strcmp(v, "false") || !strcmp(v, "0")) on = false;
        else return rh_fail(e, "--%s takes no value (or true/false), not '%s'", name, v);
        if (!strcmp(name, "enable-dp-attention")) c->serve_flags.dp = on ? 0 : 1, c->serve_set |= SIM_SERVE_DP;
        else if (!strcmp(name, "enable-two-batch-overlap")) c->serve_flags.two_batch_overlap = on, c->serve_set |= SIM_SERVE_TBO;
        else if (!strcmp(name, "disable-cuda-graph")) {
            if (on) c->serve_flags.cuda_graph_max_bs = 0, c->serve_set |= SIM_SERVE_GRAPH_BS;
        } else if (!strcmp(name, "enable-eplb")) {
            /* the experts balanced as uniform routing balances them: the
             * statistical imbalance, which --expert-imbalance overrides */
            if (on && !(c->serve_set & SIM_SERVE_IMBALANCE)) c->serve_flags.expert_imbalance = 0;
        } else c->serve_flags.overlap = !on, c->serve_set |= SIM_SERVE_OVERLAP;
    } else if (!strcmp(name, "max-lora-rank")) {
        if (rh_parse_u64(v, "--max-lora-rank", &u, e) < 0) return -1;
        if (u > 4096) return rh_fail(e, "--max-lora-rank must be 0..4096 (got %s)", v);
        c->serve_flags.lora_rank = (uint32_t)u, c->serve_set |= SIM_SERVE_LORA_RANK;
    } else if (!strcmp(name, "lora-target-modules")) {
        if (cost_lora_targets_parse(v, &c->serve_flags.lora_targets, e) < 0) return -1;
    } else if (!strcmp(name, "moe-a2a-backend")) {
        if (!strcmp(v, "deepep")) c->serve_flags.deepep = true;
        else if (!strcmp(v, "none")) c->serve_flags.deepep = false;
        else return rh_fail(e, "--moe-a2a-backend: '%s' is not none or deepep", v);
        c->serve_set |= SIM_SERVE_A2A;
    } else if (!strcmp(name, "deepep-mode")) {
        if (!strcmp(v, "auto")) c->serve_flags.deepep_mode = COST_DEEPEP_AUTO;
        else if (!strcmp(v, "normal")) c->serve_flags.deepep_mode = COST_DEEPEP_NORMAL;
        else if (!strcmp(v, "low_latency") || !strcmp(v, "low-latency")) c->serve_flags.deepep_mode = COST_DEEPEP_LOW_LATENCY;
        else return rh_fail(e, "--deepep-mode: '%s' is not auto, normal or low_latency", v);
        c->serve_set |= SIM_SERVE_DEEPEP_MODE;
    } else if (!strcmp(name, "expert-imbalance")) {
        if (rh_parse_double(v, "--expert-imbalance", &d, e) < 0) return -1;
        if (!(d >= 1 && d <= 1000)) return rh_fail(e, "--expert-imbalance must be 1..1000: the busiest GPU's routed tokens over the mean (got %s)", v);
        c->serve_flags.expert_imbalance = d;
        c->serve_set |= SIM_SERVE_IMBALANCE;
    } else if (!strcmp(name, "speculative-accept-length")) {
        if (rh_parse_double(v, "--speculative-accept-length", &d, e) < 0) return -1;
        if (!(d >= 1 && d <= 64)) return rh_fail(e, "--speculative-accept-length must be 1..64 tokens a verify (got %s)", v);
        c->spec_accept_length = d;
    } else if (!strcmp(name, "token-times")) {
        if (rh_parse_u64(v, "--token-times", &u, e) < 0) return -1;
        c->token_times = u != 0;
    } else {
        int rc = core_config_set(&c->core, name, v, e);
        const char *knob = rc == 1 ? core_config_canonical(name) : NULL;   /* vLLM's names too */
        if (knob && !strcmp(knob, "seed")) c->seed = c->core.seed;
        if (knob && !strcmp(knob, "max-running-requests")) c->max_running_set = true;
        if (knob && !strcmp(knob, "chunked-prefill-size")) c->chunk_set = true;
        return rc;
    }
    return 1;
}

int sim_config_takes_value(const char *name_in)
{
    static const char *const knobs[] = {"rate-scale", "max-concurrency", "tp-size", "tp", "tensor-parallel-size", "speculative-algorithm",
                                        "speculative-config",
                                        "speculative-eagle-topk",
                                        "speculative-accept-rate", "speculative-accept-hist",
                                        "speculative-accept-hist-from", "slo-ttft", "slo-tpot", "slo-e2e",
                                        "sim-seed", "series-points", "token-times", "mem-fraction-static",
                                        "gpu-memory-utilization", "replicas", "router", "router-policy",
                                        "router-script", "router-max-instructions", "router-max-memory",
                                        "router-max-seconds", "router-max-failures",
                                        "network-delay-ms", "cache-threshold", "balance-abs-threshold",
                                        "balance-rel-threshold", "prefill-replicas", "decode-replicas",
                                        "prefill-tp", "decode-tp", "pd-link", "pd-link-gbps", "pd-link-latency-us",
                                        "pd-kv-bytes-per-token", "ep-size", "expert-parallel-size", "dp-size",
                                        "cuda-graph-max-bs", "moe-a2a-backend", "deepep-mode", "expert-imbalance",
                                        "speculative-accept-length", "moe-dense-tp-size", "ep-num-redundant-experts",
                                        "stream-interval", "max-lora-rank", "lora-target-modules",
                                        "hicache-storage-backend", "hicache-storage-size", "hicache-storage-link",
                                        "hicache-storage-prefetch-policy",
                                        "hicache-storage-gbps", "hicache-storage-latency-us"};
    char name[96];
    if (rh_knob_name(name_in, name, sizeof name) < 0) return -1;
    if (!strcmp(name, "policy-fallback") || !strcmp(name, "enable-dp-attention") ||
        !strcmp(name, "enable-two-batch-overlap") || !strcmp(name, "disable-cuda-graph") ||
        !strcmp(name, "disable-overlap-schedule") || !strcmp(name, "enable-eplb"))
        return 0;
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
        if (!strcmp(name, knobs[i])) return 1;
    return core_config_takes_value(name);
}

const char *sim_config_help(void)
{
    return "  --rate-scale X            arrivals X times faster than the trace (default 1)\n"
           "  --max-concurrency N       closed loop: at most N requests outstanding (default: open loop)\n"
           "  --tp-size N               tensor-parallel size given to the cost model (default: the cost file's);\n"
           "                            also --tensor-parallel-size (vLLM's name)\n"
           "  --speculative-algorithm A NGRAM (drafting is free), or DRAFT (STANDALONE), EAGLE, EAGLE3,\n"
           "                            NEXTN, MTP (drafts by forward passes: a draft model, an EAGLE head, MTP)\n"
           "  --speculative-config JSON vLLM's: {\"method\": \"ngram\"|\"eagle\"|..., \"model\": M,\n"
           "                            \"num_speculative_tokens\": K}: the algorithm and K drafts per decode\n"
           "  --speculative-eagle-topk K  a tree K wide (default 1: a chain, verifying steps + 1\n"
           "                            tokens as SGLang sets it); needs --speculative-num-draft-tokens\n"
           "  --speculative-accept-rate P  per-token draft acceptance probability (default 0.7)\n"
           "  --speculative-accept-hist C0,C1,..  accepted-length counts, e.g. from a recorded trace\n"
           "  --speculative-accept-hist-from RECORDED  the histogram a `rehearse replay` with\n"
           "                            speculation recorded (header key " SPEC_HIST_KEY "), else the\n"
           "                            acceptance rate of its steps. Simulating a recording that\n"
           "                            holds the histogram with speculation on uses it by default\n"
           "  --slo-ttft MS, --slo-tpot MS, --slo-e2e MS   SLOs for goodput (default: none)\n"
           "  --series-points N         time-series resolution of results (default 2000)\n"
           "  --stream-interval N       SGLang's; accepted and changes nothing here: a simulation\n"
           "                            times every token, not the runs a stream sends them in\n"
           "  --token-times 0|1         store every token's time in the output file (default 1)\n"
           "  --mem-fraction-static F   without --max-total-tokens, the KV pool is what F of a GPU's\n"
           "                            memory leaves after the weights, as SGLang sizes it (default:\n"
           "                            SGLang's own for the GPU); only for a cost model that knows its\n"
           "                            GPU (roofline). Refused, with the numbers, when nothing is left\n"
           "  --gpu-memory-utilization U  the same under --scheduler vllm, as vLLM sizes it (default 0.9)\n"
           "  Server defaults: with a cost model that knows its GPU, what is not given is the server's\n"
           "                            own for it, and said at start: --chunked-prefill-size SGLang's\n"
           "                            by GPU memory (2048 under 35 GiB, 8192 under 160 GiB, else\n"
           "                            16384), --max-running-requests from the pool; under --scheduler\n"
           "                            vllm --max-num-batched-tokens 8192 and --max-num-seqs 1024 on a\n"
           "                            GPU of 70 GiB or more other than an A100, else 2048 and 256\n"
           "  --replicas N              N identical replicas behind a router, on one virtual clock\n"
           "                            (default 1: a single server, the same run byte for byte)\n"
           "  --router P                round-robin (default), least-outstanding, least-kv,\n"
           "                            power-of-two, cache-aware (SGLang's router), lua\n"
           "  --router-script FILE      Lua file defining route(request, replicas) -> a replica's\n"
           "                            1-based index (engine/router/router.h); implies --router lua.\n"
           "                            It runs in the Lua policies' sandbox; an error stops the run\n"
           "                            (with --policy-fallback: that pick is least-outstanding's)\n"
           "  --router-max-instructions N, --router-max-memory BYTES, --router-max-seconds S\n"
           "                            the script's limits, as --policy-max-* (defaults 10000000,\n"
           "                            67108864, 1)\n"
           "  --router-max-failures N   with --policy-fallback, failures in a row after which the\n"
           "                            script is not asked for a back-off of 64 picks, doubling\n"
           "                            while it keeps failing (least-outstanding meanwhile); 0:\n"
           "                            never (16)\n"
           "  --network-delay-ms MS     a request's trip from the router to its replica (default 0)\n"
           "  --cache-threshold F, --balance-abs-threshold N, --balance-rel-threshold R\n"
           "                            cache-aware's thresholds, as SGLang's router names them\n"
           "                            (defaults 0.5, 32, 1.0001)\n"
           "  --prefill-replicas P      prefill-decode disaggregation: P prefill replicas (the router's\n"
           "                            policy picks among them) and --decode-replicas D (default 1,\n"
           "                            least outstanding); a prompt's KV crosses --pd-link to decode\n"
           "  --prefill-tp N, --decode-tp N  each pool's tensor-parallel size (default --tp-size)\n"
           "  --pd-link L               nvlink, ib (default) or rdma: bandwidth and latency per GPU;\n"
           "                            or --pd-link-gbps G --pd-link-latency-us U\n"
           "  --pd-kv-bytes-per-token B KV bytes per token per GPU (default: the cost model's)\n"
           "  --hicache-storage-backend B  mooncake or file: a store below the replicas' host tiers\n"
           "                            (needs --enable-hierarchical-cache), one for the whole cluster:\n"
           "                            pages written to a host tier go on to it, and a prompt's pages\n"
           "                            after its GPU and host hits are fetched from it into the host\n"
           "  --hicache-storage-size GB the store's size (default 1000)\n"
           "  --hicache-storage-prefetch-policy wait_complete  the one simulated: a fetch starts when\n"
           "                            its request is admitted and the step waits for all of it\n"
           "  --hicache-storage-link L  nvlink, ib or rdma (default): the fetch's bandwidth per GPU and\n"
           "                            latency; or --hicache-storage-gbps G --hicache-storage-latency-us U\n"
           "  --ep-size N               experts spread over the N = tp GPUs (default 1: split like the MLP)\n"
           "  --enable-dp-attention     data-parallel attention: each request on one of --dp-size groups\n"
           "                            (default: tp groups of one GPU); the MLPs and experts see every\n"
           "                            group's tokens, gathered\n"
           "  --moe-a2a-backend B       none (default) or deepep: tokens dispatched to their experts and\n"
           "                            combined back by DeepEP's kernels (implies --ep-size tp)\n"
           "  --deepep-mode M           auto (default: normal kernels for prefill, low latency for\n"
           "                            decode), normal or low_latency\n"
           "  --enable-two-batch-overlap  two micro-batches, each one's communication under the\n"
           "                            other's kernels\n"
           "  --moe-dense-tp-size N     under DP attention: 1 runs each group's dense MLPs whole on its\n"
           "                            own tokens (default tp: split, every group's tokens gathered)\n"
           "  --ep-num-redundant-experts R  R more expert copies spread with the experts (EPLB's)\n"
           "  --expert-imbalance X      the busiest GPU's routed tokens over the mean under EP (default:\n"
           "                            the statistical imbalance of uniform routing, what EPLB\n"
           "                            achieves; --enable-eplb keeps that default)\n"
           "  --cuda-graph-max-bs N     decode batches up to N replay a CUDA graph (default: SGLang's\n"
           "                            for the GPU's memory and tp); --disable-cuda-graph: none\n"
           "  --disable-overlap-schedule  the host's scheduling is not hidden under the previous\n"
           "                            step's GPU time (these seven: a roofline cost model prices them)\n"
           "  --speculative-accept-length L  mean tokens a verify commits (the bonus token included):\n"
           "                            the per-token acceptance that gives it for the chain's depth\n"
           "  --policy-fallback         a Lua policy's error makes that step fcfs and is counted\n"
           "                            (policy_errors), a router script's makes that pick\n"
           "                            least-outstanding's (router_errors); without it the run\n"
           "                            stops with the error\n";
}

void sim_config_from_header(sim_config *c, const tr_header *h)
{
    rh_err ignore;
    const char *rank = tr_header_get(h, "adapter.rank");
    unsigned long long u;
    if (rank && rh_parse_u64(rank, "adapter.rank", &u, &ignore) == 0 && u <= 4096) c->lora_rank_header = (uint32_t)u;
    for (uint32_t i = 0; i < h->n_kv; i++)
        if (core_config_takes_value(h->kv[i].key) >= 0) core_config_set(&c->core, h->kv[i].key, h->kv[i].value, &ignore);
}

int sim_knobs_take(sim_knobs *k, sim_config *c, const char *name, const char *value, rh_err *e)
{
    if (sim_config_set(c, name, value, e) < 0) return -1;
    if (k->n == SIM_MAX_KNOBS) return rh_fail(e, "more than %d scheduler knobs", SIM_MAX_KNOBS);
    if (strlen(name) >= sizeof k->names[0]) return rh_fail(e, "--%.40s...: the knob name is too long", name);
    snprintf(k->names[k->n], sizeof k->names[0], "%s", name);
    k->kv[k->n][0] = k->names[k->n];
    k->kv[k->n++][1] = value;
    return 0;
}

void sim_config_from_header_and_flags(sim_config *c, const tr_header *h, const sim_knobs *k)
{
    rh_err ignore;
    sim_config_default(c);
    sim_config_from_header(c, h);
    for (int i = 0; i < k->n; i++) sim_config_set(c, k->kv[i][0], k->kv[i][1], &ignore);   /* checked when taken */
}

int sim_serving_resolve(sim_config *c, const cost_model *cost, rh_err *e)
{
    cost_serving *sv = &c->serving;
    const cost_serving *f = &c->serve_flags;
    cost_serving_default(cost, c->tp, sv);
    cost_memory mem;
    uint32_t g = c->tp ? c->tp : cost_memory_of(cost, 0, &mem) && mem.gpus ? mem.gpus : 1;
    if (c->serve_set & SIM_SERVE_EP) sv->ep = f->ep;
    if (c->serve_set & SIM_SERVE_A2A) {
        sv->deepep = f->deepep;
        if (f->deepep && !(c->serve_set & SIM_SERVE_EP)) sv->ep = g;   /* as SGLang sets --ep-size for DeepEP */
    }
    if (c->serve_set & SIM_SERVE_DEEPEP_MODE) sv->deepep_mode = f->deepep_mode;
    if (c->serve_set & SIM_SERVE_DP) sv->dp = f->dp == 1 ? 1 : (c->serve_set & SIM_SERVE_DP_SIZE) ? c->serve_dp_size : g;
    else if ((c->serve_set & SIM_SERVE_DP_SIZE) && sv->dp > 1) sv->dp = c->serve_dp_size;
    if (c->serve_set & SIM_SERVE_TBO) sv->two_batch_overlap = f->two_batch_overlap;
    if (c->serve_set & SIM_SERVE_IMBALANCE) sv->expert_imbalance = f->expert_imbalance;
    if (c->serve_set & SIM_SERVE_GRAPH_BS) sv->cuda_graph_max_bs = f->cuda_graph_max_bs;
    if (c->serve_set & SIM_SERVE_OVERLAP) sv->overlap = f->overlap;
    if (c->serve_set & SIM_SERVE_DENSE_TP) sv->dense_tp = f->dense_tp == g ? 0 : f->dense_tp;
    if (c->serve_set & SIM_SERVE_REDUNDANT) sv->redundant_experts = f->redundant_experts;
    /* LoRA: priced when the trace names adapters (or --enable-lora), at the
     * rank given, else the trace's, else vLLM's default 16 */
    sv->lora_slots = c->core.max_loras_per_batch;
    sv->lora_targets = f->lora_targets;
    if (c->serve_set & SIM_SERVE_LORA_RANK) sv->lora_rank = f->lora_rank;
    else if (c->trace_adapters || c->core.enable_lora) sv->lora_rank = c->lora_rank_header ? c->lora_rank_header : 16;
    sv->hicache = c->core.enable_hierarchical_cache;
    sv->storage_Bps = c->storage_Bps;
    sv->storage_latency_s = c->storage_latency_s;
    if (sv->deepep && sv->dp <= 1)
        return rh_fail(e, "--moe-a2a-backend deepep moves each attention group's tokens to the experts: it needs "
                          "--enable-dp-attention");
    return cost_serving_check(cost, c->tp, sv, e);
}
