// Float32 GEMM for the runtime, threaded by OpenMP over panels with
// single-threaded BLAS inside (see core/blas_threads.hpp): tiles of 128 rows
// by 2048 columns for a batch of rows, column panels for a few rows.
#pragma once

#include <cstdint>

#include "core/matrix.hpp"

namespace cortiq::la {

// C (T × N, row-major, ldc) = beta·C + A (T × K, lda) · op(B), op(B) = Bᵀ with
// B N × K (b_trans) or B with B K × N. Up to kGemvRows rows with b_trans: a
// matrix-vector product per row (no packing of B), each row's outputs the
// same whatever the rows beside it.
inline constexpr int64_t kGemvRows = 4;
void panel_sgemm(bool b_trans, int64_t T, int64_t N, int64_t K, const float* a, int64_t lda,
                 const float* b, float beta, float* c, int64_t ldc);

// Float64 A · B by panels of 64 rows of A, each one BLAS call, run on the
// OpenMP threads: the same bits whatever the thread count, as long as BLAS
// itself runs one thread per call (OneBlasThread, core/blas_threads.hpp).
MatD panel_dgemm(const MatD& a, const MatD& b);

// X = B A⁻¹ for a symmetric positive definite A (n × n) and B (m × n): one
// Cholesky factor A = L Lᵀ (ridge as in solve_spd), then X = B L⁻ᵀ L⁻¹ by
// panels of 64 rows of B, two triangular solves each, on the OpenMP threads;
// deterministic under the same condition as panel_dgemm.
MatD panel_solve_spd_right(const MatD& b, const MatD& a, double ridge_rel = 1e-10);
// The same from the factor: X = B (L Lᵀ)⁻¹, L lower triangular (spd_factor),
// for several right-hand sides of one system.
MatD panel_solve_cholesky_right(const MatD& b, const MatD& l);

}  // namespace cortiq::la
