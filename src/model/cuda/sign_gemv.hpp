// One or two rows through a matrix of signs, read from its bits once
// (SPEC §9 decode):
//   out[i, k] = β·out[i, k] + bias[k] + scale[k] · Σ_j s(k, j) · g[j] · in[i, j]
// with s(k, j) = −1 where bit j % 32 of word j / 32 of row k is set. The
// packed layer runs two per path: t = ℓ ∘ S_Vᵀ (g ∘ x), then y += h ∘ S_U t
// (model/cuda/blr_linear.cu).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/device.hpp"

namespace cortiq::model::cuda {

// Signs as rows of 32-bit words (blr/sign_layout.hpp).
struct SignMatrix {
    const uint32_t* words = nullptr;
    int64_t ld = 0;  // words per row, ≥ ceil(cols / 32)
    int64_t rows = 0, cols = 0;
};

// Buffers a run of sign_gemv needs: partial sums of column spans and the
// counters that find the last block of a row chunk (zero between calls).
struct GemvScratch {
    cortiq::cuda::DVec part;
    cortiq::cuda::DeviceBuffer<unsigned> counters;
};

struct GemvIo {
    const float* in = nullptr;  // R rows of s.cols values, leading dimension ld_in
    int64_t ld_in = 0;
    const __half* in_scale = nullptr;   // g (s.cols), or null for ones
    const __half* out_scale = nullptr;  // per output (s.rows), or null for ones
    float* out = nullptr;               // R rows of s.rows values, leading dimension ld_out
    int64_t ld_out = 0;
    float beta = 0.0f;            // 0: out is not read
    const float* bias = nullptr;  // s.rows values, or null
};

// rows = 1 or 2.
void sign_gemv(const SignMatrix& s, const GemvIo& io, int rows, GemvScratch& ws,
               cudaStream_t stream);

}  // namespace cortiq::model::cuda
