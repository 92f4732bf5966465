// The AVX-512 exp kernels of the runtime (model/vec_exp.hpp) against their
// portable loops and against std::exp: the same Cephes polynomial, so both
// stay within its ~2e-7 relative error of std::exp and close to each other,
// for every length (full vectors and masked tails) and the clamp below −87.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/vec_exp.hpp"

using namespace cortiq::model;

namespace {

std::vector<float> uniform(std::mt19937& rng, int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = u(rng);
    return v;
}

struct Portable {
    explicit Portable(bool on) { set_portable_exp(on); }
    ~Portable() { set_portable_exp(false); }
};

}  // namespace

TEST(VecExp, BothPathsMatchStdExpForEveryLength) {
    std::mt19937 rng(3);
    for (bool portable : {true, false}) {
        if (!portable && !simd_exp_available()) continue;
        Portable mode(portable);
        for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 100, 257, 1000}) {
            auto s = uniform(rng, n, -100.0f, 5.0f);
            const float shift = max_of(s.data(), n);
            double want_max = s[0];
            for (float x : s) want_max = std::max<double>(want_max, x);
            ASSERT_EQ(shift, static_cast<float>(want_max));
            auto e = s;
            const float sum = exp_shifted_inplace(e.data(), n, shift);
            double want_sum = 0;
            for (int64_t j = 0; j < n; ++j) {
                const double want = s[j] - shift < -87.0f ? 0.0 : std::exp(double(s[j] - shift));
                want_sum += want;
                ASSERT_NEAR(e[j], want, 1e-6 * want + 1e-38) << "n " << n << " j " << j;
            }
            EXPECT_NEAR(sum, want_sum, 1e-5 * want_sum);
            EXPECT_NEAR(sum_exp_shifted(s.data(), n, shift), want_sum, 1e-5 * want_sum);
            const auto gate = uniform(rng, n, -30.0f, 30.0f), up = uniform(rng, n, -2.0f, 2.0f);
            std::vector<float> y(static_cast<size_t>(n), 123.0f);
            silu_mul(gate.data(), up.data(), n, y.data());
            for (int64_t j = 0; j < n; ++j) {
                const double z = gate[j], want = z / (1 + std::exp(-z)) * up[j];
                ASSERT_NEAR(y[j], want, 1e-6 * std::abs(want) + 1e-30) << "n " << n;
            }
        }
    }
}

TEST(VecExp, ThePathsAgreeToTheLastBitsOfTheirPolynomial) {
    if (!simd_exp_available()) GTEST_SKIP() << "no AVX-512 on this CPU";
    std::mt19937 rng(9);
    auto s = uniform(rng, 4099, -90.0f, 0.0f);
    auto a = s, b = s;
    float sa, sb;
    {
        Portable mode(true);
        sa = exp_shifted_inplace(a.data(), 4099, 0.0f);
    }
    sb = exp_shifted_inplace(b.data(), 4099, 0.0f);
    for (size_t j = 0; j < s.size(); ++j) ASSERT_NEAR(a[j], b[j], 4e-7f * a[j] + 1e-38f) << j;
    EXPECT_NEAR(sa, sb, 1e-5f * sa);
}
