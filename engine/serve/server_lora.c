/* server_lora.c — LoRA adapters over HTTP: SGLang's /load_lora_adapter and
 * /unload_lora_adapter (vLLM's /v1/ spellings too) asked by an HTTP thread
 * and done by the scheduler between batches (the engine's registry is the
 * scheduler's alone), the adapter a request names resolved when it is
 * admitted, and the list /v1/models and /metrics read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/serve/server_impl.h"

bool sv_lora_waiting(const server *s)
{
    return s->lora_asked != s->lora_answered && !engine_in_flight(s->g);
}

/* The counts come from the live jobs: a choice in the engine that has been
 * admitted runs, one not yet admitted waits (vLLM's running and waiting). */
void sv_lora_publish(server *s)
{
    uint32_t n = engine_lora_count(s->g);
    sv_lora_entry *list = n ? calloc(n, sizeof *list) : NULL;
    if (n && !list) return;   /* out of memory: the last list stays */
    for (uint32_t i = 0; i < n; i++) {
        const char *path;
        const char *name = engine_lora_name(s->g, i, &path, NULL, NULL);
        snprintf(list[i].name, sizeof list[i].name, "%s", name);
        snprintf(list[i].path, sizeof list[i].path, "%s", path);
        list[i].total = engine_lora_total(s->g, i);
    }
    for (sv_job *j = s->live; j && n; j = j->live_next) {
        if (!j->req.adapter[0]) continue;
        uint32_t k = 0;
        while (k < n && strcmp(list[k].name, j->req.adapter)) k++;
        if (k == n) continue;
        for (uint32_t c = 0; c < j->n_choices; c++) {
            const sv_choice *ch = &j->choices[c];
            if (!ch->in_engine || ch->ended) continue;
            if (ch->admitted_at > 0) list[k].running++;
            else list[k].waiting++;
        }
    }
    const char **names = n ? malloc(n * sizeof *names) : NULL;
    uint32_t *run = n ? malloc(n * sizeof *run) : NULL, *wait = n ? malloc(n * sizeof *wait) : NULL;
    uint64_t *total = n ? malloc(n * sizeof *total) : NULL;
    if (!n || (names && run && wait && total)) {
        for (uint32_t i = 0; i < n; i++)
            names[i] = list[i].name, run[i] = list[i].running, wait[i] = list[i].waiting, total[i] = list[i].total;
        const core_config *k = core_get_config(engine_core(s->g));
        prom_lora(s->prom, n || k->enable_lora ? k->max_loras_per_batch : 0, names, run, wait, total, n);
    }
    free(names), free(run), free(wait), free(total);
    pthread_mutex_lock(&s->mu);
    free(s->lora_list);
    s->lora_list = list;
    s->n_lora_list = n;
    pthread_mutex_unlock(&s->mu);
}

void sv_lora_serve(server *s)
{
    pthread_mutex_lock(&s->mu);
    if (!sv_lora_waiting(s)) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    sv_lora_op op = s->lora_op;
    pthread_mutex_unlock(&s->mu);
    rh_err e = {{0}};
    int rc;
    if (atomic_load(&s->broken)) rc = rh_fail(&e, "the engine failed and this server no longer serves");
    else if (op.load) rc = engine_lora_add(s->g, op.name, op.path, &e) < 0 ? -1 : 0;
    else rc = engine_lora_remove(s->g, op.name, &e);
    if (rc == 0) sv_lora_publish(s);
    pthread_mutex_lock(&s->mu);
    s->lora_op.status = rc == 0 ? 200 : !op.load && strstr(e.msg, "not served") ? 404 : 400;
    snprintf(s->lora_op.message, sizeof s->lora_op.message, "%.590s", rc == 0 ? "" : e.msg);
    s->lora_answered = s->lora_asked;
    pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
}

int sv_lora_op_ask(server *s, bool load, const char *name, const char *path, oa_error *e)
{
    pthread_mutex_lock(&s->lora_mu);
    pthread_mutex_lock(&s->mu);
    s->lora_op = (sv_lora_op){.load = load};
    snprintf(s->lora_op.name, sizeof s->lora_op.name, "%s", name);
    snprintf(s->lora_op.path, sizeof s->lora_op.path, "%s", path ? path : "");
    uint64_t mine = ++s->lora_asked;
    pthread_cond_signal(&s->wake);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;   /* a large adapter read from disk */
    int w = 0;
    while (s->lora_answered < mine && w == 0) w = pthread_cond_timedwait(&s->idle_cv, &s->mu, &until);
    int rc = 0;
    if (s->lora_answered < mine) {
        s->lora_answered = s->lora_asked;   /* given up: the scheduler does not do it later */
        rc = oa_fail(e, 503, NULL, "timeout", "the scheduler did not answer within 60 s");
    } else if (s->lora_op.status != 200) {
        rc = oa_fail(e, s->lora_op.status, "lora_name", s->lora_op.status == 404 ? "model_not_found" : "invalid_value",
                     "%s", s->lora_op.message);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&s->lora_mu);
    return rc;
}

uint32_t sv_lora_resolve(server *s, const char *name, oa_error *e)
{
    uint32_t id = engine_lora_find(s->g, name);
    if (!id)
        oa_fail(e, 404, "model", "model_not_found",
                "the model '%.200s' does not exist (this server serves '%.200s' and %u LoRA adapters; "
                "load one with /load_lora_adapter)", name, s->model_name, engine_lora_count(s->g));
    return id;
}
