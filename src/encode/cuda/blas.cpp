// cuBLAS and cuSOLVER behind row-major float32 signatures. A row-major matrix
// is the column-major matrix of its transpose, so C = op(A) op(B) is computed
// as Cᵀ = op(B)ᵀ op(A)ᵀ with the operands swapped.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.hpp"
#include "encode/cuda/ops.hpp"

namespace cortiq::encode::cuda {

namespace {

int to_int(int64_t v, const char* what) {
    CORTIQ_ASSERT(v >= 0 && v <= INT32_MAX, "{} = {} exceeds the 32-bit cuBLAS range", what, v);
    return static_cast<int>(v);
}

int read_info(const Gpu& g, const DeviceBuffer<int>& info) {
    int h = 0;
    CUDA_CHECK(cudaMemcpyAsync(&h, info.get(), sizeof h, cudaMemcpyDeviceToHost, g.stream()));
    g.sync();
    return h;
}

}  // namespace

namespace {

int64_t up4(int64_t v) {
    return (v + 3) / 4 * 4;
}

bool aligned16(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// An operand as the tensor-core kernels want it: rows × cols (leading
// dimension ld) in place when it already is prows × pcols with 16-byte rows,
// else a copy in a zero-filled prows × pcols buffer (held by `keep`).
const float* tensor_operand(cudaStream_t st, const float* x, int64_t rows, int64_t cols, int64_t ld,
                            int64_t prows, int64_t pcols, DeviceBuffer<float>& keep,
                            int64_t& ld_out) {
    if (rows == prows && cols == pcols && ld % 4 == 0 && aligned16(x)) {
        ld_out = ld;
        return x;
    }
    keep = DeviceBuffer<float>(prows * pcols, st);
    copy_padded(st, x, rows, cols, ld, keep.get(), prows, pcols);
    ld_out = pcols;
    return keep.get();
}

}  // namespace

void gemm(const Gpu& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc, Prec p, unsigned exact) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        CORTIQ_ASSERT(ldc == n, "gemm with k = 0 needs a contiguous C");
        scal(g.stream(), c, beta, m * n);
        return;
    }
    // cuBLAS's tensor-core kernels are 2–3× slower when a dimension is not a
    // multiple of 4 floats (16 bytes): on the H200 a TF32 r×r×r product ran at
    // 85–93 TFLOP/s for r = 2966 and 202–269 for r = 2976, and padding the
    // leading dimensions alone did not help (bench_gemm_align_gpu). So TF32
    // and 3xTF32 products run on operands zero-padded to multiples of 4 (the
    // padding adds zeros to every sum) and C is taken from the padded result.
    const bool tensor_ok = m % 4 == 0 && n % 4 == 0 && k % 4 == 0 && lda % 4 == 0 && ldb % 4 == 0 &&
                           ldc % 4 == 0 && aligned16(a) && aligned16(b) && aligned16(c);
    if (p != Prec::fp32 && !tensor_ok) {
        const cudaStream_t st = g.stream();
        const int64_t mp = up4(m), np = up4(n), kp = up4(k);
        DeviceBuffer<float> pa, pb, pc;
        int64_t lda_p = 0, ldb_p = 0;
        const float* a_p = tensor_operand(st, a, ta ? k : m, ta ? m : k, lda, ta ? kp : mp,
                                          ta ? mp : kp, pa, lda_p);
        const float* b_p = tensor_operand(st, b, tb ? n : k, tb ? k : n, ldb, tb ? np : kp,
                                          tb ? kp : np, pb, ldb_p);
        if (mp == m && np == n && ldc % 4 == 0 && aligned16(c)) {
            gemm(g, ta, tb, m, n, kp, alpha, a_p, lda_p, b_p, ldb_p, beta, c, ldc, p, exact);
            return;
        }
        pc = DeviceBuffer<float>(mp * np, st);
        gemm(g, ta, tb, mp, np, kp, 1.f, a_p, lda_p, b_p, ldb_p, 0.f, pc.get(), np, p, exact);
        axpby_2d(st, c, ldc, beta, pc.get(), np, alpha, m, n);  // C = beta C + alpha (A B)
        return;
    }
    if (p != Prec::tf32x3) {
        cortiq::cuda::gemm_cublas(g, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                                  p == Prec::tf32);
        return;
    }
    cortiq::cuda::gemm_tf32x3(g, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, exact);
}

DMat mm(const Gpu& g, const DMat& a, bool ta, const DMat& b, bool tb, Prec p, unsigned exact) {
    DMat c(ta ? a.cols : a.rows, tb ? b.rows : b.cols, g.stream());
    mm_into(g, 1.f, a, ta, b, tb, 0.f, c, p, exact);
    return c;
}

void mm_into(const Gpu& g, float alpha, const DMat& a, bool ta, const DMat& b, bool tb, float beta,
             DMat& c, Prec p, unsigned exact) {
    const int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
    const int64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
    CORTIQ_ASSERT(k == kb, "gemm inner dims {} vs {}", k, kb);
    CORTIQ_ASSERT(c.rows == m && c.cols == n, "gemm output {}x{} vs {}x{}", c.rows, c.cols, m, n);
    gemm(g, ta, tb, m, n, k, alpha, a.data(), a.cols, b.data(), b.cols, beta, c.data(), n, p,
         exact);
}

void gemv(const Gpu& g, bool ta, int64_t rows, int64_t cols, const float* a, const float* x,
          float* y) {
    if (rows == 0 || cols == 0) return;
    const float one = 1.f, zero = 0.f;
    CUBLAS_CHECK(cublasSgemv(g.blas(), ta ? CUBLAS_OP_N : CUBLAS_OP_T, to_int(cols, "cols"),
                             to_int(rows, "rows"), &one, a, to_int(cols, "lda"), x, 1, &zero, y,
                             1));
}

void syrkx_solver(const Gpu& g, int64_t n, int64_t k, const float* a, const float* b, float* c) {
    if (n == 0) return;
    const float one = 1.f, zero = 0.f;
    if (k == 0) {
        CUDA_CHECK(cudaMemsetAsync(c, 0, static_cast<size_t>(n * n) * sizeof(float), g.stream()));
        return;
    }
    // row-major A (n×k) is the column-major k×n matrix Aᵀ: op = T gives A
    CUBLAS_CHECK(cublasSsyrkx(g.blas(), CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, to_int(n, "n"),
                              to_int(k, "k"), &one, a, to_int(k, "lda"), b, to_int(k, "ldb"), &zero,
                              c, to_int(n, "ldc")));
}

void symv_solver(const Gpu& g, const float* a, int64_t n, const float* x, float* y) {
    if (n == 0) return;
    const float one = 1.f, zero = 0.f;
    CUBLAS_CHECK(cublasSsymv(g.blas(), CUBLAS_FILL_MODE_LOWER, to_int(n, "n"), &one, a,
                             to_int(n, "lda"), x, 1, &zero, y, 1));
}

bool potrf_solver(const Gpu& g, float* a, int64_t n) {
    if (n == 0) return true;
    int lwork = 0;
    CUSOLVER_CHECK(cusolverDnSpotrf_bufferSize(g.solver(), CUBLAS_FILL_MODE_LOWER, to_int(n, "n"),
                                               a, to_int(n, "lda"), &lwork));
    DeviceBuffer<float> work(std::max(lwork, 1), g.stream());
    DeviceBuffer<int> info(1, g.stream());
    CUSOLVER_CHECK(cusolverDnSpotrf(g.solver(), CUBLAS_FILL_MODE_LOWER, to_int(n, "n"), a,
                                    to_int(n, "lda"), work.get(), lwork, info.get()));
    return read_info(g, info) == 0;
}

void potrs_solver(const Gpu& g, const float* a, int64_t n, float* x) {
    if (n == 0) return;
    DeviceBuffer<int> info(1, g.stream());
    CUSOLVER_CHECK(cusolverDnSpotrs(g.solver(), CUBLAS_FILL_MODE_LOWER, to_int(n, "n"), 1, a,
                                    to_int(n, "lda"), x, to_int(n, "ldb"), info.get()));
}

bool cholesky_lower(const Gpu& g, float* a, int64_t n) {
    if (n == 0) return true;
    // Column-major UPPER on the row-major buffer is the row-major lower factor.
    int lwork = 0;
    CUSOLVER_CHECK(cusolverDnSpotrf_bufferSize(g.solver(), CUBLAS_FILL_MODE_UPPER, to_int(n, "n"),
                                               a, to_int(n, "lda"), &lwork));
    DeviceBuffer<float> work(std::max(lwork, 1), g.stream());
    DeviceBuffer<int> info(1, g.stream());
    CUSOLVER_CHECK(cusolverDnSpotrf(g.solver(), CUBLAS_FILL_MODE_UPPER, to_int(n, "n"), a,
                                    to_int(n, "lda"), work.get(), lwork, info.get()));
    if (read_info(g, info) != 0) return false;
    zero_upper(g.stream(), a, n);
    return true;
}

void tri_inv_lower(const Gpu& g, const float* l, float* out, int64_t n) {
    if (n == 0) return;
    // The row-major lower L is the column-major upper U = Lᵀ; U X = I gives
    // X = U⁻¹, whose row-major reading is (U⁻¹)ᵀ = L⁻¹.
    set_identity(g.stream(), out, n);
    const float one = 1.f;
    CUBLAS_CHECK(cublasStrsm(g.blas(), CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N,
                             CUBLAS_DIAG_NON_UNIT, to_int(n, "n"), to_int(n, "n"), &one, l,
                             to_int(n, "lda"), out, to_int(n, "ldb")));
}

void solve_spd(const Gpu& g, int64_t n, const std::function<void(float*)>& build, const float* b,
               float* x, double ridge_rel, DeviceBuffer<float>* keep_factor, double* ridge_used) {
    if (n == 0) return;
    DeviceBuffer<float> a(n * n, g.stream());
    double mean_diag = 0, ridge = ridge_rel;
    for (int attempt = 0; attempt < 12; ++attempt) {
        build(a.get());
        if (attempt == 0) {
            mean_diag = mean_abs_diag(g.stream(), a.get(), n);
            if (!(mean_diag > 0) || !std::isfinite(mean_diag)) mean_diag = 1.0;
        }
        add_diag(g.stream(), a.get(), n, static_cast<float>(ridge * mean_diag));
        if (potrf_solver(g, a.get(), n)) {
            if (x != b)
                CUDA_CHECK(cudaMemcpyAsync(x, b, static_cast<size_t>(n) * sizeof(float),
                                           cudaMemcpyDeviceToDevice, g.stream()));
            potrs_solver(g, a.get(), n, x);
            if (keep_factor) *keep_factor = std::move(a);
            if (ridge_used) *ridge_used = ridge;
            return;
        }
        // A float32 factorisation sees no ridge below its resolution: jump to 1e-7.
        ridge = std::max(ridge * 10, 1e-7);
    }
    CORTIQ_FAIL("SPD solve failed: {}x{} system is not positive definite (float32)", n, n);
}

void gemm_f64(const Gpu& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a,
              int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    const double one = 1.0, zero = 0.0;
    if (k == 0) {
        CORTIQ_ASSERT(ldc == n, "gemm_f64 with k = 0 needs a contiguous C");
        CUDA_CHECK(cudaMemsetAsync(c, 0, static_cast<size_t>(m * n) * sizeof(double), g.stream()));
        return;
    }
    CUBLAS_CHECK(cublasDgemm(g.blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                             ta ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(n, "n"), to_int(m, "m"),
                             to_int(k, "k"), &one, b, to_int(ldb, "ldb"), a, to_int(lda, "lda"),
                             &zero, c, to_int(ldc, "ldc")));
}

std::pair<std::vector<double>, DMat> sym_eig_top_f64(const Gpu& g, DeviceBuffer<double>& a,
                                                     int64_t k, int64_t r, bool partial) {
    CORTIQ_ASSERT(a.size() == k * k && r >= 1 && r <= k, "eig of {} entries, {}x{}, rank {}",
                  a.size(), k, k, r);
    DeviceBuffer<double> w(k, g.stream());
    DeviceBuffer<int> info(1, g.stream());
    const int ki = to_int(k, "k");
    int lwork = 0;
    int64_t count = k;
    if (partial && r < k) {
        int meig = 0;
        const int il = static_cast<int>(k - r + 1), iu = ki;
        CUSOLVER_CHECK(cusolverDnDsyevdx_bufferSize(
            g.solver(), CUSOLVER_EIG_MODE_VECTOR, CUSOLVER_EIG_RANGE_I, CUBLAS_FILL_MODE_LOWER, ki,
            a.get(), ki, 0.0, 0.0, il, iu, &meig, w.get(), &lwork));
        DeviceBuffer<double> work(std::max(lwork, 1), g.stream());
        CUSOLVER_CHECK(cusolverDnDsyevdx(g.solver(), CUSOLVER_EIG_MODE_VECTOR, CUSOLVER_EIG_RANGE_I,
                                         CUBLAS_FILL_MODE_LOWER, ki, a.get(), ki, 0.0, 0.0, il, iu,
                                         &meig, w.get(), work.get(), lwork, info.get()));
        const int inf = read_info(g, info);
        CORTIQ_CHECK(inf == 0 && meig == r, "syevdx failed (info {}, {} of {} eigenpairs)", inf,
                     meig, r);
        count = r;
    } else {
        CUSOLVER_CHECK(cusolverDnDsyevd_bufferSize(g.solver(), CUSOLVER_EIG_MODE_VECTOR,
                                                   CUBLAS_FILL_MODE_LOWER, ki, a.get(), ki, w.get(),
                                                   &lwork));
        DeviceBuffer<double> work(std::max(lwork, 1), g.stream());
        CUSOLVER_CHECK(cusolverDnDsyevd(g.solver(), CUSOLVER_EIG_MODE_VECTOR,
                                        CUBLAS_FILL_MODE_LOWER, ki, a.get(), ki, w.get(),
                                        work.get(), lwork, info.get()));
        const int inf = read_info(g, info);
        CORTIQ_CHECK(inf == 0, "syevd failed (info {})", inf);
    }
    std::vector<double> wh(static_cast<size_t>(count));
    CUDA_CHECK(cudaMemcpyAsync(wh.data(), w.get(), wh.size() * sizeof(double),
                               cudaMemcpyDeviceToHost, g.stream()));
    g.sync();
    std::vector<double> vals(static_cast<size_t>(r));
    for (int64_t c = 0; c < r; ++c) vals[c] = wh[count - 1 - c];
    DMat vecs(k, r, g.stream());
    gather_eigvecs_f64(g.stream(), a.get(), k, count, r, vecs.data());
    return {std::move(vals), std::move(vecs)};
}

}  // namespace cortiq::encode::cuda
