// The BLR payload: rank rule, pack → validate → dequant round trip, and
// validate rejecting every kind of malformed payload.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "blr/layout.hpp"
#include "blr/model.hpp"
#include "blr_fixtures.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"

using namespace cortiq;

namespace {

blr::Factors random_model(int64_t m, int64_t n, int64_t r, int paths, uint64_t seed) {
    return test::random_factors(m, n, r, paths, seed, test::kWideScales);
}

}  // namespace

TEST(BlrRank, NeverExceedsBudgetAndIsLargest) {
    EXPECT_EQ(blr::rank_for(4096, 4096, 1.0, 1), 2028);
    EXPECT_EQ(blr::rank_for(4096, 4096, 1.0, 2), 1006);
    Rng rng(3);
    for (int t = 0; t < 2000; ++t) {
        const int64_t m = 1 + static_cast<int64_t>(rng.uniform() * 3000);
        const int64_t n = 1 + static_cast<int64_t>(rng.uniform() * 3000);
        const double bpw = 0.05 + 3.0 * rng.uniform();
        const int p = rng.uniform() < 0.5 ? 1 : 2;
        const int64_t r = blr::rank_for(m, n, bpw, p);
        const double budget = bpw * static_cast<double>(m) * static_cast<double>(n);
        if (r >= 1) EXPECT_LE(static_cast<double>(blr::bits(m, n, r, p)), budget);
        EXPECT_LE(r, std::min(m, n));
        if (r < std::min(m, n)) EXPECT_GT(static_cast<double>(blr::bits(m, n, r + 1, p)), budget);
    }
}

TEST(BlrPayload, RoundTrip) {
    for (auto [m, n, r, p] :
         {std::tuple{37, 70, 13, 1}, {64, 128, 64, 2}, {130, 65, 65, 2}, {1, 1, 1, 1}}) {
        const blr::Factors md = random_model(m, n, r, p, 11 + m);
        blr::Factors stored;
        const auto bytes = blr::pack(md, &stored);
        EXPECT_EQ(bytes.size(), blr::payload_bytes(m, n, r, p));
        EXPECT_NO_THROW(blr::validate(bytes, "t", m, n));
        const blr::Factors un = blr::unpack(bytes);
        ASSERT_EQ(un.paths.size(), static_cast<size_t>(p));
        for (int q = 0; q < p; ++q) {
            EXPECT_EQ(un.paths[q].su.vec(), md.paths[q].su.vec());
            EXPECT_EQ(un.paths[q].sv.vec(), md.paths[q].sv.vec());
            EXPECT_EQ(un.paths[q].h, stored.paths[q].h);
            EXPECT_EQ(un.paths[q].l, stored.paths[q].l);
            EXPECT_EQ(un.paths[q].g, stored.paths[q].g);
        }
        // dequant equals the model with f16 scales; and the gauge rebalance
        // kept Ŵ (up to f16 rounding of three factors: ~3·2^-11 per entry).
        const MatF dq = blr::dequant(bytes);
        const MatD want = stored.dense(), orig = md.dense();
        double num = 0, den = 0, num2 = 0;
        for (int64_t k = 0; k < want.size(); ++k) {
            num += std::pow(dq.data()[k] - want.data()[k], 2);
            num2 += std::pow(want.data()[k] - orig.data()[k], 2);
            den += std::pow(want.data()[k], 2);
        }
        EXPECT_LE(std::sqrt(num / den), 1e-6);
        EXPECT_LE(std::sqrt(num2 / den), 3e-3);
    }
}

TEST(BlrPayload, ValidateRejectsMalformed) {
    const auto good = blr::pack(random_model(20, 70, 10, 2, 5));
    ASSERT_NO_THROW(blr::validate(good));
    auto expect_reject = [](std::vector<uint8_t> b, const char* needle) {
        try {
            blr::validate(b, "tensor.x");
            ADD_FAILURE() << "accepted: " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("tensor.x"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    for (size_t len :
         {size_t{0}, size_t{5}, size_t{31}, size_t{32}, good.size() / 2, good.size() - 1})
        expect_reject(std::vector<uint8_t>(good.begin(), good.begin() + len), "bytes");
    auto extra = good;
    extra.push_back(0);
    expect_reject(extra, "bytes");
    auto hdr = [&](size_t off, uint32_t v, size_t width) {
        auto b = good;
        std::memcpy(b.data() + off, &v, width);
        return b;
    };
    expect_reject(hdr(0, 0x12345678, 4), "magic");
    expect_reject(hdr(4, 9, 2), "version");
    expect_reject(hdr(6, 3, 2), "paths");
    expect_reject(hdr(16, 71, 4), "rank");  // r > min(m, n)
    expect_reject(hdr(20, 3, 4), "word");   // words_u must be 0 in version 2
    expect_reject(hdr(28, 1, 4), "reserved");
    expect_reject(hdr(8, 21, 4), "bytes");  // m changed: size no longer matches
    // padding bits after the sign stream: 2 paths · 10 · (20 + 70) = 1800
    // bits, 29 words, so the last word holds 8 used bits
    const uint64_t m = 20, n = 70, r = 10;
    auto b = good;
    b.back() |= 0x80;
    expect_reject(b, "padding bits");
    // non-finite scales (NaN in ℓ of path 0, +inf in g of path 1)
    b = good;
    const uint16_t nan = 0x7e00, inf = 0x7c00;
    std::memcpy(b.data() + blr::off_scales(m, n, r, 0) + blr::off_l(m) + 2, &nan, 2);
    expect_reject(b, "non-finite latent");
    b = good;
    std::memcpy(b.data() + blr::off_scales(m, n, r, 1) + blr::off_g(m, r), &inf, 2);
    expect_reject(b, "non-finite input");
    // scale padding: 2(m+n+r) = 18 bytes padded to 24
    const auto odd = blr::pack(random_model(3, 4, 2, 1, 9));
    auto o2 = odd;
    o2[sizeof(blr::Header) + 20] = 1;
    expect_reject(o2, "padding byte");
    // wrong expected shape
    EXPECT_THROW(blr::validate(good, "t", 70, 20), Error);
}

TEST(BlrPayload, ScalesAreEditable) {
    const blr::Factors md = random_model(16, 24, 8, 1, 2);
    blr::Factors stored;
    auto bytes = blr::pack(md, &stored);
    for (auto& v : stored.paths[0].l) v = round_half(v * 2);
    blr::write_scales(bytes, stored);
    EXPECT_EQ(blr::unpack(bytes).paths[0].l, stored.paths[0].l);
}

namespace {}  // namespace

// Files written before version 2 still load: the same signs and scales.
TEST(BlrPayload, Version1StillLoads) {
    for (auto [m, n, r, p] : {std::tuple{37, 70, 13, 1}, {130, 65, 65, 2}, {1, 1, 1, 1}}) {
        blr::Factors md = random_model(m, n, r, p, 5 + m);
        for (auto& q : md.paths) {  // scales as f16 stores them
            for (auto& v : q.h) v = round_half(v * 1e3);
            for (auto& v : q.l) v = round_half(v * 1e-3);
            for (auto& v : q.g) v = round_half(v);
        }
        const auto bytes = test::pack_v1(md);
        ASSERT_NO_THROW(blr::validate(bytes, "v1", m, n));
        EXPECT_EQ(blr::info(bytes).version, 1);
        const blr::Factors un = blr::unpack(bytes);
        for (int q = 0; q < p; ++q) {
            EXPECT_EQ(un.paths[q].su.vec(), md.paths[q].su.vec());
            EXPECT_EQ(un.paths[q].sv.vec(), md.paths[q].sv.vec());
            EXPECT_EQ(un.paths[q].h, md.paths[q].h);
            EXPECT_EQ(un.paths[q].l, md.paths[q].l);
            EXPECT_EQ(un.paths[q].g, md.paths[q].g);
        }
        // and a padding bit of S_U's rows is still refused in version 1
        if (r % 64 != 0) {
            auto b = bytes;
            b[32 + blr::v1::off_su(m, n, r) + 8 * blr::words_for(r) - 1] |= 0x80;
            EXPECT_THROW(blr::validate(b, "v1"), Error);
        }
    }
}

// The bits every report uses are the stored bytes, and they stay within the
// header and 14 bytes of padding of the ideal count.
TEST(BlrRank, StoredBitsAreThePayloadBytes) {
    Rng rng(8);
    for (int t = 0; t < 40; ++t) {
        const int64_t m = 1 + static_cast<int64_t>(rng.uniform() * 90);
        const int64_t n = 1 + static_cast<int64_t>(rng.uniform() * 90);
        const int64_t r = 1 + static_cast<int64_t>(rng.uniform() * (std::min(m, n) - 1));
        const int p = rng.uniform() < 0.5 ? 1 : 2;
        const auto bytes = blr::pack(random_model(m, n, r, p, 100 + t));
        EXPECT_EQ(blr::bits(m, n, r, p), 8 * static_cast<int64_t>(bytes.size()));
        EXPECT_GE(blr::bits(m, n, r, p), blr::ideal_bits(m, n, r, p));
        EXPECT_LE(blr::bits(m, n, r, p), blr::ideal_bits(m, n, r, p) + 256 + 112);
    }
    // never above the budget; for 7B-sized shapes within 1 % of it
    for (auto [m, n] : {std::pair{64, 64}, {64, 4096}, {4096, 11008}, {11008, 4096}})
        for (double bpw : {0.55, 1.0, 2.0})
            for (int p : {1, 2}) {
                const int64_t r = blr::rank_for(m, n, bpw, p);
                if (m * n <= 64 * 64 && r < 1) continue;  // the header alone is 6 % of 64 × 64
                ASSERT_GE(r, 1) << m << "x" << n << " " << bpw;
                EXPECT_LE(blr::bits(m, n, r, p), bpw * m * n);
                if (m >= 4096 && n >= 4096 && r < std::min(m, n))  // steps < 0.1 % of it
                    EXPECT_GE(blr::bits(m, n, r, p), 0.99 * bpw * m * n) << m << "x" << n;
            }
}
