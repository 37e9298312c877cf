/* cost_cli.h — the cost-model commands:
 *   rehearse cost show COST [--batch SPEC]... [--tp N] [--json]
 *       predicted step time and its terms (operators for a roofline);
 *   rehearse cost presets
 *       the model and GPU presets on the search path;
 *   rehearse fit RECORDED -o COST [--draft-ratio R] [--absolute] [--json]
 *       a linear cost model fitted to the step records of a recorded trace.
 * Exit status 0 on success, 1 on any error (one message on stderr). */
#ifndef RH_COST_CLI_H
#define RH_COST_CLI_H

#include "sim/cost.h"
#include "util/err.h"

int cost_main(int argc, char **argv);
int fit_main(int argc, char **argv);

/* Parses a batch description such as "prefill=2048@1024,decode=64@3000,spec=2":
 * prefill=N[@CTX] adds one prompt chunk of N tokens at context CTX (repeat
 * for more); decode=N[@CTX] adds N decodes at context CTX each; spec=K makes
 * every decode verify K drafts made by K draft forward passes. seqs must hold
 * max entries; b->seqs points at it. */
int cost_batch_parse(const char *spec, cost_seq *seqs, uint32_t max, cost_batch *b, rh_err *e);

#endif
