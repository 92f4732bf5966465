#include "linalg/panel_gemm.hpp"

#include <cblas.h>
#include <omp.h>

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
    const int64_t nt = omp_in_parallel() ? 1 : num_threads();
    if (nt <= 1 || T * N * K < (int64_t{1} << 18)) return tile(0, T, 0, N);
    if (T >= 32 * nt) {
        const int64_t step = ((T + 2 * nt - 1) / (2 * nt) + 7) / 8 * 8;
        parallel_for(0, (T + step - 1) / step,
                     [&](int64_t i) { tile(i * step, std::min(T, (i + 1) * step), 0, N); });
    } else {
        const int64_t step = std::max<int64_t>(64, ((N + 2 * nt - 1) / (2 * nt) + 15) / 16 * 16);
        parallel_for(0, (N + step - 1) / step,
                     [&](int64_t i) { tile(0, T, i * step, std::min(N, (i + 1) * step)); });
    }
}

}  // namespace cortiq::la
