/* fuzz_cost.c — cost files are outside input: any bytes either load as a
 * cost model or fail with a message, and a loaded model prices every batch
 * it accepts with a finite, non-negative time (NaN only for a tp it refused).
 * Presets come from sim/cost/presets (run from the repository root). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("REHEARSE_PRESETS", "sim/cost/presets", 0);
    return 0;
}

static void price(const cost_model *m, const cost_seq *s, uint32_t n, uint32_t tp, uint32_t drafts)
{
    cost_batch b = {.seqs = s, .n = n, .tp = tp};
    cost_batch_summarize(&b);
    if (drafts && b.decode_seqs) {
        b.draft_steps = drafts;
        b.draft_seqs = b.decode_seqs;
    }
    double t = cost_step_time(m, &b);
    int ok = cost_check_tp(m, tp, NULL) == 0;
    if (ok ? !(isfinite(t) && t >= 0) : !isnan(t)) {
        fprintf(stderr, "cost model priced a batch at %g s (tp %u accepted: %d)\n", t, tp, ok);
        abort();
    }
    cost_term terms[64];
    if (cost_breakdown(m, &b, terms, 64) < 1) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    rh_err e;
    cost_model *m = cost_parse(text, "fuzz.json", &e);
    free(text);
    if (!m) {
        if (!e.msg[0]) abort();          /* every failure says why */
        return 0;
    }
    static const cost_seq big[] = {{8192, 100000, true}, {1, 4096, false}, {4, 65536, false}};
    static const cost_seq one = {1, 0, true};
    const uint32_t tps[] = {0, 1, 2, 8, 16, 3};
    for (size_t i = 0; i < sizeof tps / sizeof tps[0]; i++) {
        price(m, &one, 1, tps[i], 0);
        price(m, big, 3, tps[i], 3);
    }
    cost_free(m);
    return 0;
}
