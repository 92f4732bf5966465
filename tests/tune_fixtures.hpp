// Random BLR and dense layers in float64 for the tuning tests
// (test_tune_grad, test_tune_grad_gpu): the same draws in both, so the GPU
// test runs on test_tune_grad's fixture.
#pragma once

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "tune/block.hpp"

namespace cortiq::tune::fixtures {

using Vec = std::vector<double>;

inline Vec randn(std::mt19937_64& rng, size_t n, double s = 1.0) {
    std::normal_distribution<double> nd(0.0, s);
    Vec v(n);
    for (auto& x : v) x = nd(rng);
    return v;
}

inline Vec random_signs(std::mt19937_64& rng, size_t n) {
    Vec v(n);
    for (auto& x : v) x = (rng() & 1) ? 1.0 : -1.0;
    return v;
}

// m × n BLR layer of rank r with `paths` paths of random scales and signs.
inline LinearT<double> blr_linear(std::mt19937_64& rng, int64_t m, int64_t n, int64_t r, int paths,
                                  bool bias) {
    LinearT<double> l{m, n, BlrWeightsT<double>{m, n, r, {}}, {}, {}};
    for (int p = 0; p < paths; ++p) {
        const double s = 1.0 / std::sqrt(static_cast<double>(n * r));
        BlrPathT<double> q{randn(rng, m, 1.0), randn(rng, r, 1.0), randn(rng, n, s),
                           random_signs(rng, m * r), random_signs(rng, n * r)};
        l.blr->paths.push_back(std::move(q));
    }
    if (bias) l.bias = randn(rng, m, 0.1);
    return l;
}

inline LinearT<double> dense_linear(std::mt19937_64& rng, int64_t m, int64_t n) {
    return {m, n, std::nullopt, randn(rng, m * n, 1.0 / std::sqrt(static_cast<double>(n))), {}};
}

}  // namespace cortiq::tune::fixtures
