/* prompt.c — see prompt.h. */
#include "traces/prompt.h"
#include "util/hash.h"

#include <xxhash.h>

/* One token id from a key (mixed once per block) and a position. Hashing the
 * pair rather than stepping a generator makes every token independent of the
 * others, so a block's prefix is the same whatever the request's length; and
 * two multiplies a token keep a 128k-token prompt well under a millisecond. */
static int32_t token_of(uint64_t base, uint64_t pos, uint32_t vocab)
{
    /* The high 32 bits scaled to [0, vocab): a multiply instead of a division. */
    return (int32_t)(((rh_mix64(base + (pos + 1) * RH_GOLDEN_GAMMA) >> 32) * vocab) >> 32);
}

static uint64_t key_base(uint64_t seed, uint64_t domain, uint64_t key)
{
    return rh_mix64(rh_mix64(seed ^ domain) ^ key);
}

/* Different domains for block tokens and private tokens, so a request id can
 * never collide with a block hash of the same value. */
#define DOMAIN_BLOCK   0x9e3779b97f4a7c15ull
#define DOMAIN_PRIVATE 0xc2b2ae3d27d4eb4full

int tr_prompt_tokens(const tr_request *r, uint32_t block_size, uint32_t vocab, uint64_t seed, int32_t *out)
{
    if (vocab == 0) return -1;
    uint32_t shared_blocks = 0;
    if (block_size > 0 && r->hashes) {
        shared_blocks = r->input_len / block_size;
        if (r->n_hashes < shared_blocks) shared_blocks = r->n_hashes;
    }
    uint64_t pos = 0;
    for (uint32_t b = 0; b < shared_blocks; b++) {
        uint64_t base = key_base(seed, DOMAIN_BLOCK, r->hashes[b]);
        for (uint32_t j = 0; j < block_size; j++, pos++) out[pos] = token_of(base, j, vocab);
    }
    uint64_t base = key_base(seed, DOMAIN_PRIVATE, r->id);
    for (; pos < r->input_len; pos++) out[pos] = token_of(base, pos, vocab);
    return 0;
}

uint32_t tr_prompt_block_hashes(const int32_t *tokens, uint32_t n, uint32_t block_size, uint64_t seed, uint64_t *out)
{
    if (block_size == 0) return 0;
    uint32_t blocks = n / block_size;
    uint64_t prev = seed;
    for (uint32_t b = 0; b < blocks; b++) {
        prev = XXH3_64bits_withSeed(tokens + (size_t)b * block_size, (size_t)block_size * sizeof *tokens, prev);
        out[b] = prev;
    }
    return blocks;
}
