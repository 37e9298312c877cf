/* import.c — format names, format guessing, and tr_read: any trace into a
 * sink (see import.h). The importer registry is here: each format's name,
 * how its content is recognised, and which reader takes it. */
#include "traces/import/import.h"
#include "traces/import/importers.h"
#include "util/progress.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static const char *const format_names[] = {"unknown", "binary",   "jsonl",      "mooncake",  "azure",
                                            "burstgpt", "vidur", "sglang-log", "sglang-fpm"};
#define LAST_FORMAT TR_FMT_SGLANG_FPM

const char *tr_format_name(tr_format f)
{
    return (f >= 0 && f <= LAST_FORMAT) ? format_names[f] : "unknown";
}

tr_format tr_format_parse(const char *name)
{
    for (int i = TR_FMT_BINARY; i <= LAST_FORMAT; i++)
        if (!strcasecmp(name, format_names[i])) return (tr_format)i;
    if (!strcasecmp(name, "splitwise")) return TR_FMT_VIDUR;
    if (!strcasecmp(name, "sglang")) return TR_FMT_SGLANG_LOG;
    if (!strcasecmp(name, "fpm") || !strcasecmp(name, "dynamo-fpm")) return TR_FMT_SGLANG_FPM;
    return TR_FMT_UNKNOWN;
}

void tr_import_opts_init(tr_import_opts *o)
{
    memset(o, 0, sizeof *o);
    o->block_size = 512;
}

/* Case-insensitive search within the first line. */
static int line_has(const char *line, size_t n, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= n; i++)
        if (!strncasecmp(line + i, word, w)) return 1;
    return 0;
}

tr_format tr_format_guess_mem(const void *data, size_t n, const char *name, rh_err *e)
{
    const char *s = data;
    if (n == 0) {
        rh_fail(e, "%s: empty file", name);
        return TR_FMT_UNKNOWN;
    }
    if (n >= 7 && !memcmp(s, TR_MAGIC, 7)) return TR_FMT_BINARY;
    if (n >= 4 && !memcmp(s, "\x28\xB5\x2F\xFD", 4)) {
        rh_fail(e, "%s: a zstd-compressed file, not a trace: decompress it first (zstd -d)", name);
        return TR_FMT_UNKNOWN;
    }
    if (n >= 2 && !memcmp(s, "\x1F\x8B", 2)) {
        rh_fail(e, "%s: a gzip-compressed file (Dynamo writes its FPM traces as .jsonl.gz): decompress it first "
                   "(gzip -dc)", name);
        return TR_FMT_UNKNOWN;
    }
    size_t i = 0;
    if (n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) i = 3;
    while (i < n && isspace((unsigned char)s[i])) i++;
    const char *line = s + i;
    const char *nl = i < n ? memchr(line, '\n', n - i) : NULL;
    size_t len = nl ? (size_t)(nl - line) : n - i;
    if (i < n && s[i] == '{') {
        if (line_has(line, len, "\"rehearse_trace\"")) return TR_FMT_JSONL;
        if (line_has(line, len, "\"hash_ids\"") || line_has(line, len, "\"input_length\"")) return TR_FMT_MOONCAKE;
        if (line_has(line, len, "\"dynamo.fpm.trace.")) return TR_FMT_SGLANG_FPM;
        rh_fail(e, "%s: line 1: a JSON line with neither \"rehearse_trace\" (our JSONL), Mooncake's "
                   "\"input_length\" nor Dynamo's \"dynamo.fpm.trace.v1\"; name its format with `rehearse trace "
                   "import --format F %s -o OUT`", name, name);
        return TR_FMT_UNKNOWN;
    }
    if (line_has(line, len, "ContextTokens")) return TR_FMT_AZURE;
    if (line_has(line, len, "Request tokens")) return TR_FMT_BURSTGPT;
    if (line_has(line, len, "arrived_at") || line_has(line, len, "num_prefill_tokens")) return TR_FMT_VIDUR;
    /* A server log starts with whatever the server printed first: look for
     * SGLang's scheduler lines anywhere in the bytes peeked. */
    static const char *const sglang_marks[] = {"] Prefill batch", "] Decode batch", "] server_args=ServerArgs(",
                                               "] max_total_num_tokens="};
    for (int k = 0; k < 4; k++)
        if (memmem(s, n, sglang_marks[k], strlen(sglang_marks[k]))) return TR_FMT_SGLANG_LOG;
    for (size_t k = 0; k < len && k < 256; k++)
        if (line[k] == 0 || ((unsigned char)line[k] < 0x20 && line[k] != '\t' && line[k] != '\r')) {
            rh_fail(e, "%s: byte %zu: not a trace: neither our binary format (magic %s) nor a text format", name,
                    (size_t)(line - s) + k, TR_MAGIC);
            return TR_FMT_UNKNOWN;
        }
    /* Said so that it holds for every command that reads traces: only
     * `trace import` takes --format. */
    rh_fail(e, "%s: line 1: cannot tell the format from the header ('%.*s'); name it with `rehearse trace import "
               "--format mooncake|azure|burstgpt|vidur|jsonl|sglang-log|sglang-fpm %s -o OUT`",
            name, (int)(len > 60 ? 60 : len), line, name);
    return TR_FMT_UNKNOWN;
}

/* ---- opening an input: a file, or a pipe read once ---- */

#define PEEK 4096

/* A stream that gives back the bytes a peek took from a pipe, then the
 * rest of the pipe: format detection reads the start of the input, and a
 * pipe cannot be read twice. */
typedef struct peeked {
    FILE *f;
    char buf[PEEK];
    size_t n, pos;
} peeked;

static ssize_t peeked_read(void *cookie, char *out, size_t size)
{
    peeked *p = cookie;
    if (p->pos < p->n) {
        size_t k = p->n - p->pos < size ? p->n - p->pos : size;
        memcpy(out, p->buf + p->pos, k);
        p->pos += k;
        return (ssize_t)k;
    }
    size_t k = fread(out, 1, size, p->f);
    return k == 0 && ferror(p->f) ? -1 : (ssize_t)k;
}

static int peeked_close(void *cookie)
{
    peeked *p = cookie;
    int rc = fclose(p->f);
    free(p);
    return rc;
}

/* Opens path for one read and guesses its format from its first bytes (o's
 * format, when given, wins). A regular file is rewound after the peek;
 * anything else (a pipe, /dev/stdin, a FIFO) is read through a stream that
 * replays the peek. *size: a regular file's size (progress), else 0. */
static FILE *open_input(const char *path, const tr_import_opts *o, tr_format *f, uint64_t *size, rh_err *e)
{
    errno = 0;
    FILE *in = fopen(path, "rb");
    if (!in) {
        rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(in), &st) != 0 || S_ISDIR(st.st_mode)) {
        fclose(in);
        rh_fail(e, "%s: a directory, not a trace file", path);
        return NULL;
    }
    int regular = S_ISREG(st.st_mode);
    *size = regular ? (uint64_t)st.st_size : 0;
    peeked *p = malloc(sizeof *p);
    if (!p) {
        fclose(in);
        rh_fail(e, "%s: out of memory", path);
        return NULL;
    }
    p->f = in;
    p->pos = 0;
    p->n = fread(p->buf, 1, PEEK, in);
    *f = o && o->format ? o->format : tr_format_guess_mem(p->buf, p->n, path, e);
    if (*f == TR_FMT_UNKNOWN) {
        peeked_close(p);
        return NULL;
    }
    if (regular) {
        free(p);
        if (fseek(in, 0, SEEK_SET) != 0) {
            fclose(in);
            rh_fail(e, "%s: cannot read it from the start: %s", path, strerror(errno));
            return NULL;
        }
        return in;
    }
    FILE *s = fopencookie(p, "rb", (cookie_io_functions_t){.read = peeked_read, .close = peeked_close});
    if (!s) {
        peeked_close(p);
        rh_fail(e, "%s: out of memory", path);
    }
    return s;
}

tr_format tr_format_guess(const char *path, rh_err *e)
{
    tr_format f;
    uint64_t size;
    FILE *in = open_input(path, NULL, &f, &size, e);
    if (in) fclose(in);
    return in ? f : TR_FMT_UNKNOWN;
}

/* ---- binary ---- */

static int read_binary(tr_reader *r, const tr_sink *s, uint64_t size, int *truncated, rh_err *e)
{
    if (s->header && s->header(s->ctx, tr_reader_header(r), e) < 0) return -1;
    rh_progress p;
    rh_progress_begin(&p, "read", size);
    tr_record rec;
    int rc;
    uint64_t k = 0;
    while ((rc = tr_reader_next(r, &rec, e)) > 0) {
        int sr = s->record(s->ctx, &rec, e);
        if (sr < 0) {
            rc = -1;
            break;
        }
        if (sr > 0) {
            rc = 0;
            break;
        }
        if ((++k & 0xffff) == 0) rh_progress_update(&p, tr_reader_offset(r));
    }
    rh_progress_update(&p, tr_reader_offset(r));
    rh_progress_end(&p);
    if (rc == 0 && truncated) *truncated = tr_reader_truncated(r);
    return rc;
}

/* ---- text formats ---- */

/* Server telemetry: step records in file order, with the header keys the
 * importer set, then emitted as they are. */
static int read_steps(tr_lines *l, tr_format f, const tr_import_opts *o, const tr_sink *s, rh_err *e)
{
    tr_trace t;
    tr_trace_init(&t);
    const char *base = strrchr(l->name, '/');
    int rc = tr_header_set(&t.header, "source", tr_format_name(f)) < 0 ||
                     tr_header_set(&t.header, "source_file", base ? base + 1 : l->name) < 0
                 ? rh_fail(e, "out of memory")
                 : 0;
    if (rc == 0)
        rc = f == TR_FMT_SGLANG_LOG ? tr_import_sglang_log(l, o, &t, e) : tr_import_sglang_fpm(l, o, &t, e);
    if (rc == 0 && l->bytes == 0) rc = rh_fail(e, "%s: empty file", l->name);
    if (rc == 0 && s->header && s->header(s->ctx, &t.header, e) < 0) rc = -1;
    for (size_t i = 0; rc == 0 && i < t.n_steps; i++) {
        tr_record rec;
        memset(&rec, 0, sizeof rec);
        rec.kind = TR_STEP;
        rec.step = t.steps[i];
        int sr = s->record(s->ctx, &rec, e);
        if (sr < 0) rc = -1;
        if (sr > 0) break;
    }
    tr_trace_free(&t);
    return rc;
}

static int read_text(tr_lines *l, tr_format f, const tr_import_opts *o, const tr_sink *s, rh_err *e)
{
    if (f == TR_FMT_JSONL) return tr_import_jsonl(l, o, s, e);
    if (f == TR_FMT_SGLANG_LOG || f == TR_FMT_SGLANG_FPM) return read_steps(l, f, o, s, e);
    tr_spool sp;
    tr_spool_init(&sp);
    int rc = tr_spool_source(&sp, f, l->name, e);
    if (rc == 0) {
        switch (f) {
        case TR_FMT_MOONCAKE: rc = tr_import_mooncake(l, o, &sp, e); break;
        case TR_FMT_AZURE: rc = tr_import_azure(l, o, &sp, e); break;
        case TR_FMT_BURSTGPT: rc = tr_import_burstgpt(l, o, &sp, e); break;
        case TR_FMT_VIDUR: rc = tr_import_vidur(l, o, &sp, e); break;
        default: rc = rh_fail(e, "%s: format %s cannot be read here", l->name, tr_format_name(f));
        }
    }
    if (rc == 0 && sp.n == 0 && l->bytes == 0) rc = rh_fail(e, "%s: empty file", l->name);
    if (rc == 0 && sp.n == 0)
        rc = rh_fail(e, "%s: no requests in the file%s", l->name, o->model ? " (for that --model)" : "");
    if (rc == 0) rc = tr_spool_emit(&sp, s, e);
    tr_spool_free(&sp);
    return rc;
}

int tr_read_as(const char *path, const tr_import_opts *o, const tr_sink *s, int *truncated, tr_format *format,
               rh_err *e)
{
    tr_import_opts dflt;
    if (!o) {
        tr_import_opts_init(&dflt);
        o = &dflt;
    }
    if (truncated) *truncated = 0;
    tr_format f;
    uint64_t size;
    FILE *in = open_input(path, o, &f, &size, e);
    if (!in) return -1;
    if (format) *format = f;
    if (f == TR_FMT_BINARY) {
        tr_reader *r = tr_reader_open_stream(in, path, e);
        if (!r) return -1;
        int rc = read_binary(r, s, size, truncated, e);
        tr_reader_close(r);
        return rc;
    }
    tr_lines l;
    tr_lines_open_stream(&l, in, path);
    rh_progress p;
    rh_progress_begin(&p, "import", size);
    l.progress = &p;
    int rc = read_text(&l, f, o, s, e);
    rh_progress_end(&p);
    tr_lines_close(&l);
    return rc;
}

int tr_read(const char *path, const tr_import_opts *o, const tr_sink *s, int *truncated, rh_err *e)
{
    return tr_read_as(path, o, s, truncated, NULL, e);
}

int tr_read_mem(const void *data, size_t n, const char *name, const tr_import_opts *o, const tr_sink *s, rh_err *e)
{
    tr_import_opts dflt;
    if (!o) {
        tr_import_opts_init(&dflt);
        o = &dflt;
    }
    tr_format f = o->format ? o->format : tr_format_guess_mem(data, n, name, e);
    if (f == TR_FMT_UNKNOWN) return -1;
    if (f == TR_FMT_BINARY) {
        tr_reader *r = tr_reader_open_mem(data, n, name, e);
        if (!r) return -1;
        int rc = read_binary(r, s, 0, NULL, e);
        tr_reader_close(r);
        return rc;
    }
    tr_lines l;
    tr_lines_open_mem(&l, data, n, name);
    int rc = read_text(&l, f, o, s, e);
    tr_lines_close(&l);
    return rc;
}

/* ---- writing a binary trace from a sink ---- */

static int ws_header(void *ctx, const tr_header *h, rh_err *e)
{
    tr_writer_sink *ws = ctx;
    ws->w = tr_writer_open(ws->path, h, ws->flags, e);
    return ws->w ? 0 : -1;
}

static int ws_record(void *ctx, const tr_record *r, rh_err *e)
{
    tr_writer_sink *ws = ctx;
    if (r->kind == TR_REQUEST) ws->n_requests++;
    else ws->n_steps++;
    return tr_write(ws->w, r, e);
}

tr_sink tr_writer_sink_make(tr_writer_sink *ws, const char *path, unsigned flags)
{
    memset(ws, 0, sizeof *ws);
    ws->path = path;
    ws->flags = flags;
    return (tr_sink){ws, ws_header, ws_record};
}

int tr_writer_sink_finish(tr_writer_sink *ws, int ok, rh_err *e)
{
    if (!ws->w) return ok ? rh_fail(e, "%s: nothing was written (no header)", ws->path) : -1;
    tr_writer *w = ws->w;
    ws->w = NULL;
    if (!ok) {
        tr_writer_abort(w);
        return -1;
    }
    return tr_writer_close(w, e);
}

int tr_import_file(const char *in, const tr_import_opts *o, const char *out, uint64_t *n_requests, tr_format *format,
                   rh_err *e)
{
    tr_writer_sink ws;
    tr_sink s = tr_writer_sink_make(&ws, out, 0);
    int rc = tr_read_as(in, o, &s, NULL, format, e);
    rc = tr_writer_sink_finish(&ws, rc == 0, e);
    if (rc == 0 && n_requests) *n_requests = ws.n_requests;
    return rc;
}
