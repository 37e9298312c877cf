/* sglang_info.c — SGLang's information endpoints, from what the server
 * knows: /get_server_info (the server's arguments under SGLang's names, the
 * KV pool and, in internal_states, the speculative accept length that
 * sglang.bench_serving reads) and /get_model_info. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/server_impl.h"
#include "engine/serve/sglang_api.h"

/* A knob's value as JSON: a number or a boolean when it reads as one. */
static json_t *knob_value(const char *v)
{
    if (!strcmp(v, "true")) return json_true();
    if (!strcmp(v, "false")) return json_false();
    char *end;
    long long i = strtoll(v, &end, 10);
    if (*v && !*end) return json_integer(i);
    double d = strtod(v, &end);
    if (*v && !*end) return json_real(d);
    return json_string(v);
}

static void put_knob(void *ctx, const char *name, const char *value)
{
    char key[96];
    snprintf(key, sizeof key, "%s", name);
    for (char *p = key; *p; p++)
        if (*p == '-') *p = '_';   /* --chunked-prefill-size is chunked_prefill_size in SGLang's ServerArgs */
    json_object_set_new(ctx, key, knob_value(value));
}

char *sv_server_info(server *s, size_t *len)
{
    json_t *o = json_object();
    if (!o) return NULL;
    core_config_foreach(core_get_config(engine_core(s->g)), put_knob, o);
    pthread_mutex_lock(&s->mu);
    engine_spec_stats sp = s->spec_pub;
    core_stats st = s->stats;
    pthread_mutex_unlock(&s->mu);
    json_object_set_new(o, "model_path", json_string(s->model_name));
    json_object_set_new(o, "served_model_name", json_string(s->model_name));
    json_object_set_new(o, "tokenizer_path", json_string(s->tok_kind));
    json_object_set_new(o, "tp_size", json_integer(s->cfg.engine.tp.tp_size ? s->cfg.engine.tp.tp_size : 1));
    json_object_set_new(o, "port", json_integer(s->port));
    json_object_set_new(o, "max_total_num_tokens", json_integer((json_int_t)s->pool_tokens));
    json_object_set_new(o, "context_length", json_integer(s->lim.context));
    json_object_set_new(o, "version", json_string("rehearse"));
    json_t *state = json_pack("{s:f,s:I,s:I}", "avg_spec_accept_length", sp.verifies ? sp.mean_accepted_len : 1.0,
                              "num_running_reqs", (json_int_t)st.running, "num_queue_reqs", (json_int_t)st.waiting);
    json_object_set_new(o, "internal_states", json_pack("[o]", state));
    char *body = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    if (body && len) *len = strlen(body);
    return body;
}

char *sv_model_info(server *s, size_t *len)
{
    json_t *o = json_pack("{s:s,s:s,s:b,s:n,s:s,s:b,s:b}", "model_path", s->model_name, "tokenizer_path", s->tok_kind,
                          "is_generation", 1, "preferred_sampling_params", "weight_version", "default",
                          "has_image_understanding", 0, "has_audio_understanding", 0);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (body && len) *len = strlen(body);
    return body;
}
