#include "encode/gram_check.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace cortiq::encode {

void check_gram(const MatD& g, const std::string& what, const char* which) {
    CORTIQ_CHECK(g.rows() == g.cols(), "{}: {} Gram is {}x{}, not square", what, which, g.rows(),
                 g.cols());
    const int64_t n = g.rows();
    double maxabs = 0;
    for (double v : g.vec()) {
        CORTIQ_CHECK(std::isfinite(v), "{}: {} Gram has non-finite entries", what, which);
        maxabs = std::max(maxabs, std::abs(v));
    }
    for (int64_t i = 0; i < n; ++i) {
        CORTIQ_CHECK(g(i, i) >= 0, "{}: {} Gram has a negative diagonal entry {} at {}", what,
                     which, g(i, i), i);
        for (int64_t j = 0; j < i; ++j)
            CORTIQ_CHECK(std::abs(g(i, j) - g(j, i)) <= 1e-6 * maxabs + 1e-300,
                         "{}: {} Gram is not symmetric at ({}, {}): {} vs {}", what, which, i, j,
                         g(i, j), g(j, i));
    }
}

}  // namespace cortiq::encode
