// Sign products on the fp16 tensor cores for the decode of several rows
// (Decode::f16, blr_linear.hpp): the products of sign_mma.hpp,
//   out[i, k] = β·out[i, k] + bias[k] + Σ_pc scale_pc[k] · Σ_j s_pc(k, j) · g_pc[j] · in_pc[i, j],
// with the inputs cut into chunks of 512, each chunk scaled by a power of two
// that puts its largest |g_j·in_j| in [2^14, 2^15) and rounded to fp16,
//   v_j = g_j·in_j ≈ σ_c q_j,  σ_c = 2^−e_c,  q_j = fp16(v_j · 2^e_c),
// so Σ_j s(k, j) v_j ≈ Σ_c σ_c Σ_{j∈c} s(k, j) q_j, each inner sum one column
// of mma.m16n8k16 (fp16 × fp16, fp32 accumulation). The signs never leave
// the registers as fp16: a lane turns bits p and p + 16 of a sign word into
// one fp16 pair of ±1 with a shift and a mask (−1 where the bit is set),
//   half2(s_p, s_{p+16}) = ((w << (15 − p)) & 0x80008000) | 0x3C003C00,
// and the inputs are stored in the matching order (half_index), so that a
// lane's fragments of the inputs are 16-byte loads and a warp's 512
// contiguous bytes. One mma takes 16
// sign rows against 8 rows of inputs, so 16 rows cost two mmas for one
// expansion of the signs, where the binary tensor cores (sign_mma) need
// sixteen planes a row. The only roundings: q's (2^−11 relative, as the
// batch path's rows_to_f16) and the fp32 sums.
//
// The first product of a BLR path writes t = ℓ ∘ S_Vᵀ(g ∘ x) straight into
// this input layout for the second (HalfProduct::t_out), with one scale per
// row fixed in advance by a bound instead of each chunk's largest value (the
// chunk's outputs come from many blocks):
//   |t_k| ≤ L·A,  L = max_k |ℓ_k|,  A = Σ_c σ_c Σ_{j∈c} |q_j|,
//   σ' = 2^−e',  e' putting L·A·(1 + 2^−8) in [2^14, 2^15),
// every chunk of t getting σ'. fp16 keeps its 11 significant bits whatever
// the scale, so the bound costs precision only for values below 2^−14·σ'.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "model/cuda/sign_gemv.hpp"
#include "model/cuda/sign_mma.hpp"

namespace cortiq::model::cuda {

// fp16 inputs of R rows (R ≤ 16) of cols values, laid out so that each of a
// warp's loads is 512 contiguous bytes: half_rows(R) rows (8 or 16; the rows
// past R zero), per chunk of 512 inputs 16 groups of 16 bytes a lane: within
// a chunk, input jj lies in word w = jj / 32 of the sign rows (lane t = w / 4,
// word h = w % 4 of its 16-byte load) at permuted place P (within each 32,
// place 2i holds input i and place 2i + 1 input i + 16), the 16-byte group
// v = P / 8 of word h, element P % 8; groups (h, v) of the chunk in order,
// rows in order within a group, lanes t within a row:
//   index(i, j) = (((c·16 + 4h + v)·half_rows(R) + i)·4 + t)·8 + P % 8.
CORTIQ_PLANES_HD constexpr int half_rows(int rows) {
    return rows <= 8 ? 8 : 16;
}
CORTIQ_PLANES_HD constexpr int64_t half_len(int64_t cols, int rows) {
    return plane_chunks(cols) * kPlaneChunk * half_rows(rows);
}
CORTIQ_PLANES_HD constexpr int64_t half_index(int64_t i, int64_t j, int rows) {
    const int64_t c = j / kPlaneChunk, jj = j % kPlaneChunk, w = jj / 32, b = jj % 32;
    const int64_t place = b < 16 ? 2 * b : 2 * (b - 16) + 1;
    return (((c * 16 + 4 * (w % 4) + place / 8) * half_rows(rows) + i) * 4 + w / 4) * 8 + place % 8;
}

// R rows of fp16 inputs at q (half_index), σ_c of row i at
// sigma[i·plane_chunks(cols) + c].
struct HalfInput {
    const __half* q = nullptr;
    const float* sigma = nullptr;
    int64_t cols = 0;
    // per chunk σ_c Σ_{j∈c} |q_j| (the bound A of a product with t_out)
    const float* abs_info = nullptr;
};

// What half_inputs computes: the fp16 inputs of g ∘ in, g ∘ RMSNorm(in) or
// g ∘ (silu(in) ∘ up), read as sign_planes reads them (PlaneJob).
struct HalfJob {
    const float* in = nullptr;  // R rows of cols values, leading dimension ld_in
    int64_t ld_in = 0;
    const float* g = nullptr;  // null: ones
    int64_t cols = 0;
    __half* q = nullptr;        // half_len(cols, R)
    float* sigma = nullptr;     // R · plane_chunks(cols)
    float* abs_info = nullptr;  // R · plane_chunks(cols), or null
    const float* norm_w = nullptr;
    float norm_eps = 0.0f;
    const float* up = nullptr;  // R rows of cols values, leading dimension ld_in
};

// rows = 1 .. kPlaneDecodeRows; any number of jobs; programmatic dependent
// launch. (half_inputs.cu)
void half_inputs(const HalfJob* jobs, int count, int rows, cudaStream_t stream);

struct HalfPiece {
    // rows of words as sign_mma's (MmaPiece): ld a multiple of 4, readable
    // kMmaTailWords words past the last row
    SignMatrix s;
    HalfInput in;                       // s.cols inputs
    const __half* out_scale = nullptr;  // per row, or null for ones
};

// t written as the next product's input (one piece, β = 0, no bias,
// in.abs_info set): half_len(rows of S, R), σ' per row and chunk.
struct HalfOut {
    __half* q = nullptr;
    float* sigma = nullptr;
    float scale_max = 0.0f;  // L = max |out_scale|
};

struct HalfProduct {
    HalfPiece piece[2];
    int pieces = 1;        // pieces share their rows
    float* out = nullptr;  // R rows of piece[0].s.rows values, leading dimension ld_out, or null
    int64_t ld_out = 0;
    float beta = 0.0f;            // 0: out is not read
    const float* bias = nullptr;  // one per row, or null
    HalfOut t_out;                // q null: not written
};

constexpr int kMaxHalfProducts = 8;

// rows = 1 .. kPlaneDecodeRows. (sign_hmma.cu)
void sign_hmma(const HalfProduct* products, int count, int rows, cudaStream_t stream);

}  // namespace cortiq::model::cuda
