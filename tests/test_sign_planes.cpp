// The CPU reference of the CUDA decode's bit planes (blr/sign_planes.hpp):
// the planes hold q exactly, q rounds v to within half a step of its chunk,
// the popcount form of the product equals Σ s_j σ q_j exactly, and so stays
// within Σ_c σ_c/2 · |c| of the float product; zero and non-finite chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "blr/sign_planes.hpp"
#include "core/rng.hpp"

using namespace cortiq;

namespace {

struct Case {
    std::vector<float> v;
    std::vector<uint32_t> row;  // ceil(cols / 32) words of signs
};

// Values of mixed ranges (a chunk at 1e-6, one at 1e6, heavy tails) and random signs.
Case random_case(int64_t cols, uint64_t seed) {
    Rng rng(seed);
    Case c;
    c.v.resize(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) {
        const int64_t chunk = j / blr::kPlaneChunk;
        const double range = chunk % 3 == 1 ? 1e-6 : chunk % 3 == 2 ? 1e6 : 1.0;
        double x = rng.normal() * range;
        if (rng.uniform() < 0.01) x *= 60.0;  // outliers, as in LLM activations
        c.v[static_cast<size_t>(j)] = static_cast<float>(x);
    }
    c.row.resize(static_cast<size_t>((cols + 31) / 32));
    for (auto& w : c.row) w = static_cast<uint32_t>(rng.next_u64());
    if (cols % 32) c.row.back() &= (1u << (cols % 32)) - 1u;
    return c;
}

int sign_of(const std::vector<uint32_t>& row, int64_t j) {
    return (row[static_cast<size_t>(j / 32)] >> (j % 32)) & 1u ? -1 : 1;
}

}  // namespace

TEST(SignPlanes, PopcountFormIsExactAndWithinHalfAStepOfTheFloatProduct) {
    for (int64_t cols : {1, 31, 33, 511, 512, 513, 1500, 4096, 11008}) {
        const Case c = random_case(cols, 7 + static_cast<uint64_t>(cols));
        const blr::Planes p = blr::planes_of(c.v.data(), cols);
        long double exact_q = 0, exact_v = 0, bound = 0;
        for (int64_t j = 0; j < cols; ++j) {
            const auto cs = static_cast<size_t>(j / blr::kPlaneChunk);
            const double sigma = p.sigma[cs];
            const int32_t q = blr::plane_value(p, j);
            ASSERT_LE(std::abs(q), 32767) << cols << " " << j;
            // q rounds v / σ: within half a step (and the float product's rounding)
            const double v = c.v[static_cast<size_t>(j)];
            ASSERT_LE(std::fabs(sigma * q - v), 0.5 * sigma * (1 + 1e-5) + 1e-30)
                << cols << " " << j;
            exact_q += static_cast<long double>(sign_of(c.row, j)) * sigma * q;
            exact_v += static_cast<long double>(sign_of(c.row, j)) * v;
            bound += 0.5L * sigma;
        }
        const double got = blr::plane_dot(c.row.data(), p);
        // the popcount identity holds exactly; what is left is σΣq's float rounding
        double sq_round = 0;
        for (size_t k = 0; k < p.sigma.size(); ++k) sq_round += std::fabs(p.sigma_sum_q[k]) * 1e-7;
        EXPECT_NEAR(got, static_cast<double>(exact_q), sq_round + 1e-300) << cols;
        EXPECT_LE(std::fabs(got - static_cast<double>(exact_v)),
                  static_cast<double>(bound) * (1 + 1e-5) + sq_round)
            << cols;
        // a dot product of the sizes the decode sees, in relative terms
        if (cols == 4096 || cols == 11008)
            std::printf("cols %lld: |plane - float| / Σ_c σ_c·|c|/2 = %.3g\n",
                        static_cast<long long>(cols),
                        std::fabs(got - static_cast<double>(exact_v)) / static_cast<double>(bound));
    }
}

TEST(SignPlanes, ZeroChunksAreZeroAndNonFiniteChunksPoisonTheProduct) {
    std::vector<float> v(1100, 0.0f);
    v[600] = 3.0f;
    blr::Planes p = blr::planes_of(v.data(), 1100);
    EXPECT_EQ(p.sigma[0], 0.0f);
    EXPECT_EQ(p.sigma[2], 0.0f);
    EXPECT_FLOAT_EQ(p.sigma[1], 3.0f / 32767.0f);
    EXPECT_EQ(blr::plane_value(p, 600), 32767);
    std::vector<uint32_t> row(35, 0u);
    EXPECT_NEAR(blr::plane_dot(row.data(), p), 3.0, 1e-6);
    row[600 / 32] = 1u << (600 % 32);  // s_600 = −1
    EXPECT_NEAR(blr::plane_dot(row.data(), p), -3.0, 1e-6);
    for (float bad : {NAN, INFINITY}) {
        v[5] = bad;
        p = blr::planes_of(v.data(), 1100);
        EXPECT_TRUE(std::isnan(p.sigma[0]));
        EXPECT_TRUE(std::isnan(blr::plane_dot(row.data(), p)));
        EXPECT_EQ(p.sigma[1], 3.0f / 32767.0f);  // other chunks unaffected
    }
}

// The error a layer sees: sign rows times Gaussian activations with 1 % of
// outliers 60× larger (as in LLM activations), relative RMS over 64 rows,
// within the 1e-3 the GPU layer tests allow (the bound: a step is max/32767
// of each chunk, so the error grows with the outliers' size).
TEST(SignPlanes, RelativeErrorOfALayerWithOutliers) {
    for (int64_t cols : {4096, 11008}) {
        Rng rng(3);
        std::vector<float> v(static_cast<size_t>(cols));
        for (auto& x : v)
            x = static_cast<float>(rng.normal() * (rng.uniform() < 0.01 ? 60.0 : 1.0));
        const blr::Planes p = blr::planes_of(v.data(), cols);
        double num = 0, den = 0;
        for (int k = 0; k < 64; ++k) {
            std::vector<uint32_t> row(static_cast<size_t>((cols + 31) / 32));
            for (auto& w : row) w = static_cast<uint32_t>(rng.next_u64());
            double exact = 0;
            for (int64_t j = 0; j < cols; ++j)
                exact += sign_of(row, j) * double{v[static_cast<size_t>(j)]};
            const double d = blr::plane_dot(row.data(), p) - exact;
            num += d * d;
            den += exact * exact;
        }
        const double rel = std::sqrt(num / den);
        std::printf("cols %lld: relative RMS error of the plane product %.3g\n",
                    static_cast<long long>(cols), rel);
        EXPECT_LE(rel, 1e-3) << cols;
    }
}

// The two products of a BLR layer as the CUDA decode runs them: t = ℓ ∘ S_Vᵀ v
// from v's planes, t rounded into the wide planes with the scale fixed by the
// bound L_c·Σ σΣ|q| (never clipped: |t| stays within it), then y = S_U t from
// them; the relative RMS error of y against float64 stays within the GPU
// tests' 1e-3, and the bits the bound leaves to t's largest value are printed.
TEST(SignPlanes, WidePlanesOfTheSecondProductHoldTWithinTheirBound) {
    const int64_t n = 11008, r = 300, m = 64;
    Rng rng(11);
    std::vector<float> v(static_cast<size_t>(n)), ell(static_cast<size_t>(r));
    for (auto& x : v) x = static_cast<float>(rng.normal() * (rng.uniform() < 0.01 ? 60.0 : 1.0));
    for (auto& x : ell) x = static_cast<float>(0.5 + rng.uniform());
    auto random_row = [&](int64_t cols) {
        std::vector<uint32_t> row(static_cast<size_t>((cols + 31) / 32));
        for (auto& w : row) w = static_cast<uint32_t>(rng.next_u64());
        if (cols % 32) row.back() &= (1u << (cols % 32)) - 1u;
        return row;
    };
    const blr::Planes px = blr::planes_of(v.data(), n);
    std::vector<double> t(static_cast<size_t>(r));
    std::vector<float> t_hat(static_cast<size_t>(r));
    for (int64_t k = 0; k < r; ++k) {
        const auto row = random_row(n);
        double exact = 0;
        for (int64_t j = 0; j < n; ++j)
            exact += sign_of(row, j) * double{v[static_cast<size_t>(j)]};
        t[static_cast<size_t>(k)] = ell[static_cast<size_t>(k)] * exact;
        t_hat[static_cast<size_t>(k)] =
            ell[static_cast<size_t>(k)] * static_cast<float>(blr::plane_dot(row.data(), px));
    }
    const int64_t chunks = (r + blr::kPlaneChunk - 1) / blr::kPlaneChunk;
    std::vector<double> sigma_t(static_cast<size_t>(chunks));
    std::vector<int32_t> q(static_cast<size_t>(r));
    double min_bits = 99;
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t k0 = c * blr::kPlaneChunk, k1 = std::min(r, k0 + blr::kPlaneChunk);
        float l_max = 0;
        for (int64_t k = k0; k < k1; ++k) l_max = std::max(l_max, ell[static_cast<size_t>(k)]);
        const float bound = blr::wide_bound(l_max, px);
        const double sigma = bound / static_cast<double>(blr::kWideQMax);
        sigma_t[static_cast<size_t>(c)] = sigma;
        int32_t q_max = 0;
        for (int64_t k = k0; k < k1; ++k) {
            const auto ks = static_cast<size_t>(k);
            ASSERT_LE(std::fabs(t_hat[ks]), bound) << k;  // the bound holds
            q[ks] = blr::wide_q(t_hat[ks], bound);
            ASSERT_LT(std::abs(q[ks]), blr::kWideQMax) << k;  // never clipped
            // half a step, and t·(Q / bound)'s float rounding (24 bits of up to 2^23)
            ASSERT_LE(std::fabs(sigma * q[ks] - t_hat[ks]),
                      0.5 * sigma * (1 + 1e-5) + std::fabs(t_hat[ks]) * 0x1p-23)
                << k;
            q_max = std::max(q_max, std::abs(q[ks]));
        }
        min_bits = std::min(min_bits, std::log2(double(q_max)));
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < m; ++i) {
        const auto row = random_row(r);
        double exact = 0, planes = 0;
        for (int64_t k = 0; k < r; ++k) {
            const auto ks = static_cast<size_t>(k);
            exact += sign_of(row, k) * t[ks];
            planes += sign_of(row, k) * sigma_t[static_cast<size_t>(k / blr::kPlaneChunk)] * q[ks];
        }
        num += (planes - exact) * (planes - exact);
        den += exact * exact;
    }
    const double rel = std::sqrt(num / den);
    std::printf("n %lld, r %lld: t's largest |q| 2^%.1f; relative RMS error of y %.3g\n",
                static_cast<long long>(n), static_cast<long long>(r), min_bits, rel);
    EXPECT_GE(min_bits, 12.0);  // the bound leaves most of the 23 bits
    EXPECT_LE(rel, 1e-3);
}
