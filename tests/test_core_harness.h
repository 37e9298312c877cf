/* test_core_harness.h — a tiny driver for the core suites: hooks that record
 * every event and step, a digest of every batch (to compare two runs), and
 * a step function that completes each batch with chosen results. Static
 * functions only, so each test file that includes it gets its own copy. */
#ifndef RH_TEST_CORE_HARNESS_H
#define RH_TEST_CORE_HARNESS_H

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"
#include "testutil.h"
#include "util/progress.h"

#define H_MAX_REQ 4096

/* Writes a policy script to a temporary file; the path stays valid for the
 * next seven calls. */
static inline const char *h_script(const char *name, const char *text)
{
    static char path[8][512];
    static int k;
    char *p = path[k++ % 8];
    tu_tmp_path(name, p, 512);
    CU_ASSERT_EQUAL(tu_write_file(p, text, strlen(text)), 0);
    return p;
}

typedef struct h_req {
    uint32_t tokens;        /* sum of CORE_EV_TOKENS n_tokens */
    uint32_t admitted, retracted, finished, aborted;
    uint32_t cached;        /* cached_tokens at the latest admission */
    uint32_t output_len;    /* as reported by the latest event */
    uint8_t finish;
    int64_t first_token_step;
    int64_t admit_step;
} h_req;

typedef struct harness {
    core *c;
    uint64_t digest;        /* FNV-1a over every batch */
    uint64_t steps;
    tr_step last;
    uint64_t total_retractions, total_finished;
    uint32_t max_running_seen, max_batch_seen;
    h_req req[H_MAX_REQ];
    uint64_t order[H_MAX_REQ];   /* ids in admission order */
    uint32_t n_order;
    char msg[1024];
    int n_msgs;
    int64_t cur_step;
    uint64_t events;
} harness;

static inline void h_on_event(void *ctx, const core_event *ev)
{
    harness *h = ctx;
    h->events++;
    if (ev->id >= H_MAX_REQ) return;
    h_req *r = &h->req[ev->id];
    r->output_len = ev->output_len;
    switch (ev->kind) {
    case CORE_EV_ADMITTED:
        r->admitted++;
        r->cached = ev->cached_tokens;
        r->admit_step = h->cur_step;
        if (h->n_order < H_MAX_REQ) h->order[h->n_order++] = ev->id;
        break;
    case CORE_EV_TOKENS:
        if (r->tokens == 0) r->first_token_step = h->cur_step;
        r->tokens += ev->n_tokens;
        break;
    case CORE_EV_FINISHED: r->finished++; r->finish = ev->finish; break;
    case CORE_EV_RETRACTED: r->retracted++; break;
    case CORE_EV_ABORTED: r->aborted++; r->finish = ev->finish; break;
    }
}

static inline void h_on_step(void *ctx, const tr_step *s)
{
    harness *h = ctx;
    h->last = *s;
    h->steps++;
    h->total_retractions += s->retractions;
    h->total_finished += s->finished;
    if (s->running > h->max_running_seen) h->max_running_seen = s->running;
}

static inline void h_on_message(void *ctx, const char *msg)
{
    harness *h = ctx;
    h->n_msgs++;
    snprintf(h->msg, sizeof h->msg, "%s", msg);
}

static inline void h_mix(harness *h, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        h->digest ^= (v >> (8 * i)) & 0xff;
        h->digest *= 0x100000001b3ull;
    }
}

static inline double h_guard_clock(void *ctx)
{
    (void)ctx;
    return rh_now();
}

/* Returns a new core with hooks into h (h is cleared), or NULL and fails the test. */
static inline core *h_new(harness *h, const core_config *cfg)
{
    memset(h, 0, sizeof *h);
    for (int i = 0; i < H_MAX_REQ; i++) h->req[i].first_token_step = h->req[i].admit_step = -1;
    h->digest = 0xcbf29ce484222325ull;
    core_hooks hooks = {.ctx = h, .on_step = h_on_step, .on_event = h_on_event, .on_message = h_on_message,
                        .guard_clock = h_guard_clock};
    rh_err e = {{0}};
    h->c = core_new(cfg, &hooks, &e);
    if (!h->c) {
        printf("\n  core_new: %s\n", e.msg);
        CU_FAIL("core_new failed");
    }
    return h->c;
}

static inline core_req *h_add(harness *h, uint64_t id, uint32_t prompt, uint32_t max_new, double now)
{
    core_req_desc d = {.id = id, .prompt_len = prompt, .max_new_tokens = max_new};
    rh_err e = {{0}};
    core_req *r = core_add(h->c, &d, now, &e);
    if (!r) printf("\n  core_add: %s\n", e.msg);
    return r;
}

/* One schedule + complete with `results` (NULL: one token each). The batch
 * is copied into *out_batch and its sequences into seqs (up to max_seqs) when
 * given. Returns the number of sequences. */
static inline uint32_t h_step_with(harness *h, double now, const core_seq_result *results, core_seq *seqs, uint32_t max_seqs,
                            core_batch *out_batch)
{
    core_batch b;
    h->cur_step = (int64_t)h->steps;   /* the index the next batch gets: events inside core_schedule see it */
    uint32_t n = core_schedule(h->c, now, &b);
    if (out_batch) *out_batch = b;
    if (n == 0) return 0;
    CU_ASSERT_EQUAL(b.index, h->steps);
    if (n > h->max_batch_seen) h->max_batch_seen = n;
    h_mix(h, b.index);
    for (uint32_t i = 0; i < n; i++) {
        const core_seq *s = &b.seqs[i];
        h_mix(h, s->id);
        h_mix(h, ((uint64_t)s->start << 32) | s->n_new);
        h_mix(h, ((uint64_t)s->n_spec << 2) | ((uint64_t)s->prefill << 1) | s->samples);
        if (seqs && i < max_seqs) seqs[i] = *s;
    }
    rh_err e = {{0}};
    if (core_complete(h->c, &b, results, now + 0.01, &e) < 0) {
        printf("\n  core_complete: %s\n", e.msg);
        CU_FAIL("core_complete failed");
    }
    return n;
}

static inline uint32_t h_step(harness *h, double now)
{
    return h_step_with(h, now, NULL, NULL, 0, NULL);
}

static inline int h_check(harness *h)
{
    rh_err e = {{0}};
    if (core_check(h->c, &e) == 0) return 0;
    printf("\n  core_check: %s\n", e.msg);
    return -1;
}

/* Steps until idle (at most max_steps); returns steps run. */
static inline uint64_t h_drain(harness *h, double *now, uint64_t max_steps)
{
    uint64_t s = 0;
    while (!core_idle(h->c) && s < max_steps) {
        h_step(h, *now);
        *now += 0.01;
        s++;
    }
    return s;
}

#endif
