// What the tuners share when several processes tune together
// (TuneRanks, block_tune.hpp): a value folded along the processes and
// gradients as one vector of floats. Internal to tune/.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "core/error.hpp"
#include "tune/adam.hpp"
#include "tune/block_tune.hpp"

namespace cortiq::tune {

// `running` continued by `mine` across the processes (TuneRanks::fold), or
// here alone.
template <class T>
inline void fold_values(const TuneRanks* ranks, std::vector<T>& running,
                        const std::function<void(std::vector<T>&)>& mine) {
    if (!ranks) return mine(running);
    auto to_bytes = [](const std::vector<T>& v, std::vector<uint8_t>& b) {
        b.resize(v.size() * sizeof(T));
        if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
    };
    auto from_bytes = [](const std::vector<uint8_t>& b, std::vector<T>& v) {
        v.resize(b.size() / sizeof(T));
        if (!b.empty()) std::memcpy(v.data(), b.data(), b.size());
    };
    std::vector<uint8_t> bytes;
    to_bytes(running, bytes);
    ranks->fold(bytes, [&](std::vector<uint8_t>& b) {
        std::vector<T> v;
        from_bytes(b, v);
        mine(v);
        to_bytes(v, b);
    });
    from_bytes(bytes, running);
}

// Every gradient vector of gs (in order) as one vector of floats, and back.
inline void flatten(std::vector<BlockGradsT<float>*> gs, std::vector<float>& out) {
    out.clear();
    for (auto* g : gs)
        for (const auto* v : grad_vectors(*g)) out.insert(out.end(), v->begin(), v->end());
}
inline void unflatten(const std::vector<float>& in, std::vector<BlockGradsT<float>*> gs) {
    size_t at = 0;
    for (auto* g : gs)
        for (auto* v : grad_vectors(*g)) {
            CORTIQ_ASSERT(at + v->size() <= in.size(), "tuning: a gradient of another block");
            std::copy(in.begin() + static_cast<int64_t>(at),
                      in.begin() + static_cast<int64_t>(at + v->size()), v->begin());
            at += v->size();
        }
}

}  // namespace cortiq::tune
