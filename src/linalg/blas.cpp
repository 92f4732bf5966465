#include "linalg/blas.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>

namespace cortiq::la {

void gemm_into(double alpha, const MatD& a, bool ta, const MatD& b, bool tb, double beta, MatD& c) {
    const int64_t m = ta ? a.cols() : a.rows();
    const int64_t k = ta ? a.rows() : a.cols();
    const int64_t kb = tb ? b.cols() : b.rows();
    const int64_t n = tb ? b.rows() : b.cols();
    CORTIQ_ASSERT(k == kb, "gemm inner dims {} vs {}", k, kb);
    CORTIQ_ASSERT(c.rows() == m && c.cols() == n, "gemm output {}x{} vs {}x{}", c.rows(), c.cols(),
                  m, n);
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (auto& v : c.vec()) v *= beta;
        return;
    }
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a.data(),
                static_cast<int>(a.cols()), b.data(), static_cast<int>(b.cols()), beta, c.data(),
                static_cast<int>(n));
}

MatD gemm(const MatD& a, bool ta, const MatD& b, bool tb) {
    MatD c(ta ? a.cols() : a.rows(), tb ? b.rows() : b.cols());
    gemm_into(1.0, a, ta, b, tb, 0.0, c);
    return c;
}

MatD syrk(const MatD& a, bool ta) {
    const int64_t n = ta ? a.cols() : a.rows();
    const int64_t k = ta ? a.rows() : a.cols();
    MatD c(n, n);
    if (n == 0 || k == 0) return c;
    cblas_dsyrk(CblasRowMajor, CblasUpper, ta ? CblasTrans : CblasNoTrans, static_cast<int>(n),
                static_cast<int>(k), 1.0, a.data(), static_cast<int>(a.cols()), 0.0, c.data(),
                static_cast<int>(n));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < i; ++j) c(i, j) = c(j, i);
    return c;
}

VecD gemv(const MatD& a, bool ta, const VecD& x) {
    VecD y(ta ? a.cols() : a.rows());
    CORTIQ_ASSERT(static_cast<int64_t>(x.size()) == (ta ? a.rows() : a.cols()));
    if (a.empty()) return y;
    cblas_dgemv(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, static_cast<int>(a.rows()),
                static_cast<int>(a.cols()), 1.0, a.data(), static_cast<int>(a.cols()), x.data(), 1,
                0.0, y.data(), 1);
    return y;
}

double dot(const double* a, const double* b, int64_t n) {
    return cblas_ddot(static_cast<int>(n), a, 1, b, 1);
}

double frob2(const MatD& a) {
    return dot(a.data(), a.data(), a.size());
}

double frob_dot(const MatD& a, const MatD& b) {
    CORTIQ_ASSERT(a.rows() == b.rows() && a.cols() == b.cols());
    return dot(a.data(), b.data(), a.size());
}

double trace(const MatD& a) {
    double t = 0;
    for (int64_t i = 0; i < std::min(a.rows(), a.cols()); ++i) t += a(i, i);
    return t;
}

bool cholesky(MatD& a, bool upper) {
    CORTIQ_ASSERT(a.rows() == a.cols());
    const int64_t n = a.rows();
    if (n == 0) return true;
    const int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, upper ? 'U' : 'L', static_cast<int>(n),
                                    a.data(), static_cast<int>(n));
    if (info != 0) return false;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
            if (upper ? (j < i) : (j > i)) a(i, j) = 0.0;
    return true;
}

double cholesky_ridge(MatD& a, bool upper, const char* what) {
    const int64_t n = a.rows();
    double mean_diag = 0;
    for (int64_t i = 0; i < n; ++i) mean_diag += a(i, i);
    mean_diag = n ? mean_diag / static_cast<double>(n) : 1.0;
    if (!(mean_diag > 0) || !std::isfinite(mean_diag)) mean_diag = 1.0;
    MatD orig = a;
    double ridge = 0;
    while (true) {
        if (cholesky(a, upper)) return ridge;
        ridge = ridge == 0 ? 1e-10 : ridge * 10;
        CORTIQ_CHECK(ridge < 1e-1, "{}: matrix is not positive definite even with a {:g} ridge",
                     what, ridge / 10);
        a = orig;
        for (int64_t i = 0; i < n; ++i) a(i, i) += ridge * mean_diag;
    }
}

void tri_inv(MatD& a, bool upper) {
    const int64_t n = a.rows();
    if (n == 0) return;
    const int info = LAPACKE_dtrtri(LAPACK_ROW_MAJOR, upper ? 'U' : 'L', 'N', static_cast<int>(n),
                                    a.data(), static_cast<int>(n));
    CORTIQ_CHECK(info == 0, "triangular inverse failed: zero pivot at {}", info);
}

std::pair<VecD, MatD> sym_eig_top(const MatD& a, int64_t r) {
    CORTIQ_ASSERT(a.rows() == a.cols());
    const int64_t n = a.rows();
    r = std::clamp<int64_t>(r, 0, n);
    if (r == 0) return {VecD{}, MatD(n, 0)};
    MatD work = a;
    VecD w(n);
    MatD z(n, r);
    std::vector<lapack_int> isuppz(2 * n);
    lapack_int found = 0;
    // dsyevr returns ascending eigenvalues; ask for indices n-r+1 .. n.
    const int info = LAPACKE_dsyevr(LAPACK_ROW_MAJOR, 'V', 'I', 'U', static_cast<int>(n),
                                    work.data(), static_cast<int>(n), 0.0, 0.0,
                                    static_cast<int>(n - r + 1), static_cast<int>(n), 0.0, &found,
                                    w.data(), z.data(), static_cast<int>(r), isuppz.data());
    CORTIQ_CHECK(info == 0 && found == r, "symmetric eigensolver failed (info {}, found {} of {})",
                 info, found, r);
    VecD vals(r);
    MatD vecs(n, r);
    for (int64_t k = 0; k < r; ++k) {
        const int64_t src = r - 1 - k;
        vals[k] = w[src];
        for (int64_t i = 0; i < n; ++i) vecs(i, k) = z(i, src);
    }
    return {vals, vecs};
}

std::pair<VecD, MatD> sym_eig(const MatD& a) {
    return sym_eig_top(a, a.rows());
}

MatD spd_factor(const MatD& a, double ridge_rel) {
    const int64_t n = a.rows();
    CORTIQ_ASSERT(a.cols() == n);
    double mean_diag = 0;
    for (int64_t i = 0; i < n; ++i) mean_diag += std::abs(a(i, i));
    mean_diag = n ? mean_diag / static_cast<double>(n) : 0.0;
    if (!(mean_diag > 0)) mean_diag = 1.0;
    double ridge = ridge_rel;
    for (int attempt = 0; attempt < 12; ++attempt) {
        MatD f = a;
        for (int64_t i = 0; i < n; ++i) f(i, i) += ridge * mean_diag;
        if (cholesky(f, false)) return f;
        ridge = std::max(ridge * 10, 1e-12);
    }
    CORTIQ_FAIL("SPD solve failed: {}x{} system is not positive definite", n, n);
}

VecD solve_spd(const MatD& a, const VecD& b, double ridge_rel) {
    const int64_t n = a.rows();
    CORTIQ_ASSERT(static_cast<int64_t>(b.size()) == n);
    const MatD f = spd_factor(a, ridge_rel);
    VecD x = b;
    LAPACKE_dpotrs(LAPACK_ROW_MAJOR, 'L', static_cast<int>(n), 1, f.data(), static_cast<int>(n),
                   x.data(), 1);
    return x;
}

MatD solve_spd(const MatD& a, const MatD& b, double ridge_rel) {
    const int64_t n = a.rows();
    CORTIQ_ASSERT(b.rows() == n);
    const MatD f = spd_factor(a, ridge_rel);
    MatD x = b;
    if (x.cols() > 0)
        LAPACKE_dpotrs(LAPACK_ROW_MAJOR, 'L', static_cast<int>(n), static_cast<int>(x.cols()),
                       f.data(), static_cast<int>(n), x.data(), static_cast<int>(x.cols()));
    return x;
}

double identity_deviation(const MatD& a) {
    CORTIQ_ASSERT(a.rows() == a.cols(), "identity deviation of a {}x{} matrix", a.rows(), a.cols());
    double dev = 0;
    for (int64_t i = 0; i < a.rows(); ++i)
        for (int64_t j = 0; j < a.cols(); ++j) {
            const double d = a(i, j) - (i == j ? 1.0 : 0.0);
            dev += d * d;
        }
    return std::sqrt(dev);
}

MatD polar_newton_schulz(const MatD& m, double tol, int max_iter, int* iters) {
    const int64_t r = m.rows();
    CORTIQ_ASSERT(m.cols() == r);
    MatD x = m;
    const double nf = std::sqrt(frob2(m));
    if (!(nf > 0)) return MatD::identity(r);
    for (auto& v : x.vec()) v /= nf;
    MatD a(r, r), y(r, r);
    int it = 0;
    for (;; ++it) {
        gemm_into(1.0, x, true, x, false, 0.0, a);  // XᵀX
        if (identity_deviation(a) <= tol || it >= max_iter) break;
        gemm_into(1.0, x, false, a, false, 0.0, y);  // X XᵀX
        for (int64_t k = 0; k < x.size(); ++k) x.data()[k] = 1.5 * x.data()[k] - 0.5 * y.data()[k];
    }
    if (iters) *iters = it;
    return x;
}

MatD polar_eig(const MatD& m) {
    const int64_t r = m.rows();
    MatD mtm = gemm(m, true, m, false);
    auto [vals, vecs] = sym_eig(mtm);
    const double floor = std::max(vals.empty() ? 0.0 : vals[0], 1e-300) * 1e-24;
    // (MᵀM)^{-1/2} = V diag(1/sqrt λ) Vᵀ
    MatD vs = vecs;
    for (int64_t i = 0; i < r; ++i)
        for (int64_t k = 0; k < r; ++k) vs(i, k) /= std::sqrt(std::max(vals[k], floor));
    MatD inv_sqrt = gemm(vs, false, vecs, true);
    return gemm(m, false, inv_sqrt, false);
}

}  // namespace cortiq::la
