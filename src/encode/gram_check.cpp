#include "encode/gram_check.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/parallel.hpp"

namespace cortiq::encode {

namespace {

// The symmetry check compares g(i, j) with g(j, i) tile by tile: a column walk
// over an 11008 × 11008 Gram missed the cache on every entry (1.25 s a Gram
// here, twice per input context); 64 × 64 tiles keep both in cache, and the
// tile rows run in parallel.
constexpr int64_t kTile = 64;

}  // namespace

void check_gram(const MatD& g, const std::string& what, const char* which) {
    CORTIQ_CHECK(g.rows() == g.cols(), "{}: {} Gram is {}x{}, not square", what, which, g.rows(),
                 g.cols());
    const int64_t n = g.rows(), tiles = (n + kTile - 1) / kTile;
    std::vector<double> tile_max(static_cast<size_t>(tiles), 0.0);
    parallel_for(0, tiles, [&](int64_t t) {
        double mx = 0;
        for (int64_t i = t * kTile; i < std::min(n, (t + 1) * kTile); ++i)
            for (int64_t j = 0; j < n; ++j) {
                const double v = g(i, j);
                CORTIQ_CHECK(std::isfinite(v), "{}: {} Gram has non-finite entries (at ({}, {}))",
                             what, which, i, j);
                mx = std::max(mx, std::abs(v));
            }
        tile_max[static_cast<size_t>(t)] = mx;
    });
    const double maxabs = tiles > 0 ? *std::max_element(tile_max.begin(), tile_max.end()) : 0.0;
    for (int64_t i = 0; i < n; ++i)
        CORTIQ_CHECK(g(i, i) >= 0, "{}: {} Gram has a negative diagonal entry {} at {}", what,
                     which, g(i, i), i);
    const double tol = 1e-6 * maxabs + 1e-300;
    parallel_for(0, tiles, [&](int64_t ti) {
        const int64_t i1 = std::min(n, (ti + 1) * kTile);
        for (int64_t tj = 0; tj <= ti; ++tj)
            for (int64_t i = ti * kTile; i < i1; ++i)
                for (int64_t j = tj * kTile; j < std::min(i, (tj + 1) * kTile); ++j)
                    CORTIQ_CHECK(std::abs(g(i, j) - g(j, i)) <= tol,
                                 "{}: {} Gram is not symmetric at ({}, {}): {} vs {}", what, which,
                                 i, j, g(i, j), g(j, i));
    });
}

}  // namespace cortiq::encode
