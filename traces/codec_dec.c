/* codec_dec.c — decoding blocks, the header and the end marker (codec.h;
 * the byte layout is traces/FORMAT.md). Nothing here reads past a stream's
 * end: a block that runs out is corrupt, and says which field. */
#include "traces/codec.h"
#include "traces/codec_prim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- block decoding ---------------- */

static int dec_bad(tr_block_dec *d, const char *field)
{
    if (!d->bad) {
        d->bad = 1;
        d->field = field;
    }
    return 0;
}

static inline unsigned get_byte(tr_block_dec *d, int s, const char *field)
{
    if (d->p[s] < d->end[s]) return *d->p[s]++;
    return (unsigned)dec_bad(d, field);
}

static uint64_t get_uv_slow(tr_block_dec *d, const char *field)
{
    uint64_t v = 0;
    const uint8_t *p = d->p[TR_S_VARS], *end = d->end[TR_S_VARS];
    for (int shift = 0;; shift += 7) {
        if (p >= end || (shift == 63 && *p > 1)) return (uint64_t)dec_bad(d, field);
        uint64_t b = *p++;
        v |= (b & 0x7f) << shift;
        if (b < 0x80) break;
    }
    d->p[TR_S_VARS] = p;
    return v;
}

/* The field name only reaches the cold path; inlined, it costs nothing. */
static inline uint64_t get_uv(tr_block_dec *d, const char *field)
{
    const uint8_t *p = d->p[TR_S_VARS];
    if (d->end[TR_S_VARS] - p >= 3) {
        if (p[0] < 0x80) {
            d->p[TR_S_VARS] = p + 1;
            return p[0];
        }
        if (p[1] < 0x80) {
            d->p[TR_S_VARS] = p + 2;
            return (p[0] & 0x7fu) | (uint64_t)p[1] << 7;
        }
        if (p[2] < 0x80) {
            d->p[TR_S_VARS] = p + 3;
            return (p[0] & 0x7fu) | (uint64_t)(p[1] & 0x7f) << 7 | (uint64_t)p[2] << 14;
        }
    }
    return get_uv_slow(d, field);
}

static inline uint32_t get_u32(tr_block_dec *d, const char *field)
{
    uint64_t v = get_uv(d, field);
    if (v > UINT32_MAX) return (uint32_t)dec_bad(d, field);
    return (uint32_t)v;
}

static inline uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* k <= 56 bits, LSB first. The refill ORs in up to 8 bytes at once; bits
 * above nbits are always the true next bits, so OR-ing them again later is
 * harmless. */
static inline uint64_t get_bits56(tr_block_dec *d, unsigned k, const char *field)
{
    if (d->nbits < k) {
        if (d->bend - d->bp >= 8) {
            d->bits |= load_le64(d->bp) << d->nbits;
            unsigned take = (63 - d->nbits) >> 3;
            d->bp += take;
            d->nbits += take * 8;
        } else {
            while (d->nbits <= 56 && d->bp < d->bend) {
                d->bits |= (uint64_t)*d->bp++ << d->nbits;
                d->nbits += 8;
            }
        }
        if (d->nbits < k) return (uint64_t)dec_bad(d, field);
    }
    uint64_t v = d->bits & ((1ULL << k) - 1);
    d->bits >>= k;
    d->nbits -= k;
    return v;
}

static inline uint64_t get_bits(tr_block_dec *d, unsigned k, const char *field)
{
    if (k <= 56) return get_bits56(d, k, field);
    uint64_t lo = get_bits56(d, 32, field);
    return lo | get_bits56(d, k - 32, field) << 32;
}

static inline uint32_t get_len(tr_block_dec *d, int stream, const char *field)
{
    unsigned L = get_byte(d, stream, field);
    if (L <= 1) return L;
    if (L > 25) return (uint32_t)dec_bad(d, field);   /* above TR_MAX_TOKENS */
    return (uint32_t)((1u << (L - 1)) | get_bits56(d, L - 1, field));
}

static const uint64_t max_units[3] = {2 * TIME_LIMIT_NS, 2 * TIME_LIMIT_NS / 1000, 2 * TIME_LIMIT_NS / 1000000};

static inline double time_from(tr_block_dec *d, int64_t *base, uint64_t m, unsigned unit, int neg, const char *field)
{
    if (m > max_units[unit]) return dec_bad(d, field);
    int64_t delta = (int64_t)m * unit_ns[unit];
    int64_t ns = *base + (neg ? -delta : delta);
    if (ns > TIME_LIMIT_NS || ns < -TIME_LIMIT_NS) return dec_bad(d, field);
    *base = ns;
    return (double)ns / 1e9;
}

/* Negative deltas and raw doubles: the rare forms, kept out of line. */
static __attribute__((noinline)) double get_time_special(tr_block_dec *d, int64_t *base, unsigned L,
                                                           const char *field)
{
    unsigned detail = get_byte(d, TR_S_VARS, field);
    if (detail == 3) {
        if (L || d->end[TR_S_VARS] - d->p[TR_S_VARS] < 8) return dec_bad(d, field);
        uint64_t u = load_le64(d->p[TR_S_VARS]);
        d->p[TR_S_VARS] += 8;
        double x;
        memcpy(&x, &u, sizeof x);
        if (!isfinite(x)) return dec_bad(d, field);
        return x;
    }
    if ((detail & ~7u) || (detail & 3) == 3 || !(detail & 4) || L > 62) return dec_bad(d, field);
    uint64_t m = L ? (1ULL << (L - 1)) | get_bits(d, L - 1, field) : 0;
    return time_from(d, base, m, detail & 3, 1, field);
}

static inline __attribute__((always_inline)) double get_time(tr_block_dec *d, int64_t *base, const char *field)
{
    unsigned c = get_byte(d, TR_S_TIMES, field), L = c & 63, unit = c >> 6;
    if (unit == 3) return get_time_special(d, base, L, field);
    if (L > 62) return dec_bad(d, field);
    uint64_t m = L <= 1 ? L : (1ULL << (L - 1)) | get_bits(d, L - 1, field);
    return time_from(d, base, m, unit, 0, field);
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *n = realloc(*arr, c * elem);
    if (!n) return -1;
    *arr = n;
    *cap = c;
    return 0;
}

void tr_dec_arrays_free(tr_dec_arrays *a)
{
    free(a->hashes);
    free(a->times);
    memset(a, 0, sizeof *a);
}

static uint64_t peek_uv(const uint8_t **pp, const uint8_t *end, int *status)
{
    uint64_t v = 0;
    const uint8_t *p = *pp;
    for (int shift = 0;; shift += 7) {
        if (p >= end) {
            *status = TR_DEC_SHORT;
            return 0;
        }
        if (shift == 63 && *p > 1) {
            *status = TR_DEC_BAD;
            return 0;
        }
        uint64_t b = *p++;
        v |= (b & 0x7f) << shift;
        if (b < 0x80) break;
    }
    *pp = p;
    return v;
}

int tr_block_measure(const uint8_t *p, size_t avail, size_t *total, rh_err *e)
{
    const uint8_t *q = p, *end = p + avail;
    int st = TR_DEC_OK;
    uint64_t n = peek_uv(&q, end, &st), sum = 0;
    for (int i = 0; i < TR_STREAMS && st == TR_DEC_OK; i++) {
        uint64_t len = peek_uv(&q, end, &st);
        sum += len > TR_BLOCK_MAX_BYTES ? TR_BLOCK_MAX_BYTES + 1 : len;
    }
    if (sum > TR_BLOCK_MAX_BYTES) st = TR_DEC_BAD;
    if (st == TR_DEC_OK && (n == 0 || n > TR_BLOCK_MAX_RECORDS)) st = TR_DEC_BAD;
    if (st == TR_DEC_BAD) {
        rh_fail(e, "block header is malformed");
        return st;
    }
    if (st == TR_DEC_SHORT) return st;
    *total = (size_t)(q - p) + (size_t)sum;
    return TR_DEC_OK;
}

void tr_block_dec_open(tr_block_dec *d, const uint8_t *p)
{
    memset(d, 0, sizeof *d);
    int st = TR_DEC_OK;
    const uint8_t *far = p + ((size_t)1 << 30);   /* measured already: cannot run out */
    d->left = (uint32_t)peek_uv(&p, far, &st);
    uint64_t len[TR_STREAMS];
    for (int i = 0; i < TR_STREAMS; i++) len[i] = peek_uv(&p, far, &st);
    for (int i = 0; i < TR_S_BITS; i++) {
        d->p[i] = p;
        p += len[i];
        d->end[i] = p;
    }
    d->bp = p;
    d->bend = p + len[TR_S_BITS];
}

int tr_block_dec_done(const tr_block_dec *d, rh_err *e)
{
    for (int i = 0; i < TR_S_BITS; i++)
        if (d->p[i] != d->end[i]) return rh_fail(e, "block stream %d has %zu bytes left over", i, (size_t)(d->end[i] - d->p[i]));
    if (d->bp != d->bend || d->nbits >= 8 || (d->bits & ((1ULL << d->nbits) - 1)))
        return rh_fail(e, "block bit stream has bits left over");
    return 0;
}

static int bad_msg(tr_block_dec *d, rh_err *e, const char *fmt, const char *field)
{
    dec_bad(d, field);
    rh_fail(e, fmt, field);
    return TR_DEC_BAD;
}

static int decode_request(tr_block_dec *d, tr_codec *c, unsigned tag, tr_request *r, tr_dec_arrays *a, rh_err *e)
{
    r->id = c->next_id;
    if (tag & TR_RQ_ID) r->id += (uint64_t)unzz(get_uv(d, "id"));
    c->next_id = r->id + 1;
    r->arrival = get_time(d, &c->arrival_ns, "arrival");
    r->input_len = get_len(d, TR_S_INLEN, "input_len");
    r->output_len = get_len(d, TR_S_OUTLEN, "output_len");
    if (r->input_len > TR_MAX_TOKENS) return bad_msg(d, e, "field '%s' is above the token limit", "input_len");
    if (r->output_len > TR_MAX_TOKENS) return bad_msg(d, e, "field '%s' is above the token limit", "output_len");
    r->session_id = 0;
    r->turn = 0;
    if (tag & TR_RQ_SESSION) {
        c->session += (uint64_t)unzz(get_uv(d, "session_id"));
        r->session_id = c->session;
        r->turn = get_u32(d, "turn");
    }
    r->flags = (tag & TR_RQ_FLAGS) ? get_u32(d, "flags") : 0;
    r->priority = 0;
    r->adapter = 0;
    r->cached_host = r->cached_storage = 0;
    if ((tag & TR_TAG_KIND_MASK) == TR_TAG_REQUEST_X) {
        /* Version 2 knows one extra, the priority; from 3 a mask says which. */
        uint64_t extras = c->version >= 3 ? get_uv(d, "extras") : TR_RX_PRIORITY;
        if (d->bad) return TR_DEC_BAD;
        uint64_t known = TR_RX_PRIORITY | TR_RX_ADAPTER | (c->version >= 4 ? TR_RX_CACHED_HOST | TR_RX_CACHED_STORE : 0);
        if (!extras || (extras & ~known))
            return bad_msg(d, e, "field '%s' is empty or names an unknown field", "extras");
        if (extras & TR_RX_PRIORITY) {
            int64_t p = unzz(get_uv(d, "priority"));
            if (p == 0 || p < INT32_MIN || p > INT32_MAX)
                return bad_msg(d, e, "field '%s' is 0 or outside 32 bits", "priority");
            r->priority = (int32_t)p;
        }
        if (extras & TR_RX_ADAPTER) {
            uint64_t a = get_uv(d, "adapter");
            if (a == 0 || a > UINT32_MAX) return bad_msg(d, e, "field '%s' is 0 or outside 32 bits", "adapter");
            r->adapter = (uint32_t)a;
        }
        if (extras & TR_RX_CACHED_HOST) {
            uint64_t h = get_uv(d, "cached_host");
            if (h == 0 || h > UINT32_MAX) return bad_msg(d, e, "field '%s' is 0 or outside 32 bits", "cached_host");
            r->cached_host = (uint32_t)h;
        }
        if (extras & TR_RX_CACHED_STORE) {
            uint64_t h = get_uv(d, "cached_storage");
            if (h == 0 || h > UINT32_MAX) return bad_msg(d, e, "field '%s' is 0 or outside 32 bits", "cached_storage");
            r->cached_storage = (uint32_t)h;
        }
    }
    r->n_hashes = 0;
    r->hashes = NULL;
    if (tag & TR_RQ_HASHES) {
        uint64_t n_runs = get_uv(d, "hashes");
        /* At most ceil(input_len / block_size) hashes, tested as
         * (n - 1) * block_size < input_len: no division per request. */
        uint64_t bs = c->block_size, in = r->input_len;
        uint32_t n = 0;
        if (d->bad) return TR_DEC_BAD;
        if (n_runs == 0 || n_runs > TR_MAX_TOKENS || !bs || (n_runs - 1) * bs >= in)
            return bad_msg(d, e, "field '%s': more block hashes than the prompt has blocks", "hashes");
        if (!a->hashes_cap && grow((void **)&a->hashes, &a->hashes_cap, 4096, sizeof *a->hashes) < 0)
            return bad_msg(d, e, "out of memory decoding field '%s'", "hashes");
        uint64_t near = c->prev_first;
        for (uint64_t k = 0; k < n_runs && !d->bad; k++) {
            uint64_t delta = (uint64_t)unzz(get_uv(d, "hashes")), v = get_uv(d, "hashes");
            uint64_t start = ((v & 1) ? near : c->next_fresh) + delta, len = (v >> 1) + 1;
            if (d->bad) break;
            if (len > TR_MAX_TOKENS || (n + len - 1) * bs >= in)
                return bad_msg(d, e, "field '%s': more block hashes than the prompt has blocks", "hashes");
            if (n + len > a->hashes_cap && grow((void **)&a->hashes, &a->hashes_cap, n + len, sizeof *a->hashes) < 0)
                return bad_msg(d, e, "out of memory decoding field '%s'", "hashes");
            uint64_t *h = a->hashes + n, i = 0;
            for (; i + 4 <= len; i += 4) {
                h[i] = start + i;
                h[i + 1] = start + i + 1;
                h[i + 2] = start + i + 2;
                h[i + 3] = start + i + 3;
            }
            for (; i < len; i++) h[i] = start + i;
            n += (uint32_t)len;
            uint64_t after = start + len;
            if (after > c->next_fresh) c->next_fresh = after;
            near = after;
        }
        if (n) c->prev_first = a->hashes[0];
        r->n_hashes = n;
        r->hashes = a->hashes;
    }
    r->ttft = r->e2e = 0;
    r->cached_tokens = r->spec_proposed = r->spec_accepted = r->retractions = 0;
    r->finish = 0;
    if (tag & TR_RQ_MEASURED) {
        int64_t b0 = 0, b1 = 0;
        r->ttft = get_time(d, &b0, "ttft");
        r->e2e = get_time(d, &b1, "e2e");
        r->cached_tokens = get_u32(d, "cached_tokens");
        r->spec_proposed = get_u32(d, "spec_proposed");
        r->spec_accepted = get_u32(d, "spec_accepted");
        r->retractions = get_u32(d, "retractions");
        uint64_t f = get_uv(d, "finish");
        if (f > TR_FINISH_ERROR) return bad_msg(d, e, "field '%s' is not a finish reason", "finish");
        r->finish = (uint8_t)f;
    }
    r->n_times = 0;
    r->token_times = NULL;
    if (tag & TR_RQ_TIMES) {
        uint64_t n = get_uv(d, "token_times");
        if (d->bad) return TR_DEC_BAD;
        if (n == 0 || n > r->output_len)
            return bad_msg(d, e, "field '%s': more token times than output tokens", "token_times");
        if (grow((void **)&a->times, &a->times_cap, n, sizeof *a->times) < 0)
            return bad_msg(d, e, "out of memory decoding field '%s'", "token_times");
        int64_t t = 0;
        for (uint64_t i = 0; i < n && !d->bad; i++) a->times[i] = get_time(d, &t, "token_times");
        r->n_times = (uint32_t)n;
        r->token_times = a->times;
    }
    return d->bad ? TR_DEC_BAD : TR_DEC_OK;
}

static int decode_step(tr_block_dec *d, tr_codec *c, unsigned tag, tr_step *st, rh_err *e)
{
    if (tag & ~(TR_ST_INDEX | TR_ST_SPEC | TR_ST_SCHED | TR_ST_FLAGS | TR_ST_RETRACT | (c->version >= 3 ? TR_ST_LORA : 0)))
        return bad_msg(d, e, "unknown step tag bits (field '%s')", "tag");
    st->index = c->next_index;
    if (tag & TR_ST_INDEX) st->index += (uint64_t)unzz(get_uv(d, "index"));
    c->next_index = st->index + 1;
    st->start = get_time(d, &c->start_ns, "start");
    st->duration = get_time(d, &c->duration_ns, "duration");
    st->prefill_tokens = get_u32(d, "prefill_tokens");
    st->prefill_seqs = get_u32(d, "prefill_seqs");
    st->decode_seqs = get_u32(d, "decode_seqs");
    int64_t dt = (int64_t)st->decode_seqs + unzz(get_uv(d, "decode_tokens"));
    if (dt < 0 || dt > (int64_t)UINT32_MAX) return bad_msg(d, e, "field '%s' is out of range", "decode_tokens");
    st->decode_tokens = (uint32_t)dt;
    st->prefill_context = get_uv(d, "prefill_context");
    st->prefill_attn = get_uv(d, "prefill_attn");
    c->decode_context += (uint64_t)unzz(get_uv(d, "decode_context"));
    st->decode_context = c->decode_context;
    c->pages_used += (uint64_t)unzz(get_uv(d, "pages_used"));
    c->pages_total += (uint64_t)unzz(get_uv(d, "pages_total"));
    if (c->pages_used > UINT32_MAX || c->pages_total > UINT32_MAX)
        return bad_msg(d, e, "field '%s' is out of range", "pages_used");
    st->pages_used = (uint32_t)c->pages_used;
    st->pages_total = (uint32_t)c->pages_total;
    st->waiting = get_u32(d, "waiting");
    st->running = get_u32(d, "running");
    st->finished = get_u32(d, "finished");
    st->retractions = (tag & TR_ST_RETRACT) ? get_u32(d, "retractions") : 0;
    st->adapters = st->adapter_loads = st->adapter_tokens = 0;
    st->hicache_load_tokens = st->hicache_writeback_tokens = st->hicache_backup_tokens = st->hicache_storage_tokens = 0;
    if (tag & TR_ST_LORA) {
        /* Version 3 knows one extra group, LoRA's; from 4 a mask says which. */
        uint64_t extras = c->version >= 4 ? get_uv(d, "extras") : TR_SX_LORA;
        if (d->bad) return TR_DEC_BAD;
        if (!extras || (extras & ~(uint64_t)(TR_SX_LORA | TR_SX_HICACHE)))
            return bad_msg(d, e, "field '%s' is empty or names an unknown field", "step extras");
        if (extras & TR_SX_LORA) {
            st->adapters = get_u32(d, "adapters");
            st->adapter_loads = get_u32(d, "adapter_loads");
            st->adapter_tokens = get_u32(d, "adapter_tokens");
        }
        if (extras & TR_SX_HICACHE) {
            st->hicache_load_tokens = get_u32(d, "hicache_load_tokens");
            st->hicache_writeback_tokens = get_u32(d, "hicache_writeback_tokens");
            st->hicache_backup_tokens = get_u32(d, "hicache_backup_tokens");
            st->hicache_storage_tokens = get_u32(d, "hicache_storage_tokens");
        }
    }
    st->spec_proposed = st->spec_accepted = 0;
    if (tag & TR_ST_SPEC) {
        st->spec_proposed = get_u32(d, "spec_proposed");
        st->spec_accepted = get_u32(d, "spec_accepted");
    }
    st->sched_time = 0;
    if (tag & TR_ST_SCHED) {
        int64_t t = 0;
        st->sched_time = get_time(d, &t, "sched_time");
    }
    st->flags = (tag & TR_ST_FLAGS) ? get_u32(d, "flags") : 0;
    return d->bad ? TR_DEC_BAD : TR_DEC_OK;
}

int tr_block_dec_next(tr_block_dec *d, tr_codec *c, tr_record *rec, tr_dec_arrays *a, rh_err *e)
{
    if (e) e->msg[0] = '\0';
    unsigned tag = get_byte(d, TR_S_TAGS, "tag");
    int st;
    if ((tag & TR_TAG_KIND_MASK) == TR_TAG_REQUEST ||
        ((tag & TR_TAG_KIND_MASK) == TR_TAG_REQUEST_X && c->version >= 2)) {
        rec->kind = TR_REQUEST;
        st = decode_request(d, c, tag, &rec->req, a, e);
    } else if ((tag & TR_TAG_KIND_MASK) == TR_TAG_STEP) {
        rec->kind = TR_STEP;
        st = decode_step(d, c, tag & ~TR_TAG_KIND_MASK, &rec->step, e);
    } else {
        dec_bad(d, "tag");
        return rh_fail(e, "unknown record tag 0x%02x", tag), TR_DEC_BAD;
    }
    if (st == TR_DEC_BAD && e && !e->msg[0])
        rh_fail(e, "field '%s' is malformed (corrupt data)", d->field ? d->field : "?");
    d->left--;
    return st;
}

/* ---------------- header and end marker ---------------- */

static uint64_t hget_uv(tr_dec *d, const char *field)
{
    if (d->status) return 0;
    int st = TR_DEC_OK;
    uint64_t v = peek_uv(&d->p, d->end, &st);
    if (st) {
        d->status = st;
        d->field = field;
    }
    return v;
}

static char *hget_str(tr_dec *d, const char *field)
{
    uint64_t n = hget_uv(d, field);
    if (d->status) return NULL;
    if (n > TR_MAX_STRING) d->status = TR_DEC_BAD;
    else if ((uint64_t)(d->end - d->p) < n) d->status = TR_DEC_SHORT;
    else if (memchr(d->p, '\0', n)) d->status = TR_DEC_BAD;
    if (d->status) {
        d->field = field;
        return NULL;
    }
    char *s = malloc(n + 1);
    if (!s) {
        d->status = TR_DEC_BAD;
        d->field = field;
        return NULL;
    }
    memcpy(s, d->p, n);
    s[n] = '\0';
    d->p += n;
    return s;
}

int tr_decode_header(tr_dec *d, tr_header *h, rh_err *e)
{
    rh_err_clear(e);
    tr_header_free(h);
    tr_header_init(h);
    uint64_t version = hget_uv(d, "version");
    if (!d->status && (version == 0 || version > TR_FORMAT_VERSION)) {
        d->status = TR_DEC_BAD;
        rh_fail(e, "header: field 'version' is %llu; this build reads version %d (written by a newer rehearse?)",
                (unsigned long long)version, TR_FORMAT_VERSION);
        return d->status;
    }
    h->version = (uint32_t)version;
    uint64_t bs = hget_uv(d, "block_size");
    if (!d->status && bs > TR_MAX_TOKENS) {
        d->status = TR_DEC_BAD;
        d->field = "block_size";
    }
    h->block_size = (uint32_t)bs;
    char *s = hget_str(d, "model");
    if (s) free(h->model), h->model = s;
    s = hget_str(d, "hardware");
    if (s) free(h->hardware), h->hardware = s;
    uint64_t n_kv = hget_uv(d, "config");
    if (!d->status && n_kv > TR_MAX_KV) {
        d->status = TR_DEC_BAD;
        d->field = "config";
    }
    for (uint64_t i = 0; i < n_kv && !d->status; i++) {
        char *k = hget_str(d, "config"), *v = hget_str(d, "config");
        if (k && v && tr_header_set(h, k, v) < 0) {
            d->status = TR_DEC_BAD;
            d->field = "config";
        }
        free(k);
        free(v);
    }
    if (d->status == TR_DEC_BAD && e && !e->msg[0])
        rh_fail(e, "header: field '%s' is malformed", d->field ? d->field : "?");
    return d->status;
}

int tr_decode_end(tr_dec *d, uint64_t *n_requests, uint64_t *n_steps, rh_err *e)
{
    rh_err_clear(e);
    *n_requests = hget_uv(d, "end.requests");
    *n_steps = hget_uv(d, "end.steps");
    if (d->status == TR_DEC_BAD) rh_fail(e, "end-of-trace marker is malformed");
    return d->status;
}
