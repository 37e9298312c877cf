/* cost_memo.c — step prices remembered by the batch's aggregates: see
 * cost.h. A direct-mapped table: each shape has one slot, a new shape
 * takes it over. Keys are compared whole, so a hit is always the same
 * shape and the parts are the model's own, bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost.h"
#include "util/hash.h"

/* A power of two. Light load on unique prompts makes ~72k shapes in 230k
 * steps; 4096 slots kept a quarter of the repeats, 65536 over half. */
#define MEMO_SLOTS 65536   /* 104 bytes each: 6.5 MiB a memo, touched as used */

/* Every input of cost_step_parts but the model, tp and serving (the memo's). */
typedef struct memo_key {
    uint64_t decode_context, prefill_context, prefill_attn, prefill_causal;
    uint32_t prefill_tokens, prefill_seqs, decode_seqs, decode_tokens;
    uint32_t draft_steps, draft_seqs, draft_width, used;   /* used: 1 in a filled slot */
} memo_key;

struct cost_memo {
    uint32_t tp;
    const cost_serving *sv;
    memo_key key[MEMO_SLOTS];
    cost_parts parts[MEMO_SLOTS];
};

bool cost_reads_seqs(const cost_model *m, uint32_t tp, const cost_serving *sv)
{
    return m->ops->reads_seqs && m->ops->reads_seqs(m, tp, sv);
}

cost_memo *cost_memo_new(const cost_model *m, uint32_t tp, const cost_serving *sv)
{
    if (cost_reads_seqs(m, tp, sv)) return NULL;
    cost_memo *memo = calloc(1, sizeof *memo);   /* untouched pages until used */
    if (!memo) return NULL;
    memo->tp = tp;
    memo->sv = sv;
    return memo;
}

void cost_memo_free(cost_memo *memo)
{
    free(memo);
}

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

_Static_assert(sizeof(memo_key) == 64, "memo_key has no padding");

static uint32_t slot_of(const memo_key *k)
{
    uint64_t w[8], h = 0;
    memcpy(w, k, sizeof w);
    for (int i = 0; i < 8; i++) h = rh_mix64(h ^ w[i]);
    return (uint32_t)h & (MEMO_SLOTS - 1);
}

double cost_memo_parts(cost_memo *memo, const cost_model *m, const cost_batch *b, cost_parts *p)
{
    if (!memo || b->tp != memo->tp || b->serving != memo->sv) return cost_step_parts(m, b, p);
    memo_key k;
    key_of(b, &k);
    uint32_t s = slot_of(&k);
    if (!memcmp(&memo->key[s], &k, sizeof k)) {
        *p = memo->parts[s];
        return p->forward_s + p->draft_s + p->launch_s + p->exposed_s + p->hidden_s;   /* cost_step_parts' sum */
    }
    memo->key[s] = k;
    double total = cost_step_parts(m, b, p);
    memo->parts[s] = *p;
    return total;
}
