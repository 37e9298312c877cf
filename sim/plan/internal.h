/* internal.h — what the plan's files share (space.c, bound.c, eval.c, plan.c). */
#ifndef RH_SIM_PLAN_INTERNAL_H
#define RH_SIM_PLAN_INTERNAL_H

#include <jansson.h>

#include "sim/plan/plan.h"

/* A candidate's knobs by their `rehearse sim` names. */
typedef struct plan_knobs {
    const char *kv[12][2];
    char val[12][48];
    int n;
} plan_knobs;

/* Every candidate of the space, in its lists' order. */
int plan_enumerate(const plan_space *sp, plan_cand **out, uint32_t *n, rh_err *e);
int plan_cand_knobs(const plan_space *sp, const plan_cand *c, plan_knobs *k);
/* base with the candidate's knobs over it. */
int plan_cand_config(const plan_space *sp, const plan_cand *c, const sim_config *base, sim_config *cfg, rh_err *e);

/* What the trace asks of a deployment, for the capacity bound. */
typedef struct plan_demand {
    double prompt_tps;       /* prompt tokens a second no cache can save (each block's first sight) */
    double output_tps;       /* output tokens a second */
    double decode_context;   /* the output-weighted mean prompt length: no decode step sees less */
} plan_demand;

void plan_demand_of(const tr_trace *t, double rate_scale, plan_demand *d);
/* Refuses (c->state, the message in e) a candidate whose weights leave no KV
 * pool, else sets c->pool_tokens and the bound's c->load; 0 either way, -1
 * on a cost model that cannot price the candidate. */
int plan_bound(const plan_space *sp, const plan_opts *o, const plan_demand *d, plan_cand *c, rh_err *e);

/* One candidate's simulation on the first n requests of t at rate_scale. */
int plan_simulate(const plan_space *sp, const plan_opts *o, const plan_cand *c, const tr_trace *t, uint32_t n,
                  double rate_scale, plan_eval *ev, rh_err *e);

/* One evaluation the search asks for: a candidate on the first `requests`
 * requests at rate_scale. */
typedef struct plan_job {
    uint32_t cand, requests;
    double rate_scale;
    plan_eval ev;
} plan_job;

/* An evaluation's key, the same wherever it runs: "NAME|REQUESTS|RATE". */
void plan_eval_key(const plan_space *sp, const plan_cand *c, uint32_t requests, double rate_scale, char *buf,
                   size_t n);
/* The evaluation as one JSON line (no newline) of evals.jsonl: malloc'd,
 * NULL out of memory. */
char *plan_eval_line(const char *key, const plan_eval *v);
/* One such line read back; NULL key when it is not one. */
const char *plan_eval_parse(json_t *o, plan_eval *v);
/* The trace without the requests no deployment of the model can serve
 * (view->requests malloc'd; dropped counts the rest); -1 when none is left. */
int plan_servable(const plan_opts *o, const plan_space *sp, const tr_trace *t, tr_trace *view, uint32_t *dropped,
                  rh_err *e);

/* Jobs (jobs.c): the evaluations a search needs and DIR lacks, written as
 * DIR/jobs/round-K.tsv (candidate, requests, rate scale, key a line); K
 * the first round not yet written. */
int plan_jobs_write(const char *dir, const plan_space *sp, const plan_cand *c, const plan_job *jobs,
                    const uint32_t *todo, uint32_t n, uint32_t *round, rh_err *e);

#endif
