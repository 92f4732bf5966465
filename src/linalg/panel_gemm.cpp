#include "linalg/panel_gemm.hpp"

#include <cblas.h>

#include <algorithm>

#include "core/parallel.hpp"
#include "linalg/blas.hpp"

namespace cortiq::la {

void panel_sgemm(bool b_trans, int64_t T, int64_t N, int64_t K, const float* a, int64_t lda,
                 const float* b, float beta, float* c, int64_t ldc) {
    if (T == 0 || N == 0) return;
    const int64_t ldb = b_trans ? K : N;
    auto tile = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, b_trans ? CblasTrans : CblasNoTrans,
                    static_cast<int>(r1 - r0), static_cast<int>(c1 - c0), static_cast<int>(K), 1.0f,
                    a + r0 * lda, static_cast<int>(lda), b_trans ? b + c0 * K : b + c0,
                    static_cast<int>(ldb), beta, c + r0 * ldc + c0, static_cast<int>(ldc));
    };
    // The panels depend on the shape only, never on the thread count: a BLAS
    // call may round an element differently depending on the block it sits in
    // (edge kernels, small-matrix paths), so panels that followed the threads
    // made the runtime's outputs — and a quantize's bytes — depend on the
    // cores that happened to be free. Tiles of 128 rows by 2048
    // columns for a batch of rows, panels of 128 columns for a few rows;
    // parallel_for runs them on the threads there are (serially on one).
    // Each call packs its part of B again: with panels of 32 rows, the
    // packed layer's 512-token prefill took 344 ms at 4096×11008 and 1 bpw
    // on this project's 2-core machine, with tiles of 128 rows 295 ms
    // (bench_blr_cpu, one run each way); 2048 columns keep enough tiles for
    // many cores (24 at 512 × 11008) at the same speed.
    // A few rows times Bᵀ (decoding: the head and the float layers): each
    // row by sgemv over the same column panels. sgemm packed its panels of B
    // at every call, and for one row the packing was most of the work
    // (tiny-llama-6m's 4096 × 256 head: about 60 % of a decoded token on 2
    // cores). A row's outputs then do not depend on the rows beside it.
    const bool by_rows = b_trans && T <= kGemvRows;
    auto gemv_tile = [&](int64_t c0, int64_t c1) {
        for (int64_t i = 0; i < T; ++i)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(c1 - c0), static_cast<int>(K),
                        1.0f, b + c0 * K, static_cast<int>(K), a + i * lda, 1, beta,
                        c + i * ldc + c0, 1);
    };
    if (by_rows) {  // the same panels for any T: on the threads when the work is large
        constexpr int64_t step = 128;
        const int64_t panels = (N + step - 1) / step;
        return parallel_for(
            0, panels, [&](int64_t i) { gemv_tile(i * step, std::min(N, (i + 1) * step)); },
            min_per_thread_for(panels, T * N * K));
    }
    if (T * N * K < kSerialWork) return tile(0, T, 0, N);
    if (T >= 512) {
        constexpr int64_t rstep = 128, cstep = 2048;
        const int64_t cols = (N + cstep - 1) / cstep;
        parallel_for(0, (T + rstep - 1) / rstep * cols, [&](int64_t i) {
            const int64_t r0 = i / cols * rstep, c0 = i % cols * cstep;
            tile(r0, std::min(T, r0 + rstep), c0, std::min(N, c0 + cstep));
        });
    } else {
        constexpr int64_t step = 128;
        parallel_for(0, (N + step - 1) / step,
                     [&](int64_t i) { tile(0, T, i * step, std::min(N, (i + 1) * step)); });
    }
}

namespace {

constexpr int64_t kRowPanel = 64;

int64_t row_panels(int64_t rows) {
    return (rows + kRowPanel - 1) / kRowPanel;
}

}  // namespace

MatD panel_dgemm(const MatD& a, const MatD& b) {
    CORTIQ_CHECK(a.cols() == b.rows(), "panel_dgemm: {}x{} times {}x{}", a.rows(), a.cols(),
                 b.rows(), b.cols());
    MatD c(a.rows(), b.cols());
    if (c.empty() || a.cols() == 0) return c;
    parallel_for(0, row_panels(a.rows()), [&](int64_t p) {
        const int64_t r0 = p * kRowPanel, r1 = std::min(a.rows(), r0 + kRowPanel);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(r1 - r0),
                    static_cast<int>(b.cols()), static_cast<int>(a.cols()), 1.0,
                    a.data() + r0 * a.cols(), static_cast<int>(a.cols()), b.data(),
                    static_cast<int>(b.cols()), 0.0, c.data() + r0 * c.cols(),
                    static_cast<int>(c.cols()));
    });
    return c;
}

MatD panel_solve_spd_right(const MatD& b, const MatD& a, double ridge_rel) {
    CORTIQ_CHECK(a.cols() == a.rows() && b.cols() == a.rows(),
                 "panel_solve_spd_right: {}x{} by a {}x{} system", b.rows(), b.cols(), a.rows(),
                 a.cols());
    return panel_solve_cholesky_right(b, spd_factor(a, ridge_rel));
}

MatD panel_solve_cholesky_right(const MatD& b, const MatD& l) {
    const int64_t n = l.rows();
    CORTIQ_CHECK(l.cols() == n && b.cols() == n,
                 "panel_solve_cholesky_right: {}x{} by a {}x{} factor", b.rows(), b.cols(),
                 l.rows(), l.cols());
    MatD x = b;
    if (x.empty()) return x;
    // X L Lᵀ = B: Y = B L⁻ᵀ, then X = Y L⁻¹, each row of X on its own
    parallel_for(0, row_panels(x.rows()), [&](int64_t p) {
        const int64_t r0 = p * kRowPanel, r1 = std::min(x.rows(), r0 + kRowPanel);
        for (const CBLAS_TRANSPOSE t : {CblasTrans, CblasNoTrans})
            cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, t, CblasNonUnit,
                        static_cast<int>(r1 - r0), static_cast<int>(n), 1.0, l.data(),
                        static_cast<int>(n), x.data() + r0 * n, static_cast<int>(n));
    });
    return x;
}

}  // namespace cortiq::la
