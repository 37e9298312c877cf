/* fuzz_trace_sglang_fpm.c — the forward-pass-metrics (dynamo.fpm.trace.v1) importer on arbitrary bytes (fuzz_import.h). */
#include "fuzz_import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_import(data, size, TR_FMT_SGLANG_FPM);
}
