/* test_trace_real.c — the public traces in ../shared/traces import with
 * their exact request counts, and `trace stats` agrees with a second,
 * independent reading of the raw files done here (own parsing, own
 * percentiles, an exact trie for the prefix hit ratio). Import -> binary ->
 * JSONL -> import is lossless field by field on each of them. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "trace_helpers.h"
#include "traces/import/import.h"
#include "traces/tools/stats.h"

typedef struct raw {
    size_t n;
    double *arrival;     /* s, on the file's own clock */
    double *in, *out;
    uint64_t blocks, hits;
} raw;

static void raw_free(raw *r)
{
    free(r->arrival);
    free(r->in);
    free(r->out);
}

static void raw_push(raw *r, double t, double in, double out)
{
    r->arrival = realloc(r->arrival, (r->n + 1) * sizeof *r->arrival);
    r->in = realloc(r->in, (r->n + 1) * sizeof *r->in);
    r->out = realloc(r->out, (r->n + 1) * sizeof *r->out);
    r->arrival[r->n] = t;
    r->in[r->n] = in;
    r->out[r->n] = out;
    r->n++;
}

/* An exact trie of hash sequences: node (parent, hash) -> id. */
typedef struct trie {
    uint64_t *parent, *hash, *id;
    size_t cap, n;
} trie;

static uint64_t trie_child(trie *t, uint64_t parent, uint64_t hash, int *existed)
{
    if ((t->n + 1) * 2 > t->cap) {
        trie old = *t;
        t->cap = t->cap ? t->cap * 2 : 1 << 16;
        t->parent = calloc(t->cap, 8), t->hash = calloc(t->cap, 8), t->id = calloc(t->cap, 8);
        t->n = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.id[i]) {
                int ex;
                uint64_t id = old.id[i];
                size_t j = (old.parent[i] * 0x9E3779B97F4A7C15ULL ^ old.hash[i]) % t->cap;
                while (t->id[j]) j = (j + 1) % t->cap;
                t->parent[j] = old.parent[i], t->hash[j] = old.hash[i], t->id[j] = id, t->n++;
                (void)ex;
            }
        free(old.parent), free(old.hash), free(old.id);
    }
    size_t j = (parent * 0x9E3779B97F4A7C15ULL ^ hash) % t->cap;
    while (t->id[j]) {
        if (t->parent[j] == parent && t->hash[j] == hash) {
            *existed = 1;
            return t->id[j];
        }
        j = (j + 1) % t->cap;
    }
    t->parent[j] = parent, t->hash[j] = hash, t->id[j] = ++t->n;
    *existed = 0;
    return t->id[j];
}

static int read_mooncake_raw(const char *path, raw *r)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    trie t = {0};
    while (getline(&line, &cap, f) > 0) {
        char *p = strstr(line, "\"timestamp\":"), *q = strstr(line, "\"input_length\":"),
             *o = strstr(line, "\"output_length\":"), *h = strstr(line, "\"hash_ids\":");
        if (!p || !q || !o) continue;
        raw_push(r, strtod(p + 12, NULL) / 1000.0, strtod(q + 15, NULL), strtod(o + 16, NULL));
        if (!h) continue;
        char *s = strchr(h, '[') + 1;
        uint64_t node = 0;
        for (;;) {
            while (*s == ' ' || *s == ',') s++;
            if (*s == ']') break;
            char *end;
            uint64_t v = strtoull(s, &end, 10);
            s = end;
            int existed;
            node = trie_child(&t, node, v, &existed);
            r->blocks++;
            r->hits += existed;
        }
    }
    free(line);
    free(t.parent), free(t.hash), free(t.id);
    fclose(f);
    return 0;
}

static int read_azure_raw(const char *path, raw *r)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    int first = 1;
    while (getline(&line, &cap, f) > 0) {
        if (first) {
            first = 0;
            continue;
        }
        struct tm tm = {0};
        double sec;
        unsigned in, out;
        if (sscanf(line, "%d-%d-%d %d:%d:%lf,%u,%u", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                   &sec, &in, &out) != 8)
            continue;
        tm.tm_year -= 1900;
        tm.tm_mon -= 1;
        raw_push(r, (double)timegm(&tm) + sec, in, out);
    }
    free(line);
    fclose(f);
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *s, size_t n, double q)
{
    double pos = q / 100 * (double)(n - 1);
    size_t lo = (size_t)pos;
    return lo + 1 < n ? s[lo] + (s[lo + 1] - s[lo]) * (pos - (double)lo) : s[n - 1];
}

static void check_lengths(const double *raw_v, size_t n, const rh_summary *s)
{
    double sum = 0, *v = malloc(n * sizeof *v);
    memcpy(v, raw_v, n * sizeof *v);
    for (size_t i = 0; i < n; i++) sum += v[i];
    qsort(v, n, sizeof *v, cmp_d);
    CU_ASSERT_DOUBLE_EQUAL(s->mean, sum / (double)n, 1e-9 * s->mean);
    CU_ASSERT_DOUBLE_EQUAL(s->median, pct(v, n, 50), 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s->p90, pct(v, n, 90), 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s->p99, pct(v, n, 99), 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(s->max, v[n - 1], 0);
    free(v);
}

/* Compares `trace stats --json` (through the CLI) with the raw reading. */
static void check_stats(const char *path, raw *r, size_t expect_n)
{
    char cmd[1024], *out = malloc(1 << 16);
    snprintf(cmd, sizeof cmd, "%s trace stats --json %s", tu_bin(), path);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, out, 1 << 16), 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_EQUAL(r->n, expect_n);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "requests")), (json_int_t)expect_n);
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < r->n; i++) lo = fmin(lo, r->arrival[i]), hi = fmax(hi, r->arrival[i]);
    double span = json_real_value(json_object_get(j, "span_s"));
    CU_ASSERT_DOUBLE_EQUAL(span, hi - lo, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "arrival_rate")), (double)(r->n - 1) / (hi - lo), 1e-9);
    json_t *in = json_object_get(j, "input_len"), *ou = json_object_get(j, "output_len");
    rh_summary si = {r->n, json_real_value(json_object_get(in, "mean")), 0, 0, json_real_value(json_object_get(in, "median")),
                     json_real_value(json_object_get(in, "p90")), json_real_value(json_object_get(in, "p99")),
                     json_real_value(json_object_get(in, "max"))};
    rh_summary so = {r->n, json_real_value(json_object_get(ou, "mean")), 0, 0, json_real_value(json_object_get(ou, "median")),
                     json_real_value(json_object_get(ou, "p90")), json_real_value(json_object_get(ou, "p99")),
                     json_real_value(json_object_get(ou, "max"))};
    check_lengths(r->in, r->n, &si);
    check_lengths(r->out, r->n, &so);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "blocks")), (json_int_t)r->blocks);
    double ratio = r->blocks ? (double)r->hits / (double)r->blocks : 0;
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "prefix_hit_ratio")), ratio, 1e-12);
    json_decref(j);
    free(out);
}

/* import -> binary A -> JSONL -> binary B: A and B hold the same records. */
static void check_lossless(const char *path, const char *tag)
{
    char a[256], jl[256], b[256], cmd[4096], msg[1024];
    snprintf(msg, sizeof msg, "real_%s_a.rhtr", tag);
    tu_tmp_path(msg, a, sizeof a);
    snprintf(msg, sizeof msg, "real_%s.jsonl", tag);
    tu_tmp_path(msg, jl, sizeof jl);
    snprintf(msg, sizeof msg, "real_%s_b.rhtr", tag);
    tu_tmp_path(msg, b, sizeof b);
    snprintf(cmd, sizeof cmd, "%s trace import %s -o %s && %s trace export %s --format jsonl -o %s && %s trace import %s -o %s",
             tu_bin(), path, a, tu_bin(), a, jl, tu_bin(), jl, b);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, msg, sizeof msg), 0);
    tr_trace ta, tb;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(a, &ta, &e), 0);
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(b, &tb, &e), 0);
    CU_ASSERT_EQUAL(ta.n_requests, tb.n_requests);
    int ok = ta.n_requests == tb.n_requests && ta.header.block_size == tb.header.block_size &&
             ta.header.n_kv == tb.header.n_kv;
    for (size_t i = 0; i < ta.n_requests && ok; i++) ok = th_req_equal(&ta.requests[i], &tb.requests[i]);
    CU_ASSERT(ok);
    tr_trace_free(&ta);
    tr_trace_free(&tb);
    unlink(a), unlink(jl), unlink(b);
}

static void test_mooncake(void)
{
    char path[512];
    if (!tu_shared_file("mooncake_conversation_trace.jsonl", path, sizeof path)) return;
    raw r = {0};
    CU_ASSERT_EQUAL_FATAL(read_mooncake_raw(path, &r), 0);
    check_stats(path, &r, 12031);
    CU_ASSERT(r.hits > 0 && r.blocks == 288500);

    /* Every imported request equals its raw line (the file is in order). */
    tr_trace t;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(path, &t, &e), 0);
    CU_ASSERT_EQUAL(t.n_requests, 12031);
    int ok = 1;
    for (size_t i = 0; i < t.n_requests && ok; i++)
        ok = t.requests[i].arrival == r.arrival[i] - r.arrival[0] && t.requests[i].input_len == r.in[i] &&
             t.requests[i].output_len == r.out[i] && t.requests[i].n_hashes == tr_blocks(t.requests[i].input_len, 512);
    CU_ASSERT(ok);
    tr_trace_free(&t);
    check_lossless(path, "mooncake");
    raw_free(&r);
}

static void test_azure(const char *file, size_t expect, const char *tag)
{
    char path[512];
    if (!tu_shared_file(file, path, sizeof path)) return;
    raw r = {0};
    CU_ASSERT_EQUAL_FATAL(read_azure_raw(path, &r), 0);
    check_stats(path, &r, expect);
    tr_trace t;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(path, &t, &e), 0);
    CU_ASSERT_EQUAL(t.n_requests, expect);
    int ok = t.n_requests == r.n;
    for (size_t i = 0; i < t.n_requests && ok; i++)
        ok = fabs(t.requests[i].arrival - (r.arrival[i] - r.arrival[0])) < 1e-6 && t.requests[i].input_len == r.in[i] &&
             t.requests[i].output_len == r.out[i];
    CU_ASSERT(ok);
    tr_trace_free(&t);
    check_lossless(path, tag);
    raw_free(&r);
}

static void test_azure_code(void)
{
    test_azure("AzureLLMInferenceTrace_code.csv", 8819, "code");
}

static void test_azure_conv(void)
{
    test_azure("AzureLLMInferenceTrace_conv.csv", 19366, "conv");
}

void register_test_trace_real(void)
{
    CU_pSuite s = CU_add_suite("trace_real", NULL, NULL);
    CU_add_test(s, "Mooncake conversation: 12,031 requests, stats match the raw file", test_mooncake);
    CU_add_test(s, "Azure 2023 code: 8,819 requests, stats match the raw file", test_azure_code);
    CU_add_test(s, "Azure 2023 conv: 19,366 requests, stats match the raw file", test_azure_conv);
}
