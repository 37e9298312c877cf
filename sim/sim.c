/* sim.c — the simulator's event loop: see sim.h.
 *
 * One virtual clock over one or more replicas, each a core with its own
 * tokenizer, detokenizer and step in flight. The loop takes the earliest of
 * three kinds of event until every request is done:
 *   1. a replica's step ends: its tokens are committed at that time;
 *   2. requests are sent (open loop: their scaled arrivals; closed loop: also
 *      a free client): the router picks a replica for each, which sees it
 *      after the network delay and its tokenizer;
 *   3. a replica at a step boundary takes what has reached it, asks its core
 *      for a batch and prices it with the cost model; the step ends that
 *      much later.
 * A replica whose core has nothing to run waits for the next request to
 * reach it. With one replica (and no delay) this is the loop of a single
 * server, call for call: the same batches at the same times. The cores
 * report tokens, finishes and steps through hooks; this file turns them into
 * request records, metrics and series, per replica and for the whole, and
 * writes the run when asked. */
#include "sim/sim.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/tier.h"
#include "engine/record/outcome.h"
#include "engine/router/router.h"
#include "sim/pool.h"
#include "traces/sender.h"
#include "util/iheap.h"
#include "util/stats.h"
#include "util/progress.h"
#include "util/rng.h"

/* Per trace request. */
typedef struct req_state {
    uint32_t index;          /* into the trace */
    uint32_t replica;        /* which serves it (under PD: the prefill one, then the decode one) */
    bool decoding;           /* PD: handed to the decode pool */
    double kv_transfer;      /* PD: s its KV took to move, queueing included */
    rec_outcome o;           /* on the virtual clock */
    rh_dvec times;           /* token times (absolute), only when writing them or cfg->request_itl */
    double itl_median;       /* cfg->request_itl: the median of its inter-token gaps, else 0 */
} req_state;

/* Raw per-step series, binned at the end. Floats: plots need no more. */
typedef struct step_row {
    float t, dur, batch, prefill, decode, kv, waiting, running;
} step_row;

struct run;

enum { ROLE_BOTH = SIM_ROLE_BOTH, ROLE_PREFILL = SIM_ROLE_PREFILL, ROLE_DECODE = SIM_ROLE_DECODE };

/* One server: its core, the queue in front of it and its step in flight. */
typedef struct replica {
    struct run *run;
    uint32_t index;
    int role;                /* ROLE_*: a whole server, or one side of a prefill-decode pair */
    uint32_t group;          /* which of the run's groups it is one of */
    const sim_config *cfg;   /* its group's knobs (sized): core, tp, speculation */
    const cost_model *cost;  /* its group's cost model */
    uint32_t tp;             /* its tensor-parallel size for the cost model (0: the cost file's) */
    double link_free;        /* PD prefill side: when its KV link takes the next transfer */
    double kv_bytes_per_token;   /* PD prefill side: what a prompt token's KV moves, per GPU */
    uint32_t gpus;           /* what its cost model prices it on (set at the end) */
    struct kv_tier *storage; /* the run's shared storage tier, or NULL */
    core *c;                 /* NULL until it first gets a request (replica_core): an idle
                                replica of a big cluster holds no pool, cache or script */
    metrics *m;              /* its own requests and steps (cluster runs) */
    step_row *rows;
    size_t n_rows, cap_rows;
    /* The cost model's request and output-token overheads (cost.h) run on
     * a tokenizer and a detokenizer beside the GPU, one item at a time: a
     * request joins the scheduler when the tokenizer is done with it, a
     * step's tokens reach their clients when the detokenizer is. */
    double tok_free, detok_free;   /* when each next takes work */
    double deliver;          /* when the current step's tokens reach their clients */
    /* Requests routed here and not yet in the core, in order, with when they
     * were sent and when they are ready (reached it, tokenized). */
    uint32_t *pend;
    double *pend_sent, *pend_ready;
    size_t pend_head, pend_tail, pend_cap;
    core_seq_result *results;   /* per batch: draft acceptances */
    cost_seq *cseqs;            /* per batch: what the cost model prices */
    uint32_t cap_seqs;
    bool busy;               /* a step is in flight until `end` */
    double end;
    core_batch batch;
    double prev_gpu;         /* the GPU time of the step before, when the replica has been busy since (else 0) */
    uint32_t outstanding;    /* routed here, not finished: the router's view */
    uint64_t routed, steps;
    double busy_s;
    double itl_gap;          /* its own run of equal inter-token gaps */
    uint64_t itl_count;
} replica;

typedef struct run {
    const sim_config *cfg;
    const tr_trace *trace;
    metrics *m;
    tr_writer *w;
    req_state *rs;
    tr_sender *sender;       /* who is sent when: the engine replay's rule */
    struct kv_tier *storage; /* --hicache-storage-backend: the store every replica shares */
    uint64_t outstanding, done;
    uint64_t rng;
    double itl_gap;          /* the run of equal inter-token gaps being counted */
    uint64_t itl_count;
    uint64_t refused_context, refused_pool;   /* requests no configuration here can serve */
    char refusal[256];       /* the first one's message */
    int failed;              /* an error inside a hook */
    rh_err err;
    rh_progress bar;
    double now;              /* the virtual clock */
    double next_send;        /* the sender's next send (INFINITY: none due yet) */
    replica *reps;
    uint32_t n_reps;
    router *router;          /* NULL with one replica; under PD, over the prefill pool */
    router *router_decode;   /* PD: over the decode pool */
    router_replica *view;    /* what the router is told, per replica */
    uint32_t n_prefill;      /* PD: replicas [0, n_prefill) prefill, the rest decode; 0: no PD */
    const sim_group *groups; /* sized, prefill groups first; the replicas point into them */
    const double *group_kv_bytes;   /* per group: PD's KV bytes per token per GPU (0 off the prefill side) */
    uint32_t n_groups;
    rh_iheap wakes;          /* replicas by when each next has something to do (wake_time) */
    cost_memo **memos;       /* per group: its step prices by shape (NULL: priced each time) */
} run;

void sim_config_default(sim_config *c)
{
    memset(c, 0, sizeof *c);
    core_config_default(&c->core);
    c->rate_scale = 1;
    c->tp = 0;              /* the cost file's own size */
    c->accept.alpha = 0.7;
    c->spec_topk = 1;
    c->series_points = 2000;
    c->token_times = 1;
    c->replicas = 1;
    router_config_default(&c->router);
    sim_pd_link("ib", &c->pd_link_Bps, &c->pd_link_latency_s);   /* --pd-link's default, whatever the flag order */
    /* the store: a TB, read over RoCE (Mooncake's Transfer Engine on a 200 Gb/s NIC per GPU) */
    c->storage_gb = 1000;
    sim_pd_link("rdma", &c->storage_Bps, &c->storage_latency_s);
}

static void fail(run *r, const char *what)
{
    if (!r->failed) rh_fail(&r->err, "%s", what);
    r->failed = 1;
}

/* The median gap between consecutive times (sorted in place: done with them). */
static double median_gap(rh_dvec *t)
{
    for (size_t k = t->n - 1; k > 0; k--) t->v[k] -= t->v[k - 1];
    rh_sort_doubles(t->v + 1, t->n - 1);
    return rh_percentile_sorted(t->v + 1, t->n - 1, 50);
}

/* One more inter-token gap into a run-length count (the decodes of one step
 * mostly share their gap, the step's length): each run reaches the metrics once. */
static int count_gap(metrics *m, double *run_gap, uint64_t *count, double gap)
{
    if (gap == *run_gap) {
        (*count)++;
        return 0;
    }
    int rc = *count ? metrics_add_itl(m, *run_gap, *count) : 0;
    *run_gap = gap;
    *count = 1;
    return rc;
}

/* A finished request becomes a measured record. */
static void emit_request(run *r, req_state *s, double now)
{
    tr_request out;
    replica *rep = &r->reps[s->replica];
    rec_outcome_record(&s->o, &r->trace->requests[s->index], now, NULL, &out);
    /* ITLs were fed step by step; the metrics get the record without times. */
    if (metrics_add_request(r->m, &out) < 0) fail(r, "out of memory");
    if (rep->m && metrics_add_request(rep->m, &out) < 0) fail(r, "out of memory");
    if (r->cfg->request_itl && s->times.n >= 2) s->itl_median = median_gap(&s->times);
    if (r->w) {
        if (r->cfg->token_times && s->times.n == s->o.n_out)
            rec_outcome_record(&s->o, &r->trace->requests[s->index], now, s->times.v, &out);
        if (tr_write_request(r->w, &out, &r->err) < 0) r->failed = 1;
    }
    rh_dvec_free(&s->times);
    r->done++;
    r->outstanding--;
    rep->outstanding--;
    tr_sender_done(r->sender, s->index, now);
}

/* Tokens reach the client at `now`: the outcome, the ITL counts, the token times. */
static void record_tokens(run *r, replica *rep, req_state *s, const core_event *ev)
{
    if (s->o.n_out) {
        double gap = ev->now - s->o.last;
        if (count_gap(r->m, &r->itl_gap, &r->itl_count, gap) < 0) fail(r, "out of memory");
        if (rep->m && count_gap(rep->m, &rep->itl_gap, &rep->itl_count, gap) < 0) fail(r, "out of memory");
    }
    if ((r->w && r->cfg->token_times) || r->cfg->request_itl)
        for (uint32_t k = 0; k < ev->n_tokens; k++)
            if (rh_dvec_push(&s->times, ev->now) < 0) fail(r, "out of memory");
    rec_outcome_event(&s->o, ev);
}

static void handoff(replica *rep, req_state *s, double now);

static void on_event(void *ctx, const core_event *in)
{
    replica *rep = ctx;
    run *r = rep->run;
    req_state *s = in->user;
    /* Tokens and finishes are seen by the client when they are delivered. */
    core_event shifted = *in;
    if (in->kind == CORE_EV_TOKENS || in->kind == CORE_EV_FINISHED) shifted.now = rep->deliver;
    const core_event *ev = &shifted;
    if (rep->role == ROLE_PREFILL && (ev->kind == CORE_EV_TOKENS || ev->kind == CORE_EV_FINISHED)) {
        /* The prefill side's one token goes out with the KV. */
        if (ev->kind == CORE_EV_FINISHED) handoff(rep, s, ev->now);
        return;
    }
    if (rep->role == ROLE_DECODE && ev->kind == CORE_EV_ADMITTED) return;   /* the prefill side's hit counts */
    if (ev->kind == CORE_EV_TOKENS) {
        record_tokens(r, rep, s, ev);
        return;
    }
    rec_outcome_event(&s->o, ev);
    if (ev->kind == CORE_EV_FINISHED || ev->kind == CORE_EV_ABORTED) emit_request(r, s, ev->now);
}

static void on_step(void *ctx, const tr_step *st)
{
    replica *rep = ctx;
    run *r = rep->run;
    metrics_add_step(r->m, st);
    if (rep->m) metrics_add_step(rep->m, st);
    rep->steps++;
    rep->busy_s += st->duration;
    if (r->w && tr_write_step(r->w, st, &r->err) < 0) r->failed = 1;
    if (rep->n_rows == rep->cap_rows) {
        size_t cap = rep->cap_rows ? rep->cap_rows * 2 : 4096;
        step_row *v = realloc(rep->rows, cap * sizeof *v);
        if (!v) {
            fail(r, "out of memory");
            return;
        }
        rep->rows = v;
        rep->cap_rows = cap;
    }
    rep->rows[rep->n_rows++] = (step_row){
        .t = (float)st->start,
        .dur = (float)st->duration,
        .batch = (float)(st->prefill_seqs + st->decode_seqs),
        .prefill = (float)st->prefill_tokens,
        .decode = (float)st->decode_tokens,
        .kv = st->pages_total ? (float)st->pages_used / (float)st->pages_total : 0,
        .waiting = (float)st->waiting,
        .running = (float)st->running,
    };
}

/* Request `i`, sent at `sent`, enters its replica's core at `now`, the
 * replica's step boundary. */
static core *replica_core(replica *rep, rh_err *e);

static void admit_request(replica *rep, uint32_t i, double sent, double now)
{
    run *r = rep->run;
    const tr_request *q = &r->trace->requests[i];
    req_state *s = &r->rs[i];
    s->index = i;
    if (!s->decoding) s->o.send = sent;
    core_req_desc d = {
        .id = q->id,
        .prompt_len = q->input_len ? q->input_len : 1,   /* a server always sees a BOS */
        .max_new_tokens = q->output_len ? q->output_len : 1,
        .block_hashes = q->hashes,
        .n_block_hashes = q->n_hashes,
        .block_size = r->trace->header.block_size,
        .priority = q->priority,
        .adapter = q->adapter,
        .user = s,
    };
    if (rep->role == ROLE_PREFILL) d.max_new_tokens = 1;   /* the prompt and its first token */
    if (rep->role == ROLE_DECODE) {
        /* The rest of the output, from the prompt's KV as it arrived; this
         * pool's own cache holds only what it computes. */
        d.prompt_len += 1;       /* the first output token, sampled on the prefill side */
        d.max_new_tokens -= 1;
        d.kv_ready = true;
        d.block_hashes = NULL;
        d.n_block_hashes = 0;
    }
    if (!replica_core(rep, &r->err)) {
        r->failed = 1;
        return;
    }
    rh_err why;
    core_fit fit = core_check_fit(rep->c, d.id, d.prompt_len, d.max_new_tokens, &why);
    if (fit == CORE_OVER_CONTEXT || fit == CORE_OVER_POOL) {
        /* Refused as a server refuses it: an error for this request alone,
         * counted as failed with its reason, and the run goes on. */
        if (fit == CORE_OVER_CONTEXT) r->refused_context++;
        else r->refused_pool++;
        if (!r->refusal[0]) snprintf(r->refusal, sizeof r->refusal, "%.*s", (int)sizeof r->refusal - 1, why.msg);
        s->o.finish = TR_FINISH_ERROR;
        emit_request(r, s, now);
        return;
    }
    /* Anything else (an id sent twice) is a trace this run cannot replay. */
    if (!core_add(rep->c, &d, now, &r->err)) r->failed = 1;
}

static int pend_push(replica *rep, uint32_t i, double sent, double ready)
{
    if (rep->pend_head == rep->pend_tail) rep->pend_head = rep->pend_tail = 0;
    if (rep->pend_tail == rep->pend_cap) {
        if (rep->pend_head > 0) {   /* slide the live part down before growing */
            size_t n = rep->pend_tail - rep->pend_head;
            memmove(rep->pend, rep->pend + rep->pend_head, n * sizeof *rep->pend);
            memmove(rep->pend_sent, rep->pend_sent + rep->pend_head, n * sizeof *rep->pend_sent);
            memmove(rep->pend_ready, rep->pend_ready + rep->pend_head, n * sizeof *rep->pend_ready);
            rep->pend_head = 0;
            rep->pend_tail = n;
        }
        if (rep->pend_tail == rep->pend_cap) {
            size_t cap = rep->pend_cap ? rep->pend_cap * 2 : 256;
            uint32_t *p = realloc(rep->pend, cap * sizeof *p);
            if (p) rep->pend = p;
            double *a = realloc(rep->pend_sent, cap * sizeof *a);
            if (a) rep->pend_sent = a;
            double *b = realloc(rep->pend_ready, cap * sizeof *b);
            if (b) rep->pend_ready = b;
            if (!p || !a || !b) return -1;
            rep->pend_cap = cap;
        }
    }
    rep->pend[rep->pend_tail] = i;
    rep->pend_sent[rep->pend_tail] = sent;
    rep->pend_ready[rep->pend_tail++] = ready;
    return 0;
}

/* When the first request waiting in front of the replica is ready (INFINITY: none). */
static double pend_next(const replica *rep)
{
    return rep->pend_head < rep->pend_tail ? rep->pend_ready[rep->pend_head] : INFINITY;
}

/* When the replica next has something to do: its step's end, or the first
 * request ready in front of it. */
static double wake_time(const replica *rep)
{
    return rep->busy ? rep->end : pend_next(rep);
}

/* Tells the wake heap; a replica the loop has taken out keeps the time for
 * when it goes back. */
static void wake_update(replica *rep)
{
    rh_iheap_set(&rep->run->wakes, rep->index, wake_time(rep));
}

/* The replica for request i among reps[first, first + n): the router's pick
 * over what each holds now (one replica: always it). */
static int route(run *r, router *rt, uint32_t first, uint32_t n, uint32_t i)
{
    if (!rt) return (int)first;
    for (uint32_t k = 0; k < n; k++) {
        replica *rep = &r->reps[first + k];
        r->view[k] = (router_replica){.healthy = true, .outstanding = rep->outstanding};
        router_policy pol = r->cfg->router.policy;
        if ((pol == ROUTER_LEAST_KV || pol == ROUTER_LUA) && rep->c) {   /* SGLang's token_usage: pages held by requests */
            core_stats st;
            core_get_stats(rep->c, &st);
            r->view[k].kv_use = st.pages_total ? (double)st.pages_used / (double)st.pages_total : 0;
        }
    }
    const tr_request *q = &r->trace->requests[i];
    int k = router_pick(rt, r->view, q->hashes, q->n_hashes);
    if (router_errors(rt) && !r->cfg->policy_fallback) {
        /* a study must never report least-outstanding's numbers under a script's name */
        char msg[sizeof r->err.msg];
        snprintf(msg, sizeof msg,
                 "router script error at t=%.3f s: %s (--policy-fallback makes such a pick least-outstanding's and "
                 "counts it)",
                 r->now, router_error(rt));
        fail(r, msg);
        return -1;
    }
    return k < 0 ? -1 : (int)first + k;
}

/* PD: the prefill side has the prompt's KV and first token at `now`. The
 * KV crosses the link (after the transfers queued before it on this
 * replica's link), the first token reaches the client when it has, and the
 * request waits in front of a decode replica for pages. One output token
 * only: done here. */
static void handoff(replica *rep, req_state *s, double now)
{
    run *r = rep->run;
    const tr_request *q = &r->trace->requests[s->index];
    uint32_t prompt = q->input_len ? q->input_len : 1, out = q->output_len ? q->output_len : 1;
    if (out <= 1) {
        core_event tok = {.kind = CORE_EV_TOKENS, .now = now, .n_tokens = 1, .output_len = 1};
        record_tokens(r, rep, s, &tok);
        s->o.finish = TR_FINISH_LENGTH;
        emit_request(r, s, now);
        return;
    }
    double start = fmax(now, rep->link_free);
    double end = start + r->cfg->pd_link_latency_s + (double)prompt * rep->kv_bytes_per_token / r->cfg->pd_link_Bps;
    rep->link_free = end;
    s->kv_transfer = end - now;
    core_event tok = {.kind = CORE_EV_TOKENS, .now = end, .n_tokens = 1, .output_len = 1};
    record_tokens(r, rep, s, &tok);
    int k = route(r, r->router_decode, r->n_prefill, r->n_reps - r->n_prefill, s->index);
    if (k < 0) {
        fail(r, "the router found no decode replica");
        return;
    }
    rep->outstanding--;
    replica *dec = &r->reps[k];
    s->replica = (uint32_t)k;
    s->decoding = true;
    dec->outstanding++;
    dec->routed++;
    if (pend_push(dec, s->index, s->o.send, end) < 0) fail(r, "out of memory");
    wake_update(dec);
}

/* Sends everything due by `now`, each to the replica the router picks;
 * sets r->next_send. A request reaches its replica after the network delay,
 * then waits for that replica's tokenizer (both keep the sending order, so
 * each queue stays sorted by readiness) and for its next step boundary, as
 * on a real server; its latencies count from the send. */
static void send_due(run *r, double now)
{
    uint32_t i;
    double sent, next;
    while (!r->failed && tr_sender_next(r->sender, now, &i, &sent, &next)) {
        int k = route(r, r->router, 0, r->n_prefill ? r->n_prefill : r->n_reps, i);
        if (k < 0) {
            fail(r, "the router found no replica");
            break;
        }
        replica *rep = &r->reps[k];
        double request_s = rep->cost->over.request_s;
        double arrival_s = rep->cost->over.arrival_s + r->cfg->network_delay_s;
        r->rs[i].replica = (uint32_t)k;
        r->outstanding++;
        rep->outstanding++;
        rep->routed++;
        double ready = sent;
        if (request_s > 0 || arrival_s > 0) {
            ready = fmax(sent + arrival_s, rep->tok_free) + request_s;
            rep->tok_free = ready;
        }
        if (pend_push(rep, i, sent, ready) < 0) fail(r, "out of memory");
        wake_update(rep);
    }
    r->next_send = r->failed ? INFINITY : next;
}

/* Output tokens a batch commits (drafts accepted included): the
 * detokenizer's work for the step. */
static uint64_t committed_tokens(const replica *rep, const core_batch *b)
{
    bool spec = rep->cfg->core.spec_steps > 0;
    uint64_t n = 0;
    for (uint32_t i = 0; i < b->n; i++)
        if (b->seqs[i].samples) n += 1 + (spec ? rep->results[i].accepted : 0);
    return n;
}

/* Accepted draft tokens for one verify of `k` drafts (sim_accept_model).
 * A model's drafts stop at its depth (--speculative-num-steps); n-gram
 * proposals do not. */
static uint32_t draw_accepted(run *r, const sim_config *c, uint32_t k)
{
    const sim_accept_model *a = &c->accept;
    uint32_t depth = c->spec_draft_model && c->core.spec_steps < k ? c->core.spec_steps : k;
    if (a->hist_n) {
        /* Accepted length from the recorded histogram, truncated at the depth. */
        double total = 0;
        for (uint32_t j = 0; j < a->hist_n; j++) total += a->hist[j];
        double u = rh_splitmix_unit(&r->rng) * total;
        uint32_t j = 0;
        while (j + 1 < a->hist_n && u >= a->hist[j]) u -= a->hist[j++];
        return j < depth ? j : depth;
    }
    uint32_t topk = c->spec_draft_model && c->spec_topk > 1 ? c->spec_topk : 1;
    uint32_t j = 0;
    if (topk == 1) {
        while (j < depth && rh_splitmix_unit(&r->rng) < a->alpha) j++;
        return j;
    }
    /* A tree: its k nodes fill each depth up to topk, shallow first. */
    double prev = 1, left = k;
    while (j < depth && left > 0) {
        double here = left < topk ? left : topk;
        double p = 1 - pow(1 - a->alpha, here / prev);
        if (rh_splitmix_unit(&r->rng) >= p) break;
        j++;
        left -= here;
        prev = here;
    }
    return j;
}

/* Steps in start order over sorted runs (each replica's own steps are in
 * order): a merge, ties to the lower replica, so a cluster's series needs no
 * sorted copy of every step (11M steps of 16 replicas: 360 MB saved). */
typedef struct row_seq {
    const step_row *const *runs;
    const size_t *lens;
    uint32_t n_runs;
    size_t *at;              /* per run: its next row */
    uint32_t *heap, n_heap;  /* runs with rows left, by (next start, run): a min-heap */
} row_seq;

static bool seq_before(const row_seq *q, uint32_t a, uint32_t b)
{
    float x = q->runs[a][q->at[a]].t, y = q->runs[b][q->at[b]].t;
    return x < y || (x == y && a < b);
}

static void seq_sift(row_seq *q, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        if (l < q->n_heap && seq_before(q, q->heap[l], q->heap[m])) m = l;
        if (l + 1 < q->n_heap && seq_before(q, q->heap[l + 1], q->heap[m])) m = l + 1;
        if (m == i) return;
        uint32_t t = q->heap[i];
        q->heap[i] = q->heap[m];
        q->heap[m] = t;
        i = m;
    }
}

static void seq_reset(row_seq *q)
{
    q->n_heap = 0;
    for (uint32_t k = 0; k < q->n_runs; k++) {
        q->at[k] = 0;
        if (q->lens[k]) q->heap[q->n_heap++] = k;
    }
    for (uint32_t i = q->n_heap / 2; i-- > 0;) seq_sift(q, i);
}

/* The next step in start order (ties: the lower replica); NULL after the last. */
static const step_row *seq_next(row_seq *q)
{
    if (!q->n_heap) return NULL;
    uint32_t k = q->heap[0];
    const step_row *x = &q->runs[k][q->at[k]++];
    if (q->at[k] == q->lens[k]) q->heap[0] = q->heap[--q->n_heap];
    seq_sift(q, 0);
    return x;
}

static void bin_series(row_seq *q, size_t n_rows, uint32_t points, double end, sim_series *s)
{
    uint32_t n = points ? points : 2000;
    if (n_rows == 0) n = 0;
    if (n_rows < n) n = (uint32_t)n_rows;
    memset(s, 0, sizeof *s);
    if (n == 0) return;
    double *cols[7];
    for (int k = 0; k < 7; k++) cols[k] = calloc(n, sizeof(double));
    uint32_t *cnt = calloc(n, sizeof *cnt);
    for (int k = 0; k < 7; k++)
        if (!cols[k]) goto out;
    if (!cnt) goto out;
    double width = end > 0 ? end / n : 1;
    seq_reset(q);
    for (const step_row *x; (x = seq_next(q));) {
        uint32_t b = (uint32_t)(x->t / width);
        if (b >= n) b = n - 1;
        cnt[b]++;
        cols[1][b] += x->batch;
        cols[2][b] += x->prefill;
        cols[3][b] += x->decode;
        cols[4][b] += x->kv;
        cols[5][b] += x->waiting;
        cols[6][b] += x->running;
    }
    /* A bin in which no step starts is either inside a long step (it shows
     * that step) or idle (zeros, which is what happened). */
    seq_reset(q);
    const step_row *x = seq_next(q), *after = seq_next(q);   /* the latest step started before the bin, the next */
    for (uint32_t b = 0; b < n; b++) {
        cols[0][b] = b * width;
        if (cnt[b]) {
            for (int k = 1; k < 7; k++) cols[k][b] /= cnt[b];
            while (after && after->t < (b + 1) * width) {
                x = after;
                after = seq_next(q);
            }
            continue;
        }
        if (x->t <= b * width && x->t + x->dur > b * width) {
            cols[1][b] = x->batch;
            cols[2][b] = x->prefill;
            cols[3][b] = x->decode;
            cols[4][b] = x->kv;
            cols[5][b] = x->waiting;
            cols[6][b] = x->running;
        }
    }
    s->n = n;
    s->t = cols[0];
    s->batch_size = cols[1];
    s->prefill_tokens = cols[2];
    s->decode_tokens = cols[3];
    s->kv_use = cols[4];
    s->waiting = cols[5];
    s->running = cols[6];
    free(cnt);
    return;
out:
    for (int k = 0; k < 7; k++) free(cols[k]);
    free(cnt);
}

static void put_knob(void *ctx, const char *name, const char *value)
{
    tr_header_set(ctx, name, value);
}

/* The recording's header: the first group's server knobs and cost model
 * (a cluster's others are in its CLUSTER.json), the run's arrivals. */
static tr_writer *open_output(const sim_config *cfg, const sim_group *g, const tr_trace *trace, rh_err *e)
{
    const cost_model *cost = g->cost;
    tr_header h;
    if (tr_header_copy(&h, &trace->header) < 0) {
        rh_fail(e, "out of memory");
        return NULL;
    }
    char buf[64];
    tr_header_set(&h, "source", "rehearse sim");
    tr_header_set(&h, "cost", cost->path ? cost->path : "");
    core_config_foreach(&g->cfg.core, put_knob, &h);
    snprintf(buf, sizeof buf, "%u", g->cfg.tp);
    tr_header_set(&h, "tp-size", buf);
    snprintf(buf, sizeof buf, "%g", cfg->rate_scale);
    tr_header_set(&h, "rate-scale", buf);
    snprintf(buf, sizeof buf, "%u", cfg->max_concurrency);
    tr_header_set(&h, "max-concurrency", buf);
    tr_writer *w = tr_writer_open(cfg->out_path, &h, 0, e);
    tr_header_free(&h);
    return w;
}

/* The Lua policy's watchdog runs on real time, whatever the virtual clock says. */
static double guard_clock(void *ctx)
{
    (void)ctx;
    return rh_now();
}

/* The replica's core, made on first use from its group's knobs: the same
 * core whenever it is made (no clock, nothing seen before its first
 * request), so a run is the same as with every core made up front. NULL
 * with e. */
static core *replica_core(replica *rep, rh_err *e)
{
    if (rep->c) return rep->c;
    core_hooks hooks = {.ctx = rep, .on_step = on_step, .on_event = on_event, .guard_clock = guard_clock};
    core_config k = rep->cfg->core;
    k.hicache_storage = rep->storage;
    rep->c = core_new(&k, &hooks, e);
    return rep->c;
}

/* Step 1: the run's state — records per request, metrics, the sender, the
 * replicas' cores, the router, and the output file when one is asked for. */
static int run_open(run *r, const sim_config *cfg, const sim_group *groups, const double *kv_bytes, uint32_t n_groups,
                    const tr_trace *trace, rh_err *e)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->groups = groups;
    r->group_kv_bytes = kv_bytes;
    r->n_groups = n_groups;
    r->trace = trace;
    r->rng = cfg->seed ^ 0x5157A11ull;
    r->next_send = INFINITY;
    uint64_t n = trace->n_requests;
    for (uint32_t g = 0; g < n_groups; g++) {
        r->n_reps += groups[g].count;
        if (groups[g].role == SIM_ROLE_PREFILL) r->n_prefill += groups[g].count;
    }
    r->rs = calloc(n ? n : 1, sizeof *r->rs);
    r->reps = calloc(r->n_reps, sizeof *r->reps);
    r->view = calloc(r->n_reps, sizeof *r->view);
    r->m = metrics_new(&cfg->slo);
    r->memos = calloc(n_groups, sizeof *r->memos);
    if (!r->rs || !r->reps || !r->view || !r->m || !r->memos || rh_iheap_init(&r->wakes, r->n_reps) < 0)
        return rh_fail(e, "out of memory for %llu requests", (unsigned long long)n);
    if (!(r->sender = tr_sender_new(trace, cfg->rate_scale, cfg->max_concurrency, e))) return -1;
    if (cfg->hicache_storage) {
        /* one store for every replica (Mooncake's, shared by the cluster) */
        const core_config *k0 = &groups[0].cfg.core;
        double per_token = k0->kv_bytes_per_token > 0 ? k0->kv_bytes_per_token : kv_bytes[0];
        if (!k0->enable_hierarchical_cache)
            return rh_fail(e, "--hicache-storage-backend is a tier below the host one: it needs "
                              "--enable-hierarchical-cache");
        if (!(per_token > 0))
            return rh_fail(e, "--hicache-storage-backend: the cost model does not know the KV's bytes per token "
                              "(a roofline does), so the store's size in pages is not known");
        double pages = cfg->storage_gb * 1e9 / (per_token * k0->page_size);
        if (!(pages >= 1) || pages >= 4e9)
            return rh_fail(e, "--hicache-storage-size %g GB: %.0f pages is not a store", cfg->storage_gb, pages);
        if (!(r->storage = malloc(sizeof *r->storage)) || kv_tier_init(r->storage, (uint64_t)pages, e) < 0) {
            free(r->storage);
            r->storage = NULL;
            return e->msg[0] ? -1 : rh_fail(e, "out of memory");
        }
    }
    for (uint32_t k = 0, g = 0, left = groups[0].count; k < r->n_reps; k++, left--) {
        while (!left) left = groups[++g].count;
        replica *rep = &r->reps[k];
        rep->run = r;
        rep->index = k;
        rep->group = g;
        rep->role = (int)groups[g].role;
        rep->cfg = &groups[g].cfg;
        rep->cost = groups[g].cost;
        rep->kv_bytes_per_token = kv_bytes[g];
        rep->storage = r->storage;
        rep->tp = rep->cfg->tp;
        if (k == 0 || rep->group != r->reps[k - 1].group)
            r->memos[g] = cost_memo_new(rep->cost, rep->tp, &rep->cfg->serving);
        /* Each group's first core now, so a bad knob or script stops the
         * run before it starts; the others when they first get work. */
        if ((k == 0 || rep->group != r->reps[k - 1].group) && !replica_core(rep, e)) return -1;
        if (r->n_reps > 1 && !(rep->m = metrics_new(&cfg->slo))) return rh_fail(e, "out of memory");
    }
    uint32_t front = r->n_prefill ? r->n_prefill : r->n_reps;
    if (cfg->router.lua_script && cfg->router.policy != ROUTER_LUA)
        return rh_fail(e, "--router-script %s given, but --router is %s (drop one)", cfg->router.lua_script,
                       router_policy_name(cfg->router.policy));
    if (front > 1 || cfg->router.policy == ROUTER_LUA) {
        router_config rc = cfg->router;
        rc.n_replicas = front;
        rc.guard_clock = guard_clock;   /* a script's time limit runs on real time */
        if (!(r->router = router_new(&rc, e))) return -1;
        if (front == 1) {
            /* One replica needs no router, but a script that cannot load is still refused. */
            router_free(r->router);
            r->router = NULL;
        }
    }
    if (r->n_prefill && r->n_reps - r->n_prefill > 1) {
        /* Decode replicas differ only in load: the least outstanding. */
        router_config rc = cfg->router;
        rc.policy = ROUTER_LEAST_OUTSTANDING;
        rc.n_replicas = r->n_reps - r->n_prefill;
        if (!(r->router_decode = router_new(&rc, e))) return -1;
    }
    if (cfg->out_path && !(r->w = open_output(cfg, &groups[0], trace, e))) return -1;
    return 0;
}

/* Room for a batch of k sequences in the pricing and result buffers. */
static int reserve(replica *rep, uint32_t k, rh_err *e)
{
    if (k <= rep->cap_seqs) return 0;
    uint32_t cap = k * 2;
    core_seq_result *a = realloc(rep->results, cap * sizeof *a);
    if (a) rep->results = a;
    cost_seq *c = realloc(rep->cseqs, cap * sizeof *c);
    if (c) rep->cseqs = c;
    if (!a || !c) return rh_fail(e, "out of memory");
    rep->cap_seqs = cap;
    return 0;
}

/* Step 2a: the price of one batch, its draft acceptances drawn on the way
 * (results, when speculating). */
static int price_batch(replica *rep, const core_batch *b, double *dt, rh_err *e)
{
    run *r = rep->run;
    const sim_config *cfg = rep->cfg;
    if (reserve(rep, b->n, e) < 0) return -1;
    uint32_t draft_seqs = 0;
    bool spec = cfg->core.spec_steps > 0;
    for (uint32_t i = 0; i < b->n; i++) {
        const core_seq *q = &b->seqs[i];
        rep->cseqs[i] = (cost_seq){.n_new = q->n_new, .context = q->start, .prefill = q->prefill};
        if (spec) rep->results[i] = (core_seq_result){0};
        if (q->n_spec) {
            rep->results[i].proposed = q->n_spec;
            rep->results[i].accepted = draw_accepted(r, cfg, q->n_spec);
            draft_seqs++;
        }
    }
    cost_batch cb = {.seqs = rep->cseqs, .n = b->n, .tp = rep->tp, .serving = &cfg->serving,
                     .lora_adapters = b->n_adapters, .lora_tokens = b->adapter_tokens, .lora_loads = b->adapter_loads,
                     .load_tokens = b->load_tokens, .writeback_tokens = b->writeback_tokens,
                     .backup_tokens = b->backup_tokens, .storage_tokens = b->storage_tokens};
    if (cfg->spec_draft_model && draft_seqs) {
        cb.draft_seqs = draft_seqs;
        cb.draft_steps = b->spec_steps;    /* forward passes of the drafter */
        cb.draft_width = cfg->spec_topk;   /* tokens per request in each pass */
    }
    cost_batch_summarize(&cb);
    /* the host's scheduling of this step ran during the previous step's
     * GPU time (overlap scheduling), as far as it fits */
    cost_parts parts;
    cost_memo_parts(r->memos[rep->group], rep->cost, &cb, &parts);
    *dt = cost_parts_duration(&parts, cfg->serving.overlap, rep->prev_gpu);
    rep->prev_gpu = parts.forward_s + parts.draft_s;
    if (!(*dt > 0) || !isfinite(*dt))
        return rh_fail(e, "cost model %s returned %g s for a step of %u sequences",
                       rep->cost->path ? rep->cost->path : "", *dt, b->n);
    return 0;
}

/* A replica's step boundary at `now`: the requests that have reached it
 * enter its core, which forms the next batch; the batch is priced and runs
 * until rep->end. Nothing to run leaves the replica idle (its core is then
 * empty: core_schedule's contract). 0, or -1 with e. */
static int boundary(replica *rep, double now, rh_err *e)
{
    run *r = rep->run;
    const sim_config *cfg = r->cfg;
    while (!r->failed && rep->pend_head < rep->pend_tail && rep->pend_ready[rep->pend_head] <= now) {
        size_t h = rep->pend_head++;
        admit_request(rep, rep->pend[h], rep->pend_sent[h], now);
    }
    if (r->failed || !rep->c) return 0;
    if (!rep->busy && now > rep->end) rep->prev_gpu = 0;   /* idle since its last step: nothing to hide under */
    uint32_t k = core_schedule(rep->c, now, &rep->batch);
    const char *policy_err = cfg->policy_fallback ? NULL : core_policy_error(rep->c);
    if (policy_err)   /* a study must never report fcfs numbers under a policy's name */
        return rh_fail(e, "policy error at t=%.3f s: %s (--policy-fallback makes such a step fcfs and counts it)", now,
                       policy_err);
    if (k == 0) return 0;
    double dt;
    if (price_batch(rep, &rep->batch, &dt, e) < 0) return -1;
    rep->busy = true;
    rep->end = now + dt;
    return 0;
}

/* The step in flight ends at rep->end: its tokens reach the clients when
 * the detokenizer has them, and the core commits them. */
static int commit(replica *rep, rh_err *e)
{
    const sim_config *cfg = rep->cfg;
    rep->busy = false;
    rep->deliver = rep->end;
    double per_token = rep->cost->over.output_token_s;
    if (per_token > 0) {
        rep->deliver = fmax(rep->end, rep->detok_free) + (double)committed_tokens(rep, &rep->batch) * per_token;
        rep->detok_free = rep->deliver;
    }
    /* Without drafts every sampling sequence commits one token: no results needed. */
    return core_complete(rep->c, &rep->batch, cfg->core.spec_steps > 0 ? rep->results : NULL, rep->end, e);
}

/* The replicas due at t, taken out of the wake heap, in index order: the
 * order a server farm's replicas are visited at one instant, whatever the
 * heap's. */
typedef struct due_list {
    uint32_t *v;
    uint32_t n;
} due_list;

/* Takes every replica due by t out of the heap into d, kept sorted from
 * position `from` on; ones that sort before it (already passed in this
 * sweep) go to `later` instead, to wait for the next sweep. */
static void take_due(run *r, double t, due_list *d, uint32_t from, due_list *later)
{
    while (rh_iheap_top_key(&r->wakes) <= t) {
        uint32_t k = rh_iheap_pop(&r->wakes);
        if (from > 0 && k < d->v[from - 1]) {
            later->v[later->n++] = k;
            continue;
        }
        uint32_t i = d->n++;
        while (i > from && d->v[i - 1] > k) {
            d->v[i] = d->v[i - 1];
            i--;
        }
        d->v[i] = k;
    }
}

/* Step 2: the event loop, until every request is done. The clock is r->now.
 * At each event time t: the steps ending at t commit (in replica order),
 * the requests due are sent, then each replica woken or with a request
 * ready takes its step boundary (in replica order). Replicas come from a
 * heap of wake times: one with nothing to do costs nothing. */
static int run_loop(run *r, rh_err *e)
{
    const sim_config *cfg = r->cfg;
    uint64_t steps = 0;
    if (cfg->progress) rh_progress_begin(&r->bar, "sim", r->trace->n_requests);
    else r->bar.enabled = 0;
    int rc = 0;
    bool *woke = calloc(r->n_reps, sizeof *woke);
    due_list due = {calloc(r->n_reps, sizeof(uint32_t)), 0}, later = {calloc(r->n_reps, sizeof(uint32_t)), 0};
    if (!woke || !due.v || !later.v) rc = rh_fail(e, "out of memory");
    bool first = true;
    while (!r->failed && rc == 0) {
        /* The earliest event: a step's end, a request ready at an idle
         * replica, or the next send. */
        double t = fmin(r->next_send, rh_iheap_top_key(&r->wakes));
        if (first) t = fmin(t, r->now);   /* the loop opens at time 0, as a server starts */
        first = false;
        if (t == INFINITY) {
            /* Nothing runs and nothing is left to send: done, unless requests
             * wait for room that never comes. */
            for (uint32_t k = 0; k < r->n_reps && rc == 0; k++)
                if (r->reps[k].c && !core_idle(r->reps[k].c))
                    rc = rh_fail(e, "the scheduler made no progress at t=%.3f s with requests queued: "
                                    "the KV pool is too small for them (raise --max-total-tokens)",
                                 r->now);
            break;
        }
        r->now = t;
        due.n = later.n = 0;
        take_due(r, t, &due, 0, &later);
        for (uint32_t i = 0; i < due.n && rc == 0; i++) {
            replica *rep = &r->reps[due.v[i]];
            if (!rep->busy || rep->end != t) continue;
            if (commit(rep, e) < 0) rc = -1;
            woke[rep->index] = true;
            if ((++steps & 1023) == 0) {
                snprintf(r->bar.extra, sizeof r->bar.extra, "clock %.1f s", r->now);
                rh_progress_update(&r->bar, r->done);
            }
        }
        if (rc == 0 && !r->failed) {
            send_due(r, t);
            take_due(r, t, &due, 0, &later);   /* requests ready now at idle replicas */
            for (uint32_t i = 0; i < due.n && rc == 0 && !r->failed; i++) {
                replica *rep = &r->reps[due.v[i]];
                if (rep->busy || (!woke[rep->index] && !(pend_next(rep) <= t))) continue;
                rc = boundary(rep, t, e);
                take_due(r, t, &due, i + 1, &later);   /* a handoff made another due now */
            }
        }
        for (uint32_t i = 0; i < due.n; i++) {
            woke[due.v[i]] = false;
            wake_update(&r->reps[due.v[i]]);
            rh_iheap_push(&r->wakes, due.v[i]);
        }
        for (uint32_t i = 0; i < later.n; i++) rh_iheap_push(&r->wakes, later.v[i]);
    }
    free(woke), free(due.v), free(later.v);
    if (rc == 0 && r->failed) {
        memcpy(e, &r->err, sizeof *e);
        rc = -1;
    }
    rh_progress_update(&r->bar, r->done);
    rh_progress_end(&r->bar);
    return rc;
}

static int series_of(const run *r, uint32_t first, uint32_t n, sim_series *out)
{
    const step_row **runs = malloc(n * sizeof *runs);
    size_t *lens = malloc(n * sizeof *lens), *at = malloc(n * sizeof *at), total = 0;
    uint32_t *heap = malloc(n * sizeof *heap);
    int rc = -1;
    if (!runs || !lens || !at || !heap) goto out;
    for (uint32_t k = 0; k < n; k++) {
        runs[k] = r->reps[first + k].rows;
        lens[k] = r->reps[first + k].n_rows;
        total += lens[k];
    }
    row_seq q = {.runs = runs, .lens = lens, .n_runs = n, .at = at, .heap = heap};
    bin_series(&q, total, r->cfg->series_points, r->now, out);
    rc = 0;
out:
    free(runs);
    free(lens);
    free(at);
    free(heap);
    return rc;
}

/* Each replica's own summary and series, and how unevenly the work fell. */
static int replica_results(run *r, sim_result *out, rh_err *e)
{
    out->gpus = 0;
    for (uint32_t k = 0; k < r->n_reps; k++) {
        cost_memory mem;
        replica *rep = &r->reps[k];
        rep->gpus = cost_memory_of(rep->cost, rep->tp, &mem) && mem.gpus ? mem.gpus : rep->tp ? rep->tp : 1;
        out->gpus += rep->gpus;
    }
    out->pd_prefill = r->n_prefill;
    if (r->n_reps == 1) return 0;
    out->n_replicas = r->n_reps;
    if (!(out->replicas = calloc(r->n_reps, sizeof *out->replicas))) return rh_fail(e, "out of memory");
    double most = 0, sum = 0, busy_most = 0, busy_sum = 0;
    for (uint32_t k = 0; k < r->n_reps; k++) {
        replica *rep = &r->reps[k];
        sim_replica_result *o = &out->replicas[k];
        if (rep->itl_count && metrics_add_itl(rep->m, rep->itl_gap, rep->itl_count) < 0) return rh_fail(e, "out of memory");
        if (metrics_summarize(rep->m, &o->summary) < 0) return rh_fail(e, "out of memory");
        o->routed = rep->routed;
        o->steps = rep->steps;
        o->busy_s = rep->busy_s;
        o->group = rep->group;
        o->group_name = r->groups[rep->group].name ? r->groups[rep->group].name : "";
        o->gpus = rep->gpus;
        if (series_of(r, k, 1, &o->series) < 0) return rh_fail(e, "out of memory");
        most = fmax(most, (double)rep->routed);
        sum += (double)rep->routed;
        busy_most = fmax(busy_most, rep->busy_s);
        busy_sum += rep->busy_s;
    }
    /* max / mean: 1 is perfectly even, N is everything on one replica. */
    out->imbalance_requests = sum > 0 ? most / (sum / r->n_reps) : 1;
    out->imbalance_busy = busy_sum > 0 ? busy_most / (busy_sum / r->n_reps) : 1;
    return 0;
}

/* Step 3: what the run returns — the summary, the binned series, one
 * outcome per request, per replica when there are several — and the output
 * file, closed. */
static int run_finish(run *r, sim_result *out, rh_err *e)
{
    const tr_trace *trace = r->trace;
    uint64_t n = trace->n_requests;
    if (r->itl_count && metrics_add_itl(r->m, r->itl_gap, r->itl_count) < 0) return rh_fail(e, "out of memory");
    if (metrics_summarize(r->m, &out->summary) < 0) return rh_fail(e, "out of memory");
    for (uint32_t k = 0; k < r->n_reps; k++) {
        if (!r->reps[k].c) continue;   /* never used */
        core_stats st;
        core_get_stats(r->reps[k].c, &st);
        out->summary.policy_errors += st.policy_errors;
        out->summary.policy_trips += st.policy_trips;
    }
    out->router_errors = r->router ? router_errors(r->router) : 0;
    out->router_trips = r->router ? router_trips(r->router) : 0;
    if (out->router_errors)
        snprintf(out->router_error, sizeof out->router_error, "%s", router_error(r->router));
    out->summary.failed_context_length = r->refused_context;
    out->summary.failed_kv_pool = r->refused_pool;
    snprintf(out->refusal, sizeof out->refusal, "%s", r->refusal);
    out->pool_tokens = core_get_config(r->reps[0].c)->max_total_tokens;
    if (series_of(r, 0, r->n_reps, &out->series) < 0) return rh_fail(e, "out of memory");
    if (replica_results(r, out, e) < 0) return -1;
    out->n_requests = n;
    if (!(out->requests = calloc(n ? n : 1, sizeof *out->requests))) return rh_fail(e, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        const req_state *s = &r->rs[i];
        const tr_request *q = &trace->requests[i];
        out->requests[i] = (sim_request_result){
            .id = q->id, .send = s->o.send,
            .ttft = s->o.n_out ? s->o.first - s->o.send : -1,
            .e2e = s->o.n_out ? s->o.last - s->o.send : -1,
            .input_len = q->input_len, .output_len = s->o.n_out,
            .cached_tokens = s->o.cached, .retractions = s->o.retractions, .itl_median = s->itl_median,
            .replica = s->replica, .kv_transfer_s = s->kv_transfer,
        };
        out->kv_transfer_mean_s += s->kv_transfer / (double)n;
    }
    if (r->w) {
        tr_writer *w = r->w;
        r->w = NULL;
        if (tr_writer_close(w, e) < 0) return -1;
    }
    return 0;
}

static void run_close(run *r)
{
    if (r->w) tr_writer_abort(r->w);
    rh_iheap_free(&r->wakes);
    for (uint32_t g = 0; r->memos && g < r->n_groups; g++) cost_memo_free(r->memos[g]);
    free(r->memos);
    for (uint32_t k = 0; r->reps && k < r->n_reps; k++) {
        replica *rep = &r->reps[k];
        if (rep->c) core_free(rep->c);
        metrics_free(rep->m);
        free(rep->rows);
        free(rep->results);
        free(rep->cseqs);
        free(rep->pend);
        free(rep->pend_sent);
        free(rep->pend_ready);
    }
    free(r->reps);
    free(r->view);
    router_free(r->router);
    router_free(r->router_decode);
    if (r->storage) kv_tier_destroy(r->storage);
    free(r->storage);
    metrics_free(r->m);
    if (r->rs)
        for (uint64_t i = 0; i < r->trace->n_requests; i++) rh_dvec_free(&r->rs[i].times);
    free(r->rs);
    tr_sender_free(r->sender);
}

/* Step 0: what the deployment the cost model prices holds. Unless the
 * configuration says, the context length is its model's and the KV pool
 * what its GPU's memory leaves, sized as the chosen server sizes it. */
/* SGLang's shape of model-drafted speculation: a chain (topk 1) verifies
 * its steps + 1 tokens whatever --speculative-num-draft-tokens says (SGLang
 * sets it so); a tree needs the count and can hold at most steps · topk;
 * and without --max-running-requests at most 48 requests run (SGLang's
 * default when it speculates: server_args, the speculative settings). */
#define SGLANG_SPEC_MAX_RUNNING 48

/* The per-token acceptance a chain of `steps` drafts needs for a mean of
 * `len` tokens committed per verify (the bonus token included):
 * Σ_{i=0..steps} α^i = len, by bisection. */
static double alpha_for_length(double len, uint32_t steps)
{
    if (len >= steps + 1) return 1;
    double lo = 0, hi = 1;
    for (int it = 0; it < 100; it++) {
        double a = (lo + hi) / 2, sum = 0, p = 1;
        for (uint32_t i = 0; i <= steps; i++) sum += p, p *= a;
        if (sum < len) lo = a;
        else hi = a;
    }
    return (lo + hi) / 2;
}

static int spec_shape(sim_config *c, sim_result *out, rh_err *e)
{
    core_config *k = &c->core;
    if (c->spec_accept_length > 0 && k->spec_steps) {
        c->accept.alpha = alpha_for_length(c->spec_accept_length, k->spec_steps);
        c->accept.hist_n = 0;
    }
    if (!k->spec_steps || !c->spec_draft_model) return 0;
    if (!c->max_running_set && k->preset == CORE_PRESET_SGLANG && k->max_running_requests > SGLANG_SPEC_MAX_RUNNING)
        k->max_running_requests = SGLANG_SPEC_MAX_RUNNING;
    if (c->spec_topk <= 1) {
        if (k->spec_draft_tokens && k->spec_draft_tokens != k->spec_steps + 1)
            snprintf(out->spec_note, sizeof out->spec_note,
                     "--speculative-num-draft-tokens %u with --speculative-eagle-topk 1 is steps + 1 = %u, as "
                     "SGLang sets it: a chain of %u drafts", k->spec_draft_tokens, k->spec_steps + 1, k->spec_steps);
        k->spec_draft_tokens = k->spec_steps + 1;
        return 0;
    }
    if (!k->spec_draft_tokens)
        return rh_fail(e, "--speculative-eagle-topk %u needs --speculative-num-draft-tokens (the tree's nodes + 1)",
                       c->spec_topk);
    if (k->spec_draft_tokens - 1 > (uint64_t)k->spec_steps * c->spec_topk)
        return rh_fail(e, "--speculative-num-draft-tokens %u: a tree %u deep and %u wide holds at most %u drafts",
                       k->spec_draft_tokens, k->spec_steps, c->spec_topk, k->spec_steps * c->spec_topk);
    return 0;
}

/* vLLM's larger batch defaults (engine/arg_utils, get_batch_defaults, for
 * its OpenAI server): a GPU of 70 GiB or more that is not an A100 (its
 * PR #17885: the larger budget cost an A100 throughput). */
static bool vllm_big_gpu(const cost_memory *mem)
{
    char name[sizeof mem->gpu_name];
    size_t i = 0;
    for (; mem->gpu_name[i] && i + 1 < sizeof name; i++) name[i] = (char)tolower((unsigned char)mem->gpu_name[i]);
    name[i] = '\0';
    return mem->gpu_bytes >= 70 * 1073741824.0 && !strstr(name, "a100");
}

/* Without --chunked-prefill-size (--max-num-batched-tokens), the servers'
 * own default for the GPU: SGLang's by its memory (server_args: under
 * 35 GiB 2048, under 160 GiB 8192, else 16384), vLLM's max_num_batched_tokens
 * (8192 on a big GPU, else 2048). */
static void default_chunk(sim_config *c, const cost_memory *mem, sim_result *out)
{
    core_config *k = &c->core;
    if (c->chunk_set || k->chunked_prefill_size == -1) return;
    const double GiB = 1073741824.0;
    bool vllm = k->preset == CORE_PRESET_VLLM;
    if (vllm) k->chunked_prefill_size = vllm_big_gpu(mem) ? 8192 : 2048;
    else k->chunked_prefill_size = mem->gpu_bytes < 35 * GiB ? 2048 : mem->gpu_bytes < 160 * GiB ? 8192 : 16384;
    snprintf(out->defaults_how, sizeof out->defaults_how, "%s %d: %s's default for %s (%.0f GiB)",
             vllm ? "--max-num-batched-tokens" : "--chunked-prefill-size", k->chunked_prefill_size,
             vllm ? "vLLM" : "SGLang", mem->gpu_name, mem->gpu_bytes / GiB);
}

/* Without --max-running-requests, the servers' own default where the
 * deployment is known: SGLang's from the pool (model_runner: requests the
 * pool holds at the context length, times 512, within 2048..4096, and at
 * most half the pool's tokens, per attention group), vLLM's max_num_seqs
 * (1024 on a big GPU, else 256). Model-drafted speculation keeps SGLang's
 * 48 (spec_shape). */
static void default_max_running(sim_config *c, const cost_memory *mem)
{
    core_config *k = &c->core;
    if (c->max_running_set || (k->spec_steps && c->spec_draft_model)) return;
    if (k->preset == CORE_PRESET_VLLM) {
        k->max_running_requests = vllm_big_gpu(mem) ? 1024 : 256;
        return;
    }
    double groups = c->serving.dp > 1 ? c->serving.dp : 1, pool = (double)k->max_total_tokens / groups;
    double ctx = k->context_length ? k->context_length : mem->context_length ? mem->context_length : 4096;
    double reqs = fmax(fmin(pool / ctx * 512, 4096), 2048);
    reqs = fmin(reqs, floor(pool / 2));
    if (reqs >= 1) k->max_running_requests = (uint32_t)(reqs * groups);
}

static int size_deployment(sim_config *c, const cost_model *cost, sim_result *out, rh_err *e)
{
    cost_memory mem;
    if (!cost_memory_of_serving(cost, c->tp, &c->serving, &mem)) return 0;
    if (!c->core.context_length) c->core.context_length = mem.context_length;
    if (!(c->core.kv_bytes_per_token > 0)) c->core.kv_bytes_per_token = mem.kv_bytes_per_token;   /* --hicache-size */
    default_chunk(c, &mem, out);   /* first: the servers size their pools with it */
    if (c->core.max_total_tokens) {
        default_max_running(c, &mem);
        return 0;
    }
    sim_pool_opts o = {c->mem_fraction_static, c->gpu_memory_utilization,
                       c->core.spec_steps > 0 && c->spec_draft_model};
    sim_pool p;
    if (sim_pool_size(&mem, &c->core, &o, &p, e) < 0) return -1;
    c->core.max_total_tokens = p.tokens;
    snprintf(out->pool_how, sizeof out->pool_how, "%s", p.how);
    default_max_running(c, &mem);
    return 0;
}

int sim_prepare_server(sim_config *c, const cost_model *cost, sim_result *notes, rh_err *e)
{
    if (cost_check_tp(cost, c->tp, e) < 0 || sim_serving_resolve(c, cost, e) < 0) return -1;
    return spec_shape(c, notes, e) < 0 || size_deployment(c, cost, notes, e) < 0 ? -1 : 0;
}

int sim_pd_link(const char *name, double *Bps, double *latency_s)
{
    /* Achieved per-GPU bandwidths and per-call latencies of the h100-sxm
     * preset's "collectives", fitted to NCCL send/recv on a DGX H100
     * (sim/cost/presets/gpus/h100-sxm.json): NVLink inside a node, and a
     * 400 Gb/s InfiniBand NIC per GPU between nodes. "rdma" is RoCE on a
     * 200 Gb/s NIC per GPU: half of that bandwidth, the same latency. */
    if (!strcmp(name, "nvlink")) {
        *Bps = 361.8e9;
        *latency_s = 7.52e-6;
    } else if (!strcmp(name, "ib") || !strcmp(name, "infiniband")) {
        *Bps = 36.22e9;
        *latency_s = 7.52e-6 + 10.61e-6;
    } else if (!strcmp(name, "rdma") || !strcmp(name, "roce")) {
        *Bps = 18.11e9;
        *latency_s = 7.52e-6 + 10.61e-6;
    } else {
        return -1;
    }
    return 0;
}

/* A group's name in a message: its own, or the flag that made it. */
static const char *group_label(const sim_group *g, char *buf, size_t n)
{
    if (g->name && strchr(g->name, '[')) snprintf(buf, n, "%s", g->name);   /* a CLUSTER.json's "groups[i]" */
    else if (g->name && *g->name) snprintf(buf, n, "group %s", g->name);
    else if (g->role == SIM_ROLE_PREFILL) snprintf(buf, n, "--prefill-tp");
    else if (g->role == SIM_ROLE_DECODE) snprintf(buf, n, "--decode-tp");
    else buf[0] = 0;
    return buf;
}

/* Step 0 for every group: its knobs sized for its own cost model (its TP,
 * its KV pool from its GPUs' memory, as one server's is), the prefill
 * groups moved first (stable), and under PD the KV bytes a prompt token
 * moves per GPU of each prefill group. */
static int size_groups(const sim_group *in, uint32_t n, sim_group *g, double *kv_bytes, bool adapters,
                       sim_result *out, rh_err *e)
{
    if (!n) return rh_fail(e, "a cluster needs at least one group of replicas");
    uint32_t at = 0, whole = 0, prefill = 0, decode = 0;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < n; i++)
            if ((in[i].role == SIM_ROLE_PREFILL) == (pass == 0)) {
                g[at] = in[i];
                g[at++].cfg.trace_adapters = adapters;
            }
    for (uint32_t i = 0; i < n; i++) {
        whole += g[i].role == SIM_ROLE_BOTH;
        prefill += g[i].role == SIM_ROLE_PREFILL;
        decode += g[i].role == SIM_ROLE_DECODE;
    }
    if (whole && (prefill || decode))
        return rh_fail(e, "a cluster is whole servers or prefill and decode pools, not both");
    if (!whole && (!prefill || !decode))
        return rh_fail(e, "prefill-decode disaggregation needs a prefill and a decode group (has %u and %u)", prefill,
                       decode);
    for (uint32_t i = 0; i < n; i++) {
        sim_group *x = &g[i];
        char label[96];
        group_label(x, label, sizeof label);
        if (!x->count) return rh_fail(e, "%s%sa group needs at least one replica", label, *label ? ": " : "");
        if (!x->cost) return rh_fail(e, "%s%sno cost model", label, *label ? ": " : "");
        if (x->role != SIM_ROLE_BOTH && x->cfg.core.preset != CORE_PRESET_SGLANG)
            return rh_fail(e, "prefill-decode disaggregation runs the SGLang scheduler, not the vLLM one%s%s",
                           *label ? ": " : "", label);
        if (cost_check_tp(x->cost, x->cfg.tp, e) < 0 || sim_serving_resolve(&x->cfg, x->cost, e) < 0)
            return *label ? rh_prefix(e, "%s", label) : -1;
        if (spec_shape(&x->cfg, out, e) < 0 || size_deployment(&x->cfg, x->cost, out, e) < 0)
            return *label && x->name ? rh_prefix(e, "%s", label) : -1;
        kv_bytes[i] = 0;
        if (x->role != SIM_ROLE_PREFILL) continue;
        kv_bytes[i] = x->cfg.pd_kv_bytes_per_token;
        cost_memory mem;
        if (!(kv_bytes[i] > 0)) {
            if (!cost_memory_of(x->cost, x->cfg.tp, &mem) || !(mem.kv_bytes_per_token > 0))
                return rh_fail(e, "prefill-decode disaggregation: cost model %s does not know its model's KV bytes per "
                                  "token; give --pd-kv-bytes-per-token",
                               x->cost->path ? x->cost->path : "");
            kv_bytes[i] = mem.kv_bytes_per_token;
        }
    }
    return 0;
}

static bool trace_names_adapters(const tr_trace *t)
{
    for (size_t i = 0; i < t->n_requests; i++)
        if (t->requests[i].adapter) return true;
    return false;
}

int sim_run_groups(const sim_config *cfg, const sim_group *groups, uint32_t n_groups, const tr_trace *trace,
                   sim_result *out, rh_err *e)
{
    memset(out, 0, sizeof *out);
    if (cfg->rate_scale <= 0) return rh_fail(e, "--rate-scale must be > 0 (got %g)", cfg->rate_scale);
    sim_group *g = malloc((n_groups ? n_groups : 1) * sizeof *g);
    double *kv_bytes = calloc(n_groups ? n_groups : 1, sizeof *kv_bytes);
    int rc = -1;
    if (!g || !kv_bytes) {
        rh_fail(e, "out of memory");
    } else if (size_groups(groups, n_groups, g, kv_bytes, trace_names_adapters(trace), out, e) == 0) {
        double wall0 = rh_now();
        run r;
        rc = run_open(&r, cfg, g, kv_bytes, n_groups, trace, e) < 0 || run_loop(&r, e) < 0 || run_finish(&r, out, e) < 0
                 ? -1
                 : 0;
        run_close(&r);
        if (rc == 0) out->wall_s = rh_now() - wall0;
    }
    free(g);
    free(kv_bytes);
    if (rc < 0) sim_result_free(out);
    return rc;
}

int sim_run(const sim_config *cfg, const tr_trace *trace, const cost_model *cost, sim_result *out, rh_err *e)
{
    sim_group g[2] = {{.count = cfg->replicas ? cfg->replicas : 1, .role = SIM_ROLE_BOTH, .cfg = *cfg, .cost = cost}};
    uint32_t n = 1;
    if (cfg->pd_prefill) {
        g[1] = g[0];
        g[0].count = cfg->pd_prefill;
        g[0].role = SIM_ROLE_PREFILL;
        g[0].cfg.tp = cfg->pd_prefill_tp ? cfg->pd_prefill_tp : cfg->tp;
        g[1].role = SIM_ROLE_DECODE;
        g[1].cfg.tp = cfg->pd_decode_tp ? cfg->pd_decode_tp : cfg->tp;
        n = 2;
    }
    return sim_run_groups(cfg, g, n, trace, out, e);
}

static void series_free(sim_series *s)
{
    free(s->t);
    free(s->batch_size);
    free(s->prefill_tokens);
    free(s->decode_tokens);
    free(s->kv_use);
    free(s->waiting);
    free(s->running);
}

void sim_result_free(sim_result *r)
{
    series_free(&r->series);
    for (uint32_t k = 0; r->replicas && k < r->n_replicas; k++) series_free(&r->replicas[k].series);
    free(r->replicas);
    free(r->requests);
    memset(r, 0, sizeof *r);
}
