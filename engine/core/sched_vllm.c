/* sched_vllm.c — vLLM V1's batch formation: one token budget per step.
 *
 * The budget is --chunked-prefill-size (vLLM's max_num_batched_tokens), or
 * --max-prefill-tokens when chunking is off. Running requests go first, in
 * admission order: a decode takes 1 + draft slots, a partially prefilled
 * request takes as much of its prompt as the budget leaves. When a running
 * request's pages do not fit, the most recently admitted running request is
 * preempted — its full pages stay in the prefix cache, the rest are freed,
 * and it goes to the front of the waiting queue to recompute — until they
 * fit or the request preempted itself. Only if nothing was preempted, waiting
 * requests are then admitted in policy order while the budget, the slots
 * (--max-running-requests) and the pool allow, each taking min(uncached
 * prompt, remaining budget) tokens. There is no reservation for future
 * tokens: vLLM relies on preemption instead. Chunks are not page aligned.
 * --long-prefill-token-threshold caps one request's prompt tokens per step,
 * so a long prompt leaves part of the budget to the requests behind it.
 * With chunking off a prompt runs whole, and only in a step whose budget it
 * fits or as the step's first work. A request with a LoRA adapter new to
 * the batch is skipped while --max-loras adapters are in it (base requests
 * never are; engine/core/lora.c). */
#include "engine/core/internal.h"

static uint64_t cap_long_prefill(const core_config *cfg, uint64_t n)
{
    uint64_t t = cfg->long_prefill_token_threshold;
    return t > 0 && n > t ? t : n;
}

void sched_vllm(core *c, double now)
{
    const core_config *cfg = &c->cfg;
    bool chunking = cfg->chunked_prefill_size > 0;
    int64_t budget = chunking ? (int64_t)cfg->chunked_prefill_size : (int64_t)cfg->max_prefill_tokens;
    uint32_t bs = c->n_run;
    bool preempted = false;

    for (uint32_t i = 0; i < c->n_run && budget > 0; i++) {
        core_req *r = c->run[i];
        bool prefill = r->phase == PH_PREFILL;
        uint64_t n;
        uint32_t spec = 0;
        if (prefill) {
            n = cap_long_prefill(cfg, req_fill(r) - r->kv);
            if ((int64_t)n > budget) n = (uint64_t)budget;
        } else {
            spec = core_spec_slots(c, r, bs);
            if ((int64_t)spec + 1 > budget) spec = (uint32_t)budget - 1;
            n = 1 + spec;
        }
        bool self = false;
        while (pages_short(c, r, r->kv + n) > kv_available(&c->kv)) {
            core_req *victim = c->run[c->n_run - 1];
            core_retract(c, victim, true, true, now);
            c->n_run--;
            preempted = true;
            if (victim == r) {
                self = true;
                break;
            }
        }
        if (self) break;
        if (core_grow(c, r, r->kv + n) < 0) continue;   /* unreachable: the pages were just made free */
        core_add_seq(c, r, (uint32_t)n, spec, prefill);
        budget -= (int64_t)n;
    }
    if (preempted || c->n_waiting == 0) return;

    cand_list cl;
    policy_order(c, now, &cl);
    core_req *walk = c->wait_head;
    bool end = false;
    for (uint32_t idx = 0; idx < cl.n; idx++) {
        if (c->n_active >= cfg->max_running_requests || budget <= 0) break;
        core_req *r = cand_at(&cl, idx, &walk, &end);
        if (end) break;
        if (!r) continue;
        if (!lora_admits(c, r)) continue;   /* a new adapter past --max-loras: skipped, keeps its place */
        uint32_t limit = (req_fill(r) - 1) / c->ps;
        if (core_match_room(c, limit + 1) < 0) break;
        uint32_t m_cached, m = keys_match(c, r, c->match_pages, &m_cached);
        uint64_t prefix = (uint64_t)m * c->ps, need = req_fill(r) - prefix;
        uint64_t n = chunking ? cap_long_prefill(cfg, need) : need;
        if (chunking) {
            if ((int64_t)n > budget) n = (uint64_t)budget;
        } else if ((int64_t)need > budget && c->n_seqs > 0) {
            break;
        }
        if (ceil_div(prefix + n, c->ps) - m > kv_available(&c->kv) - m_cached) break;
        if (core_admit(c, r, m, 0, 0, prefix + n, now) < 0) break;
        c->run[c->n_run++] = r;
        r->in_run = true;
        core_add_seq(c, r, (uint32_t)n, 0, true);
        budget -= (int64_t)n;
    }
}
