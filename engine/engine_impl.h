/* engine_impl.h — the engine's private state, shared by engine.c (lifecycle,
 * requests, events) and engine_step.c (one batch). Never include elsewhere. */
#ifndef RH_ENGINE_IMPL_H
#define RH_ENGINE_IMPL_H

#include "engine/engine.h"

/* One live request. toks holds the prompt, then the outputs as they are
 * committed; a decode's drafts are written just past the committed tokens,
 * where verification overwrites them with the tokens actually drawn. */
/* One LoRA adapter served (engine_lora.c). */
typedef struct eadapter {
    uint32_t id;                /* engine_request.adapter; 0: the slot is free */
    char name[128];
    char path[512];
    struct model_lora *host;    /* the weights read from the folder */
    runner_lora *dev;           /* the copy in a GPU slot, or NULL */
    uint32_t requests;          /* queued or running */
    uint64_t total;             /* requests added under it so far */
} eadapter;

typedef struct ereq {
    uint64_t id;
    void *user;
    int32_t *toks;              /* [prompt_len + max_tokens] */
    uint32_t prompt_len, max_tokens;
    uint32_t n_out;             /* committed outputs */
    uint32_t adapter;           /* LoRA adapter id, 0: the base */
    kern_sampling sampling;
    uint64_t rng;
    uint64_t seed;              /* the request's own (a priced forward's tokens come from it) */
    int32_t eos;                /* -1: none (ignore_eos or the model has none) */
    int32_t *stop;
    uint32_t n_stop;
    void *draft_state;          /* the drafter's per-request pointer (spec_draft.state) */
    logit_rules rules;          /* bias arrays owned */
    int32_t *masked;            /* what min_tokens masks: EOS (unless ignored) and the stop ids */
    uint32_t n_masked;
    bool logprobs, prompt_logprobs, prompt_sent;
    uint32_t top_n;
    float *lp;                  /* this step's logprob per sampled row, [cap_lp] */
    logprob_entry *lp_top;      /* [cap_lp * top_n] */
    uint32_t cap_lp;
    float *plp;                 /* prompt logprobs, [prompt_len] (prompt_logprobs) */
    logprob_entry *plp_top;     /* [prompt_len * top_n] */
    struct ereq *prev, *next;   /* every live request, for engine_free */
} ereq;

struct engine {
    engine_config cfg;          /* hooks, clock, drafter as given */
    model *owned;               /* the model when the engine loaded it */
    const model *m;
    runner *run;                /* rank 0's, owned by tp when tensor parallel */
    tp_group *tp;
    core *c;
    double t0;                  /* default clock origin */
    char hardware[160];
    char weights[512];          /* where the weights came from, for headers */

    ereq *live;                 /* list of live requests */
    runner_seq *seqs;           /* per batch sequence, [max_running_requests + 1] */
    core_seq_result *results;
    uint32_t cap_seqs;

    bool in_step;               /* a batch is in flight (begin .. end): aborts wait */
    bool in_hooks;              /* inside core_schedule or core_complete: adds are refused */
    core_batch batch;           /* the batch in flight */
    double done_at;             /* clock when engine_step_run finished */
    double priced_end;          /* a priced step's scheduled end (engine_pricer), 0: none yet */
    double priced_start, priced_dt;   /* the step in flight as priced: what its record says */
    uint64_t *pending_aborts;
    uint32_t n_pending, cap_pending;
    double sched_time;          /* CPU seconds forming and preparing the batch in flight */

    /* speculative decoding (engine_step.c) */
    spec_drafter *spec;         /* the drafter built from cfg.spec, when no caller's is given */
    const spec_seam *drafter;      /* the one in use, or NULL */
    spec_draft *drafts;       /* this step's drafting requests, [cap_seqs] */
    uint32_t *draft_of;         /* per batch sequence: its index in drafts, or UINT32_MAX */
    uint32_t n_drafts;
    float *probs;               /* target probability rows for verifying sampled drafts */
    size_t cap_probs;
    kern_cand *cand;            /* [vocab] scratch of spec_probs */
    uint32_t *counts;           /* [vocab] zeroed scratch of logit_rules_apply */
    float *work;                /* rows with a request's logit rules applied */
    size_t cap_work;
    engine_spec_stats spec_stats;

    /* LoRA (engine_lora.c) */
    eadapter *adapters;
    uint32_t n_adapters, cap_adapters;
    uint32_t next_adapter_id;
};

/* engine_lora.c */
eadapter *engine_adapter(engine *g, uint32_t id);      /* NULL: unknown */
int engine_lora_start(engine *g, rh_err *e);            /* --lora-paths, at engine_new */
/* Before a forward: a backend copy for each adapter of the batch; after
 * the core's evictions, the copies of adapters no longer in a slot freed. */
int engine_lora_prepare(engine *g, const core_batch *b, rh_err *e);
void engine_lora_free_all(engine *g);

/* engine.c: the core's hooks, turned into the engine's. */
void engine_core_on_event(void *ctx, const core_event *ev);
void engine_core_on_step(void *ctx, const tr_step *st);
void engine_core_on_message(void *ctx, const char *msg);
/* Applies aborts requested from hooks. */
void engine_apply_aborts(engine *g);

#endif
