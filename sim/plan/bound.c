/* bound.c — what can be said of a candidate without simulating it.
 *
 * Memory: the server's own sizing (sim_prepare_server, as a run does it)
 * refuses a model whose weights leave no KV pool.
 *
 * Capacity: a deployment that cannot keep up with the trace's tokens on
 * average cannot meet a latency SLO over it: its queue grows for the whole
 * run. Each replica's best rates come from the cost model itself:
 *   prompt tokens/s  ≤ chunk / t(one prefill chunk of `chunk` tokens at context 0)
 *   output tokens/s  ≤ B·(k+1) / t(a decode step of B sequences at the
 *                      output-weighted mean prompt length, k drafts each)
 * with B the most sequences that can run (max running requests, and the
 * pool's tokens at that context) and k + 1 the most tokens a verify can
 * commit. The trace needs its uncached prompt tokens (a prefix block
 * counted only the first time any request sends it: an infinite cache)
 * and its output tokens. Prefill and decode may share a step, so the busy
 * fraction is at least the larger of the two needs, not their sum:
 *   load = max(prompt need / prompt rate, output need / output rate) / replicas
 * (per pool under prefill-decode disaggregation). load > 1 is pruned. */
#include "sim/plan/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/hashmap.h"

void plan_demand_of(const tr_trace *t, double rate_scale, plan_demand *d)
{
    memset(d, 0, sizeof *d);
    if (!t->n_requests) return;
    uint32_t bs = t->header.block_size;
    rh_map64 seen = {0};
    double prompt = 0, output = 0, weighted = 0;
    for (size_t i = 0; i < t->n_requests; i++) {
        const tr_request *r = &t->requests[i];
        uint64_t cached = 0;
        if (bs && r->hashes) {
            /* A radix cache hits a leading run of blocks only. */
            uint32_t nb = tr_blocks(r->input_len, bs), k = 0;
            while (k < nb && k < r->n_hashes && rh_map64_get(&seen, r->hashes[k], NULL)) k++;
            cached = (uint64_t)k * bs;
            for (uint32_t j = 0; j < r->n_hashes && j < nb; j++) rh_map64_put(&seen, r->hashes[j], 1);
        }
        prompt += cached < r->input_len ? r->input_len - cached : 0;
        output += r->output_len;
        weighted += (double)r->input_len * r->output_len;
    }
    rh_map64_free(&seen);
    double span = t->requests[t->n_requests - 1].arrival - t->requests[0].arrival;
    if (!(span > 0)) span = 1;
    span /= rate_scale > 0 ? rate_scale : 1;
    d->prompt_tps = prompt / span;
    d->output_tps = output / span;
    d->decode_context = output > 0 ? weighted / output : 0;
}

static double step_time(const cost_model *m, const sim_config *cfg, cost_seq *seqs, uint32_t n, uint32_t drafts)
{
    cost_batch b = {.seqs = seqs, .n = n, .tp = cfg->tp, .serving = &cfg->serving};
    cost_batch_summarize(&b);
    if (drafts && cfg->spec_draft_model) {
        b.draft_steps = drafts;
        b.draft_seqs = b.decode_seqs;
        b.draft_width = cfg->spec_topk > 1 ? cfg->spec_topk : 1;
    }
    return cost_step_time(m, &b);
}

int plan_bound(const plan_space *sp, const plan_opts *o, const plan_demand *d, plan_cand *c, rh_err *e)
{
    const cost_model *m = sp->gpus[c->gpu].cost;
    sim_config cfg;
    if (plan_cand_config(sp, c, &o->base, &cfg, e) < 0) return -1;
    sim_result notes;
    memset(&notes, 0, sizeof notes);
    rh_err why = {{0}};
    if (sim_prepare_server(&cfg, m, &notes, &why) < 0) {
        c->state = PLAN_REFUSED_MEMORY;
        *e = why;
        return 0;
    }
    c->pool_tokens = cfg.core.max_total_tokens;
    uint32_t chunk = cfg.core.chunked_prefill_size > 0 ? (uint32_t)cfg.core.chunked_prefill_size : 8192;
    cost_seq one = {.n_new = chunk, .context = 0, .prefill = true};
    double t_prefill = step_time(m, &cfg, &one, 1, 0);
    uint32_t ctx = (uint32_t)ceil(d->decode_context);
    uint32_t k = cfg.core.spec_steps;
    uint64_t fit = c->pool_tokens ? c->pool_tokens / ((uint64_t)ctx + 1 + k) : cfg.core.max_running_requests;
    uint32_t batch = cfg.core.max_running_requests;
    if (!batch || (fit && fit < batch)) batch = fit ? (uint32_t)fit : 1;
    if (batch < 1) batch = 1;
    cost_seq *seqs = malloc(batch * sizeof *seqs);
    if (!seqs) return rh_fail(e, "out of memory");
    for (uint32_t i = 0; i < batch; i++) seqs[i] = (cost_seq){.n_new = 1 + k, .context = ctx, .prefill = false};
    double t_decode = step_time(m, &cfg, seqs, batch, k);
    free(seqs);
    if (!(t_prefill > 0) || !(t_decode > 0))
        return rh_fail(e, "%s cannot price tp %u", sp->gpus[c->gpu].name, c->tp);
    double prompt_rate = chunk / t_prefill, output_rate = batch * (double)(k + 1) / t_decode;
    double need_p = d->prompt_tps / prompt_rate, need_d = d->output_tps / output_rate;
    if (c->prefill) {
        double lp = need_p / c->prefill, ld = need_d / (c->replicas - c->prefill);
        c->load = lp > ld ? lp : ld;
    } else {
        c->load = (need_p > need_d ? need_p : need_d) / c->replicas;
    }
    if (c->load > 1) c->state = PLAN_PRUNED_CAPACITY;
    return 0;
}
