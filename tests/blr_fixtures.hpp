// Fixtures of the payload and packed-layer tests: random BLR factors (±1
// signs, log-normal scales around chosen magnitudes) and a version-1 payload.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "blr/layout.hpp"
#include "blr/model.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"

namespace cortiq::test {

struct ScaleSpread {
    double h = 0.01, l = 3.0, g = 0.5;  // typical magnitudes
    double sigma = 0.5;                 // log-normal spread
    double negative_g = 0.0;            // share of negative input scales
};

// Scales spanning a wide range (the gauge rebalance of blr::pack must cope).
constexpr ScaleSpread kWideScales{1e-4, 300.0, 0.05, 1.0, 0.1};

inline blr::Factors random_factors(int64_t m, int64_t n, int64_t r, int paths, uint64_t seed,
                                   const ScaleSpread& sc = {}) {
    Rng rng(seed);
    blr::Factors f;
    f.m = m;
    f.n = n;
    f.r = r;
    for (int p = 0; p < paths; ++p) {
        blr::Path q;
        q.su = MatD(m, r);
        q.sv = MatD(n, r);
        for (auto& v : q.su.vec()) v = rng.uniform() < 0.5 ? -1.0 : 1.0;
        for (auto& v : q.sv.vec()) v = rng.uniform() < 0.5 ? -1.0 : 1.0;
        for (int64_t i = 0; i < m; ++i) q.h.push_back(sc.h * std::exp(sc.sigma * rng.normal()));
        for (int64_t k = 0; k < r; ++k) q.l.push_back(sc.l * std::exp(sc.sigma * rng.normal()));
        for (int64_t j = 0; j < n; ++j)
            q.g.push_back((rng.uniform() < sc.negative_g ? -1 : 1) * sc.g *
                          std::exp(sc.sigma * rng.normal()));
        f.paths.push_back(q);
    }
    return f;
}

// A version-1 payload written by hand from the layout of the first format
// (S_U by rows of r bits padded to 64, S_Vᵀ by rows of n bits padded to 64).
inline std::vector<uint8_t> pack_v1(const blr::Factors& md) {
    const uint64_t m = md.m, n = md.n, r = md.r, np = md.paths.size();
    std::vector<uint8_t> out(blr::v1::payload_bytes(m, n, r, np), 0);
    const blr::Header hd{blr::kMagic,
                         blr::kVersion1,
                         static_cast<uint16_t>(np),
                         static_cast<uint32_t>(m),
                         static_cast<uint32_t>(n),
                         static_cast<uint32_t>(r),
                         static_cast<uint32_t>(blr::words_for(r)),
                         static_cast<uint32_t>(blr::words_for(n)),
                         0};
    std::memcpy(out.data(), &hd, sizeof hd);
    for (uint64_t p = 0; p < np; ++p) {
        const blr::Path& q = md.paths[p];
        uint8_t* base = out.data() + 32 + p * blr::v1::path_bytes(m, n, r);
        auto put = [&](double v, uint64_t off) {
            const uint16_t h = float_to_half(static_cast<float>(v));
            std::memcpy(base + off, &h, 2);
        };
        for (uint64_t i = 0; i < m; ++i) put(q.h[i], 2 * i);
        for (uint64_t k = 0; k < r; ++k) put(q.l[k], 2 * (m + k));
        for (uint64_t j = 0; j < n; ++j) put(q.g[j], 2 * (m + r + j));
        uint8_t* su = base + blr::v1::off_su(m, n, r);
        for (uint64_t i = 0; i < m; ++i)
            for (uint64_t k = 0; k < r; ++k)
                if (q.su(i, k) < 0) su[8 * (i * blr::words_for(r)) + k / 8] |= 1 << (k % 8);
        uint8_t* svt = base + blr::v1::off_svt(m, n, r);
        for (uint64_t k = 0; k < r; ++k)
            for (uint64_t j = 0; j < n; ++j)
                if (q.sv(j, k) < 0) svt[8 * (k * blr::words_for(n)) + j / 8] |= 1 << (j % 8);
    }
    return out;
}

}  // namespace cortiq::test
