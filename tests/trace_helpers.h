/* trace_helpers.h — shared by the test_trace*.c suites: random records that
 * exercise every field and encoding path, and field-by-field comparison. */
#ifndef RH_TESTS_TRACE_HELPERS_H
#define RH_TESTS_TRACE_HELPERS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"
#include "util/rng.h"
#include "traces/trace.h"

static inline int th_same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* Prints the first differing field; 1 when equal. */
static inline int th_req_equal(const tr_request *a, const tr_request *b)
{
#define TH_KEY a->id
#define TH_F(f)                                                                                     \
    if (a->f != b->f) {                                                                             \
        printf("\n    record %llu: field " #f " differs: %llu vs %llu\n", (unsigned long long)TH_KEY, \
               (unsigned long long)a->f, (unsigned long long)b->f);                                 \
        return 0;                                                                                   \
    }
#define TH_D(f)                                                                                        \
    if (!th_same_double(a->f, b->f)) {                                                                 \
        printf("\n    record %llu: field " #f " differs: %.17g vs %.17g\n", (unsigned long long)TH_KEY, a->f, \
               b->f);                                                                                  \
        return 0;                                                                                      \
    }
    TH_F(id) TH_D(arrival) TH_F(input_len) TH_F(output_len) TH_F(session_id) TH_F(turn) TH_F(flags) TH_F(priority) TH_F(adapter) TH_F(n_hashes)
    TH_D(ttft) TH_D(e2e) TH_F(cached_tokens) TH_F(cached_host) TH_F(cached_storage) TH_F(spec_proposed) TH_F(spec_accepted) TH_F(retractions) TH_F(finish)
    TH_F(n_times)
    for (uint32_t i = 0; i < a->n_hashes; i++) TH_F(hashes[i])
    for (uint32_t i = 0; i < a->n_times; i++) TH_D(token_times[i])
    return 1;
}

static inline int th_step_equal(const tr_step *a, const tr_step *b)
{
#undef TH_KEY
#define TH_KEY a->index
    TH_F(index) TH_D(start) TH_D(duration) TH_F(prefill_tokens) TH_F(prefill_seqs) TH_F(decode_seqs)
    TH_F(decode_tokens) TH_F(prefill_context) TH_F(prefill_attn) TH_F(decode_context) TH_F(spec_proposed)
    TH_F(spec_accepted) TH_F(pages_used) TH_F(pages_total) TH_F(waiting) TH_F(running) TH_F(retractions) TH_F(adapters) TH_F(adapter_loads) TH_F(adapter_tokens)
    TH_F(hicache_load_tokens) TH_F(hicache_writeback_tokens) TH_F(hicache_backup_tokens) TH_F(hicache_storage_tokens)
    TH_F(finished) TH_D(sched_time) TH_F(flags)
    return 1;
#undef TH_F
#undef TH_D
#undef TH_KEY
}

/* Times that take every path of the time encoding: whole ns, us and ms,
 * negative deltas, values that are not whole ns, -0.0, huge values. */
static inline double th_time(rh_rng *r, double around)
{
    switch (rh_rng_below(r, 10)) {
    case 0: return around + (double)rh_rng_below(r, 1000) / 1e3;          /* ms */
    case 1: return around + (double)rh_rng_below(r, 1000000) / 1e6;       /* us */
    case 2: return around + rh_rng_uniform(r);                             /* arbitrary */
    case 3: return -0.0;
    case 4: return around - rh_rng_uniform(r) * 5;                         /* going back */
    case 5: return rh_rng_uniform(r) * 1e12;                               /* beyond the ns range */
    case 6: return 1e-300 * rh_rng_uniform(r);                             /* subnormal-ish */
    default: return tr_round_ns(around + rh_rng_uniform(r));               /* whole ns */
    }
}

/* A random valid request; arrays live in the caller's buffers. */
static inline void th_random_request(rh_rng *r, uint64_t id, double t, uint32_t block_size, tr_request *q,
                                     uint64_t *hashes, double *times)
{
    memset(q, 0, sizeof *q);
    q->id = rh_rng_below(r, 20) ? id : rh_rng_u64(r);
    q->arrival = th_time(r, t);
    q->input_len = (uint32_t)rh_rng_below(r, 20) ? (uint32_t)rh_rng_below(r, 9000) : TR_MAX_TOKENS;
    q->output_len = (uint32_t)rh_rng_below(r, 600);
    if (rh_rng_below(r, 3) == 0) {
        q->session_id = rh_rng_below(r, 4) ? 1 + rh_rng_below(r, 50) : rh_rng_u64(r);
        q->turn = (uint32_t)rh_rng_below(r, 10);
    }
    if (rh_rng_below(r, 4) == 0) q->flags = (uint32_t)rh_rng_u64(r);
    /* a priority for one request in four, either sign, from the id (no draw:
     * the records the generator gave before priorities existed stay as they were) */
    if (rh_hash64(q->id) % 4 == 0) q->priority = (int32_t)(uint32_t)(rh_hash64(q->id) >> 16);
    /* an adapter for one in three, from the id too: small ids, and now and then the largest */
    uint64_t ha = rh_hash64(q->id ^ 0xada);
    if (ha % 3 == 0) q->adapter = ha % 7 == 0 ? UINT32_MAX : 1 + (uint32_t)(ha >> 40) % 1000;
    uint32_t max = tr_blocks(q->input_len, block_size);
    if (max && rh_rng_below(r, 4)) {
        uint32_t n = (uint32_t)rh_rng_below(r, max < 64 ? max : 64) + 1;
        uint64_t h = rh_rng_below(r, 3) ? rh_rng_below(r, 1000) : rh_rng_u64(r);
        for (uint32_t i = 0; i < n; i++) {
            hashes[i] = h;
            /* mostly runs, sometimes jumps (including wrap-around) */
            h = rh_rng_below(r, 5) ? h + 1 : (rh_rng_below(r, 2) ? rh_rng_u64(r) : h - rh_rng_below(r, 100));
        }
        q->n_hashes = n;
        q->hashes = hashes;
    }
    if (rh_rng_below(r, 3) == 0) {
        q->flags |= TR_REQ_MEASURED;
        q->ttft = th_time(r, 0.2);
        q->e2e = th_time(r, 3);
        q->cached_tokens = (uint32_t)rh_rng_below(r, 5000);
        /* of which loaded from the host tier, for half of them (from the id: no draw) */
        if (q->cached_tokens && rh_hash64(q->id ^ 0x41c) % 2) q->cached_host = (uint32_t)(rh_hash64(q->id) % (q->cached_tokens + 1));
        if (q->cached_host && rh_hash64(q->id ^ 0x5d) % 2) q->cached_storage = (uint32_t)(rh_hash64(q->id >> 3) % (q->cached_host + 1));
        q->spec_proposed = (uint32_t)rh_rng_below(r, 300);
        q->spec_accepted = (uint32_t)rh_rng_below(r, 300);
        q->retractions = (uint32_t)rh_rng_below(r, 3);
        q->finish = (uint8_t)rh_rng_below(r, 5);
        uint32_t n = q->output_len < 100 ? q->output_len : 100;
        double tt = 0;
        for (uint32_t i = 0; i < n; i++) times[i] = (tt = th_time(r, tt + 0.02));
        q->n_times = n;
        q->token_times = n ? times : NULL;
    }
}

static inline void th_random_step(rh_rng *r, uint64_t index, double t, tr_step *s)
{
    memset(s, 0, sizeof *s);
    s->index = rh_rng_below(r, 20) ? index : rh_rng_below(r, 1000000);
    s->start = th_time(r, t);
    s->duration = th_time(r, 0.03);
    s->prefill_tokens = (uint32_t)rh_rng_below(r, 16384);
    s->prefill_seqs = (uint32_t)rh_rng_below(r, 8);
    s->decode_seqs = (uint32_t)rh_rng_below(r, 256);
    s->decode_tokens = s->decode_seqs * (1 + (uint32_t)rh_rng_below(r, 4));
    s->prefill_context = rh_rng_below(r, 1u << 30);
    s->prefill_attn = rh_rng_u64(r);
    s->decode_context = rh_rng_below(r, 1u << 30);
    if (rh_rng_below(r, 3) == 0) {
        s->spec_proposed = (uint32_t)rh_rng_below(r, 1000);
        s->spec_accepted = (uint32_t)rh_rng_below(r, 1000);
    }
    s->pages_used = (uint32_t)rh_rng_u64(r);
    s->pages_total = rh_rng_below(r, 10) ? 100000 : (uint32_t)rh_rng_u64(r);
    s->waiting = (uint32_t)rh_rng_below(r, 1000);
    s->running = (uint32_t)rh_rng_below(r, 256);
    s->retractions = rh_rng_below(r, 5) ? 0 : (uint32_t)rh_rng_below(r, 10);
    s->finished = (uint32_t)rh_rng_below(r, 10);
    if (rh_rng_below(r, 2)) s->sched_time = th_time(r, 0.001);
    if (rh_rng_below(r, 4) == 0) s->flags = TR_STEP_SCHED_HIDDEN;
    /* LoRA counts from the index (no draw, as the priority above) */
    if (rh_hash64(s->index ^ 0x10a) % 3 == 0) {
        s->adapters = 1 + (uint32_t)(rh_hash64(s->index) % 64);
        s->adapter_loads = (uint32_t)(rh_hash64(s->index) >> 32) % (s->adapters + 1);
        s->adapter_tokens = (uint32_t)(rh_hash64(s->index) >> 8) % 100000;
    }
    /* host-tier counts, alone or beside LoRA's */
    if (rh_hash64(s->index ^ 0x41c) % 3 == 0) {
        s->hicache_load_tokens = (uint32_t)(rh_hash64(s->index ^ 1) % 70000);
        s->hicache_writeback_tokens = (uint32_t)(rh_hash64(s->index ^ 2) % 3) * 16;
        s->hicache_backup_tokens = rh_hash64(s->index ^ 3) % 5 ? UINT32_MAX : 0;
        s->hicache_storage_tokens = (uint32_t)(rh_hash64(s->index ^ 4) % 3) * 256;
    }
}

/* Reads a whole file into memory (tests only). */
static inline char *th_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[len] = '\0';
    fclose(f);
    if (n) *n = (size_t)len;
    return buf;
}

#endif
