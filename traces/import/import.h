/* import.h — reading any trace format: ours (binary, JSONL) and public ones.
 *
 * Every reader here feeds a tr_sink: the header once, then each record.
 * Our binary format streams in constant memory; our JSONL streams too and
 * keeps every field and the record order. The public formats (Mooncake
 * JSONL, Azure 2023/2024 CSV, BurstGPT CSV, vidur/splitwise CSV) are read
 * whole into a compact spool, sorted by arrival (ties keep file order),
 * given ids 0..n-1 in that order, and their arrivals become offsets from the
 * first request, to the nanosecond. SGLang's server telemetry (its scheduler
 * log, forward-pass metrics as Dynamo's FPM trace records them) is read
 * whole into step records, in file order, with no requests. Bad input gives
 * one message naming the file, the line and the field. */
#ifndef RH_TRACES_IMPORT_H
#define RH_TRACES_IMPORT_H

#include <stddef.h>

#include "traces/trace.h"

typedef enum tr_format {
    TR_FMT_UNKNOWN = 0,
    TR_FMT_BINARY,
    TR_FMT_JSONL,      /* ours: header line, then one record per line */
    TR_FMT_MOONCAKE,
    TR_FMT_AZURE,
    TR_FMT_BURSTGPT,
    TR_FMT_VIDUR,
    TR_FMT_SGLANG_LOG, /* SGLang's scheduler log: step records (traces/import/sglang_log.c) */
    TR_FMT_SGLANG_FPM, /* forward-pass metrics, dynamo.fpm.trace.v1 rows: step records */
} tr_format;

const char *tr_format_name(tr_format f);          /* "binary", "jsonl", "mooncake", ..., "sglang-log", "sglang-fpm" */
tr_format tr_format_parse(const char *name);      /* TR_FMT_UNKNOWN if not a name */
/* Recognises a format from the first bytes of a file (magic, JSON keys, CSV
 * header, SGLang's log lines anywhere in them). TR_FMT_UNKNOWN with a
 * message when nothing fits. */
tr_format tr_format_guess_mem(const void *data, size_t n, const char *name, rh_err *e);
tr_format tr_format_guess(const char *path, rh_err *e);

typedef struct tr_import_opts {
    tr_format format;           /* TR_FMT_UNKNOWN: guess from the content */
    const char *model;          /* BurstGPT: keep only rows of this model (NULL: all) */
    uint32_t block_size;        /* Mooncake hash_ids block size (default 512) */
} tr_import_opts;

void tr_import_opts_init(tr_import_opts *o);


/* Reads a trace of any format into the sink. With a binary trace that was
 * cut short (no end marker) *truncated is set to 1 (may be NULL). The input
 * is read once, start to end: a pipe or /dev/stdin works as a file does (the
 * format is told from a buffered peek). A directory is refused as one. */
int tr_read(const char *path, const tr_import_opts *o, const tr_sink *s, int *truncated, rh_err *e);
/* The same, telling the format it read (may be NULL). */
int tr_read_as(const char *path, const tr_import_opts *o, const tr_sink *s, int *truncated, tr_format *format,
               rh_err *e);
int tr_read_mem(const void *data, size_t n, const char *name, const tr_import_opts *o, const tr_sink *s,
                rh_err *e);

/* Loads any trace file whole: our binary format streams in; other formats
 * (our JSONL, Mooncake, Azure, BurstGPT, vidur, SGLang's) are recognised from their
 * content and imported with default options. `t` is an output: whatever it
 * held is overwritten, not freed. On failure it is left zeroed: nothing to
 * free (tr_trace_free of it is harmless). */
int tr_trace_load(const char *path, tr_trace *t, rh_err *e);

/* Imports any trace into a binary trace at `out` (nothing is left at `out`
 * on failure). *n_requests receives the count, *format the format read
 * (either may be NULL). */
int tr_import_file(const char *in, const tr_import_opts *o, const char *out, uint64_t *n_requests, tr_format *format,
                   rh_err *e);

/* A sink that writes a binary trace (tr_writer_open on the header). */
typedef struct tr_writer_sink {
    const char *path;
    unsigned flags;
    tr_writer *w;
    uint64_t n_requests, n_steps;
} tr_writer_sink;
tr_sink tr_writer_sink_make(tr_writer_sink *ws, const char *path, unsigned flags);
/* Closes (0) or, after a failure, aborts the file (removing it). */
int tr_writer_sink_finish(tr_writer_sink *ws, int ok, rh_err *e);

#endif
