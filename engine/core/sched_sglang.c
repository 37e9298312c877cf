/* sched_sglang.c — SGLang's batch formation.
 *
 * Prefill first: when a partially prefilled request or admissible waiting
 * requests exist, the step is a prefill batch and decodes wait (unless
 * --enable-mixed-chunk, which adds every decode to the same batch). The
 * partial request's next chunk goes first; then waiting requests in policy
 * order while all of these hold:
 *   - running slots: prefilling + decoding < --max-running-requests;
 *   - memory: prompt tokens still to compute + min(remaining output, 4096)
 *     < (free + evictable pages) * page_size - reservation, where the
 *     reservation is, for every decoding request, min(remaining output,
 *     4096) * new_token_ratio, plus the full clipped output of each request
 *     admitted this step;
 *   - --max-prefill-tokens (page-rounded), except for the first request;
 *   - --chunked-prefill-size: a prompt that does not fit the rest of the
 *     chunk budget is cut at a page boundary and becomes the one chunked
 *     request, continued first next step.
 * With a host tier (--enable-hierarchical-cache) the prompt's pages that
 * follow its GPU prefix and sit on the host load back: they count in the
 * memory check, not in the prefill and chunk budgets (SGLang's
 * PrefillAdder charges extend - host_hit_length there).
 * A request whose LoRA adapter would pass --max-loras-per-batch is skipped
 * before these checks and keeps its place (engine/core/lora.c).
 * Decode: every running request gets one token slot (plus draft slots).
 * When their pages do not fit, requests are retracted — fewest output tokens
 * first, then longest prompt — until the survivors have room for 20 more
 * decode steps each, and new_token_ratio rises to what the survivors have
 * shown they use; otherwise it decays toward its minimum. */
#include <stdlib.h>

#include "engine/core/internal.h"

static inline uint32_t clip_remaining(const core_req *r)
{
    uint32_t rem = r->max_new - r->out;
    return rem < CORE_CLIP_MAX_NEW ? rem : CORE_CLIP_MAX_NEW;
}

static inline uint64_t ceil_page(uint64_t n, uint32_t ps)
{
    return (n + ps - 1) / ps * ps;
}

/* Pages the decodes of v[0..n) need this step at batch size bs. */
static uint64_t decode_need(const core *c, core_req **v, uint32_t n, uint32_t bs)
{
    uint64_t need = 0;
    for (uint32_t i = 0; i < n; i++) need += pages_short(c, v[i], (uint64_t)v[i]->kv + 1 + core_spec_slots(c, v[i], bs));
    return need;
}

static int by_retract_order(const void *a, const void *b)
{
    const core_req *x = *(core_req *const *)a, *y = *(core_req *const *)b;
    if (x->out != y->out) return x->out < y->out ? -1 : 1;
    if (x->prompt_len != y->prompt_len) return x->prompt_len > y->prompt_len ? -1 : 1;
    return x->sort_pos > y->sort_pos ? -1 : (x->sort_pos < y->sort_pos);   /* later in the batch first */
}

/* SGLang's retract_decode: retract at least one request, then keep going
 * until the survivors have room for CORE_RETRACT_DECODE_STEPS decode steps
 * each (and for this step's pages). The last survivor is never retracted;
 * if it still does not fit, the partially prefilled request goes instead. */
static void retract_for_decode(core *c, double now)
{
    uint32_t n = c->n_run, ps = c->ps;
    if (c->cap_order < n) {
        core_req **v = realloc(c->order, (size_t)n * sizeof *v);
        if (!v) return;
        c->order = v;
        c->cap_order = n;
    }
    for (uint32_t i = 0; i < n; i++) {
        c->run[i]->sort_pos = i;
        c->order[i] = c->run[i];
    }
    qsort(c->order, n, sizeof *c->order, by_retract_order);
    uint32_t k = c->cfg.spec_steps ? c->cfg.spec_draft_tokens - 1 : 0;
    uint32_t done = 0;
    for (;;) {
        uint32_t remain = n - done;
        if (done > 0) {
            uint64_t avail = kv_available(&c->kv);
            uint64_t want = (uint64_t)remain * (CORE_RETRACT_DECODE_STEPS + k);
            if (avail * ps >= want && decode_need(c, c->order + done, remain, remain) <= avail) break;
        }
        if (remain == 1) break;
        core_retract(c, c->order[done++], false, false, now);
    }
    run_remove_marked(c);
    if (c->chunked && decode_need(c, c->run, c->n_run, c->n_run) > kv_available(&c->kv))
        core_retract(c, c->chunked, false, false, now);

    uint64_t decoded = 0, max_new = 0;
    for (uint32_t i = 0; i < c->n_run; i++) {
        decoded += c->run[i]->out;
        max_new += c->run[i]->max_new;
    }
    if (max_new) {
        double est = (double)(decoded + (uint64_t)CORE_RETRACT_DECODE_STEPS * c->n_run) / (double)max_new;
        if (est > 1.0) est = 1.0;
        if (est > c->ratio) c->ratio = est;
    }
}

/* Adds every running request's decode; returns true if it had to retract. */
static bool add_decodes(core *c, double now)
{
    if (c->n_run == 0) return false;
    bool retracted = false;
    /* A decode of 1 + k tokens needs at most ceil((1 + k) / page) new pages:
     * when the pool has that for everyone, skip the exact count. */
    uint32_t k = c->cfg.spec_steps ? c->cfg.spec_draft_tokens - 1 : 0;
    uint64_t bound = (uint64_t)c->n_run * ((1 + k + c->ps - 1) / c->ps);
    if (kv_available(&c->kv) < bound && decode_need(c, c->run, c->n_run, c->n_run) > kv_available(&c->kv)) {
        retract_for_decode(c, now);
        retracted = true;
    } else {
        c->ratio -= c->ratio_decay;
        if (c->ratio < c->ratio_min) c->ratio = c->ratio_min;
    }
    uint32_t bs = c->n_run;
    for (uint32_t i = 0; i < c->n_run; i++) {
        core_req *r = c->run[i];
        uint32_t slots = core_spec_slots(c, r, bs);
        if (core_grow(c, r, (uint64_t)r->kv + 1 + slots) < 0) {
            /* Cannot happen after retract_for_decode; never crash on it. */
            slots = 0;
            if (core_grow(c, r, (uint64_t)r->kv + 1) < 0) continue;
        }
        core_add_seq(c, r, 1 + slots, slots, false);
    }
    return retracted;
}

static void add_prefills(core *c, double now, uint32_t decode_tokens, bool allow_new)
{
    const core_config *cfg = &c->cfg;
    uint32_t ps = c->ps;
    bool chunking = cfg->chunked_prefill_size > 0;
    int64_t rem_chunk = chunking ? (int64_t)cfg->chunked_prefill_size - decode_tokens : INT64_MAX;
    int64_t rem_input = (int64_t)cfg->max_prefill_tokens - decode_tokens;
    double offset = 0;
    for (uint32_t i = 0; i < c->n_run; i++) offset += clip_remaining(c->run[i]) * c->ratio;
    bool any = false;

    core_req *ch = c->chunked;
    if (ch) {
        uint64_t remaining = req_fill(ch) - ch->kv;
        int64_t n = rem_chunk < (int64_t)remaining ? rem_chunk : (int64_t)remaining;
        if (n < (int64_t)remaining) n = n / ps * ps;       /* ch->kv is page aligned: cut on a boundary */
        uint64_t avail = kv_available(&c->kv);
        if (n > 0 && pages_short(c, ch, ch->kv + (uint64_t)n) > avail)
            n = ((int64_t)(ch->n_pages + avail) * ps - ch->kv) / ps * ps;
        if (n > 0 && core_grow(c, ch, ch->kv + (uint64_t)n) == 0) {
            core_add_seq(c, ch, (uint32_t)n, 0, true);
            rem_chunk -= (int64_t)ceil_page((uint64_t)n, ps);
            rem_input -= (int64_t)ceil_page((uint64_t)n, ps);
            if ((uint64_t)n == remaining) offset += clip_remaining(ch);
            any = true;
        }
    }
    if (!allow_new || c->n_waiting == 0 || c->n_active >= cfg->max_running_requests) return;
    if (rem_chunk <= 0 || rem_input <= 0) return;
    /* Cheap exit before ordering a long queue: nothing fits. */
    if (c->n_active > 0 && (double)kv_available(&c->kv) * ps - offset <= 0) return;

    cand_list cl;
    policy_order(c, now, &cl);
    core_req *walk = c->wait_head;
    bool end = false;
    for (uint32_t idx = 0; idx < cl.n; idx++) {
        core_req *r = cand_at(&cl, idx, &walk, &end);
        if (end) break;
        if (!r) continue;
        if (c->n_active >= cfg->max_running_requests) break;
        if (!lora_admits(c, r)) continue;   /* its adapter would pass the cap: skipped, keeps its place */
        bool progress = c->n_active == 0;   /* nothing runs: start something */
        if (r->kv_ready) {
            /* Its prompt's K and V arrive with it: pages, no prefill budget,
             * and it decodes in this very step (add_decodes follows when no
             * prefill was added). */
            uint64_t arrived = req_fill(r) - 1;
            double room = (double)kv_available(&c->kv) * ps - offset;
            if (!progress && (double)(arrived + clip_remaining(r)) >= room) break;
            if (ceil_div(arrived, ps) > kv_available(&c->kv)) break;
            if (core_admit(c, r, 0, 0, 0, arrived, now) < 0) break;
            core_admit_ready(c, r);
            offset += clip_remaining(r);
            continue;
        }
        uint32_t limit = (req_fill(r) - 1) / ps;
        if (core_match_room(c, limit + 1) < 0) break;
        uint32_t m_cached, m = keys_match(c, r, c->match_pages, &m_cached);
        /* Host-tier hits load back instead of computing (SGLang's
         * load_back, below its threshold they are recomputed): they need
         * GPU pages like computed tokens, but no prefill budget. */
        uint32_t h = c->match_host + c->match_storage, s = c->match_storage;
        if ((uint64_t)h * ps < CORE_LOAD_BACK_THRESHOLD) h = s = 0;
        uint64_t prefix = (uint64_t)m * ps, extend = req_fill(r) - prefix;
        uint64_t loaded = (uint64_t)h * ps, compute = extend - loaded;
        uint64_t avail = kv_available(&c->kv) - m_cached;
        double rem_total = (double)avail * ps - offset;
        uint64_t input_tokens = ceil_page(compute, ps);
        if (!progress) {
            if ((double)(extend + clip_remaining(r)) >= rem_total) break;
            if (any && (int64_t)input_tokens > rem_input) break;
        }
        uint64_t n = compute;
        bool chunked = false;
        if (chunking && (int64_t)input_tokens > rem_chunk) {
            n = (uint64_t)rem_chunk / ps * ps;
            if (n == 0) break;
            chunked = true;
        }
        if (ceil_div(prefix + loaded + n, ps) - m > avail) break;
        if (core_admit(c, r, m, h, s, prefix + loaded + n, now) < 0) break;
        core_add_seq(c, r, (uint32_t)n, 0, true);
        any = true;
        rem_input -= (int64_t)ceil_page(n, ps);
        if (chunking) rem_chunk -= (int64_t)ceil_page(n, ps);
        if (chunked) {
            c->chunked = r;
            break;
        }
        offset += clip_remaining(r);
        if (rem_input <= 0 || rem_chunk <= 0) break;
        if ((double)kv_available(&c->kv) * ps - offset <= 0) break;
    }
}

void sched_sglang(core *c, double now)
{
    bool mixed = c->cfg.enable_mixed_chunk && c->n_run > 0;
    bool want_prefill = c->chunked || (c->n_waiting && c->n_active < c->cfg.max_running_requests);
    if (want_prefill && !mixed) {
        add_prefills(c, now, 0, true);
        if (c->n_seqs) return;
    }
    bool retracted = add_decodes(c, now);
    if (mixed && (c->chunked || (c->n_waiting && c->n_active < c->cfg.max_running_requests)))
        add_prefills(c, now, c->step.decode_tokens, !retracted);
}
