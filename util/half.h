/* half.h — IEEE half (f16) and bfloat16 conversions to and from f32.
 *
 * Weight files store f16 or bf16; the engine computes in f32. Conversions to
 * f32 are exact; conversions from f32 round to nearest, ties to even, keep
 * infinities and NaNs (as a quiet NaN), and produce f16 subnormals. */
#ifndef RH_HALF_H
#define RH_HALF_H

#include <stdint.h>

float rh_f16_to_f32(uint16_t h);
uint16_t rh_f32_to_f16(float f);
float rh_bf16_to_f32(uint16_t h);
uint16_t rh_f32_to_bf16(float f);

#endif
