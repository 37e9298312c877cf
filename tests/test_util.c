/* test_util.c — percentiles match numpy's linear interpolation; the argument
 * walker handles every flag form. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "util/args.h"
#include "util/atomic_file.h"
#include "util/conn_guard.h"
#include "util/csv.h"
#include "util/hashmap.h"
#include "util/iheap.h"
#include "util/progress.h"
#include "util/rng.h"
#include "util/spd.h"
#include "util/stats.h"

/* The Cholesky inverse against the definition (A · A⁻¹ = I) on a random
 * well-conditioned matrix, and a column that earlier ones explain named. */
static void test_spd_inverse(void)
{
    enum { N = 6 };
    double M[N * N], A[N * N], inv[N * N];
    rh_rng rng;
    rh_rng_seed(&rng, 3);
    for (int i = 0; i < N * N; i++) M[i] = rh_rng_normal(&rng);
    for (int i = 0; i < N; i++)   /* A = M Mᵀ + I */
        for (int j = 0; j < N; j++) {
            double s = i == j;
            for (int k = 0; k < N; k++) s += M[i * N + k] * M[j * N + k];
            A[i * N + j] = s;
        }
    CU_ASSERT_EQUAL_FATAL(rh_spd_inverse(A, inv, N), 0);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < N; k++) s += A[i * N + k] * inv[k * N + j];
            CU_ASSERT_DOUBLE_EQUAL(s, i == j, 1e-9);
        }
    /* column 3 = column 1 + column 2 (a term confounded with two others) */
    double B[4 * 4], v[4][8];
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 8; k++) v[c][k] = c == 3 ? v[1][k] + v[2][k] : rh_rng_normal(&rng);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            double s = 0;
            for (int k = 0; k < 8; k++) s += v[i][k] * v[j][k];
            B[i * 4 + j] = s;
        }
    CU_ASSERT_EQUAL(rh_spd_inverse(B, inv, 4), 1 + 3);
}

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

/* The maps against a plain array of what was put: 20,000 keys (growth many
 * times over), sequential and scattered, strings holding NUL bytes and the
 * empty string, overwrites, and lookups of keys never put. */
static void test_maps_against_arrays(void)
{
    enum { N = 20000 };
    rh_map64 m = {0};
    rh_strmap sm = {0};
    static uint64_t key[N];
    uint64_t g = 5;
    for (int i = 0; i < N; i++) key[i] = i % 2 ? (uint64_t)i : rh_splitmix_next(&g);
    for (int i = 0; i < N; i++) CU_ASSERT_EQUAL(rh_map64_put(&m, key[i], (uint64_t)i * 3), 0);
    for (int i = 0; i < N; i += 7) CU_ASSERT_EQUAL(rh_map64_put(&m, key[i], (uint64_t)i * 5), 0);
    CU_ASSERT_EQUAL(m.n, N);
    int ok = 1;
    for (int i = 0; i < N; i++) {
        uint64_t v = 0;
        ok &= rh_map64_get(&m, key[i], &v) == 1 && v == (uint64_t)i * (i % 7 ? 3 : 5);
    }
    CU_ASSERT(ok);
    CU_ASSERT_EQUAL(rh_map64_get(&m, 1ull << 63, NULL), 0);
    int fresh = -1;
    uint64_t *slot = rh_map64_slot(&m, key[10], 99, &fresh);
    CU_ASSERT(slot && fresh == 0 && *slot == 30);
    slot = rh_map64_slot(&m, 1ull << 62, 99, &fresh);
    CU_ASSERT(slot && fresh == 1 && *slot == 99);
    /* Deleting every third key (and one never put) leaves the rest found:
     * a deletion that broke a probe chain would lose keys behind it. */
    CU_ASSERT_EQUAL(rh_map64_del(&m, 1ull << 61), 0);
    for (int i = 0; i < N; i += 3) CU_ASSERT_EQUAL(rh_map64_del(&m, key[i]), 1);
    CU_ASSERT_EQUAL(m.n, N + 1 - (N + 2) / 3);
    ok = 1;
    for (int i = 0; i < N; i++) {
        uint64_t v = 0;
        int has = rh_map64_get(&m, key[i], &v);
        ok &= i % 3 ? has == 1 && v == (uint64_t)i * (i % 7 ? 3 : 5) : has == 0;
    }
    CU_ASSERT(ok);
    rh_map64_free(&m);
    CU_ASSERT_EQUAL(rh_map64_get(&m, key[0], NULL), 0);

    /* Keys: i's four raw bytes (NULs among them) and 0-4 more: all distinct. */
    char buf[16];
    ok = 1;
    for (int i = 0; i < N; i++) {
        memcpy(buf, &i, 4);
        memcpy(buf + 4, "abcd", 4);
        ok &= rh_strmap_put(&sm, buf, 4 + (size_t)(i % 5), -i) == 0;
    }
    CU_ASSERT_EQUAL(rh_strmap_put(&sm, "", 0, 42), 0);
    CU_ASSERT_EQUAL(sm.n, N + 1);
    for (int i = 0; i < N; i++) {
        memcpy(buf, &i, 4);
        memcpy(buf + 4, "abcd", 4);
        int64_t v = 1;
        ok &= rh_strmap_get(&sm, buf, 4 + (size_t)(i % 5), &v) == 1 && v == -i;
        ok &= rh_strmap_get(&sm, buf, 3, NULL) == 0;                        /* a prefix is another key */
        if (i % 5 < 4) ok &= rh_strmap_get(&sm, buf, 5 + (size_t)(i % 5), NULL) == 0;
    }
    CU_ASSERT(ok);
    int64_t v = 0;
    CU_ASSERT(rh_strmap_get(&sm, "", 0, &v) == 1 && v == 42);
    CU_ASSERT_EQUAL(rh_strmap_get(&sm, "never", 5, NULL), 0);
    rh_strmap_free(&sm);
}

static void test_knob_names(void)
{
    char out[16];
    CU_ASSERT_EQUAL(rh_knob_name("max_running_requests", out, sizeof out), -1);   /* does not fit */
    CU_ASSERT_EQUAL(rh_knob_name("page_size", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "page-size");
    CU_ASSERT_EQUAL(rh_knob_name("tp-size", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "tp-size");
}

/* A CSV with every case the reader promises: CRLF, a quoted comma, a quoted
 * newline, a doubled quote, a blank line, a short row, a long row. */
static void test_csv_reader(void)
{
    const char *text = "name,\"v,1\",note\r\n"
                       "a,1,\"two\nlines\"\r\n"
                       "\r\n"
                       "\"b \"\"q\"\"\",2\n"
                       "c,3,x,extra\n";
    char path[256];
    tu_tmp_path("util.csv", path, sizeof path);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, text, strlen(text)), 0);
    rh_csv_table t;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(rh_csv_read(path, &t, &e), 0);
    CU_ASSERT_EQUAL(t.ncol, 3);
    CU_ASSERT_STRING_EQUAL(t.names[1], "v,1");
    CU_ASSERT_EQUAL_FATAL(t.nrow, 3);
    CU_ASSERT_STRING_EQUAL(rh_csv_cell(&t, 0, 2), "two\nlines");
    CU_ASSERT_STRING_EQUAL(rh_csv_cell(&t, 1, 0), "b \"q\"");
    CU_ASSERT_STRING_EQUAL(rh_csv_cell(&t, 1, 2), "");
    CU_ASSERT_STRING_EQUAL(rh_csv_cell(&t, 2, 2), "x");
    int ok;
    CU_ASSERT_DOUBLE_EQUAL(rh_csv_num(&t, 2, rh_csv_col(&t, "v,1"), &ok), 3, 0);
    CU_ASSERT(ok);
    rh_csv_num(&t, 0, 2, &ok);
    CU_ASSERT(!ok);
    rh_csv_free(&t);
    /* The splitter leaves spans in place: quotes off, "" still doubled. */
    rh_csv_field f[4];
    const char *rec = "x,\"a,\"\"b\",,z";
    CU_ASSERT_EQUAL(rh_csv_split(rec, strlen(rec), f, 4), 4);
    CU_ASSERT(f[1].quoted && f[1].n == 5 && !memcmp(f[1].s, "a,\"\"b", 5));
    CU_ASSERT(!f[2].quoted && f[2].n == 0);
    CU_ASSERT_EQUAL(rh_csv_split(rec, strlen(rec), f, 3), -1);
    /* An unterminated quote names the line it starts on. */
    const char *bad = "a,b\n1,2\n\"open,3\n";
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, bad, strlen(bad)), 0);
    CU_ASSERT_EQUAL(rh_csv_read(path, &t, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, ":3: unterminated quoted field"));
    remove(path);
}

/* Whole or not at all: a commit replaces the file; an abort, and a write to
 * a missing directory, leave it (and no temporary file) as it was; a device
 * is written in place, never replaced. */
static void test_atomic_file(void)
{
    char path[256], cmd[600], out[256];
    tu_tmp_path("atomic.txt", path, sizeof path);
    rh_err e;
    CU_ASSERT_EQUAL(rh_write_file_atomic(path, "old", 3, &e), 0);
    rh_atomic_file a;
    CU_ASSERT_EQUAL_FATAL(rh_atomic_open(&a, path, &e), 0);
    fputs("half", a.f);
    rh_atomic_abort(&a);
    snprintf(cmd, sizeof cmd, "ls %s.*.tmp 2>/dev/null | wc -l", path);
    tu_run(cmd, out, sizeof out);
    CU_ASSERT_EQUAL(atoi(out), 0);
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_PTR_NOT_NULL(fgets(out, sizeof out, f));
    fclose(f);
    CU_ASSERT_STRING_EQUAL(out, "old");
    CU_ASSERT_EQUAL(rh_write_file_atomic(path, "new", 3, &e), 0);
    f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_PTR_NOT_NULL(fgets(out, sizeof out, f));
    fclose(f);
    CU_ASSERT_STRING_EQUAL(out, "new");
    snprintf(cmd, sizeof cmd, "ls %s.*.tmp 2>/dev/null | wc -l", path);
    tu_run(cmd, out, sizeof out);
    CU_ASSERT_EQUAL(atoi(out), 0);
    CU_ASSERT_EQUAL(rh_write_file_atomic("build/tmp/no/such/dir/x", "x", 1, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "build/tmp/no/such/dir/x: cannot create"));
    CU_ASSERT_EQUAL(rh_write_file_atomic("/dev/null", "x", 1, &e), 0);
    struct stat st;
    CU_ASSERT(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    CU_ASSERT_EQUAL(rh_write_file_atomic("/dev/full", "x", 1, &e), -1);   /* the disk is full: said so */
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "/dev/full: write failed"));
    remove(path);
}

/* The connection guard: a socket past its deadline is shut down (its peer
 * reads the end), one whose deadline was cleared or lies ahead is not, and
 * the counts follow opens and closes. Polls with generous limits: only
 * "cut" and "not cut yet" are asserted, never how fast. */
static int peer_sees_end(int fd, int wait_ms)
{
    struct pollfd q = {.fd = fd, .events = POLLIN};
    char c;
    return poll(&q, 1, wait_ms) > 0 && recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

static void test_conn_guard(void)
{
    rh_err e = {{0}};
    rh_guard *g = rh_guard_new(&e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    int late[2], cleared[2], far[2];
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, late) == 0);
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, cleared) == 0);
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, far) == 0);
    double now = rh_now();
    rh_guard_conn *a = rh_guard_open(g, late[0], 0x7f000002u, now + 0.05);
    rh_guard_conn *b = rh_guard_open(g, cleared[0], 0x7f000002u, now + 0.05);
    rh_guard_conn *c = rh_guard_open(g, far[0], 0x7f000003u, now + 3600);
    CU_ASSERT_FATAL(a && b && c);
    rh_guard_deadline(g, b, 0);
    CU_ASSERT_EQUAL(rh_guard_open_total(g), 3);
    CU_ASSERT_EQUAL(rh_guard_open_from(g, 0x7f000002u), 2);
    CU_ASSERT_EQUAL(rh_guard_open_from(g, 0x7f000003u), 1);
    CU_ASSERT(peer_sees_end(late[1], 20000));   /* cut, at its deadline */
    CU_ASSERT_EQUAL(rh_guard_cut_total(g), 1);
    CU_ASSERT(!peer_sees_end(cleared[1], 100));
    CU_ASSERT(!peer_sees_end(far[1], 0));
    rh_guard_close(g, a);
    rh_guard_close(g, b);
    CU_ASSERT_EQUAL(rh_guard_open_from(g, 0x7f000002u), 0);
    CU_ASSERT_EQUAL(rh_guard_open_total(g), 1);
    rh_guard_free(g);   /* with c still registered: freed, its socket left alone */
    CU_ASSERT(!peer_sees_end(far[1], 0));
    for (int i = 0; i < 2; i++) close(late[i]), close(cleared[i]), close(far[i]);
    CU_ASSERT_EQUAL(rh_guard_client_cap(1024, 0), 512);
    CU_ASSERT_EQUAL(rh_guard_client_cap(1024, 10), 10);
    CU_ASSERT_EQUAL(rh_guard_client_margin(1024, 512), 64);
    CU_ASSERT_EQUAL(rh_guard_client_margin(50, 25), 12);
    CU_ASSERT_EQUAL(rh_guard_client_margin(50, 80), 64);
    rh_guard_free(NULL);
}

/* The indexed heap against a scan of the same keys: after every random
 * set, pop and push, the top is the least key, ties to the least id. Keys
 * come from a few values so ties are common. */
static void test_iheap_against_scan(void)
{
    enum { N = 37 };
    rh_iheap h;
    CU_ASSERT_EQUAL_FATAL(rh_iheap_init(&h, N), 0);
    double key[N];
    bool in[N];
    for (int i = 0; i < N; i++) key[i] = INFINITY, in[i] = true;
    CU_ASSERT_EQUAL(rh_iheap_top(&h), 0);
    uint64_t seed = 7;
    int bad = 0;
    for (int step = 0; step < 20000; step++) {
        uint64_t x = rh_splitmix_next(&seed);
        uint32_t id = (uint32_t)(x % N);
        switch ((x >> 32) % 4) {
        case 0:
        case 1: {
            double k = (x >> 40) % 5 == 4 ? INFINITY : (double)((x >> 40) % 5);
            key[id] = k;
            rh_iheap_set(&h, id, k);
            break;
        }
        case 2: {
            uint32_t want = UINT32_MAX;
            for (uint32_t i = 0; i < N; i++)
                if (in[i] && (want == UINT32_MAX || key[i] < key[want])) want = i;
            uint32_t got = rh_iheap_pop(&h);
            bad += got != want;
            if (got < N) in[got] = false;
            break;
        }
        default:
            rh_iheap_push(&h, id);
            in[id] = true;
        }
        uint32_t want = UINT32_MAX;
        for (uint32_t i = 0; i < N; i++)
            if (in[i] && (want == UINT32_MAX || key[i] < key[want])) want = i;
        bad += rh_iheap_top(&h) != want;
        bad += rh_iheap_has(&h, id) != in[id];
    }
    CU_ASSERT_EQUAL(bad, 0);
    rh_iheap_free(&h);
}

void register_test_util(void)
{
    CU_pSuite s = CU_add_suite("util", NULL, NULL);
    CU_add_test(s, "percentiles match numpy", test_percentiles_match_numpy);
    CU_add_test(s, "argument forms", test_args_forms);
    CU_add_test(s, "radix sort equals qsort", test_radix_sort_equals_qsort);
    CU_add_test(s, "hash maps against arrays", test_maps_against_arrays);
    CU_add_test(s, "knob names: _ reads as -", test_knob_names);
    CU_add_test(s, "CSV: quotes, newlines, CRLF, short and long rows", test_csv_reader);
    CU_add_test(s, "atomic files: whole or not at all, devices in place", test_atomic_file);
    CU_add_test(s, "connection guard: a late header's socket shut down, counts per client", test_conn_guard);
    CU_add_test(s, "indexed heap: the least key, ties to the least id, as a scan finds", test_iheap_against_scan);
    CU_add_test(s, "spd inverse: A times its inverse is I; a dependent column named", test_spd_inverse);
}
