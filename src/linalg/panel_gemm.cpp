#include "linalg/panel_gemm.hpp"

#include <cblas.h>

#include <algorithm>

#include "core/parallel.hpp"

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
    // cores that happened to be free (issue 17). Panels of 32 rows for a batch
    // of rows, of 128 columns for a few rows; parallel_for runs them on the
    // threads there are (serially on one).
    if (T * N * K < (int64_t{1} << 18)) return tile(0, T, 0, N);
    if (T >= 512) {
        constexpr int64_t step = 32;
        parallel_for(0, (T + step - 1) / step,
                     [&](int64_t i) { tile(i * step, std::min(T, (i + 1) * step), 0, N); });
    } else {
        constexpr int64_t step = 128;
        parallel_for(0, (N + step - 1) / step,
                     [&](int64_t i) { tile(0, T, i * step, std::min(N, (i + 1) * step)); });
    }
}

}  // namespace cortiq::la
