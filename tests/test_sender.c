/* test_sender.c — when a trace's requests reach the server (traces/sender.h)
 * against sequences worked by hand: open loop at the scaled arrivals;
 * closed loop, a free client per request, and a session's later turns sent
 * by its client only once the turn before finished. */
#include <CUnit/CUnit.h>
#include <math.h>

#include "traces/sender.h"

static void add(tr_trace *t, double arrival, uint64_t session, uint32_t turn)
{
    tr_request r = {.id = t->n_requests, .arrival = arrival, .input_len = 10, .output_len = 1,
                    .session_id = session, .turn = turn};
    rh_err e;
    CU_ASSERT_EQUAL(tr_trace_add_request(t, &r, &e), 0);
}

/* Sends everything due by `now` into got[] (indices); returns how many. */
static int due(tr_sender *s, double now, uint32_t *got, double *next)
{
    int n = 0;
    uint32_t i;
    double sent;
    while (tr_sender_next(s, now, &i, &sent, next)) {
        CU_ASSERT(sent <= now);
        got[n++] = i;
    }
    return n;
}

static void test_open_loop(void)
{
    tr_trace t;
    tr_trace_init(&t);
    add(&t, 1, 0, 0), add(&t, 0.5, 0, 0), add(&t, 3, 0, 0);
    rh_err e;
    tr_sender *s = tr_sender_new(&t, 2, 0, &e);
    uint32_t got[8];
    double next;
    CU_ASSERT_EQUAL(due(s, 0.25, got, &next), 1);   /* 0.5 / 2 */
    CU_ASSERT_EQUAL(got[0], 1);
    CU_ASSERT_EQUAL(next, 0.5);
    CU_ASSERT_EQUAL(due(s, 1, got, &next), 1);
    CU_ASSERT_EQUAL(next, 1.5);
    CU_ASSERT_EQUAL(tr_sender_left(s), 1);
    tr_sender_free(s);
    tr_trace_free(&t);
}

/* Two clients; sessions 7 (three turns) and 8 (two turns), then a request
 * outside sessions, all at 0, listed session after session as `trace
 * synth` lists a closed-loop trace. */
static void test_closed_loop_sessions(void)
{
    tr_trace t;
    tr_trace_init(&t);
    add(&t, 0, 7, 0), add(&t, 0, 7, 1), add(&t, 0, 7, 2), add(&t, 0, 8, 0), add(&t, 0, 8, 1), add(&t, 0, 0, 0);
    rh_err e;
    tr_sender *s = tr_sender_new(&t, 1, 2, &e);
    uint32_t got[8];
    double next;
    /* the two first turns, not session 7's second turn */
    CU_ASSERT_EQUAL_FATAL(due(s, 0, got, &next), 2);
    CU_ASSERT(got[0] == 0 && got[1] == 3);
    CU_ASSERT(isinf(next));                 /* both clients busy */
    tr_sender_done(s, 3, 1.0);              /* session 8's first turn ends */
    CU_ASSERT_EQUAL_FATAL(due(s, 1.0, got, &next), 1);
    CU_ASSERT_EQUAL(got[0], 4);             /* its second, by the same client */
    tr_sender_done(s, 0, 2.0);
    CU_ASSERT_EQUAL_FATAL(due(s, 2.0, got, &next), 1);
    CU_ASSERT_EQUAL(got[0], 1);
    tr_sender_done(s, 4, 3.0);              /* session 8 is over: its client takes the last request */
    CU_ASSERT_EQUAL_FATAL(due(s, 3.0, got, &next), 1);
    CU_ASSERT_EQUAL(got[0], 5);
    tr_sender_done(s, 1, 4.0);
    CU_ASSERT_EQUAL_FATAL(due(s, 4.0, got, &next), 1);
    CU_ASSERT_EQUAL(got[0], 2);
    CU_ASSERT_EQUAL(tr_sender_left(s), 0);
    tr_sender_free(s);
    tr_trace_free(&t);
}

void register_test_sender(void)
{
    CU_pSuite s = CU_add_suite("sender", NULL, NULL);
    CU_add_test(s, "open loop: the scaled arrivals, in order", test_open_loop);
    CU_add_test(s, "closed loop: a session's turns by one client, each after the one before", test_closed_loop_sessions);
}
