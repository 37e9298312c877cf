/* fuzz_trace_vidur.c — the vidur CSV importer on arbitrary bytes (fuzz_import.h). */
#include "fuzz_import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_import(data, size, TR_FMT_VIDUR);
}
