/* test_trace_jsonl.c — our JSONL: numbers print so they read back bit for
 * bit; records survive JSONL both ways field by field; binary -> JSONL ->
 * binary -> JSONL is stable; odd but valid lines read the same as plain
 * ones; bad lines name the line and the field. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "trace_helpers.h"
#include "traces/import/import.h"
#include "traces/jsonl.h"
#include "traces/num.h"

static void test_numbers_read_back_exactly(void)
{
    rh_rng r;
    rh_rng_seed(&r, 3);
    char buf[40];
    int ok = 1;
    for (int i = 0; i < 200000 && ok; i++) {
        double x;
        if (i % 3 == 0) {
            uint64_t u = rh_rng_u64(&r);
            memcpy(&x, &u, sizeof x);
            if (!isfinite(x)) continue;
        } else if (i % 3 == 1) {
            x = (double)(int64_t)(rh_rng_u64(&r) % 9000000000000000ULL) / 1e9 * (i % 2 ? 1 : -1);
        } else {
            x = rh_rng_uniform(&r) * 1000;
        }
        size_t n = tr_format_f64(buf, x);
        double y;
        ok = tr_parse_f64(buf, n, &y) == 0 && th_same_double(x, y) && strlen(buf) == n;
        if (!ok) printf("\n    %.17g printed as %s\n", x, buf);
    }
    CU_ASSERT(ok);
    tr_format_f64(buf, -0.0);
    CU_ASSERT_STRING_EQUAL(buf, "-0");
    tr_format_f64(buf, 0.052);
    CU_ASSERT_STRING_EQUAL(buf, "0.052");
    tr_format_f64(buf, 3536.999);
    CU_ASSERT_STRING_EQUAL(buf, "3536.999");
    tr_format_u64(buf, UINT64_MAX);
    CU_ASSERT_STRING_EQUAL(buf, "18446744073709551615");

    int64_t ns;
    CU_ASSERT_EQUAL(tr_parse_scaled("1.5", 3, 9, &ns), 0);
    CU_ASSERT_EQUAL(ns, 1500000000);
    CU_ASSERT_EQUAL(tr_parse_scaled("19440110.0", 10, 9, &ns), 0);
    CU_ASSERT_EQUAL(ns, 19440110000000000LL);
    CU_ASSERT_EQUAL(tr_parse_scaled("-2.0000000005", 13, 9, &ns), 0);   /* ties away from zero */
    CU_ASSERT_EQUAL(ns, -2000000001);
    CU_ASSERT_EQUAL(tr_parse_scaled("1e3", 3, 6, &ns), 0);
    CU_ASSERT_EQUAL(ns, 1000000000);
    CU_ASSERT_EQUAL(tr_parse_scaled("12x", 3, 6, &ns), -1);
    uint64_t v;
    const char *why;
    CU_ASSERT_EQUAL(tr_parse_count("-5", 2, 100, &v, &why), -1);
    CU_ASSERT_STRING_EQUAL(why, "is negative");
    CU_ASSERT_EQUAL(tr_parse_count("7.5", 3, 100, &v, &why), -1);
    CU_ASSERT_STRING_EQUAL(why, "is not a whole number");
    CU_ASSERT_EQUAL(tr_parse_count("1e3", 3, 10000, &v, &why), 0);
    CU_ASSERT_EQUAL(v, 1000);
}

/* A sink that keeps everything (header and records, arrays copied). */
typedef struct keep {
    tr_header h;
    tr_trace t;
    tr_record *order;   /* kinds and indices in file order */
    size_t n, cap;
} keep;

static int keep_header(void *ctx, const tr_header *h, rh_err *e)
{
    keep *k = ctx;
    (void)e;
    return tr_header_copy(&k->h, h);
}

static int keep_record(void *ctx, const tr_record *r, rh_err *e)
{
    keep *k = ctx;
    if (k->n == k->cap) {
        k->cap = k->cap ? k->cap * 2 : 1024;
        k->order = realloc(k->order, k->cap * sizeof *k->order);
    }
    k->order[k->n].kind = r->kind;
    k->n++;
    return r->kind == TR_REQUEST ? tr_trace_add_request(&k->t, &r->req, e) : tr_trace_add_step(&k->t, &r->step, e);
}

static void keep_init(keep *k)
{
    memset(k, 0, sizeof *k);
    tr_trace_init(&k->t);
}

static void keep_free(keep *k)
{
    tr_header_free(&k->h);
    tr_trace_free(&k->t);
    free(k->order);
}

static char *to_jsonl(const tr_header *h, const tr_record *recs, size_t n, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    tr_jsonl_writer w;
    tr_jsonl_init(&w, f);
    CU_ASSERT_EQUAL(tr_jsonl_header(&w, h), 0);
    for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(tr_jsonl_record(&w, &recs[i]), 0);
    tr_jsonl_free(&w);
    fclose(f);
    return buf;
}

static void test_records_roundtrip_through_jsonl(void)
{
    rh_rng r;
    rh_rng_seed(&r, 11);
    size_t n = 5000;
    tr_record *recs = calloc(n, sizeof *recs);
    uint64_t *hashes = calloc(n * 64, 8);
    double *times = calloc(n * 100, 8);
    uint64_t id = 0, index = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 5 == 4) {
            recs[i].kind = TR_STEP;
            th_random_step(&r, index, (double)i, &recs[i].step);
            index = recs[i].step.index + 1;
        } else {
            recs[i].kind = TR_REQUEST;
            th_random_request(&r, id, (double)i, 64, &recs[i].req, hashes + i * 64, times + i * 100);
            id = recs[i].req.id + 1;
        }
    }
    tr_header h;
    tr_header_init(&h);
    h.block_size = 64;
    tr_header_set_model(&h, "m \"x\" \\ \t\x01 ü");
    tr_header_set(&h, "k=1", "v,2");
    size_t len;
    char *text = to_jsonl(&h, recs, n, &len);

    keep k;
    keep_init(&k);
    tr_sink s = {&k, keep_header, keep_record};
    tr_import_opts o;
    tr_import_opts_init(&o);
    rh_err e = {{0}};
    int rc = tr_read_mem(text, len, "mem.jsonl", &o, &s, &e);   /* format recognised from content */
    if (rc) printf("\n    %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(k.h.model, h.model);
    CU_ASSERT_STRING_EQUAL(tr_header_get(&k.h, "k=1"), "v,2");
    CU_ASSERT_EQUAL(k.h.block_size, 64);
    CU_ASSERT_EQUAL_FATAL(k.n, n);
    size_t qi = 0, si = 0;
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        ok = k.order[i].kind == recs[i].kind;
        if (ok && recs[i].kind == TR_REQUEST) ok = th_req_equal(&recs[i].req, &k.t.requests[qi++]);
        else if (ok) ok = th_step_equal(&recs[i].step, &k.t.steps[si++]);
    }
    CU_ASSERT(ok);

    /* JSONL -> binary -> JSONL gives the same text. */
    char path[256], back[256];
    tu_tmp_path("jsonl_rt.jsonl", path, sizeof path);
    tu_tmp_path("jsonl_rt.rhtr", back, sizeof back);
    CU_ASSERT_EQUAL(tu_write_file(path, text, len), 0);
    uint64_t nreq = 0;
    CU_ASSERT_EQUAL(tr_import_file(path, &o, back, &nreq, NULL, &e), 0);
    CU_ASSERT_EQUAL(nreq, qi);
    char cmd[600], *out = malloc(len + 4096);
    snprintf(cmd, sizeof cmd, "%s trace cat %s", tu_bin(), back);
    CU_ASSERT_EQUAL(tu_run(cmd, out, len + 4096), 0);
    CU_ASSERT(strlen(out) == len && memcmp(out, text, len) == 0);
    free(out);
    unlink(path);
    unlink(back);
    keep_free(&k);
    free(text);
    tr_header_free(&h);
    free(recs);
    free(hashes);
    free(times);
}

static int read_text(const char *text, rh_err *e, keep *k)
{
    tr_sink s = {k, keep_header, keep_record};
    tr_import_opts o;
    tr_import_opts_init(&o);
    o.format = TR_FMT_JSONL;
    return tr_read_mem(text, strlen(text), "t.jsonl", &o, &s, e);
}

/* Whitespace, key order, exponents, escapes and big ids: the fast scanner
 * and the jansson fallback must agree. */
static void test_odd_but_valid_lines(void)
{
    const char *text =
        "{\"rehearse_trace\":1,\"block_size\":4,\"model\":\"a\\u00e9\\\"b\",\"hardware\":\"\",\"config\":{}}\r\n"
        "{\"type\":\"request\",\"arrival\":0.5,\"input_len\":8,\"output_len\":3,\"hashes\":[18446744073709551615,0]}\n"
        "\n"
        "  { \"output_len\" : 3 , \"input_len\" : 1e1, \"arrival\" : 5e-1, \"type\" : \"request\", "
        "\"hashes\" : [ 7 , 8 , 9 ] }\n"
        "{\"type\":\"request\",\"id\":9,\"arrival\":1,\"input_len\":2,\"output_len\":3,\"finish\":\"stop\",\"ttft\":0.25}\n"
        "{\"type\":\"step\",\"start\":1.25,\"duration\":0.5,\"note\\u0041\":1}";
    keep k;
    keep_init(&k);
    rh_err e = {{0}};
    CU_ASSERT_EQUAL(read_text(text, &e, &k), -1);   /* the last line's key is not a step field */
    if (!strstr(e.msg, "line 6")) printf("\n    message was: %s\n", e.msg);
    CU_ASSERT(strstr(e.msg, "t.jsonl: line 6") && strstr(e.msg, "not a step field"));
    CU_ASSERT_EQUAL_FATAL(k.t.n_requests, 3);
    CU_ASSERT_STRING_EQUAL(k.h.model, "a\xc3\xa9\"b");
    CU_ASSERT_EQUAL(k.t.requests[0].id, 0);
    CU_ASSERT_EQUAL(k.t.requests[0].hashes[0], UINT64_MAX);
    CU_ASSERT_EQUAL(k.t.requests[1].id, 1);
    CU_ASSERT_EQUAL(k.t.requests[1].input_len, 10);
    CU_ASSERT_DOUBLE_EQUAL(k.t.requests[1].arrival, 0.5, 0);
    CU_ASSERT_EQUAL(k.t.requests[1].hashes[2], 9);
    CU_ASSERT_EQUAL(k.t.requests[2].id, 9);
    CU_ASSERT_EQUAL(k.t.requests[2].finish, TR_FINISH_STOP);
    keep_free(&k);
}

static void expect_error(const char *text, const char *a, const char *b)
{
    keep k;
    keep_init(&k);
    rh_err e = {{0}};
    CU_ASSERT_EQUAL(read_text(text, &e, &k), -1);
    int ok = strstr(e.msg, a) && (!b || strstr(e.msg, b));
    if (!ok) printf("\n    message was: %s\n", e.msg);
    CU_ASSERT(ok);
    keep_free(&k);
}

static void test_bad_lines(void)
{
    const char *hdr = "{\"rehearse_trace\":1,\"block_size\":512}\n";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s{\"type\":\"request\",\"arrival\":1,\"input_len\":5,\"output_len\":3\n", hdr);
    expect_error(buf, "t.jsonl: line 2, column", "invalid JSON");
    snprintf(buf, sizeof buf, "%s{\"type\":\"request\",\"arrival\":1,\"input_len\":-5,\"output_len\":3}\n", hdr);
    expect_error(buf, "line 2: field 'input_len' is negative", NULL);
    snprintf(buf, sizeof buf, "%s{\"type\":\"request\",\"arrival\":1,\"input_len\":99999999999,\"output_len\":3}\n", hdr);
    expect_error(buf, "line 2: field 'input_len'", "absurd");
    snprintf(buf, sizeof buf, "%s{\"type\":\"request\",\"input_len\":5,\"output_len\":3}\n", hdr);
    expect_error(buf, "line 2: missing field 'arrival'", NULL);
    snprintf(buf, sizeof buf, "%s{\"type\":\"request\",\"arrival\":\"x\",\"input_len\":5,\"output_len\":3}\n", hdr);
    expect_error(buf, "line 2: field 'arrival'", "not a finite number");
    snprintf(buf, sizeof buf, "%s{\"type\":\"request\",\"arrival\":1,\"input_len\":5,\"output_len\":3,\"hashes\":[1,2]}\n", hdr);
    expect_error(buf, "line 2: field 'hashes'", "5-token prompt");
    snprintf(buf, sizeof buf, "%s{\"type\":\"thing\"}\n", hdr);
    expect_error(buf, "line 2: field 'type'", NULL);
    expect_error("", "t.jsonl: empty file", NULL);
    expect_error("{\"block_size\":5}\n", "line 1: missing field 'rehearse_trace'", NULL);
    expect_error("{\"rehearse_trace\":99}\n", "line 1: field 'rehearse_trace'", "version");
}

void register_test_trace_jsonl(void)
{
    CU_pSuite s = CU_add_suite("trace_jsonl", NULL, NULL);
    CU_add_test(s, "numbers print and read back bit for bit", test_numbers_read_back_exactly);
    CU_add_test(s, "records round-trip through JSONL; JSONL->binary->JSONL is stable", test_records_roundtrip_through_jsonl);
    CU_add_test(s, "odd but valid lines (fallback parser) read right", test_odd_but_valid_lines);
    CU_add_test(s, "bad lines name the line and the field", test_bad_lines);
}
