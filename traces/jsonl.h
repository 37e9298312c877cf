/* jsonl.h — our JSON Lines form of a trace: lossless, one object per line.
 *
 * Line 1 is the header:
 *   {"rehearse_trace":2,"block_size":512,"model":"","hardware":"","config":{"k":"v",...}}
 * then one line per record, in file order, keys named after the tr_request
 * and tr_step fields:
 *   {"type":"request","id":0,"arrival":0.25,"input_len":6758,"output_len":500,"hashes":[0,1,2]}
 *   {"type":"step","index":0,"start":1.5,"duration":0.031,...every tr_step field...}
 * A request line omits fields that are zero (session_id/turn, flags, priority, adapter,
 * hashes, token_times) and the measured group (ttft, e2e, cached_tokens,
 * spec_proposed, spec_accepted, retractions, finish) when all of it is zero.
 * Times are printed in the shortest form that reads back bit-exact; finish
 * is a name ("length", "stop", "abort", "error"). Reading a line back
 * (traces/import/import.h, format "jsonl") gives the same record field by field. */
#ifndef RH_TRACES_JSONL_H
#define RH_TRACES_JSONL_H

#include <stdio.h>

#include "traces/trace.h"

typedef struct tr_jsonl_writer {
    FILE *f;
    char *buf;
    size_t cap;
} tr_jsonl_writer;

void tr_jsonl_init(tr_jsonl_writer *w, FILE *f);
void tr_jsonl_free(tr_jsonl_writer *w);
/* 0, or -1 on a write error (errno set). */
int tr_jsonl_header(tr_jsonl_writer *w, const tr_header *h);
int tr_jsonl_record(tr_jsonl_writer *w, const tr_record *r);

#endif
