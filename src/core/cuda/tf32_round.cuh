// The high part of a float's 3xTF32 split (gemm_tf32.hpp): x rounded to
// TF32's 10 mantissa bits, to nearest even; non-finite values unchanged.
// x − tf32_high(x) is exact in float32.
#pragma once

namespace cortiq::cuda {

__device__ __forceinline__ float tf32_high(float x) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7f800000u) != 0x7f800000u)  // finite: round the low 13 bits away
        u = (u + 0x0fffu + ((u >> 13) & 1u)) & ~0x1fffu;
    return __uint_as_float(u);
}

}  // namespace cortiq::cuda
