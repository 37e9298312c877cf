/* cost_memo.c — step prices remembered by the batch's aggregates: see
 * cost.h. Only for a model that says its prices are a function of them: a
 * model drawing noise per step would otherwise repeat its first draw. A direct-mapped table: each shape has one slot, a new shape
 * takes it over. Keys are compared whole, so a hit is always the same
 * shape and the parts are the model's own, bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost.h"
#include "util/hash.h"

/* Powers of two. Light load on unique prompts makes ~72k shapes in 230k
 * steps: 4096 slots kept a quarter of the repeats, 65536 over half. A memo
 * starts small and doubles while it misses: each slot is 104 bytes, and a
 * short run should not pay the page faults of a big table it cannot fill. */
#define MEMO_FIRST_SLOTS 1024
#define MEMO_MAX_SLOTS 65536

/* Every input of cost_step_parts but the model, tp and serving (the memo's). */
typedef struct memo_key {
    uint64_t decode_context, prefill_context, prefill_attn, prefill_causal;
    uint32_t prefill_tokens, prefill_seqs, decode_seqs, decode_tokens;
    uint32_t draft_steps, draft_seqs, draft_width, used;   /* used: 1 in a filled slot */
} memo_key;

struct cost_memo {
    uint32_t tp;
    const cost_serving *sv;
    uint32_t slots;          /* a power of two */
    uint64_t misses;         /* since the table last grew */
    memo_key *key;           /* per slot; used 0: empty */
    cost_parts *parts;       /* per slot */
};

bool cost_prices_by_aggregates(const cost_model *m, uint32_t tp, const cost_serving *sv)
{
    return m->ops->by_aggregates && m->ops->by_aggregates(m, tp, sv);
}

static int alloc_slots(cost_memo *memo, uint32_t slots)
{
    memo_key *key = calloc(slots, sizeof *key);
    cost_parts *parts = malloc(slots * sizeof *parts);
    if (!key || !parts) {
        free(key), free(parts);
        return -1;
    }
    memo->key = key;
    memo->parts = parts;
    memo->slots = slots;
    memo->misses = 0;
    return 0;
}

cost_memo *cost_memo_new(const cost_model *m, uint32_t tp, const cost_serving *sv)
{
    if (!cost_prices_by_aggregates(m, tp, sv)) return NULL;
    cost_memo *memo = calloc(1, sizeof *memo);
    if (!memo || alloc_slots(memo, MEMO_FIRST_SLOTS) < 0) {
        free(memo);
        return NULL;
    }
    memo->tp = tp;
    memo->sv = sv;
    return memo;
}

void cost_memo_free(cost_memo *memo)
{
    if (!memo) return;
    free(memo->key), free(memo->parts);
    free(memo);
}

_Static_assert(sizeof(memo_key) == 64, "memo_key has no padding");

static void key_of(const cost_batch *b, memo_key *k)
{
    memset(k, 0, sizeof *k);   /* no padding, but whole keys are compared */
    k->decode_context = b->decode_context;
    k->prefill_context = b->prefill_context;
    k->prefill_attn = b->prefill_attn;
    k->prefill_causal = b->prefill_causal;
    k->prefill_tokens = b->prefill_tokens;
    k->prefill_seqs = b->prefill_seqs;
    k->decode_seqs = b->decode_seqs;
    k->decode_tokens = b->decode_tokens;
    k->draft_steps = b->draft_steps;
    k->draft_seqs = b->draft_seqs;
    k->draft_width = b->draft_width;
    k->used = 1;
}

static uint64_t hash_of(const memo_key *k)
{
    uint64_t w[8], h = 0;
    memcpy(w, k, sizeof w);
    for (int i = 0; i < 8; i++) h = rh_mix64(h ^ w[i]);
    return h;
}

/* Twice the slots, the shapes kept (two that meet in a slot: the later). */
static void grow(cost_memo *memo)
{
    memo_key *key = memo->key;
    cost_parts *parts = memo->parts;
    uint32_t old = memo->slots;
    if (alloc_slots(memo, old * 2) < 0) {   /* out of memory: stays as it is */
        memo->misses = 0;
        return;
    }
    for (uint32_t i = 0; i < old; i++)
        if (key[i].used) {
            uint32_t s = (uint32_t)hash_of(&key[i]) & (memo->slots - 1);
            memo->key[s] = key[i];
            memo->parts[s] = parts[i];
        }
    free(key), free(parts);
}

double cost_memo_parts(cost_memo *memo, const cost_model *m, const cost_batch *b, cost_parts *p)
{
    if (!memo || b->tp != memo->tp || b->serving != memo->sv) return cost_step_parts(m, b, p);
    memo_key k;
    key_of(b, &k);
    uint64_t h = hash_of(&k);
    uint32_t s = (uint32_t)h & (memo->slots - 1);
    if (!memcmp(&memo->key[s], &k, sizeof k)) {
        *p = memo->parts[s];
        return p->forward_s + p->draft_s + p->launch_s + p->exposed_s + p->hidden_s;   /* cost_step_parts' sum */
    }
    double total = cost_step_parts(m, b, p);
    if (++memo->misses > 2 * (uint64_t)memo->slots && memo->slots < MEMO_MAX_SLOTS) {
        grow(memo);
        s = (uint32_t)h & (memo->slots - 1);
    }
    memo->key[s] = k;
    memo->parts[s] = *p;
    return total;
}
