/* trace.h — the trace file: what the engine records and the simulator reads.
 *
 * A trace is a header (format version, block size, model, hardware, config as
 * key/values) followed by a stream of records of two kinds, in any order:
 *   - requests: arrival, input and output lengths, prefix block hashes, session;
 *     when measured (a recorded or simulated run): TTFT, E2E, every output
 *     token's time, cached tokens, speculative counts, finish reason;
 *   - steps: one scheduler step of an engine or simulator run.
 * On disk it is binary, versioned and zstd-compressed (traces/FORMAT.md),
 * written and read as a stream in constant memory whatever the file size.
 * Times are seconds: arrivals and step starts from the trace start, token
 * times from the request's own arrival. Times that are whole nanoseconds
 * (tr_round_ns) are stored compactly; any other finite double is stored
 * bit-exact in 8 bytes. Every record written passes tr_check_request /
 * tr_check_step, and every record read has passed them too.
 *
 * Closed-loop traces (header arrival=closed-loop, clients=N; see FORMAT.md):
 * every arrival is 0 and N clients replay the requests in file order, each
 * keeping a session (session_id != 0) to itself until its last turn. */
#ifndef RH_TRACE_H
#define RH_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

#define TR_FORMAT_VERSION 4   /* 2: a request may carry a priority; 3: and a LoRA adapter; 4: host-tier
                                 (HiCache) counts on requests and steps (1 to 3 are read too) */
#define TR_MAGIC "RHTRACE1"            /* 8 bytes at offset 0 */
#define TR_MAGIC_LEN 8

/* Lengths above this are rejected as absurd everywhere (importers, writer,
 * reader): no model serves a 16M-token prompt, and a corrupt file must not
 * make a reader allocate gigabytes. */
#define TR_MAX_TOKENS (1u << 24)

enum tr_kind { TR_NONE = 0, TR_REQUEST = 1, TR_STEP = 2 };

enum tr_finish {
    TR_FINISH_NONE = 0,    /* not measured, or still running when the trace ended */
    TR_FINISH_LENGTH = 1,  /* reached its output length (max_tokens / ignore_eos) */
    TR_FINISH_STOP = 2,    /* EOS or a stop string */
    TR_FINISH_ABORT = 3,   /* client went away, or the server stopped */
    TR_FINISH_ERROR = 4,   /* rejected or failed */
};

/* tr_request.flags */
#define TR_REQ_MEASURED 0x1u   /* ttft, e2e and token times hold a run's results */
#define TR_REQ_FAILED   0x2u   /* the source marked it failed (e.g. BurstGPT 0 response tokens) */

typedef struct tr_request {
    uint64_t id;
    double arrival;             /* s from trace start */
    uint32_t input_len;         /* prompt tokens */
    uint32_t output_len;        /* output tokens (target, or produced when measured) */
    uint64_t session_id;        /* 0: not part of a session */
    uint32_t turn;              /* 0-based turn within the session */
    uint32_t flags;             /* TR_REQ_* */
    int32_t priority;           /* the request's scheduling priority (SGLang's and vLLM's "priority"); 0: none */
    uint32_t adapter;           /* the LoRA adapter it runs with: 0 the base model, K the header's
                                   adapter.K (tr_adapter_name) */
    uint32_t n_hashes;          /* prefix block hashes, one per block_size prompt tokens */
    const uint64_t *hashes;
    /* measured (flags & TR_REQ_MEASURED) */
    double ttft;                /* s from arrival to the first output token */
    double e2e;                 /* s from arrival to the last output token */
    uint32_t cached_tokens;     /* prompt tokens served from the prefix cache */
    uint32_t cached_host;       /* of which loaded back from the host tier */
    uint32_t cached_storage;    /* of those, fetched from a storage tier first */
    uint32_t spec_proposed;     /* draft tokens proposed over the request's life */
    uint32_t spec_accepted;     /* draft tokens accepted */
    uint32_t retractions;       /* times it was retracted and recomputed */
    uint8_t finish;             /* enum tr_finish */
    uint32_t n_times;           /* 0, or output_len: each token's time */
    const double *token_times;  /* s from arrival, ascending */
} tr_request;

/* tr_step.flags */
#define TR_STEP_SCHED_HIDDEN 0x1u  /* scheduling overlapped the previous step's compute */
/* The duration is an estimate derived from a server's aggregate telemetry
 * (an SGLang log: throughput, gaps between lines), not a per-step timing;
 * 0 with this flag: not known. */
#define TR_STEP_ESTIMATED    0x2u

/* One scheduler step. "context" is the number of tokens already in the KV
 * cache for a sequence before this step. */
typedef struct tr_step {
    uint64_t index;
    double start;               /* s from trace start */
    double duration;            /* s, measured or from the cost model */
    uint32_t prefill_tokens;    /* new prompt tokens computed (all prefill chunks) */
    uint32_t prefill_seqs;      /* sequences with a prefill chunk */
    uint32_t decode_seqs;       /* sequences decoding */
    uint32_t decode_tokens;     /* tokens computed for decodes: 1 + draft slots each */
    uint64_t prefill_context;   /* sum over prefill chunks of their context */
    uint64_t prefill_attn;      /* sum over prefill chunks of new * (context + new) */
    uint64_t decode_context;    /* sum over decodes of their context */
    uint32_t spec_proposed;     /* draft tokens verified this step */
    uint32_t spec_accepted;     /* of which accepted */
    uint32_t pages_used;        /* pages held by requests after the step (evictable cached pages excluded) */
    uint32_t pages_total;
    uint32_t waiting;           /* queue lengths when the step was formed */
    uint32_t running;
    uint32_t retractions;       /* requests retracted while forming this step */
    uint32_t finished;          /* requests that finished at the end of this step */
    double sched_time;          /* s of CPU spent forming the batch (engine), 0 in the simulator */
    uint32_t flags;             /* TR_STEP_* */
    uint32_t adapters;          /* distinct LoRA adapters in the batch (the base not counted) */
    uint32_t adapter_loads;     /* of which loaded into a GPU slot for this step */
    uint32_t adapter_tokens;    /* tokens computed under an adapter */
    /* The host tier (SGLang's HiCache): prompt tokens loaded back from host
     * memory for this step; tokens copied GPU -> host while forming it by
     * evictions that waited for the copy (write_back); tokens copied GPU ->
     * host in the background since the previous step (write_through). */
    uint32_t hicache_load_tokens, hicache_writeback_tokens, hicache_backup_tokens;
    uint32_t hicache_storage_tokens;   /* of the loaded tokens, fetched from a storage tier into host memory first */
} tr_step;

typedef struct tr_record {
    int kind;                   /* enum tr_kind */
    union {
        tr_request req;
        tr_step step;
    };
} tr_record;

/* Header: a few typed fields plus free key/values (config knobs, source file). */
typedef struct tr_kv {
    char *key, *value;
} tr_kv;

typedef struct tr_header {
    uint32_t version;           /* TR_FORMAT_VERSION when written by us */
    uint32_t block_size;        /* tokens per block hash; 0: no hashes */
    char *model;                /* "" when unknown */
    char *hardware;
    uint32_t n_kv;
    tr_kv *kv;
} tr_header;

void tr_header_init(tr_header *h);                  /* empty strings, version, no kv */
void tr_header_free(tr_header *h);
int tr_header_copy(tr_header *dst, const tr_header *src);
int tr_header_set_model(tr_header *h, const char *model);
int tr_header_set_hardware(tr_header *h, const char *hw);
int tr_header_set(tr_header *h, const char *key, const char *value);   /* replaces */
const char *tr_header_get(const tr_header *h, const char *key);        /* NULL if absent */

/* ---- record streams ----
 * Readers of every format (traces/import/import.h) hand records to a sink:
 * the header once, then each record in file order. */
/* Where records go. `record` returns 0 to go on, 1 to stop early, -1 on error. */
typedef struct tr_sink {
    void *ctx;
    int (*header)(void *ctx, const tr_header *h, rh_err *e);
    int (*record)(void *ctx, const tr_record *r, rh_err *e);
} tr_sink;

/* ---- streaming writer ----
 * By default the writer writes a temporary file next to PATH and renames it
 * to PATH on close, so a failed run never leaves a half-written PATH. With
 * TR_WRITE_LIVE it writes PATH directly and every tr_writer_flush ends a
 * zstd frame and writes it out whole, so a process killed mid-run leaves a
 * file readable up to its last flush (tr_reader_truncated then says so). A
 * live writer also flushes by itself when a record arrives more than a
 * second after the last flush; a recorder with idle periods calls
 * tr_writer_flush from its own timer. When a live write fails (a full disk)
 * the partial frame is cut off, every later call fails with that error, and
 * tr_writer_close keeps the file as it is: readable, cut short. A PATH that
 * exists and is not a regular file (/dev/full, a FIFO) is written in place,
 * never renamed over or removed. Records are checked (tr_check_*) and a bad
 * one is refused with a message naming the record and field. */
#define TR_WRITE_LIVE 0x1u

typedef struct tr_writer tr_writer;

tr_writer *tr_writer_open(const char *path, const tr_header *h, unsigned flags, rh_err *e);
int tr_write(tr_writer *w, const tr_record *r, rh_err *e);
int tr_write_request(tr_writer *w, const tr_request *r, rh_err *e);
int tr_write_step(tr_writer *w, const tr_step *s, rh_err *e);
int tr_writer_flush(tr_writer *w, rh_err *e);
int tr_writer_close(tr_writer *w, rh_err *e);      /* frees w in all cases; live: a failure keeps the file */
void tr_writer_abort(tr_writer *w);                /* removes the output (a regular file), frees w */

/* ---- streaming reader ----
 * Arrays in a returned record (hashes, token_times) stay valid until the next
 * call on the same reader. */
typedef struct tr_reader tr_reader;

tr_reader *tr_reader_open(const char *path, rh_err *e);
const tr_header *tr_reader_header(const tr_reader *r);
int tr_reader_next(tr_reader *r, tr_record *rec, rh_err *e);   /* 1: a record, 0: end, -1: error */
/* After tr_reader_next returned 0: 1 if the file ended at a frame boundary
 * without the end-of-trace marker (a recording cut short), else 0. */
int tr_reader_truncated(const tr_reader *r);
uint64_t tr_reader_record_index(const tr_reader *r);           /* 0-based index of the last record */
uint64_t tr_reader_offset(const tr_reader *r);                 /* file bytes consumed (progress) */
void tr_reader_close(tr_reader *r);

/* The same on a stream the reader then owns (closes), read from where it
 * stands: a pipe, or a file already opened; `name` is used in messages. */
tr_reader *tr_reader_open_stream(FILE *f, const char *name, rh_err *e);
/* Opens a trace held in memory (fuzzing, tests); `name` is used in messages.
 * The buffer must outlive the reader. */
tr_reader *tr_reader_open_mem(const void *data, size_t n, const char *name, rh_err *e);

/* The step records of a binary trace, streamed into one array (*steps, the
 * caller frees it; *n of them, 0 when the trace has none) with a progress
 * bar on the way; the header is copied into *h unless h is NULL. */
int tr_read_steps(const char *path, tr_step **steps, size_t *n, tr_header *h, rh_err *e);

/* ---- record checks and helpers ---- */
/* 0, or -1 naming the field that breaks the format's rules: lengths above
 * TR_MAX_TOKENS, non-finite times, more block hashes than the prompt has
 * blocks, hashes without a block size, an unknown finish reason, more token
 * times than output tokens. `block_size` is the header's. */
int tr_check_request(const tr_request *r, uint32_t block_size, rh_err *e);
int tr_check_step(const tr_step *s, rh_err *e);
/* The nearest whole nanosecond, so the time is stored compactly. */
double tr_round_ns(double seconds);
/* Blocks of `block_size` tokens that a prompt of `len` tokens spans (rounded up). */
uint32_t tr_blocks(uint32_t len, uint32_t block_size);
/* Adapter K's name: the header's "adapter.K", else "lora-K" (K >= 1);
 * written into buf (at least 32 bytes) when the header has none. */
const char *tr_adapter_name(const tr_header *h, uint32_t adapter, char *buf, size_t n);
const char *tr_finish_name(int finish);     /* "none", "length", "stop", "abort", "error" */
int tr_finish_parse(const char *name);      /* the enum, or -1 */

/* ---- a whole trace in memory (for the simulator and tests) ----
 * Records are copied in; their hashes and token_times live in an arena of
 * chunks that never move, so request pointers into it stay valid while the
 * trace grows (only the requests and steps arrays themselves reallocate). */
struct tr_arena;

typedef struct tr_trace {
    tr_header header;
    size_t n_requests, n_steps;
    tr_request *requests;       /* hashes and token_times point into the arena */
    tr_step *steps;
    size_t cap_requests, cap_steps;
    struct tr_arena *arena;     /* owned; NULL until the first array is copied in */
} tr_trace;

void tr_trace_init(tr_trace *t);
/* A sink that copies every record into t (and the header over t's): what
 * tr_trace_load (traces/import/import.h) fills a trace with. */
tr_sink tr_trace_sink(tr_trace *t);
/* Copies the record (and its arrays) into the trace. */
int tr_trace_add_request(tr_trace *t, const tr_request *r, rh_err *e);
int tr_trace_add_step(tr_trace *t, const tr_step *s, rh_err *e);
/* Sorts requests by arrival; ties keep their order. */
void tr_trace_sort_requests(tr_trace *t);
/* Writes the requests, then the steps (the trace keeps no interleaving). */
int tr_trace_save(const tr_trace *t, const char *path, rh_err *e);
void tr_trace_free(tr_trace *t);

#endif
