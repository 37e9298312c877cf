/* sglang_log.c — SGLang's scheduler log as step records (format sglang-log).
 *
 * Reads the lines SGLang's scheduler logs, "[DATE TIME[.mmm] TAGS] MESSAGE"
 * (TAGS: the rank, e.g. "TP0" or "DP1 TP4"), anywhere in a line (a docker
 * or journald prefix is skipped). Every other line is ignored. Kept:
 *   Prefill batch ...   one step record per line: prefill_tokens #new-token,
 *                       prefill_seqs #new-seq, prefill_context #cached-token
 *                       (prefix hits; a chunked prompt's earlier chunks are
 *                       not logged), prefill_attn new x (context + new) as if
 *                       the batch were split evenly (exact for one sequence),
 *                       running #running-req, waiting #queue-req, pages_used
 *                       token usage x pages_total;
 *   Decode batch ...    one step record per line; SGLang logs one line per
 *                       --decode-log-interval (40) decode steps, so each
 *                       record stands for its interval (below): running
 *                       #running-req, decode_context from #token (KV tokens
 *                       in use; shared prefixes count once), waiting
 *                       #queue-req, pages_used #token;
 *   startup lines       server_args=ServerArgs(...) (model, tp-size, the
 *                       decode log interval) and max_total_num_tokens=
 *                       (pages_total, in tokens, and the header knobs of the
 *                       same names); without it pages_total is #token / token
 *                       usage when usage >= 0.10;
 *   retraction warnings "#retracted_reqs: N", the next step's retractions.
 * "key: value" fields are found by name in any order; unknown ones are
 * ignored, so versions that add fields read the same. A field that is kept
 * but is not a number stops the import with the file, line and field.
 *
 * Durations are estimates, so every record carries TR_STEP_ESTIMATED; a
 * duration of 0 means not known (cost fits skip those steps):
 *   decode   the mean step of the interval since the rank's last Decode
 *            line, when that interval ran decode steps only (no Prefill
 *            batch logged in it, not the first line after a start, no
 *            silence of 10 s or more): such an interval only loses requests,
 *            so its mean batch lies between the two lines' #running-req. With
 *            milliseconds on both lines the duration is the wall time /
 *            decode_log_interval (ServerArgs, else 40) and the mean batch
 *            gen throughput x wall time / interval / accept len, kept when
 *            it lands in that range (which checks the interval); otherwise
 *            the batch is taken midway and the duration is batch x (accept
 *            len, else 1) / gen throughput. decode_seqs is that mean batch,
 *            decode_context the mean of the two lines' #token. Otherwise
 *            unknown: a prefill's time would be spread over the steps.
 *   prefill  the gap to the rank's next line, when both times have
 *            milliseconds (SGLANG_LOG_MS; at 1 s resolution a gap says
 *            nothing), the next line is a Prefill batch (a Decode line ends
 *            40 decode steps) and the next forward pass was that batch: the
 *            forward counters SGLANG_LOG_FORWARD_ITERS adds are consecutive,
 *            or without them more prompts were queued (#queue-req > 0; SGLang
 *            runs prefill first) or the batch filled chunked_prefill_size (a
 *            chunked prompt goes on). Gaps of 10 s or more are not used.
 * One rank is kept: the first one whose tags hold TP0 (or no tag at all),
 * else the first seen; other ranks' lines are counted in the header. A
 * restart (a startup line after steps, or time going backwards) starts a new
 * segment: no duration spans it, and when time went backwards the new
 * segment is laid right after the previous one (its idle time unknown). */
#include "traces/import/importers.h"
#include "traces/import/sglang_lex.h"
#include "traces/num.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDLE_NS (10LL * 1000000000LL)

/* The kept rank's timeline: reset whole when a TP0 rank replaces a rank
 * seen first. */
typedef struct timeline {
    int have_last;
    int64_t seg_t0, last_ns;    /* the segment's first line; the rank's last line */
    double seg_off;             /* trace time of seg_t0 */
    uint64_t seg_steps, lines;
    int decoded, idle, prefilled;   /* since the rank's last Decode line */
    int64_t dec_ns;
    int dec_ms, dec_has_tok;
    uint32_t dec_run;
    uint64_t dec_tok;
    int pend, pend_ms;          /* a Prefill step waiting for the next line */
    size_t pend_idx;
    int64_t pend_ns, pend_ctr;
    uint32_t pend_queue, pend_new, retract;
    int ms_lines, s_lines;
    uint64_t untimed_prefill, untimed_decode, restarts;
} timeline;

typedef struct sg {
    tr_lines *l;
    tr_trace *t;
    char rank[SG_MAX_TAGS + 1];
    int have_rank, rank_tp0;
    uint64_t other_lines;
    timeline tl;
    /* from the startup lines */
    uint64_t max_total;
    int64_t chunk, max_prefill, max_running, context_len, tp_size, interval, max_tp;
    char model[256];
} sg;

static int fail_field(sg *g, const char *key, sg_span v, const char *why, rh_err *e)
{
    return rh_fail(e, "%s: line %llu: field '%s' %s ('%.*s')", g->l->name, (unsigned long long)g->l->line_no, key, why,
                   (int)(v.n > 40 ? 40 : v.n), v.s);
}

/* A whole number up to `limit`: 1 when present, 0 when absent, -1 on error. */
static int get_count(sg *g, const sg_fields *f, const char *key, uint64_t limit, uint64_t *out, rh_err *e)
{
    const sg_span *v = sg_field(f, key);
    if (!v) return 0;
    const char *why;
    if (tr_parse_count(v->s, v->n, limit, out, &why) < 0) return fail_field(g, key, *v, why, e);
    return 1;
}

static int get_real(sg *g, const sg_fields *f, const char *key, double *out, rh_err *e)
{
    const sg_span *v = sg_field(f, key);
    if (!v) return 0;
    if (tr_parse_f64(v->s, v->n, out) < 0 || !isfinite(*out)) return fail_field(g, key, *v, "is not a number", e);
    if (*out < 0) return fail_field(g, key, *v, "is negative", e);
    return 1;
}

/* The first key of `keys` present (SGLang renames fields for hybrid pools). */
static int get_count_any(sg *g, const sg_fields *f, const char *const keys[2], uint64_t *out, rh_err *e)
{
    int rc = get_count(g, f, keys[0], UINT32_MAX, out, e);
    return rc ? rc : get_count(g, f, keys[1], UINT32_MAX, out, e);
}

static int get_real_any(sg *g, const sg_fields *f, const char *const keys[2], double *out, rh_err *e)
{
    int rc = get_real(g, f, keys[0], out, e);
    return rc ? rc : get_real(g, f, keys[1], out, e);
}

static const char *const TOKENS[2] = {"#token", "#full token"};
static const char *const USAGE[2] = {"token usage", "full token usage"};

/* Times the waiting prefill step from the line that follows it (NULL: none
 * does, the log or the segment ended). */
static void settle_prefill(sg *g, const sg_stamp *next, int next_is_prefill, int64_t next_ctr)
{
    timeline *tl = &g->tl;
    if (!tl->pend) return;
    tl->pend = 0;
    double d = 0;
    int64_t gap = next ? next->ns - tl->pend_ns : 0;
    if (next && next_is_prefill && tl->pend_ms && next->ms && gap > 0 && gap < IDLE_NS) {
        int adjacent = tl->pend_ctr >= 0 && next_ctr >= 0
                           ? next_ctr == tl->pend_ctr + 1
                           : tl->pend_queue > 0 || (g->chunk > 0 && tl->pend_new >= (uint64_t)g->chunk);
        if (adjacent) d = (double)gap / 1e9;
    }
    g->t->steps[tl->pend_idx].duration = tr_round_ns(d);
    tl->untimed_prefill += d == 0;
}

/* A new segment: nothing is timed across it. */
static void restart(sg *g)
{
    settle_prefill(g, NULL, 0, -1);
    g->tl.restarts++;
    g->tl.seg_steps = 0;
    g->tl.decoded = g->tl.idle = g->tl.prefilled = 0;
}

static int is_kept(const sg *g, sg_span tags)
{
    return g->have_rank && strlen(g->rank) == tags.n && !memcmp(g->rank, tags.s, tags.n);
}

/* Keeps the rank `tags`; steps read so far (from a rank seen first that is
 * not TP0) are dropped and counted as another rank's lines. */
static void keep_rank(sg *g, sg_span tags)
{
    g->other_lines += g->tl.lines;
    g->t->n_steps = 0;
    memset(&g->tl, 0, sizeof g->tl);
    memcpy(g->rank, tags.s, tags.n);
    g->rank[tags.n] = '\0';
    g->have_rank = 1;
    g->rank_tp0 = sg_tags_tp0(tags);
}

/* Every step line of the kept rank passes here first: time going backwards
 * is a restart (the new segment is laid right after the last step), and a
 * silence of IDLE_NS marks the decode interval idle. */
static void on_timeline(sg *g, const sg_stamp *st)
{
    timeline *tl = &g->tl;
    if (tl->have_last && st->ns < tl->last_ns) {
        restart(g);
        const tr_step *prev = &g->t->steps[g->t->n_steps - 1];
        tl->seg_off = prev->start + prev->duration;
        tl->seg_t0 = st->ns;
    } else if (!tl->have_last) {
        tl->seg_t0 = st->ns;
    } else if (st->ns - tl->last_ns >= IDLE_NS) {
        tl->idle = 1;
    }
    tl->have_last = 1;
    tl->last_ns = st->ns;
    st->ms ? tl->ms_lines++ : tl->s_lines++;
}

static int add_step(sg *g, const sg_stamp *st, tr_step *s, rh_err *e)
{
    timeline *tl = &g->tl;
    s->index = g->t->n_steps;
    s->start = tr_round_ns(tl->seg_off + (double)(st->ns - tl->seg_t0) / 1e9);
    s->flags |= TR_STEP_ESTIMATED;
    s->retractions = tl->retract;
    tl->retract = 0;
    tl->seg_steps++;
    return tr_trace_add_step(g->t, s, e);
}

/* Pool use: #token when logged, else token usage of a known pool size. */
static void pool(const sg *g, tr_step *s, int have_tokens, uint64_t tokens, int have_usage, double usage)
{
    s->pages_total = (uint32_t)g->max_total;
    if (!g->max_total && have_tokens && have_usage && usage >= 0.1 && tokens / usage < 4e9)
        s->pages_total = (uint32_t)llround((double)tokens / usage);
    if (have_tokens) s->pages_used = (uint32_t)tokens;
    else if (have_usage && s->pages_total) s->pages_used = (uint32_t)llround(usage * s->pages_total);
}

static int prefill_line(sg *g, const sg_stamp *st, rh_err *e)
{
    int64_t ctr;
    sg_fields f;
    sg_split_after(st->msg, "Prefill batch", &ctr, &f);
    uint64_t seqs = 0, toks = 0, cached = 0, running = 0, queue = 0;
    double usage = 0;
    int has_seq, has_tok = 0, has_usage = 0;
    if ((has_seq = get_count(g, &f, "#new-seq", UINT32_MAX, &seqs, e)) < 0 ||
        (has_tok = get_count(g, &f, "#new-token", TR_MAX_TOKENS, &toks, e)) < 0 ||
        get_count(g, &f, "#cached-token", UINT32_MAX, &cached, e) < 0 ||
        get_count(g, &f, "#running-req", TR_MAX_TOKENS, &running, e) < 0 ||
        get_count(g, &f, "#queue-req", UINT32_MAX, &queue, e) < 0 || (has_usage = get_real_any(g, &f, USAGE, &usage, e)) < 0)
        return -1;
    if (!has_seq || !has_tok)
        return rh_fail(e, "%s: line %llu: a 'Prefill batch' line without '%s'", g->l->name,
                       (unsigned long long)g->l->line_no, has_seq ? "#new-token" : "#new-seq");
    on_timeline(g, st);
    settle_prefill(g, st, 1, ctr);
    tr_step s = {0};
    s.prefill_tokens = (uint32_t)toks;
    s.prefill_seqs = (uint32_t)seqs;
    s.prefill_context = cached;
    if (seqs) s.prefill_attn = (uint64_t)llround((double)toks * (double)(cached + toks) / (double)seqs);
    s.running = (uint32_t)running;
    s.waiting = (uint32_t)queue;
    pool(g, &s, 0, 0, has_usage, usage);
    if (add_step(g, st, &s, e) < 0) return -1;
    timeline *tl = &g->tl;
    tl->prefilled = tl->pend = 1;
    tl->pend_idx = g->t->n_steps - 1;
    tl->pend_ns = st->ns;
    tl->pend_ms = st->ms;
    tl->pend_ctr = ctr;
    tl->pend_queue = (uint32_t)queue;
    tl->pend_new = (uint32_t)toks;
    return 0;
}

/* The record of a Decode line is the mean step of its interval (see the
 * contract above); 0 when the interval is not clean. *mean gets the mean
 * batch (the line's own count when unknown). */
static double decode_time(const sg *g, const sg_stamp *st, uint32_t b, double thr, double per, double *mean)
{
    const timeline *tl = &g->tl;
    *mean = b;
    if (!(thr > 0) || !tl->decoded || tl->idle || tl->prefilled) return 0;
    double lo = b < tl->dec_run ? b : tl->dec_run, hi = b < tl->dec_run ? tl->dec_run : b;
    double wall = (double)(st->ns - tl->dec_ns) / 1e9, steps = (double)(g->interval > 0 ? g->interval : 40);
    double m = thr * wall / (steps * per);
    if (st->ms && tl->dec_ms && wall > 0 && m >= lo - 0.5 && m <= hi + 0.5) {
        *mean = m;
        return wall / steps;
    }
    *mean = (lo + hi) / 2;
    return *mean * per / thr;
}

static int decode_line(sg *g, const sg_stamp *st, rh_err *e)
{
    int64_t ctr;
    sg_fields f;
    sg_split_after(st->msg, "Decode batch", &ctr, &f);
    uint64_t running = 0, tokens = 0, queue = 0;
    double usage = 0, thr = 0, len = 0, rate = 0;
    int has_run, has_tok = 0, has_usage = 0, has_len = 0, has_rate = 0;
    if ((has_run = get_count(g, &f, "#running-req", TR_MAX_TOKENS, &running, e)) < 0 ||
        (has_tok = get_count_any(g, &f, TOKENS, &tokens, e)) < 0 || (has_usage = get_real_any(g, &f, USAGE, &usage, e)) < 0 ||
        get_real(g, &f, "gen throughput (token/s)", &thr, e) < 0 ||
        get_count(g, &f, "#queue-req", UINT32_MAX, &queue, e) < 0 || (has_len = get_real(g, &f, "accept len", &len, e)) < 0 ||
        (has_rate = get_real(g, &f, "accept rate", &rate, e)) < 0)
        return -1;
    if (!has_run)
        return rh_fail(e, "%s: line %llu: a 'Decode batch' line without '#running-req'", g->l->name,
                       (unsigned long long)g->l->line_no);
    on_timeline(g, st);
    settle_prefill(g, st, 0, ctr);
    timeline *tl = &g->tl;
    uint32_t b = (uint32_t)running;
    tr_step s = {0};
    s.running = b;
    s.waiting = (uint32_t)queue;
    pool(g, &s, has_tok, tokens, has_usage, usage);
    /* Speculative decoding: accept len is tokens per request per step (the
     * bonus token included); accept len / accept rate the verified width. */
    int spec = has_len && len >= 1 && len <= 1024;
    double per = spec ? len : 1, mean;
    uint32_t width = spec && has_rate && rate > 0 && len / rate <= 1024 ? (uint32_t)llround(len / rate) : 1;
    if (width < 1 || width + 0.5 < len) width = 1;
    double d = decode_time(g, st, b, thr, per, &mean);
    int known = d > 0 && d < 1e6;
    s.duration = known ? tr_round_ns(d) : 0;
    tl->untimed_decode += !known;
    uint64_t seqs = (uint64_t)llround(mean < 1 ? 1 : mean);
    s.decode_seqs = s.decode_tokens = (uint32_t)seqs;
    s.decode_context = known && has_tok && tl->dec_has_tok ? (tokens + tl->dec_tok) / 2 : tokens;
    if (width > 1 && seqs * width <= UINT32_MAX) {
        s.decode_tokens = (uint32_t)(seqs * width);
        s.spec_proposed = (uint32_t)(seqs * (width - 1));
        s.spec_accepted = (uint32_t)llround((double)seqs * (len - 1));
        if (s.spec_accepted > s.spec_proposed) s.spec_accepted = s.spec_proposed;
    }
    if (add_step(g, st, &s, e) < 0) return -1;
    tl->decoded = 1;
    tl->idle = tl->prefilled = 0;
    tl->dec_ns = st->ns;
    tl->dec_ms = st->ms;
    tl->dec_run = b;
    tl->dec_tok = tokens;
    tl->dec_has_tok = has_tok;
    return 0;
}

/* "key=N" of a startup line into *v; "None" or an absent key leave it. */
static int startup_int(sg *g, sg_span msg, const char *key, int64_t *v, rh_err *e)
{
    sg_span val;
    if (!sg_startup_value(msg, key, &val) || (val.n == 4 && !memcmp(val.s, "None", 4))) return 0;
    int64_t x;
    if (tr_parse_scaled(val.s, val.n, 0, &x) < 0 || x < -1) return fail_field(g, key, val, "is not a number", e);
    *v = x;
    return 0;
}

static int startup_line(sg *g, const sg_stamp *st, rh_err *e)
{
    if (g->tl.seg_steps) restart(g);
    sg_span v;
    if (sg_starts(st->msg, "server_args=")) {
        if (sg_startup_quoted(st->msg, "served_model_name", &v) || sg_startup_quoted(st->msg, "model_path", &v))
            snprintf(g->model, sizeof g->model, "%.*s", (int)v.n, v.s);
        return startup_int(g, st->msg, "tp_size", &g->tp_size, e) < 0 ||
                       startup_int(g, st->msg, "decode_log_interval", &g->interval, e) < 0
                   ? -1
                   : 0;
    }
    /* Every rank logs its pool: the TP0 one (or else the first) is kept. */
    int64_t tp = sg_tags_max_tp(st->tags), total = 0;
    if (tp > g->max_tp) g->max_tp = tp;
    if (g->max_total && !sg_tags_tp0(st->tags)) return 0;
    if (startup_int(g, st->msg, "max_total_num_tokens", &total, e) < 0 ||
        startup_int(g, st->msg, "chunked_prefill_size", &g->chunk, e) < 0 ||
        startup_int(g, st->msg, "max_prefill_tokens", &g->max_prefill, e) < 0 ||
        startup_int(g, st->msg, "max_running_requests", &g->max_running, e) < 0 ||
        startup_int(g, st->msg, "context_len", &g->context_len, e) < 0)
        return -1;
    if (total > 0 && total <= UINT32_MAX) g->max_total = (uint64_t)total;
    return 0;
}

static int retract_line(sg *g, const sg_stamp *st, rh_err *e)
{
    const char *p = sg_find(st->msg, "#retracted_reqs:");
    if (!p || (st->tags.n && !is_kept(g, st->tags))) return 0;
    sg_fields f;
    sg_split_fields((sg_span){p, (size_t)(st->msg.s + st->msg.n - p)}, &f);
    uint64_t n = 0;
    if (get_count(g, &f, "#retracted_reqs", UINT32_MAX, &n, e) < 0) return -1;
    g->tl.retract += (uint32_t)n;
    return 0;
}

static int line(sg *g, const char *text, size_t n, rh_err *e)
{
    sg_stamp st;
    if (!sg_parse_stamp(text, n, &st)) return 0;
    if (sg_starts(st.msg, "server_args=ServerArgs(") || sg_starts(st.msg, "max_total_num_tokens="))
        return startup_line(g, &st, e);
    if (sg_find(st.msg, "Retract requests.")) return retract_line(g, &st, e);
    int prefill = sg_starts(st.msg, "Prefill batch");
    if (!prefill && !sg_starts(st.msg, "Decode batch")) return 0;
    if (!g->have_rank || (!is_kept(g, st.tags) && !g->rank_tp0 && sg_tags_tp0(st.tags))) keep_rank(g, st.tags);
    if (!is_kept(g, st.tags)) {
        g->other_lines++;
        return 0;
    }
    g->tl.lines++;
    return prefill ? prefill_line(g, &st, e) : decode_line(g, &st, e);
}

static int set_num(tr_header *h, const char *key, int64_t v, int64_t min)
{
    if (v < min) return 0;
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return tr_header_set(h, key, buf);
}

static int describe(sg *g, rh_err *e)
{
    tr_header *h = &g->t->header;
    const timeline *tl = &g->tl;
    const char *stamps = tl->ms_lines && !tl->s_lines ? "ms" : tl->ms_lines ? "ms and s" : "s";
    int bad = tr_header_set(h, "sglang.rank", g->rank[0] ? g->rank : "(untagged)") < 0 ||
              tr_header_set(h, "sglang.timestamps", stamps) < 0 ||
              set_num(h, "sglang.decode-log-interval", g->interval > 0 ? g->interval : 40, 1) < 0 ||
              set_num(h, "sglang.other-rank-lines", (int64_t)g->other_lines, 1) < 0 ||
              set_num(h, "sglang.untimed-prefill-steps", (int64_t)tl->untimed_prefill, 1) < 0 ||
              set_num(h, "sglang.untimed-decode-steps", (int64_t)tl->untimed_decode, 1) < 0 ||
              set_num(h, "sglang.restarts", (int64_t)tl->restarts, 1) < 0 ||
              set_num(h, "tp-size", g->tp_size > 0 ? g->tp_size : g->max_tp + 1, 2) < 0 ||
              set_num(h, "max-total-tokens", (int64_t)g->max_total, 1) < 0 ||
              (g->chunk && set_num(h, "chunked-prefill-size", g->chunk, -1) < 0) ||
              set_num(h, "max-prefill-tokens", g->max_prefill, 1) < 0 ||
              set_num(h, "max-running-requests", g->max_running, 1) < 0 ||
              set_num(h, "context-length", g->context_len, 1) < 0 || (g->model[0] && tr_header_set_model(h, g->model) < 0);
    return bad ? rh_fail(e, "out of memory") : 0;
}

int tr_import_sglang_log(tr_lines *l, const tr_import_opts *o, tr_trace *t, rh_err *e)
{
    (void)o;
    sg *g = calloc(1, sizeof *g);
    if (!g) return rh_fail(e, "out of memory");
    g->l = l;
    g->t = t;
    g->max_tp = -1;
    const char *text;
    size_t n;
    int rc;
    while ((rc = tr_lines_next(l, &text, &n, e)) > 0)
        if (line(g, text, n, e) < 0) {
            rc = -1;
            break;
        }
    if (rc == 0) {
        settle_prefill(g, NULL, 0, -1);
        if (t->n_steps == 0 && l->bytes)
            rc = rh_fail(e, "%s: no 'Prefill batch' or 'Decode batch' lines of SGLang's scheduler in %llu lines "
                            "(this reads SGLang's server log)", l->name, (unsigned long long)l->line_no);
        else
            rc = describe(g, e);
    }
    free(g);
    return rc < 0 ? -1 : 0;
}
