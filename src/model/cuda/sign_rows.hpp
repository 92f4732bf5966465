// Sign products by whole rows, several in one launch (SPEC §9 decode): for
// one or two rows of activations, every product of the launch computes
//   out[i, k] = β·out[i, k] + bias[k] + Σ_pc scale_pc[k] · Σ_j s_pc(k, j) · g_pc[j] · in_pc[i, j]
// over its pieces pc (one or two sign matrices with the same rows), with
// s(k, j) = −1 where bit j % 32 of word j / 32 of row k is set. A block owns
// whole rows of one product, so no block waits for another's partial sums
// (sign_gemv.hpp splits long rows into 1024-column spans met through global
// memory). The packed layer puts both products of a layer — or of several
// layers that read the same input, q/k/v and gate/up — into two launches:
//   launch 1: t_p = ℓ_p ∘ S_V,pᵀ (g_p ∘ x) for every path p (one piece each);
//   launch 2: y = β·y + bias + Σ_p h_p ∘ S_U,p t_p (the paths as pieces).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "model/cuda/sign_gemv.hpp"

namespace cortiq::model::cuda {

struct SignPiece {
    SignMatrix s;               // rows: the product's; cols: the inputs read
    const float* in = nullptr;  // R rows of s.cols values, leading dimension ld_in
    int64_t ld_in = 0;
    const float* in_scale = nullptr;    // g (s.cols), or null for ones
    const __half* out_scale = nullptr;  // per row, or null for ones
};

struct SignProduct {
    SignPiece piece[2];
    int pieces = 1;
    float* out = nullptr;  // R rows of piece[0].s.rows values, leading dimension ld_out
    int64_t ld_out = 0;
    float beta = 0.0f;            // 0: out is not read
    const float* bias = nullptr;  // one per row, or null
};

// The most products one launch takes (sign_rows splits longer lists).
constexpr int kMaxSignProducts = 8;

// Whether a product's rows fit the kernel (a row of all its pieces in the
// shared memory of one block); if not, run it with sign_gemv.
bool sign_rows_fits(const SignProduct& p, int rows);

// rows = 1 or 2; every product must fit.
void sign_rows(const SignProduct* products, int count, int rows, cudaStream_t stream);

}  // namespace cortiq::model::cuda
