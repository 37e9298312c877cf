/* test_cost_fit.c — `rehearse fit`'s math: known coefficients come back from
 * synthetic steps priced by the linear model, noise leaves a fit at least as
 * good as the truth, coefficients stay non-negative, features no step
 * exercises are reported undetermined, and the per-class error summary. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost.h"
#include "sim/cost/cost_fit.h"

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}
static uint32_t rnd_in(uint32_t lo, uint32_t hi) { return lo + (uint32_t)(rnd() % (hi - lo + 1)); }
static double rnd_unit(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* A step of the given class (0 prefill, 1 decode, 2 mixed); a quarter of the
 * decode work verifies 3 drafts per sequence. */
static tr_step make_step(int cls)
{
    tr_step s;
    memset(&s, 0, sizeof s);
    if (cls != 1) {
        s.prefill_seqs = rnd_in(1, 3);
        for (uint32_t i = 0; i < s.prefill_seqs; i++) {
            uint64_t n = rnd_in(16, 8192), c = rnd() % 4 ? rnd_in(0, 16000) : 0;
            s.prefill_tokens += (uint32_t)n;
            s.prefill_context += c;
            s.prefill_attn += n * (c + n);
        }
    }
    if (cls != 0) {
        s.decode_seqs = rnd_in(1, 256);
        uint32_t k = rnd() % 4 == 0 ? 3 : 0;
        s.decode_tokens = s.decode_seqs * (1 + k);
        for (uint32_t i = 0; i < s.decode_seqs; i++) s.decode_context += rnd_in(10, 8000);
    }
    return s;
}

/* n steps priced by m, times (1 + noise·u) with u uniform in [-1, 1]. */
static tr_step *synth(const cost_model *m, size_t n, double noise)
{
    tr_step *st = calloc(n, sizeof *st);
    for (size_t i = 0; i < n; i++) {
        st[i] = make_step((int)(i % 3));
        st[i].index = i;
        cost_batch b;
        cost_batch_from_step(&b, &st[i]);
        st[i].duration = cost_step_time(m, &b) * (1 + noise * (2 * rnd_unit() - 1));
    }
    return st;
}

static double coef_at(const cost_linear_coef *c, int i)
{
    const double v[5] = {c->base_s, c->per_prefill_token_s, c->per_decode_seq_s, c->per_context_token_s,
                         c->per_attention_s};
    return v[i];
}

static void coef_add(cost_linear_coef *c, int i, double d)
{
    double *p[5] = {&c->base_s, &c->per_prefill_token_s, &c->per_decode_seq_s, &c->per_context_token_s,
                    &c->per_attention_s};
    *p[i] += d;
}

/* Σ squared relative residuals of coefficients c on the steps. */
static double objective(const cost_linear_coef *c, double draft_ratio, const tr_step *st, size_t n)
{
    cost_model *m = cost_linear_new(c);
    m->draft_ratio = draft_ratio;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        cost_batch b;
        cost_batch_from_step(&b, &st[i]);
        double r = (cost_step_time(m, &b) - st[i].duration) / st[i].duration;
        sum += r * r;
    }
    cost_free(m);
    return sum;
}

static void test_fit_recovers_exact(void)
{
    rng_state = 0x9E3779B97F4A7C15ULL;
    const cost_linear_coef truth = {0.0042, 2.3e-5, 1.1e-4, 1.7e-8, 9e-11};
    cost_model *m = cost_linear_new(&truth);
    size_t n = 3000;
    tr_step *st = synth(m, n, 0);
    for (int absolute = 0; absolute <= 1; absolute++) {
        cost_fit_opts o;
        cost_fit_opts_default(&o);
        o.absolute = absolute;
        cost_fit_result r;
        rh_err e;
        CU_ASSERT_EQUAL_FATAL(cost_fit_steps(st, n, &o, &r, &e), 0);
        CU_ASSERT_EQUAL(r.used, n);
        CU_ASSERT_EQUAL(r.skipped, 0);
        for (int i = 0; i < 5; i++) {
            CU_ASSERT(r.determined[i]);
            double want = coef_at(&truth, i), got = coef_at(&r.coef, i);
            if (!(fabs(got - want) <= 1e-8 * want)) printf("\n  coef %d: got %.12g want %.12g\n", i, got, want);
            CU_ASSERT(fabs(got - want) <= 1e-8 * want);
        }
        CU_ASSERT(r.rms < 1e-10);
    }
    /* and the error summary of the truth on its own steps is zero */
    cost_err_summary es[COST_N_CLASSES];
    rh_err e;
    CU_ASSERT_EQUAL(cost_step_errors(m, st, n, 0, es, &e), 0);
    for (int c = 0; c < COST_N_CLASSES; c++) {
        CU_ASSERT_EQUAL(es[c].n, n / 3);
        CU_ASSERT(es[c].max < 1e-12);
    }
    cost_free(m);
    free(st);
}

static void test_fit_with_noise(void)
{
    rng_state = 12345;
    const cost_linear_coef truth = {0.0042, 2.3e-5, 1.1e-4, 1.7e-8, 9e-11};
    cost_model *m = cost_linear_new(&truth);
    size_t n = 6000;
    tr_step *st = synth(m, n, 0.02);
    cost_fit_opts o;
    cost_fit_opts_default(&o);
    cost_fit_result r;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(cost_fit_steps(st, n, &o, &r, &e), 0);
    for (int i = 0; i < 5; i++) {
        double want = coef_at(&truth, i), got = coef_at(&r.coef, i);
        CU_ASSERT(fabs(got - want) <= 0.05 * want);
    }
    /* least squares: the fit is at least as good as the truth on its data */
    CU_ASSERT(objective(&r.coef, o.draft_ratio, st, n) <= objective(&truth, o.draft_ratio, st, n) * (1 + 1e-9));
    CU_ASSERT(fabs(r.rms - sqrt(objective(&r.coef, o.draft_ratio, st, n) / n)) < 1e-9);
    /* uniform ±2% noise: errors of about 1% typical, 2% at most (+ fit error) */
    cost_model *fm = cost_linear_new(&r.coef);
    cost_err_summary es[COST_N_CLASSES];
    CU_ASSERT_EQUAL(cost_step_errors(fm, st, n, 0, es, &e), 0);
    for (int c = 0; c < COST_N_CLASSES; c++) {
        CU_ASSERT(es[c].median > 0.005 && es[c].median < 0.013);
        CU_ASSERT(es[c].p90 < 0.021);
        CU_ASSERT(es[c].max < 0.025);
        CU_ASSERT(es[c].median <= es[c].p90 && es[c].p90 <= es[c].max);
    }
    cost_free(fm);
    cost_free(m);
    free(st);
}

/* The truth has no per-decode-sequence cost; with noise an unconstrained fit
 * would come out negative about half the time. */
static void test_fit_non_negative(void)
{
    const cost_linear_coef truth = {0.003, 2e-5, 0, 1e-8, 1e-10};
    cost_model *m = cost_linear_new(&truth);
    for (uint64_t seed = 1; seed <= 8; seed++) {
        rng_state = seed * 7919;
        size_t n = 600;
        tr_step *st = synth(m, n, 0.05);
        cost_fit_opts o;
        cost_fit_opts_default(&o);
        cost_fit_result r;
        rh_err e;
        CU_ASSERT_EQUAL_FATAL(cost_fit_steps(st, n, &o, &r, &e), 0);
        for (int i = 0; i < 5; i++) CU_ASSERT(coef_at(&r.coef, i) >= 0);
        CU_ASSERT(objective(&r.coef, o.draft_ratio, st, n) <= objective(&truth, o.draft_ratio, st, n) * (1 + 1e-9));
        /* no feasible nudge of the fitted coefficients does better */
        double best = objective(&r.coef, o.draft_ratio, st, n);
        for (int i = 0; i < 5; i++)
            for (int sgn = -1; sgn <= 1; sgn += 2) {
                /* a step of 0.1% of the coefficient, or 1 ns per decode
                 * sequence for the one held at zero (about 1e-5 of a step) */
                cost_linear_coef c = r.coef;
                double step = coef_at(&c, i) > 0 ? coef_at(&c, i) * 1e-3 : 1e-9;
                coef_add(&c, i, sgn * step);
                if (coef_at(&c, i) < 0) continue;
                CU_ASSERT(objective(&c, o.draft_ratio, st, n) >= best * (1 - 1e-12));
            }
        free(st);
    }
    cost_free(m);
}

static void test_fit_undetermined_and_empty(void)
{
    rng_state = 99;
    const cost_linear_coef truth = {0.004, 2e-5, 1e-4, 1e-8, 1e-10};
    cost_model *m = cost_linear_new(&truth);
    size_t n = 500;
    tr_step *st = calloc(n + 2, sizeof *st);
    for (size_t i = 0; i < n; i++) {
        st[i] = make_step(1);
        st[i].decode_tokens = st[i].decode_seqs;          /* no speculation */
        cost_batch b;
        cost_batch_from_step(&b, &st[i]);
        st[i].duration = cost_step_time(m, &b);
    }
    /* a step with no work and one with no duration are skipped */
    st[n].duration = 0.01;
    st[n + 1] = make_step(1);
    st[n + 1].duration = 0;
    cost_fit_opts o;
    cost_fit_opts_default(&o);
    cost_fit_result r;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(cost_fit_steps(st, n + 2, &o, &r, &e), 0);
    CU_ASSERT_EQUAL(r.used, n);
    CU_ASSERT_EQUAL(r.skipped, 2);
    CU_ASSERT(r.determined[0] && r.determined[2] && r.determined[3]);
    CU_ASSERT(!r.determined[1] && !r.determined[4]);
    CU_ASSERT_EQUAL(r.coef.per_prefill_token_s, 0);
    CU_ASSERT_EQUAL(r.coef.per_attention_s, 0);
    CU_ASSERT(fabs(r.coef.base_s - 0.004) < 1e-12);
    CU_ASSERT(fabs(r.coef.per_decode_seq_s - 1e-4) < 1e-15);
    CU_ASSERT(fabs(r.coef.per_context_token_s - 1e-8) < 1e-18);

    CU_ASSERT_EQUAL(cost_fit_steps(st + n, 1, &o, &r, &e), -1);
    CU_ASSERT(strstr(e.msg, "no step to fit") != NULL);
    cost_free(m);
    free(st);
}

static void test_step_errors_by_class(void)
{
    rng_state = 5;
    const cost_linear_coef truth = {0.004, 2e-5, 1e-4, 1e-8, 1e-10};
    cost_model *m = cost_linear_new(&truth);
    size_t n = 90;
    tr_step *st = synth(m, n, 0);
    /* a model 10% slower on every term is 10% off on every step */
    const cost_linear_coef slow = {0.0044, 2.2e-5, 1.1e-4, 1.1e-8, 1.1e-10};
    cost_model *sm = cost_linear_new(&slow);
    cost_err_summary es[COST_N_CLASSES];
    rh_err e;
    CU_ASSERT_EQUAL(cost_step_errors(sm, st, n, 0, es, &e), 0);
    for (int c = 0; c < COST_N_CLASSES; c++) {
        CU_ASSERT_EQUAL(es[c].n, 30);
        CU_ASSERT_DOUBLE_EQUAL(es[c].median, 0.1, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(es[c].max, 0.1, 1e-12);
    }
    CU_ASSERT_EQUAL(cost_step_class(&st[0]), COST_CLASS_PREFILL);
    CU_ASSERT_EQUAL(cost_step_class(&st[1]), COST_CLASS_DECODE);
    CU_ASSERT_EQUAL(cost_step_class(&st[2]), COST_CLASS_MIXED);
    CU_ASSERT_STRING_EQUAL(cost_class_name(COST_CLASS_MIXED), "mixed");
    /* a size the model has no coefficients for is an error, not NaN errors */
    CU_ASSERT_EQUAL(cost_step_errors(sm, st, n, 4, es, &e), -1);
    CU_ASSERT(strstr(e.msg, "cannot price step") != NULL);
    cost_free(sm);
    cost_free(m);
    free(st);
}

void register_test_cost_fit(void)
{
    CU_pSuite s = CU_add_suite("cost_fit", NULL, NULL);
    CU_add_test(s, "fit recovers known coefficients", test_fit_recovers_exact);
    CU_add_test(s, "fit with noise beats the truth", test_fit_with_noise);
    CU_add_test(s, "fit keeps coefficients non-negative", test_fit_non_negative);
    CU_add_test(s, "undetermined features and no usable steps", test_fit_undetermined_and_empty);
    CU_add_test(s, "relative error per step class", test_step_errors_by_class);
}
