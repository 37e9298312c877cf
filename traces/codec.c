/* codec.c — see codec.h; the byte layout is traces/FORMAT.md. */
#include "traces/codec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Times within a billion seconds (31 years) that are whole nanoseconds are
 * stored as integer deltas; the bound keeps every delta inside int64. */
#define TIME_LIMIT_NS 1000000000000000000LL

static const int64_t unit_ns[3] = {1, 1000, 1000000};

void tr_codec_init(tr_codec *c, uint32_t block_size)
{
    memset(c, 0, sizeof *c);
    c->block_size = block_size;
}

int tr_bytes_reserve(tr_bytes *b, size_t more)
{
    if (b->n + more <= b->cap) return 0;
    size_t c = b->cap ? b->cap : 4096;
    while (c < b->n + more) c *= 2;
    uint8_t *p = realloc(b->p, c);
    if (!p) return -1;
    b->p = p;
    b->cap = c;
    return 0;
}

void tr_bytes_free(tr_bytes *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static inline uint64_t zz(int64_t v)
{
    return v < 0 ? ~((uint64_t)v << 1) : (uint64_t)v << 1;
}

static inline int64_t unzz(uint64_t u)
{
    return (u & 1) ? (int64_t)~(u >> 1) : (int64_t)(u >> 1);
}

static inline unsigned bitlen(uint64_t v)
{
    return v ? 64u - (unsigned)__builtin_clzll(v) : 0u;
}

static uint64_t bits_of(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Whole nanoseconds that decode back to exactly x ((double)ns / 1e9 is what
 * the reader computes). -0.0 is not: it would come back as +0.0. */
static inline int ns_exact(double x, int64_t *ns)
{
    if (!(x > -1e9 && x < 1e9)) return 0;
    int64_t v = llround(x * 1e9);
    if ((double)v / 1e9 != x || (x == 0 && signbit(x))) return 0;
    *ns = v;
    return 1;
}

/* ---------------- encoding ---------------- */

/* Writers assume room: tr_block_enc_* reserve a record's worst case first. */
static inline void put_byte(tr_bytes *b, unsigned v)
{
    b->p[b->n++] = (uint8_t)v;
}

static inline void put_uv(tr_bytes *b, uint64_t v)
{
    uint8_t *p = b->p + b->n;
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    b->n = (size_t)(p - b->p);
}

static inline void put_bits(tr_block_enc *b, uint64_t v, unsigned k)
{
    if (k > 32) {
        put_bits(b, v & 0xffffffffu, 32);
        v >>= 32;
        k -= 32;
    }
    b->acc |= v << b->nacc;
    b->nacc += k;
    tr_bytes *s = &b->s[TR_S_BITS];
    while (b->nacc >= 8) {
        s->p[s->n++] = (uint8_t)b->acc;
        b->acc >>= 8;
        b->nacc -= 8;
    }
}

/* A value as its bit length L (one byte in its class stream) and the L-1
 * bits below the leading one (bit stream). */
static inline void put_classed(tr_block_enc *b, int stream, unsigned extra, uint64_t v)
{
    unsigned L = bitlen(v);
    put_byte(&b->s[stream], extra | L);
    if (L > 1) put_bits(b, v & ((1ULL << (L - 1)) - 1), L - 1);
}

/* A time against *base: whole-ns deltas >= 0 as class byte (unit << 6 | L)
 * with unit 0 ns, 1 us, 2 ms, the coarsest that divides the delta; other
 * times as class 0xC0 | L plus a detail byte among the varints: 4 | unit
 * for a negative delta, or 3 followed by the 8 bytes of the double. */
static void put_time(tr_block_enc *b, int64_t *base, double x)
{
    int64_t ns;
    if (!ns_exact(x, &ns)) {
        put_byte(&b->s[TR_S_TIMES], 0xC0);
        tr_bytes *v = &b->s[TR_S_VARS];
        put_byte(v, 3);
        uint64_t u = bits_of(x);
        for (int i = 0; i < 8; i++) put_byte(v, (unsigned)(u >> (8 * i)) & 0xff);
        return;
    }
    int64_t d = ns - *base;
    *base = ns;
    uint64_t m = d < 0 ? (uint64_t)0 - (uint64_t)d : (uint64_t)d;
    unsigned unit = m % 1000000 == 0 ? 2 : m % 1000 == 0 ? 1 : 0;
    m /= (uint64_t)unit_ns[unit];
    if (d >= 0) {
        put_classed(b, TR_S_TIMES, unit << 6, m);
    } else {
        put_classed(b, TR_S_TIMES, 0xC0, m);
        put_byte(&b->s[TR_S_VARS], 4 | unit);
    }
}

void tr_block_enc_init(tr_block_enc *b)
{
    memset(b, 0, sizeof *b);
}

void tr_block_enc_free(tr_block_enc *b)
{
    for (int i = 0; i < TR_STREAMS; i++) tr_bytes_free(&b->s[i]);
    memset(b, 0, sizeof *b);
}

/* Room for one record's worst case in each stream: a time is at most a
 * class byte, 9 bytes among the varints and 8 bytes of bits. */
static int reserve_record(tr_block_enc *b, size_t n_hashes, size_t n_times)
{
    size_t times = 4 + n_times;
    size_t need[TR_STREAMS] = {1, times, 1, 1, 160 + 20 * n_hashes + 9 * times, 16 + 8 * times};
    for (int i = 0; i < TR_STREAMS; i++)
        if (tr_bytes_reserve(&b->s[i], need[i]) < 0) return -1;
    return 0;
}

static int measured_present(const tr_request *r)
{
    return bits_of(r->ttft) || bits_of(r->e2e) || r->cached_tokens || r->spec_proposed || r->spec_accepted ||
           r->retractions || r->finish;
}

int tr_block_enc_request(tr_block_enc *b, tr_codec *c, const tr_request *r)
{
    if (reserve_record(b, r->n_hashes, r->n_times) < 0) return -1;
    unsigned tag = TR_TAG_REQUEST;
    if (r->id != c->next_id) tag |= TR_RQ_ID;
    if (r->session_id || r->turn) tag |= TR_RQ_SESSION;
    if (r->flags) tag |= TR_RQ_FLAGS;
    if (r->n_hashes) tag |= TR_RQ_HASHES;
    if (measured_present(r)) tag |= TR_RQ_MEASURED;
    if (r->n_times) tag |= TR_RQ_TIMES;
    tr_bytes *v = &b->s[TR_S_VARS];
    put_byte(&b->s[TR_S_TAGS], tag);
    if (tag & TR_RQ_ID) put_uv(v, zz((int64_t)(r->id - c->next_id)));
    c->next_id = r->id + 1;
    put_time(b, &c->arrival_ns, r->arrival);
    put_classed(b, TR_S_INLEN, 0, r->input_len);
    put_classed(b, TR_S_OUTLEN, 0, r->output_len);
    if (tag & TR_RQ_SESSION) {
        put_uv(v, zz((int64_t)(r->session_id - c->session)));
        c->session = r->session_id;
        put_uv(v, r->turn);
    }
    if (tag & TR_RQ_FLAGS) put_uv(v, r->flags);
    if (tag & TR_RQ_HASHES) {
        /* Runs of consecutive ids: fresh blocks get consecutive ids in
         * Mooncake-style traces, so a prompt is a few runs. A run's start is
         * a delta from one of two bases, whichever is nearer (the low bit of
         * the run length says which): the highest id so far + 1, where a
         * fresh run starts;
         * or, for the first run, the previous request's first id (a shared
         * system prompt) and for later runs the previous run's end + 1 (the
         * older blocks of a conversation, allocated in increasing order). */
        uint32_t n_runs = 1;
        for (uint32_t i = 1; i < r->n_hashes; i++) n_runs += r->hashes[i] != r->hashes[i - 1] + 1;
        put_uv(v, n_runs);
        uint64_t near = c->prev_first;
        for (uint32_t i = 0; i < r->n_hashes;) {
            uint32_t j = i + 1;
            while (j < r->n_hashes && r->hashes[j] == r->hashes[j - 1] + 1) j++;
            uint64_t za = zz((int64_t)(r->hashes[i] - c->next_fresh)), zb = zz((int64_t)(r->hashes[i] - near));
            put_uv(v, za <= zb ? za : zb);
            put_uv(v, (uint64_t)(j - i - 1) << 1 | (za > zb));
            uint64_t after = r->hashes[j - 1] + 1;
            if (after > c->next_fresh) c->next_fresh = after;
            near = after;
            i = j;
        }
        c->prev_first = r->hashes[0];
    }
    if (tag & TR_RQ_MEASURED) {
        int64_t b0 = 0, b1 = 0;
        put_time(b, &b0, r->ttft);
        put_time(b, &b1, r->e2e);
        put_uv(v, r->cached_tokens);
        put_uv(v, r->spec_proposed);
        put_uv(v, r->spec_accepted);
        put_uv(v, r->retractions);
        put_uv(v, r->finish);
    }
    if (tag & TR_RQ_TIMES) {
        int64_t t = 0;
        put_uv(v, r->n_times);
        for (uint32_t i = 0; i < r->n_times; i++) put_time(b, &t, r->token_times[i]);
    }
    b->n++;
    return 0;
}

int tr_block_enc_step(tr_block_enc *b, tr_codec *c, const tr_step *s)
{
    if (reserve_record(b, 0, 0) < 0) return -1;
    unsigned tag = TR_TAG_STEP;
    if (s->index != c->next_index) tag |= TR_ST_INDEX;
    if (s->spec_proposed || s->spec_accepted) tag |= TR_ST_SPEC;
    if (bits_of(s->sched_time)) tag |= TR_ST_SCHED;
    if (s->flags) tag |= TR_ST_FLAGS;
    if (s->retractions) tag |= TR_ST_RETRACT;
    tr_bytes *v = &b->s[TR_S_VARS];
    put_byte(&b->s[TR_S_TAGS], tag);
    if (tag & TR_ST_INDEX) put_uv(v, zz((int64_t)(s->index - c->next_index)));
    c->next_index = s->index + 1;
    put_time(b, &c->start_ns, s->start);
    put_time(b, &c->duration_ns, s->duration);
    put_uv(v, s->prefill_tokens);
    put_uv(v, s->prefill_seqs);
    put_uv(v, s->decode_seqs);
    put_uv(v, zz((int64_t)s->decode_tokens - (int64_t)s->decode_seqs));
    put_uv(v, s->prefill_context);
    put_uv(v, s->prefill_attn);
    put_uv(v, zz((int64_t)(s->decode_context - c->decode_context)));
    c->decode_context = s->decode_context;
    put_uv(v, zz((int64_t)(s->pages_used - c->pages_used)));
    c->pages_used = s->pages_used;
    put_uv(v, zz((int64_t)(s->pages_total - c->pages_total)));
    c->pages_total = s->pages_total;
    put_uv(v, s->waiting);
    put_uv(v, s->running);
    put_uv(v, s->finished);
    if (tag & TR_ST_RETRACT) put_uv(v, s->retractions);
    if (tag & TR_ST_SPEC) {
        put_uv(v, s->spec_proposed);
        put_uv(v, s->spec_accepted);
    }
    if (tag & TR_ST_SCHED) {
        int64_t t = 0;
        put_time(b, &t, s->sched_time);
    }
    if (tag & TR_ST_FLAGS) put_uv(v, s->flags);
    b->n++;
    return 0;
}

size_t tr_block_enc_size(const tr_block_enc *b)
{
    size_t n = 0;
    for (int i = 0; i < TR_STREAMS; i++) n += b->s[i].n;
    return n;
}

int tr_block_enc_finish(tr_block_enc *b, tr_bytes *head)
{
    if (b->nacc) {
        tr_bytes *s = &b->s[TR_S_BITS];
        s->p[s->n++] = (uint8_t)b->acc;   /* reserve_record left room */
        b->acc = 0;
        b->nacc = 0;
    }
    head->n = 0;
    if (tr_bytes_reserve(head, 1 + 10 * (TR_STREAMS + 1)) < 0) return -1;
    put_byte(head, TR_TAG_BLOCK);
    put_uv(head, b->n);
    for (int i = 0; i < TR_STREAMS; i++) put_uv(head, b->s[i].n);
    return 0;
}

void tr_block_enc_reset(tr_block_enc *b)
{
    for (int i = 0; i < TR_STREAMS; i++) b->s[i].n = 0;
    b->acc = 0;
    b->nacc = 0;
    b->n = 0;
}

static void put_str(tr_bytes *b, const char *s)
{
    size_t n = strlen(s);
    put_uv(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

int tr_encode_header(tr_bytes *out, const tr_header *h)
{
    size_t need = 64 + strlen(h->model) + strlen(h->hardware);
    for (uint32_t i = 0; i < h->n_kv; i++) need += 20 + strlen(h->kv[i].key) + strlen(h->kv[i].value);
    if (tr_bytes_reserve(out, need) < 0) return -1;
    put_byte(out, TR_TAG_HEADER);
    put_uv(out, TR_FORMAT_VERSION);
    put_uv(out, h->block_size);
    put_str(out, h->model);
    put_str(out, h->hardware);
    put_uv(out, h->n_kv);
    for (uint32_t i = 0; i < h->n_kv; i++) {
        put_str(out, h->kv[i].key);
        put_str(out, h->kv[i].value);
    }
    return 0;
}

int tr_encode_end(tr_bytes *out, uint64_t n_requests, uint64_t n_steps)
{
    if (tr_bytes_reserve(out, 32) < 0) return -1;
    put_byte(out, TR_TAG_END);
    put_uv(out, n_requests);
    put_uv(out, n_steps);
    return 0;
}

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
    if (tag & ~(TR_ST_INDEX | TR_ST_SPEC | TR_ST_SCHED | TR_ST_FLAGS | TR_ST_RETRACT))
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
    if ((tag & TR_TAG_KIND_MASK) == TR_TAG_REQUEST) {
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
