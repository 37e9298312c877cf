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
 *   dfs-weight  the matched prefixes as a tree, depth first, heavier
 *           subtrees first (SGLang's); fcfs when the prefix cache is off
 *   lua     the script's order over the first policy_window requests; the
 *           rest are not offered this step
 * With enable_priority_scheduling, fcfs and lof order by each request's
 * priority first and their own order within one priority (SGLang's sort:
 * higher values first unless low_priority_values_first, vLLM's order); the
 * cache-aware policies, random and lua do not look at it, as SGLang's
 * cache-aware sorts do not. Running requests are not preempted for a
 * higher priority (SGLang's --priority-scheduling-preemption-threshold). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* dfs-weight, as SGLang's schedule_policy orders it (_calc_weight,
 * _get_dfs_priority): the waiting requests' matched prefixes are paths in
 * the tree of cached pages; a page weighs as many waiting requests as pass
 * through it. The walk goes depth first from the root, children heaviest
 * first, and gives each node's own requests (those whose match ends there)
 * after its children, as SGLang extends the queue after recursing; requests
 * that match nothing end at the root and come last. SGLang's children of
 * equal weight keep dict order; here the subtree holding the earlier queued
 * request goes first, and requests ending at one node keep queue order.
 * The walk is done as a sort: two requests compare where their paths part. */
static int by_dfs(const void *a, const void *b, void *ctx)
{
    const core *c = ctx;
    const core_req *x = *(core_req *const *)a, *y = *(core_req *const *)b;
    const uint32_t *px = c->dfs_pages + c->dfs_off[x->sort_pos], *py = c->dfs_pages + c->dfs_off[y->sort_pos];
    uint32_t lx = x->lpm_pages, ly = y->lpm_pages, i = 0;
    while (i < lx && i < ly && px[i] == py[i]) i++;
    if (i == lx && i == ly) return x->sort_pos < y->sort_pos ? -1 : (x->sort_pos > y->sort_pos);
    if (i == lx) return 1;    /* x ends here, y goes deeper: children first */
    if (i == ly) return -1;
    uint32_t wx = c->dfs_weight[px[i]], wy = c->dfs_weight[py[i]];
    if (wx != wy) return wx > wy ? -1 : 1;
    return c->dfs_first[px[i]] < c->dfs_first[py[i]] ? -1 : 1;
}

/* Orders c->order[0..n) by dfs-weight. 0, or -1 out of memory (fcfs). */
static int dfs_weight_order(core *c, uint32_t n)
{
    if (!c->dfs_weight) {
        c->dfs_weight = calloc(c->kv.n_pages, sizeof *c->dfs_weight);
        c->dfs_first = malloc(c->kv.n_pages * sizeof *c->dfs_first);
        if (!c->dfs_weight || !c->dfs_first) {
            free(c->dfs_weight), free(c->dfs_first);
            c->dfs_weight = c->dfs_first = NULL;
            return -1;
        }
    }
    if (n > c->cap_dfs_off) {
        uint64_t *o = realloc(c->dfs_off, n * sizeof *o);
        if (!o) return -1;
        c->dfs_off = o;
        c->cap_dfs_off = n;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        core_req *r = c->order[i];
        uint64_t most = req_fill(r) ? (req_fill(r) - 1) / c->ps : 0;   /* keys_match's limit */
        if (total + most > c->cap_dfs_pages) {
            uint64_t cap = c->cap_dfs_pages ? c->cap_dfs_pages : 4096;
            while (cap < total + most) cap *= 2;
            uint32_t *p = realloc(c->dfs_pages, cap * sizeof *p);
            if (!p) return -1;
            c->dfs_pages = p;
            c->cap_dfs_pages = cap;
        }
        uint32_t dummy;
        c->dfs_off[i] = total;
        r->lpm_pages = keys_match(c, r, c->dfs_pages + total, &dummy);
        for (uint32_t k = 0; k < r->lpm_pages; k++) {
            uint32_t p = c->dfs_pages[total + k];
            if (c->dfs_weight[p]++ == 0) c->dfs_first[p] = i;
        }
        total += r->lpm_pages;
    }
    qsort_r(c->order, n, sizeof *c->order, by_dfs, c);
    for (uint64_t k = 0; k < total; k++) c->dfs_weight[c->dfs_pages[k]] = 0;
    return 0;
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

/* (priority as configured, then the order the policy gave: sort_pos) */
static int by_priority(const void *a, const void *b, void *low_first)
{
    const core_req *x = *(core_req *const *)a, *y = *(core_req *const *)b;
    if (x->priority != y->priority) return (x->priority < y->priority) == *(const bool *)low_first ? -1 : 1;
    return x->sort_pos < y->sort_pos ? -1 : (x->sort_pos > y->sort_pos);
}

/* c->order[0..n) holds the policy's order: sorted by priority, ties kept. */
static void priority_first(core *c, uint32_t n, cand_list *out)
{
    for (uint32_t i = 0; i < n; i++) c->order[i]->sort_pos = i;
    qsort_r(c->order, n, sizeof *c->order, by_priority, &c->cfg.low_priority_values_first);
    out->v = c->order;
    out->n = n;
}

void policy_order(core *c, double now, cand_list *out)
{
    out->v = NULL;
    out->n = c->n_waiting;
    core_policy p = c->cfg.policy;
    if (p == CORE_POLICY_LPM && (c->n_waiting > CORE_LPM_FCFS_THRESHOLD || !c->radix)) p = CORE_POLICY_FCFS;
    if (p == CORE_POLICY_DFS_WEIGHT && !c->radix) p = CORE_POLICY_FCFS;
    if (p == CORE_POLICY_LOF && c->lof_failed) p = CORE_POLICY_FCFS;
    bool prio = c->cfg.enable_priority_scheduling && (p == CORE_POLICY_FCFS || p == CORE_POLICY_LOF);
    if ((p == CORE_POLICY_FCFS && !prio) || c->n_waiting == 0) return;
    if (p == CORE_POLICY_LOF) {
        lof_refresh(c);
        out->v = c->lof_v;
        out->n = c->lof_n;
        if (prio && ensure_order(c, c->lof_n) == 0) {   /* out of memory: lof alone */
            memcpy(c->order, c->lof_v, c->lof_n * sizeof *c->order);
            priority_first(c, c->lof_n, out);
        }
        return;
    }
    if (p == CORE_POLICY_FCFS) {   /* with priorities */
        if (ensure_order(c, c->n_waiting) < 0) return;   /* out of memory: fcfs */
        uint32_t i = 0;
        for (core_req *r = c->wait_head; r; r = r->next) c->order[i++] = r;
        priority_first(c, i, out);
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
    case CORE_POLICY_DFS_WEIGHT:
        if (dfs_weight_order(c, n) < 0) return;   /* out of memory: fcfs */
        break;
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
