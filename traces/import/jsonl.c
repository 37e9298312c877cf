/* jsonl.c — our own JSONL (traces/jsonl.h), streamed to the sink
 * line by line in file order. A request without "id" gets the previous id
 * + 1, as in the binary format; unknown keys are refused so a typo in a
 * hand-written trace does not pass silently. */
#include "traces/import/importers.h"
#include "traces/import/jsonline.h"
#include "traces/num.h"

#include <stdlib.h>
#include <string.h>

typedef struct jctx {
    tr_lines *l;
    jl_obj j;
    uint64_t *hashes;
    double *times;
    size_t hcap, tcap;
} jctx;

static int field_fail(jctx *c, const jl_field *f, const char *what, rh_err *e)
{
    return rh_fail(e, "%s: line %llu: field '%.*s' %s", c->l->name, (unsigned long long)c->l->line_no,
                   (int)f->key.len, jl_text(&c->j, f->key), what);
}

static int get_u64(jctx *c, const jl_field *f, uint64_t *v, rh_err *e)
{
    if (f->type != JL_NUM) return field_fail(c, f, "is not a number", e);
    const char *s = jl_text(&c->j, f->text);
    if (tr_parse_u64(s, f->text.len, v) == 0) return 0;
    const char *why;
    if (tr_parse_count(s, f->text.len, UINT64_MAX, v, &why) == 0) return 0;
    return field_fail(c, f, why, e);
}

static int get_u32(jctx *c, const jl_field *f, uint32_t *v, rh_err *e)
{
    uint64_t x;
    if (get_u64(c, f, &x, e) < 0) return -1;
    if (x > UINT32_MAX) return field_fail(c, f, "is too large", e);
    *v = (uint32_t)x;
    return 0;
}

/* A whole number in [-2^31, 2^31) (a request's priority). */
static int get_i32(jctx *c, const jl_field *f, int32_t *v, rh_err *e)
{
    if (f->type != JL_NUM) return field_fail(c, f, "is not a number", e);
    const char *s = jl_text(&c->j, f->text);
    bool neg = f->text.len > 1 && s[0] == '-';
    uint64_t x;
    if (tr_parse_u64(s + neg, f->text.len - neg, &x) < 0) return field_fail(c, f, "is not a whole number", e);
    if (x > (neg ? 2147483648ull : 2147483647ull)) return field_fail(c, f, "is outside 32 bits", e);
    *v = neg ? (int32_t)(-(int64_t)x) : (int32_t)x;
    return 0;
}

static int get_len(jctx *c, const jl_field *f, uint32_t *v, rh_err *e)
{
    if (f->type != JL_NUM) return field_fail(c, f, "is not a number", e);
    char key[32];
    snprintf(key, sizeof key, "%.*s", (int)f->key.len, jl_text(&c->j, f->key));
    return tr_field_count(c->l, key, jl_text(&c->j, f->text), f->text.len, v, e);
}

static int get_f64(jctx *c, const jl_field *f, double *v, rh_err *e)
{
    if (f->type != JL_NUM || tr_parse_f64(jl_text(&c->j, f->text), f->text.len, v) < 0)
        return field_fail(c, f, "is not a finite number", e);
    return 0;
}

static int get_str(jctx *c, const jl_field *f, const char **s, rh_err *e)
{
    if (f->type != JL_STR) return field_fail(c, f, "is not a string", e);
    *s = jl_text(&c->j, f->text);
    if (!f->text.pooled) {
        /* A fast-path string points into the line: copy it out to end it. */
        size_t n = f->text.len;
        char *tmp = malloc(n + 1);
        if (!tmp) return rh_fail(e, "out of memory");
        memcpy(tmp, *s, n);
        tmp[n] = '\0';
        *s = tmp;
        return 1;   /* caller frees */
    }
    return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t n = need * 2;
    void *q = realloc(*p, n * elem);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int parse_header(jctx *c, tr_header *h, rh_err *e)
{
    const jl_obj *j = &c->j;
    if (!jl_get(j, "rehearse_trace"))
        return rh_fail(e, "%s: line %llu: missing field 'rehearse_trace' (the header line)", c->l->name,
                       (unsigned long long)c->l->line_no);
    for (size_t i = 0; i < j->n_fields; i++) {
        const jl_field *f = &j->fields[i];
        if (jl_key_is(j, f, "rehearse_trace")) {
            uint32_t v = 0;
            if (get_u32(c, f, &v, e) < 0) return -1;
            if (v == 0 || v > TR_FORMAT_VERSION) return field_fail(c, f, "is a version this build does not read", e);
            h->version = v;
        } else if (jl_key_is(j, f, "block_size")) {
            if (get_len(c, f, &h->block_size, e) < 0) return -1;
        } else if (jl_key_is(j, f, "model") || jl_key_is(j, f, "hardware")) {
            const char *s;
            int own = get_str(c, f, &s, e);
            if (own < 0) return -1;
            int rc = jl_key_is(j, f, "model") ? tr_header_set_model(h, s) : tr_header_set_hardware(h, s);
            if (own) free((char *)s);
            if (rc < 0) return rh_fail(e, "out of memory");
        } else if (jl_key_is(j, f, "config")) {
            if (f->type != JL_OBJ) return field_fail(c, f, "is not an object", e);
            for (uint32_t k = 0; k < f->count; k++) {
                const jl_field *m = &j->members[f->first + k];
                if (m->type != JL_STR) return field_fail(c, m, "(in config) is not a string", e);
                char *key = strndup(jl_text(j, m->key), m->key.len);
                char *val = strndup(jl_text(j, m->text), m->text.len);
                int rc = key && val ? tr_header_set(h, key, val) : -1;
                free(key);
                free(val);
                if (rc < 0) return rh_fail(e, "out of memory");
            }
        } else {
            return field_fail(c, f, "is not a header field", e);
        }
    }
    return 0;
}

static int parse_request(jctx *c, tr_request *r, uint64_t next_id, uint32_t block_size, rh_err *e)
{
    const jl_obj *j = &c->j;
    memset(r, 0, sizeof *r);
    r->id = next_id;
    int have = 0;
    for (size_t i = 0; i < j->n_fields; i++) {
        const jl_field *f = &j->fields[i];
        int rc = 0;
        if (jl_key_is(j, f, "type")) continue;
        else if (jl_key_is(j, f, "id")) rc = get_u64(c, f, &r->id, e);
        else if (jl_key_is(j, f, "arrival")) rc = get_f64(c, f, &r->arrival, e), have |= 1;
        else if (jl_key_is(j, f, "input_len")) rc = get_len(c, f, &r->input_len, e), have |= 2;
        else if (jl_key_is(j, f, "output_len")) rc = get_len(c, f, &r->output_len, e), have |= 4;
        else if (jl_key_is(j, f, "session_id")) rc = get_u64(c, f, &r->session_id, e);
        else if (jl_key_is(j, f, "turn")) rc = get_u32(c, f, &r->turn, e);
        else if (jl_key_is(j, f, "flags")) rc = get_u32(c, f, &r->flags, e);
        else if (jl_key_is(j, f, "priority")) rc = get_i32(c, f, &r->priority, e);
        else if (jl_key_is(j, f, "adapter")) rc = get_u32(c, f, &r->adapter, e);
        else if (jl_key_is(j, f, "ttft")) rc = get_f64(c, f, &r->ttft, e);
        else if (jl_key_is(j, f, "e2e")) rc = get_f64(c, f, &r->e2e, e);
        else if (jl_key_is(j, f, "cached_tokens")) rc = get_u32(c, f, &r->cached_tokens, e);
        else if (jl_key_is(j, f, "cached_host")) rc = get_u32(c, f, &r->cached_host, e);
        else if (jl_key_is(j, f, "cached_storage")) rc = get_u32(c, f, &r->cached_storage, e);
        else if (jl_key_is(j, f, "spec_proposed")) rc = get_u32(c, f, &r->spec_proposed, e);
        else if (jl_key_is(j, f, "spec_accepted")) rc = get_u32(c, f, &r->spec_accepted, e);
        else if (jl_key_is(j, f, "retractions")) rc = get_u32(c, f, &r->retractions, e);
        else if (jl_key_is(j, f, "finish")) {
            const char *s;
            int own = get_str(c, f, &s, e);
            if (own < 0) return -1;
            int v = tr_finish_parse(s);
            if (own) free((char *)s);
            if (v < 0) return field_fail(c, f, "is not one of none, length, stop, abort, error", e);
            r->finish = (uint8_t)v;
        } else if (jl_key_is(j, f, "hashes")) {
            if (f->type != JL_ARR) return field_fail(c, f, "is not an array", e);
            if (grow((void **)&c->hashes, &c->hcap, f->count, sizeof *c->hashes) < 0) return rh_fail(e, "out of memory");
            for (uint32_t k = 0; k < f->count; k++) {
                jl_span s = j->elems[f->first + k];
                if (tr_parse_u64(jl_text(j, s), s.len, &c->hashes[k]) < 0)
                    return field_fail(c, f, "holds a value that is not a non-negative integer", e);
            }
            r->n_hashes = f->count;
            r->hashes = c->hashes;
        } else if (jl_key_is(j, f, "token_times")) {
            if (f->type != JL_ARR) return field_fail(c, f, "is not an array", e);
            if (grow((void **)&c->times, &c->tcap, f->count, sizeof *c->times) < 0) return rh_fail(e, "out of memory");
            for (uint32_t k = 0; k < f->count; k++) {
                jl_span s = j->elems[f->first + k];
                if (tr_parse_f64(jl_text(j, s), s.len, &c->times[k]) < 0)
                    return field_fail(c, f, "holds a value that is not a finite number", e);
            }
            r->n_times = f->count;
            r->token_times = c->times;
        } else {
            return field_fail(c, f, "is not a request field", e);
        }
        if (rc < 0) return -1;
    }
    static const char *const req[] = {"arrival", "input_len", "output_len"};
    for (int k = 0; k < 3; k++)
        if (!(have & (1 << k)))
            return rh_fail(e, "%s: line %llu: missing field '%s'", c->l->name, (unsigned long long)c->l->line_no, req[k]);
    if (tr_check_request(r, block_size, e) < 0)
        return rh_prefix(e, "%s: line %llu", c->l->name, (unsigned long long)c->l->line_no);
    if (r->arrival < 0)
        return rh_fail(e, "%s: line %llu: field 'arrival' is %g: negative (arrivals count from the trace's start)",
                       c->l->name, (unsigned long long)c->l->line_no, r->arrival);
    if (!r->input_len && !r->output_len && !(r->flags & TR_REQ_FAILED))
        return rh_fail(e, "%s: line %llu: a request with no input and no output tokens: nothing to serve",
                       c->l->name, (unsigned long long)c->l->line_no);
    return 0;
}

static int parse_step(jctx *c, tr_step *s, uint64_t next_index, rh_err *e)
{
    const jl_obj *j = &c->j;
    memset(s, 0, sizeof *s);
    s->index = next_index;
    int have = 0;
    for (size_t i = 0; i < j->n_fields; i++) {
        const jl_field *f = &j->fields[i];
        int rc;
        if (jl_key_is(j, f, "type")) continue;
        else if (jl_key_is(j, f, "index")) rc = get_u64(c, f, &s->index, e);
        else if (jl_key_is(j, f, "start")) rc = get_f64(c, f, &s->start, e), have |= 1;
        else if (jl_key_is(j, f, "duration")) rc = get_f64(c, f, &s->duration, e), have |= 2;
        else if (jl_key_is(j, f, "prefill_tokens")) rc = get_u32(c, f, &s->prefill_tokens, e);
        else if (jl_key_is(j, f, "prefill_seqs")) rc = get_u32(c, f, &s->prefill_seqs, e);
        else if (jl_key_is(j, f, "decode_seqs")) rc = get_u32(c, f, &s->decode_seqs, e);
        else if (jl_key_is(j, f, "decode_tokens")) rc = get_u32(c, f, &s->decode_tokens, e);
        else if (jl_key_is(j, f, "prefill_context")) rc = get_u64(c, f, &s->prefill_context, e);
        else if (jl_key_is(j, f, "prefill_attn")) rc = get_u64(c, f, &s->prefill_attn, e);
        else if (jl_key_is(j, f, "decode_context")) rc = get_u64(c, f, &s->decode_context, e);
        else if (jl_key_is(j, f, "spec_proposed")) rc = get_u32(c, f, &s->spec_proposed, e);
        else if (jl_key_is(j, f, "spec_accepted")) rc = get_u32(c, f, &s->spec_accepted, e);
        else if (jl_key_is(j, f, "pages_used")) rc = get_u32(c, f, &s->pages_used, e);
        else if (jl_key_is(j, f, "pages_total")) rc = get_u32(c, f, &s->pages_total, e);
        else if (jl_key_is(j, f, "waiting")) rc = get_u32(c, f, &s->waiting, e);
        else if (jl_key_is(j, f, "running")) rc = get_u32(c, f, &s->running, e);
        else if (jl_key_is(j, f, "retractions")) rc = get_u32(c, f, &s->retractions, e);
        else if (jl_key_is(j, f, "adapters")) rc = get_u32(c, f, &s->adapters, e);
        else if (jl_key_is(j, f, "adapter_loads")) rc = get_u32(c, f, &s->adapter_loads, e);
        else if (jl_key_is(j, f, "adapter_tokens")) rc = get_u32(c, f, &s->adapter_tokens, e);
        else if (jl_key_is(j, f, "hicache_load_tokens")) rc = get_u32(c, f, &s->hicache_load_tokens, e);
        else if (jl_key_is(j, f, "hicache_writeback_tokens")) rc = get_u32(c, f, &s->hicache_writeback_tokens, e);
        else if (jl_key_is(j, f, "hicache_backup_tokens")) rc = get_u32(c, f, &s->hicache_backup_tokens, e);
        else if (jl_key_is(j, f, "hicache_storage_tokens")) rc = get_u32(c, f, &s->hicache_storage_tokens, e);
        else if (jl_key_is(j, f, "finished")) rc = get_u32(c, f, &s->finished, e);
        else if (jl_key_is(j, f, "sched_time")) rc = get_f64(c, f, &s->sched_time, e);
        else if (jl_key_is(j, f, "flags")) rc = get_u32(c, f, &s->flags, e);
        else return field_fail(c, f, "is not a step field", e);
        if (rc < 0) return -1;
    }
    if (!(have & 1)) return rh_fail(e, "%s: line %llu: missing field 'start'", c->l->name, (unsigned long long)c->l->line_no);
    if (!(have & 2))
        return rh_fail(e, "%s: line %llu: missing field 'duration'", c->l->name, (unsigned long long)c->l->line_no);
    return 0;
}

int tr_import_jsonl(tr_lines *l, const tr_import_opts *o, const tr_sink *s, rh_err *e)
{
    (void)o;
    jctx c = {.l = l};
    jl_init(&c.j);
    tr_header h;
    tr_header_init(&h);
    const char *line;
    size_t n;
    int rc, have_header = 0;
    uint64_t next_id = 0, next_index = 0;
    while ((rc = tr_lines_next(l, &line, &n, e)) > 0) {
        if (n == 0) continue;
        if (jl_parse(&c.j, line, n, l->line_no, e) < 0) {
            rc = rh_prefix(e, "%s", l->name);
            break;
        }
        if (!have_header) {
            if (parse_header(&c, &h, e) < 0 || (s->header && s->header(s->ctx, &h, e) < 0)) {
                rc = -1;
                break;
            }
            have_header = 1;
            continue;
        }
        const jl_field *t = jl_get(&c.j, "type");
        tr_record rec;
        if (!t || t->type != JL_STR) {
            rc = rh_fail(e, "%s: line %llu: missing field 'type' (\"request\" or \"step\")", l->name,
                         (unsigned long long)l->line_no);
            break;
        }
        if (t->text.len == 7 && !memcmp(jl_text(&c.j, t->text), "request", 7)) {
            rec.kind = TR_REQUEST;
            if (parse_request(&c, &rec.req, next_id, h.block_size, e) < 0) {
                rc = -1;
                break;
            }
            next_id = rec.req.id + 1;
        } else if (t->text.len == 4 && !memcmp(jl_text(&c.j, t->text), "step", 4)) {
            rec.kind = TR_STEP;
            if (parse_step(&c, &rec.step, next_index, e) < 0 ||
                (tr_check_step(&rec.step, e) < 0 && rh_prefix(e, "%s: line %llu", l->name, (unsigned long long)l->line_no))) {
                rc = -1;
                break;
            }
            next_index = rec.step.index + 1;
        } else {
            rc = field_fail(&c, t, "is neither \"request\" nor \"step\"", e);
            break;
        }
        int sr = s->record(s->ctx, &rec, e);
        if (sr < 0) {
            rc = -1;
            break;
        }
        if (sr > 0) {
            rc = 0;
            break;
        }
    }
    if (rc == 0 && !have_header) rc = rh_fail(e, "%s: empty file: no header line", l->name);
    tr_header_free(&h);
    jl_free(&c.j);
    free(c.hashes);
    free(c.times);
    return rc < 0 ? -1 : 0;
}
