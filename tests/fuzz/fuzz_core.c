/* fuzz_core.c — the core under arbitrary call sequences: the input bytes
 * pick a configuration, then a stream of adds (with tokens, block hashes or
 * nothing), aborts (also while a batch is in flight) and steps whose results
 * may break the contract. Every call must return normally and core_check
 * must hold after each one; a violated invariant aborts the process so the
 * fuzzer keeps the input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"

typedef struct in {
    const uint8_t *p;
    size_t n;
} in;

static uint32_t take(in *s, uint32_t mod)
{
    uint32_t v = 0;
    for (int i = 0; i < 2 && s->n; i++, s->p++, s->n--) v = v << 8 | *s->p;
    return mod ? v % mod : v;
}

static void must_hold(core *c, const char *after)
{
    rh_err e;
    if (core_check(c, &e) < 0) {
        fprintf(stderr, "core_check after %s: %s\n", after, e.msg);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    in s = {data, size};
    core_config cfg;
    core_config_default(&cfg);
    static const uint32_t pages[] = {1, 4, 16};
    cfg.page_size = pages[take(&s, 3)];
    cfg.max_total_tokens = (uint64_t)cfg.page_size * (8 + take(&s, 200));
    cfg.preset = take(&s, 2) ? CORE_PRESET_VLLM : CORE_PRESET_SGLANG;
    cfg.policy = (core_policy)take(&s, 4);
    int32_t chunks[] = {-1, 16, 64, 100};
    cfg.chunked_prefill_size = chunks[take(&s, 4)];
    if (cfg.chunked_prefill_size > 0 && (uint32_t)cfg.chunked_prefill_size < cfg.page_size) cfg.chunked_prefill_size = -1;
    cfg.max_prefill_tokens = 1 + take(&s, 300);
    cfg.max_running_requests = 1 + take(&s, 16);
    cfg.spec_steps = take(&s, 4);
    cfg.spec_disable_batch_size = take(&s, 4);
    cfg.enable_mixed_chunk = take(&s, 2);
    cfg.disable_radix_cache = take(&s, 4) == 0;
    cfg.evict = take(&s, 2) ? CORE_EVICT_LFU : CORE_EVICT_LRU;
    cfg.schedule_conservativeness = take(&s, 4) * 0.5;
    rh_err e;
    core *c = core_new(&cfg, NULL, &e);
    if (!c) return 0;

    double now = 0;
    uint64_t next_id = 0;
    int32_t tokens[512];
    uint64_t hashes[32];
    core_seq_result res[64];
    int32_t out_tok[64][8];
    while (s.n) {
        switch (take(&s, 5)) {
        case 0: {
            core_req_desc d = {.id = next_id++, .prompt_len = take(&s, 512), .max_new_tokens = take(&s, 64)};
            switch (take(&s, 3)) {
            case 0:
                for (uint32_t i = 0; i < d.prompt_len && i < 512; i++) tokens[i] = (int32_t)(i < 64 ? i : take(&s, 4));
                if (d.prompt_len <= 512) d.prompt_tokens = tokens;
                break;
            case 1:
                d.n_block_hashes = take(&s, 32);
                d.block_size = take(&s, 3) * 16;
                for (uint32_t i = 0; i < d.n_block_hashes; i++) hashes[i] = take(&s, 3);
                d.block_hashes = hashes;
                break;
            default: break;
            }
            core_add(c, &d, now, &e);
            must_hold(c, "core_add");
            break;
        }
        case 1:
            core_abort(c, take(&s, (uint32_t)next_id + 1), now);
            must_hold(c, "core_abort");
            break;
        default: {
            core_batch b;
            uint32_t n = core_schedule(c, now, &b);
            must_hold(c, "core_schedule");
            if (!n) {
                if (!core_idle(c)) abort();   /* an empty batch only when idle */
                break;
            }
            if (take(&s, 8) == 0) {
                core_abort(c, b.seqs[take(&s, n)].id, now);
                must_hold(c, "core_abort in flight");
            }
            for (uint32_t i = 0; i < n && i < 64; i++) {
                res[i] = (core_seq_result){.proposed = take(&s, 4), .accepted = take(&s, 4), .stop = take(&s, 16) == 0};
                for (int k = 0; k < 8; k++) out_tok[i][k] = (int32_t)take(&s, 0);
                res[i].tokens = take(&s, 2) ? out_tok[i] : NULL;
                if (res[i].accepted > 7) res[i].accepted = 7;
            }
            now += 0.01;
            if (n > 64 || core_complete(c, &b, res, now, &e) < 0) core_complete(c, &b, NULL, now, &e);
            must_hold(c, "core_complete");
            break;
        }
        }
    }
    core_free(c);
    return 0;
}
