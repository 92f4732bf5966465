// Half precision: exhaustive over all 65,536 codes, and rounding of floats to
// the nearest half (ties to even) against a search over the sorted table.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "core/half.hpp"
#include "core/rng.hpp"

using namespace cortiq;

TEST(Half, EveryCodeRoundTrips) {
    for (uint32_t c = 0; c < 65536; ++c) {
        const uint16_t h = static_cast<uint16_t>(c);
        const float f = half_to_float(h);
        const bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (nan) {
            EXPECT_TRUE(std::isnan(f)) << c;
            EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << c;
            continue;
        }
        EXPECT_EQ(float_to_half(f), h) << "code " << c << " value " << f;
    }
    EXPECT_EQ(half_to_float(0x3c00), 1.0f);
    EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
    EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
    EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
    EXPECT_EQ(std::signbit(half_to_float(0x8000)), true);
}

TEST(Half, RoundsToNearestEven) {
    // Positive finite halves in increasing order (codes 0..0x7bff are monotone).
    std::vector<double> table;
    for (uint32_t c = 0; c <= 0x7bff; ++c) table.push_back(half_to_float(static_cast<uint16_t>(c)));
    Rng rng(7);
    for (int t = 0; t < 200000; ++t) {
        // log-uniform magnitudes from 2^-26 to 2^16, both signs
        const float mag = static_cast<float>(std::exp2(-26.0 + 42.0 * rng.uniform()));
        const float f = rng.uniform() < 0.5 ? -mag : mag;
        const uint16_t got = float_to_half(f);
        const double a = std::abs(static_cast<double>(f));
        uint16_t want;
        if (a >= 65520.0) {
            want = 0x7c00;  // beyond max + half an ulp: infinity
        } else {
            auto it = std::lower_bound(table.begin(), table.end(), a);
            size_t hi = static_cast<size_t>(it - table.begin());
            if (hi >= table.size()) hi = table.size() - 1;
            size_t lo = hi == 0 ? 0 : hi - 1;
            const double dlo = a - table[lo], dhi = table[hi] - a;
            size_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) == 0 ? lo : hi);
            if (table[hi] == a) pick = hi;
            want = static_cast<uint16_t>(pick);
        }
        if (f < 0) want |= 0x8000;
        ASSERT_EQ(got, want) << "f=" << f;
    }
    EXPECT_EQ(float_to_half(INFINITY), 0x7c00);
    EXPECT_EQ(float_to_half(-INFINITY), 0xfc00);
    EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
}

TEST(Half, Bf16RoundTripsAndRounds) {
    for (uint32_t c = 0; c < 65536; ++c) {
        const uint16_t b = static_cast<uint16_t>(c);
        const float f = bf16_to_float(b);
        if (std::isnan(f)) continue;
        EXPECT_EQ(float_to_bf16(f), b);
    }
    // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1).
    EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
}

// The vectorised conversion gives half_to_float's floats for all 65,536
// halves (NaNs as NaNs), at lengths that leave a tail past the 8-wide steps.
TEST(Half, ManyAtOnceEqualOneAtATime) {
    std::vector<uint16_t> all(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    for (const int64_t n : {int64_t{65536}, int64_t{13}, int64_t{0}}) {
        std::vector<float> got(static_cast<size_t>(n));
        cortiq::halves_to_floats(all.data(), n, got.data());
        for (int64_t i = 0; i < n; ++i) {
            const float want = cortiq::half_to_float(all[static_cast<size_t>(i)]);
            if (std::isnan(want))
                EXPECT_TRUE(std::isnan(got[static_cast<size_t>(i)])) << i;
            else
                ASSERT_EQ(std::bit_cast<uint32_t>(got[static_cast<size_t>(i)]),
                          std::bit_cast<uint32_t>(want))
                    << i;
        }
    }
}
