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
 * steps: 4096 slots kept a quarter of the repeats, 65536 over half. The
 * table is reserved whole (6.5 MiB, untouched) and used from its start,
 * doubling in place while it misses: a short run touches, and pays the
 * page faults of, only the slots it can fill. */
#define MEMO_FIRST_SLOTS 1024
#define MEMO_MAX_SLOTS 65536

/* Every input of cost_step_parts but the model, tp and serving (the memo's). */
typedef struct memo_key {
    uint64_t decode_context, prefill_context, prefill_attn, prefill_causal;
    uint32_t prefill_tokens, prefill_seqs, decode_seqs, decode_tokens;
    uint32_t draft_steps, draft_seqs, draft_width, used;   /* used: 1 in a filled slot */
    uint32_t lora_adapters, lora_tokens, lora_loads, load_tokens;
    uint32_t writeback_tokens, backup_tokens, storage_tokens, pad;
} memo_key;

struct cost_memo {
    uint32_t tp;
    const cost_serving *sv;
    uint32_t slots;          /* in use, a power of two: key[0, slots) */
    uint64_t misses;         /* since the table last grew */
    memo_key *key;           /* MEMO_MAX_SLOTS; used 0: empty */
    cost_parts *parts;       /* MEMO_MAX_SLOTS */
};

bool cost_prices_by_aggregates(const cost_model *m, uint32_t tp, const cost_serving *sv)
{
    return m->ops->by_aggregates && m->ops->by_aggregates(m, tp, sv);
}

cost_memo *cost_memo_new(const cost_model *m, uint32_t tp, const cost_serving *sv)
{
    if (!cost_prices_by_aggregates(m, tp, sv)) return NULL;
    cost_memo *memo = calloc(1, sizeof *memo);
    if (memo) {
        memo->key = calloc(MEMO_MAX_SLOTS, sizeof *memo->key);   /* zero pages until written */
        memo->parts = malloc(MEMO_MAX_SLOTS * sizeof *memo->parts);
    }
    if (!memo || !memo->key || !memo->parts) {
        cost_memo_free(memo);
        return NULL;
    }
    memo->tp = tp;
    memo->sv = sv;
    memo->slots = MEMO_FIRST_SLOTS;
    return memo;
}

void cost_memo_free(cost_memo *memo)
{
    if (!memo) return;
    free(memo->key), free(memo->parts);
    free(memo);
}

_Static_assert(sizeof(memo_key) == 96, "memo_key has no padding");

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
    k->lora_adapters = b->lora_adapters;
    k->lora_tokens = b->lora_tokens;
    k->lora_loads = b->lora_loads;
    k->load_tokens = b->load_tokens;
    k->writeback_tokens = b->writeback_tokens;
    k->backup_tokens = b->backup_tokens;
    k->storage_tokens = b->storage_tokens;
    k->used = 1;
}

static uint64_t hash_of(const memo_key *k)
{
    uint64_t w[10], h = 0;
    memcpy(w, k, sizeof w);
    for (int i = 0; i < 10; i++) h = rh_mix64(h ^ w[i]);
    return h;
}

/* Twice the slots, in place: a shape in slot i moves to i + old when the
 * new bit of its hash says so, into the half never used before. */
static void grow(cost_memo *memo)
{
    uint32_t old = memo->slots;
    memo->slots = old * 2;
    memo->misses = 0;
    for (uint32_t i = 0; i < old; i++) {
        if (!memo->key[i].used) continue;
        uint32_t s = (uint32_t)hash_of(&memo->key[i]) & (memo->slots - 1);
        if (s == i) continue;
        memo->key[s] = memo->key[i];
        memo->parts[s] = memo->parts[i];
        memset(&memo->key[i], 0, sizeof memo->key[i]);
    }
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
    if (++memo->misses > memo->slots / 2 && memo->slots < MEMO_MAX_SLOTS) {
        grow(memo);
        s = (uint32_t)h & (memo->slots - 1);
    }
    memo->key[s] = k;
    memo->parts[s] = *p;
    return total;
}
