// Four consecutive packed signs of a rows × rp sign matrix as floats: ±1 for
// the columns j < r, 0 in the padding columns (grad_ops.hpp, DBlrPath's
// su_bits and sv_bits: bit i·rp + j set where +1). e = i·rp + j is the index
// of the first, j its column; rp is a multiple of 4, so the four share a row.
#pragma once

#include <cstdint>

namespace cortiq::tune::cuda {

__device__ __forceinline__ float4 sign_quad(const uint32_t* bits, int64_t e, int64_t j, int64_t r) {
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const bool plus = (bits[(e + k) >> 5] >> ((e + k) & 31)) & 1u;
        v[k] = j + k < r ? (plus ? 1.0f : -1.0f) : 0.0f;
    }
    return make_float4(v[0], v[1], v[2], v[3]);
}

}  // namespace cortiq::tune::cuda
