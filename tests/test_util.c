/* test_util.c — percentiles match numpy's linear interpolation; the argument
 * walker handles every flag form. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/args.h"
#include "util/stats.h"

static void test_percentiles_match_numpy(void)
{
    /* numpy.percentile([1..10], [50, 90, 99]) = 5.5, 9.1, 9.91 */
    double x[10];
    for (int i = 0; i < 10; i++) x[i] = 10 - i;     /* unsorted on purpose */
    rh_summary s;
    rh_summarize(x, 10, &s);
    CU_ASSERT_DOUBLE_EQUAL(s.median, 5.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.p90, 9.1, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.p99, 9.91, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.mean, 5.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.std, sqrt(8.25), 1e-12);   /* numpy std, ddof=0 */
    CU_ASSERT_EQUAL(s.min, 1);
    CU_ASSERT_EQUAL(s.max, 10);
    rh_summarize(x, 0, &s);
    CU_ASSERT_EQUAL(s.n, 0);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The radix sort and qsort agree on large arrays with negatives, zeros,
 * infinities and many duplicates. */
static void test_radix_sort_equals_qsort(void)
{
    enum { N = 50000 };
    static double a[N], b[N];
    unsigned long long z = 12345;
    for (int i = 0; i < N; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        double v = (double)(z >> 11) / 9007199254740992.0;
        switch (i % 7) {
        case 0: v = -v * 1e6; break;
        case 1: v = 0.0; break;
        case 2: v = (double)(int)(v * 10); break;
        case 3: v = i % 14 ? INFINITY : -INFINITY; break;
        default: v = v * 1e-3; break;
        }
        a[i] = b[i] = v;
    }
    rh_sort_doubles(a, N);
    qsort(b, N, sizeof *b, cmp_d);
    int same = 1;
    for (int i = 0; i < N; i++) same &= a[i] == b[i];
    CU_ASSERT(same);
}

static void test_args_forms(void)
{
    char *argv[] = {"sim", "in.rhtr", "--json", "--chunked-prefill-size", "4096", "-o", "out", "--rate-scale=2", "--", "--literal"};
    rh_args a;
    rh_args_init(&a, 10, argv);
    a.i = 1;
    rh_err e;
    const char *n;
    int json = 0;
    const char *chunk = NULL, *out = NULL, *rate = NULL;
    while ((n = rh_args_next(&a))) {
        if (!strcmp(n, "json")) json = 1;
        else if (!strcmp(n, "chunked-prefill-size")) chunk = rh_args_value(&a, &e);
        else if (!strcmp(n, "o")) out = rh_args_value(&a, &e);
        else if (!strcmp(n, "rate-scale")) rate = rh_args_value(&a, &e);
        else CU_FAIL("unexpected flag");
    }
    CU_ASSERT(json);
    CU_ASSERT_STRING_EQUAL(chunk, "4096");
    CU_ASSERT_STRING_EQUAL(out, "out");
    CU_ASSERT_STRING_EQUAL(rate, "2");
    CU_ASSERT_EQUAL(a.npos, 2);
    CU_ASSERT_STRING_EQUAL(a.pos[0], "in.rhtr");
    CU_ASSERT_STRING_EQUAL(a.pos[1], "--literal");

    char *argv2[] = {"x", "--port"};
    rh_args_init(&a, 2, argv2);
    a.i = 1;
    CU_ASSERT_STRING_EQUAL(rh_args_next(&a), "port");
    CU_ASSERT_PTR_NULL(rh_args_value(&a, &e));
    CU_ASSERT(strstr(e.msg, "--port") != NULL);
    long long v;
    CU_ASSERT_EQUAL(rh_parse_i64("12x", "--port", &v, &e), -1);
    CU_ASSERT(strstr(e.msg, "--port") != NULL);
    CU_ASSERT_EQUAL(rh_parse_i64("-3", "--n", &v, &e), 0);
    CU_ASSERT_EQUAL(v, -3);
}

void register_test_util(void)
{
    CU_pSuite s = CU_add_suite("util", NULL, NULL);
    CU_add_test(s, "percentiles match numpy", test_percentiles_match_numpy);
    CU_add_test(s, "argument forms", test_args_forms);
    CU_add_test(s, "radix sort equals qsort", test_radix_sort_equals_qsort);
}
