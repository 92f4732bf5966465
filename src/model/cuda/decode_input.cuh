// The value the decode's first launch reads of input j of row i (sign_planes.cu
// for the binary planes, half_inputs.cu for fp16): v_j = g_j·in_j, or
// g_j·RMSNorm(in)_j, or g_j·silu(in_j)·up_j — one definition, so that both
// routes read the same values. Included by CUDA sources only.
#pragma once

#include <cstdint>

#include "model/cuda/pointwise.cuh"
#include "model/cuda/reduce.cuh"

namespace cortiq::model::cuda {

// RMSNorm's inv of one row (rms_inv), its squares summed in float64 by the
// whole block of kThreads (as model/cuda/rmsnorm.cu).
template <int kThreads>
__device__ float row_inv_norm(const float* row, int64_t cols, float eps, double* scratch) {
    double ss = 0;
    for (int64_t t = threadIdx.x; t < cols; t += kThreads)
        ss += static_cast<double>(row[t]) * row[t];
    return rms_inv(block_sum(ss, scratch), cols, eps);
}

// v_j of a job (PlaneJob or HalfJob: in, ld_in, cols, norm_w, norm_eps, up)
// with g = g_j and nw = norm_w[j] loaded by the caller (before its wait);
// every thread of the block calls it together (the norm's sum). 0 past cols.
template <int kThreads, class Job>
__device__ float decode_input(const Job& jb, int64_t i, int64_t j, float g, float nw,
                              double* scratch) {
    const float* row = jb.in + i * jb.ld_in;
    float x = j < jb.cols ? row[j] : 0.0f;
    if (jb.norm_w) x = nw * (x * row_inv_norm<kThreads>(row, jb.cols, jb.norm_eps, scratch));
    if (jb.up && j < jb.cols) x = silu_times(x, jb.up[i * jb.ld_in + j]);
    return g * x;
}

}  // namespace cortiq::model::cuda
