// The packed runtime layer (model/blr_linear.hpp, blr/sign_kernels.hpp)
// against dequantise-then-dense: random payloads of awkward shapes, both
// payload versions and the sign payload, every SIMD variant this CPU has, one
// row (decode) and batches (tiles + sgemm).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "blr/layout.hpp"
#include "blr/model.hpp"
#include "blr/packed.hpp"
#include "blr/sign.hpp"
#include "blr/sign_kernels.hpp"
#include "blr/sign_layout.hpp"
#include "blr_fixtures.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"
#include "model/blr_linear.hpp"

using namespace cortiq;

namespace {

blr::Factors random_model(int64_t m, int64_t n, int64_t r, int paths, uint64_t seed) {
    return test::random_factors(m, n, r, paths, seed);
}

// ‖x·Wᵀ − y‖ / ‖x·Wᵀ‖ with the product in float64.
double rel_err_of_apply(const MatF& w, const MatF& x, const MatF& y) {
    double num = 0, den = 0;
    for (int64_t t = 0; t < x.rows(); ++t)
        for (int64_t i = 0; i < w.rows(); ++i) {
            double s = 0;
            for (int64_t j = 0; j < w.cols(); ++j) s += double{x(t, j)} * w(i, j);
            num += (s - y(t, i)) * (s - y(t, i));
            den += s * s;
        }
    return std::sqrt(num / den);
}

MatF random_x(int64_t rows, int64_t n, uint64_t seed) {
    Rng rng(seed);
    MatF x(rows, n);
    for (auto& v : x.vec()) v = static_cast<float>(rng.normal());
    return x;
}

std::vector<blr::SignIsa> isas() {
    std::vector<blr::SignIsa> out{blr::SignIsa::portable};
    if (blr::best_sign_isa() >= blr::SignIsa::avx2) out.push_back(blr::SignIsa::avx2);
    if (blr::best_sign_isa() >= blr::SignIsa::avx512) out.push_back(blr::SignIsa::avx512);
    return out;
}

void check_payload(const std::vector<uint8_t>& bytes, const std::string& tag) {
    const MatF w = blr::dequant_any(bytes);
    const model::BlrLinear lin(blr::PackedWeight::from_payload(bytes, tag));
    EXPECT_EQ(lin.dense().vec(), w.vec()) << tag;  // both round float64 products once
    const blr::SignIsa keep = blr::sign_isa();
    for (blr::SignIsa isa : isas()) {
        blr::set_sign_isa(isa);
        for (int64_t rows : {1, 3, 4, 17}) {
            const MatF x = random_x(rows, w.cols(), 7 + rows);
            MatF y(rows, w.rows(), 123.0f);  // overwritten, not accumulated
            lin.apply(x.data(), rows, y.data());
            EXPECT_LE(rel_err_of_apply(w, x, y), 1e-5)
                << tag << " " << blr::isa_name(isa) << " rows " << rows;
        }
    }
    blr::set_sign_isa(keep);
}

}  // namespace

TEST(BlrLinear, PackedEqualsDequantisedOnAwkwardShapes) {
    for (auto [m, n, r, p] : {std::tuple{37, 70, 13, 1},
                              {70, 37, 1, 1},
                              {130, 65, 65, 2},
                              {64, 128, 64, 2},
                              {200, 129, 63, 1},
                              {1, 1, 1, 2},
                              {300, 17, 5, 2}}) {
        const auto bytes = blr::pack(random_model(m, n, r, p, 31 * m + n));
        check_payload(bytes, fmt::format("v2 {}x{} r{} P{}", m, n, r, p));
    }
}

// The batched products expand S in tiles of whole rows, about 2^20 floats
// and at least 512 rows each: at r = 700, t = S_Vᵀ x (rows of 1600 bits)
// takes two tiles (655 and 45 rows) and y = S_U t (rows of 3000 bits) two
// (512 and 188): the boundaries must neither drop nor repeat a row.
TEST(BlrLinear, BatchedProductsAcrossSeveralTiles) {
    const int64_t m = 3000, n = 1600, r = 700;
    const auto bytes = blr::pack(random_model(m, n, r, 1, 5));
    const MatF w = blr::dequant_any(bytes);
    const model::BlrLinear lin(blr::PackedWeight::from_payload(bytes, "tiles"));
    const MatF x = random_x(5, n, 9);
    MatF y(5, m, 123.0f);
    lin.apply(x.data(), 5, y.data());
    EXPECT_LE(rel_err_of_apply(w, x, y), 1e-5);
}

TEST(BlrLinear, SignPayloadsRunPacked) {
    for (auto [m, n] : {std::pair{37, 70}, {65, 129}, {1, 200}}) {
        Rng rng(m);
        MatD s(m, n);
        for (auto& v : s.vec()) v = rng.uniform() < 0.5 ? -1.0 : 1.0;
        VecD h(m), g(n);
        for (auto& v : h) v = 0.1 * std::exp(rng.normal());
        for (auto& v : g) v = std::exp(rng.normal());
        check_payload(blr::pack_sign(s, h, g), fmt::format("sign {}x{}", m, n));
    }
}

// Version-1 payloads (the first format) run packed too: rewritten at load.
TEST(BlrLinear, Version1PayloadsRunPacked) {
    const blr::Factors md = random_model(45, 77, 11, 2, 3);
    // a v1 payload: the v2 one's signs and scales in the v1 layout, via unpack
    const auto v1 = test::pack_v1(blr::unpack(blr::pack(md)));
    ASSERT_EQ(blr::info(v1).version, 1);
    EXPECT_EQ(blr::dequant(v1).vec(), blr::dequant(blr::pack(md)).vec());
    check_payload(v1, "v1");
}

// A payload that does not validate is refused at load, named.
TEST(BlrLinear, CorruptPayloadIsRefusedWithItsName) {
    auto bytes = blr::pack(random_model(20, 30, 5, 1, 1));
    bytes.pop_back();
    try {
        (void)blr::PackedWeight::from_payload(bytes, "f.safetensors: tensor 'x.weight'");
        ADD_FAILURE() << "a truncated payload was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tensor 'x.weight'"), std::string::npos) << e.what();
    }
}

// Resident bytes: the payload's bits plus float32 scales, within 5 % of the
// payload at 7B-like widths (scales are m + n + r values against r(m+n) bits).
TEST(BlrLinear, ResidentBytesAreThePayloadsOwn) {
    const int64_t m = 512, n = 384, r = blr::rank_for(512, 384, 1.0, 1);
    const auto bytes = blr::pack(random_model(m, n, r, 1, 4));
    const auto pw = blr::PackedWeight::from_payload(bytes, "t");
    EXPECT_GE(pw.resident_bytes(), static_cast<int64_t>(bytes.size()) - 64);
    EXPECT_LE(pw.resident_bytes(), static_cast<int64_t>(1.05 * bytes.size()));
}

// The device's word-aligned copies of the sign rows (blr/sign_layout.hpp) hold
// the stream's bits, S_U transposed, with zero padding: every bit checked
// against the stream, for rows that start anywhere in a word.
TEST(SignLayout, AlignedAndTransposedRowsHoldTheStreamsBits) {
    for (auto [m, n, r] : {std::tuple{37, 70, 13},
                           {70, 37, 1},
                           {1, 1, 1},
                           {64, 64, 33},
                           {130, 65, 65},
                           {300, 17, 5}}) {
        const blr::PackedWeight pw =
            blr::PackedWeight::from_payload(blr::pack(random_model(m, n, r, 2, 7 * m + n)), "t");
        for (int p = 0; p < 2; ++p) {
            const blr::SignRows sv = pw.svt(p), su = pw.sut(p);
            auto bit = [](const blr::SignRows& s, int64_t k, int64_t j) {
                const uint64_t b = s.first + static_cast<uint64_t>(k) * s.stride + j;
                return static_cast<uint32_t>((s.words[b / 64] >> (b % 64)) & 1);
            };
            // (clang before 16 cannot capture structured bindings)
            const std::string tag = std::to_string(m) + "x" + std::to_string(n) + " r" +
                                    std::to_string(r) + " p" + std::to_string(p);
            // every bit of `rows` rows of words32_for(cols) words: want(row, col), zero past cols
            auto check = [&](const std::vector<uint32_t>& w, int64_t rows, int64_t cols, auto want,
                             const char* what) {
                const int64_t ld = blr::words32_for(cols);
                ASSERT_EQ(w.size(), static_cast<size_t>(rows * ld)) << what;
                for (int64_t k = 0; k < rows; ++k)
                    for (int64_t j = 0; j < 32 * ld; ++j)
                        ASSERT_EQ((w[k * ld + j / 32] >> (j % 32)) & 1u, j < cols ? want(k, j) : 0u)
                            << what << " " << tag << " row " << k << " bit " << j;
            };
            check(
                blr::aligned_rows(sv), r, n, [&](int64_t k, int64_t j) { return bit(sv, k, j); },
                "S_Vt");
            check(
                blr::transposed_rows(su), m, r, [&](int64_t i, int64_t k) { return bit(su, k, i); },
                "S_U");
        }
    }
}
