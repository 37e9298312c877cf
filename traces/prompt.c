/* prompt.c — see prompt.h. */
#include "traces/prompt.h"

#include <xxhash.h>

/* One token id from two 64-bit keys. Hashing the pair (rather than stepping a
 * generator) makes every token independent of the others, so a prefix of a
 * block is the same whatever the request's length. */
static int32_t token_of(uint64_t seed, uint64_t key, uint64_t pos, uint32_t vocab)
{
    uint64_t in[2] = {key, pos};
    return (int32_t)(XXH3_64bits_withSeed(in, sizeof in, seed) % vocab);
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
    for (uint32_t b = 0; b < shared_blocks; b++)
        for (uint32_t j = 0; j < block_size; j++, pos++)
            out[pos] = token_of(seed ^ DOMAIN_BLOCK, r->hashes[b], j, vocab);
    for (; pos < r->input_len; pos++)
        out[pos] = token_of(seed ^ DOMAIN_PRIVATE, r->id, pos, vocab);
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
