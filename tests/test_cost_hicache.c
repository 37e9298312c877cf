/* test_cost_hicache.c — the host tier's copies in the roofline and the
 * simulator: a load-back's exposed time against its closed form
 * t_l + (L - 1)·max(0, t_l - t_c) when the copies keep pace with the layers
 * and when they do not, a write-back the step waits for whole, kinds that
 * cannot price copies refusing the tier, and a multi-turn simulation whose
 * GPU pool loses earlier turns: the tier turns recomputed tokens into
 * loaded ones, the steps' loads add up to the requests' host hits, and TTFT
 * falls. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/batch_spec.h"
#include "sim/cost/cost.h"
#include "sim/cost/roofline.h"
#include "sim/sim.h"
#include "cost_helpers.h"
#include "testutil.h"
#include "traces/tools/synth.h"


static double step_of(const cost_model *m, const char *spec, double *forward)
{
    static cost_seq seqs[512];
    cost_batch b;
    rh_err e;
    if (cost_batch_parse(spec, seqs, 512, &b, &e) < 0) {
        printf("\n  %s\n", e.msg);
        CU_FAIL("batch");
        return NAN;
    }
    cost_parts p;
    double t = cost_step_parts(m, &b, &p);
    if (forward) *forward = p.forward_s;
    return t;
}

/* Llama-3-8B's KV: 2 x 8 heads x 128 x 32 layers x 2 bytes = 131,072 bytes
 * a token, 4,096 a layer. Over the h100-sxm preset's 55.6 GB/s host link. */
static void test_load_back_closed_form(void)
{
    cost_model *m = ch_llama8b();
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_memory mem;
    CU_ASSERT_FATAL(cost_memory_of(m, 1, &mem));
    NEAR(mem.kv_bytes_per_token, 131072, 1e-15);
    double link = roofline_gpu(m)->host_link_GBps * 1e9, L = roofline_model(m)->layers;
    CU_ASSERT_EQUAL(L, 32);
    /* A long chunk loads 8k tokens: each layer's copy (19 us a token-k) is
     * under its compute, so only the first layer's copy shows. */
    const char *specs[][2] = {{"prefill=4096@8192", "prefill=4096@8192,load_back=8192"},
                              /* a short chunk behind a long host hit: the copies set the pace */
                              {"prefill=64@60000", "prefill=64@60000,load_back=60000"}};
    double tokens[] = {8192, 60000};
    for (int i = 0; i < 2; i++) {
        double fw, without = step_of(m, specs[i][0], &fw), with = step_of(m, specs[i][1], NULL);
        double t_l = tokens[i] * 131072 / L / link, t_c = fw / L;
        double want = t_l + (L - 1) * fmax(0, t_l - t_c);
        NEAR(with - without, want, 1e-9);
        CU_ASSERT(i == 0 ? t_l < t_c : t_l > 2 * t_c);
    }
    /* write_back: the eviction waited for every byte */
    double plain = step_of(m, "prefill=512", NULL), waited = step_of(m, "prefill=512,write_back=4096", NULL);
    NEAR(waited - plain, 4096.0 * 131072 / link, 1e-9);
    cost_free(m);
}

/* Pages fetched from storage land in host memory before their load: the
 * step waits for the fetch's latency and bytes over the storage link. */
static void test_storage_fetch(void)
{
    cost_model *m = ch_llama8b();
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cost_serving sv;
    cost_serving_default(m, 0, &sv);
    sv.hicache = true;
    sv.storage_Bps = 18.11e9, sv.storage_latency_s = 18.13e-6;
    static cost_seq seqs[4];
    cost_batch b;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(cost_batch_parse("prefill=512@8192,load_back=8192", seqs, 4, &b, &e), 0);
    b.serving = &sv;
    double host = cost_step_time(m, &b);
    b.storage_tokens = 4096;
    NEAR(cost_step_time(m, &b) - host, 18.13e-6 + 4096.0 * 131072 / 18.11e9, 1e-9);
    CU_ASSERT_EQUAL(cost_batch_parse("prefill=512,load_back=16,storage=32", seqs, 4, &b, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "storage=32"));
    cost_free(m);
}

static void test_kinds_refuse(void)
{
    rh_err e;
    cost_model *lin = cost_parse("{\"kind\": \"linear\", \"version\": 1, \"base_s\": 0.004, \"per_prefill_token_s\": 2e-5, "
                                 "\"per_decode_seq_s\": 1e-4, \"per_context_token_s\": 1e-8, \"per_attention_s\": 1e-10}",
                                 "linear.json", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lin);
    cost_serving sv;
    cost_serving_default(lin, 0, &sv);
    CU_ASSERT_EQUAL(cost_serving_check(lin, 0, &sv, &e), 0);
    sv.hicache = true;
    CU_ASSERT_EQUAL(cost_serving_check(lin, 0, &sv, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--enable-hierarchical-cache"));
    cost_free(lin);
}

/* 80 chats of 6 turns, each turn the chat so far and more (within
 * Llama-3-8B's 8k context), over a GPU pool of 20k tokens: most earlier
 * turns are evicted before the next arrives. */
static void chats(tr_trace *t)
{
    tr_synth_opts o;
    tr_synth_opts_init(&o);
    o.requests = 480;
    o.rate = 4;
    o.turns = 6;
    o.sessions = 80;
    o.input.mean = 700;
    o.output.mean = 100;
    rh_err e;
    tr_trace_init(t);
    tr_sink s = tr_trace_sink(t);
    CU_ASSERT_EQUAL_FATAL(tr_synth(&o, &s, &e), 0);
}

/* Both runs of a comparison; false (with the message) when one fails. */
static bool run_both(const sim_config *x, const sim_config *y, const tr_trace *t, const cost_model *m, sim_result *rx,
                     sim_result *ry)
{
    rh_err e;
    if (sim_run(x, t, m, rx, &e) == 0) {
        if (sim_run(y, t, m, ry, &e) == 0) return true;
        sim_result_free(rx);
    }
    printf("\n  sim_run: %s\n", e.msg);
    return false;
}

static void test_sim_multiturn(void)
{
    cost_model *m = ch_llama8b();
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    tr_trace t;
    chats(&t);
    sim_config c;
    sim_config_default(&c);
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "max-total-tokens", "20000", &e), 1);
    sim_config on = c;
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&on, "enable-hierarchical-cache", NULL, &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&on, "hicache-ratio", "8", &e), 1);
    sim_result off_r, on_r;
    CU_ASSERT_FATAL(run_both(&c, &on, &t, m, &off_r, &on_r));
    const metrics_summary *a = &off_r.summary, *b = &on_r.summary;
    CU_ASSERT_EQUAL(b->completed, 480);
    CU_ASSERT_FALSE(a->host_tier);
    CU_ASSERT(b->host_tier);
    /* the GPU keeps what it kept; the host adds what the GPU lost */
    CU_ASSERT(b->cache_hit_rate_host > 0.2);
    CU_ASSERT(b->cache_hit_rate > a->cache_hit_rate + 0.2);
    /* every load a step made is some request's host hit (first admissions;
     * a retracted request loads again) */
    CU_ASSERT(b->load_back_tokens >= b->cached_host);
    CU_ASSERT(b->retractions > 0 || b->load_back_tokens == b->cached_host);
    CU_ASSERT(b->backup_tokens > 0);          /* write_through */
    CU_ASSERT_EQUAL(b->write_back_tokens, 0);
    CU_ASSERT(b->ttft_ms.mean < a->ttft_ms.mean);
    sim_result_free(&off_r), sim_result_free(&on_r);
    tr_trace_free(&t);
    cost_free(m);
}

/* Two replicas behind round-robin: a chat's next turn often lands on the
 * other replica, whose GPU and host tier never saw the chat. A store both
 * share (Mooncake's) holds every page either wrote: those turns fetch their
 * prefix from it instead of recomputing it. */
static void test_sim_shared_store(void)
{
    cost_model *m = ch_llama8b();
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    tr_trace t;
    chats(&t);
    sim_config c;
    sim_config_default(&c);
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "max-total-tokens", "20000", &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "replicas", "2", &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "enable-hierarchical-cache", NULL, &e), 1);
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&c, "hicache-ratio", "8", &e), 1);
    sim_config store = c;
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&store, "hicache-storage-backend", "mooncake", &e), 1);
    sim_result a_r, b_r;
    CU_ASSERT_FATAL(run_both(&c, &store, &t, m, &a_r, &b_r));
    const metrics_summary *a = &a_r.summary, *b = &b_r.summary;
    CU_ASSERT_EQUAL(b->completed, 480);
    CU_ASSERT_EQUAL(a->cached_storage, 0);
    CU_ASSERT(b->cache_hit_rate_storage > 0.1);
    CU_ASSERT(b->cached_storage <= b->cached_host);
    CU_ASSERT(b->cache_hit_rate > a->cache_hit_rate + 0.1);
    CU_ASSERT(b->ttft_ms.mean < a->ttft_ms.mean);
    /* a store with no replica's host tier under it is refused, naming the flag */
    sim_config bare;
    sim_config_default(&bare);
    CU_ASSERT_EQUAL_FATAL(sim_config_set(&bare, "hicache-storage-backend", "mooncake", &e), 1);
    sim_result r;
    CU_ASSERT_EQUAL(sim_run(&bare, &t, m, &r, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--enable-hierarchical-cache"));
    CU_ASSERT_EQUAL(sim_config_set(&bare, "hicache-storage-backend", "3fs", &e), -1);
    CU_ASSERT_EQUAL(sim_config_set(&bare, "hicache-storage-prefetch-policy", "wait_complete", &e), 1);
    CU_ASSERT_EQUAL(sim_config_set(&bare, "hicache-storage-prefetch-policy", "best_effort", &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "only wait_complete"));
    sim_result_free(&a_r), sim_result_free(&b_r);
    tr_trace_free(&t);
    cost_free(m);
}

void register_test_cost_hicache(void)
{
    CU_pSuite s = CU_add_suite("cost_hicache", ch_presets_init, NULL);
    CU_add_test(s, "a load-back's exposed time against its closed form; a write-back waited for whole",
                test_load_back_closed_form);
    CU_add_test(s, "a fetch from storage: its latency and bytes over the storage link", test_storage_fetch);
    CU_add_test(s, "a kind that cannot price copies refuses the host tier", test_kinds_refuse);
    CU_add_test(s, "multi-turn chats: host hits replace recompute, loads add up, TTFT falls", test_sim_multiturn);
    CU_add_test(s, "two replicas sharing a store: turns routed away fetch their prefix", test_sim_shared_store);
}
