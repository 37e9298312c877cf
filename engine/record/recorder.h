/* recorder.h — writes what an engine run did (requests and steps) to a trace.
 *
 * Two modes, one API:
 *   synchronous (flags 0): every record is written by the caller's thread
 *     into a temporary file renamed to PATH on rec_close, so a failed run
 *     leaves nothing (rec_abort removes it). For offline replays.
 *   REC_THREAD: records go into a small bounded queue and a background
 *     thread writes them to PATH directly (TR_WRITE_LIVE), ending a zstd
 *     frame at least once a second while anything is unflushed, so a live
 *     server killed at any moment leaves a file readable up to a second
 *     before. The caller's thread only copies the record; when the queue is
 *     full it waits for the writer (back-pressure, never unbounded memory).
 * Records are checked (tr_check_*) on the caller's thread, so a bad record
 * is refused at once with a message naming it. A write error in the
 * background thread is reported by the next call, and at once to the
 * rec_on_error callback if one is set (an idle server would otherwise only
 * learn of a full disk with its next request). Not thread-safe: one
 * producer thread per recorder. */
#ifndef RH_RECORDER_H
#define RH_RECORDER_H

#include "traces/trace.h"
#include "util/err.h"

#define REC_THREAD 0x1u

typedef struct recorder recorder;

recorder *rec_open(const char *path, const tr_header *h, unsigned flags, rh_err *e);
/* REC_THREAD: fn(ctx, message) is called once, on the writer thread with
 * the recorder's lock held (it must not call the recorder), when a
 * background write fails. Set it right after rec_open. */
void rec_on_error(recorder *r, void (*fn)(void *ctx, const char *msg), void *ctx);
/* Copies the record (its hashes and token times too). */
int rec_request(recorder *r, const tr_request *q, rh_err *e);
int rec_step(recorder *r, const tr_step *s, rh_err *e);
/* Waits until everything queued is written and flushed (REC_THREAD), or
 * flushes a frame (synchronous mode, where PATH appears only at close). */
int rec_flush(recorder *r, rh_err *e);
/* Writes what is queued, ends the trace and frees r in all cases. */
int rec_close(recorder *r, rh_err *e);
/* Drops what is queued, removes the output, frees r. */
void rec_abort(recorder *r);

#endif
