/* test_engine_record.c — the recorder: the background-thread mode writes
 * exactly what the synchronous mode writes, and both exactly the records
 * handed to them (more than the queue holds, so the producer waits), a live recording reads back while still
 * open, bad records are refused at once, and an aborted recording leaves
 * nothing. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/record/recorder.h"
#include "testutil.h"
#include "trace_helpers.h"
#include "traces/import/import.h"

#define N_RECORDS 3000   /* more than the queue's 1024 */

static tr_header header(void)
{
    tr_header h;
    tr_header_init(&h);
    h.block_size = 16;
    tr_header_set_model(&h, "tiny-llama");
    tr_header_set(&h, "source", "test");
    return h;
}

/* The same seeded mix of requests and steps into a recorder. */
static int write_records(recorder *r, uint64_t seed, uint32_t n)
{
    rh_rng g;
    rh_rng_seed(&g, seed);
    uint64_t hashes[64];
    double times[100];
    rh_err e;
    for (uint32_t i = 0; i < n; i++) {
        int rc;
        if (rh_rng_below(&g, 2)) {
            tr_request q;
            th_random_request(&g, i, i * 0.01, 16, &q, hashes, times);
            rc = rec_request(r, &q, &e);
            /* The copy is the recorder's: scribbling on ours changes nothing. */
            memset(hashes, 0xab, sizeof hashes);
            memset(times, 0xcd, sizeof times);
        } else {
            tr_step s;
            th_random_step(&g, i, i * 0.01, &s);
            rc = rec_step(r, &s, &e);
        }
        if (rc < 0) {
            printf("\n  record %u: %s\n", i, e.msg);
            return -1;
        }
    }
    return 0;
}

static int load(const char *path, tr_trace *t)
{
    rh_err e;
    int rc = tr_trace_load(path, t, &e);
    if (rc) printf("\n  %s\n", e.msg);
    return rc;
}

static void test_threaded_writes_what_sync_writes(void)
{
    char a[256], b[256];
    tu_tmp_path("rec-sync.rhtr", a, sizeof a);
    tu_tmp_path("rec-thread.rhtr", b, sizeof b);
    tr_header h = header();
    rh_err e;
    recorder *ra = rec_open(a, &h, 0, &e), *rb = rec_open(b, &h, REC_THREAD, &e);
    CU_ASSERT_FATAL(ra && rb);
    CU_ASSERT_EQUAL(write_records(ra, 7, N_RECORDS), 0);
    CU_ASSERT_EQUAL(write_records(rb, 7, N_RECORDS), 0);
    CU_ASSERT_EQUAL(rec_close(ra, &e), 0);
    CU_ASSERT_EQUAL(rec_close(rb, &e), 0);
    tr_header_free(&h);
    tr_trace ta, tb;
    CU_ASSERT_FATAL(load(a, &ta) == 0 && load(b, &tb) == 0);
    CU_ASSERT_EQUAL(ta.n_requests + ta.n_steps, N_RECORDS);
    CU_ASSERT_EQUAL(ta.n_requests, tb.n_requests);
    CU_ASSERT_EQUAL(ta.n_steps, tb.n_steps);
    CU_ASSERT_STRING_EQUAL(tb.header.model, "tiny-llama");
    CU_ASSERT_EQUAL(tb.header.block_size, 16);
    int same = 1;
    for (size_t i = 0; same && i < ta.n_requests && i < tb.n_requests; i++)
        same = th_req_equal(&ta.requests[i], &tb.requests[i]);
    for (size_t i = 0; same && i < ta.n_steps && i < tb.n_steps; i++) same = th_step_equal(&ta.steps[i], &tb.steps[i]);
    CU_ASSERT(same);
    /* And both hold exactly what was handed over: the same seeded records,
     * made again here, in the order they were written. */
    rh_rng g;
    rh_rng_seed(&g, 7);
    uint64_t hashes[64];
    double times[100];
    size_t nq = 0, ns = 0;
    int as_written = 1;
    for (uint32_t i = 0; i < N_RECORDS && as_written; i++) {
        if (rh_rng_below(&g, 2)) {
            tr_request q;
            th_random_request(&g, i, i * 0.01, 16, &q, hashes, times);
            as_written = nq < ta.n_requests && th_req_equal(&q, &ta.requests[nq]) && th_req_equal(&q, &tb.requests[nq]);
            nq++;
        } else {
            tr_step st;
            th_random_step(&g, i, i * 0.01, &st);
            as_written = ns < ta.n_steps && th_step_equal(&st, &ta.steps[ns]) && th_step_equal(&st, &tb.steps[ns]);
            ns++;
        }
        if (!as_written) printf("\n  record %u differs from what was written\n", i);
    }
    CU_ASSERT(as_written);
    CU_ASSERT_EQUAL(nq, ta.n_requests);
    CU_ASSERT_EQUAL(ns, ta.n_steps);
    tr_trace_free(&ta);
    tr_trace_free(&tb);
    unlink(a);
    unlink(b);
}

/* Counts the records a reader gets from the file as it is now. */
static int64_t readable(const char *path, int *truncated)
{
    rh_err e;
    tr_reader *rd = tr_reader_open(path, &e);
    if (!rd) {
        printf("\n  %s\n", e.msg);
        return -1;
    }
    tr_record rec;
    int64_t n = 0;
    int rc;
    while ((rc = tr_reader_next(rd, &rec, &e)) == 1) n++;
    if (rc < 0) printf("\n  %s\n", e.msg);
    *truncated = tr_reader_truncated(rd);
    tr_reader_close(rd);
    return rc < 0 ? -1 : n;
}

static void test_live_recording_reads_back_while_open(void)
{
    char p[256];
    tu_tmp_path("rec-live.rhtr", p, sizeof p);
    tr_header h = header();
    rh_err e;
    recorder *r = rec_open(p, &h, REC_THREAD, &e);
    tr_header_free(&h);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_EQUAL(write_records(r, 3, 200), 0);
    CU_ASSERT_EQUAL(rec_flush(r, &e), 0);
    int trunc = 0;
    CU_ASSERT_EQUAL(readable(p, &trunc), 200);          /* everything so far, */
    CU_ASSERT_EQUAL(trunc, 1);                          /* and it says the run goes on */
    /* Without being asked, the writer flushes within about a second of the
     * last record (polled, up to 10 s, so a loaded machine cannot fail it). */
    CU_ASSERT_EQUAL(write_records(r, 4, 50), 0);
    int64_t seen = 0;
    for (int i = 0; i < 200 && seen != 250; i++) {
        usleep(50000);
        seen = readable(p, &trunc);
    }
    CU_ASSERT_EQUAL(seen, 250);
    CU_ASSERT_EQUAL(rec_close(r, &e), 0);
    CU_ASSERT_EQUAL(readable(p, &trunc), 250);
    CU_ASSERT_EQUAL(trunc, 0);
    unlink(p);
}

static void test_bad_records_refused_and_abort_leaves_nothing(void)
{
    char p[256];
    for (int mode = 0; mode < 2; mode++) {
        tu_tmp_path(mode ? "rec-bad-thread.rhtr" : "rec-bad-sync.rhtr", p, sizeof p);
        tr_header h = header();
        rh_err e = {{0}};
        recorder *r = rec_open(p, &h, mode ? REC_THREAD : 0, &e);
        tr_header_free(&h);
        CU_ASSERT_FATAL(r != NULL);
        double times[3] = {0.1, 0.2, 0.3};
        tr_request q = {.id = 5, .input_len = 10, .output_len = 2, .flags = TR_REQ_MEASURED, .n_times = 3,
                        .token_times = times};
        CU_ASSERT_EQUAL(rec_request(r, &q, &e), -1);   /* more times than outputs */
        CU_ASSERT(strstr(e.msg, "5") != NULL);
        tr_step s = {.index = 1, .duration = 0.0 / 0.0};
        CU_ASSERT_EQUAL(rec_step(r, &s, &e), -1);
        CU_ASSERT_EQUAL(write_records(r, 9, 20), 0);   /* still usable */
        rec_abort(r);
        CU_ASSERT_FALSE(tu_file_exists(p));
    }
    rh_err e;
    tr_header h = header();
    CU_ASSERT_PTR_NULL(rec_open("build/tmp/no/such/dir/x.rhtr", &h, REC_THREAD, &e));
    CU_ASSERT(strstr(e.msg, "no/such/dir") != NULL);
    tr_header_free(&h);
}

void register_test_engine_record(void)
{
    CU_pSuite s = CU_add_suite("engine_record", NULL, NULL);
    CU_add_test(s, "the writer thread writes what the synchronous mode writes", test_threaded_writes_what_sync_writes);
    CU_add_test(s, "a live recording reads back while open", test_live_recording_reads_back_while_open);
    CU_add_test(s, "bad records are refused; an abort leaves nothing", test_bad_records_refused_and_abort_leaves_nothing);
}
