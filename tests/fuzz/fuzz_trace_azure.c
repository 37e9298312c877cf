/* fuzz_trace_azure.c — the azure importer on arbitrary bytes (the whole path:
 * parsing, the checks, sorting and emitting), into a sink that touches
 * every array. */
#include <stddef.h>
#include <stdint.h>

#include "traces/import.h"

static int on_record(void *ctx, const tr_record *r, rh_err *e)
{
    (void)e;
    uint64_t *sum = ctx;
    if (r->kind == TR_REQUEST)
        for (uint32_t i = 0; i < r->req.n_hashes; i++) *sum += r->req.hashes[i];
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t sum = 0;
    tr_sink s = {&sum, NULL, on_record};
    tr_import_opts o;
    tr_import_opts_init(&o);
    o.format = TR_FMT_AZURE;
    rh_err e;
    tr_read_mem(data, size, "fuzz", &o, &s, &e);
    return 0;
}
