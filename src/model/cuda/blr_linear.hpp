// A compressed linear layer on the device, run from its packed bits (SPEC §9;
// the CUDA twin of model/blr_linear.hpp). Per path:
//   t = ℓ ∘ (S_Vᵀ (g ∘ x)),  u = S_U t,  y = β·y + Σ_p h_p ∘ u_p (+ bias)
// (a sign payload: y = β·y + h ∘ (S (g ∘ x)) + bias).
// One or two rows (decode): two kernels that read every sign bit once, with
// coalesced loads (model/cuda/blr_linear.cu). A batch (prefill, scoring): tiles of bits expanded to
// ±1.0f and multiplied by cuBLAS with TF32 tensor cores (±1 is exact in TF32; the activations round
// to 10-bit mantissas, ~1e-4 relative on a layer).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "blr/packed.hpp"
#include "core/cuda/device.hpp"

namespace cortiq::model::cuda {

struct DevicePacked {
    int64_t m = 0, n = 0, r = 0;
    int paths = 0;
    bool sign = false;
    cortiq::cuda::DeviceBuffer<uint32_t> bits;     // the sign stream + a 64-bit guard
    cortiq::cuda::DeviceBuffer<uint16_t> h, l, g;  // f16 scales, paths × (m | r | n)
    int64_t bytes() const { return 4 * bits.size() + 2 * (h.size() + l.size() + g.size()); }
};

// Buffers one model's packed layers share (used on one stream in order).
struct PackedScratch {
    cortiq::cuda::DVec xg, t, u, tile;
};

DevicePacked upload_packed(const blr::PackedWeight& w, cudaStream_t stream);

// Rows up to this many take the decode kernels.
constexpr int64_t kDecodeRows = 2;

// y (rows × m) = beta·y + x (rows × n) · Ŵᵀ (+ bias[m] when bias is not null).
void packed_linear(cublasHandle_t blas, cudaStream_t stream, const DevicePacked& w,
                   PackedScratch& ws, const float* x, int64_t rows, float* y, float beta,
                   const float* bias);

}  // namespace cortiq::model::cuda
