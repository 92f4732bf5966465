#include "encode/synthetic.hpp"

#include <algorithm>
#include <cmath>

#include "core/rng.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode {

namespace {

MatD gaussian(int64_t rows, int64_t cols, Rng& rng, double scale = 1.0) {
    MatD a(rows, cols);
    for (auto& v : a.vec()) v = scale * rng.normal();
    return a;
}

// (1/T) XᵀX for T activations x = sc ∘ (z + C y): iid noise plus `nf` shared
// factors, so the Gram is correlated (what the input-side search exploits).
MatD gram(int64_t n, int64_t tokens, const VecD& sc, const MatD& cf, Rng& rng) {
    const int64_t nf = cf.cols();
    MatD x = gaussian(tokens, n, rng);
    const MatD y = gaussian(tokens, nf, rng);
    la::gemm_into(1.0, y, false, cf, true, 1.0, x);
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t j = 0; j < n; ++j) x(t, j) *= sc[j];
    MatD h = la::syrk(x, true);
    for (auto& v : h.vec()) v /= static_cast<double>(tokens);
    return h;
}

}  // namespace

SyntheticLayer synthetic_layer(int64_t m, int64_t n, uint64_t seed, int64_t tokens_fit) {
    Rng rng(seed);
    SyntheticLayer s;
    // W = A diag(d) B / sqrt(q), d_k = (1+k)^-0.6: a slowly decaying spectrum
    // as in trained transformer weights, plus 2 % unstructured noise.
    const int64_t q = std::min(m, n);
    MatD a = gaussian(m, q, rng);
    const MatD b = gaussian(q, n, rng, 1.0 / std::sqrt(static_cast<double>(q)));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t k = 0; k < q; ++k) a(i, k) *= std::pow(1.0 + k, -0.6) * 0.05;
    s.w = la::gemm(a, false, b, false);
    for (auto& v : s.w.vec()) v += 0.002 * rng.normal();
    // activations: log-normal channel scales, three heavy channels, 16 factors
    VecD sc(n);
    for (auto& v : sc) v = std::exp(0.8 * rng.normal());
    for (int64_t k = 0; k < std::min<int64_t>(3, n); ++k) sc[(k * 7919) % n] *= 20.0;
    const MatD cf = gaussian(n, std::min<int64_t>(16, n), rng, 0.7);
    if (tokens_fit <= 0) tokens_fit = 2 * n;
    s.h_fit = gram(n, tokens_fit, sc, cf, rng);
    s.h_sel = gram(n, std::max<int64_t>(256, tokens_fit / 4), sc, cf, rng);
    return s;
}

}  // namespace cortiq::encode
