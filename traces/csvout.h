/* csvout.h — a trace's requests or steps as CSV (one kind per file).
 *
 * Requests: id,arrival,input_len,output_len,session_id,turn,flags,n_hashes,
 * ttft,e2e,cached_tokens,spec_proposed,spec_accepted,retractions,finish
 * (block hashes and token times are not in the CSV; use JSONL for those).
 * Steps: every tr_step field, in struct order. Times print bit-exact. */
#ifndef RH_TRACES_CSVOUT_H
#define RH_TRACES_CSVOUT_H

#include <stdio.h>

#include "traces/trace.h"

int tr_csv_request_header(FILE *f);
int tr_csv_request(FILE *f, const tr_request *r);
int tr_csv_step_header(FILE *f);
int tr_csv_step(FILE *f, const tr_step *s);

#endif
