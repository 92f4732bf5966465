// Sign products on the binary tensor cores (SPEC §9 decode, Decode::planes):
// the same products as sign_rows.hpp,
//   out[i, k] = β·out[i, k] + bias[k] + Σ_pc scale_pc[k] · Σ_j s_pc(k, j) · g_pc[j] · in_pc[i, j],
// for one or two rows of activations, with the inputs first cut into chunks
// of 512 and each chunk turned into 16 bit planes of 16-bit integers:
//   v_j = g_j·in_j ≈ σ_c q_j,  σ_c = max_{j∈c} |v_j| / 32767,  q_j = rint(v_j / σ_c),
//   q_j = Σ_{p<15} 2^p·bit_p(q_j) − 2^15·bit_15(q_j)   (two's complement),
// so that, with b(k, j) = 1 where s(k, j) = −1 (s = 1 − 2b),
//   Σ_j s(k, j) v_j ≈ Σ_c σ_c (Σ_{j∈c} q_j − 2 Σ_p w_p D_p(k, c)),
//   D_p(k, c) = popc(b(k, ·) AND bit_p(q_·)) over the chunk,
// and each D_p is one column of mma.m16n8k256 .b1 with .and.popc: a warp
// multiplies 16 sign rows by 8 planes at a time, 256 bits of each, straight
// from the rows' words — no bit is expanded, no table built. The only
// rounding is q's: ≤ σ_c / 2 per input, 2^-16 of the chunk's largest.
// sign_planes writes the planes (a kernel per input vector's chunks, in
// parallel); sign_mma runs the products from them.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "blr/sign_planes.hpp"
#include "model/cuda/sign_gemv.hpp"

namespace cortiq::model::cuda {

// Host and device (this header is also read by host-only sources).
#ifdef __CUDACC__
#define CORTIQ_PLANES_HD __host__ __device__
#else
#define CORTIQ_PLANES_HD
#endif

// The layout of blr/sign_planes.hpp (the CPU reference of sign_planes).
constexpr int kPlaneChunk = static_cast<int>(blr::kPlaneChunk);  // two k-steps of 256
constexpr int kPlanes = blr::kPlanes;
CORTIQ_PLANES_HD constexpr int64_t plane_chunks(int64_t cols) {
    return (cols + kPlaneChunk - 1) / kPlaneChunk;
}
// u32 words of one row's planes: per chunk 16 planes × 16 words.
CORTIQ_PLANES_HD constexpr int64_t plane_words(int64_t cols) {
    return plane_chunks(cols) * blr::kPlaneChunkWords;
}

// One input vector per row (R rows) as planes: row i's planes at
// planes + i·plane_words(cols), chunk c's 16 planes of 16 words at 256·c
// (plane p at 256·c + 16·p); info[i·chunks + c] = {σ_c, σ_c·Σ_{j∈c} q_j}.
struct PlaneInput {
    const uint32_t* planes = nullptr;
    const float2* info = nullptr;
    int64_t cols = 0;
    // per chunk σ_c·Σ_{j∈c} |q_j| ≥ Σ_j |σ_c q_j|: the bound that sets the
    // scale of wide output planes (needed by a product with planes_out)
    const float* abs_info = nullptr;
};

// Wide planes (what a product writes of its outputs with planes_out, read
// by the second product of a BLR layer): 24 bit planes of integers, per chunk
// of 512 outputs 24 planes × 16 words (plane p at 384·c + 16·p, bit k % 32 of
// word (k % 512) / 32 of plane p is bit p of q_k, two's complement, plane 23
// weighing −2^23), with a scale fixed before the product by a bound instead
// of the chunk's maximum, so that no second pass over the outputs is needed:
//   out_k = ℓ_k Σ_j s(k, j) v_j,  |out_k| ≤ L_c B,  L_c = max_{k∈c} |ℓ_k|,
//   B = Σ_c' σ_c' Σ_{j∈c'} |q_j| (the input's abs_info),
//   σ'_c = L_c B (1 + 2^-12) / (2^23 − 1),  q_k = rint(out_k / σ'_c).
// For Gaussian inputs the bound is about 0.25·√cols times a chunk's largest
// output (less with outliers), so q keeps about 23 − log2(0.25·√cols) bits
// of it (17 at cols = 11008), against 15 for sign_planes' maximum scale.
constexpr int kWidePlanes = blr::kWidePlanes;
constexpr int kWideChunkWords = kWidePlanes * kPlaneChunk / 32;  // 384
constexpr int kWideQMax = blr::kWideQMax;
constexpr int kTilesPerChunk = kPlaneChunk / 16;  // 16-row tiles of a chunk
CORTIQ_PLANES_HD constexpr int64_t wide_plane_words(int64_t cols) {
    return plane_chunks(cols) * kWideChunkWords;
}
CORTIQ_PLANES_HD constexpr int64_t wide_tiles(int64_t cols) {
    return plane_chunks(cols) * kTilesPerChunk;
}

// One output vector per row (R rows) as wide planes: row i's planes at
// planes + i·wide_plane_words(cols), σ'_c at sigma[i·chunks + c], and
// Σ q over each tile of 16 outputs at tile_sum[i·wide_tiles(cols) + tile]
// (exact; zero past cols, where the planes are zero too).
struct WidePlanes {
    uint32_t* planes = nullptr;
    float* sigma = nullptr;
    int32_t* tile_sum = nullptr;
};

struct WideInput {
    const uint32_t* planes = nullptr;
    const float* sigma = nullptr;
    const int32_t* tile_sum = nullptr;
    int64_t cols = 0;
};

// What sign_planes computes: the planes of g ∘ in (g null: ones), or with
// norm_w of g ∘ RMSNorm(in): each row's in_j replaced by norm_w[j] · (in_j ·
// inv), inv = 1 / √(Σ_j in_j² / cols + norm_eps) with the sum in float64 —
// the arithmetic of model/cuda/rmsnorm.cu, so that the decode of a normed
// input needs no launch of its own for the norm; or with up of g ∘ (silu(in)
// ∘ up), swiglu.cu's arithmetic (the input of down_proj).
struct PlaneJob {
    const float* in = nullptr;  // R rows of cols values, leading dimension ld_in
    int64_t ld_in = 0;
    const float* g = nullptr;
    int64_t cols = 0;
    uint32_t* planes = nullptr;  // R · plane_words(cols)
    float2* info = nullptr;      // R · plane_chunks(cols)
    float* abs_info = nullptr;   // R · plane_chunks(cols), or null: not written
    const float* norm_w = nullptr;
    float norm_eps = 0.0f;
    const float* up = nullptr;  // R rows of cols values, leading dimension ld_in
};

// rows = 1 .. kPlaneDecodeRows; any number of jobs. Launched with programmatic dependent
// launch (reads the previous kernel's outputs after it completes).
void sign_planes(const PlaneJob* jobs, int count, int rows, cudaStream_t stream);

struct MmaPiece {
    // Rows of words; ld a multiple of 4 (16-byte loads) and the buffer
    // readable 16 words past the last row: a chunk's loads may run past a
    // row's end, where the planes are zero.
    SignMatrix s;
    PlaneInput in;                      // s.cols inputs (sign_mma)
    WideInput wide;                     // s.cols inputs (sign_mma_wide)
    const __half* out_scale = nullptr;  // per row, or null for ones
};

struct MmaProduct {
    MmaPiece piece[2];
    int pieces = 1;        // pieces share their rows
    float* out = nullptr;  // R rows of piece[0].s.rows values, leading dimension ld_out, or null
    int64_t ld_out = 0;
    float beta = 0.0f;            // 0: out is not read
    const float* bias = nullptr;  // one per row, or null
    // Non-null planes (sign_mma, one piece, β = 0, no bias, in.abs_info
    // set): the outputs are also written as wide planes.
    WidePlanes planes_out;
};

constexpr int kMaxMmaProducts = 8;
// The most rows of activations sign_planes and sign_mma take.
constexpr int kPlaneDecodeRows = 16;
// Words a SignMatrix for sign_mma must be readable past its last row.
constexpr int64_t kMmaTailWords = 16;

// rows = 1 .. kPlaneDecodeRows. sign_mma reads the pieces' planes (in), sign_mma_wide
// their wide planes (wide).
void sign_mma(const MmaProduct* products, int count, int rows, cudaStream_t stream);
void sign_mma_wide(const MmaProduct* products, int count, int rows, cudaStream_t stream);

}  // namespace cortiq::model::cuda
