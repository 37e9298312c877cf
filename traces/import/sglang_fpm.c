/* sglang_fpm.c — forward-pass metrics as step records (format sglang-fpm).
 *
 * SGLang's --enable-forward-pass-metrics publishes one ForwardPassMetrics
 * message per forward pass on a ZMQ socket (msgpack; SGLang writes no file).
 * NVIDIA Dynamo records those messages (and vLLM's, TensorRT-LLM's) as its
 * documented FPM trace: gzip JSONL, one "dynamo.fpm.trace.v1" row per line,
 *   {"schema", "source": {...}, "capture_mode": "full"|"sampled",
 *    "observed_at_unix_ms", "fpm": {"worker_id", "dp_rank", "wall_time",
 *     "scheduled_requests": {...}, "queued_requests": {...}, ...}}.
 * This reads those rows, decompressed (gzip -dc), one step record per row
 * in file order; unknown keys are ignored, a kept one of the wrong type
 * stops the import with the file, line and key. Per row:
 *   duration         wall_time, measured (SGLang times the forward on the
 *                    GPU; without its device timer, from batch start)
 *   start            observed_at - wall_time, from the first kept row (ms)
 *   prefill_tokens   sum_prefill_tokens; prefill_seqs num_prefill_requests;
 *   prefill_context  sum_prefill_kv_tokens (prefix already in the cache);
 *   prefill_attn     new x (context + new), the batch taken as evenly split
 *                    (exact for one sequence: only sums are published)
 *   decode_seqs      num_decode_requests (= decode_tokens: no draft counts)
 *   decode_context   sum_decode_kv_tokens - num_decode_requests (SGLang
 *                    counts each sequence's length with the token decoded)
 *   running          the requests scheduled; waiting: queued prefill and
 *                    decode requests.
 * Idle heartbeats (wall_time 0, nothing scheduled) are skipped. One worker
 * is kept, the first row's (worker_id, dp_rank); other rows are counted in
 * the header. In "sampled" capture Dynamo keeps one row per worker every
 * few seconds: each row is still one real forward pass. */
#include "traces/import/importers.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fpm {
    tr_lines *l;
    tr_trace *t;
    char worker[256];
    int64_t dp_rank;
    int have_worker;
    int64_t t0_ms;              /* the first kept row's observed_at_unix_ms */
    double wall0;               /* and its wall_time */
    uint64_t other_rows, heartbeats;
} fpm;

static int fail_key(const fpm *g, const char *key, const char *why, rh_err *e)
{
    return rh_fail(e, "%s: line %llu: key '%s' %s", g->l->name, (unsigned long long)g->l->line_no, key, why);
}

/* A count under `obj.key` (absent: 0, as the struct's default). */
static int get_count(const fpm *g, json_t *obj, const char *path, const char *key, uint64_t limit, uint64_t *out,
                     rh_err *e)
{
    char name[96];
    snprintf(name, sizeof name, "%s.%s", path, key);
    json_t *v = json_object_get(obj, key);
    *out = 0;
    if (!v) return 0;
    if (!json_is_integer(v)) return fail_key(g, name, "is not an integer", e);
    json_int_t x = json_integer_value(v);
    if (x < 0) return fail_key(g, name, "is negative", e);
    if ((uint64_t)x > limit) return fail_key(g, name, "is absurdly large", e);
    *out = (uint64_t)x;
    return 0;
}

static int get_object(const fpm *g, json_t *obj, const char *key, int required, json_t **out, rh_err *e)
{
    *out = json_object_get(obj, key);
    if (!*out && !required) return 0;
    if (!*out) return fail_key(g, key, "is missing", e);
    if (!json_is_object(*out)) return fail_key(g, key, "is not an object", e);
    return 0;
}

/* One row; 0 also for a row that is skipped. */
static int row(fpm *g, json_t *root, rh_err *e)
{
    json_t *schema = json_object_get(root, "schema"), *f, *sched, *queued, *v;
    if (!json_is_string(schema)) return fail_key(g, "schema", "is not a string (not a Dynamo FPM trace row)", e);
    if (strcmp(json_string_value(schema), "dynamo.fpm.trace.v1"))
        return rh_fail(e, "%s: line %llu: schema '%.60s' is not dynamo.fpm.trace.v1, the version this reads", g->l->name,
                       (unsigned long long)g->l->line_no, json_string_value(schema));
    if (get_object(g, root, "fpm", 1, &f, e) < 0 || get_object(g, f, "scheduled_requests", 1, &sched, e) < 0 ||
        get_object(g, f, "queued_requests", 0, &queued, e) < 0)
        return -1;
    v = json_object_get(root, "observed_at_unix_ms");
    if (!json_is_integer(v) || json_integer_value(v) < 0) return fail_key(g, "observed_at_unix_ms", "is not a time in ms", e);
    int64_t observed = (int64_t)json_integer_value(v);
    v = json_object_get(f, "wall_time");
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0 || json_number_value(v) > 1e6)
        return fail_key(g, "fpm.wall_time", "is not a duration in seconds", e);
    double wall = json_number_value(v);
    json_t *w = json_object_get(f, "worker_id"), *r = json_object_get(f, "dp_rank");
    if (w && !json_is_string(w)) return fail_key(g, "fpm.worker_id", "is not a string", e);
    if (r && !json_is_integer(r)) return fail_key(g, "fpm.dp_rank", "is not an integer", e);
    const char *worker = w ? json_string_value(w) : "";
    int64_t dp = r ? (int64_t)json_integer_value(r) : 0;

    uint64_t np, pt, pkv, nd, dkv, qp = 0, qd = 0;
    if (get_count(g, sched, "fpm.scheduled_requests", "num_prefill_requests", UINT32_MAX, &np, e) < 0 ||
        get_count(g, sched, "fpm.scheduled_requests", "sum_prefill_tokens", TR_MAX_TOKENS, &pt, e) < 0 ||
        get_count(g, sched, "fpm.scheduled_requests", "sum_prefill_kv_tokens", UINT32_MAX, &pkv, e) < 0 ||
        get_count(g, sched, "fpm.scheduled_requests", "num_decode_requests", TR_MAX_TOKENS, &nd, e) < 0 ||
        get_count(g, sched, "fpm.scheduled_requests", "sum_decode_kv_tokens", (uint64_t)1 << 48, &dkv, e) < 0 ||
        (queued && (get_count(g, queued, "fpm.queued_requests", "num_prefill_requests", UINT32_MAX, &qp, e) < 0 ||
                    get_count(g, queued, "fpm.queued_requests", "num_decode_requests", UINT32_MAX, &qd, e) < 0)))
        return -1;
    if (wall == 0 && np == 0 && nd == 0) {
        g->heartbeats++;
        return 0;
    }
    if (!g->have_worker) {
        snprintf(g->worker, sizeof g->worker, "%s", worker);
        g->dp_rank = dp;
        g->have_worker = 1;
        g->t0_ms = observed;
        g->wall0 = wall;
    } else if (strcmp(g->worker, worker) || g->dp_rank != dp) {
        g->other_rows++;
        return 0;
    }
    tr_step s = {0};
    s.index = g->t->n_steps;
    /* In integer ms first: epoch seconds as doubles keep only ~0.2 us. */
    s.start = tr_round_ns((double)(observed - g->t0_ms) / 1e3 - wall + g->wall0);
    s.duration = tr_round_ns(wall);
    s.prefill_tokens = (uint32_t)pt;
    s.prefill_seqs = (uint32_t)np;
    s.prefill_context = pkv;
    if (np) s.prefill_attn = (uint64_t)llround((double)pt * (double)(pkv + pt) / (double)np);
    s.decode_seqs = s.decode_tokens = (uint32_t)nd;
    s.decode_context = dkv > nd ? dkv - nd : 0;
    s.running = (uint32_t)(np + nd > UINT32_MAX ? UINT32_MAX : np + nd);
    s.waiting = (uint32_t)(qp + qd > UINT32_MAX ? UINT32_MAX : qp + qd);
    return tr_trace_add_step(g->t, &s, e);
}

static int describe(fpm *g, const char *mode, rh_err *e)
{
    tr_header *h = &g->t->header;
    char buf[64];
    snprintf(buf, sizeof buf, "%lld", (long long)g->dp_rank);
    int bad = tr_header_set(h, "fpm.worker_id", g->worker) < 0 || tr_header_set(h, "fpm.dp_rank", buf) < 0 ||
              (*mode && tr_header_set(h, "fpm.capture_mode", mode) < 0);
    if (!bad && g->other_rows) {
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)g->other_rows);
        bad = tr_header_set(h, "fpm.other-worker-rows", buf) < 0;
    }
    if (!bad && g->heartbeats) {
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)g->heartbeats);
        bad = tr_header_set(h, "fpm.idle-heartbeats", buf) < 0;
    }
    return bad ? rh_fail(e, "out of memory") : 0;
}

int tr_import_sglang_fpm(tr_lines *l, const tr_import_opts *o, tr_trace *t, rh_err *e)
{
    (void)o;
    fpm g = {.l = l, .t = t};
    char mode[16] = "";
    const char *line;
    size_t n;
    int rc;
    while ((rc = tr_lines_next(l, &line, &n, e)) > 0) {
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t')) k++;
        if (k == n) continue;
        json_error_t je;
        json_t *root = json_loadb(line, n, 0, &je);
        if (!root) {
            rc = rh_fail(e, "%s: line %llu, column %d: invalid JSON: %s", l->name, (unsigned long long)l->line_no,
                         je.column, je.text);
            break;
        }
        if (!json_is_object(root)) {
            rc = rh_fail(e, "%s: line %llu: expected a JSON object", l->name, (unsigned long long)l->line_no);
        } else {
            json_t *m = json_object_get(root, "capture_mode");
            if (!*mode && json_is_string(m)) snprintf(mode, sizeof mode, "%s", json_string_value(m));
            rc = row(&g, root, e) < 0 ? -1 : 1;
        }
        json_decref(root);
        if (rc < 0) break;
    }
    if (rc == 0 && t->n_steps == 0 && l->bytes)
        rc = rh_fail(e, "%s: no forward passes in the file (%llu rows, %llu idle heartbeats)", l->name,
                     (unsigned long long)l->line_no, (unsigned long long)g.heartbeats);
    if (rc == 0) rc = describe(&g, mode, e);
    return rc < 0 ? -1 : 0;
}
