// Signs to an fp16 tile for the tensor cores (the batch path of
// model/cuda/blr_linear.cu): ±1 is exact in fp16. One thread per 8 bits, so
// a warp reads 8 words and writes 512 contiguous bytes in 16-byte stores.
#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/cuda/blr_batch.hpp"

namespace cortiq::model::cuda {

namespace {

// Two fp16 values (low half first): +1 (0x3C00), or −1 where bit 0 / bit 1 of b is set.
__device__ __forceinline__ uint32_t two_signs(uint32_t b) {
    return (0x3C00u | ((b & 1u) << 15)) | ((0x3C00u | ((b & 2u) << 14)) << 16);
}

// tile row k, columns 8q..8q+7 (one uint4) = bits c0 + 8q.. of row k of S;
// zeros in rows s.rows ≤ k < rows_pad.
__global__ void sign_tile_f16_kernel(SignMatrix s, int64_t c0, int64_t groups, int64_t ld_vec,
                                     int64_t rows_pad, uint4* __restrict__ tile) {
    const int64_t n = rows_pad * groups;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t k = i / groups, q = i - k * groups;
        if (k >= s.rows) {
            tile[k * ld_vec + q] = make_uint4(0u, 0u, 0u, 0u);
            continue;
        }
        const int64_t col = c0 + 8 * q;
        const uint32_t b = (__ldg(s.words + k * s.ld + col / 32) >> (col % 32)) & 0xffu;
        tile[k * ld_vec + q] =
            make_uint4(two_signs(b), two_signs(b >> 2), two_signs(b >> 4), two_signs(b >> 6));
    }
}

}  // namespace

void sign_tile_f16(const SignMatrix& s, int64_t c0, int64_t width, int64_t ld_tile,
                   int64_t rows_pad, __half* tile, cudaStream_t stream) {
    CORTIQ_ASSERT(width % 8 == 0 && ld_tile % 8 == 0 && c0 % 32 == 0 && width <= ld_tile &&
                      c0 + width <= 32 * s.ld && rows_pad >= s.rows,
                  "sign_tile_f16: width {} ld {} c0 {} (row of {} words)", width, ld_tile, c0,
                  s.ld);
    const int64_t groups = width / 8;
    if (rows_pad * groups == 0) return;
    sign_tile_f16_kernel<<<blocks_for(rows_pad * groups), 256, 0, stream>>>(
        s, c0, groups, ld_tile / 8, rows_pad, reinterpret_cast<uint4*>(tile));
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
