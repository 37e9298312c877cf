/* replay.c — see replay.h.
 *
 * The loop: send every request whose time has come, run one engine step if
 * anything is queued, else sleep until the next send. The engine's events
 * become request records (written when a request finishes), its steps step
 * records. Everything runs on this thread; the recorder is synchronous, so
 * the recording appears only when the whole run succeeded. */
#include "engine/replay.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/record/outcome.h"
#include "engine/record/recorder.h"
#include "engine/speculative/hist.h"
#include "engine/speculative/vllm_config.h"
#include "traces/prompt.h"
#include "traces/sender.h"
#include "util/args.h"
#include "util/hash.h"
#include "util/progress.h"

#define MAX_WARNINGS 10        /* printed one by one; the rest are counted */

typedef struct rreq {
    uint32_t index;            /* into the trace */
    rec_outcome o;             /* times in s on the replay clock */
    double *times;             /* each output token's time, [max_tokens] */
} rreq;

typedef struct replay {
    const replay_config *cfg;
    const tr_trace *trace;
    engine *g;
    recorder *rec;
    rreq *rs;
    tr_sender *sender;         /* who is sent when: the simulator's rule */
    uint64_t outstanding, done;
    int32_t *prompt;           /* scratch for one prompt */
    uint32_t prompt_cap;
    double t0;
    uint64_t warnings;
    replay_result res;
    int failed;
    rh_err err;
    rh_progress bar;
} replay;

void replay_config_default(replay_config *c)
{
    memset(c, 0, sizeof *c);
    engine_config_default(&c->engine);
    c->rate_scale = 1;
    c->sampling = (kern_sampling){.temperature = 0, .top_p = 1, .top_k = 0};
}

static double replay_clock(void *ctx)
{
    const replay *r = ctx;
    return rh_now() - r->t0;
}

static void warn(replay *r, const char *msg)
{
    if (++r->warnings > MAX_WARNINGS) return;
    if (r->cfg->on_warning) {
        r->cfg->on_warning(r->cfg->ctx, msg);
        return;
    }
    if (r->bar.drawn) fputc('\n', stderr);
    fprintf(stderr, "rehearse replay: warning: %s\n", msg);
}

/* A finished, aborted or refused request becomes its measured record. */
static void emit(replay *r, rreq *s, double now)
{
    tr_request out;
    rec_outcome_record(&s->o, &r->trace->requests[s->index], now, s->times, &out);
    if (!r->failed && rec_request(r->rec, &out, &r->err) < 0) r->failed = 1;
    free(s->times);
    s->times = NULL;
    r->done++;
    r->outstanding--;
    r->res.output_tokens += s->o.n_out;
    if (s->o.finish == TR_FINISH_LENGTH || s->o.finish == TR_FINISH_STOP) r->res.completed++;
    tr_sender_done(r->sender, s->index, now);
}

static void on_event(void *ctx, const engine_event *ee)
{
    replay *r = ctx;
    const core_event *ev = &ee->ev;
    rreq *s = ee->user;
    if (ev->kind == CORE_EV_TOKENS)
        for (uint32_t k = 0; k < ev->n_tokens; k++) s->times[s->o.n_out + k] = ev->now;
    rec_outcome_event(&s->o, ev);
    if (ev->kind == CORE_EV_FINISHED || ev->kind == CORE_EV_ABORTED) {
        if (r->cfg->on_output) r->cfg->on_output(r->cfg->ctx, s->index, ee->output, ev->output_len);
        emit(r, s, ev->now);
    }
}

static void on_step(void *ctx, const tr_step *st)
{
    replay *r = ctx;
    r->res.steps++;
    r->res.retractions += st->retractions;
    if (!r->failed && rec_step(r->rec, st, &r->err) < 0) r->failed = 1;
}

static void on_message(void *ctx, const char *msg)
{
    warn(ctx, msg);
}

/* Sends trace request i at time t: its prompt ids, then into the engine. A
 * request the engine refuses is answered at once with an error, as a server
 * would answer it. */
static void send(replay *r, uint32_t i, double t)
{
    const tr_request *q = &r->trace->requests[i];
    const model_config *mc = engine_model(r->g);
    rreq *s = &r->rs[i];
    s->index = i;
    s->o.send = t;
    r->outstanding++;
    r->res.prompt_tokens += q->input_len;
    uint32_t max_tokens = q->output_len ? q->output_len : 1;
    rh_err e = {{0}};
    uint32_t ctx = core_get_config(engine_core(r->g))->context_length;
    if ((uint64_t)q->input_len + max_tokens > ctx) {
        /* Checked before making the prompt, so an absurd length costs nothing. */
        rh_fail(&e, "request %llu: %u prompt + %u output tokens exceed the context length %u of '%s'",
                (unsigned long long)q->id, q->input_len, max_tokens, ctx, mc->name);
        goto refuse;
    }
    if (q->input_len > r->prompt_cap) {
        int32_t *p = realloc(r->prompt, q->input_len * sizeof *p);
        if (!p) goto oom;
        r->prompt = p;
        r->prompt_cap = q->input_len;
    }
    if (!(s->times = malloc(max_tokens * sizeof *s->times))) goto oom;
    tr_prompt_tokens(q, r->trace->header.block_size, mc->vocab_size, r->cfg->prompt_seed, r->prompt);
    uint32_t adapter = 0;
    if (q->adapter) {   /* the trace's adapter K by its name (header adapter.K, else lora-K) among those served */
        char buf[32];
        const char *name = tr_adapter_name(&r->trace->header, q->adapter, buf, sizeof buf);
        if (!(adapter = engine_lora_find(r->g, name))) {
            rh_fail(&e, "request %llu: adapter %s is not served (give it with --lora-paths %s=PATH)",
                    (unsigned long long)q->id, name, name);
            goto refuse;
        }
    }
    engine_request req = {
        .id = q->id,
        .prompt = r->prompt,
        .prompt_len = q->input_len,
        .max_tokens = max_tokens,
        .sampling = r->cfg->sampling,
        .seed = rh_hash64(r->cfg->engine.core.seed ^ rh_hash64(i)),
        .ignore_eos = true,
        .priority = q->priority,
        .adapter = adapter,
        .user = s,
    };
    if (engine_add(r->g, &req, t, &e) == 0) return;
refuse:
    warn(r, e.msg);
    r->res.refused++;
    s->o.finish = TR_FINISH_ERROR;
    emit(r, s, t);
    return;
oom:
    rh_fail(&r->err, "request %llu: out of memory", (unsigned long long)q->id);
    r->failed = 1;
}

/* Sends everything due by `now`; returns the next send time (INFINITY: none
 * left, or every client is busy). */
static double send_due(replay *r, double now)
{
    uint32_t i;
    double sent, next;
    while (!r->failed && tr_sender_next(r->sender, now, &i, &sent, &next)) send(r, i, sent);
    return r->failed ? INFINITY : next;
}

static void sleep_s(double s)
{
    if (!(s > 0)) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

static recorder *open_recording(replay *r, rh_err *e)
{
    const replay_config *c = r->cfg;
    tr_header h;
    if (tr_header_copy(&h, &r->trace->header) < 0) return rh_fail(e, "out of memory"), NULL;
    char buf[64];
    int rc = engine_describe(r->g, &h);
    rc |= tr_header_set(&h, "source", "rehearse replay");
    if (c->trace_name) rc |= tr_header_set(&h, "input", c->trace_name);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)c->prompt_seed);
    rc |= tr_header_set(&h, "prompt-seed", buf);
    snprintf(buf, sizeof buf, "%.17g", c->rate_scale);
    rc |= tr_header_set(&h, "rate-scale", buf);
    snprintf(buf, sizeof buf, "%u", c->max_concurrency);
    rc |= tr_header_set(&h, "max-concurrency", buf);
    snprintf(buf, sizeof buf, "%g", (double)c->sampling.temperature);
    rc |= tr_header_set(&h, "temperature", buf);
    snprintf(buf, sizeof buf, "%g", (double)c->sampling.top_p);
    rc |= tr_header_set(&h, "top-p", buf);
    snprintf(buf, sizeof buf, "%u", c->sampling.top_k);
    rc |= tr_header_set(&h, "top-k", buf);
    recorder *rec = NULL;
    if (rc) rh_fail(e, "out of memory");
    else rec = rec_open(c->out_path, &h, 0, e);
    tr_header_free(&h);
    return rec;
}

/* With speculation on, the accepted-length histogram goes into the
 * recording's header (engine/speculative/hist.h), where `rehearse sim` finds it. The
 * header was written first, so the finished file is rewritten. */
static int record_spec_hist(replay *r, rh_err *e)
{
    engine_spec_stats st;
    engine_get_spec_stats(r->g, &st);
    r->res.spec_proposed = st.proposed;
    r->res.spec_accepted = st.accepted;
    if (!st.hist_n) return 0;
    return spec_trace_set_hist(r->cfg->out_path, st.hist, st.hist_n, e);
}

static int run_loop(replay *r, rh_err *e)
{
    while (!r->failed) {
        double now = replay_clock(r);
        double next = send_due(r, now);
        if (r->failed) break;
        if (!engine_idle(r->g)) {
            if (engine_step(r->g, e) < 0) return -1;
        } else if (next == INFINITY) {
            if (tr_sender_left(r->sender) == 0) break;
            return rh_fail(e, "replay: %llu requests wait but no client is free and nothing runs",
                           (unsigned long long)tr_sender_left(r->sender));
        } else {
            /* Idle until the next arrival; short naps keep the bar moving. */
            double gap = next - replay_clock(r);
            sleep_s(gap < 0.1 ? gap : 0.1);
        }
        snprintf(r->bar.extra, sizeof r->bar.extra, "clock %.1f s", replay_clock(r));
        rh_progress_update(&r->bar, r->done);
    }
    if (r->failed) {
        *e = r->err;
        return -1;
    }
    return 0;
}

int replay_run(const replay_config *c, const tr_trace *t, replay_result *out, rh_err *e)
{
    memset(out, 0, sizeof *out);
    if (!c->out_path) return rh_fail(e, "replay: no output path (-o RECORDED)");
    if (!(c->rate_scale > 0) || !isfinite(c->rate_scale))
        return rh_fail(e, "--rate-scale must be > 0 (got %g)", c->rate_scale);
    if (runner_sampling_check(&c->sampling, e) < 0) return -1;
    replay r;
    memset(&r, 0, sizeof r);
    r.cfg = c;
    r.trace = t;
    uint64_t n = t->n_requests;
    int rc = -1;
    r.rs = calloc(n ? n : 1, sizeof *r.rs);
    if (!r.rs) {
        rh_fail(e, "out of memory for %llu requests", (unsigned long long)n);
        goto done;
    }
    if (!(r.sender = tr_sender_new(t, c->rate_scale, c->max_concurrency, e))) goto done;

    engine_config ec = c->engine;
    ec.clock = replay_clock;
    ec.clock_ctx = &r;
    ec.hooks = (engine_hooks){.ctx = &r, .on_event = on_event, .on_step = on_step, .on_message = on_message};
    r.t0 = rh_now();
    if (!(r.g = engine_new(&ec, e))) goto done;
    if (!(r.rec = open_recording(&r, e))) goto done;

    if (c->progress) rh_progress_begin(&r.bar, "replay", n);
    if (c->progress > 1) r.bar.enabled = 1;
    r.t0 = rh_now();           /* the clock starts at the first send, after loading */
    int loop = run_loop(&r, e);
    r.res.wall_s = replay_clock(&r);
    rh_progress_end(&r.bar);
    if (loop < 0) goto done;
    if (r.warnings > MAX_WARNINGS) {
        char msg[96];
        snprintf(msg, sizeof msg, "%llu more warnings not shown", (unsigned long long)(r.warnings - MAX_WARNINGS));
        r.warnings = 0;
        warn(&r, msg);
    }
    core_stats st;
    core_get_stats(engine_core(r.g), &st);
    r.res.cached_tokens = st.cached_tokens;
    r.res.requests = n;
    recorder *rec = r.rec;
    r.rec = NULL;
    if (rec_close(rec, e) < 0) goto done;
    if (record_spec_hist(&r, e) < 0) {
        remove(c->out_path);        /* nothing half-made stays behind a failure */
        goto done;
    }
    *out = r.res;
    rc = 0;
done:
    if (r.rec) rec_abort(r.rec);
    engine_free(r.g);
    if (r.rs)
        for (uint64_t i = 0; i < n; i++) free(r.rs[i].times);
    free(r.rs);
    tr_sender_free(r.sender);
    free(r.prompt);
    return rc;
}

static const char *replay_flags[] = {"o", "output", "max-concurrency", "rate-scale", "prompt-seed",
                                     "temperature", "top-p", "top-k", "speculative-config"};

int replay_config_takes_value(const char *name)
{
    for (size_t i = 0; i < sizeof replay_flags / sizeof replay_flags[0]; i++)
        if (!strcmp(name, replay_flags[i])) return 1;
    return engine_flag_takes_value(name) || spec_config_is_knob(name) ? 1 : -1;
}

int replay_config_set(replay_config *c, const char *name, const char *v, rh_err *e)
{
    if (replay_config_takes_value(name) < 0) return 0;
    if (spec_config_is_knob(name)) return spec_config_set(&c->engine.spec, name, v, e);
    if (!strcmp(name, "speculative-config")) {   /* vLLM's JSON */
        static spec_vllm given;   /* the draft model's name lives as long as the run */
        if (spec_vllm_parse(v, &given, e) < 0) return -1;
        return spec_vllm_apply(&given, &c->engine.spec, &c->engine.core, e) < 0 ? -1 : 1;
    }
    if (engine_flag_takes_value(name)) return engine_flag_set(&c->engine, name, v, e);
    unsigned long long u;
    double d;
    if (!strcmp(name, "o") || !strcmp(name, "output")) c->out_path = v;
    else if (!strcmp(name, "prompt-seed")) {
        if (rh_parse_u64(v, "--prompt-seed", &u, e) < 0) return -1;
        c->prompt_seed = u;
    } else if (!strcmp(name, "max-concurrency")) {
        if (rh_parse_u64(v, "--max-concurrency", &u, e) < 0) return -1;
        if (u == 0) return rh_fail(e, "--max-concurrency must be at least 1; leave it out for an open loop");
        if (u > 1000000) return rh_fail(e, "--max-concurrency: %s is more clients than makes sense", v);
        c->max_concurrency = (uint32_t)u;
    } else if (!strcmp(name, "top-k")) {
        if (rh_parse_u64(v, "--top-k", &u, e) < 0) return -1;
        if (u > UINT32_MAX) return rh_fail(e, "--top-k: %s is too large", v);
        c->sampling.top_k = (uint32_t)u;
    } else {
        if (rh_parse_double(v, name, &d, e) < 0) return -1;
        if (!strcmp(name, "rate-scale")) {
            if (!(d > 0)) return rh_fail(e, "--rate-scale must be > 0 (got %s)", v);
            c->rate_scale = d;
        } else if (!strcmp(name, "temperature")) {
            c->sampling.temperature = (float)d;
        } else if (!strcmp(name, "top-p")) {
            c->sampling.top_p = (float)d;
        }
    }
    return 1;
}
