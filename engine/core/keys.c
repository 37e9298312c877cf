/* keys.c — page keys for the prefix cache, and matching and caching with them.
 *
 * A page's key is a chain hash: it hashes the page's content together with
 * the key of the page before it, so equal keys imply equal prefixes and the
 * cache can treat a key as the whole path. The content is
 *   - the page's token ids, when the caller gave tokens (a streaming XXH64
 *     seeded with the previous key keeps the partial last page, so output
 *     tokens extend the chain without storing them);
 *   - the trace block hashes overlapping the page plus the page's offset in
 *     its block, when only block hashes are known (a 512-token block spans
 *     512 / page_size pages, each keyed apart by its offset);
 *   - otherwise a fresh nonce, so the page can never match another request's
 *     (a simulated output, a prompt without content). Such pages enter the
 *     tree only when their request is retracted, so it finds them again when
 *     it recomputes, and leave it when the request finishes: a simulated trace
 *     without block hashes then costs no cache churn at all. */
#include <stdlib.h>
#include <string.h>

/* xxHash inlined here: a block-keyed page hashes 24 bytes, so the call
 * into the shared library, and XXH64's general tail handling, cost more
 * than the hash (a fifth of a Mooncake replay's instructions). XXH3 of a
 * fixed short length inlines to a few multiplies. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "engine/core/internal.h"

#define SEED_TOKENS 0x52484b5630544f4bull   /* distinct seeds keep the three key spaces apart */
#define SEED_BLOCKS 0x52484b5630424c4bull
#define SEED_UNIQUE 0x52484b56304e4f4eull

/* Where a request's key chain starts: its adapter's own point, so pages
 * computed under one adapter never match another's (its K and V differ);
 * the base model keeps the plain seed. */
static uint64_t chain_start(const core_req *r, uint64_t seed)
{
    if (!r->adapter) return seed;
    uint64_t a = r->adapter;
    return XXH64(&a, sizeof a, seed ^ 0x4c6f5241ull);
}

static uint64_t unique_key(core *c, uint64_t prev)
{
    uint64_t buf[2] = {prev, ++c->nonce};
    return XXH64(buf, sizeof buf, SEED_UNIQUE);
}

static uint64_t block_key(const core_req *r, uint32_t i, uint32_t ps, uint64_t prev)
{
    uint64_t t0 = (uint64_t)i * ps, bs = r->block_size;
    uint64_t b0 = t0 / bs, b1 = (t0 + ps - 1) / bs;
    uint64_t buf[3] = {prev, t0 - b0 * bs, r->blocks[b0]};
    uint64_t h = XXH3_64bits_withSeed(buf, sizeof buf, SEED_BLOCKS);
    for (uint64_t b = b0 + 1; b <= b1; b++) {       /* pages larger than a block */
        uint64_t more[2] = {h, r->blocks[b]};
        h = XXH3_64bits_withSeed(more, sizeof more, SEED_BLOCKS);
    }
    return h;
}

int keys_init_req(core *c, core_req *r, const core_req_desc *d, rh_err *e)
{
    uint32_t ps = c->ps;
    if (d->prompt_tokens) {
        r->key_mode = KEYS_TOKENS;
        r->cap_keys = (uint32_t)(((uint64_t)d->prompt_len + d->max_new_tokens) / ps);
        r->keys = malloc(((size_t)r->cap_keys + 1) * sizeof *r->keys);
        r->tok = malloc(sizeof *r->tok);
        if (!r->keys || !r->tok) return rh_fail(e, "request %llu: out of memory", (unsigned long long)d->id);
        uint32_t full = d->prompt_len / ps;
        uint64_t prev = chain_start(r, SEED_TOKENS);
        for (uint32_t i = 0; i < full; i++) {
            prev = XXH64(d->prompt_tokens + (size_t)i * ps, (size_t)ps * sizeof(int32_t), prev);
            r->keys[i] = prev;
        }
        r->n_keys = r->n_content = full;
        XXH64_reset(r->tok, prev);
        XXH64_update(r->tok, d->prompt_tokens + (size_t)full * ps, (size_t)(d->prompt_len - full * ps) * sizeof(int32_t));
        return 0;
    }
    if (d->block_hashes && d->n_block_hashes > 0) {
        if (d->block_size == 0)
            return rh_fail(e, "request %llu: block_hashes given with block_size 0", (unsigned long long)d->id);
        r->key_mode = KEYS_BLOCKS;
        r->blocks = malloc((size_t)d->n_block_hashes * sizeof *r->blocks);
        if (!r->blocks) return rh_fail(e, "request %llu: out of memory", (unsigned long long)d->id);
        memcpy(r->blocks, d->block_hashes, (size_t)d->n_block_hashes * sizeof *r->blocks);
        r->n_blocks = d->n_block_hashes;
        r->block_size = d->block_size;
        uint64_t covered = (uint64_t)d->n_block_hashes * d->block_size;
        if (covered > d->prompt_len) covered = d->prompt_len;
        r->n_content = (uint32_t)(covered / ps);
        return 0;
    }
    r->key_mode = KEYS_NONE;
    return 0;
}

int keys_fill_prompt(core *c, core_req *r)
{
    if (r->keys) return 0;
    uint32_t ps = c->ps;
    r->cap_keys = (uint32_t)(((uint64_t)r->prompt_len + r->max_new) / ps);
    r->keys = malloc(((size_t)r->cap_keys + 1) * sizeof *r->keys);
    if (!r->keys) return -1;
    /* The content-keyed pages now; unique keys when a page first needs one
     * (keys_cache_pages). */
    uint32_t full = r->prompt_len / ps;
    if (full > r->n_content) full = r->blocks ? r->n_content : 0;
    uint64_t prev = chain_start(r, 0);
    for (uint32_t i = 0; i < full; i++) {
        prev = block_key(r, i, ps, prev);
        r->keys[i] = prev;
    }
    r->n_keys = full;
    (void)c;
    /* Keys now hold everything the block hashes could say. */
    free(r->blocks);
    r->blocks = NULL;
    return 0;
}

void keys_commit(core *c, core_req *r, uint32_t n, const int32_t *tokens)
{
    uint32_t ps = c->ps, before = req_fill(r);
    r->out += n;
    if (r->tok) {
        if (!tokens) {
            /* The chain needs every token; without them the rest is unique. */
            free(r->tok);
            r->tok = NULL;
        } else {
            for (uint32_t j = 0; j < n; j++) {
                XXH64_update(r->tok, &tokens[j], sizeof tokens[j]);
                if ((before + j + 1) % ps == 0 && r->n_keys < r->cap_keys) {
                    uint64_t k = XXH64_digest(r->tok);
                    r->keys[r->n_keys++] = k;
                    r->n_content = r->n_keys;   /* output tokens are content too */
                    XXH64_reset(r->tok, k);
                }
            }
        }
    }
    /* Pages without content get their unique keys only if they ever enter
     * the tree (keys_cache_pages): most never do, and a simulated run fills
     * hundreds of millions of them. */
}

/* Unique keys for the full pages up to `upto` that have none yet. */
static void keys_extend_unique(core *c, core_req *r, uint32_t upto)
{
    if (upto > r->cap_keys) upto = r->cap_keys;
    while (r->n_keys < upto) {
        r->keys[r->n_keys] = unique_key(c, r->n_keys ? r->keys[r->n_keys - 1] : 0);
        r->n_keys++;
    }
}

uint32_t keys_match(core *c, core_req *r, uint32_t *out, uint32_t *n_cached)
{
    *n_cached = 0;
    if (!c->radix) return 0;
    /* At least one token must be computed to sample from, so a fully cached
     * prompt still recomputes its last page. */
    uint32_t limit = (req_fill(r) - 1) / c->ps;
    uint32_t parent = KV_NONE, i = 0, m = UINT32_MAX;
    uint64_t prev = chain_start(r, 0);
    c->match_host = c->match_storage = 0;
    for (; i < limit; i++) {
        uint64_t key;
        if (i < r->n_keys) key = r->keys[i];
        else if (r->blocks && i < r->n_content) key = block_key(r, i, c->ps, prev);
        else break;
        if (m == UINT32_MAX) {
            uint32_t p = kv_lookup(&c->kv, key, parent);
            if (p == KV_NONE) {
                /* The GPU's part ends here; the host's may go on (a chain
                 * key names its whole prefix, so the key alone decides). */
                m = i;
                if (!c->kv.host) break;
            } else {
                if (out) out[i] = p;
                if (c->kv.node[p].ref == 1) (*n_cached)++;
                parent = p;
            }
        }
        if (m != UINT32_MAX) {
            /* host pages, then (once the host's run ends) storage pages */
            if (!c->match_storage && kv_tier_has(c->kv.host, key)) c->match_host++;
            else if (c->kv.storage && kv_tier_has(c->kv.storage, key)) c->match_storage++;
            else break;
        }
        prev = key;
    }
    return m == UINT32_MAX ? i : m;
}

void keys_cache_pages(core *c, core_req *r, enum keys_cache_scope scope)
{
    if (!c->radix) return;
    uint32_t upto = r->kv / c->ps;
    if (upto > r->n_pages) upto = r->n_pages;
    uint32_t limit = scope == KEYS_SHAREABLE ? r->n_content
                   : scope == KEYS_PROMPT   ? (r->prompt_len / c->ps > r->n_content ? r->prompt_len / c->ps : r->n_content)
                                            : UINT32_MAX;
    if (upto > limit) upto = limit;
    if (upto > r->n_keys && !r->tok) keys_extend_unique(c, r, upto);
    if (upto > r->n_keys) upto = r->n_keys;
    for (uint32_t i = r->n_tree; i < upto; i++) {
        uint32_t parent = i ? r->pages[i - 1] : KV_NONE;
        uint32_t have = kv_lookup(&c->kv, r->keys[i], parent);
        if (have != KV_NONE) {
            /* Another request cached the same page first: share its copy and
             * free ours (same tokens at the same positions, same K and V). */
            kv_hold(&c->kv, have);
            kv_release(&c->kv, r->pages[i]);
            r->pages[i] = have;
        } else if (kv_insert(&c->kv, r->pages[i], r->keys[i], parent) < 0) {
            break;   /* a 64-bit key collision: the rest stays private */
        }
        r->n_tree = i + 1;
    }
}

void keys_drop_unique(core *c, core_req *r)
{
    while (r->n_tree > r->n_content) {
        uint32_t p = r->pages[r->n_tree - 1];
        if (kv_uncache(&c->kv, p) < 0) break;   /* held by another, or has children */
        r->n_tree--;
    }
}
