/* test_trace_format.c — the binary format: every field survives a write and
 * a read bit for bit; frames, live flushes, cut-short files, corrupt and
 * foreign files; the in-memory trace keeps its pointers valid. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "testutil.h"
#include "trace_helpers.h"
#include "traces/import/import.h"
#include "traces/trace.h"

#define N_RANDOM 20000

typedef struct written {
    tr_record *recs;
    uint64_t *hashes;    /* 64 per record */
    double *times;       /* 100 per record */
} written;

static void make_records(written *w, size_t n, uint64_t seed, uint32_t block_size)
{
    rh_rng r;
    rh_rng_seed(&r, seed);
    w->recs = calloc(n, sizeof *w->recs);
    w->hashes = calloc(n * 64, sizeof *w->hashes);
    w->times = calloc(n * 100, sizeof *w->times);
    uint64_t id = 0, index = 0;
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        t += rh_rng_uniform(&r);
        if (rh_rng_below(&r, 4) == 0) {
            w->recs[i].kind = TR_STEP;
            th_random_step(&r, index, t, &w->recs[i].step);
            index = w->recs[i].step.index + 1;
        } else {
            w->recs[i].kind = TR_REQUEST;
            th_random_request(&r, id, t, block_size, &w->recs[i].req, w->hashes + i * 64, w->times + i * 100);
            id = w->recs[i].req.id + 1;
        }
    }
}

static void free_records(written *w)
{
    free(w->recs);
    free(w->hashes);
    free(w->times);
}

static void header_for(tr_header *h)
{
    tr_header_init(h);
    h->block_size = 512;
    tr_header_set_model(h, "llama-3-8b \"quoted\"\n");
    tr_header_set_hardware(h, "cpu");
    tr_header_set(h, "chunked-prefill-size", "8192");
    tr_header_set(h, "note", "");
}

static int write_all(const char *path, const written *w, size_t n, unsigned flags, size_t flush_every)
{
    tr_header h;
    header_for(&h);
    rh_err e;
    tr_writer *wr = tr_writer_open(path, &h, flags, &e);
    tr_header_free(&h);
    if (!wr) {
        printf("\n    %s\n", e.msg);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (tr_write(wr, &w->recs[i], &e) < 0) {
            printf("\n    %s\n", e.msg);
            tr_writer_abort(wr);
            return -1;
        }
        if (flush_every && (i + 1) % flush_every == 0 && tr_writer_flush(wr, &e) < 0) return -1;
    }
    return tr_writer_close(wr, &e);
}

/* Reads back and compares with what was written; returns records matched. */
static size_t read_compare(const char *path, const written *w, size_t n, int *truncated)
{
    rh_err e;
    tr_reader *r = tr_reader_open(path, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    const tr_header *h = tr_reader_header(r);
    CU_ASSERT_EQUAL(h->block_size, 512);
    CU_ASSERT_STRING_EQUAL(h->model, "llama-3-8b \"quoted\"\n");
    CU_ASSERT_STRING_EQUAL(tr_header_get(h, "chunked-prefill-size"), "8192");
    CU_ASSERT_STRING_EQUAL(tr_header_get(h, "note"), "");
    tr_record rec;
    size_t k = 0;
    int rc;
    while ((rc = tr_reader_next(r, &rec, &e)) > 0) {
        if (k >= n) break;
        CU_ASSERT_EQUAL(rec.kind, w->recs[k].kind);
        int same = rec.kind == TR_REQUEST ? th_req_equal(&w->recs[k].req, &rec.req)
                                          : th_step_equal(&w->recs[k].step, &rec.step);
        CU_ASSERT(same);
        if (!same) break;
        k++;
    }
    if (rc < 0) printf("\n    %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
    if (truncated) *truncated = tr_reader_truncated(r);
    tr_reader_close(r);
    return k;
}

static void test_roundtrip_every_field(void)
{
    char path[256];
    tu_tmp_path("fmt_roundtrip.rhtr", path, sizeof path);
    written w;
    make_records(&w, N_RANDOM, 42, 512);
    CU_ASSERT_EQUAL_FATAL(write_all(path, &w, N_RANDOM, 0, 0), 0);
    int truncated = -1;
    CU_ASSERT_EQUAL(read_compare(path, &w, N_RANDOM, &truncated), N_RANDOM);
    CU_ASSERT_EQUAL(truncated, 0);
    unlink(path);
    free_records(&w);
}

/* Live recording: every flush ends a frame. A copy of the file taken after
 * a flush (what a killed recorder leaves) reads up to that flush and says
 * it was cut short. */
static void test_live_frames_and_cut_short(void)
{
    char path[256], cut[256];
    tu_tmp_path("fmt_live.rhtr", path, sizeof path);
    tu_tmp_path("fmt_live_cut.rhtr", cut, sizeof cut);
    written w;
    size_t n = 5000;
    make_records(&w, n, 7, 512);
    tr_header h;
    header_for(&h);
    rh_err e;
    tr_writer *wr = tr_writer_open(path, &h, TR_WRITE_LIVE, &e);
    tr_header_free(&h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(wr);
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT_EQUAL_FATAL(tr_write(wr, &w.recs[i], &e), 0);
        if (i == 2999) {
            CU_ASSERT_EQUAL(tr_writer_flush(wr, &e), 0);
            size_t len = 0;
            char *data = th_slurp(path, &len);   /* the file as it is on disk now */
            CU_ASSERT_PTR_NOT_NULL_FATAL(data);
            CU_ASSERT_EQUAL(tu_write_file(cut, data, len), 0);
            free(data);
        }
        if (i % 700 == 0) CU_ASSERT_EQUAL(tr_writer_flush(wr, &e), 0);
    }
    CU_ASSERT_EQUAL(tr_writer_close(wr, &e), 0);
    int truncated = -1;
    CU_ASSERT_EQUAL(read_compare(path, &w, n, &truncated), n);
    CU_ASSERT_EQUAL(truncated, 0);
    CU_ASSERT_EQUAL(read_compare(cut, &w, n, &truncated), 3000);
    CU_ASSERT_EQUAL(truncated, 1);
    unlink(path);
    unlink(cut);
    free_records(&w);
}

static int read_error(const void *data, size_t n, rh_err *e)
{
    tr_reader *r = tr_reader_open_mem(data, n, "mem.rhtr", e);
    if (!r) return -1;
    tr_record rec;
    int rc;
    while ((rc = tr_reader_next(r, &rec, e)) > 0) {}
    tr_reader_close(r);
    return rc;
}

static void test_corrupt_and_foreign(void)
{
    char path[256];
    tu_tmp_path("fmt_corrupt.rhtr", path, sizeof path);
    written w;
    make_records(&w, 3000, 9, 512);
    CU_ASSERT_EQUAL_FATAL(write_all(path, &w, 3000, 0, 0), 0);
    size_t n = 0;
    char *data = th_slurp(path, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(data);
    rh_err e;

    /* A frame cut in the middle. */
    CU_ASSERT_EQUAL(read_error(data, n - 100, &e), -1);
    CU_ASSERT(strstr(e.msg, "mem.rhtr") && strstr(e.msg, "truncated zstd frame"));
    CU_ASSERT_EQUAL(read_error(data, n / 2, &e), -1);
    CU_ASSERT(strstr(e.msg, "truncated zstd frame") != NULL);

    /* Wrong magic, a future format, empty, the magic alone. */
    char bad[16] = "NOTATRACE-------";
    CU_ASSERT_EQUAL(read_error(bad, sizeof bad, &e), -1);
    CU_ASSERT(strstr(e.msg, "mem.rhtr") && strstr(e.msg, "magic"));
    memcpy(bad, "RHTRACE9", 8);
    CU_ASSERT_EQUAL(read_error(bad, sizeof bad, &e), -1);
    CU_ASSERT(strstr(e.msg, "RHTRACE9") && strstr(e.msg, "not supported"));
    CU_ASSERT_EQUAL(read_error(data, 0, &e), -1);
    CU_ASSERT(strstr(e.msg, "empty") != NULL);
    CU_ASSERT_EQUAL(read_error(data, 8, &e), -1);
    CU_ASSERT(strstr(e.msg, "no header") != NULL);

    /* Flipped bytes: the zstd checksum or the decoder notices; never a crash. */
    int caught = 0;
    for (size_t k = 0; k < 64; k++) {
        char *copy = malloc(n);
        memcpy(copy, data, n);
        copy[8 + (k * 7919) % (n - 8)] ^= (char)(1 + k % 255);
        if (read_error(copy, n, &e) < 0) caught++;
        free(copy);
    }
    CU_ASSERT(caught >= 60);

    /* Garbage after the end marker. */
    char *more = malloc(n + 4);
    memcpy(more, data, n);
    memcpy(more + n, "junk", 4);
    CU_ASSERT_EQUAL(read_error(more, n + 4, &e), -1);
    free(more);
    free(data);
    unlink(path);
    free_records(&w);
}

static void test_writer_refuses_bad_records(void)
{
    char path[256];
    tu_tmp_path("fmt_bad.rhtr", path, sizeof path);
    tr_header h;
    tr_header_init(&h);
    h.block_size = 512;
    rh_err e;
    tr_writer *wr = tr_writer_open(path, &h, 0, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(wr);
    tr_request q = {.id = 3, .arrival = 1.5, .input_len = TR_MAX_TOKENS + 1, .output_len = 10};
    CU_ASSERT_EQUAL(tr_write_request(wr, &q, &e), -1);
    CU_ASSERT(strstr(e.msg, "input_len") && strstr(e.msg, "request 3"));
    q.input_len = 100;
    q.arrival = NAN;
    CU_ASSERT_EQUAL(tr_write_request(wr, &q, &e), -1);
    CU_ASSERT(strstr(e.msg, "arrival") != NULL);
    q.arrival = 1;
    uint64_t hs[3] = {1, 2, 3};
    q.hashes = hs;
    q.n_hashes = 3;   /* 100 tokens are one block of 512 */
    CU_ASSERT_EQUAL(tr_write_request(wr, &q, &e), -1);
    CU_ASSERT(strstr(e.msg, "hashes") != NULL);
    /* Nothing appears at the path until close, and abort leaves nothing. */
    CU_ASSERT(!tu_file_exists(path));
    tr_writer_abort(wr);
    CU_ASSERT(!tu_file_exists(path));
    char tmpdir_listing[512];
    CU_ASSERT_EQUAL(tu_run("ls build/tmp | grep -c 'fmt_bad.rhtr.*tmp' || true", tmpdir_listing, sizeof tmpdir_listing), 0);
    CU_ASSERT_EQUAL(atoi(tmpdir_listing), 0);
    tr_header_free(&h);
}

/* Hash arrays copied into a tr_trace stay where they are while it grows. */
static void test_memtrace_pointers_stay_valid(void)
{
    tr_trace t;
    tr_trace_init(&t);
    t.header.block_size = 16;
    rh_err e;
    uint64_t *buf = malloc(200000 * sizeof *buf);
    const uint64_t *first_ptr = NULL;
    for (uint32_t i = 0; i < 20000; i++) {
        /* mostly small, now and then one larger than an arena chunk */
        uint32_t n = i % 5000 == 4999 ? 200000 : 1 + (i * 37) % 300;
        for (uint32_t k = 0; k < n; k++) buf[k] = (uint64_t)i * 1000000 + k;
        tr_request q = {.id = i, .arrival = i * 0.001, .input_len = n * 16, .output_len = 1, .n_hashes = n, .hashes = buf};
        CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(&t, &q, &e), 0);
        if (i == 0) first_ptr = t.requests[0].hashes;
    }
    free(buf);
    CU_ASSERT_PTR_EQUAL(t.requests[0].hashes, first_ptr);
    int ok = 1;
    for (uint32_t i = 0; i < 20000 && ok; i++) {
        const tr_request *q = &t.requests[i];
        ok = q->n_hashes == (i % 5000 == 4999 ? 200000 : 1 + (i * 37) % 300) && q->hashes[0] == (uint64_t)i * 1000000 &&
             q->hashes[q->n_hashes - 1] == (uint64_t)i * 1000000 + q->n_hashes - 1;
    }
    CU_ASSERT(ok);

    /* Save, load, compare; sorting keeps ties in order. */
    char path[256];
    tu_tmp_path("fmt_mem.rhtr", path, sizeof path);
    CU_ASSERT_EQUAL(tr_trace_save(&t, path, &e), 0);
    tr_trace u;
    CU_ASSERT_EQUAL_FATAL(tr_trace_load(path, &u, &e), 0);
    CU_ASSERT_EQUAL(u.n_requests, t.n_requests);
    ok = 1;
    for (size_t i = 0; i < u.n_requests && ok; i++) ok = th_req_equal(&t.requests[i], &u.requests[i]);
    CU_ASSERT(ok);
    u.requests[0].arrival = 1e9;
    u.requests[1].arrival = -1;
    u.requests[2].arrival = -1;
    tr_trace_sort_requests(&u);
    CU_ASSERT_EQUAL(u.requests[0].id, 1);
    CU_ASSERT_EQUAL(u.requests[1].id, 2);
    CU_ASSERT_EQUAL(u.requests[2].id, 3);
    CU_ASSERT_EQUAL(u.requests[u.n_requests - 1].id, 0);
    ok = 1;
    for (size_t i = 1; i < u.n_requests && ok; i++) ok = u.requests[i - 1].arrival <= u.requests[i].arrival;
    CU_ASSERT(ok);
    tr_trace_free(&u);
    tr_trace_free(&t);
    unlink(path);
}

static void test_time_helpers(void)
{
    CU_ASSERT_EQUAL(tr_blocks(0, 512), 0);
    CU_ASSERT_EQUAL(tr_blocks(1, 512), 1);
    CU_ASSERT_EQUAL(tr_blocks(512, 512), 1);
    CU_ASSERT_EQUAL(tr_blocks(513, 512), 2);
    CU_ASSERT_EQUAL(tr_blocks(513, 0), 0);
    CU_ASSERT_DOUBLE_EQUAL(tr_round_ns(1.0000000004), 1.0, 0);
    CU_ASSERT_EQUAL(tr_finish_parse("stop"), TR_FINISH_STOP);
    CU_ASSERT_EQUAL(tr_finish_parse("nope"), -1);
    CU_ASSERT_STRING_EQUAL(tr_finish_name(TR_FINISH_ABORT), "abort");
}

/* The decompressed bytes of FORMAT.md's example, compressed here by hand
 * (one frame, with its content checksum as the format requires). */
static tr_reader *open_items(const uint8_t *items, size_t n, uint8_t *file, size_t cap, rh_err *e)
{
    memcpy(file, TR_MAGIC, TR_MAGIC_LEN);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    size_t z = ZSTD_compress2(cc, file + TR_MAGIC_LEN, cap - TR_MAGIC_LEN, items, n);
    ZSTD_freeCCtx(cc);
    CU_ASSERT_FATAL(!ZSTD_isError(z));
    return tr_reader_open_mem(file, TR_MAGIC_LEN + z, "example", e);
}

static void test_format_md_example(void)
{
    uint8_t items[] = {0xc0, 0x04, 0x80, 0x04, 0x00, 0x00, 0x00,                  /* header */
                       0x80, 0x01, 0x01, 0x01, 0x01, 0x01, 0x03, 0x03,            /* block header */
                       0x08, 0x88, 0x0a, 0x04, 0x01, 0x00, 0x02, 0x7a, 0xf4, 0x02, /* streams */
                       0xc1, 0x01, 0x00};                                          /* end */
    uint8_t file[256];
    rh_err e;
    tr_reader *r = open_items(items, sizeof items, file, sizeof file, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(tr_reader_header(r)->block_size, 512);
    tr_record rec;
    CU_ASSERT_EQUAL_FATAL(tr_reader_next(r, &rec, &e), 1);
    CU_ASSERT_EQUAL(rec.kind, TR_REQUEST);
    CU_ASSERT_EQUAL(rec.req.id, 0);
    CU_ASSERT(rec.req.arrival == 0.25);
    CU_ASSERT_EQUAL(rec.req.input_len, 1000);
    CU_ASSERT_EQUAL(rec.req.output_len, 10);
    CU_ASSERT_EQUAL_FATAL(rec.req.n_hashes, 2);
    CU_ASSERT(rec.req.hashes[0] == 0 && rec.req.hashes[1] == 1);
    CU_ASSERT_EQUAL(tr_reader_next(r, &rec, &e), 0);
    CU_ASSERT_EQUAL(tr_reader_truncated(r), 0);
    tr_reader_close(r);

    /* Version 2's request with a priority (tag 80 | HASHES; zz(5) = 0a in
     * VARS before the runs); the same bytes in a version 1 file are corrupt. */
    uint8_t pitems[] = {0xc0, 0x02, 0x80, 0x04, 0x00, 0x00, 0x00, 0x80, 0x01, 0x01, 0x01, 0x01, 0x01, 0x04, 0x03,
                        0x88, 0x88, 0x0a, 0x04, 0x0a, 0x01, 0x00, 0x02, 0x7a, 0xf4, 0x02, 0xc1, 0x01, 0x00};
    r = open_items(pitems, sizeof pitems, file, sizeof file, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(tr_reader_next(r, &rec, &e), 1);
    CU_ASSERT_EQUAL(rec.req.priority, 5);
    CU_ASSERT_EQUAL(rec.req.n_hashes, 2);
    tr_reader_close(r);
    pitems[1] = 0x01;
    r = open_items(pitems, sizeof pitems, file, sizeof file, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(tr_reader_next(r, &rec, &e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "record tag 0x88"));
    tr_reader_close(r);

    /* Version 3's extras: mask 3 (a priority, zz(5) = 0a, and adapter 7);
     * an empty mask or an unknown bit is refused, naming the field. */
    uint8_t xitems[] = {0xc0, 0x03, 0x80, 0x04, 0x00, 0x00, 0x00, 0x80, 0x01, 0x01, 0x01, 0x01, 0x01, 0x06, 0x03,
                        0x88, 0x88, 0x0a, 0x04, 0x03, 0x0a, 0x07, 0x01, 0x00, 0x02, 0x7a, 0xf4, 0x02,
                        0xc1, 0x01, 0x00};
    r = open_items(xitems, sizeof xitems, file, sizeof file, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(tr_reader_next(r, &rec, &e), 1);
    CU_ASSERT(rec.req.priority == 5 && rec.req.adapter == 7 && rec.req.n_hashes == 2);
    tr_reader_close(r);
    uint8_t masks[] = {0x00, 0x04};
    for (int i = 0; i < 2; i++) {
        xitems[19] = masks[i];
        r = open_items(xitems, sizeof xitems, file, sizeof file, &e);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        CU_ASSERT_EQUAL(tr_reader_next(r, &rec, &e), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "extras"));
        tr_reader_close(r);
    }

    /* The same with block_size 0: hashes are refused, naming the field. */
    items[2] = 0x00;
    memmove(items + 3, items + 4, sizeof items - 4);
    r = open_items(items, sizeof items - 1, file, sizeof file, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(tr_reader_next(r, &rec, &e), -1);
    CU_ASSERT(strstr(e.msg, "example: record 1 (request)") && strstr(e.msg, "hashes"));
    tr_reader_close(r);

    /* A wrong count in the end marker, and a record that overruns its block. */
    uint8_t items2[] = {0xc0, 0x02, 0x80, 0x04, 0x00, 0x00, 0x00, 0x80, 0x01, 0x01, 0x01, 0x01, 0x01, 0x03, 0x03,
                        0x08, 0x88, 0x0a, 0x04, 0x01, 0x00, 0x02, 0x7a, 0xf4, 0x02, 0xc1, 0x02, 0x00};
    r = open_items(items2, sizeof items2, file, sizeof file, &e);
    CU_ASSERT_EQUAL(tr_reader_next(r, &rec, &e), 1);
    CU_ASSERT_EQUAL(tr_reader_next(r, &rec, &e), -1);
    CU_ASSERT(strstr(e.msg, "end-of-trace marker counts 2 requests") != NULL);
    tr_reader_close(r);
    items2[13] = 0x02;   /* VARS said to hold 2 bytes: the run length is missing */
    r = open_items(items2, sizeof items2, file, sizeof file, &e);
    CU_ASSERT_EQUAL(tr_reader_next(r, &rec, &e), -1);
    CU_ASSERT(strstr(e.msg, "record 1") && strstr(e.msg, "hashes"));
    tr_reader_close(r);
}

/* Every frame must carry a content checksum: the same records recompressed
 * into one frame without it are refused (with the byte of that frame),
 * with it they read back as before. */
static void test_frames_need_checksums(void)
{
    char a[256], b[256], c[256];
    tu_tmp_path("ck.rhtr", a, sizeof a);
    tu_tmp_path("ck-none.rhtr", b, sizeof b);
    tu_tmp_path("ck-on.rhtr", c, sizeof c);
    tr_trace t;
    tr_trace_init(&t);
    rh_err e;
    for (uint32_t i = 0; i < 50; i++) {
        tr_request r = {.id = i, .arrival = 0.1 * i, .input_len = 10 + i, .output_len = 3};
        CU_ASSERT_EQUAL_FATAL(tr_trace_add_request(&t, &r, &e), 0);
    }
    CU_ASSERT_EQUAL_FATAL(tr_trace_save(&t, a, &e), 0);
    tr_trace_free(&t);
    FILE *f = fopen(a, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static uint8_t file[1 << 16], raw[1 << 20], out[1 << 20];
    size_t n = fread(file, 1, sizeof file, f);
    fclose(f);
    /* the records: every frame after the magic, decompressed */
    ZSTD_DStream *ds = ZSTD_createDStream();
    ZSTD_inBuffer in = {file + TR_MAGIC_LEN, n - TR_MAGIC_LEN, 0};
    ZSTD_outBuffer o = {raw, sizeof raw, 0};
    while (in.pos < in.size) CU_ASSERT_FATAL(!ZSTD_isError(ZSTD_decompressStream(ds, &o, &in)));
    ZSTD_freeDStream(ds);
    for (int checksum = 0; checksum < 2; checksum++) {
        ZSTD_CCtx *cc = ZSTD_createCCtx();
        ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, checksum);
        size_t k = ZSTD_compress2(cc, out, sizeof out, raw, o.pos);
        ZSTD_freeCCtx(cc);
        CU_ASSERT_FATAL(!ZSTD_isError(k));
        const char *path = checksum ? c : b;
        f = fopen(path, "wb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fwrite(file, 1, TR_MAGIC_LEN, f);
        fwrite(out, 1, k, f);
        fclose(f);
        tr_trace back;
        int rc = tr_trace_load(path, &back, &e);
        if (checksum) {
            CU_ASSERT_EQUAL(rc, 0);
            CU_ASSERT_EQUAL(back.n_requests, 50);
            tr_trace_free(&back);
        } else {
            CU_ASSERT_EQUAL(rc, -1);
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "has no content checksum"));
            char at[32];
            snprintf(at, sizeof at, "byte %d", TR_MAGIC_LEN);
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, at));
        }
    }
    unlink(a);
    unlink(b);
    unlink(c);
}

void register_test_trace_format(void)
{
    CU_pSuite s = CU_add_suite("trace_format", NULL, NULL);
    CU_add_test(s, "every field round-trips bit for bit", test_roundtrip_every_field);
    CU_add_test(s, "live frames; a copy after a flush reads as cut short", test_live_frames_and_cut_short);
    CU_add_test(s, "corrupt, truncated and foreign files give one message", test_corrupt_and_foreign);
    CU_add_test(s, "writer refuses bad records and leaves no file", test_writer_refuses_bad_records);
    CU_add_test(s, "in-memory trace: pointers stay valid, save/load/sort", test_memtrace_pointers_stay_valid);
    CU_add_test(s, "helpers", test_time_helpers);
    CU_add_test(s, "FORMAT.md's example decodes; malformed blocks are refused", test_format_md_example);
    CU_add_test(s, "a frame without a content checksum is refused", test_frames_need_checksums);
}
