/* check.c — core_check: recomputes every count the core keeps incrementally
 * and compares. O(pool + requests); tests call it after every step and debug
 * builds (RH_CORE_DEBUG) run it inside every core_schedule and core_complete. */
#include <stdlib.h>
#include <string.h>

#include "engine/core/internal.h"

static int check_request(const core *c, const core_req *r, uint32_t *refs, rh_err *e)
{
    unsigned long long id = (unsigned long long)r->id;
    uint32_t ps = c->ps;
    if (r->out >= r->max_new) return rh_fail(e, "request %llu is live with %u of %u tokens", id, r->out, r->max_new);
    if (r->n_keys > r->cap_keys || (r->keys && r->n_keys > req_fill(r) / ps))
        return rh_fail(e, "request %llu knows %u page keys for %u tokens", id, r->n_keys, req_fill(r));
    if (r->phase == PH_WAITING) {
        if (r->n_pages || r->kv || r->in_run || r->in_batch)
            return rh_fail(e, "waiting request %llu holds %u pages, kv %u, in_run %d", id, r->n_pages, r->kv, r->in_run);
        return 0;
    }
    if (r->n_pages > r->cap_pages || r->n_tree > r->n_pages)
        return rh_fail(e, "request %llu: %u pages (%u in the tree), room for %u", id, r->n_pages, r->n_tree, r->cap_pages);
    if ((uint64_t)r->n_pages * ps < r->kv)
        return rh_fail(e, "request %llu: %u pages cannot hold %u computed tokens", id, r->n_pages, r->kv);
    if (r->kv > req_fill(r)) return rh_fail(e, "request %llu: kv %u past prompt + output %u", id, r->kv, req_fill(r));
    if (!r->in_batch) {
        if (r->phase == PH_DECODE && r->kv + 1 != req_fill(r))
            return rh_fail(e, "decoding request %llu: kv %u but %u prompt + %u output tokens", id, r->kv, r->prompt_len,
                           r->out);
        if (r->phase == PH_PREFILL && r->kv >= req_fill(r))
            return rh_fail(e, "prefilling request %llu has nothing left to prefill", id);
        if (r->n_pages != ceil_div(r->kv, ps))
            return rh_fail(e, "request %llu holds %u pages between steps for %u tokens", id, r->n_pages, r->kv);
    }
    for (uint32_t i = 0; i < r->n_pages; i++) {
        uint32_t p = r->pages[i];
        if (p >= c->kv.n_pages) return rh_fail(e, "request %llu: page %u out of range", id, p);
        refs[p]++;
        const kv_node *n = &c->kv.node[p];
        if (i < r->n_tree) {
            if (!n->in_tree || n->key != r->keys[i] || n->parent != (i ? r->pages[i - 1] : KV_NONE))
                return rh_fail(e, "request %llu: page %u (position %u) is not its prefix's tree node", id, p, i);
        } else if (n->in_tree) {
            return rh_fail(e, "request %llu: page %u (position %u) past its cached prefix is in the tree", id, p, i);
        }
    }
    return 0;
}

int core_check(const core *c, rh_err *e)
{
    if (kv_check(&c->kv, e) < 0) return -1;
    int rc = -1;
    uint32_t *refs = calloc(c->kv.n_pages, sizeof *refs);
    if (!refs) return rh_fail(e, "core_check: out of memory");

    /* Mark queue membership through check_marks; every mark must be exactly 1. */
    for (uint64_t i = 0; i <= c->map_mask; i++)
        if (c->map_reqs[i]) c->map_reqs[i]->check_marks = 0;
    uint32_t n_wait = 0;
    const core_req *prev = NULL;
    for (core_req *r = c->wait_head; r; prev = r, r = r->next) {
        if (r->prev != prev || n_wait > c->map_n) {
            rh_fail(e, "waiting list broken at request %llu", (unsigned long long)r->id);
            goto out;
        }
        if (r->phase != PH_WAITING) {
            rh_fail(e, "request %llu is on the waiting list in phase %d", (unsigned long long)r->id, r->phase);
            goto out;
        }
        r->check_marks++;
        n_wait++;
    }
    if (prev != c->wait_tail || n_wait != c->n_waiting) {
        rh_fail(e, "waiting list holds %u requests, counted %u", n_wait, c->n_waiting);
        goto out;
    }
    if (c->cfg.policy == CORE_POLICY_LOF && !c->lof_failed) {
        uint32_t n_lof = 0;
        for (uint32_t i = 0; i < c->lof_n; i++) {
            const core_req *r = c->lof_v[i];
            if (!r) continue;
            n_lof++;
            if (r->lof_idx != i || r->phase != PH_WAITING) {
                rh_fail(e, "lof order slot %u holds request %llu (slot %u, phase %d)", i, (unsigned long long)r->id,
                        r->lof_idx, r->phase);
                goto out;
            }
        }
        if (n_lof != c->n_waiting) {
            rh_fail(e, "lof order holds %u of %u waiting requests", n_lof, c->n_waiting);
            goto out;
        }
    }
    for (const core_req *r = c->wait_head; r && r->next; r = r->next)
        if (r->qseq >= r->next->qseq) {
            rh_fail(e, "waiting list out of queue order at request %llu", (unsigned long long)r->id);
            goto out;
        }
    for (uint32_t i = 0; i < c->n_run; i++) {
        core_req *r = c->run[i];
        if (!r->in_run || (r->phase != PH_DECODE && r->phase != PH_PREFILL) ||
            (c->cfg.preset == CORE_PRESET_SGLANG && r->phase != PH_DECODE)) {
            rh_fail(e, "request %llu is running in phase %d (in_run %d)", (unsigned long long)r->id, r->phase, r->in_run);
            goto out;
        }
        r->check_marks++;
    }
    if (c->chunked) {
        if (c->chunked->phase != PH_PREFILL || c->cfg.preset != CORE_PRESET_SGLANG) {
            rh_fail(e, "chunked request %llu is in phase %d", (unsigned long long)c->chunked->id, c->chunked->phase);
            goto out;
        }
        c->chunked->check_marks++;
    }
    uint32_t n_active = 0;
    for (uint64_t i = 0; i <= c->map_mask; i++) {
        core_req *r = c->map_reqs[i];
        if (!r) continue;
        if (r->phase == PH_ZOMBIE) {
            rh_fail(e, "aborted request %llu is still in the id map", (unsigned long long)r->id);
            goto out;
        }
        if (r->phase != PH_WAITING) n_active++;
        /* A SGLang request admitted this step with its whole prompt is held
         * by the batch alone until core_complete. */
        uint32_t want = (r->phase == PH_PREFILL && c->cfg.preset == CORE_PRESET_SGLANG && c->chunked != r && r->in_batch)
                            ? 0 : 1;
        if (r->check_marks != want) {
            rh_fail(e, "request %llu (phase %d) is in %u queues", (unsigned long long)r->id, r->phase, r->check_marks);
            goto out;
        }
        if (r->in_batch && !c->in_flight) {
            rh_fail(e, "request %llu is marked in a batch but none is in flight", (unsigned long long)r->id);
            goto out;
        }
        if (check_request(c, r, refs, e) < 0) goto out;
    }
    if (n_active != c->n_active) {
        rh_fail(e, "%u requests hold running slots, counted %u", n_active, c->n_active);
        goto out;
    }
    if (n_active > c->cfg.max_running_requests) {
        rh_fail(e, "%u requests running, more than --max-running-requests %u", n_active, c->cfg.max_running_requests);
        goto out;
    }
    for (uint32_t p = 0; p < c->kv.n_pages; p++) {
        uint32_t want = refs[p] + c->kv.node[p].in_tree;
        if (c->kv.node[p].ref != want) {
            rh_fail(e, "page %u: reference count %u, but %u requests%s hold it", p, c->kv.node[p].ref, refs[p],
                    c->kv.node[p].in_tree ? " and the tree" : "");
            goto out;
        }
    }
    if (!c->radix && c->kv.n_in_tree) {
        rh_fail(e, "the prefix cache is off but holds %llu pages", (unsigned long long)c->kv.n_in_tree);
        goto out;
    }
    if (c->ratio < c->ratio_min - 1e-12 || c->ratio > 1.0 + 1e-12) {
        rh_fail(e, "new_token_ratio %g outside [%g, 1]", c->ratio, c->ratio_min);
        goto out;
    }
    if (c->in_flight) {
        for (uint32_t i = 0; i < c->n_seqs; i++) {
            const core_seq *s = &c->seqs[i];
            if (s->req->phase == PH_ZOMBIE) continue;
            if (!s->req->in_batch || (uint64_t)s->n_pages * c->ps < (uint64_t)s->start + s->n_new) {
                rh_fail(e, "batch sequence %u (request %llu) lacks pages for its tokens", i, (unsigned long long)s->id);
                goto out;
            }
        }
    }
    rc = 0;
out:
    free(refs);
    return rc;
}
