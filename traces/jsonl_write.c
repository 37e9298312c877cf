/* jsonl_write.c — see jsonl.h. Lines are built in a buffer with our own
 * number formatting (a printf per field would dominate `trace cat`). */
#include "traces/jsonl.h"
#include "traces/num.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void tr_jsonl_init(tr_jsonl_writer *w, FILE *f)
{
    memset(w, 0, sizeof *w);
    w->f = f;
}

void tr_jsonl_free(tr_jsonl_writer *w)
{
    free(w->buf);
    memset(w, 0, sizeof *w);
}

static int reserve(tr_jsonl_writer *w, size_t need)
{
    if (need <= w->cap) return 0;
    size_t c = w->cap ? w->cap : 4096;
    while (c < need) c *= 2;
    char *b = realloc(w->buf, c);
    if (!b) {
        errno = ENOMEM;
        return -1;
    }
    w->buf = b;
    w->cap = c;
    return 0;
}

static char *put(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return p + n;
}

static char *put_u(char *p, const char *key, uint64_t v)
{
    p = put(p, key);
    return p + tr_format_u64(p, v);
}

static char *put_d(char *p, const char *key, double v)
{
    p = put(p, key);
    return p + tr_format_f64(p, v);
}

/* JSON string with escapes; needs 6 bytes per input byte in the worst case. */
static char *put_s(char *p, const char *s)
{
    *p++ = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
        } else if (c < 0x20) {
            static const char hex[] = "0123456789abcdef";
            p = put(p, "\\u00");
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        } else {
            *p++ = (char)c;
        }
    }
    *p++ = '"';
    return p;
}

static int emit(tr_jsonl_writer *w, char *end)
{
    *end++ = '\n';
    size_t n = (size_t)(end - w->buf);
    return fwrite(w->buf, 1, n, w->f) == n ? 0 : -1;
}

int tr_jsonl_header(tr_jsonl_writer *w, const tr_header *h)
{
    size_t need = 128 + 6 * (strlen(h->model) + strlen(h->hardware));
    for (uint32_t i = 0; i < h->n_kv; i++) need += 8 + 6 * (strlen(h->kv[i].key) + strlen(h->kv[i].value));
    if (reserve(w, need) < 0) return -1;
    char *p = w->buf;
    p = put_u(p, "{\"rehearse_trace\":", h->version ? h->version : TR_FORMAT_VERSION);
    p = put_u(p, ",\"block_size\":", h->block_size);
    p = put_s(put(p, ",\"model\":"), h->model);
    p = put_s(put(p, ",\"hardware\":"), h->hardware);
    p = put(p, ",\"config\":{");
    for (uint32_t i = 0; i < h->n_kv; i++) {
        if (i) *p++ = ',';
        p = put_s(p, h->kv[i].key);
        *p++ = ':';
        p = put_s(p, h->kv[i].value);
    }
    p = put(p, "}}");
    return emit(w, p);
}

static int request_line(tr_jsonl_writer *w, const tr_request *r)
{
    if (reserve(w, 512 + (size_t)r->n_hashes * 22 + (size_t)r->n_times * 32) < 0) return -1;
    char *p = w->buf;
    p = put_u(p, "{\"type\":\"request\",\"id\":", r->id);
    p = put_d(p, ",\"arrival\":", r->arrival);
    p = put_u(p, ",\"input_len\":", r->input_len);
    p = put_u(p, ",\"output_len\":", r->output_len);
    if (r->session_id || r->turn) {
        p = put_u(p, ",\"session_id\":", r->session_id);
        p = put_u(p, ",\"turn\":", r->turn);
    }
    if (r->flags) p = put_u(p, ",\"flags\":", r->flags);
    if (r->priority) {
        p = put(p, r->priority < 0 ? ",\"priority\":-" : ",\"priority\":");
        p += tr_format_u64(p, r->priority < 0 ? (uint64_t)(-(int64_t)r->priority) : (uint64_t)r->priority);
    }
    if (r->adapter) p = put_u(p, ",\"adapter\":", r->adapter);
    if (r->n_hashes) {
        p = put(p, ",\"hashes\":[");
        for (uint32_t i = 0; i < r->n_hashes; i++) {
            if (i) *p++ = ',';
            p += tr_format_u64(p, r->hashes[i]);
        }
        *p++ = ']';
    }
    int measured = r->ttft != 0 || signbit(r->ttft) || r->e2e != 0 || signbit(r->e2e) || r->cached_tokens ||
                   r->spec_proposed || r->spec_accepted || r->retractions || r->finish;
    if (measured) {
        p = put_d(p, ",\"ttft\":", r->ttft);
        p = put_d(p, ",\"e2e\":", r->e2e);
        p = put_u(p, ",\"cached_tokens\":", r->cached_tokens);
        if (r->cached_host) p = put_u(p, ",\"cached_host\":", r->cached_host);
        if (r->cached_storage) p = put_u(p, ",\"cached_storage\":", r->cached_storage);
        p = put_u(p, ",\"spec_proposed\":", r->spec_proposed);
        p = put_u(p, ",\"spec_accepted\":", r->spec_accepted);
        p = put_u(p, ",\"retractions\":", r->retractions);
        p = put(p, ",\"finish\":\"");
        p = put(p, tr_finish_name(r->finish));
        *p++ = '"';
    }
    if (r->n_times) {
        p = put(p, ",\"token_times\":[");
        for (uint32_t i = 0; i < r->n_times; i++) {
            if (i) *p++ = ',';
            p += tr_format_f64(p, r->token_times[i]);
        }
        *p++ = ']';
    }
    *p++ = '}';
    return emit(w, p);
}

static int step_line(tr_jsonl_writer *w, const tr_step *s)
{
    if (reserve(w, 2048) < 0) return -1;
    char *p = w->buf;
    p = put_u(p, "{\"type\":\"step\",\"index\":", s->index);
    p = put_d(p, ",\"start\":", s->start);
    p = put_d(p, ",\"duration\":", s->duration);
    p = put_u(p, ",\"prefill_tokens\":", s->prefill_tokens);
    p = put_u(p, ",\"prefill_seqs\":", s->prefill_seqs);
    p = put_u(p, ",\"decode_seqs\":", s->decode_seqs);
    p = put_u(p, ",\"decode_tokens\":", s->decode_tokens);
    p = put_u(p, ",\"prefill_context\":", s->prefill_context);
    p = put_u(p, ",\"prefill_attn\":", s->prefill_attn);
    p = put_u(p, ",\"decode_context\":", s->decode_context);
    p = put_u(p, ",\"spec_proposed\":", s->spec_proposed);
    p = put_u(p, ",\"spec_accepted\":", s->spec_accepted);
    p = put_u(p, ",\"pages_used\":", s->pages_used);
    p = put_u(p, ",\"pages_total\":", s->pages_total);
    p = put_u(p, ",\"waiting\":", s->waiting);
    p = put_u(p, ",\"running\":", s->running);
    p = put_u(p, ",\"retractions\":", s->retractions);
    p = put_u(p, ",\"finished\":", s->finished);
    p = put_d(p, ",\"sched_time\":", s->sched_time);
    p = put_u(p, ",\"flags\":", s->flags);
    if (s->adapters || s->adapter_loads || s->adapter_tokens) {
        p = put_u(p, ",\"adapters\":", s->adapters);
        p = put_u(p, ",\"adapter_loads\":", s->adapter_loads);
        p = put_u(p, ",\"adapter_tokens\":", s->adapter_tokens);
    }
    if (s->hicache_load_tokens || s->hicache_writeback_tokens || s->hicache_backup_tokens || s->hicache_storage_tokens) {
        p = put_u(p, ",\"hicache_load_tokens\":", s->hicache_load_tokens);
        p = put_u(p, ",\"hicache_writeback_tokens\":", s->hicache_writeback_tokens);
        p = put_u(p, ",\"hicache_backup_tokens\":", s->hicache_backup_tokens);
        p = put_u(p, ",\"hicache_storage_tokens\":", s->hicache_storage_tokens);
    }
    *p++ = '}';
    return emit(w, p);
}

int tr_jsonl_record(tr_jsonl_writer *w, const tr_record *r)
{
    if (r->kind == TR_REQUEST) return request_line(w, &r->req);
    if (r->kind == TR_STEP) return step_line(w, &r->step);
    errno = EINVAL;
    return -1;
}
