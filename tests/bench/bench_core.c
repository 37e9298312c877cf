/* bench_core.c — how fast the scheduler core is.
 *
 *   step/decode256   schedule + complete of a pure decode step with 256
 *                    running requests in a one-million-page pool (target
 *                    <= 20 us per step on one core)
 *   step/churn       the same pool and 256 slots with requests finishing and
 *                    arriving all the time: admission, prefill steps, cache
 *                    inserts and evictions included (sglang and vllm presets,
 *                    and with 3 draft slots)
 *   radix            prefix-cache match + insert of page keys in a
 *                    one-million-page pool under eviction (target >= 5
 *                    million keys per second)
 * Prints a table and writes reports/bench/core.json. Each figure is the
 * best of 3 runs: the machine is shared, so the best is the least noisy. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/core/core.h"
#include "engine/core/kv.h"
#include "util/progress.h"

#define POOL_PAGES (1u << 20)
#define REPEATS 3

typedef struct counter {
    uint64_t events, steps, tokens;
} counter;

static void on_event(void *ctx, const core_event *ev)
{
    counter *k = ctx;
    k->events++;
    if (ev->kind == CORE_EV_TOKENS) k->tokens += ev->n_tokens;
}

static void on_step(void *ctx, const tr_step *s)
{
    counter *k = ctx;
    k->steps += s->decode_seqs > 0;
}

static uint64_t rng_state = 12345;
static uint64_t rnd(void)
{
    uint64_t x = (rng_state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static core *new_core(core_preset preset, uint32_t spec, counter *k)
{
    core_config cfg;
    core_config_default(&cfg);
    cfg.total_pages = POOL_PAGES;
    cfg.max_running_requests = 256;
    cfg.preset = preset;
    cfg.spec_steps = spec;
    core_hooks hooks = {.ctx = k, .on_event = on_event, .on_step = on_step};
    rh_err e;
    core *c = core_new(&cfg, &hooks, &e);
    if (!c) {
        fprintf(stderr, "bench_core: %s\n", e.msg);
        exit(1);
    }
    return c;
}

static void add(core *c, uint64_t id, uint32_t prompt, uint32_t max_new, const uint64_t *hashes, uint32_t nh)
{
    core_req_desc d = {.id = id, .prompt_len = prompt, .max_new_tokens = max_new, .block_hashes = hashes,
                       .n_block_hashes = nh, .block_size = 512};
    rh_err e;
    if (!core_add(c, &d, 0, &e)) {
        fprintf(stderr, "bench_core: %s\n", e.msg);
        exit(1);
    }
}

static void step(core *c, double now, const core_seq_result *res)
{
    core_batch b;
    if (!core_schedule(c, now, &b)) return;
    rh_err e;
    if (core_complete(c, &b, res, now, &e) < 0) {
        fprintf(stderr, "bench_core: %s\n", e.msg);
        exit(1);
    }
}

/* 256 requests decoding for `steps` steps (they are long enough never to
 * finish, and fit the pool); returns us per step. */
static double bench_decode(uint64_t steps, rh_progress *pg)
{
    counter k = {0};
    core *c = new_core(CORE_PRESET_SGLANG, 0, &k);
    for (uint64_t i = 0; i < 256; i++) add(c, i, 1000 + (uint32_t)(rnd() % 1000), 60000, NULL, 0);
    double now = 0;
    while (k.steps == 0) step(c, now++, NULL);   /* prefills */
    double t0 = rh_now();
    for (uint64_t s = 0; s < steps; s++) {
        step(c, now++, NULL);
        if ((s & 1023) == 0) rh_progress_update(pg, pg->done + 1024);
    }
    double dt = rh_now() - t0;
    core_stats st;
    core_get_stats(c, &st);
    if (st.running != 256) fprintf(stderr, "bench_core: %u running, expected 256\n", st.running);
    core_free(c);
    return dt / (double)steps * 1e6;
}

/* Requests with 200..2000 output tokens, Mooncake-like block hashes sharing
 * a few system prompts, arrivals keeping 256 running and a short queue. */
static double bench_churn(core_preset preset, uint32_t spec, uint64_t steps, uint64_t *tokens_out, rh_progress *pg)
{
    counter k = {0};
    core *c = new_core(preset, spec, &k);
    uint64_t hashes[64], id = 0;
    core_seq_result res[300];
    double now = 0, t0 = rh_now();
    for (uint64_t s = 0; s < steps; s++) {
        core_stats st;
        core_get_stats(c, &st);
        while (st.waiting + st.running < 300) {
            uint32_t prompt = 200 + (uint32_t)(rnd() % 4000), nh = (prompt + 511) / 512;
            uint64_t sys = rnd() % 8;
            for (uint32_t h = 0; h < nh; h++) hashes[h] = h < 3 ? sys * 100 + h : rnd();
            add(c, id++, prompt, 200 + (uint32_t)(rnd() % 1800), hashes, nh);
            st.waiting++;
        }
        if (spec) {
            core_batch b;
            uint32_t n = core_schedule(c, now, &b);
            for (uint32_t i = 0; i < n; i++) {
                res[i] = (core_seq_result){0};
                res[i].proposed = b.seqs[i].n_spec;
                res[i].accepted = b.seqs[i].n_spec ? (uint32_t)(rnd() % (b.seqs[i].n_spec + 1)) : 0;
            }
            rh_err e;
            if (n && core_complete(c, &b, res, now, &e) < 0) {
                fprintf(stderr, "bench_core: %s\n", e.msg);
                exit(1);
            }
        } else {
            step(c, now, NULL);
        }
        now += 1;
        if ((s & 1023) == 0) rh_progress_update(pg, pg->done + 1024);
    }
    double dt = rh_now() - t0;
    *tokens_out = k.tokens;
    core_free(c);
    return dt / (double)steps * 1e6;
}

/* Match + insert through the pool: requests share one of 64 system prompts
 * (64 pages) and add 64 pages of their own; every page is released at once
 * so the cache fills and evicts. Returns million page keys per second. */
static double bench_radix(uint64_t requests, uint64_t *keys_out, rh_progress *pg)
{
    kv_pool kv;
    rh_err e;
    if (kv_init(&kv, POOL_PAGES, 16, KV_LRU, &e) < 0) {
        fprintf(stderr, "bench_core: %s\n", e.msg);
        exit(1);
    }
    enum { SYS = 64, OWN = 64, LEN = SYS + OWN };
    uint64_t *keys = malloc((size_t)requests * LEN * sizeof *keys);
    for (uint64_t r = 0; r < requests; r++) {   /* chain keys, built outside the timed loop */
        uint64_t prev = 0, sys = rnd() % 64;
        for (uint32_t i = 0; i < LEN; i++) {
            uint64_t in[2] = {prev, i < SYS ? sys * 1000 + i : rnd()};
            keys[r * LEN + i] = prev = XXH64(in, sizeof in, 1);
        }
    }
    uint32_t pages[LEN];
    uint64_t n_keys = 0;
    double t0 = rh_now();
    for (uint64_t r = 0; r < requests; r++) {
        const uint64_t *k = keys + r * LEN;
        uint32_t parent = KV_NONE, m = 0;
        for (; m < LEN; m++) {
            uint32_t p = kv_lookup(&kv, k[m], parent);
            if (p == KV_NONE) break;
            kv_hold(&kv, p);
            pages[m] = p;
            parent = p;
        }
        if (kv_alloc(&kv, LEN - m, pages + m) < 0) {
            fprintf(stderr, "bench_core: pool exhausted\n");
            exit(1);
        }
        for (uint32_t i = m; i < LEN; i++) {
            kv_insert(&kv, pages[i], k[i], parent);
            parent = pages[i];
        }
        for (uint32_t i = 0; i < LEN; i++) kv_release(&kv, pages[i]);
        n_keys += LEN;
        if ((r & 4095) == 0) rh_progress_update(pg, pg->done + 4096);
    }
    double dt = rh_now() - t0;
    *keys_out = kv.evicted;
    free(keys);
    kv_destroy(&kv);
    return (double)n_keys / dt / 1e6;
}

static double best_min(double a, double b) { return a < b ? a : b; }
static double best_max(double a, double b) { return a > b ? a : b; }

int main(void)
{
    const uint64_t decode_steps = 50000, churn_steps = 20000, radix_requests = 200000;
    rh_progress pg;
    rh_progress_begin(&pg, "bench core", REPEATS * (decode_steps + 3 * churn_steps + radix_requests));
    double decode = 1e9, churn = 1e9, churn_v = 1e9, churn_s = 1e9, radix = 0;
    uint64_t tok = 0, tok_v = 0, tok_s = 0, evicted = 0;
    for (int r = 0; r < REPEATS; r++) {
        decode = best_min(decode, bench_decode(decode_steps, &pg));
        churn = best_min(churn, bench_churn(CORE_PRESET_SGLANG, 0, churn_steps, &tok, &pg));
        churn_v = best_min(churn_v, bench_churn(CORE_PRESET_VLLM, 0, churn_steps, &tok_v, &pg));
        churn_s = best_min(churn_s, bench_churn(CORE_PRESET_SGLANG, 3, churn_steps, &tok_s, &pg));
        radix = best_max(radix, bench_radix(radix_requests, &evicted, &pg));
    }
    rh_progress_end(&pg);

    printf("core benchmark (best of %d; shared machine, expect +-20%% noise)\n", REPEATS);
    printf("  %-44s %10s %10s %8s\n", "case", "measured", "target", "ok");
    printf("  %-44s %7.2f us %7.2f us %8s\n", "step: 256 decoding, 1M-page pool (sglang)", decode, 20.0,
           decode <= 20.0 ? "yes" : "NO");
    printf("  %-44s %7.1f ns\n", "  per decode sequence", decode * 1000 / 256);
    printf("  %-44s %7.2f us   (%llu tokens)\n", "step: churn, 256 slots (sglang)", churn, (unsigned long long)tok);
    printf("  %-44s %7.2f us   (%llu tokens)\n", "step: churn, 256 slots (vllm)", churn_v, (unsigned long long)tok_v);
    printf("  %-44s %7.2f us   (%llu tokens)\n", "step: churn, 256 slots, 3 draft slots", churn_s,
           (unsigned long long)tok_s);
    printf("  %-44s %7.2f M/s %7.2f M/s %8s\n", "radix match + insert, page keys", radix, 5.0, radix >= 5.0 ? "yes" : "NO");
    printf("  %-44s %7llu\n", "  pages evicted in the last radix run", (unsigned long long)evicted);

    json_t *j = json_pack("{s:s, s:i, s:{s:f, s:f, s:f}, s:{s:f, s:f, s:f}, s:{s:f, s:f, s:I}}", "bench", "core",
                          "repeats", REPEATS, "decode_step", "us_per_step", decode, "ns_per_sequence",
                          decode * 1000 / 256, "target_us", 20.0, "churn_step", "sglang_us", churn, "vllm_us", churn_v,
                          "sglang_spec3_us", churn_s, "radix", "million_keys_per_s", radix, "target_million_keys_per_s",
                          5.0, "evicted_pages", (json_int_t)evicted);
    if (!j || json_dump_file(j, "reports/bench/core.json.tmp", JSON_INDENT(2)) < 0 ||
        rename("reports/bench/core.json.tmp", "reports/bench/core.json") < 0) {
        fprintf(stderr, "bench_core: cannot write reports/bench/core.json\n");
        json_decref(j);
        return 1;
    }
    json_decref(j);
    printf("  wrote reports/bench/core.json\n");
    return 0;
}
