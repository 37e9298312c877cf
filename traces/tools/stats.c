/* stats.c — see stats.h. */
#include "traces/tools/stats.h"
#include "util/hashmap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct tr_stats_acc {
    tr_header header;
    tr_stats s;
    rh_dvec in, out;
    rh_map64 prefixes;         /* chain hash of each prefix seen */
    rh_map64 sessions;
    rh_map64 adapters;          /* adapter id -> its requests */
};

tr_stats_acc *tr_stats_new(void)
{
    tr_stats_acc *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    tr_header_init(&a->header);
    a->s.first_arrival = INFINITY;
    a->s.last_arrival = -INFINITY;
    return a;
}

void tr_stats_free(tr_stats_acc *a)
{
    if (!a) return;
    tr_header_free(&a->header);
    rh_dvec_free(&a->in);
    rh_dvec_free(&a->out);
    rh_map64_free(&a->prefixes);
    rh_map64_free(&a->sessions);
    rh_map64_free(&a->adapters);
    free(a);
}

static int acc_header(void *ctx, const tr_header *h, rh_err *e)
{
    tr_stats_acc *a = ctx;
    tr_header_free(&a->header);
    if (tr_header_copy(&a->header, h) < 0) return rh_fail(e, "out of memory");
    return 0;
}

/* A prefix is identified by the chain of its block hashes: key_i =
 * H(key_{i-1}, hash_i), so equal keys mean equal prefixes whatever the
 * hashes themselves encode. */
static int acc_record(void *ctx, const tr_record *rec, rh_err *e)
{
    tr_stats_acc *a = ctx;
    if (rec->kind == TR_STEP) {
        a->s.steps++;
        return 0;
    }
    const tr_request *r = &rec->req;
    tr_stats *s = &a->s;
    s->requests++;
    if (r->arrival < s->first_arrival) s->first_arrival = r->arrival;
    if (r->arrival > s->last_arrival) s->last_arrival = r->arrival;
    /* Failed as the serving metrics count it (metrics_add_request): marked
     * so by its source, or measured and not finished by length or stop
     * (an error, an abort, still running when the trace ended). */
    int done = r->finish == TR_FINISH_LENGTH || r->finish == TR_FINISH_STOP;
    if ((r->flags & TR_REQ_FAILED) || ((r->flags & TR_REQ_MEASURED) && !done)) s->failed++;
    if (r->flags & TR_REQ_MEASURED) s->measured++;
    s->input_tokens += r->input_len;
    s->output_tokens += r->output_len;
    if (rh_dvec_push(&a->in, r->input_len) < 0 || rh_dvec_push(&a->out, r->output_len) < 0)
        return rh_fail(e, "out of memory");
    if (r->session_id) {
        int fresh;
        if (!rh_map64_slot(&a->sessions, r->session_id, 0, &fresh)) return rh_fail(e, "out of memory");
        s->sessions += fresh;
    }
    if (r->adapter) {
        int fresh;
        uint64_t *n = rh_map64_slot(&a->adapters, r->adapter, 0, &fresh);
        if (!n) return rh_fail(e, "out of memory");
        s->adapters += fresh;
        s->adapter_requests++;
        if (++*n > s->top_adapter_requests) s->top_adapter_requests = *n;
    }
    uint64_t key = 0x5eed5eed5eed5eedULL;
    for (uint32_t i = 0; i < r->n_hashes; i++) {
        key = XXH3_64bits_withSeed(&r->hashes[i], sizeof r->hashes[i], key);
        int fresh;
        if (!rh_map64_slot(&a->prefixes, key, 0, &fresh)) return rh_fail(e, "out of memory");
        s->block_hits += !fresh;
    }
    s->blocks += r->n_hashes;
    return 0;
}

tr_sink tr_stats_sink(tr_stats_acc *a)
{
    return (tr_sink){a, acc_header, acc_record};
}

const tr_header *tr_stats_header(const tr_stats_acc *a)
{
    return &a->header;
}

int tr_stats_finish(tr_stats_acc *a, tr_stats *out, rh_err *e)
{
    (void)e;
    tr_stats *s = &a->s;
    if (!s->requests) s->first_arrival = s->last_arrival = 0;
    s->span = s->last_arrival - s->first_arrival;
    s->rate = s->span > 0 ? (double)(s->requests - 1) / s->span : 0;
    rh_summarize(a->in.v, a->in.n, &s->input);
    rh_summarize(a->out.v, a->out.n, &s->output);
    s->prefix_hit_ratio = s->blocks ? (double)s->block_hits / (double)s->blocks : 0;
    *out = *s;
    return 0;
}

int tr_stats_file(const char *path, const tr_import_opts *o, tr_stats *out, tr_header *header, rh_err *e)
{
    tr_stats_acc *a = tr_stats_new();
    if (!a) return rh_fail(e, "out of memory");
    tr_sink sink = tr_stats_sink(a);
    int truncated = 0;
    int rc = tr_read(path, o, &sink, &truncated, e);
    if (rc == 0) rc = tr_stats_finish(a, out, e);
    if (rc == 0) out->truncated = truncated;
    if (rc == 0 && header && tr_header_copy(header, &a->header) < 0) rc = rh_fail(e, "out of memory");
    tr_stats_free(a);
    return rc;
}
