/* fuzz_safetensors.c — any bytes as a .safetensors file: st_open either
 * rejects them with a message or returns tensors whose data lies inside the
 * file, which st_read_f32 must then be able to read. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz-st-%d.safetensors", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    rh_err e;
    st_file *st = st_open(path, &e);
    if (st) {
        for (size_t i = 0; i < st->n; i++) {
            const st_tensor *t = &st->tensors[i];
            if (t->dtype == ST_OTHER || t->numel > (1u << 20)) continue;
            float *out = malloc(t->numel ? t->numel * sizeof(float) : 1);
            if (out && st_read_f32(t, out) != 0) abort();
            free(out);
        }
        st_close(st);
    }
    return 0;
}
