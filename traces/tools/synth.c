/* synth.c — see synth.h. */
#include "traces/tools/synth.h"
#include "util/rng.h"
#include "util/progress.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNSET UINT64_MAX

void tr_synth_opts_init(tr_synth_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->requests = 1000;
    o->arrival = TR_ARRIVAL_POISSON;
    o->rate = 10;
    o->burstiness = 1;
    o->clients = 8;
    o->input = (tr_len_dist){TR_LEN_LOGNORMAL, 1024, 0, 0.5};
    o->output = (tr_len_dist){TR_LEN_LOGNORMAL, 256, 0, 0.5};
    o->block_size = 512;
    o->turns = 1;
    o->sessions = 16;
    o->adapter_zipf = 1;
}

static int check_len(const tr_len_dist *d, const char *which, rh_err *e)
{
    if (!(d->mean >= 1 && d->mean <= TR_MAX_TOKENS))
        return rh_fail(e, "--%s-len: mean %g is outside [1, %u]", which, d->mean, TR_MAX_TOKENS);
    if (d->kind == TR_LEN_UNIFORM && !(d->range_ratio >= 0 && d->range_ratio <= 1))
        return rh_fail(e, "--%s-range-ratio: %g is outside [0, 1]", which, d->range_ratio);
    if (d->kind == TR_LEN_LOGNORMAL && !(d->sigma >= 0 && d->sigma <= 4))
        return rh_fail(e, "--%s-sigma: %g is outside [0, 4]", which, d->sigma);
    return 0;
}

int tr_synth_check(const tr_synth_opts *o, rh_err *e)
{
    if (o->arrival == TR_ARRIVAL_CLOSED) {
        if (o->clients < 1) return rh_fail(e, "--clients: a closed loop needs at least one client");
        if (!o->requests) return rh_fail(e, "--requests: a closed loop needs a request count");
    } else {
        if (!(o->rate > 0 && o->rate < 1e9)) return rh_fail(e, "--rate: %g is not a positive rate", o->rate);
        if (!(o->burstiness > 0 && o->burstiness < 1e6))
            return rh_fail(e, "--burstiness: %g is not positive", o->burstiness);
        if (!o->requests && !(o->duration > 0)) return rh_fail(e, "--requests or --duration: one must be set");
    }
    if (o->duration < 0 || !isfinite(o->duration)) return rh_fail(e, "--duration: %g is not a duration", o->duration);
    if (o->requests > 10000000000ULL) return rh_fail(e, "--requests: %llu is absurd", (unsigned long long)o->requests);
    if (!o->lengths_from && (check_len(&o->input, "input", e) < 0 || check_len(&o->output, "output", e) < 0)) return -1;
    if (o->block_size > TR_MAX_TOKENS) return rh_fail(e, "--block-size: %u is absurd", o->block_size);
    if (o->groups || o->prompts_per_group || o->system_prompt) {
        if (!o->groups || !o->prompts_per_group)
            return rh_fail(e, "--prefix-groups and --prompts-per-group: both are needed for shared prefixes");
        if ((uint64_t)o->groups * o->prompts_per_group > 100000000ULL)
            return rh_fail(e, "--prefix-groups x --prompts-per-group: more than 100 million prompts");
        if (o->system_prompt > TR_MAX_TOKENS / 2) return rh_fail(e, "--system-prompt-len: %u is absurd", o->system_prompt);
    }
    if (o->adapters > 10000000) return rh_fail(e, "--adapters: %u is absurd (at most 10000000)", o->adapters);
    if (!(o->adapter_zipf >= 0 && o->adapter_zipf <= 10))
        return rh_fail(e, "--adapter-zipf: %g is outside [0, 10]", o->adapter_zipf);
    if (o->adapter_rank > 65536) return rh_fail(e, "--adapter-rank: %u is absurd", o->adapter_rank);
    if (o->turns < 1 || o->turns > 100000) return rh_fail(e, "--turns: %u is not in [1, 100000]", o->turns);
    if (o->turns > 1 && (o->sessions < 1 || o->sessions > 10000000))
        return rh_fail(e, "--sessions: %u is not in [1, 10000000]", o->sessions);
    return 0;
}

/* ---- (input, output) pairs from another trace ---- */

typedef struct pairs {
    uint32_t *in, *out;
    size_t n, cap;
} pairs;

static int pairs_record(void *ctx, const tr_record *r, rh_err *e)
{
    pairs *p = ctx;
    if (r->kind != TR_REQUEST) return 0;
    if (p->n == p->cap) {
        size_t c = p->cap ? p->cap * 2 : 4096;
        uint32_t *a = realloc(p->in, c * sizeof *a);
        if (a) p->in = a;
        uint32_t *b = a ? realloc(p->out, c * sizeof *b) : NULL;
        if (!a || !b) return rh_fail(e, "out of memory reading lengths");
        p->out = b;
        p->cap = c;
    }
    p->in[p->n] = r->req.input_len ? r->req.input_len : 1;
    p->out[p->n] = r->req.output_len ? r->req.output_len : 1;
    p->n++;
    return 0;
}

/* ---- generator state ---- */

typedef struct session {
    uint64_t id;
    uint32_t turn, input, output;
    uint32_t adapter;
    uint64_t *hashes;
    uint32_t n_hashes, cap;
    int open;
} session;

typedef struct synth {
    const tr_synth_opts *o;
    rh_rng arrivals, inputs, outputs, choice, adapters;
    rh_zipf zipf;               /* adapter popularity (cdf NULL: no adapters) */
    pairs pool;
    uint64_t next_hash, n_sessions;
    uint32_t n_prompts;
    uint32_t *question;         /* per prompt: question length, 0 until drawn */
    uint64_t *prompt_base;      /* per prompt: first own block id */
    uint64_t *system_base;      /* per group: first system block id */
    uint32_t *perm;
    session *sessions;
    uint32_t n_slots;
    uint64_t *hashes;           /* the request being built */
    uint32_t hashes_cap;
} synth;

static uint32_t clamp_len(double x)
{
    if (!(x >= 1)) return 1;
    if (x > TR_MAX_TOKENS) return TR_MAX_TOKENS;
    return (uint32_t)llround(x);
}

static uint32_t draw(rh_rng *r, const tr_len_dist *d)
{
    switch (d->kind) {
    case TR_LEN_UNIFORM: {
        uint32_t lo = clamp_len(d->mean * (1 - d->range_ratio)), hi = clamp_len(d->mean * (1 + d->range_ratio));
        return lo + (uint32_t)rh_rng_below(r, (uint64_t)hi - lo + 1);
    }
    case TR_LEN_LOGNORMAL: {
        double mu = log(d->mean) - d->sigma * d->sigma / 2;
        return clamp_len(exp(mu + d->sigma * rh_rng_normal(r)));
    }
    default:
        return clamp_len(d->mean);
    }
}

/* Draws this request's new-message and output lengths. */
static void draw_lengths(synth *s, uint32_t *in, uint32_t *out)
{
    if (s->pool.n) {
        size_t k = (size_t)rh_rng_below(&s->inputs, s->pool.n);
        *in = s->pool.in[k];
        *out = s->pool.out[k];
        return;
    }
    *in = draw(&s->inputs, &s->o->input);
    *out = draw(&s->outputs, &s->o->output);
}

static int reserve_hashes(synth *s, uint32_t n, rh_err *e)
{
    if (n <= s->hashes_cap) return 0;
    uint64_t *h = realloc(s->hashes, (size_t)n * 2 * sizeof *h);
    if (!h) return rh_fail(e, "out of memory");
    s->hashes = h;
    s->hashes_cap = n * 2;
    return 0;
}

/* A first turn (or a single-turn request): a group prompt or a fresh one. */
static int first_prompt(synth *s, uint64_t k, uint32_t new_len, tr_request *r, rh_err *e)
{
    const tr_synth_opts *o = s->o;
    uint32_t bs = o->block_size;
    if (!s->n_prompts) {
        r->input_len = new_len;
        uint32_t nb = tr_blocks(new_len, bs);
        if (reserve_hashes(s, nb, e) < 0) return -1;
        for (uint32_t i = 0; i < nb; i++) s->hashes[i] = s->next_hash++;
        r->n_hashes = nb;
        return 0;
    }
    uint32_t p = s->perm[k % s->n_prompts], g = p / o->prompts_per_group;
    if (!s->question[p]) s->question[p] = new_len;
    uint32_t len = o->system_prompt + s->question[p];
    if (len > TR_MAX_TOKENS) len = TR_MAX_TOKENS;
    r->input_len = len;
    uint32_t sys = bs ? o->system_prompt / bs : 0, nb = tr_blocks(len, bs);
    if (reserve_hashes(s, nb, e) < 0) return -1;
    if (sys && s->system_base[g] == UNSET) {
        s->system_base[g] = s->next_hash;
        s->next_hash += sys;
    }
    if (nb > sys && s->prompt_base[p] == UNSET) {
        s->prompt_base[p] = s->next_hash;
        s->next_hash += nb - sys;
    }
    for (uint32_t i = 0; i < sys; i++) s->hashes[i] = s->system_base[g] + i;
    for (uint32_t i = sys; i < nb; i++) s->hashes[i] = s->prompt_base[p] + (i - sys);
    r->n_hashes = nb;
    return 0;
}

/* Turn k: the previous prompt, its output, and a new message. */
static int next_turn(synth *s, session *ss, uint32_t new_len, tr_request *r, rh_err *e)
{
    uint32_t bs = s->o->block_size;
    uint64_t len = (uint64_t)ss->input + ss->output + new_len;
    r->input_len = (uint32_t)len;
    uint32_t keep = bs ? ss->input / bs : 0, nb = tr_blocks(r->input_len, bs);
    if (keep > ss->n_hashes) keep = ss->n_hashes;
    if (reserve_hashes(s, nb, e) < 0) return -1;
    memcpy(s->hashes, ss->hashes, (size_t)keep * sizeof *s->hashes);
    for (uint32_t i = keep; i < nb; i++) s->hashes[i] = s->next_hash++;
    r->n_hashes = nb;
    return 0;
}

static int remember(session *ss, const tr_request *r, rh_err *e)
{
    if (r->n_hashes > ss->cap) {
        uint64_t *h = realloc(ss->hashes, (size_t)r->n_hashes * 2 * sizeof *h);
        if (!h) return rh_fail(e, "out of memory");
        ss->hashes = h;
        ss->cap = r->n_hashes * 2;
    }
    memcpy(ss->hashes, r->hashes, (size_t)r->n_hashes * sizeof *ss->hashes);
    ss->n_hashes = r->n_hashes;
    ss->input = r->input_len;
    ss->output = r->output_len;
    return 0;
}

static int set_kv(tr_header *h, const char *k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_kv(tr_header *h, const char *k, const char *fmt, ...)
{
    char v[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    return tr_header_set(h, k, v);
}

static const char *len_desc(const tr_len_dist *d, char *buf, size_t n)
{
    if (d->kind == TR_LEN_UNIFORM) snprintf(buf, n, "uniform mean=%g range_ratio=%g", d->mean, d->range_ratio);
    else if (d->kind == TR_LEN_LOGNORMAL) snprintf(buf, n, "lognormal mean=%g sigma=%g", d->mean, d->sigma);
    else snprintf(buf, n, "fixed %g", d->mean);
    return buf;
}

static int make_header(const tr_synth_opts *o, tr_header *h)
{
    char a[128], b[128];
    h->block_size = o->block_size;
    int rc = 0;
    if (o->model) rc |= tr_header_set_model(h, o->model);
    rc |= tr_header_set(h, "source", "synth");
    rc |= set_kv(h, "synth.seed", "%llu", (unsigned long long)o->seed);
    if (o->arrival == TR_ARRIVAL_CLOSED) {
        rc |= tr_header_set(h, "arrival", "closed-loop");
        rc |= set_kv(h, "clients", "%u", o->clients);
    } else {
        rc |= tr_header_set(h, "arrival", o->arrival == TR_ARRIVAL_GAMMA ? "gamma" : "poisson");
        rc |= set_kv(h, "synth.rate", "%.17g", o->rate);
        if (o->arrival == TR_ARRIVAL_GAMMA) rc |= set_kv(h, "synth.burstiness", "%.17g", o->burstiness);
    }
    if (o->lengths_from) {
        const char *base = strrchr(o->lengths_from, '/');
        rc |= tr_header_set(h, "synth.lengths_from", base ? base + 1 : o->lengths_from);
    } else {
        rc |= tr_header_set(h, "synth.input", len_desc(&o->input, a, sizeof a));
        rc |= tr_header_set(h, "synth.output", len_desc(&o->output, b, sizeof b));
    }
    if (o->groups) {
        rc |= set_kv(h, "synth.prefix_groups", "%u", o->groups);
        rc |= set_kv(h, "synth.prompts_per_group", "%u", o->prompts_per_group);
        rc |= set_kv(h, "synth.system_prompt_len", "%u", o->system_prompt);
    }
    if (o->adapters) {
        rc |= set_kv(h, "synth.adapters", "%u", o->adapters);
        rc |= set_kv(h, "synth.adapter_zipf", "%.17g", o->adapter_zipf);
    }
    if (o->adapter_rank) rc |= set_kv(h, "adapter.rank", "%u", o->adapter_rank);
    if (o->turns > 1) {
        rc |= set_kv(h, "synth.turns", "%u", o->turns);
        if (o->arrival != TR_ARRIVAL_CLOSED) rc |= set_kv(h, "synth.sessions", "%u", o->sessions);
    }
    return rc ? -1 : 0;
}

static void synth_free(synth *s)
{
    free(s->pool.in);
    free(s->pool.out);
    free(s->question);
    free(s->prompt_base);
    free(s->system_base);
    free(s->perm);
    if (s->sessions)
        for (uint32_t i = 0; i < s->n_slots; i++) free(s->sessions[i].hashes);
    free(s->sessions);
    free(s->hashes);
    rh_zipf_free(&s->zipf);
}

static int synth_setup(synth *s, const tr_synth_opts *o, rh_err *e)
{
    memset(s, 0, sizeof *s);
    s->o = o;
    /* One stream per aspect: changing the output distribution does not move
     * the arrivals, and so on. */
    rh_rng_seed(&s->arrivals, rh_hash64(o->seed) ^ 1);
    rh_rng_seed(&s->inputs, rh_hash64(o->seed) ^ 2);
    rh_rng_seed(&s->outputs, rh_hash64(o->seed) ^ 3);
    rh_rng_seed(&s->choice, rh_hash64(o->seed) ^ 4);
    rh_rng_seed(&s->adapters, rh_hash64(o->seed) ^ 5);
    if (o->adapters && rh_zipf_init(&s->zipf, o->adapters, o->adapter_zipf) < 0) return rh_fail(e, "out of memory");
    if (o->lengths_from) {
        tr_sink sink = {&s->pool, NULL, pairs_record};
        if (tr_read(o->lengths_from, NULL, &sink, NULL, e) < 0) return -1;
        if (!s->pool.n) return rh_fail(e, "%s: no requests to draw lengths from", o->lengths_from);
    }
    if (o->groups) {
        s->n_prompts = o->groups * o->prompts_per_group;
        s->question = calloc(s->n_prompts, sizeof *s->question);
        s->prompt_base = malloc(s->n_prompts * sizeof *s->prompt_base);
        s->system_base = malloc(o->groups * sizeof *s->system_base);
        s->perm = malloc(s->n_prompts * sizeof *s->perm);
        if (!s->question || !s->prompt_base || !s->system_base || !s->perm) return rh_fail(e, "out of memory");
        for (uint32_t i = 0; i < s->n_prompts; i++) s->prompt_base[i] = UNSET, s->perm[i] = i;
        for (uint32_t i = 0; i < o->groups; i++) s->system_base[i] = UNSET;
        for (uint32_t i = s->n_prompts; i > 1; i--) {
            uint32_t j = (uint32_t)rh_rng_below(&s->choice, i), t = s->perm[i - 1];
            s->perm[i - 1] = s->perm[j];
            s->perm[j] = t;
        }
    }
    if (o->turns > 1) {
        s->n_slots = o->arrival == TR_ARRIVAL_CLOSED ? 1 : o->sessions;
        s->sessions = calloc(s->n_slots, sizeof *s->sessions);
        if (!s->sessions) return rh_fail(e, "out of memory");
    }
    return 0;
}

int tr_synth(const tr_synth_opts *o, const tr_sink *sink, rh_err *e)
{
    if (tr_synth_check(o, e) < 0) return -1;
    synth s;
    tr_header h;
    tr_header_init(&h);
    int rc = synth_setup(&s, o, e);
    if (rc == 0 && make_header(o, &h) < 0) rc = rh_fail(e, "out of memory");
    if (rc == 0 && sink->header) rc = sink->header(sink->ctx, &h, e);
    rh_progress p;
    rh_progress_begin(&p, "synth", o->requests);
    double t = 0;
    uint64_t first_prompts = 0;
    for (uint64_t k = 0; rc == 0 && (!o->requests || k < o->requests); k++) {
        tr_record rec;
        memset(&rec, 0, sizeof rec);
        rec.kind = TR_REQUEST;
        tr_request *r = &rec.req;
        r->id = k;
        if (o->arrival != TR_ARRIVAL_CLOSED) {
            t += o->arrival == TR_ARRIVAL_GAMMA
                     ? rh_rng_gamma(&s.arrivals, o->burstiness, 1.0 / (o->rate * o->burstiness))
                     : rh_rng_exp(&s.arrivals, o->rate);
            if (o->duration > 0 && t > o->duration) break;
            r->arrival = (double)llround(t * 1e6) / 1e6;
        }
        uint32_t new_len, out;
        draw_lengths(&s, &new_len, &out);
        r->output_len = out;
        session *ss = NULL;
        if (s.n_slots) {
            ss = &s.sessions[s.n_slots == 1 ? 0 : rh_rng_below(&s.choice, s.n_slots)];
            /* A session ends after its last turn, or when its context would
             * pass the token limit; a new one takes its place. */
            if (ss->open && (ss->turn + 1 >= o->turns ||
                             (uint64_t)ss->input + ss->output + new_len > TR_MAX_TOKENS))
                ss->open = 0;
            else if (ss->open)
                ss->turn++;
            if (!ss->open) {
                ss->open = 1;
                ss->id = ++s.n_sessions;
                ss->turn = 0;
            }
            if (ss->turn == 0) ss->adapter = s.zipf.cdf ? rh_zipf_draw(&s.zipf, &s.adapters) : 0;
            r->session_id = ss->id;
            r->turn = ss->turn;
            r->adapter = ss->adapter;
        } else if (s.zipf.cdf) {
            r->adapter = rh_zipf_draw(&s.zipf, &s.adapters);
        }
        rc = (ss && ss->turn > 0) ? next_turn(&s, ss, new_len, r, e) : first_prompt(&s, first_prompts++, new_len, r, e);
        if (rc < 0) break;
        r->hashes = r->n_hashes ? s.hashes : NULL;
        if (ss && remember(ss, r, e) < 0) {
            rc = -1;
            break;
        }
        int sr = sink->record(sink->ctx, &rec, e);
        if (sr < 0) rc = -1;
        if (sr > 0) break;
        if ((k & 0xffff) == 0) rh_progress_update(&p, k);
    }
    rh_progress_end(&p);
    tr_header_free(&h);
    synth_free(&s);
    return rc < 0 ? -1 : 0;
}

int tr_synth_file(const tr_synth_opts *o, const char *path, rh_err *e)
{
    tr_writer_sink ws;
    tr_sink s = tr_writer_sink_make(&ws, path, 0);
    int rc = tr_synth(o, &s, e);
    return tr_writer_sink_finish(&ws, rc == 0, e);
}
