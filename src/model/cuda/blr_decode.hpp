// Decode (one or two rows) of a whole BLR layer in one kernel (SPEC §9):
//   phase 1, every path p at once:  t_p = ℓ_p ∘ S_Vᵀ_p (g_p ∘ x)
//   a grid-wide barrier (cooperative launch: every block is resident)
//   phase 2:  y = β·y + bias + Σ_p h_p ∘ S_U,p t_p
// where the per-product path (sign_gemv twice per path) launches 2·P kernels,
// each a chain of dependent steps that costs about 5 µs whatever its bytes on
// the H200. The bits of phase 2's first slab are copied while phase 1 runs.
// The arithmetic is that of the per-product path in the same order (the span
// partials of S_Vᵀ summed in span order, then ℓ; the paths of y added in path
// order after β·y and the bias), so both give the same bits.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/device.hpp"

namespace cortiq::model::cuda {

// One packed layer's device arrays (blr_linear.hpp's DevicePacked, not a sign
// payload): per path, S_Vᵀ as r rows of ld_v words and S_U as m rows of ld_u
// words (rows of 32-bit words, bit j of a row ↔ column j, set = −1), the f16
// scales h (paths × m), ℓ (paths × r), g (paths × n).
struct DecodeLayer {
    const uint32_t* sv = nullptr;
    const uint32_t* su = nullptr;
    int64_t ld_v = 0, ld_u = 0;
    const __half *h = nullptr, *l = nullptr, *g = nullptr;
    int64_t m = 0, n = 0, r = 0;
    int paths = 0;
};

struct DecodeScratch {
    cortiq::cuda::DVec part_t, part_y;              // span partials of t and of y
    cortiq::cuda::DeviceBuffer<unsigned> counters;  // per row chunk of y, zero between calls
};

// y (rows × m, leading dimension m) = β·y + x (rows × n, leading dimension
// n) · Ŵᵀ (+ bias[m] when not null); rows = 1 or 2.
void blr_decode(const DecodeLayer& w, const float* x, int rows, float* y, float beta,
                const float* bias, DecodeScratch& ws, cudaStream_t stream);

}  // namespace cortiq::model::cuda
