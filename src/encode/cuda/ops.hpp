// Element-wise and reduction kernels of the CUDA encoder (ops.cu), and the
// cuBLAS / cuSOLVER wrappers it builds on (blas.cpp). Matrices are row-major
// float32; every reduction accumulates in float64 in a fixed order, so the same
// inputs give the same bits (encode_many relies on it).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/cuda/device.hpp"
#include "core/cuda/gemm_tf32.hpp"

namespace cortiq::encode::cuda {

// The CUDA base (core/cuda/device.hpp), by the names the encoder uses.
using cortiq::cuda::device_free_bytes;
using cortiq::cuda::device_total_bytes;
using cortiq::cuda::DeviceBuffer;
using cortiq::cuda::DMat;
using cortiq::cuda::download;
using cortiq::cuda::download_f;
using cortiq::cuda::DVec;
using cortiq::cuda::fail_call;
using cortiq::cuda::Gpu;
using cortiq::cuda::upload;
using cortiq::cuda::upload_f;

// ── element-wise ─────────────────────────────────────────────────────────────
// out(i,k) = s(i,k) · rows[i] · cols[k]   (rows / cols may be null: 1)
void scale_rc(cudaStream_t st, float* out, const float* s, const float* rows, const float* cols,
              int64_t m, int64_t r);
// in place: a(i,k) *= rows[i] · cols[k]
void scale_rc_inplace(cudaStream_t st, float* a, const float* rows, const float* cols, int64_t m,
                      int64_t r);
// sgn = sign(x) (x ≥ 0 → +1), mag = |x|  (either may be null)
void sign_abs(cudaStream_t st, const float* x, float* sgn, float* mag, int64_t n);
// in place: x(i,k) = w[i] · sign(x(i,k)) for k < active, 0 beyond (padding;
// active −1: all columns)
void weighted_sign(cudaStream_t st, float* x, const float* w, int64_t rows, int64_t cols,
                   int64_t active = -1);
// in place: each row divided by its norm (rows of norm 0 become 0)
void row_normalize(cudaStream_t st, float* x, int64_t rows, int64_t cols);
// x = a·x + b·y
void axpby(cudaStream_t st, float* x, float a, const float* y, float b, int64_t n);
// x(i,j) = a·x(i,j) + b·y(i,j) over rows × cols with leading dimensions;
// a = 0 does not read x (it may hold NaN)
void axpby_2d(cudaStream_t st, float* x, int64_t ldx, float a, const float* y, int64_t ldy, float b,
              int64_t rows, int64_t cols);
// x *= a
void scal(cudaStream_t st, float* x, float a, int64_t n);
// a(i,j) *= h(i,j) over the whole n×n matrix
void hadamard_inplace(cudaStream_t st, float* a, const float* h, int64_t n);
// dst(k, k2) (leading dimension ld) = a(k,k2) · b(k,k2), a and b r×r
void hadamard_block(cudaStream_t st, float* dst, int64_t ld, const float* a, const float* b,
                    int64_t r);
// a(i,i) += v
void add_diag(cudaStream_t st, float* a, int64_t n, float v);
void set_identity(cudaStream_t st, float* a, int64_t n);
// dst (prows × pcols, contiguous) = src (rows × cols, leading dimension ld) in
// its leading block and zeros elsewhere (the padding the tensor-core and lazy
// gptq_v kernels want); prows ≥ rows, pcols ≥ cols.
void copy_padded(cudaStream_t st, const float* src, int64_t rows, int64_t cols, int64_t ld,
                 float* dst, int64_t prows, int64_t pcols);
// dst(j,:) = src(perm[j],:) (inverse = false) or dst(perm[j],:) = src(j,:)
void permute_rows(cudaStream_t st, const float* src, float* dst, const int* perm, int64_t rows,
                  int64_t cols, bool inverse);
// dst[perm[j]] = src[j]
void scatter(cudaStream_t st, const float* src, float* dst, const int* perm, int64_t n);
// Q = diag(l) K diag(l), qdiag = diag(Q)
void row_error_matrix(cudaStream_t st, const float* k, const float* l, float* q, float* qdiag,
                      int64_t r);
void diag_of(cudaStream_t st, const float* a, float* d, int64_t n);
// eigenvectors of a k×k column-major solver output (ascending, `count` of them)
// to a k×r row-major float32 matrix, the largest first: out(i,c) = ev[(count-1-c)·k + i]
void gather_eigvecs_f64(cudaStream_t st, const double* ev, int64_t k, int64_t count, int64_t r,
                        float* out);
// Stage 1 helpers. a = J D⁻¹ P H Pᵀ D⁻¹ J + ridge I (perm_rev[i] = perm[n-1-i]); or
// with perm_rev null: D⁻¹ H D⁻¹ + ridge I.
void equilibrate(cudaStream_t st, const float* h, const float* sqd, const int* perm_rev, float* a,
                 int64_t n, float ridge);
// uc(i,j) = linv(n-1-i, n-1-j) / sqd_perm[j] for j ≥ i, 0 below
void make_uc(cudaStream_t st, const float* linv, const float* sqd_perm, float* uc, int64_t n);
// l(i,j) = lt(i,j) · sqd[i] for j ≤ i, 0 above (in place)
void make_l(cudaStream_t st, float* l, const float* sqd, int64_t n);
void zero_upper(cudaStream_t st, float* a, int64_t n);
// the rtn-sign baseline: w_hat(i,j) = h[i] · s(i,j) · g[j], then e = w − w_hat
void residual_rc(cudaStream_t st, const float* w, const float* s, const float* h, const float* g,
                 float* e, int64_t m, int64_t n);

// ── row / column reductions (float64 accumulation, float32 results) ─────────
// out[i] = Σ_k a(i,k) b(i,k)
void rowdot(cudaStream_t st, const float* a, const float* b, int64_t rows, int64_t cols,
            float* out);
// out[k] = Σ_i a(i,k) b(i,k)   (b null: Σ_i a(i,k))
void coldot(cudaStream_t st, const float* a, const float* b, int64_t rows, int64_t cols,
            float* out);
// Mean of |a(i,i)| (read back).
double mean_abs_diag(cudaStream_t st, const float* a, int64_t n);

// ── scalar reductions, batched: one readback for many sums ──────────────────
class SumBatch {
  public:
    explicit SumBatch(cudaStream_t st);
    // Σ a[i]·b[i]
    size_t dot(const float* a, const float* b, int64_t n);
    // ‖A − I‖²_F of an r×r matrix; ones ≥ 0: I has ones on its first `ones`
    // diagonal entries only (a zero-padded polar factor)
    size_t dev_identity(const float* a, int64_t r, int64_t ones = -1);
    // Σ_i w[i] Σ_k |x(i,k)|  (the ITQ objective)
    size_t weighted_abs(const float* x, const float* w, int64_t rows, int64_t cols);
    // Σ_i a(i,i)  (absval: Σ_i |a(i,i)|)
    size_t trace(const float* a, int64_t n, bool absval = false);
    std::vector<double> read();  // all sums, in the order added; clears the batch

  private:
    static constexpr int kMaxTerms = 32;
    static constexpr int kBlocks = 256;
    cudaStream_t st_;
    DeviceBuffer<double> partial_, out_;
    int terms_ = 0;
};
double dot(cudaStream_t st, const float* a, const float* b, int64_t n);

// ── device RNG (synthetic inputs) ───────────────────────────────────────────
// x[i] = scale · N(0,1) from a counter-based generator: (seed, stream, i) → value
void fill_normal(cudaStream_t st, float* x, int64_t n, uint64_t seed, uint64_t stream, float scale);

// ── cuBLAS / cuSOLVER (blas.cpp) ─────────────────────────────────────────────
// fp32: plain FP32 (CUDA cores). tf32: one TF32 product on the tensor cores
// (~1e-3 relative). tf32x3: each operand split into a TF32-exact high part
// and a low remainder, C = A_hi B_hi + A_hi B_lo + A_lo B_hi on the tensor
// cores with FP32 accumulation: FP32-like accuracy (~1e-6) in about half of
// FP32's time. An operand whose entries are exact in TF32 (signs ±1) is not
// split (`exact`), leaving two products.
enum class Prec { fp32, tf32, tf32x3 };
using cortiq::cuda::Exact;  // which operands are exact in TF32 (core/cuda/gemm_tf32.hpp)
using cortiq::cuda::kExactA;
using cortiq::cuda::kExactB;
using cortiq::cuda::kNone;

// C(m×n) = alpha op(A) op(B) + beta C; row-major with leading dimensions.
void gemm(const Gpu& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc, Prec p = Prec::fp32, unsigned exact = kNone);
// DMat forms: C = op(A) op(B); C = alpha op(A) op(B) + beta C
DMat mm(const Gpu& g, const DMat& a, bool ta, const DMat& b, bool tb, Prec p = Prec::fp32,
        unsigned exact = kNone);
void mm_into(const Gpu& g, float alpha, const DMat& a, bool ta, const DMat& b, bool tb, float beta,
             DMat& c, Prec p = Prec::fp32, unsigned exact = kNone);
// y = op(A) x, A rows×cols row-major
void gemv(const Gpu& g, bool ta, int64_t rows, int64_t cols, const float* a, const float* x,
          float* y);
// The solver's triangle (row-major upper) of C = A Bᵀ, A and B n×k row-major,
// for products known to be symmetric (cublasSsyrkx: half the flops of a
// gemm); the other triangle is left as it was.
void syrkx_solver(const Gpu& g, int64_t n, int64_t k, const float* a, const float* b, float* c);
// y = A x for a symmetric n×n A of which only the solver's triangle is read.
void symv_solver(const Gpu& g, const float* a, int64_t n, const float* x, float* y);
// In-place Cholesky of a symmetric n×n matrix (the solver's triangle: row-major
// upper = column-major lower); false when it is not positive definite.
bool potrf_solver(const Gpu& g, float* a, int64_t n);
// x ← A⁻¹ x after potrf_solver.
void potrs_solver(const Gpu& g, const float* a, int64_t n, float* x);
// Row-major lower Cholesky factor L (A = L Lᵀ) of a full symmetric matrix, in
// place; the upper triangle is zeroed. False when not positive definite.
bool cholesky_lower(const Gpu& g, float* a, int64_t n);
// out = L⁻¹ for a row-major lower triangular L (out must not alias l).
void tri_inv_lower(const Gpu& g, const float* l, float* out, int64_t n);

// Solve A x = b for SPD A with a relative ridge (ridge · mean |diag| added),
// growing it on failure. `build(a)` writes the system's solver triangle
// (including the diagonal) into the n×n buffer `a`; it is called again for
// every retry. b and x are device vectors of length n (they may alias).
// keep_factor (optional): receives the Cholesky factor (cuSOLVER's column-major
// lower triangle, for potrs_solver) and ridge_used the relative ridge in it.
void solve_spd(const Gpu& g, int64_t n, const std::function<void(float*)>& build, const float* b,
               float* x, double ridge_rel, DeviceBuffer<float>* keep_factor = nullptr,
               double* ridge_used = nullptr);

// float64 copies of float32 data, and C = op(A) op(B) in float64 (row-major).
void to_f64(cudaStream_t st, const float* x, double* y, int64_t n);
void gemm_f64(const Gpu& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a,
              int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc);
// The r largest eigenpairs of a symmetric k×k float64 matrix (destroyed):
// values descending, vectors k×r row-major in float32.
std::pair<std::vector<double>, DMat> sym_eig_top_f64(const Gpu& g, DeviceBuffer<double>& a,
                                                     int64_t k, int64_t r, bool partial);
}  // namespace cortiq::encode::cuda
