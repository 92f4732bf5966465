// The stages of the packed layer's batch path (model/cuda/blr_linear.cu), one
// kernel per file. Internal to model/cuda.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "model/cuda/blr_linear.hpp"
#include "model/cuda/sign_gemv.hpp"

namespace cortiq::model::cuda {

// tile[k, j] (row-major, leading dimension ld_tile) = s(k, c0 + j) ∈ {+1, −1}
// as fp16 (−1 where the bit is set), for k < s.rows and j < width, and 0 in
// the rows s.rows ≤ k < rows_pad. width and ld_tile are multiples of 8, c0 of
// 32, c0 + width ≤ 32·s.ld (padding bits, zero, give +1). (sign_tile_f16.cu)
void sign_tile_f16(const SignMatrix& s, int64_t c0, int64_t width, int64_t ld_tile,
                   int64_t rows_pad, __half* tile, cudaStream_t stream);

// Per row i < rows, with v_ij = in[i·ld_in + j] · vec_j · (in_scale ? in_scale[i] : 1):
//   out[i·ld_out + j] = fp16(v_ij · 2^e_i) for j < cols, 0 for cols ≤ j < ld_out,
//   inv[i] = 2^−e_i,
// e_i the power of two that puts the row's max |v| in [2^14, 2^15) (0 for a
// row of zeros or non-finite values), so no value overflows fp16 and the
// largest keep 11 significant bits. (rows_to_f16.cu)
void rows_to_f16(const float* in, int64_t ld_in, const __half* vec, const float* in_scale,
                 int64_t rows, int64_t cols, __half* out, int64_t ld_out, float* inv,
                 cudaStream_t stream);

// y[i, j] = (first ? β·y[i, j] : y[i, j]) + h_j · u[i, j] · (row_scale ? row_scale[i] : 1)
//           (+ bias_j when last and bias is not null), y rows × m, u rows × m
//           with leading dimension ld_u (0: m). (blr_epilogue.cu)
struct EpilogueArgs {
    float* y = nullptr;
    const float* u = nullptr;
    const __half* h = nullptr;
    const float* row_scale = nullptr;
    const float* bias = nullptr;
    int64_t rows = 0, m = 0;
    float beta = 0.0f;
    bool first = true, last = true;
    int64_t ld_u = 0;
};
void blr_epilogue(const EpilogueArgs& a, cudaStream_t stream);

// The TF32 batch path (expanded ±1.0f tiles, cuBLAS TF32), kept to compare
// against (BatchMath::tf32). (blr_batch_tf32.cu)
void batch_path_tf32(cublasHandle_t blas, cudaStream_t stream, const DevicePacked& w,
                     PackedScratch& ws, const float* x, int64_t rows, float* y, float beta,
                     const float* bias);

// Grid-stride launches: blocks of 256 threads for n items.
inline unsigned blocks_for(int64_t n) {
    const int64_t b = (n + 255) / 256;
    return static_cast<unsigned>(b < 1 ? 1 : (b > 65536 ? 65536 : b));
}

}  // namespace cortiq::model::cuda
