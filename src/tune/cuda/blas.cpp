// cuBLAS behind row-major float32 signatures (as encode/cuda/blas.cpp): a
// row-major matrix is the column-major matrix of its transpose, so
// C = op(A) op(B) is computed as Cᵀ = op(B)ᵀ op(A)ᵀ with the operands swapped.
// The single products in 3xTF32 (float32 accuracy on the tensor cores,
// core/cuda/gemm_tf32.hpp); the batched ones of attention (small) in plain
// FP32, those of the BLR paths in TF32 on operands split beforehand.
// Tuning's gradients are checked against float64 either way.
#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "tune/cuda/grad_ops.hpp"

namespace cortiq::tune::cuda {

namespace {

int to_int(int64_t v, const char* what) {
    CORTIQ_ASSERT(v >= 0 && v <= INT_MAX, "{} = {} exceeds the 32-bit cuBLAS range", what, v);
    return static_cast<int>(v);
}

// CORTIQ_TUNE_FP32=1: every product in plain FP32 (read once per process)
bool plain_fp32() {
    static const bool on = [] {
        const char* v = std::getenv("CORTIQ_TUNE_FP32");
        return v && std::strcmp(v, "1") == 0;
    }();
    return on;
}

}  // namespace

void gemm(const Gpu& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc, unsigned exact) {
    if (m == 0 || n == 0) return;
    CORTIQ_ASSERT(k > 0, "gemm with an empty inner dimension");
    if (plain_fp32()) {
        cortiq::cuda::gemm_cublas(g, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, false);
        return;
    }
    cortiq::cuda::gemm_tf32x3(g, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, exact);
}

void gemm_batched(const Gpu& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, int64_t sa, const float* b, int64_t ldb, int64_t sb,
                  float beta, float* c, int64_t ldc, int64_t sc, int64_t count) {
    if (m == 0 || n == 0 || count == 0) return;
    CORTIQ_ASSERT(k > 0, "gemm with an empty inner dimension");
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (count == 1) {
        CUBLAS_CHECK(cublasGemmEx(g.blas(), opb, opa, to_int(n, "n"), to_int(m, "m"),
                                  to_int(k, "k"), &alpha, b, CUDA_R_32F, to_int(ldb, "ldb"), a,
                                  CUDA_R_32F, to_int(lda, "lda"), &beta, c, CUDA_R_32F,
                                  to_int(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
    }
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        g.blas(), opb, opa, to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha, b, CUDA_R_32F,
        to_int(ldb, "ldb"), sb, a, CUDA_R_32F, to_int(lda, "lda"), sa, &beta, c, CUDA_R_32F,
        to_int(ldc, "ldc"), sc, to_int(count, "count"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_batched_tf32(const Gpu& g, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                       int64_t lda, int64_t sa, const float* b, int64_t ldb, int64_t sb, float* c,
                       int64_t ldc, int64_t sc, int64_t count) {
    if (m == 0 || n == 0 || count == 0) return;
    CORTIQ_ASSERT(k > 0, "gemm with an empty inner dimension");
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        g.blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, to_int(n, "n"), to_int(m, "m"),
        to_int(k, "k"), &one, b, CUDA_R_32F, to_int(ldb, "ldb"), sb, a, CUDA_R_32F,
        to_int(lda, "lda"), sa, &zero, c, CUDA_R_32F, to_int(ldc, "ldc"), sc,
        to_int(count, "count"), plain_fp32() ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32,
        CUBLAS_GEMM_DEFAULT));
}

}  // namespace cortiq::tune::cuda
