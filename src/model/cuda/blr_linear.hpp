// A compressed linear layer on the device, run from its packed bits (SPEC §9;
// the CUDA twin of model/blr_linear.hpp). Per path:
//   t = ℓ ∘ (S_Vᵀ (g ∘ x)),  u = S_U t,  y = β·y + Σ_p h_p ∘ u_p (+ bias)
// (a sign payload: y = β·y + h ∘ (S (g ∘ x)) + bias).
// One or two rows (decode): per product one kernel that reads every sign bit
// once and adds tabulated signed sums of four inputs (model/cuda/sign_gemv.cu).
// A batch (prefill, scoring): tiles of bits expanded to ±1.0f and multiplied
// by cuBLAS with TF32 tensor cores (±1 is exact in TF32; the activations round
// to 10-bit mantissas, ~1e-4 relative on a layer).
//
// On the device the signs are not the payload's dense stream but rows that
// start on 32-bit words (blr/sign_layout.hpp): S_Vᵀ as r rows of n bits and
// S_U as m rows of r bits (the payload's S_Uᵀ transposed at upload), so both
// products are products of rows; at most 31 padding bits per row.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "blr/packed.hpp"
#include "core/cuda/device.hpp"
#include "model/cuda/sign_gemv.hpp"

namespace cortiq::model::cuda {

struct DevicePacked {
    int64_t m = 0, n = 0, r = 0;
    int paths = 0;
    bool sign = false;
    int64_t ld_v = 0, ld_u = 0;  // u32 words per row of S_Vᵀ (n bits) and of S_U (r bits)
    cortiq::cuda::DeviceBuffer<uint32_t> sv;       // per path: S_Vᵀ (a sign payload: S, m rows)
    cortiq::cuda::DeviceBuffer<uint32_t> su;       // per path: S_U, m rows
    cortiq::cuda::DeviceBuffer<uint16_t> h, l, g;  // f16 scales, paths × (m | r | n)
    SignMatrix svt(int p) const;
    SignMatrix s_u(int p) const;
    int64_t bytes() const {
        return 4 * (sv.size() + su.size()) + 2 * (h.size() + l.size() + g.size());
    }
};

// Buffers one model's packed layers share (used on one stream in order).
struct PackedScratch {
    cortiq::cuda::DVec xg, t, u, tile;
    GemvScratch gemv;
};

DevicePacked upload_packed(const blr::PackedWeight& w, cudaStream_t stream);

// Rows up to this many take the decode kernels.
constexpr int64_t kDecodeRows = 2;

// y (rows × m) = beta·y + x (rows × n) · Ŵᵀ (+ bias[m] when bias is not null).
void packed_linear(cublasHandle_t blas, cudaStream_t stream, const DevicePacked& w,
                   PackedScratch& ws, const float* x, int64_t rows, float* y, float beta,
                   const float* bias);

}  // namespace cortiq::model::cuda
