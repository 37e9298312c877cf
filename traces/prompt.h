/* prompt.h — deterministic prompt token ids for a trace request.
 *
 * A trace says how long a prompt was and which prefix blocks it shared
 * (block hashes), not what its tokens were. To replay it against a real
 * server (or our engine) we need concrete token ids whose sharing matches the
 * hashes exactly: requests with equal leading block hashes get identical
 * leading tokens, so a server's prefix cache hits where the trace says it did,
 * and nowhere else.
 *
 *   - token j of full block i (i < n_hashes, the block inside input_len) is a
 *     hash of (seed, hashes[i], j);
 *   - every other token (a partial last block, or blocks without a hash) is a
 *     hash of (seed, request id, position), so it is private to the request.
 * A partial block never shares, even when it carries a hash: a block-hash
 * prefix cache (the simulator's) only matches full blocks, and a token-level
 * cache must see the same sharing. Ids fall in [0, vocab). */
#ifndef RH_TRACES_PROMPT_H
#define RH_TRACES_PROMPT_H

#include <stdint.h>

#include "traces/trace.h"

/* Fills out[0 .. r->input_len) with token ids. block_size 0 means the
 * request's hashes are ignored. Returns 0, or -1 when vocab is 0. */
int tr_prompt_tokens(const tr_request *r, uint32_t block_size, uint32_t vocab, uint64_t seed, int32_t *out);

/* Content hashes of the full blocks of `tokens` (n tokens): block i's hash
 * chains block i-1's, so equal hashes mean equal prefixes. Writes
 * n / block_size hashes to out and returns how many. A trace built from real
 * token ids uses these as its prefix block hashes. */
uint32_t tr_prompt_block_hashes(const int32_t *tokens, uint32_t n, uint32_t block_size, uint64_t seed, uint64_t *out);

#endif
