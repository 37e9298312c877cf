/* policy.c — the order in which waiting requests are offered for admission.
 *
 * The waiting list keeps queue order (arrival, with retracted requests
 * re-queued by the preset's rule); a policy only builds this step's view of
 * it, so lpm falling back to fcfs, or a Lua error falling back, always means
 * true queue order. fcfs returns no array at all: admission walks the list
 * and stops early, so a queue of a million costs nothing per step.
 *   lpm     most cached prefix tokens first (queue order on ties); fcfs when
 *           more than 128 wait or the prefix cache is off, as SGLang does
 *   lof     largest max_new_tokens first (queue order on ties); the order
 *           is kept across steps and merged with new arrivals
 *   random  a fresh seeded shuffle every step
 *   lua     the script's order over the first policy_window requests; the
 *           rest are not offered this step */
#include <stdio.h>
#include <stdlib.h>

#include "engine/core/internal.h"
#include "util/rng.h"

/* lof: (max_new_tokens desc, queue position asc) */
static int by_lof(const void *a, const void *b)
{
    const core_req *x = *(core_req *const *)a, *y = *(core_req *const *)b;
    if (x->max_new != y->max_new) return x->max_new > y->max_new ? -1 : 1;
    return x->qseq < y->qseq ? -1 : (x->qseq > y->qseq);
}

/* Sorts the requests queued since the last call and merges them into the
 * sorted run, dropping those that left the queue: linear in the queue plus
 * a sort of the newcomers. */
static void lof_refresh(core *c)
{
    core_req **v = c->lof_v, **t = c->lof_tmp;
    uint32_t n_new = 0;
    for (uint32_t i = c->lof_sorted; i < c->lof_n; i++)
        if (v[i]) v[c->lof_sorted + n_new++] = v[i];
    qsort(v + c->lof_sorted, n_new, sizeof *v, by_lof);
    uint32_t i = 0, j = c->lof_sorted, end = c->lof_sorted + n_new, w = 0;
    for (;;) {
        while (i < c->lof_sorted && !v[i]) i++;
        if (i < c->lof_sorted && j < end) t[w++] = by_lof(&v[i], &v[j]) <= 0 ? v[i++] : v[j++];
        else if (i < c->lof_sorted) t[w++] = v[i++];
        else if (j < end) t[w++] = v[j++];
        else break;
    }
    for (uint32_t k = 0; k < w; k++) t[k]->lof_idx = k;
    c->lof_v = t;
    c->lof_tmp = v;
    c->lof_n = c->lof_sorted = w;
}

static int by_key_desc(const void *a, const void *b)
{
    const core_req *x = *(core_req *const *)a, *y = *(core_req *const *)b;
    if (x->lpm_pages != y->lpm_pages) return x->lpm_pages > y->lpm_pages ? -1 : 1;
    return x->sort_pos < y->sort_pos ? -1 : (x->sort_pos > y->sort_pos);
}

static uint64_t next_rand(core *c)
{
    return rh_splitmix_next(&c->rng);
}

static int ensure_order(core *c, uint64_t need)
{
    if (need <= c->cap_order) return 0;
    uint64_t cap = c->cap_order ? c->cap_order : 256;
    while (cap < need) cap *= 2;
    core_req **v = realloc(c->order, cap * sizeof *v);
    if (!v) return -1;
    c->order = v;
    c->cap_order = (uint32_t)cap;
    return 0;
}

void policy_order(core *c, double now, cand_list *out)
{
    out->v = NULL;
    out->n = c->n_waiting;
    core_policy p = c->cfg.policy;
    if (p == CORE_POLICY_LPM && (c->n_waiting > CORE_LPM_FCFS_THRESHOLD || !c->radix)) p = CORE_POLICY_FCFS;
    if (p == CORE_POLICY_LOF && c->lof_failed) p = CORE_POLICY_FCFS;
    if (p == CORE_POLICY_FCFS || c->n_waiting == 0) return;
    if (p == CORE_POLICY_LOF) {
        lof_refresh(c);
        out->v = c->lof_v;
        out->n = c->lof_n;
        return;
    }

    /* The breaker open: this step is fcfs, as a failed call's is. */
    if (p == CORE_POLICY_LUA && breaker_skip(&c->breaker)) {
        c->st.policy_skipped++;
        return;
    }
    uint32_t n = c->n_waiting;
    if (p == CORE_POLICY_LUA && n > c->cfg.policy_window) n = c->cfg.policy_window;
    /* Lua writes its answer after its input: room for both. */
    if (ensure_order(c, p == CORE_POLICY_LUA ? 2 * (uint64_t)n : n) < 0) return;   /* out of memory: fcfs */
    uint32_t i = 0;
    for (core_req *r = c->wait_head; r && i < n; r = r->next, i++) {
        r->sort_pos = i;
        c->order[i] = r;
    }

    switch (p) {
    case CORE_POLICY_LPM: {
        uint32_t dummy;
        for (i = 0; i < n; i++) c->order[i]->lpm_pages = keys_match(c, c->order[i], NULL, &dummy);
        qsort(c->order, n, sizeof *c->order, by_key_desc);
        break;
    }
    case CORE_POLICY_RANDOM:
        for (i = n; i > 1; i--) {
            uint32_t j = (uint32_t)(((next_rand(c) >> 32) * (uint64_t)i) >> 32);
            core_req *t = c->order[i - 1];
            c->order[i - 1] = c->order[j];
            c->order[j] = t;
        }
        break;
    case CORE_POLICY_LUA: {
        char err[512];
        int k = clua_order(c, c->lua, now, c->order, n, c->order + n, err, sizeof err);
        bool failed = k < 0;
        if (failed) {
            c->st.policy_errors++;
            if (!c->policy_err[0]) {
                snprintf(c->policy_err, sizeof c->policy_err, "%s", err);
                char msg[700];
                snprintf(msg, sizeof msg, "Lua policy error, falling back to fcfs for this step: %s", err);
                core_message(c, msg);
            }
        }
        if (breaker_done(&c->breaker, failed)) {
            c->st.policy_trips++;
            char msg[800];
            if (c->st.policy_trips == 1)
                snprintf(msg, sizeof msg,
                         "Lua policy failed %u time%s in a row: not called for the next %llu steps that would call "
                         "it (fcfs meanwhile; --policy-max-failures): %s",
                         c->breaker.failures, c->breaker.failures == 1 ? "" : "s",
                         (unsigned long long)breaker_backoff(&c->breaker), err);
            else
                snprintf(msg, sizeof msg,
                         "Lua policy still failing after its back-off (trip %llu): not called for the next %llu "
                         "steps that would call it: %s",
                         (unsigned long long)c->st.policy_trips, (unsigned long long)breaker_backoff(&c->breaker), err);
            core_message(c, msg);
        }
        if (failed) return;   /* fcfs */
        /* A policy may hold requests back only while something runs: an idle
         * core starts the oldest, so no caller ever waits on nothing. */
        if (k == 0 && c->n_active == 0) {
            out->v = c->order;
            out->n = 1;
            return;
        }
        out->v = c->order + n;
        out->n = (uint32_t)k;
        return;
    }
    default:
        break;
    }
    out->v = c->order;
    out->n = n;
}
