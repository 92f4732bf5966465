// Warp and block reductions shared by the forward-pass kernels.
#pragma once

#include <cuda_runtime.h>

namespace cortiq::model::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread
// gets the result. `scratch` holds 32 values; the block must reach this call
// together.
template <class T>
__device__ T block_sum(T v, T* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read from an earlier call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : T(0);
    return warp_sum(v);
}

__device__ inline float block_max(float v, float* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

}  // namespace cortiq::model::cuda
