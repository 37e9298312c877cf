/* fuzz_model_config.c — any bytes as config.json: either a message, or a
 * config that passed validation and whose derived sizes compute. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz-cfg-%d.json", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    model_config c;
    rh_err e;
    if (model_config_load(path, &c, &e) == 0) {
        if (model_config_validate(&c, path, &e) != 0) abort();
        float inv[512];
        model_rope_inv_freq(&c, inv);
        volatile uint64_t p = model_param_count(&c) + model_kv_bytes_per_token(&c);
        (void)p;
    }
    return 0;
}
