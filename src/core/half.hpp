// IEEE 754 binary16 and bfloat16 conversions (round to nearest even,
// subnormals, infinities and NaN preserved). Used by the payload scales and by
// the safetensors reader.
#pragma once

#include <cstdint>

namespace cortiq {

uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
// out[i] = half_to_float(in[i]) for n values: the processor's conversion
// instruction where it has one (F16C: the same floats for every finite or
// infinite value; a NaN stays a NaN), else one value at a time.
void halves_to_floats(const uint16_t* in, int64_t n, float* out);
// Round-trip a double through binary16 (what a stored scale becomes).
inline double round_half(double x) {
    return half_to_float(float_to_half(static_cast<float>(x)));
}

uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);

constexpr float kHalfMax = 65504.0f;
constexpr float kHalfMinNormal = 6.103515625e-05f;

}  // namespace cortiq
