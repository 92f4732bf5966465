// The float arithmetic of RMSNorm and SwiGLU, shared by their own kernels
// (rmsnorm.cu, swiglu.cu) and the decode's planes kernel, which applies them
// to its input as it reads it (sign_planes.cu): one definition, so the fused
// and the separate routes compute the same values. Included by CUDA sources
// only.
#pragma once

#include <cstdint>

namespace cortiq::model::cuda {

// inv = 1 / √(Σx² / n + eps) from the row's sum of squares in float64 (as
// model::rmsnorm); the normed value is w_j · (x_j · inv).
__device__ __forceinline__ float rms_inv(double sum_sq, int64_t n, float eps) {
    return static_cast<float>(1.0 / sqrt(sum_sq / static_cast<double>(n) + eps));
}

// silu(z) · up, the sigmoid through e = exp(−|z|), which never overflows (as
// model::swiglu).
__device__ __forceinline__ float silu_times(float z, float up) {
    const float e = expf(-fabsf(z));
    const float sig = (z >= 0 ? 1.0f : e) / (1.0f + e);
    return z * sig * up;
}

}  // namespace cortiq::model::cuda
