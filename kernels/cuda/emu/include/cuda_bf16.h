/* cuda_bf16.h (emulator) — bfloat16 as a 16-bit pattern, converted with
 * round-to-nearest-even as the GPU's __float2bfloat16 does. */
#ifndef RH_CUDA_EMU_BF16_H
#define RH_CUDA_EMU_BF16_H

#include "emu.h"

struct __nv_bfloat16 {
    uint16_t x;
};

static inline __nv_bfloat16 __float2bfloat16(float f)
{
    uint32_t u = __float_as_uint(f);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) b.x = (uint16_t)((u >> 16) | 0x40);   /* NaN stays a (quiet) NaN */
    else b.x = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
    return b;
}
static inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((uint32_t)b.x << 16); }

#endif
