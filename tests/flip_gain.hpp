// A property of a finished input-side column search, shared by the CPU and
// CUDA encoder tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "blr/model.hpp"
#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode {

// The largest relative gain a single sign flip would still give column j of
// path 0 (one path, no feedback: the column's target is fixed, b = Mᵀ w_j):
// max over bits of φ'/φ − 1, φ = (sᵀb)²/(sᵀKs), K = MᵀM (SPEC §3.7).
inline double best_single_flip_gain(const blr::Factors& f, const cpu::TensorContext& c, int64_t j) {
    const MatD mm = f.left(0);
    const MatD k = la::gemm(mm, true, mm, false);
    const int64_t r = k.rows();
    std::vector<double> s(f.paths[0].sv.row(j), f.paths[0].sv.row(j) + r), b(r, 0.0), ks(r, 0.0);
    for (int64_t a = 0; a < r; ++a)
        for (int64_t i = 0; i < mm.rows(); ++i) b[a] += c.w(i, j) * mm(i, a);
    double alpha = 0, beta = 0;
    for (int64_t a = 0; a < r; ++a) {
        for (int64_t a2 = 0; a2 < r; ++a2) ks[a] += k(a, a2) * s[a2];
        alpha += s[a] * b[a];
    }
    for (int64_t a = 0; a < r; ++a) beta += s[a] * ks[a];
    const double phi = alpha * alpha / beta;
    double best = 0;
    for (int64_t a = 0; a < r; ++a) {
        const double alpha2 = alpha - 2 * s[a] * b[a];
        const double beta2 = beta - 4 * s[a] * ks[a] + 4 * k(a, a);
        if (beta2 > 0) best = std::max(best, alpha2 * alpha2 / beta2 / phi - 1);
    }
    return best;
}

}  // namespace cortiq::encode
