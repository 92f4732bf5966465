// The bit planes of the CUDA decode (model/cuda/sign_mma.hpp) on the CPU: the
// reference its sign_planes kernel is tested against, bit for bit, and the
// arithmetic of the products the tensor cores compute from them.
//   v ≈ σ_c q per chunk c of 512 inputs, σ_c = max_{j∈c} |v_j| / 32767 (float),
//   q_j = rint(v_j / σ_c) = rint(v_j · (32767 / max)) in [−32767, 32767],
//   q_j = Σ_{p<15} 2^p bit_p(q_j) − 2^15 bit_15(q_j) (two's complement),
//   Σ_j s_j v_j ≈ Σ_c σ_c (Σ_{j∈c} q_j − 2 Σ_p w_p popc(b AND plane_p)),
// with b_j = 1 where s_j = −1, w_p = 2^p (p < 15), w_15 = −2^15.
#pragma once

#include <cstdint>
#include <vector>

namespace cortiq::blr {

constexpr int64_t kPlaneChunk = 512;
constexpr int kPlanes = 16;
constexpr int64_t kPlaneChunkWords = kPlanes * kPlaneChunk / 32;  // u32 words per chunk

struct Planes {
    int64_t cols = 0;
    // chunk c's planes at kPlaneChunkWords·c, plane p's 16 words at + 16·p;
    // bit j % 32 of word (j % 512) / 32 is bit p of q_j
    std::vector<uint32_t> words;
    // per chunk: σ_c, σ_c·Σq and σ_c·Σ|q| (float, as on the device)
    std::vector<float> sigma, sigma_sum_q, sigma_sum_abs_q;
};

// A chunk of zeros has σ = 0; a chunk with a non-finite value σ = NaN (so
// that the products come out NaN, as a dense one would) and q = 0.
Planes planes_of(const float* v, int64_t cols);

// q_j back from the planes.
int32_t plane_value(const Planes& p, int64_t j);

// Σ_j s_j v_j as the plane kernels compute it, in double: sign row `row`
// (bit j % 32 of word j / 32 set: s_j = −1; ceil(cols / 32) words).
double plane_dot(const uint32_t* row, const Planes& p);

// The wide planes (model/cuda/sign_mma.hpp) in which the first product of a
// BLR layer writes t = ℓ ∘ S_Vᵀ(g ∘ x) for the second: 24 planes of q_k =
// rint(t_k / σ'_c), with σ'_c fixed before the product from the bound
// |t_k| ≤ L_c B, L_c = max_{k∈c} |ℓ_k|, B = Σ_c' σ_c' Σ |q_j| of x's planes:
//   bound_c = L_c·B·(1 + 2^-12),  σ'_c = bound_c / (2^23 − 1).
constexpr int kWidePlanes = 24;
constexpr int32_t kWideQMax = (1 << 23) - 1;

// bound_c as the device computes it (B summed over x's chunks in the order
// of a warp: lane l the chunks l, l + 32, …, then a butterfly over the lanes).
float wide_bound(float l_max, const Planes& x);
// q_k of the wide planes (0 where the bound is 0 or not finite).
int32_t wide_q(float t, float bound);

}  // namespace cortiq::blr
