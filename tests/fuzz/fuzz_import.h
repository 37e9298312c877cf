/* fuzz_import.h — one importer on arbitrary bytes: the whole path (parsing,
 * the checks, sorting and emitting) into a sink that touches every array, so
 * a record pointing at freed or short memory is read. Each fuzz_trace_*.c
 * target names its format. */
#ifndef RH_FUZZ_IMPORT_H
#define RH_FUZZ_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "traces/import/import.h"

static int fuzz_on_record(void *ctx, const tr_record *r, rh_err *e)
{
    (void)e;
    uint64_t *sum = ctx;
    if (r->kind == TR_REQUEST)
        for (uint32_t i = 0; i < r->req.n_hashes; i++) *sum += r->req.hashes[i];
    return 0;
}

static int fuzz_import(const uint8_t *data, size_t size, tr_format format)
{
    uint64_t sum = 0;
    tr_sink s = {&sum, NULL, fuzz_on_record};
    tr_import_opts o;
    tr_import_opts_init(&o);
    o.format = format;
    rh_err e;
    tr_read_mem(data, size, "fuzz", &o, &s, &e);
    return 0;
}

#endif
