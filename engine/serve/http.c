/* http.c — libmicrohttpd glue: routes, limits, authentication, the OpenAI
 * endpoints, and the reader that streams a job's events.
 *
 * A completion request goes: headers (route, key, Content-Length checked at
 * once) -> body (capped) -> parse and tokenize on this HTTP thread -> job
 * handed to the scheduler with the connection suspended. When resumed: a
 * refusal is answered with its status; a stream gets its 200 headers and a
 * reader that writes events as deliveries arrive, suspending the connection
 * whenever it has nothing to send; a plain request is answered once done. */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "engine/serve/server_impl.h"
#include "engine/serve/mhd_conn.h"
#include "engine/serve/sglang_api.h"
#include "engine/serve/tools_api.h"
#include "util/conn_guard.h"
#include "util/progress.h"
#include "util/upload.h"

#define STREAM_BLOCK (16u << 10)

enum route {
    R_COMPLETIONS = 1, R_CHAT, R_GENERATE, R_SERVER_INFO, R_MODEL_INFO, R_FLUSH, R_MODELS, R_MODEL, R_HEALTH, R_METRICS,
    R_HEALTH_GENERATE, R_VERSION, R_TOKENIZE, R_DETOKENIZE, R_ABORT, R_LORA_LOAD, R_LORA_UNLOAD, R_V1_LORA_LOAD,
    R_V1_LORA_UNLOAD, R_NOT_FOUND, R_BAD_METHOD
};

/* One HTTP request, from its first call to its completion. */
typedef struct hreq {
    int route;
    rh_upload up;       /* the body */
    sv_job *job;
} hreq;

/* ---- answers ---- */
static enum MHD_Result send_owned(struct MHD_Connection *c, unsigned status, const char *type, char *buf, size_t n)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(n, buf, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(buf);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_copy(struct MHD_Connection *c, unsigned status, const char *type, const char *s)
{
    char *b = strdup(s);
    return b ? send_owned(c, status, type, b, strlen(b)) : MHD_NO;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const oa_error *e)
{
    size_t n;
    char *body = oa_error_json(e, &n);
    if (!body) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (e->status == 405) MHD_add_response_header(r, "Allow", "POST");
    if (e->status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    /* Too many connections, or shutting down: the connection goes, so a
     * refused client does not keep holding the slot it was refused for. */
    if (e->status == 503) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)e->status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *param, const char *code, const char *msg)
{
    oa_error e;
    oa_fail(&e, status, param, code, "%s", msg);
    return send_error(c, &e);
}

/* ---- routes ---- */
static int route_of(const char *url, const char *method)
{
    static const struct {
        const char *path, *method;
        int route;
    } routes[] = {{"/v1/completions", "POST", R_COMPLETIONS}, {"/v1/chat/completions", "POST", R_CHAT},
                  {"/v1/models", "GET", R_MODELS},           {"/health", "GET", R_HEALTH},
                  {"/metrics", "GET", R_METRICS},            {"/generate", "POST", R_GENERATE},
                  {"/get_server_info", "GET", R_SERVER_INFO}, {"/server_info", "GET", R_SERVER_INFO},
                  {"/get_model_info", "GET", R_MODEL_INFO},  {"/model_info", "GET", R_MODEL_INFO},
                  {"/flush_cache", "POST", R_FLUSH},        {"/flush_cache", "GET", R_FLUSH},
                  {"/health_generate", "GET", R_HEALTH_GENERATE}, {"/version", "GET", R_VERSION},
                  {"/tokenize", "POST", R_TOKENIZE},         {"/detokenize", "POST", R_DETOKENIZE},
                  {"/abort_request", "POST", R_ABORT},
                  {"/load_lora_adapter", "POST", R_LORA_LOAD},  {"/unload_lora_adapter", "POST", R_LORA_UNLOAD},
                  {"/v1/load_lora_adapter", "POST", R_V1_LORA_LOAD},
                  {"/v1/unload_lora_adapter", "POST", R_V1_LORA_UNLOAD}};
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path)) continue;
        path_known = true;
        if (!strcmp(method, routes[i].method)) return routes[i].route;
    }
    if (path_known) return R_BAD_METHOD;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) return strcmp(method, "GET") ? R_BAD_METHOD : R_MODEL;
    return R_NOT_FOUND;
}

/* Compares every byte whatever matches, so the time taken says nothing
 * about the key. */
static bool key_ok(const char *given, const char *key)
{
    size_t n = strlen(key), m = given ? strlen(given) : 0;
    unsigned diff = (unsigned)(n != m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < m ? given[i] : 0);
    return diff == 0;
}

static bool authorized(const server *s, struct MHD_Connection *c)
{
    if (!s->cfg.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    return key_ok(h, s->cfg.api_key);
}

/* ---- plain endpoints ---- */
static json_t *model_value(const server *s)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:I,s:I}", "id", s->model_name, "object", "model", "created", (json_int_t)0,
                     "owned_by", "rehearse", "max_model_len", (json_int_t)s->lim.context, "vocab_size",
                     (json_int_t)s->lim.vocab);
}

/* GET /v1/models/{id}: the served model, or 404 naming the one asked for
 * (ids with a '/', as Hugging Face names go, are the rest of the path). */
static enum MHD_Result one_model(server *s, struct MHD_Connection *c, const char *url)
{
    const char *id = url + strlen("/v1/models/");
    if (strcmp(id, s->model_name)) {
        oa_error e;
        oa_fail(&e, 404, "model", "model_not_found", "the model '%.200s' does not exist (this server serves '%.200s')",
                id, s->model_name);
        return send_error(c, &e);
    }
    json_t *o = model_value(s);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body) return MHD_NO;
    return send_owned(c, 200, "application/json", body, strlen(body));
}

/* The base, then each LoRA adapter as vLLM lists them: its name, the folder
 * it came from (root) and the base it applies to (parent). */
static enum MHD_Result models(server *s, struct MHD_Connection *c)
{
    json_t *data = json_array(), *base = model_value(s);
    if (base) json_object_set_new(base, "root", json_string(s->model_name)), json_object_set_new(base, "parent", json_null());
    json_array_append_new(data, base);
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < s->n_lora_list; i++)
        json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:I}", "id", s->lora_list[i].name, "object",
                                              "model", "created", (json_int_t)0, "owned_by", "rehearse", "root",
                                              s->lora_list[i].path, "parent", s->model_name, "max_model_len",
                                              (json_int_t)s->lim.context));
    pthread_mutex_unlock(&s->mu);
    json_t *o = json_pack("{s:s,s:o}", "object", "list", "data", data);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body) return MHD_NO;
    return send_owned(c, 200, "application/json", body, strlen(body));
}

static enum MHD_Result health(server *s, struct MHD_Connection *c)
{
    if (atomic_load(&s->broken)) return fail(c, 503, NULL, "engine_failed", "the engine failed");
    if (atomic_load(&s->draining)) return fail(c, 503, NULL, "server_shutdown", "the server is shutting down");
    return send_copy(c, 200, "application/json", "{\"status\":\"ok\"}");
}

static enum MHD_Result info(server *s, struct MHD_Connection *c, int route)
{
    size_t n;
    char *body = route == R_SERVER_INFO ? sv_server_info(s, &n) : sv_model_info(s, &n);
    return body ? send_owned(c, 200, "application/json", body, n) : MHD_NO;
}

/* SGLang's /flush_cache: 200 when the prefix cache was emptied, 400 when
 * requests were queued or running (nothing is done then). */
static enum MHD_Result flush_cache(server *s, struct MHD_Connection *c)
{
    int64_t r = sv_flush_cache(s);
    if (r == -2) return fail(c, 503, NULL, "timeout", "the scheduler did not answer in time");
    if (r < 0)
        return fail(c, 400, NULL, "busy", "requests are queued or running: the cache was not flushed (as SGLang, "
                                          "only an idle server flushes)");
    char msg[160];
    snprintf(msg, sizeof msg, "Cache flushed: %lld pages freed.\n", (long long)r);
    return send_copy(c, 200, "text/plain", msg);
}

static enum MHD_Result metrics(server *s, struct MHD_Connection *c)
{
    size_t n;
    char *text = prom_render(s->prom, &n);
    if (!text) return MHD_NO;
    return send_owned(c, 200, "text/plain; version=0.0.4; charset=utf-8", text, n);
}

/* /version, /tokenize, /detokenize: an answer or the error that says why. */
static enum MHD_Result tool(server *s, struct MHD_Connection *c, hreq *h)
{
    size_t n = 0;
    oa_error e = {0};
    const char *body = h->up.body ? h->up.body : "";
    char *out = h->route == R_VERSION    ? ta_version(&n)
              : h->route == R_TOKENIZE   ? ta_tokenize(body, h->up.n, &s->lim, &n, &e)
                                         : ta_detokenize(body, h->up.n, &s->lim, &n, &e);
    if (!out) return e.status ? send_error(c, &e) : MHD_NO;
    return send_owned(c, 200, "application/json", out, n);
}

/* SGLang's /abort_request: the request named by its rid (the id its answer
 * carries), or all of them; each answers with finish reason abort. */
static enum MHD_Result abort_request(server *s, struct MHD_Connection *c, hreq *h)
{
    char rid[sizeof ((sv_job *)0)->id];
    bool all = false;
    oa_error e = {0};
    if (ta_parse_abort(h->up.body, h->up.n, rid, sizeof rid, &all, &e) < 0) return send_error(c, &e);
    char msg[64];
    snprintf(msg, sizeof msg, "{\"aborted\":%u}", sv_abort_request(s, rid, all));
    return send_copy(c, 200, "application/json", msg);
}

/* /load_lora_adapter {"lora_name", "lora_path"} and /unload_lora_adapter
 * {"lora_name"}: SGLang's answer (success, error_message, loaded_adapters)
 * on its paths, vLLM's plain text and error JSON on the /v1/ ones. */
static enum MHD_Result lora_adapter(server *s, struct MHD_Connection *c, hreq *h)
{
    bool load = h->route == R_LORA_LOAD || h->route == R_V1_LORA_LOAD;
    bool vllm = h->route == R_V1_LORA_LOAD || h->route == R_V1_LORA_UNLOAD;
    oa_error e = {0};
    json_error_t je;
    json_t *root = json_loadb(h->up.body ? h->up.body : "", h->up.n, 0, &je);
    char name[128] = "";
    const char *got = root ? json_string_value(json_object_get(root, "lora_name")) : NULL;
    const char *path = root ? json_string_value(json_object_get(root, "lora_path")) : NULL;
    if (got && strlen(got) < sizeof name) snprintf(name, sizeof name, "%s", got);
    if (!root || !json_is_object(root)) oa_fail(&e, 400, NULL, "invalid_json", "the body must be a JSON object");
    else if (!*name) oa_fail(&e, 400, "lora_name", "missing_required_parameter", "'lora_name' is required (a name under 128 bytes)");
    else if (load && (!path || !*path))
        oa_fail(&e, 400, "lora_path", "missing_required_parameter", "'lora_path' is required");
    else sv_lora_op_ask(s, load, name, path, &e);
    json_decref(root);
    if (vllm) {
        if (e.status) return send_error(c, &e);
        char msg[300];
        snprintf(msg, sizeof msg, "Success: LoRA adapter '%.200s' %s successfully", name, load ? "added" : "removed");
        return send_copy(c, 200, "text/plain", msg);
    }
    json_t *loaded = json_object();
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < s->n_lora_list; i++)
        json_object_set_new(loaded, s->lora_list[i].name, json_string(s->lora_list[i].path));
    pthread_mutex_unlock(&s->mu);
    json_t *o = json_pack("{s:n,s:b,s:s,s:o}", "rid", "success", !e.status, "error_message", e.status ? e.message : "",
                          "loaded_adapters", loaded);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body) return MHD_NO;
    return send_owned(c, e.status ? (unsigned)e.status : 200, "application/json", body, strlen(body));
}

static enum MHD_Result start_completion(server *s, struct MHD_Connection *c, hreq *h);

/* SGLang's /health_generate: healthy when the engine generates a token now.
 * One /generate of one token from token 0 goes through the queue like any
 * request; its answer (or its refusal: 503 while broken or draining) is
 * the health check's. */
static enum MHD_Result health_generate(server *s, struct MHD_Connection *c, hreq *h)
{
    static const char probe[] = "{\"input_ids\":[0],\"sampling_params\":{\"max_new_tokens\":1,\"ignore_eos\":true}}";
    free(h->up.body);
    if (!(h->up.body = strdup(probe))) return MHD_NO;
    h->up.n = sizeof probe - 1;
    h->route = R_GENERATE;
    return start_completion(s, c, h);
}

/* ---- completions ---- */
static enum MHD_Result start_completion(server *s, struct MHD_Connection *c, hreq *h)
{
    double arrival = sv_clock(s);
    oa_request req;
    oa_error err = {0};
    const char *body = h->up.body ? h->up.body : "";
    int rc = h->route == R_GENERATE ? sg_parse_generate(body, h->up.n, &s->lim, &req, &err)
                                    : oa_parse(h->route == R_CHAT ? OA_CHAT : OA_COMPLETIONS, body, h->up.n, &s->lim, &req, &err);
    free(h->up.body);
    h->up.body = NULL;
    if (rc < 0) return send_error(c, &err);
    for (uint32_t i = 0; i < req.n_prompts; i++)
        if ((uint64_t)req.prompts[i].n + req.max_tokens > s->pool_tokens) {
            oa_fail(&err, 400, req.kind == OA_CHAT ? "messages" : req.kind == OA_GENERATE ? "text" : "prompt",
                    "context_length_exceeded",
                    "%u prompt + %u completion tokens need more KV cache than this server has (%llu tokens)",
                    req.prompts[i].n, req.max_tokens, (unsigned long long)s->pool_tokens);
            oa_request_free(&req);
            return send_error(c, &err);
        }
    sv_job *j = sv_job_new(s, &req, arrival);
    if (!j) {
        oa_request_free(&req);
        return fail(c, 500, NULL, NULL, "out of memory");
    }
    if (sv_submit(s, j, c, &err) < 0) {
        sv_job_unref(j);
        return send_error(c, &err);
    }
    h->job = j;
    return MHD_YES;
}

static int wput(sv_job *j, const char *p, size_t n)
{
    if (j->wn + n > j->wcap) {
        size_t cap = j->wcap ? j->wcap : 4096;
        while (cap < j->wn + n) cap *= 2;
        char *b = realloc(j->wbuf, cap);
        if (!b) return -1;
        j->wbuf = b;
        j->wcap = cap;
    }
    memcpy(j->wbuf + j->wn, p, n);
    j->wn += n;
    return 0;
}

static int wput_owned(sv_job *j, char *p, size_t n)
{
    int rc = p ? wput(j, p, n) : -1;
    free(p);
    return rc;
}

/* Deliveries to events. A choice that ended by abort or error has no
 * finish chunk: the stream ends with the job's error event instead. */
/* The logprobs' context of a choice: its tokenizer, its text offset and,
 * with echo, its prompt's scores. */
static void with_logprobs(sv_job *j, uint32_t i, bool prompt, oa_choice_out *c)
{
    const sv_choice *ch = &j->choices[i];
    c->tok = j->req.tokens_as_ids ? NULL : j->srv->tok;
    c->text_offset = &j->text_offset[i];
    if (!prompt || !ch->plp) return;
    const oa_prompt *p = &j->req.prompts[i];
    c->prompt_ids = p->ids;
    c->n_prompt = p->n;
    c->prompt_logprobs = ch->plp;
    c->prompt_top = ch->plp_top;
}

/* A /generate stream event: the choice's whole text so far. */
static int format_generate(sv_job *j, const sv_delivery *d)
{
    if (!j->sg_text) {
        j->sg_text = calloc(j->n_choices, sizeof *j->sg_text);
        j->sg_ids = calloc(j->n_choices, sizeof *j->sg_ids);
        if (!j->sg_text || !j->sg_ids) return -1;
    }
    sbuf_text *t = &j->sg_text[d->choice];
    if (t->n + d->len + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + d->len + 1) cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p) return -1;
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->n, d->text, d->len);
    t->n += d->len;
    j->sg_ids[d->choice] += d->n_ids;
    int finish = d->finish == TR_FINISH_ABORT || d->finish == TR_FINISH_ERROR ? 0 : d->finish;
    if (!finish && !d->len && !d->n_ids) return 0;   /* an error follows instead */
    sg_choice c = {.text = t->p, .len = t->n, .n_ids = j->sg_ids[d->choice], .finish = finish, .matched = d->matched,
                   .prompt_tokens = j->req.prompts[d->choice].n, .cached_tokens = d->cached,
                   .cached_host = d->cached_host, .tiers = j->srv->hicache,
                   .e2e_latency = sv_clock(j->srv) - j->arrival};
    size_t n = 0;
    char *ev = sg_event(&j->ident, d->choice, j->n_choices > 1, &c, &n);
    return wput_owned(j, ev, n);
}

static int format(sv_job *j, const sv_delivery *d)
{
    for (; d; d = d->next) {
        if (j->req.kind == OA_GENERATE) {
            if (format_generate(j, d) < 0) return -1;
            continue;
        }
        oa_choice_out c = {.text = d->text, .len = d->len, .ids = d->ids, .n_ids = d->n_ids, .finish = d->finish};
        with_logprobs(j, d->choice, d->with_prompt, &c);
        c.logprobs = d->lp;
        c.top = d->top;
        if (d->finish == TR_FINISH_ABORT || d->finish == TR_FINISH_ERROR) {
            if (!d->len && !d->n_ids) continue;
            c.finish = 0;
        }
        size_t n = 0;
        bool first = !j->started[d->choice];
        j->started[d->choice] = true;
        char *ev = oa_chunk(&j->req, &j->ident, d->choice, &c, first, &n);
        if (wput_owned(j, ev, n) < 0) return -1;
    }
    return 0;
}

static int close_stream(sv_job *j, const oa_error *err, const oa_usage *u)
{
    size_t n = 0;
    char *ev = NULL;
    if (err->status) ev = oa_error_event(err, &n);
    else if (j->req.include_usage && j->req.kind != OA_GENERATE) ev = oa_usage_chunk(&j->req, &j->ident, u, &n);
    if (ev && wput_owned(j, ev, n) < 0) return -1;
    j->stream_closed = true;
    return wput(j, "data: [DONE]\n\n", 14);
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    sv_job *j = cls;
    for (;;) {
        if (j->wpos < j->wn) {
            size_t n = j->wn - j->wpos < max ? j->wn - j->wpos : max;
            memcpy(buf, j->wbuf + j->wpos, n);
            j->wpos += n;
            return (ssize_t)n;
        }
        j->wn = j->wpos = 0;
        if (j->stream_closed) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&j->mu);
        if (j->cancelled || !j->conn) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        sv_delivery *d = j->head;
        j->head = j->tail = NULL;
        bool done = j->state == JOB_DONE || j->state == JOB_REFUSED;
        oa_error err = j->err;
        oa_usage u = j->usage;
        if (!d && !done) {
            /* Nothing to send: out of the event loop until the scheduler
             * has something (or the watch thread sees a hang-up). */
            j->suspended = true;
            MHD_suspend_connection(j->conn);
            pthread_mutex_unlock(&j->mu);
            return 0;
        }
        pthread_mutex_unlock(&j->mu);
        int rc = d ? format(j, d) : close_stream(j, &err, &u);
        sv_delivery_free(d);
        if (rc < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void reader_done(void *cls)
{
    sv_job_unref(cls);
}

static enum MHD_Result start_stream(struct MHD_Connection *c, sv_job *j)
{
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, reader, j, reader_done);
    if (!r) return MHD_NO;
    pthread_mutex_lock(&j->mu);
    j->refs++;   /* the response's, dropped by reader_done */
    pthread_mutex_unlock(&j->mu);
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result answer_generate(struct MHD_Connection *c, sv_job *j)
{
    sg_choice *sc = calloc(j->n_choices, sizeof *sc);
    if (!sc) return MHD_NO;
    double e2e = sv_clock(j->srv) - j->arrival;
    for (uint32_t i = 0; i < j->n_choices; i++) {
        const sv_choice *ch = &j->choices[i];
        uint32_t pn = j->req.prompts[i].n;
        bool by_id = ch->finish == TR_FINISH_STOP && !ch->text.stopped && ch->n_kept;
        sc[i] = (sg_choice){.text = ch->text.text ? ch->text.text : "", .len = ch->text.len, .ids = ch->out,
                            .n_ids = ch->n_kept, .finish = ch->finish, .matched = by_id ? ch->out[ch->n_kept - 1] : -1,
                            .prompt_tokens = pn, .cached_tokens = ch->cached < pn ? ch->cached : pn,
                            .cached_host = ch->cached_host < pn ? ch->cached_host : pn, .tiers = j->srv->hicache,
                            .e2e_latency = e2e};
    }
    size_t n;
    char *body = sg_response(&j->ident, sc, j->n_choices, &n);
    free(sc);
    return body ? send_owned(c, 200, "application/json", body, n) : MHD_NO;
}

static enum MHD_Result answer_whole(struct MHD_Connection *c, sv_job *j)
{
    if (j->req.kind == OA_GENERATE) return answer_generate(c, j);
    oa_choice_out *co = calloc(j->n_choices, sizeof *co);
    char **texts = calloc(j->n_choices, sizeof *texts);
    bool ok = co && texts;
    for (uint32_t i = 0; ok && i < j->n_choices; i++) {
        const sv_choice *ch = &j->choices[i];
        const char *text = ch->text.text ? ch->text.text : "";
        size_t len = ch->text.len;
        if (j->echo) {   /* the prompt's text opens the choice's */
            size_t el = j->echo_len[i / j->req.n];
            if (!(texts[i] = malloc(el + len + 1))) {
                ok = false;
                break;
            }
            memcpy(texts[i], j->echo[i / j->req.n], el);
            memcpy(texts[i] + el, text, len);
            texts[i][el + len] = '\0';
            text = texts[i];
            len += el;
        }
        co[i] = (oa_choice_out){.text = text, .len = len, .ids = ch->out, .n_ids = ch->n_kept, .finish = ch->finish};
        with_logprobs(j, i, true, &co[i]);
        co[i].logprobs = ch->lp;
        co[i].top = ch->lp_top;
    }
    size_t n;
    char *body = ok ? oa_response(&j->req, &j->ident, co, j->n_choices, &j->usage, &n) : NULL;
    for (uint32_t i = 0; texts && i < j->n_choices; i++) free(texts[i]);
    free(texts);
    free(co);
    return body ? send_owned(c, 200, "application/json", body, n) : MHD_NO;
}

/* Called again after the scheduler (or the watch thread) resumed us. */
static enum MHD_Result resumed(struct MHD_Connection *c, const hreq *h)
{
    sv_job *j = h->job;
    pthread_mutex_lock(&j->mu);
    if (j->cancelled) {
        pthread_mutex_unlock(&j->mu);
        return MHD_NO;
    }
    int state = j->state;
    oa_error err = j->err;
    if (state == JOB_REFUSED || (state == JOB_DONE && err.status && !j->req.stream)) {
        pthread_mutex_unlock(&j->mu);
        return send_error(c, &err);
    }
    if ((j->req.stream && state != JOB_QUEUED) || state == JOB_DONE) {
        pthread_mutex_unlock(&j->mu);
        return j->req.stream ? start_stream(c, j) : answer_whole(c, j);
    }
    j->suspended = true;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&j->mu);
    return MHD_YES;
}

/* ---- the handler ---- */
static enum MHD_Result first_call(server *s, struct MHD_Connection *c, const char *url, const char *method, hreq *h)
{
    /* The header is in: its deadline is off, and from now on the
     * connection may sit idle (mid-body, between requests) for the idle
     * timeout, not the (shorter) header timeout. */
    rh_guard_deadline(s->guard, mhd_guard_of(c), 0);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.idle_timeout_s);
    if (atomic_load(&s->n_conns) > s->cfg.max_connections)
        return fail(c, 503, NULL, "too_many_connections", "too many open connections; try again later");
    uint32_t ip = mhd_client_ip(c);
    uint64_t mine = ip ? rh_guard_open_from(s->guard, ip) : 0;
    if (mine > s->client_cap) {
        oa_error e;
        oa_fail(&e, 503, NULL, "too_many_connections",
                "this client holds %llu open connections, more than the %u one client may "
                "(--max-connections-per-client); try again later",
                (unsigned long long)mine, s->client_cap);
        return send_error(c, &e);
    }
    h->route = route_of(url, method);
    if (!strncmp(url, "/v1/", 4) && !authorized(s, c))
        return fail(c, 401, NULL, "invalid_api_key", "a valid API key is needed: \"Authorization: Bearer KEY\"");
    if (h->route == R_COMPLETIONS || h->route == R_CHAT || h->route == R_GENERATE) {
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body_bytes) {
            oa_error e;
            oa_fail(&e, 413, NULL, "body_too_large", "the body is %s bytes, more than the %zu this server accepts", cl,
                    s->cfg.max_body_bytes);
            return send_error(c, &e);
        }
    }
    return MHD_YES;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *data, size_t *size, void **con_cls)
{
    (void)version;
    server *s = cls;
    hreq *h = *con_cls;
    if (!h) {
        if (!(h = calloc(1, sizeof *h))) return MHD_NO;
        *con_cls = h;
        return first_call(s, c, url, method, h);
    }
    if (h->job) return resumed(c, h);
    if (*size) {
        if (rh_upload_feed(&h->up, data, *size, s->cfg.max_body_bytes) < 0) return MHD_NO;
        *size = 0;
        return MHD_YES;
    }
    /* The body is complete: answer (a response queued now is the last call). */
    if (h->up.too_big) {
        oa_error e;
        oa_fail(&e, 413, NULL, "body_too_large", "the body is larger than the %zu bytes this server accepts",
                s->cfg.max_body_bytes);
        return send_error(c, &e);
    }
    switch (h->route) {
    case R_COMPLETIONS:
    case R_CHAT:
    case R_GENERATE: return start_completion(s, c, h);
    case R_MODELS: return models(s, c);
    case R_MODEL: return one_model(s, c, url);
    case R_SERVER_INFO:
    case R_MODEL_INFO: return info(s, c, h->route);
    case R_FLUSH: return flush_cache(s, c);
    case R_HEALTH: return health(s, c);
    case R_METRICS: return metrics(s, c);
    case R_VERSION:
    case R_TOKENIZE:
    case R_DETOKENIZE: return tool(s, c, h);
    case R_ABORT: return abort_request(s, c, h);
    case R_LORA_LOAD:
    case R_LORA_UNLOAD:
    case R_V1_LORA_LOAD:
    case R_V1_LORA_UNLOAD: return lora_adapter(s, c, h);
    case R_HEALTH_GENERATE: return health_generate(s, c, h);
    case R_BAD_METHOD: {
        oa_error e;
        oa_fail(&e, 405, NULL, "method_not_allowed", "%s is not allowed on %s", method, url);
        return send_error(c, &e);
    }
    default: {
        oa_error e;
        oa_fail(&e, 404, NULL, "not_found", "no such endpoint: %s %s", method, url);
        return send_error(c, &e);
    }
    }
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    server *s = cls;
    (void)toe;
    /* The connection waits for its next request: that one's header must be
     * in within the idle timeout (the wait) plus the header timeout. */
    rh_guard_deadline(s->guard, mhd_guard_of(c), rh_now() + s->cfg.idle_timeout_s + s->cfg.header_timeout_s);
    hreq *h = *con_cls;
    if (!h) return;
    if (h->job) sv_release(h->job);
    free(h->up.body);
    free(h);
    *con_cls = NULL;
}

/* Counts connections, in all and per client, and gives each the deadline
 * of its first header (util/conn_guard.h); the guard's entry rides in the
 * socket context, taken off at close (before libmicrohttpd closes the
 * socket). */
static void connection_event(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode code)
{
    server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&s->n_conns, 1);
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_ctx = fd ? rh_guard_open(s->guard, fd->connect_fd, mhd_client_ip(c), rh_now() + s->cfg.header_timeout_s) : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        atomic_fetch_sub(&s->n_conns, 1);
        rh_guard_close(s->guard, *socket_ctx);
        *socket_ctx = NULL;
    }
}

static void quiet_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    (void)fmt;
    (void)ap;
}

int sv_http_start(server *s, rh_err *e)
{
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons(s->cfg.port);
    const char *host = s->cfg.host ? s->cfg.host : "127.0.0.1";
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return rh_fail(e, "--host %s: not an IPv4 address (127.0.0.1 serves this machine, 0.0.0.0 every interface)", host);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    /* One client may hold at most its cap (then its requests get 503), and
     * a few past it are accepted to say so; beyond that libmicrohttpd
     * closes its connections at accept, so a flood of idle sockets from one
     * address never takes the slots everyone else needs: the margin stays
     * within half of what the cap leaves the others. A request's whole
     * header must be in by its deadline (the guard: the header timeout
     * from the connection's start, or the idle plus the header timeout
     * from the previous response's end), and no header byte may be more
     * than the header timeout after the last; suspended connections (a
     * request waiting for tokens) never time out. */
    uint32_t total = s->cfg.max_connections;
    s->client_cap = rh_guard_client_cap(total, s->cfg.max_connections_per_client);
    uint32_t margin = rh_guard_client_margin(total, s->client_cap);
    if (!(s->guard = rh_guard_new(e))) return -1;
    s->d = MHD_start_daemon(flags, s->cfg.port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->cfg.http_threads, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(s->cfg.max_connections + 64), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)(s->client_cap + margin), MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)s->cfg.header_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, connection_event, s, MHD_OPTION_EXTERNAL_LOGGER, quiet_log,
                            NULL, MHD_OPTION_END);
    const union MHD_DaemonInfo *info = s->d ? MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (!info || !info->port) {
        if (s->d) MHD_stop_daemon(s->d);
        s->d = NULL;
        rh_guard_free(s->guard);
        s->guard = NULL;
        return rh_fail(e, "cannot listen on %s:%u (is the port in use?)", host, (unsigned)s->cfg.port);
    }
    s->port = info->port;
    snprintf(s->url, sizeof s->url, "http://%s:%u", host, (unsigned)s->port);
    return 0;
}

void sv_http_stop(server *s)
{
    if (s->d) MHD_stop_daemon(s->d);   /* every connection closed, each taken off the guard */
    s->d = NULL;
    rh_guard_free(s->guard);
    s->guard = NULL;
}
