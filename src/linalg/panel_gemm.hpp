// Float32 GEMM for the runtime, threaded by OpenMP over panels with
// single-threaded BLAS inside (see core/blas_threads.hpp): row panels for a
// batch of rows, column panels for a few rows.
#pragma once

#include <cstdint>

namespace cortiq::la {

// C (T × N, row-major, ldc) = beta·C + A (T × K, lda) · op(B), op(B) = Bᵀ with
// B N × K (b_trans) or B with B K × N.
void panel_sgemm(bool b_trans, int64_t T, int64_t N, int64_t K, const float* a, int64_t lda,
                 const float* b, float beta, float* c, int64_t ldc);

}  // namespace cortiq::la
