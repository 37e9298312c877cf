/* test_bench_prompt.c — traces/prompt: equal leading block hashes give equal
 * leading tokens, different ones different tokens, partial blocks and tails
 * stay private, and content hashes of the ids recover the sharing. */
#include <CUnit/CUnit.h>
#include <string.h>

#include "traces/prompt.h"

static tr_request req(uint64_t id, uint32_t len, const uint64_t *h, uint32_t nh)
{
    tr_request r;
    memset(&r, 0, sizeof r);
    r.id = id;
    r.input_len = len;
    r.hashes = h;
    r.n_hashes = nh;
    return r;
}

static int same(const int32_t *a, const int32_t *b, size_t from, size_t to)
{
    size_t eq = 0;
    for (size_t i = from; i < to; i++) eq += a[i] == b[i];
    return (int)eq;
}

static void test_shared_hashes_share_tokens(void)
{
    const uint64_t ha[] = {11, 22, 33}, hb[] = {11, 22, 99};
    int32_t a[53], b[53];
    tr_request ra = req(1, 53, ha, 3), rb = req(2, 53, hb, 3);
    CU_ASSERT_EQUAL(tr_prompt_tokens(&ra, 16, 32000, 7, a), 0);
    CU_ASSERT_EQUAL(tr_prompt_tokens(&rb, 16, 32000, 7, b), 0);
    CU_ASSERT_EQUAL(same(a, b, 0, 32), 32);          /* two shared blocks */
    CU_ASSERT_EQUAL(same(a, b, 32, 48), 0);          /* third block differs */
    CU_ASSERT_EQUAL(same(a, b, 48, 53), 0);          /* private tails */
    /* Same hashes, other request: the tail past the full blocks is private. */
    int32_t c[53];
    tr_request rc = req(3, 53, ha, 3);
    tr_prompt_tokens(&rc, 16, 32000, 7, c);
    CU_ASSERT_EQUAL(same(a, c, 0, 48), 48);
    CU_ASSERT_EQUAL(same(a, c, 48, 53), 0);
}

static void test_partial_block_is_private(void)
{
    /* 40 tokens with three hashes (Mooncake style, the last block partial):
     * only the two full blocks share. */
    const uint64_t h[] = {5, 6, 7};
    int32_t a[40], b[40];
    tr_request ra = req(1, 40, h, 3), rb = req(2, 40, h, 3);
    tr_prompt_tokens(&ra, 16, 32000, 0, a);
    tr_prompt_tokens(&rb, 16, 32000, 0, b);
    CU_ASSERT_EQUAL(same(a, b, 0, 32), 32);
    CU_ASSERT_EQUAL(same(a, b, 32, 40), 0);
}

static void test_deterministic_and_in_range(void)
{
    const uint64_t h[] = {1, 2};
    int32_t a[70], b[70], c[70], d[32];
    tr_request r = req(9, 70, h, 2);
    tr_prompt_tokens(&r, 32, 7, 3, a);
    tr_prompt_tokens(&r, 32, 7, 3, b);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    int counts[7] = {0};
    for (int i = 0; i < 70; i++) {
        CU_ASSERT(a[i] >= 0 && a[i] < 7);
        if (a[i] >= 0 && a[i] < 7) counts[a[i]]++;
    }
    for (int v = 0; v < 7; v++) CU_ASSERT(counts[v] > 0);    /* all of a small vocabulary is used */
    tr_prompt_tokens(&r, 32, 32000, 4, c);
    tr_prompt_tokens(&r, 32, 32000, 3, a);
    CU_ASSERT(same(a, c, 0, 70) < 3);                        /* another seed, other ids */
    /* A shorter request with the same hash has the same first block. */
    tr_request shorter = req(10, 32, h, 1);
    tr_prompt_tokens(&shorter, 32, 32000, 3, d);
    CU_ASSERT_EQUAL(same(a, d, 0, 32), 32);
    /* No block size: the hashes are ignored and everything is private. */
    tr_prompt_tokens(&shorter, 0, 32000, 3, d);
    CU_ASSERT(same(a, d, 0, 32) < 3);
    CU_ASSERT_EQUAL(tr_prompt_tokens(&r, 32, 0, 3, a), -1);
}

/* Content hashes of the generated ids: exactly the shared blocks match. */
static void test_content_hashes_recover_sharing(void)
{
    const uint64_t ha[] = {1, 2, 3, 4}, hb[] = {1, 2, 8, 4};
    int32_t a[64], b[64];
    tr_request ra = req(1, 64, ha, 4), rb = req(2, 64, hb, 4);
    tr_prompt_tokens(&ra, 16, 32000, 0, a);
    tr_prompt_tokens(&rb, 16, 32000, 0, b);
    uint64_t ca[4], cb[4];
    CU_ASSERT_EQUAL(tr_prompt_block_hashes(a, 64, 16, 0, ca), 4);
    CU_ASSERT_EQUAL(tr_prompt_block_hashes(b, 64, 16, 0, cb), 4);
    CU_ASSERT_EQUAL(ca[0], cb[0]);
    CU_ASSERT_EQUAL(ca[1], cb[1]);
    CU_ASSERT_NOT_EQUAL(ca[2], cb[2]);
    /* Block 3 has equal tokens but a different prefix: the chain tells them apart. */
    CU_ASSERT_EQUAL(same(a, b, 48, 64), 16);
    CU_ASSERT_NOT_EQUAL(ca[3], cb[3]);
    CU_ASSERT_EQUAL(tr_prompt_block_hashes(a, 63, 16, 0, ca), 3);
    CU_ASSERT_EQUAL(tr_prompt_block_hashes(a, 63, 0, 0, ca), 0);
}

void register_test_bench_prompt(void)
{
    CU_pSuite s = CU_add_suite("bench_prompt", NULL, NULL);
    CU_add_test(s, "shared hashes share tokens", test_shared_hashes_share_tokens);
    CU_add_test(s, "partial block is private", test_partial_block_is_private);
    CU_add_test(s, "deterministic and in range", test_deterministic_and_in_range);
    CU_add_test(s, "content hashes recover sharing", test_content_hashes_recover_sharing);
}
