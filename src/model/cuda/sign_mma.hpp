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
};

// What sign_planes computes: the planes of g ∘ in (g null: ones).
struct PlaneJob {
    const float* in = nullptr;  // R rows of cols values, leading dimension ld_in
    int64_t ld_in = 0;
    const float* g = nullptr;
    int64_t cols = 0;
    uint32_t* planes = nullptr;  // R · plane_words(cols)
    float2* info = nullptr;      // R · plane_chunks(cols)
};

// rows = 1 or 2; any number of jobs. Launched with programmatic dependent
// launch (reads the previous kernel's outputs after it completes).
void sign_planes(const PlaneJob* jobs, int count, int rows, cudaStream_t stream);

struct MmaPiece {
    // Rows of words; ld a multiple of 4 (16-byte loads) and the buffer
    // readable 16 words past the last row: a chunk's loads may run past a
    // row's end, where the planes are zero.
    SignMatrix s;
    PlaneInput in;                      // s.cols inputs
    const __half* out_scale = nullptr;  // per row, or null for ones
};

struct MmaProduct {
    MmaPiece piece[2];
    int pieces = 1;        // pieces share their rows
    float* out = nullptr;  // R rows of piece[0].s.rows values, leading dimension ld_out
    int64_t ld_out = 0;
    float beta = 0.0f;            // 0: out is not read
    const float* bias = nullptr;  // one per row, or null
};

constexpr int kMaxMmaProducts = 8;
// Words a SignMatrix for sign_mma must be readable past its last row.
constexpr int64_t kMmaTailWords = 16;

// rows = 1 or 2.
void sign_mma(const MmaProduct* products, int count, int rows, cudaStream_t stream);

}  // namespace cortiq::model::cuda
