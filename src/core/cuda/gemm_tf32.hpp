// Float32 products on the TF32 tensor cores with float32 accuracy (3xTF32):
// an operand x that is not exact in TF32 is split x = hi + lo, hi rounded to
// TF32's 10 mantissa bits and lo = x − hi (exact in float32), and
//   A B ≈ A_lo B_hi + A_hi B_lo + A_hi B_hi
// in float32 accumulation; the dropped A_lo B_lo is below float32 rounding
// (2⁻²² relative). An operand marked exact (values with at most 11
// significant bits, such as the ±1 sign matrices of a BLR layer) is not
// split, so a product with one exact operand takes two tensor-core passes
// and one with two exact operands one. Row-major signatures as cuBLAS's
// wrappers elsewhere: C = alpha op(A) op(B) + beta C.
#pragma once

#include <cstdint>

#include "core/cuda/device.hpp"

namespace cortiq::cuda {

enum Exact : unsigned { kNone = 0, kExactA = 1, kExactB = 2 };

// hi = x rounded to TF32 (10 mantissa bits, to nearest even), lo = x − hi;
// x rows × cols with leading dimension ld, hi and lo contiguous.
void split_tf32(cudaStream_t st, const float* x, int64_t rows, int64_t cols, int64_t ld, float* hi,
                float* lo);

// Whether every one of the n values at x (device) is exact in TF32: finite,
// its low 13 mantissa bits zero, as every value of a BF16 or FP16 checkpoint
// is. Such an operand can be marked exact: its split would leave lo = 0, a
// pass that adds zeros, so the product skips it with the same bits. Waits for
// the stream. CORTIQ_TF32_SPLIT_ALL=1 in the environment makes it false for
// every operand (three passes, to compare).
bool exact_in_tf32(cudaStream_t st, const float* x, int64_t n);

// One TF32 product through cuBLAS (CUBLAS_COMPUTE_32F_FAST_TF32), or a plain
// FP32 one when `tf32` is false.
void gemm_cublas(const Gpu& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc, bool tf32);

// C = alpha op(A) op(B) + beta C in 3xTF32 (fewer passes for exact operands).
// A is m×k (k×m when ta), B k×n (n×k when tb). The split copies live in
// stream-ordered buffers freed when the call returns.
void gemm_tf32x3(const Gpu& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc, unsigned exact);
// The same on a cuBLAS handle whose stream is `st` (a model's own handle).
void gemm_tf32x3(cublasHandle_t blas, cudaStream_t st, bool ta, bool tb, int64_t m, int64_t n,
                 int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                 float beta, float* c, int64_t ldc, unsigned exact);

}  // namespace cortiq::cuda
