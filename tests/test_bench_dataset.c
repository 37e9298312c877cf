/* test_bench_dataset.c — generated datasets: lengths follow their rule,
 * prompts share exactly the tokens they should, seeds reproduce. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/bench.h"
#include "client/probe.h"
#include "engine/model/tokenizer.h"
#include "testutil.h"

static int32_t *tokens_of(const bench_dataset *d, size_t i)
{
    int32_t *t = malloc(d->items[i].input_len * sizeof *t);
    bench_item_tokens(d, i, t);
    return t;
}

/* Length of the common prefix of two prompts. */
static uint32_t common(const bench_dataset *d, size_t i, size_t j)
{
    int32_t *a = tokens_of(d, i), *b = tokens_of(d, j);
    uint32_t n = d->items[i].input_len < d->items[j].input_len ? d->items[i].input_len : d->items[j].input_len, k = 0;
    while (k < n && a[k] == b[k]) k++;
    free(a);
    free(b);
    return k;
}

static void test_random_lengths(void)
{
    bench_random_opts o = {.num_prompts = 20000, .input_len = 100, .output_len = 50, .range_ratio = 0.5, .seed = 3};
    bench_dataset d;
    rh_err e;
    CU_ASSERT_FATAL(bench_dataset_random(&d, &o, 16, &e) == 0);
    double in = 0, out = 0;
    size_t outside = 0, lo_seen = 0, hi_seen = 0;
    for (size_t i = 0; i < d.n; i++) {
        uint32_t a = d.items[i].input_len, b = d.items[i].output_len;
        outside += a < 50 || a > 150 || b < 25 || b > 75;
        lo_seen += a == 50;
        hi_seen += a == 150;
        in += a;
        out += b;
    }
    CU_ASSERT_EQUAL(outside, 0);
    CU_ASSERT(lo_seen > 0 && hi_seen > 0);           /* both ends inclusive */
    CU_ASSERT_DOUBLE_EQUAL(in / (double)d.n, 100, 1.5);
    CU_ASSERT_DOUBLE_EQUAL(out / (double)d.n, 50, 1);
    /* Same seed, same dataset. */
    bench_dataset d2;
    CU_ASSERT_FATAL(bench_dataset_random(&d2, &o, 16, &e) == 0);
    size_t differ = 0;
    for (size_t i = 0; i < d.n; i++)
        differ += d.items[i].input_len != d2.items[i].input_len || d.items[i].output_len != d2.items[i].output_len;
    CU_ASSERT_EQUAL(differ, 0);
    bench_dataset_free(&d);
    bench_dataset_free(&d2);

    bench_random_opts fixed = {.num_prompts = 50, .input_len = 30, .output_len = 7, .seed = 1};
    CU_ASSERT_FATAL(bench_dataset_random(&d, &fixed, 16, &e) == 0);
    for (size_t i = 0; i < d.n; i++) {
        CU_ASSERT_EQUAL(d.items[i].input_len, 30);
        CU_ASSERT_EQUAL(d.items[i].output_len, 7);
    }
    bench_dataset_free(&d);
}

static void test_random_prefix(void)
{
    bench_random_opts o = {.num_prompts = 4, .input_len = 20, .output_len = 2, .prefix_len = 33, .seed = 5};
    bench_dataset d;
    rh_err e;
    CU_ASSERT_FATAL(bench_dataset_random(&d, &o, 16, &e) == 0);
    for (size_t i = 0; i < d.n; i++) CU_ASSERT_EQUAL(d.items[i].input_len, 53);
    CU_ASSERT_EQUAL(common(&d, 0, 1), 33);
    CU_ASSERT_EQUAL(common(&d, 2, 3), 33);
    bench_dataset_free(&d);
    o.prefix_len = 0;
    CU_ASSERT_FATAL(bench_dataset_random(&d, &o, 16, &e) == 0);
    CU_ASSERT(common(&d, 0, 1) < 2);
    bench_dataset_free(&d);
}

static void test_shared_prefix_groups(void)
{
    bench_shared_prefix_opts o = {.num_groups = 4, .prompts_per_group = 5, .system_prompt_len = 40,
                                  .question_len = 10, .output_len = 3, .seed = 9};
    bench_dataset d;
    rh_err e;
    CU_ASSERT_FATAL(bench_dataset_shared_prefix(&d, &o, 16, &e) == 0);
    CU_ASSERT_EQUAL_FATAL(d.n, 20);
    int members[4] = {0}, in_order = 1;
    for (size_t i = 0; i < d.n; i++) {
        size_t g = (size_t)(d.items[i].hashes - d.hash_pool);
        CU_ASSERT_FATAL(g < 4);
        members[g]++;
        if (g != i / 5) in_order = 0;
        CU_ASSERT_EQUAL(d.items[i].input_len, 50);
        CU_ASSERT_EQUAL(d.items[i].output_len, 3);
    }
    for (int g = 0; g < 4; g++) CU_ASSERT_EQUAL(members[g], 5);
    CU_ASSERT(!in_order);                             /* shuffled */
    for (size_t i = 0; i < d.n; i++)
        for (size_t j = i + 1; j < d.n; j++) {
            int same_group = d.items[i].hashes == d.items[j].hashes;
            uint32_t c = common(&d, i, j);
            CU_ASSERT(same_group ? c == 40 : c < 2);
        }
    bench_dataset_free(&d);
    o.num_prompts = 7;
    CU_ASSERT_FATAL(bench_dataset_shared_prefix(&d, &o, 16, &e) == 0);
    CU_ASSERT_EQUAL(d.n, 7);
    bench_dataset_free(&d);
}

static void test_bad_options(void)
{
    bench_dataset d;
    rh_err e;
    bench_random_opts r = {.num_prompts = 1, .input_len = 10, .output_len = 1, .range_ratio = 1};
    CU_ASSERT_EQUAL(bench_dataset_random(&d, &r, 16, &e), -1);
    CU_ASSERT(strstr(e.msg, "--random-range-ratio") != NULL);
    r.range_ratio = 0;
    r.num_prompts = 0;
    CU_ASSERT_EQUAL(bench_dataset_random(&d, &r, 16, &e), -1);
    CU_ASSERT(strstr(e.msg, "--num-prompts") != NULL);
    bench_shared_prefix_opts s = {.num_groups = 0, .prompts_per_group = 1, .question_len = 1, .output_len = 1};
    CU_ASSERT_EQUAL(bench_dataset_shared_prefix(&d, &s, 16, &e), -1);
    CU_ASSERT(strstr(e.msg, "--gsp-num-groups") != NULL);
}

/* A ShareGPT file written by hand: which conversations pass vLLM's
 * filters, their lengths (one token per byte without a tokenizer, or the
 * tokenizer's count), and the refusals naming the file and the entry. */
static void test_sharegpt(void)
{
    const char *path = "tests/fixtures/sharegpt/small.json";
    bench_dataset d;
    rh_err e;
    bench_sharegpt_opts o = {.num_prompts = 100, .seed = 1};
    CU_ASSERT_EQUAL_FATAL(bench_dataset_sharegpt(&d, path, &o, &e), 0);
    /* a, b, f ("conversation", user/assistant), g, i pass; c (one turn), d
     * ("Hi"), e ("Ok"), h (empty) do not */
    CU_ASSERT_EQUAL_FATAL(d.n, 5);
    unsigned seen = 0;
    for (size_t i = 0; i < d.n; i++) {
        const bench_item *it = &d.items[i];
        CU_ASSERT_FATAL(it->text != NULL);
        CU_ASSERT_EQUAL(it->input_len, strlen(it->text));
        if (!strcmp(it->text, "How do tides work?")) {
            seen |= 1;
            CU_ASSERT_EQUAL(it->output_len, 23);
        }
        if (!strcmp(it->text, "Name a prime.")) {
            seen |= 2;
            CU_ASSERT_EQUAL(it->output_len, 13);
        }
        if (!strcmp(it->text, "What is a compiler?")) {
            seen |= 4;
            CU_ASSERT_EQUAL(it->output_len, 31);
        }
        if (!strcmp(it->text, "Summer or winter?")) {
            seen |= 8;
            CU_ASSERT_EQUAL(it->output_len, 23);
        }
        if (!strcmp(it->text, "Count to five.")) {
            seen |= 16;
            CU_ASSERT_EQUAL(it->output_len, 28);
        }
    }
    CU_ASSERT_EQUAL(seen, 31);
    bench_dataset_free(&d);
    /* A fixed output length lifts the length filters; the seed orders them;
     * num_prompts takes the first. */
    o.output_len = 5;
    CU_ASSERT_EQUAL_FATAL(bench_dataset_sharegpt(&d, path, &o, &e), 0);
    CU_ASSERT_EQUAL(d.n, 7);
    for (size_t i = 0; i < d.n; i++) CU_ASSERT_EQUAL(d.items[i].output_len, 5);
    bench_dataset_free(&d);
    bench_dataset a, b;
    o.num_prompts = 3;
    CU_ASSERT_EQUAL_FATAL(bench_dataset_sharegpt(&a, path, &o, &e), 0);
    CU_ASSERT_EQUAL_FATAL(bench_dataset_sharegpt(&b, path, &o, &e), 0);
    CU_ASSERT_EQUAL(a.n, 3);
    for (size_t i = 0; i < 3; i++) CU_ASSERT_STRING_EQUAL(a.items[i].text, b.items[i].text);
    bench_dataset_free(&a);
    bench_dataset_free(&b);
    /* With a tokenizer the lengths are its counts: the byte tokenizer's are
     * the bytes again (no BOS: a prompt's length is its text's). */
    tokenizer *bytes = tok_new_bytes();
    o = (bench_sharegpt_opts){.num_prompts = 100, .seed = 1, .tok = bytes};
    CU_ASSERT_EQUAL_FATAL(bench_dataset_sharegpt(&d, path, &o, &e), 0);
    CU_ASSERT_EQUAL(d.n, 5);
    for (size_t i = 0; i < d.n; i++) CU_ASSERT_EQUAL(d.items[i].input_len, strlen(d.items[i].text));
    bench_dataset_free(&d);
    tok_free(bytes);

    char bad[256];
    tu_tmp_path("sharegpt_bad.json", bad, sizeof bad);
    const struct { const char *text, *says; } cases[] = {
        {"{\"conversations\": []}", "a JSON array of conversations"},
        {"[{\"conversations\": 5}]", "entry 0 is not"},
        {"[1, 2]", "entry"},
        {"[{\"conversations\": [{\"value\": \"x\"}]}]", "no conversation passes the filters"},
        {"[", "not a ShareGPT file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(bad, "w");
        fputs(cases[i].text, f);
        fclose(f);
        o = (bench_sharegpt_opts){.num_prompts = 10};
        int rc = bench_dataset_sharegpt(&d, bad, &o, &e);
        int ok = rc == -1 && strstr(e.msg, bad) && strstr(e.msg, cases[i].says);
        if (!ok) printf("\n  '%s': %d %s\n", cases[i].text, rc, rc ? e.msg : "");
        CU_ASSERT(ok);
        if (rc == 0) bench_dataset_free(&d);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The probe's plan: its prefix run is one prompt three times (one set of
 * hashes, the same token ids, every token shared), and no other two of
 * its requests share a block. */
static void test_probe_prefix_run(void)
{
    probe_opts o;
    probe_opts_default(&o);
    o.max_context = 8192;
    probe_plan p;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(probe_plan_make(&o, &p, &e), 0);
    const probe_run *pr = NULL;
    for (size_t i = 0; i < p.n_runs; i++)
        if (!strcmp(p.runs[i].name, "prefix")) pr = &p.runs[i];
    CU_ASSERT_PTR_NOT_NULL_FATAL(pr);
    CU_ASSERT_EQUAL_FATAL(pr->n, 3);
    const bench_dataset *d = &p.d;
    const bench_item *a = &d->items[pr->start];
    CU_ASSERT_EQUAL(a->input_len, 2048);
    CU_ASSERT_EQUAL_FATAL(a->n_hashes, 2048 / 16);
    for (size_t k = 1; k < 3; k++) {
        const bench_item *b = &d->items[pr->start + k];
        CU_ASSERT_EQUAL_FATAL(b->n_hashes, a->n_hashes);
        CU_ASSERT(memcmp(a->hashes, b->hashes, a->n_hashes * sizeof *a->hashes) == 0);
        CU_ASSERT_EQUAL(common(d, pr->start, pr->start + k), 2048);
    }
    /* every hash of every other request, and the prefix prompt's once: no repeats */
    size_t n = 0;
    for (size_t i = 0; i < d->n; i++)
        if (i <= pr->start || i >= pr->start + 3) n += d->items[i].n_hashes;
    uint64_t *all = malloc(n * sizeof *all);
    CU_ASSERT_PTR_NOT_NULL_FATAL(all);
    n = 0;
    for (size_t i = 0; i < d->n; i++)
        if (i <= pr->start || i >= pr->start + 3)
            for (uint32_t k = 0; k < d->items[i].n_hashes; k++) all[n++] = d->items[i].hashes[k];
    qsort(all, n, sizeof *all, cmp_u64);
    size_t repeats = 0;
    for (size_t i = 1; i < n; i++) repeats += all[i] == all[i - 1];
    CU_ASSERT_EQUAL(repeats, 0);
    /* and the prompts differ from the first block on: the burst's first
     * request against the prefix prompt */
    const probe_run *burst = &p.runs[p.n_runs - 1];
    CU_ASSERT_STRING_EQUAL(burst->name, "burst");
    CU_ASSERT(common(d, pr->start, burst->start) < 16);
    free(all);
    probe_plan_free(&p);
}

void register_test_bench_dataset(void)
{
    CU_pSuite s = CU_add_suite("bench_dataset", NULL, NULL);
    CU_add_test(s, "random lengths", test_random_lengths);
    CU_add_test(s, "random prefix", test_random_prefix);
    CU_add_test(s, "shared-prefix groups", test_shared_prefix_groups);
    CU_add_test(s, "bad options", test_bad_options);
    CU_add_test(s, "probe plan: the prefix run is one prompt three times, no other shares", test_probe_prefix_run);
    CU_add_test(s, "ShareGPT: vLLM's filters, lengths, order, refusals", test_sharegpt);
}
