/* test_kernels.c — each CPU kernel against a second computation of the same
 * thing: paged attention against attention over contiguous K/V, the GEMM path
 * against a double-precision triple loop, RoPE against complex rotation (and
 * its relative-position property), RMSNorm against its formula, and the
 * samplers' draw frequencies against the probabilities they should follow. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

static uint64_t rng_state = 12345;

static float frand(void)
{
    return (float)(rh_splitmix_unit(&rng_state) * 2.0 - 1.0);
}

static double max_rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

/* ---- attention -------------------------------------------------------- */

/* Attention for one row over contiguous K/V ([ctx][n_kv][hd]), in double. */
static void ref_attention_row(const float *q, const float *K, const float *V, uint32_t pos, uint32_t window,
                              const kern_attn_shape *s, float *out)
{
    uint32_t group = s->n_heads / s->n_kv_heads, hd = s->head_dim;
    uint32_t lo = (window && pos + 1 > window) ? pos + 1 - window : 0;
    double *w = malloc((pos + 1) * sizeof *w);
    for (uint32_t h = 0; h < s->n_heads; h++) {
        uint32_t kvh = h / group;
        double mx = -INFINITY, sum = 0;
        for (uint32_t j = lo; j <= pos; j++) {
            double d = 0;
            for (uint32_t i = 0; i < hd; i++) d += (double)q[h * hd + i] * K[((size_t)j * s->n_kv_heads + kvh) * hd + i];
            w[j] = d * s->scale;
            if (w[j] > mx) mx = w[j];
        }
        for (uint32_t j = lo; j <= pos; j++) sum += (w[j] = exp(w[j] - mx));
        for (uint32_t i = 0; i < hd; i++) {
            double acc = 0;
            for (uint32_t j = lo; j <= pos; j++) acc += w[j] * V[((size_t)j * s->n_kv_heads + kvh) * hd + i];
            out[h * hd + i] = (float)(acc / sum);
        }
    }
    free(w);
}

/* A batch of sequences with different cached lengths and new-token counts
 * (decodes, a fresh prompt, chunks over a long context) over shuffled pages:
 * every row must equal attention over that sequence's contiguous K/V. */
static void check_paged_attention(uint32_t page_size, uint32_t n_heads, uint32_t n_kv, uint32_t window)
{
    enum { NSEQ = 5 };
    const uint32_t start[NSEQ] = {0, 37, 5, 64, 13};
    const uint32_t n_new[NSEQ] = {9, 1, 1, 20, 3};
    kern_attn_shape s = {n_heads, n_kv, 16, page_size, window, 0.25f};
    uint32_t kvd = n_kv * s.head_dim, qd = n_heads * s.head_dim;

    uint32_t row0[NSEQ + 1], pt0[NSEQ + 1], rows = 0, total_pages = 0;
    for (int i = 0; i < NSEQ; i++) {
        row0[i] = rows;
        pt0[i] = total_pages;
        rows += n_new[i];
        total_pages += (start[i] + n_new[i] + page_size - 1) / page_size;
    }
    row0[NSEQ] = rows;
    pt0[NSEQ] = total_pages;
    /* A random permutation of the pool's pages hands out the page tables. */
    uint32_t pool_pages = total_pages + 3;
    uint32_t *perm = malloc(pool_pages * sizeof *perm);
    for (uint32_t i = 0; i < pool_pages; i++) perm[i] = i;
    for (uint32_t i = pool_pages - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(rh_splitmix_unit(&rng_state) * (i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    kern_attn_batch b = {NSEQ, row0, start, pt0, perm};

    float *kp = calloc((size_t)pool_pages * page_size * kvd, sizeof(float));
    float *vp = calloc((size_t)pool_pages * page_size * kvd, sizeof(float));
    float *q = malloc((size_t)rows * qd * sizeof(float)), *out = malloc((size_t)rows * qd * sizeof(float));
    float *knew = malloc((size_t)rows * kvd * sizeof(float)), *vnew = malloc((size_t)rows * kvd * sizeof(float));
    float *want = malloc(qd * sizeof(float)), *scores = malloc(256 * sizeof(float));
    float *Kc[NSEQ], *Vc[NSEQ];
    for (size_t i = 0; i < (size_t)rows * qd; i++) q[i] = frand();
    for (int sq = 0; sq < NSEQ; sq++) {
        uint32_t ctx = start[sq] + n_new[sq];
        Kc[sq] = malloc((size_t)ctx * kvd * sizeof(float));
        Vc[sq] = malloc((size_t)ctx * kvd * sizeof(float));
        for (size_t i = 0; i < (size_t)ctx * kvd; i++) {
            Kc[sq][i] = frand();
            Vc[sq][i] = frand();
        }
        /* The cached part goes into the pages directly (as earlier steps would
         * have written it); the new part through kv_write. */
        for (uint32_t p = 0; p < start[sq]; p++) {
            size_t at = ((size_t)perm[pt0[sq] + p / page_size] * page_size + p % page_size) * kvd;
            memcpy(kp + at, Kc[sq] + (size_t)p * kvd, kvd * sizeof(float));
            memcpy(vp + at, Vc[sq] + (size_t)p * kvd, kvd * sizeof(float));
        }
        memcpy(knew + (size_t)row0[sq] * kvd, Kc[sq] + (size_t)start[sq] * kvd, (size_t)n_new[sq] * kvd * sizeof(float));
        memcpy(vnew + (size_t)row0[sq] * kvd, Vc[sq] + (size_t)start[sq] * kvd, (size_t)n_new[sq] * kvd * sizeof(float));
    }
    cpu_kv_write(knew, vnew, &b, &s, kp, vp);
    cpu_attention(q, kp, vp, &b, &s, out, scores);

    double worst = 0;
    for (int sq = 0; sq < NSEQ; sq++)
        for (uint32_t t = 0; t < n_new[sq]; t++) {
            uint32_t r = row0[sq] + t;
            ref_attention_row(q + (size_t)r * qd, Kc[sq], Vc[sq], start[sq] + t, window, &s, want);
            double err = max_rel_err(out + (size_t)r * qd, want, qd);
            if (err > worst) worst = err;
        }
    CU_ASSERT(worst < 1e-5);
    if (worst >= 1e-5) printf("\n  paged attention: page %u heads %u/%u window %u: rel err %g\n", page_size, n_heads, n_kv, window, worst);

    for (int sq = 0; sq < NSEQ; sq++) {
        free(Kc[sq]);
        free(Vc[sq]);
    }
    free(perm);
    free(kp);
    free(vp);
    free(q);
    free(out);
    free(knew);
    free(vnew);
    free(want);
    free(scores);
}

static void test_paged_attention_matches_contiguous(void)
{
    check_paged_attention(4, 4, 4, 0);     /* multi-head */
    check_paged_attention(16, 8, 2, 0);    /* GQA 4:1, pages larger than some sequences */
    check_paged_attention(1, 6, 1, 0);     /* multi-query, one token a page */
    check_paged_attention(8, 4, 2, 10);    /* sliding window */
}

/* ---- gemm, norm, rope, activation ------------------------------------- */

static void test_gemm_matches_reference(void)
{
    /* sgemm sizes, and rows x a 1M-element matrix where the path uses sgemv */
    const uint32_t shapes[][3] = {{1, 7, 5}, {4, 9, 6}, {13, 33, 17}, {64, 96, 80}, {1, 1024, 1024}, {3, 2048, 512}};
    for (size_t si = 0; si < 6; si++) {
        uint32_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
        float *x = malloc((size_t)m * k * 4), *w = malloc((size_t)n * k * 4), *bias = malloc(n * 4);
        float *y = malloc((size_t)m * n * 4), *want = malloc((size_t)m * n * 4), *y0 = malloc((size_t)m * n * 4);
        for (size_t i = 0; i < (size_t)m * k; i++) x[i] = frand();
        for (size_t i = 0; i < (size_t)n * k; i++) w[i] = frand();
        for (size_t i = 0; i < n; i++) bias[i] = frand();
        for (size_t i = 0; i < (size_t)m * n; i++) y0[i] = frand();
        for (int mode = 0; mode < 4; mode++) {
            int with_bias = mode & 1, acc = mode >> 1;
            memcpy(y, y0, (size_t)m * n * 4);
            for (uint32_t i = 0; i < m; i++)
                for (uint32_t j = 0; j < n; j++) {
                    double s = acc ? y0[(size_t)i * n + j] : 0;
                    if (with_bias) s += bias[j];
                    for (uint32_t p = 0; p < k; p++) s += (double)x[(size_t)i * k + p] * w[(size_t)j * k + p];
                    want[(size_t)i * n + j] = (float)s;
                }
            cpu_gemm(x, w, with_bias ? bias : NULL, y, m, n, k, acc);
            CU_ASSERT(max_rel_err(y, want, (size_t)m * n) < 1e-5);
        }
        free(x);
        free(w);
        free(bias);
        free(y);
        free(want);
        free(y0);
    }
}

static void test_rmsnorm_silu_embedding(void)
{
    enum { R = 3, D = 37 };
    float x[R * D], w[D], out[R * D];
    for (int i = 0; i < R * D; i++) x[i] = frand() * 5;
    for (int i = 0; i < D; i++) w[i] = frand();
    cpu_rmsnorm(x, w, 1e-5f, R, D, out);
    for (int r = 0; r < R; r++) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)x[r * D + i] * x[r * D + i];
        double inv = 1 / sqrt(ss / D + 1e-5);
        for (int i = 0; i < D; i++) CU_ASSERT_DOUBLE_EQUAL(out[r * D + i], x[r * D + i] * inv * w[i], 1e-5);
    }
    float g[5] = {-3, -0.5f, 0, 0.5f, 4}, u[5] = {1, 2, 3, 4, 5}, o[5];
    cpu_silu_mul(g, u, o, 5);
    for (int i = 0; i < 5; i++) CU_ASSERT_DOUBLE_EQUAL(o[i], g[i] / (1 + exp(-g[i])) * u[i], 1e-6);
    float table[4 * 3] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}, emb[2 * 3];
    int32_t ids[2] = {3, 1};
    cpu_embedding(table, ids, 2, 3, emb);
    CU_ASSERT_EQUAL(emb[0], 30);
    CU_ASSERT_EQUAL(emb[5], 12);
}

static void test_rope_rotation(void)
{
    enum { HD = 8, HALF = HD / 2, NH = 2 };
    float inv[HALF];
    for (int i = 0; i < HALF; i++) inv[i] = (float)(1.0 / pow(10000.0, 2.0 * i / HD));
    uint32_t pos[3] = {0, 7, 300};
    float c[3 * HALF], s[3 * HALF], x[3 * NH * HD], x0[3 * NH * HD];
    for (int i = 0; i < 3 * NH * HD; i++) x0[i] = x[i] = frand();
    cpu_rope_angles(pos, inv, 3, HALF, c, s);
    cpu_rope(x, c, s, 3, NH, HD, NH * HD);
    /* Element i and i + half are the real and imaginary parts of a complex
     * number rotated by pos * inv_freq[i]. */
    for (int r = 0; r < 3; r++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < HALF; i++) {
                double a = (double)(float)((float)pos[r] * inv[i]);
                const float *v0 = x0 + r * NH * HD + h * HD;
                const float *v = x + r * NH * HD + h * HD;
                CU_ASSERT_DOUBLE_EQUAL(v[i], v0[i] * cos(a) - v0[i + HALF] * sin(a), 1e-5);
                CU_ASSERT_DOUBLE_EQUAL(v[i + HALF], v0[i + HALF] * cos(a) + v0[i] * sin(a), 1e-5);
            }
    /* The property attention relies on: q at m dotted with k at n depends only on m - n. */
    float q[HD], k[HD];
    for (int i = 0; i < HD; i++) {
        q[i] = frand();
        k[i] = frand();
    }
    double dots[2];
    uint32_t pairs[2][2] = {{10, 4}, {106, 100}};
    for (int p = 0; p < 2; p++) {
        float qq[HD], kk[HD], cc[HALF], ss[HALF];
        memcpy(qq, q, sizeof q);
        memcpy(kk, k, sizeof k);
        cpu_rope_angles(&pairs[p][0], inv, 1, HALF, cc, ss);
        cpu_rope(qq, cc, ss, 1, 1, HD, HD);
        cpu_rope_angles(&pairs[p][1], inv, 1, HALF, cc, ss);
        cpu_rope(kk, cc, ss, 1, 1, HD, HD);
        dots[p] = 0;
        for (int i = 0; i < HD; i++) dots[p] += (double)qq[i] * kk[i];
    }
    CU_ASSERT_DOUBLE_EQUAL(dots[0], dots[1], 1e-4);
}

/* ---- sampling --------------------------------------------------------- */

static void softmax(const float *l, int n, double t, double *p)
{
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++)
        if (l[i] > mx) mx = l[i];
    for (int i = 0; i < n; i++) s += (p[i] = exp((l[i] - mx) / t));
    for (int i = 0; i < n; i++) p[i] /= s;
}

/* Draws many tokens and compares frequencies with the expected distribution. */
static double freq_error(const float *logits, int n, const kern_sampling *sp, const double *expect, int draws)
{
    kern_cand cand[16];
    int count[16] = {0};
    uint64_t rng = kern_rng_init(99);
    for (int i = 0; i < draws; i++) count[cpu_sample(logits, (uint32_t)n, sp, &rng, cand)]++;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)count[i] / draws - expect[i]);
        if (e > worst) worst = e;
        if (expect[i] == 0 && count[i]) worst = 1;   /* outside the allowed set */
    }
    return worst;
}

static void test_sampling(void)
{
    enum { V = 8 };
    const float logits[V] = {1.0f, 3.0f, 0.5f, 3.0f, -1.0f, 2.2f, 0.0f, 1.7f};
    kern_cand cand[V];
    uint64_t rng = kern_rng_init(1), rng0 = rng;
    kern_sampling greedy = {0, 1, 0};
    CU_ASSERT_EQUAL(cpu_sample(logits, V, &greedy, &rng, cand), 1);   /* lowest id of the tie */
    CU_ASSERT_EQUAL(rng, rng0);                                       /* greedy leaves the stream alone */
    kern_sampling k1 = {1.0f, 1, 1};
    CU_ASSERT_EQUAL(cpu_sample(logits, V, &k1, &rng, cand), 1);

    /* Temperature alone: frequencies follow softmax(logits / T). */
    double p[V];
    kern_sampling temp = {0.7f, 1, 0};
    softmax(logits, V, 0.7, p);
    CU_ASSERT(freq_error(logits, V, &temp, p, 40000) < 0.01);

    /* top-k 3: ids 1, 3 and 5 only, renormalized. */
    kern_sampling topk = {1.0f, 1, 3};
    softmax(logits, V, 1.0, p);
    double q[V] = {0}, z = p[1] + p[3] + p[5];
    q[1] = p[1] / z, q[3] = p[3] / z, q[5] = p[5] / z;
    CU_ASSERT(freq_error(logits, V, &topk, q, 40000) < 0.01);

    /* top-p 0.8: the smallest most-likely set whose mass reaches 0.8. */
    kern_sampling topp = {1.0f, 0.8f, 0};
    int order[V] = {1, 3, 5, 7, 0, 2, 6, 4};
    double mass = 0;
    memset(q, 0, sizeof q);
    for (int i = 0; i < V && mass < 0.8; i++) {
        q[order[i]] = p[order[i]];
        mass += p[order[i]];
    }
    for (int i = 0; i < V; i++) q[i] /= mass;
    CU_ASSERT(freq_error(logits, V, &topp, q, 40000) < 0.01);

    /* A seed is a reproducible stream; another seed is another stream. */
    int32_t a[64], b[64], c[64];
    uint64_t ra = kern_rng_init(5), rb = kern_rng_init(5), rc = kern_rng_init(6);
    int differs = 0;
    for (int i = 0; i < 64; i++) {
        a[i] = cpu_sample(logits, V, &temp, &ra, cand);
        b[i] = cpu_sample(logits, V, &temp, &rb, cand);
        c[i] = cpu_sample(logits, V, &temp, &rc, cand);
        differs |= a[i] != c[i];
    }
    CU_ASSERT(memcmp(a, b, sizeof a) == 0);
    CU_ASSERT(differs);
}

void register_test_kernels(void)
{
    CU_pSuite s = CU_add_suite("kernels", NULL, NULL);
    CU_add_test(s, "paged attention equals contiguous attention", test_paged_attention_matches_contiguous);
    CU_add_test(s, "gemm path equals a double-precision reference", test_gemm_matches_reference);
    CU_add_test(s, "rmsnorm, silu*mul, embedding", test_rmsnorm_silu_embedding);
    CU_add_test(s, "rope is a rotation that depends on relative position", test_rope_rotation);
    CU_add_test(s, "sampling follows its distribution, seeded", test_sampling);
}
