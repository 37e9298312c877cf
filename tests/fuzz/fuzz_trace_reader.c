/* fuzz_trace_reader.c — the binary trace reader on arbitrary bytes: it must
 * return records or one error, never crash, hang or leak. */
#include <stddef.h>
#include <stdint.h>

#include "traces/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rh_err e;
    tr_reader *r = tr_reader_open_mem(data, size, "fuzz", &e);
    if (!r) return 0;
    tr_record rec;
    uint64_t sum = 0;
    while (tr_reader_next(r, &rec, &e) > 0)
        if (rec.kind == TR_REQUEST && rec.req.n_hashes) sum += rec.req.hashes[rec.req.n_hashes - 1];
    (void)sum;
    tr_reader_close(r);
    return 0;
}
