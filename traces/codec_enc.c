/* codec_enc.c — encoding records into blocks (codec.h; the byte layout is
 * traces/FORMAT.md). */
#include "traces/codec.h"
#include "traces/codec_prim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void tr_codec_init(tr_codec *c, uint32_t block_size)
{
    memset(c, 0, sizeof *c);
    c->block_size = block_size;
    c->version = TR_FORMAT_VERSION;
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
    unsigned extras = (r->priority ? TR_RX_PRIORITY : 0) | (r->adapter ? TR_RX_ADAPTER : 0) |
                      (r->cached_host ? TR_RX_CACHED_HOST : 0) | (r->cached_storage ? TR_RX_CACHED_STORE : 0);
    unsigned tag = extras ? TR_TAG_REQUEST_X : TR_TAG_REQUEST;
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
    if (extras) {
        put_uv(v, extras);
        if (r->priority) put_uv(v, zz(r->priority));
        if (r->adapter) put_uv(v, r->adapter);
        if (r->cached_host) put_uv(v, r->cached_host);
        if (r->cached_storage) put_uv(v, r->cached_storage);
    }
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
    unsigned extras = (s->adapters || s->adapter_loads || s->adapter_tokens ? TR_SX_LORA : 0) |
                      (s->hicache_load_tokens || s->hicache_writeback_tokens || s->hicache_backup_tokens ||
                               s->hicache_storage_tokens
                           ? TR_SX_HICACHE : 0);
    if (extras) tag |= TR_ST_LORA;
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
    if (extras) {
        put_uv(v, extras);
        if (extras & TR_SX_LORA) {
            put_uv(v, s->adapters);
            put_uv(v, s->adapter_loads);
            put_uv(v, s->adapter_tokens);
        }
        if (extras & TR_SX_HICACHE) {
            put_uv(v, s->hicache_load_tokens);
            put_uv(v, s->hicache_writeback_tokens);
            put_uv(v, s->hicache_backup_tokens);
            put_uv(v, s->hicache_storage_tokens);
        }
    }
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
