// What the packed-layer benchmarks share: random packed weights and the
// --shapes flag.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "blr/layout.hpp"
#include "blr/model.hpp"
#include "blr/packed.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"

namespace cortiq::bench {

// A packed BLR weight with random signs and scales of `paths` paths at a bpw
// budget (the rank rule of blr::rank_for): the kernels' time does not depend
// on the values.
inline blr::PackedWeight random_packed(int64_t m, int64_t n, double bpw, uint64_t seed,
                                       int paths = 1) {
    blr::PackedWeight w;
    w.m = m;
    w.n = n;
    w.r = blr::rank_for(m, n, bpw, paths);
    w.paths = paths;
    Rng rng(seed);
    auto scales = [&](int64_t k) {
        std::vector<uint16_t> v(static_cast<size_t>(k));
        for (auto& x : v) x = float_to_half(static_cast<float>(0.05 * (1.0 + rng.uniform())));
        return v;
    };
    w.h = scales(paths * m);
    w.l = scales(paths * w.r);
    w.g = scales(paths * n);
    const uint64_t used = static_cast<uint64_t>(paths * w.r) * static_cast<uint64_t>(m + n);
    w.bits.resize(blr::words_for(used) + 1);
    for (auto& b : w.bits)
        b = (static_cast<uint64_t>(rng.uniform() * 4294967296.0) << 32) ^
            static_cast<uint64_t>(rng.uniform() * 4294967296.0);
    if (used % 64) w.bits[used / 64] &= (uint64_t{1} << (used % 64)) - 1;
    for (size_t i = used / 64 + (used % 64 ? 1 : 0); i < w.bits.size(); ++i) w.bits[i] = 0;
    return w;
}

// "4096x4096,4096x11008" → {(4096, 4096), (4096, 11008)}
inline std::vector<std::pair<int64_t, int64_t>> parse_shapes(const std::string& s) {
    std::vector<std::pair<int64_t, int64_t>> out;
    std::stringstream ss(s);
    for (std::string tok; std::getline(ss, tok, ',');) {
        const auto x = tok.find('x');
        CORTIQ_CHECK(x != std::string::npos, "shape '{}' is not MxN", tok);
        out.emplace_back(std::stoll(tok.substr(0, x)), std::stoll(tok.substr(x + 1)));
    }
    return out;
}

// "1,4,16" → {1, 4, 16}; "0.55,1.0" → {0.55, 1.0} (a list flag's values).
template <class T>
std::vector<T> parse_list(const std::string& s) {
    std::vector<T> out;
    std::stringstream ss(s);
    for (std::string tok; std::getline(ss, tok, ',');) {
        std::istringstream in(tok);
        T v{};
        CORTIQ_CHECK(static_cast<bool>(in >> v) && in.eof(), "'{}' in the list '{}'", tok, s);
        out.push_back(v);
    }
    return out;
}

}  // namespace cortiq::bench
