/* codec.h — record encoding of the binary trace format (traces/FORMAT.md).
 *
 * Internal to traces/. Records travel in blocks of up to a few thousand.
 * A block keeps each kind of value in its own stream: record tags, the
 * length classes of times, of input lengths and of output lengths (one byte
 * each: the value's bit length), every other field as varints, and one bit
 * stream with the bits below each time's and length's leading one. zstd
 * then sees the low-entropy class bytes and varints grouped and
 * entropy-codes them, while the nearly uniform low bits are stored packed;
 * together this is close to the information content of the trace.
 *
 * Both sides carry a tr_codec of delta bases (previous id, arrival, session,
 * highest block hash so far, ...) that evolves record by record in the same
 * way, which keeps the values small. */
#ifndef RH_TRACES_CODEC_H
#define RH_TRACES_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "traces/trace.h"

/* Top-level tags in the decompressed stream. */
#define TR_TAG_BLOCK       0x80u
#define TR_TAG_HEADER      0xC0u
#define TR_TAG_END         0xC1u

/* Record tags inside a block: the top two bits say the kind; the low six
 * say which optional groups follow. */
#define TR_TAG_KIND_MASK   0xC0u
#define TR_TAG_REQUEST     0x00u
#define TR_TAG_STEP        0x40u
#define TR_TAG_REQUEST_X   0x80u   /* a request with extras after its FLAGS group: version 2, a
                                          priority; version 3 on, VARS a mask of TR_RX_* then those */
#define TR_RX_PRIORITY     0x01u   /* zz(priority), nonzero */
#define TR_RX_ADAPTER      0x02u   /* adapter, nonzero */
#define TR_RX_CACHED_HOST  0x04u   /* version 4 on: cached_host, nonzero */
#define TR_RX_CACHED_STORE 0x08u   /* version 4 on: cached_storage, nonzero */

#define TR_RQ_ID       0x01u   /* id is not the previous id + 1 */
#define TR_RQ_SESSION  0x02u   /* session_id, turn */
#define TR_RQ_FLAGS    0x04u
#define TR_RQ_HASHES   0x08u
#define TR_RQ_MEASURED 0x10u   /* ttft, e2e, cached, spec, retractions, finish */
#define TR_RQ_TIMES    0x20u   /* token_times */

#define TR_ST_INDEX    0x01u   /* index is not the previous index + 1 */
#define TR_ST_SPEC     0x02u
#define TR_ST_SCHED    0x04u
#define TR_ST_FLAGS    0x08u
#define TR_ST_RETRACT  0x10u
#define TR_ST_LORA     0x20u   /* version 3: adapters, adapter_loads, adapter_tokens; version 4 on
                                  the extras group: a mask of TR_SX_* then their fields */
#define TR_SX_LORA     0x01u   /* adapters, adapter_loads, adapter_tokens */
#define TR_SX_HICACHE  0x02u   /* hicache_load_tokens, hicache_writeback_tokens, hicache_backup_tokens,
                                  hicache_storage_tokens */

enum { TR_S_TAGS, TR_S_TIMES, TR_S_INLEN, TR_S_OUTLEN, TR_S_VARS, TR_S_BITS, TR_STREAMS };

#define TR_BLOCK_MAX_RECORDS 65536u
#define TR_BLOCK_MAX_BYTES (1ull << 30)   /* far above one record at the token limits */
#define TR_MAX_STRING  (1u << 20)      /* header strings: a corrupt file cannot ask for more */
#define TR_MAX_KV      (1u << 16)

typedef struct tr_codec {
    uint32_t block_size;
    uint32_t version;           /* the file's format version (TR_TAG_REQUEST_X from 2 on, extras mask from 3) */
    uint64_t next_id;           /* previous request id + 1 */
    int64_t arrival_ns;         /* previous whole-ns arrival */
    uint64_t session;           /* previous session id */
    uint64_t next_fresh;        /* highest block hash so far + 1 */
    uint64_t prev_first;        /* first block hash of the previous request with hashes */
    uint64_t next_index;        /* previous step index + 1 */
    int64_t start_ns, duration_ns;
    uint64_t decode_context, pages_used, pages_total;
} tr_codec;

void tr_codec_init(tr_codec *c, uint32_t block_size);

typedef struct tr_bytes {
    uint8_t *p;
    size_t n, cap;
} tr_bytes;

int tr_bytes_reserve(tr_bytes *b, size_t more);   /* -1 on out of memory */
void tr_bytes_free(tr_bytes *b);

/* ---- encoding ---- */
typedef struct tr_block_enc {
    tr_bytes s[TR_STREAMS];
    uint64_t acc;               /* bit stream: pending bits, LSB first */
    unsigned nacc;
    uint32_t n;                 /* records in the block */
} tr_block_enc;

void tr_block_enc_init(tr_block_enc *b);
void tr_block_enc_free(tr_block_enc *b);
int tr_block_enc_request(tr_block_enc *b, tr_codec *c, const tr_request *r);
int tr_block_enc_step(tr_block_enc *b, tr_codec *c, const tr_step *s);
size_t tr_block_enc_size(const tr_block_enc *b);
/* Ends the block: pads the bit stream and writes the block's tag and
 * header (record count, stream lengths) into `head` (replacing its
 * contents). The block is then head followed by s[0..TR_STREAMS). */
int tr_block_enc_finish(tr_block_enc *b, tr_bytes *head);
void tr_block_enc_reset(tr_block_enc *b);
int tr_encode_header(tr_bytes *out, const tr_header *h);
int tr_encode_end(tr_bytes *out, uint64_t n_requests, uint64_t n_steps);

/* ---- decoding ---- */
enum { TR_DEC_OK = 0, TR_DEC_SHORT = 1, TR_DEC_BAD = 2 };

typedef struct tr_block_dec {
    const uint8_t *p[TR_S_BITS], *end[TR_S_BITS];
    const uint8_t *bp, *bend;   /* bit stream */
    uint64_t bits;
    unsigned nbits;
    uint32_t left;              /* records not yet decoded */
    int bad;
    const char *field;          /* where it went bad */
} tr_block_dec;

/* Growable arrays a decoded record points into (owned by the reader). */
typedef struct tr_dec_arrays {
    uint64_t *hashes;
    double *times;
    size_t hashes_cap, times_cap;
} tr_dec_arrays;

void tr_dec_arrays_free(tr_dec_arrays *a);
/* Reads a block's header at p (just after its tag). TR_DEC_SHORT when fewer
 * than the header's bytes are available; otherwise *total is the number of
 * bytes the block occupies after the tag, and the caller opens it once
 * they are all in memory. */
int tr_block_measure(const uint8_t *p, size_t avail, size_t *total, rh_err *e);
void tr_block_dec_open(tr_block_dec *d, const uint8_t *p);
/* Decodes the next record. TR_DEC_BAD with a message naming the field. */
int tr_block_dec_next(tr_block_dec *d, tr_codec *c, tr_record *rec, tr_dec_arrays *a, rh_err *e);
/* After the last record: every stream must be used up exactly. */
int tr_block_dec_done(const tr_block_dec *d, rh_err *e);

/* Header and end marker (after their tags); TR_DEC_SHORT if cut. */
typedef struct tr_dec {
    const uint8_t *p, *end;
    int status;
    const char *field;
} tr_dec;
int tr_decode_header(tr_dec *d, tr_header *h, rh_err *e);
int tr_decode_end(tr_dec *d, uint64_t *n_requests, uint64_t *n_steps, rh_err *e);

#endif
