/* reader.c — streaming trace reader (see trace.h for the contract).
 *
 * The zstd frames are decompressed into one buffer that is refilled when
 * fewer than AHEAD bytes are left. Records come in blocks (traces/codec.h);
 * a block is decoded straight from the buffer once all of it is there, so
 * memory is bounded by the largest block, not by the file. */
#include "traces/codec.h"
#include "traces/trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define BUF_INIT (1u << 20)
#define AHEAD (64u << 10)

struct tr_reader {
    FILE *f;
    char *name;
    ZSTD_DCtx *dctx;
    uint8_t *in;                 /* file bytes (owned), or the caller's memory */
    size_t in_cap;
    ZSTD_inBuffer zin;
    int in_eof, frame_open, stream_end;
    uint64_t file_off;           /* compressed bytes consumed, after the magic */
    uint8_t *buf;                /* decompressed bytes [pos, len) not yet decoded */
    size_t pos, len, cap;
    size_t ahead;                /* refill when fewer bytes than this are left */
    tr_header header;
    tr_codec codec;
    tr_dec_arrays arrays;
    tr_block_dec blk;            /* the block being served */
    size_t block_total;          /* its bytes from its tag on */
    int in_block;
    uint64_t n_records, n_requests, n_steps;
    int ended, truncated, failed;
    int pending;                 /* the compressed stream broke: pend is reported once */
    rh_err pend;                 /* the records decoded before it are served first */
    rh_err err;                  /* scratch for decoder messages */
};

/* A broken compressed stream ends the data; the records already
 * decompressed are still served, then the error is reported. */
static void stream_broke(tr_reader *r)
{
    r->pending = 1;
    r->stream_end = 1;
}

/* At the start of a frame, at least 5 of its bytes in zin (the magic and
 * the descriptor), unless the input ends first: a file's bytes are moved to
 * the front of the buffer and topped up. */
static int frame_start_bytes(tr_reader *r, rh_err *e)
{
    while (r->zin.size - r->zin.pos < 5 && r->f && !r->in_eof) {
        size_t left = r->zin.size - r->zin.pos;
        memmove(r->in, (const uint8_t *)r->zin.src + r->zin.pos, left);
        size_t n = fread(r->in + left, 1, r->in_cap - left, r->f);
        if (n == 0) {
            if (ferror(r->f)) return rh_fail(e, "%s: read error: %s", r->name, strerror(errno));
            r->in_eof = 1;
        }
        r->zin = (ZSTD_inBuffer){r->in, left + n, 0};
    }
    return 0;
}

/* Every frame of ours carries a content checksum (FORMAT.md), so a frame
 * without one was not written by us, or was rewritten: refused, as data a
 * flipped bit could have changed unnoticed. The descriptor's bit 2 says. */
static int frame_checked(tr_reader *r)
{
    const uint8_t *p = (const uint8_t *)r->zin.src + r->zin.pos;
    size_t n = r->zin.size - r->zin.pos;
    if (n < 5 || p[0] != 0x28 || p[1] != 0xB5 || p[2] != 0x2F || p[3] != 0xFD) return 1;   /* zstd tells the rest */
    if (p[4] & 0x04) return 1;
    rh_fail(&r->pend, "%s: the zstd frame at byte %llu has no content checksum (traces/FORMAT.md: every frame carries "
                      "one); not a trace written by rehearse, or rewritten",
            r->name, (unsigned long long)(r->file_off + TR_MAGIC_LEN));
    stream_broke(r);
    return 0;
}

/* Decompresses until the buffer is full or the stream ends. When `need`
 * undecoded bytes would not fit, the buffer doubles once per call: callers
 * loop, so memory follows the data actually there, never a size a corrupt
 * block header claims. */
static int fill(tr_reader *r, size_t need, rh_err *e)
{
    if (r->pos) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    if (need > r->cap) {
        size_t c = r->cap * 2;
        uint8_t *b = realloc(r->buf, c);
        if (!b) return rh_fail(e, "%s: out of memory", r->name);
        r->buf = b;
        r->cap = c;
    }
    while (r->len < r->cap && !r->stream_end) {
        if (r->zin.pos == r->zin.size && !r->in_eof) {
            size_t n = r->f ? fread(r->in, 1, r->in_cap, r->f) : 0;
            if (n == 0) {
                if (r->f && ferror(r->f)) return rh_fail(e, "%s: read error: %s", r->name, strerror(errno));
                r->in_eof = 1;
            }
            r->zin = (ZSTD_inBuffer){r->in, n, 0};
        }
        if (r->zin.pos == r->zin.size && r->in_eof && !r->frame_open) {
            r->stream_end = 1;
            break;
        }
        if (!r->frame_open && r->zin.pos < r->zin.size) {
            if (frame_start_bytes(r, e) < 0) return -1;
            if (!frame_checked(r)) break;
        }
        size_t len0 = r->len, in0 = r->zin.pos;
        ZSTD_outBuffer out = {r->buf, r->cap, r->len};
        size_t ret = ZSTD_decompressStream(r->dctx, &out, &r->zin);
        if (ZSTD_isError(ret)) {
            rh_fail(&r->pend, "%s: corrupt zstd data near byte %llu: %s", r->name,
                    (unsigned long long)(r->file_off + TR_MAGIC_LEN), ZSTD_getErrorName(ret));
            stream_broke(r);
            break;
        }
        r->len = out.pos;
        r->file_off += r->zin.pos - in0;
        r->frame_open = ret != 0;
        if (r->len == len0 && r->zin.pos == r->zin.size && r->in_eof && r->frame_open) {
            rh_fail(&r->pend, "%s: truncated zstd frame: the file ends at byte %llu inside a frame", r->name,
                    (unsigned long long)(r->file_off + TR_MAGIC_LEN));
            stream_broke(r);
            break;
        }
        if (r->len == len0 && r->zin.pos == in0 && r->zin.pos < r->zin.size) {
            rh_fail(&r->pend, "%s: zstd made no progress near byte %llu", r->name,
                    (unsigned long long)(r->file_off + TR_MAGIC_LEN));
            stream_broke(r);
            break;
        }
    }
    return 0;
}

static int fail(tr_reader *r, rh_err *e)
{
    r->failed = 1;
    (void)e;
    return -1;
}

static int read_header(tr_reader *r, rh_err *e)
{
    for (size_t need = r->ahead;; need *= 2) {
        if (fill(r, need, e) < 0) return -1;
        if (r->len == 0 && r->pending) return rh_fail(e, "%s", r->pend.msg);
        if (r->len == 0) return rh_fail(e, "%s: empty trace: no header record", r->name);
        if (r->buf[0] != TR_TAG_HEADER)
            return rh_fail(e, "%s: record 0: the first record is not a header (tag 0x%02x)", r->name, r->buf[0]);
        tr_dec d = {r->buf + 1, r->buf + r->len, TR_DEC_OK, NULL};
        int st = tr_decode_header(&d, &r->header, &r->err);
        if (st == TR_DEC_OK) {
            r->pos = (size_t)(d.p - r->buf);
            tr_codec_init(&r->codec, r->header.block_size);
            r->codec.version = r->header.version;
            return 0;
        }
        if (st == TR_DEC_BAD) return rh_fail(e, "%s: %s", r->name, r->err.msg);
        if (r->stream_end && r->pending) return rh_fail(e, "%s", r->pend.msg);
        if (r->stream_end)
            return rh_fail(e, "%s: header: cut short in field '%s'", r->name, d.field ? d.field : "?");
    }
}

static tr_reader *open_common(tr_reader *r, rh_err *e)
{
    tr_header_init(&r->header);
    r->dctx = ZSTD_createDCtx();
    /* Our writer's frames use windows of a few MiB; refuse a (corrupt or
     * hostile) frame that asks the decoder for more than 32 MiB. */
    if (r->dctx) ZSTD_DCtx_setParameter(r->dctx, ZSTD_d_windowLogMax, 25);
    /* A trace in memory is usually small (tests, fuzzing): start small. */
    r->ahead = r->f ? AHEAD : 4096;
    r->cap = r->f ? BUF_INIT : 2 * r->ahead;
    r->buf = malloc(r->cap);
    if (!r->dctx || !r->buf || !r->name) {
        rh_fail(e, "%s: out of memory", r->name ? r->name : "trace");
        tr_reader_close(r);
        return NULL;
    }
    if (read_header(r, e) < 0) {
        tr_reader_close(r);
        return NULL;
    }
    return r;
}

static int check_magic(const char *name, const uint8_t *m, size_t n, rh_err *e)
{
    if (n == 0) return rh_fail(e, "%s: empty file", name);
    if (n >= TR_MAGIC_LEN && !memcmp(m, TR_MAGIC, TR_MAGIC_LEN)) return 0;
    if (n >= TR_MAGIC_LEN && !memcmp(m, TR_MAGIC, TR_MAGIC_LEN - 1))
        return rh_fail(e, "%s: byte 7: trace format '%.8s' is not supported by this build (it reads %s)", name,
                       (const char *)m, TR_MAGIC);
    return rh_fail(e, "%s: byte 0: wrong magic: not a rehearse trace (expected \"%s\")", name, TR_MAGIC);
}

tr_reader *tr_reader_open(const char *path, rh_err *e)
{
    errno = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    return tr_reader_open_stream(f, path, e);
}

tr_reader *tr_reader_open_stream(FILE *f, const char *path, rh_err *e)
{
    uint8_t magic[TR_MAGIC_LEN];
    size_t n = fread(magic, 1, sizeof magic, f);
    if (check_magic(path, magic, n, e) < 0) {
        fclose(f);
        return NULL;
    }
    tr_reader *r = calloc(1, sizeof *r);
    if (!r) {
        fclose(f);
        rh_fail(e, "%s: out of memory", path);
        return NULL;
    }
    r->f = f;
    r->name = strdup(path);
    r->in_cap = ZSTD_DStreamInSize() * 4;
    r->in = malloc(r->in_cap);
    if (!r->in) {
        rh_fail(e, "%s: out of memory", path);
        tr_reader_close(r);
        return NULL;
    }
    return open_common(r, e);
}

tr_reader *tr_reader_open_mem(const void *data, size_t n, const char *name, rh_err *e)
{
    if (check_magic(name, data, n, e) < 0) return NULL;
    tr_reader *r = calloc(1, sizeof *r);
    if (!r) {
        rh_fail(e, "%s: out of memory", name);
        return NULL;
    }
    r->name = strdup(name);
    r->zin = (ZSTD_inBuffer){(const uint8_t *)data + TR_MAGIC_LEN, n - TR_MAGIC_LEN, 0};
    r->in_eof = 1;
    return open_common(r, e);
}

const tr_header *tr_reader_header(const tr_reader *r)
{
    return &r->header;
}

static int at_end(tr_reader *r, rh_err *e)
{
    tr_dec d = {r->buf + r->pos + 1, r->buf + r->len, TR_DEC_OK, NULL};
    uint64_t nq, ns;
    int st = tr_decode_end(&d, &nq, &ns, &r->err);
    if (st == TR_DEC_SHORT && !r->stream_end) return TR_DEC_SHORT;
    if (st != TR_DEC_OK && r->pending) return rh_fail(e, "%s", r->pend.msg);
    if (st != TR_DEC_OK)
        return rh_fail(e, "%s: record %llu: end-of-trace marker is malformed", r->name,
                       (unsigned long long)r->n_records + 1);
    if (nq != r->n_requests || ns != r->n_steps)
        return rh_fail(e, "%s: end-of-trace marker counts %llu requests and %llu steps but the file holds %llu and %llu",
                       r->name, (unsigned long long)nq, (unsigned long long)ns, (unsigned long long)r->n_requests,
                       (unsigned long long)r->n_steps);
    r->pos = (size_t)(d.p - r->buf);
    if (fill(r, 1, e) < 0) return -1;
    if (r->pending) return rh_fail(e, "%s", r->pend.msg);
    if (r->pos < r->len)
        return rh_fail(e, "%s: data after the end-of-trace marker (record %llu)", r->name,
                       (unsigned long long)r->n_records + 1);
    r->ended = 1;
    return 0;
}

static const char *kind_name(const tr_record *rec)
{
    return rec->kind == TR_REQUEST ? "request" : "step";
}

/* Serves the next record of the open block; 0 when it is used up. */
static int next_in_block(tr_reader *r, tr_record *rec, rh_err *e)
{
    if (r->blk.left) {
        if (tr_block_dec_next(&r->blk, &r->codec, rec, &r->arrays, &r->err) != TR_DEC_OK)
            return rh_fail(e, "%s: record %llu (%s): %s", r->name, (unsigned long long)r->n_records + 1, kind_name(rec),
                           r->err.msg);
        r->n_records++;
        if (rec->kind == TR_REQUEST) r->n_requests++;
        else r->n_steps++;
        return 1;
    }
    if (tr_block_dec_done(&r->blk, &r->err) < 0)
        return rh_fail(e, "%s: the block ending at record %llu is corrupt: %s", r->name,
                       (unsigned long long)r->n_records, r->err.msg);
    r->pos += r->block_total;
    r->in_block = 0;
    return 0;
}

/* The data ran out inside something: report the broken stream if that is
 * why, else the cut. */
static int cut_short(tr_reader *r, const char *what, rh_err *e)
{
    if (r->pending) return rh_fail(e, "%s (after record %llu)", r->pend.msg, (unsigned long long)r->n_records);
    return rh_fail(e, "%s: record %llu: cut short in %s (the last frame ends mid-block)", r->name,
                   (unsigned long long)r->n_records + 1, what);
}

int tr_reader_next(tr_reader *r, tr_record *rec, rh_err *e)
{
    if (r->failed) return rh_fail(e, "%s: reader already failed", r->name);
    if (r->ended) return 0;
    size_t need = r->ahead;
    for (;;) {
        if (r->in_block) {
            int rc = next_in_block(r, rec, e);
            if (rc) return rc > 0 ? 1 : fail(r, e);
        }
        if (r->len - r->pos < need && !r->stream_end && fill(r, need, e) < 0) return fail(r, e);
        if (r->pos == r->len) {
            if (r->pending) {
                rh_fail(e, "%s (after record %llu)", r->pend.msg, (unsigned long long)r->n_records);
                return fail(r, e);
            }
            /* Ended at a frame boundary without the marker: cut short. */
            r->truncated = 1;
            r->ended = 1;
            return 0;
        }
        unsigned tag = r->buf[r->pos];
        if (tag == TR_TAG_BLOCK) {
            size_t total = 0, avail = r->len - r->pos - 1;
            int st = tr_block_measure(r->buf + r->pos + 1, avail, &total, &r->err);
            if (st == TR_DEC_BAD) {
                rh_fail(e, "%s: record %llu: %s", r->name, (unsigned long long)r->n_records + 1, r->err.msg);
                return fail(r, e);
            }
            if (st == TR_DEC_SHORT || total > avail) {
                if (r->stream_end) {
                    cut_short(r, "a block", e);
                    return fail(r, e);
                }
                need = (st == TR_DEC_SHORT ? avail + 64 : total) + 1;
                continue;
            }
            tr_block_dec_open(&r->blk, r->buf + r->pos + 1);
            r->block_total = total + 1;
            r->in_block = 1;
            need = r->ahead;
            continue;
        }
        if (tag == TR_TAG_END) {
            int st = at_end(r, e);
            if (st == 0) return 0;
            if (st < 0) return fail(r, e);
            need = (r->len - r->pos) * 2 + 16;
            continue;
        }
        if (tag == TR_TAG_HEADER)
            rh_fail(e, "%s: record %llu: a second header record", r->name, (unsigned long long)r->n_records + 1);
        else
            rh_fail(e, "%s: record %llu: unknown tag 0x%02x (corrupt, or written by a newer rehearse)", r->name,
                    (unsigned long long)r->n_records + 1, tag);
        return fail(r, e);
    }
}

int tr_reader_truncated(const tr_reader *r)
{
    return r->truncated;
}

uint64_t tr_reader_record_index(const tr_reader *r)
{
    return r->n_records ? r->n_records - 1 : 0;
}

uint64_t tr_reader_offset(const tr_reader *r)
{
    return r->file_off + TR_MAGIC_LEN;
}

void tr_reader_close(tr_reader *r)
{
    if (!r) return;
    if (r->f) fclose(r->f);
    ZSTD_freeDCtx(r->dctx);
    free(r->in);
    free(r->buf);
    free(r->name);
    tr_header_free(&r->header);
    tr_dec_arrays_free(&r->arrays);
    free(r);
}
