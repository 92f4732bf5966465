// What the tuners (block_tune.cpp, distill.cpp) share for their steps and
// for several processes tuning together (TuneRanks, block_tune.hpp): a value
// folded along the processes, a step's windows and their gradients' sum.
// Internal to tune/.
#pragma once

#include <algorithm>
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

// The windows of order[first, first + count) that this process computes
// (those in [lo, hi)), ascending: the order a step's gradients are summed in.
inline std::vector<size_t> step_windows(const std::vector<size_t>& order, size_t first,
                                        size_t count, size_t lo, size_t hi) {
    std::vector<size_t> w;
    for (size_t i = first; i < first + count; ++i)
        if (order[i] >= lo && order[i] < hi) w.push_back(order[i]);
    std::sort(w.begin(), w.end());
    return w;
}

// g (every block's gradients; cleared here) = Σ over `windows` in order of
// each window's gradient, grads(w, out) writing window w's into out (one
// gradient per block of g, the shapes of g). Alone, one window at a time;
// with ranks, this process computes its windows' gradients first (at the
// same time as the others, into `held`), then adds them to the sum of the
// ranks before it.
template <class Grads>
void sum_window_grads(const TuneRanks* ranks, const std::vector<size_t>& windows,
                      const std::vector<BlockGradsT<float>*>& g,
                      std::vector<std::vector<BlockGradsT<float>>>& held, Grads&& grads) {
    for (auto* x : g) clear(*x);
    auto buffer = [&](size_t k) -> std::vector<BlockGradsT<float>>& {
        while (held.size() <= k) {
            held.emplace_back();
            for (auto* x : g) held.back().push_back(*x);
        }
        return held[k];
    };
    auto add = [&](std::vector<BlockGradsT<float>>& h) {
        for (size_t l = 0; l < g.size(); ++l) add_grads(*g[l], h[l]);
    };
    if (!ranks) {
        for (size_t w : windows) {
            grads(w, buffer(0));
            add(buffer(0));
        }
        return;
    }
    for (size_t k = 0; k < windows.size(); ++k) grads(windows[k], buffer(k));
    std::vector<float> flat;
    flatten(g, flat);
    fold_values<float>(ranks, flat, [&](std::vector<float>& v) {
        unflatten(v, g);
        for (size_t k = 0; k < windows.size(); ++k) add(held[k]);
        flatten(g, v);
    });
    unflatten(flat, g);
}

}  // namespace cortiq::tune
