/* bench_dataset_trace.c — a trace file as a bench dataset: recorded arrivals
 * (scaled), lengths, block hashes and sessions. */
#include "client/bench.h"

#include <stdlib.h>
#include <string.h>

#include "traces/import/import.h"
#include "util/hashmap.h"

typedef struct by_arrival {
    double arrival;
    size_t index;
} by_arrival;

static int cmp_arrival(const void *a, const void *b)
{
    const by_arrival *x = a, *y = b;
    if (x->arrival != y->arrival) return x->arrival < y->arrival ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);     /* stable: file order on ties */
}

/* Links each turn of a session to the previous turn (in send order), so the
 * client never sends turn k+1 before turn k has its answer. */
static int link_sessions(bench_dataset *d, rh_err *e)
{
    rh_map64 last = {0};
    for (size_t i = 0; i < d->n; i++) {
        uint64_t s = d->items[i].session_id, prev;
        if (s == 0) continue;
        if (rh_map64_get(&last, s, &prev)) d->items[i].after = (int64_t)prev;
        if (rh_map64_put(&last, s, i) < 0) {
            rh_map64_free(&last);
            return rh_fail(e, "out of memory linking sessions");
        }
    }
    rh_map64_free(&last);
    return 0;
}

/* Each item's adapter by its name in the trace (the header's adapter.K,
 * else lora-K), each name stored once in d->adapter_pool. */
static int name_adapters(bench_dataset *d, const tr_trace *t, const by_arrival *order)
{
    rh_map64 at = {0};   /* adapter id -> offset + 1 in the pool */
    size_t bytes = 0, used = 0;
    char buf[32];
    for (size_t k = 0; k < d->n; k++) {
        uint32_t a = t->requests[order[k].index].adapter;
        int inserted = 0;
        if (!a) continue;
        uint64_t *v = rh_map64_slot(&at, a, 0, &inserted);
        if (!v) return rh_map64_free(&at), -1;
        if (inserted) bytes += strlen(tr_adapter_name(&t->header, a, buf, sizeof buf)) + 1;
    }
    if (!bytes) return rh_map64_free(&at), 0;
    if (!(d->adapter_pool = malloc(bytes))) return rh_map64_free(&at), -1;
    for (size_t k = 0; k < d->n; k++) {
        uint32_t a = t->requests[order[k].index].adapter;
        if (!a) continue;
        uint64_t *v = rh_map64_slot(&at, a, 0, NULL);
        if (!*v) {
            const char *name = tr_adapter_name(&t->header, a, buf, sizeof buf);
            memcpy(d->adapter_pool + used, name, strlen(name) + 1);
            *v = used + 1;
            used += strlen(name) + 1;
        }
        d->items[k].adapter = d->adapter_pool + (*v - 1);
    }
    rh_map64_free(&at);
    return 0;
}

int bench_dataset_trace(bench_dataset *d, const char *path, const bench_trace_opts *o, rh_err *e)
{
    memset(d, 0, sizeof *d);
    if (!(o->rate_scale > 0)) return rh_fail(e, "--rate-scale must be above 0 (got %g)", o->rate_scale);
    tr_trace t;                         /* tr_trace_load initializes it */
    if (tr_trace_load(path, &t, e) < 0) {
        tr_trace_free(&t);
        return -1;
    }
    if (t.n_requests == 0) {
        tr_trace_free(&t);
        return rh_fail(e, "%s: the trace holds no requests", path);
    }
    by_arrival *order = malloc(t.n_requests * sizeof *order);
    if (!order) goto oom;
    for (size_t i = 0; i < t.n_requests; i++) order[i] = (by_arrival){t.requests[i].arrival, i};
    qsort(order, t.n_requests, sizeof *order, cmp_arrival);
    size_t n = o->num_prompts && o->num_prompts < t.n_requests ? o->num_prompts : t.n_requests;
    size_t n_hashes = 0;
    for (size_t k = 0; k < n; k++) n_hashes += t.requests[order[k].index].n_hashes;
    d->items = calloc(n, sizeof *d->items);
    d->hash_pool = malloc((n_hashes ? n_hashes : 1) * sizeof *d->hash_pool);
    d->name = strdup(path);
    if (!d->items || !d->hash_pool || !d->name) goto oom;
    d->n = n;
    d->vocab = BENCH_DEFAULT_VOCAB;
    d->gen_block_size = d->trace_block_size = t.header.block_size;
    d->hashes_from_source = 1;
    const char *mode = tr_header_get(&t.header, "arrival"), *clients = tr_header_get(&t.header, "clients");
    if (mode && !strcmp(mode, "closed-loop") && clients) {
        long c = strtol(clients, NULL, 10);
        if (c > 0) d->closed_loop_clients = (uint32_t)c;
    }
    double t0 = t.requests[order[0].index].arrival;
    size_t pool = 0;
    for (size_t k = 0; k < n; k++) {
        const tr_request *r = &t.requests[order[k].index];
        bench_item *it = &d->items[k];
        if (r->input_len > BENCH_MAX_TOKENS || r->output_len > BENCH_MAX_TOKENS) {
            free(order);
            tr_trace_free(&t);
            bench_dataset_free(d);
            return rh_fail(e, "%s: request %llu: input_len %u or output_len %u is above %u", path,
                           (unsigned long long)r->id, r->input_len, r->output_len, BENCH_MAX_TOKENS);
        }
        it->id = r->id;
        it->arrival = (r->arrival - t0) / o->rate_scale;
        /* A server refuses an empty prompt or max_tokens 0; such records
         * (e.g. failed requests in a public trace) are sent with one token. */
        it->input_len = r->input_len ? r->input_len : 1;
        it->output_len = r->output_len ? r->output_len : 1;
        it->session_id = r->session_id;
        it->turn = r->turn;
        it->priority = r->priority;
        it->after = -1;
        it->n_hashes = r->n_hashes;
        it->hashes = d->hash_pool + pool;
        if (r->n_hashes) memcpy(it->hashes, r->hashes, r->n_hashes * sizeof *r->hashes);
        pool += r->n_hashes;
    }
    if (name_adapters(d, &t, order) < 0) goto oom;
    free(order);
    tr_trace_free(&t);
    return link_sessions(d, e) < 0 ? (bench_dataset_free(d), -1) : 0;
oom:
    free(order);
    tr_trace_free(&t);
    bench_dataset_free(d);
    return rh_fail(e, "%s: out of memory loading the trace", path);
}
