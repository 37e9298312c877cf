/* batch_spec.c — see batch_spec.h. */
#include "sim/cost/batch_spec.h"

#include <stdio.h>
#include <string.h>

#include "util/args.h"

#define MAX_TOKENS (1u << 24)   /* the trace format's bound on a length */

static int parse_count(const char *s, size_t len, const char *item, uint64_t max, uint64_t *out, rh_err *e)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf) return rh_fail(e, "--batch: '%s' needs a number", item);
    memcpy(buf, s, len);
    buf[len] = '\0';
    unsigned long long v;
    if (rh_parse_u64(buf, "--batch", &v, e) < 0) return -1;
    if (v > max) return rh_fail(e, "--batch: %llu in '%s' is above %llu", v, item, (unsigned long long)max);
    *out = v;
    return 0;
}

int cost_batch_parse(const char *spec, cost_seq *seqs, uint32_t max, cost_batch *b, rh_err *e)
{
    memset(b, 0, sizeof *b);
    b->seqs = seqs;
    uint64_t spec_k = 0, lora_k = 0, lora_loads = 0, hicache_load = 0, hicache_wb = 0, hicache_storage = 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[128];
        snprintf(item, sizeof item, "%.*s", (int)(len < 127 ? len : 127), p);
        const char *eq = memchr(p, '=', len);
        if (!eq) return rh_fail(e, "--batch: '%s' is not KEY=VALUE (prefill=N[@CTX][*COUNT], decode=N[@CTX], spec=K)", item);
        size_t klen = (size_t)(eq - p);
        const char *val = eq + 1, *star = memchr(val, '*', len - klen - 1);
        size_t rest = star ? (size_t)(star - val) : len - klen - 1;   /* VALUE[@CTX] before any *COUNT */
        const char *at = memchr(val, '@', rest);
        size_t vlen = at ? (size_t)(at - val) : rest;
        uint64_t n, ctx = 0, times = 1;
        if (parse_count(val, vlen, item, MAX_TOKENS, &n, e) < 0) return -1;
        if (at && parse_count(at + 1, rest - vlen - 1, item, 1u << 30, &ctx, e) < 0) return -1;
        if (star && parse_count(star + 1, len - klen - 2 - rest, item, 1u << 20, &times, e) < 0) return -1;
        if (klen == 4 && !memcmp(p, "spec", 4)) {
            if (at || star || n > 64) return rh_fail(e, "--batch: '%s': spec=K takes a draft count of at most 64", item);
            spec_k = n;
        } else if ((klen == 4 && !memcmp(p, "lora", 4)) || (klen == 5 && !memcmp(p, "loads", 5))) {
            if (at || star) return rh_fail(e, "--batch: '%s': lora=K and loads=N take a count", item);
            if (klen == 4) lora_k = n;
            else lora_loads = n;
        } else if ((klen == 9 && !memcmp(p, "load_back", 9)) || (klen == 10 && !memcmp(p, "write_back", 10)) ||
                   (klen == 7 && !memcmp(p, "storage", 7))) {
            if (at || star)
                return rh_fail(e, "--batch: '%s': load_back=N, storage=N and write_back=N take a token count", item);
            if (klen == 9) hicache_load = n;
            else if (klen == 7) hicache_storage = n;
            else hicache_wb = n;
        } else if ((klen == 7 && !memcmp(p, "prefill", 7)) || (klen == 6 && !memcmp(p, "decode", 6))) {
            bool prefill = klen == 7;
            uint64_t count = (prefill ? 1 : n) * times;
            if (n == 0) return rh_fail(e, "--batch: '%s' adds nothing", item);
            if (b->n + count > max) return rh_fail(e, "--batch: more than %u sequences", max);
            for (uint64_t i = 0; i < count; i++)
                seqs[b->n++] = (cost_seq){prefill ? (uint32_t)n : 1, (uint32_t)ctx, prefill};
        } else {
            return rh_fail(e, "--batch: unknown key in '%s' (prefill, decode, spec, lora, loads, load_back, storage, write_back)",
                           item);
        }
        p += len + (end ? 1 : 0);
    }
    if (b->n == 0) return rh_fail(e, "--batch: '%s' has no prefill or decode", spec);
    for (uint32_t i = 0; i < b->n; i++)
        if (!seqs[i].prefill) seqs[i].n_new = 1 + (uint32_t)spec_k;
    cost_batch_summarize(b);
    if (lora_loads > lora_k) return rh_fail(e, "--batch: loads=%llu is more than the lora=%llu adapters",
                                            (unsigned long long)lora_loads, (unsigned long long)lora_k);
    if (lora_k) {   /* every token under one of K adapters */
        b->lora_adapters = (uint32_t)lora_k;
        b->lora_loads = (uint32_t)lora_loads;
        b->lora_tokens = b->prefill_tokens + b->decode_tokens;
    }
    b->load_tokens = (uint32_t)hicache_load;
    b->writeback_tokens = (uint32_t)hicache_wb;
    if (hicache_storage > hicache_load)
        return rh_fail(e, "--batch: storage=%llu is more than the load_back=%llu tokens it is part of",
                       (unsigned long long)hicache_storage, (unsigned long long)hicache_load);
    b->storage_tokens = (uint32_t)hicache_storage;
    if (spec_k && b->decode_seqs) {
        b->draft_steps = (uint32_t)spec_k;
        b->draft_seqs = b->decode_seqs;
    }
    return 0;
}
