/* writer.c — streaming trace writer (see trace.h for the contract).
 *
 * Records are encoded into a block (traces/codec.h); a full block is fed
 * to one zstd stream, stream by stream, so memory stays constant.
 * In live mode the compressed bytes of the current frame are held until the
 * frame ends and then written with one unbuffered fwrite, so the file on disk
 * only ever grows by whole frames and a killed recorder leaves a readable
 * file. A write that fails part way (a full disk, a file-size limit) is cut
 * off again, the writer stops writing, and the file keeps every frame before
 * it: closing a live writer that failed leaves that file as it is.
 *
 * A PATH that exists and is not a regular file (a device such as /dev/full
 * or /dev/null, a FIFO) is written in place and never renamed over or
 * removed: as root, a temporary file renamed onto /dev/null would replace
 * the device. */
#include "traces/codec.h"
#include "traces/trace.h"
#include "util/atomic_file.h"
#include "util/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define CHUNK (256u << 10)
#define LEVEL 6
#define BLOCK_RECORDS 16384u
#define BLOCK_BYTES (512u << 10)
#define LIVE_FLUSH_SECONDS 1.0

struct tr_writer {
    FILE *f;
    char *path;
    rh_atomic_file af;           /* not live: written whole or not at all (af.path set) */
    unsigned flags;
    ZSTD_CCtx *cctx;
    tr_block_enc blk;            /* the block being filled */
    tr_bytes pend;               /* header and end marker bytes to compress */
    tr_bytes head;               /* a finished block's header */
    uint8_t *out;                /* zstd output staging */
    size_t out_cap;
    uint8_t *frame;              /* live: the current frame's compressed bytes */
    size_t frame_len, frame_cap;
    tr_codec codec;
    uint64_t n_requests, n_steps;
    double last_flush;
    int special;                 /* PATH is not a regular file: written in place, never removed */
    int broken;                  /* live: a write failed; nothing more is written */
    uint64_t good;               /* live: bytes on disk up to the end of the last whole frame */
    char broken_why[200];
};

static int io_fail(tr_writer *w, rh_err *e, const char *what)
{
    return rh_fail(e, "%s: %s: %s", w->path, what, strerror(errno ? errno : EIO));
}

/* Live mode: the finished frame to disk, whole or not at all. */
static int write_frame(tr_writer *w, rh_err *e)
{
    if (w->frame_len && fwrite(w->frame, 1, w->frame_len, w->f) != w->frame_len) {
        int err = errno ? errno : EIO;
        /* Cut the partial frame off so the file still ends where a frame
         * does (a reader then says it was cut short); a device has no
         * length to cut. */
        if (!w->special && ftruncate(fileno(w->f), (off_t)w->good) != 0) {}
        w->broken = 1;
        snprintf(w->broken_why, sizeof w->broken_why, "%s", strerror(err));
        return rh_fail(e, "%s: write failed: %s; the file keeps the %llu bytes written before", w->path,
                       w->broken_why, (unsigned long long)w->good);
    }
    w->good += w->frame_len;
    w->frame_len = 0;
    return 0;
}

static int broken(const tr_writer *w, rh_err *e)
{
    return rh_fail(e, "%s: the recording stopped after a write error (%s); the file keeps the %llu bytes written before",
                   w->path, w->broken_why, (unsigned long long)w->good);
}

static int emit(tr_writer *w, const uint8_t *p, size_t n, rh_err *e)
{
    if (!n) return 0;
    if (!(w->flags & TR_WRITE_LIVE)) {
        if (fwrite(p, 1, n, w->f) != n) return io_fail(w, e, "write failed");
        return 0;
    }
    if (w->frame_len + n > w->frame_cap) {
        size_t c = w->frame_cap ? w->frame_cap : CHUNK;
        while (c < w->frame_len + n) c *= 2;
        uint8_t *f = realloc(w->frame, c);
        if (!f) return rh_fail(e, "%s: out of memory", w->path);
        w->frame = f;
        w->frame_cap = c;
    }
    memcpy(w->frame + w->frame_len, p, n);
    w->frame_len += n;
    return 0;
}

/* Feeds bytes to the compressor; ZSTD_e_flush ends a zstd block (so each
 * stream of a trace block gets its own literal statistics) and ZSTD_e_end
 * ends the frame. */
static int feed(tr_writer *w, const uint8_t *p, size_t n, ZSTD_EndDirective mode, rh_err *e)
{
    ZSTD_inBuffer in = {p, n, 0};
    for (;;) {
        ZSTD_outBuffer out = {w->out, w->out_cap, 0};
        size_t left = ZSTD_compressStream2(w->cctx, &out, &in, mode);
        if (ZSTD_isError(left)) return rh_fail(e, "%s: zstd: %s", w->path, ZSTD_getErrorName(left));
        if (emit(w, w->out, out.pos, e) < 0) return -1;
        if (mode == ZSTD_e_continue ? in.pos == in.size : left == 0) break;
    }
    return 0;
}

/* Compresses the current block, one zstd block per stream. */
static int end_block(tr_writer *w, rh_err *e)
{
    if (!w->blk.n) return 0;
    if (w->pend.n) {
        if (feed(w, w->pend.p, w->pend.n, ZSTD_e_continue, e) < 0) return -1;
        w->pend.n = 0;
    }
    if (tr_block_enc_finish(&w->blk, &w->head) < 0) return rh_fail(e, "%s: out of memory", w->path);
    if (feed(w, w->head.p, w->head.n, ZSTD_e_continue, e) < 0) return -1;
    for (int i = 0; i < TR_STREAMS; i++)
        if (w->blk.s[i].n && feed(w, w->blk.s[i].p, w->blk.s[i].n, ZSTD_e_flush, e) < 0) return -1;
    tr_block_enc_reset(&w->blk);
    return 0;
}

static void writer_free(tr_writer *w)
{
    if (w->af.path) rh_atomic_abort(&w->af);
    else if (w->f) fclose(w->f);
    ZSTD_freeCCtx(w->cctx);
    tr_block_enc_free(&w->blk);
    tr_bytes_free(&w->pend);
    tr_bytes_free(&w->head);
    free(w->out);
    free(w->frame);
    free(w->path);
    free(w);
}

tr_writer *tr_writer_open(const char *path, const tr_header *h, unsigned flags, rh_err *e)
{
    tr_writer *w = calloc(1, sizeof *w);
    if (!w) {
        rh_fail(e, "%s: out of memory", path);
        return NULL;
    }
    w->flags = flags;
    w->path = strdup(path);
    tr_block_enc_init(&w->blk);
    w->out_cap = ZSTD_CStreamOutSize();
    w->out = malloc(w->out_cap);
    w->cctx = ZSTD_createCCtx();
    if (!w->path || !w->out || !w->cctx) {
        rh_fail(e, "%s: out of memory", path);
        writer_free(w);
        return NULL;
    }
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, LEVEL);
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);
    struct stat st;
    w->special = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
    if (!(flags & TR_WRITE_LIVE)) {
        if (rh_atomic_open(&w->af, path, e) < 0) {
            writer_free(w);
            return NULL;
        }
        w->f = w->af.f;
    } else {
        errno = 0;
        w->f = fopen(path, "wb");
        if (!w->f) {
            rh_fail(e, "%s: cannot create: %s", path, strerror(errno));
            writer_free(w);
            return NULL;
        }
    }
    /* Live: no stdio buffer, so what a failed write leaves is known (and
     * cut off), and nothing is left over for fclose to write after it. */
    if (flags & TR_WRITE_LIVE) setvbuf(w->f, NULL, _IONBF, 0);
    tr_codec_init(&w->codec, h->block_size);
    if (fwrite(TR_MAGIC, 1, TR_MAGIC_LEN, w->f) != TR_MAGIC_LEN) {
        io_fail(w, e, "write failed");
        tr_writer_abort(w);
        return NULL;
    }
    w->good = TR_MAGIC_LEN;
    if (tr_encode_header(&w->pend, h) < 0) {
        rh_fail(e, "%s: out of memory", path);
        tr_writer_abort(w);
        return NULL;
    }
    /* A live recording is readable (empty, cut short) from the first moment. */
    if ((flags & TR_WRITE_LIVE) && tr_writer_flush(w, e) < 0) {
        tr_writer_abort(w);
        return NULL;
    }
    w->last_flush = rh_now();
    return w;
}

static int live_tick(tr_writer *w, rh_err *e)
{
    if (!(w->flags & TR_WRITE_LIVE)) return 0;
    if (rh_now() - w->last_flush < LIVE_FLUSH_SECONDS) return 0;
    return tr_writer_flush(w, e);
}

int tr_write_request(tr_writer *w, const tr_request *r, rh_err *e)
{
    if (tr_check_request(r, w->codec.block_size, e) < 0)
        return rh_prefix(e, "%s: request %llu (record %llu)", w->path, (unsigned long long)r->id,
                         (unsigned long long)(w->n_requests + w->n_steps + 1));
    if (tr_block_enc_request(&w->blk, &w->codec, r) < 0) return rh_fail(e, "%s: out of memory", w->path);
    w->n_requests++;
    if ((w->blk.n >= BLOCK_RECORDS || tr_block_enc_size(&w->blk) >= BLOCK_BYTES) && end_block(w, e) < 0) return -1;
    return live_tick(w, e);
}

int tr_write_step(tr_writer *w, const tr_step *s, rh_err *e)
{
    if (tr_check_step(s, e) < 0)
        return rh_prefix(e, "%s: step %llu (record %llu)", w->path, (unsigned long long)s->index,
                         (unsigned long long)(w->n_requests + w->n_steps + 1));
    if (tr_block_enc_step(&w->blk, &w->codec, s) < 0) return rh_fail(e, "%s: out of memory", w->path);
    w->n_steps++;
    if ((w->blk.n >= BLOCK_RECORDS || tr_block_enc_size(&w->blk) >= BLOCK_BYTES) && end_block(w, e) < 0) return -1;
    return live_tick(w, e);
}

int tr_write(tr_writer *w, const tr_record *r, rh_err *e)
{
    if (r->kind == TR_REQUEST) return tr_write_request(w, &r->req, e);
    if (r->kind == TR_STEP) return tr_write_step(w, &r->step, e);
    return rh_fail(e, "%s: record %llu: field 'kind' is %d, not a request or a step", w->path,
                   (unsigned long long)(w->n_requests + w->n_steps + 1), r->kind);
}

int tr_writer_flush(tr_writer *w, rh_err *e)
{
    if (w->broken) return broken(w, e);
    if (end_block(w, e) < 0 || feed(w, w->pend.p, w->pend.n, ZSTD_e_end, e) < 0) return -1;
    w->pend.n = 0;
    if ((w->flags & TR_WRITE_LIVE) && write_frame(w, e) < 0) return -1;
    if (fflush(w->f) != 0) return io_fail(w, e, "write failed");
    w->last_flush = rh_now();
    return 0;
}

/* A live file that could not be completed keeps what it has: it is
 * closed, not removed. */
static int keep_live(tr_writer *w)
{
    if (w->f) fclose(w->f);
    w->f = NULL;
    writer_free(w);
    return -1;
}

int tr_writer_close(tr_writer *w, rh_err *e)
{
    if (w->broken) {
        broken(w, e);
        return keep_live(w);
    }
    if (end_block(w, e) < 0) goto fail;
    if (tr_encode_end(&w->pend, w->n_requests, w->n_steps) < 0) {
        rh_fail(e, "%s: out of memory", w->path);
        goto fail;
    }
    if (tr_writer_flush(w, e) < 0) goto fail;
    FILE *f = w->f;
    w->f = NULL;
    if (w->af.path) {
        if (rh_atomic_commit(&w->af, e) < 0) goto fail;
    } else if (fclose(f) != 0) {
        io_fail(w, e, "write failed");
        goto fail;
    }
    writer_free(w);
    return 0;
fail:
    if (w->flags & TR_WRITE_LIVE) return keep_live(w);
    tr_writer_abort(w);
    return -1;
}

void tr_writer_abort(tr_writer *w)
{
    if (!w) return;
    if (!(w->flags & TR_WRITE_LIVE)) {
        if (w->af.path) rh_atomic_abort(&w->af);   /* closes w->f, removes the temporary file */
    } else {
        if (w->f) fclose(w->f);
        if (!w->special) unlink(w->path);
    }
    w->f = NULL;
    writer_free(w);
}
