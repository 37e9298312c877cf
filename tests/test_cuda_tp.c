/* test_cuda_tp.c — tensor parallel, checked without a GPU: the same model run
 * as 2 and 4 ranks on the CPU backend (one thread per rank, sums through
 * shared memory instead of NCCL: kernels/cpu/group.c) must give the logits of one rank, through
 * prefill, chunked prefill and decode. This exercises everything of tensor
 * parallel except NCCL itself: the shard slicing (rows of Q/K/V/gate/up,
 * columns of O/down, biases on rank 0), the all-reduce placement in the
 * forward pass, and rank 0 broadcasting each batch to followers. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/runner.h"
#include "kernels/cpu/group.h"

#define MAX_RANKS 4

typedef struct host_rank {
    const kern_comm *comm;
    runner *r;
    int follow_rc;
} host_rank;

static void *follower(void *arg)
{
    host_rank *hr = arg;
    rh_err e;
    int rc;
    while ((rc = runner_follow(hr->r, &e)) == 1) {}
    if (rc < 0) printf("\n  follower %u: %s\n", hr->comm->rank, e.msg);
    hr->follow_rc = rc;
    return NULL;
}

static model *tp_model(void)
{
    model_config c;
    rh_err e;
    CU_ASSERT_FATAL(model_preset("tiny-llama", &c, &e) == 0);
    /* Every bias, so the shard's split of bias vectors is exercised too. */
    c.qkv_bias = c.o_bias = c.mlp_bias = true;
    c.tie_embeddings = false;
    model *m = model_new_dummy(&c, 7, 0, &e);
    CU_ASSERT_FATAL(m != NULL);
    return m;
}

/* Prefill 40 tokens in chunks of 16, then 6 greedy decode steps; returns
 * every logits row produced, concatenated. */
static float *drive(runner *r, uint32_t *n_rows)
{
    const model_config *c = runner_model(r);
    enum { PROMPT = 40, CHUNK = 16, DECODE = 6 };
    uint32_t pages[16];
    for (uint32_t i = 0; i < 16; i++) pages[i] = 15 - i;   /* not in order */
    int32_t toks[PROMPT + DECODE];
    for (uint32_t i = 0; i < PROMPT; i++) toks[i] = (int32_t)((i * 37 + 11) % c->vocab_size);
    float *all = malloc((size_t)(3 + DECODE) * c->vocab_size * sizeof *all);
    uint32_t rows = 0;
    rh_err e;
    const float *lg;
    for (uint32_t at = 0; at < PROMPT; at += CHUNK) {
        uint32_t n = PROMPT - at < CHUNK ? PROMPT - at : CHUNK;
        runner_seq s = {toks + at, n, at, pages, 16, 1, NULL};
        CU_ASSERT_FATAL(runner_forward(r, &s, 1, &lg, &e) == 0);
        memcpy(all + (size_t)rows++ * c->vocab_size, lg, c->vocab_size * sizeof *lg);
    }
    for (uint32_t t = 0; t < DECODE; t++) {
        /* The next token is the argmax of the one-rank run's logits would be;
         * a fixed token keeps the runs comparable even if argmaxes tie. */
        toks[PROMPT + t] = (int32_t)((t * 101 + 3) % c->vocab_size);
        runner_seq s = {toks + PROMPT + t, 1, PROMPT + t, pages, 16, 1, NULL};
        CU_ASSERT_FATAL(runner_forward(r, &s, 1, &lg, &e) == 0);
        memcpy(all + (size_t)rows++ * c->vocab_size, lg, c->vocab_size * sizeof *lg);
    }
    *n_rows = rows;
    return all;
}

static float *run_group(const model *m, uint32_t size, uint32_t *n_rows)
{
    rh_err e;
    cpu_group *g = cpu_group_new(size, &e);
    CU_ASSERT_FATAL(g != NULL);
    host_rank ranks[MAX_RANKS];
    memset(ranks, 0, sizeof ranks);
    runner_config rc = {4, 16, 0, NULL};
    for (uint32_t k = 0; k < size; k++) {
        ranks[k].comm = cpu_group_comm(g, k);
        ranks[k].r = runner_new_tp(m, &rc, ranks[k].comm, &e);
        if (!ranks[k].r) printf("\n  rank %u: %s\n", k, e.msg);
        CU_ASSERT_FATAL(ranks[k].r != NULL);
    }
    /* Each rank keeps only its slice of the heads and the MLP. */
    CU_ASSERT_EQUAL(((const model_config *)&m->cfg)->n_heads, 8);
    pthread_t th[MAX_RANKS];
    for (uint32_t k = 1; k < size; k++) pthread_create(&th[k], NULL, follower, &ranks[k]);
    float *out = drive(ranks[0].r, n_rows);
    runner_release_followers(ranks[0].r);
    for (uint32_t k = 1; k < size; k++) {
        pthread_join(th[k], NULL);
        CU_ASSERT_EQUAL(ranks[k].follow_rc, 0);
    }
    for (uint32_t k = 0; k < size; k++) runner_free(ranks[k].r);
    cpu_group_free(g);
    return out;
}

static double rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) return INFINITY;
        if (d > num) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

static void test_tp_ranks_equal_one_rank(void)
{
    model *m = tp_model();
    uint32_t rows1, rows;
    float *one = run_group(m, 1, &rows1);
    for (uint32_t size = 2; size <= 4; size += 2) {
        float *got = run_group(m, size, &rows);
        CU_ASSERT_EQUAL(rows, rows1);
        double err = rel_err(got, one, (size_t)rows * m->cfg.vocab_size);
        if (!(err < 1e-4)) printf("\n  tp %u: rel err %g against one rank\n", size, err);
        CU_ASSERT(err < 1e-4);
        free(got);
    }
    free(one);
    model_free(m);
}

static void test_tp_shard_shapes_and_refusals(void)
{
    model *m = tp_model();
    rh_err e;
    model_shard *s = model_shard_new(m, kern_cpu(), 1, 2, &e);
    CU_ASSERT_FATAL(s != NULL);
    CU_ASSERT_EQUAL(s->cfg.n_heads, 4);
    CU_ASSERT_EQUAL(s->cfg.n_kv_heads, 2);
    CU_ASSERT_EQUAL(s->cfg.intermediate_size, 384);
    /* Rank 1 of 2 holds the second half of Q's rows ... */
    uint32_t d = m->cfg.hidden_size, qd = m->cfg.n_heads * m->cfg.head_dim;
    CU_ASSERT(memcmp(s->w.layers[0].wq, m->w.layers[0].wq + (size_t)qd / 2 * d, (size_t)qd / 2 * d * 4) == 0);
    /* ... the second half of each row of O ... */
    CU_ASSERT(memcmp(s->w.layers[1].wo + (size_t)5 * (qd / 2), m->w.layers[1].wo + (size_t)5 * qd + qd / 2,
                     (size_t)qd / 2 * 4) == 0);
    /* ... and no O or down bias: rank 0 adds those once. */
    CU_ASSERT_PTR_NULL(s->w.layers[0].bo);
    CU_ASSERT_PTR_NULL(s->w.layers[0].b_down);
    CU_ASSERT_PTR_NOT_NULL(s->w.layers[0].bq);
    model_shard_free(s);

    /* 3 does not divide 8 heads: one message, nothing allocated. */
    CU_ASSERT_PTR_NULL(model_shard_new(m, kern_cpu(), 0, 3, &e));
    CU_ASSERT(strstr(e.msg, "--tp-size 3") != NULL);
    kern_comm c3 = {0, 3, NULL, NULL, NULL};
    runner_config rc = {4, 16, 0, NULL};
    CU_ASSERT_PTR_NULL(runner_new_tp(m, &rc, &c3, &e));
    CU_ASSERT(strstr(e.msg, "--tp-size 3") != NULL);
    /* A follower cannot drive, rank 0 cannot follow. */
    cpu_group *g = cpu_group_new(1, &e);
    CU_ASSERT_FATAL(g != NULL);
    runner *r = runner_new_tp(m, &rc, cpu_group_comm(g, 0), &e);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_EQUAL(runner_follow(r, &e), -1);
    runner_free(r);
    cpu_group_free(g);
    CU_ASSERT_PTR_NULL(cpu_group_new(0, &e));
    CU_ASSERT_PTR_NULL(cpu_group_new(CPU_GROUP_MAX_RANKS + 1, &e));
    model_free(m);
}

void register_test_cuda_tp(void)
{
    CU_pSuite s = CU_add_suite("cuda_tp", NULL, NULL);
    CU_add_test(s, "2 and 4 ranks on the CPU equal one rank", test_tp_ranks_equal_one_rank);
    CU_add_test(s, "shards slice rows, columns and biases; bad sizes refused", test_tp_shard_shapes_and_refusals);
}
