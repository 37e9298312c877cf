/* result.c — see result.h. */
#include "sim/result.h"

static json_t *column(const double *v, uint32_t n)
{
    json_t *a = json_array();
    for (uint32_t i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

static json_t *series_json(const sim_series *q)
{
    json_t *s = json_object();
    json_object_set_new(s, "t", column(q->t, q->n));
    json_object_set_new(s, "batch_size", column(q->batch_size, q->n));
    json_object_set_new(s, "prefill_tokens", column(q->prefill_tokens, q->n));
    json_object_set_new(s, "decode_tokens", column(q->decode_tokens, q->n));
    json_object_set_new(s, "kv_use", column(q->kv_use, q->n));
    json_object_set_new(s, "waiting", column(q->waiting, q->n));
    json_object_set_new(s, "running", column(q->running, q->n));
    return s;
}

json_t *sim_replicas_to_json(const sim_result *r)
{
    json_t *a = json_array();
    for (uint32_t k = 0; k < r->n_replicas; k++) {
        const sim_replica_result *x = &r->replicas[k];
        json_t *m = metrics_to_json(&x->summary);
        json_object_set_new(m, "replica", json_integer(k));
        json_object_set_new(m, "routed", json_integer((json_int_t)x->routed));
        json_object_set_new(m, "steps", json_integer((json_int_t)x->steps));
        json_object_set_new(m, "busy_s", json_real(x->busy_s));
        json_object_set_new(m, "gpus", json_integer(x->gpus));
        if (x->group_name && *x->group_name) json_object_set_new(m, "group", json_string(x->group_name));
        json_array_append_new(a, m);
    }
    return a;
}

json_t *sim_result_to_json(const sim_result *r, int with_requests)
{
    json_t *o = json_object();
    json_object_set_new(o, "metrics", metrics_to_json(&r->summary));
    json_object_set_new(o, "series", series_json(&r->series));
    if (r->router_errors) json_object_set_new(o, "router_errors", json_integer((json_int_t)r->router_errors));
    if (r->router_trips) json_object_set_new(o, "router_breaker_trips", json_integer((json_int_t)r->router_trips));
    if (r->n_replicas) {
        json_t *reps = sim_replicas_to_json(r);
        for (uint32_t k = 0; k < r->n_replicas; k++)
            json_object_set_new(json_array_get(reps, k), "series", series_json(&r->replicas[k].series));
        json_object_set_new(o, "replicas", reps);
        json_object_set_new(o, "imbalance_requests", json_real(r->imbalance_requests));
        json_object_set_new(o, "imbalance_busy", json_real(r->imbalance_busy));
    }
    json_object_set_new(o, "gpus", json_integer(r->gpus));
    json_object_set_new(o, "pool_tokens", json_integer((json_int_t)r->pool_tokens));
    json_object_set_new(o, "request_goodput_per_gpu", json_real(r->gpus ? r->summary.request_goodput / r->gpus : 0));
    if (r->pd_prefill) {
        json_object_set_new(o, "prefill_replicas", json_integer(r->pd_prefill));
        json_object_set_new(o, "mean_kv_transfer_ms", json_real(1e3 * r->kv_transfer_mean_s));
    }
    if (with_requests) {
        json_t *id = json_array(), *send = json_array(), *ttft = json_array(), *e2e = json_array();
        json_t *in = json_array(), *out = json_array(), *cached = json_array(), *retr = json_array();
        json_t *which = json_array();
        for (uint64_t i = 0; i < r->n_requests; i++) {
            const sim_request_result *x = &r->requests[i];
            json_array_append_new(id, json_integer((json_int_t)x->id));
            json_array_append_new(send, json_real(x->send));
            json_array_append_new(ttft, json_real(x->ttft));
            json_array_append_new(e2e, json_real(x->e2e));
            json_array_append_new(in, json_integer(x->input_len));
            json_array_append_new(out, json_integer(x->output_len));
            json_array_append_new(cached, json_integer(x->cached_tokens));
            json_array_append_new(retr, json_integer(x->retractions));
            json_array_append_new(which, json_integer(x->replica));
        }
        json_t *rq = json_object();
        json_object_set_new(rq, "id", id);
        json_object_set_new(rq, "send", send);
        json_object_set_new(rq, "ttft", ttft);
        json_object_set_new(rq, "e2e", e2e);
        json_object_set_new(rq, "input_len", in);
        json_object_set_new(rq, "output_len", out);
        json_object_set_new(rq, "cached_tokens", cached);
        json_object_set_new(rq, "retractions", retr);
        if (r->n_replicas) json_object_set_new(rq, "replica", which);
        else json_decref(which);
        json_object_set_new(o, "requests", rq);
    }
    json_object_set_new(o, "wall_s", json_real(r->wall_s));
    return o;
}
