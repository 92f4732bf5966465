// A small Llama-style BLR block with a known optimum, shared by the sign-tuning
// tests of the CPU tuner (test_tune_block) and the GPU one (test_tune_grad_gpu):
// random windows through the true block give the targets; the start is the
// true block with its scales perturbed and a tenth of up_proj's left signs
// flipped, so sign tuning has work to do whose answer is known.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/matrix.hpp"
#include "tune/block.hpp"
#include "tune/block_tune.hpp"

namespace cortiq::sign_problem {

inline std::vector<float> randn(std::mt19937_64& rng, size_t n, double s) {
    std::normal_distribution<float> nd(0.0f, static_cast<float>(s));
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
}

inline tune::LinearT<float> blr_linear(std::mt19937_64& rng, int64_t m, int64_t n, int64_t r) {
    tune::LinearT<float> l{m, n, tune::BlrWeightsT<float>{m, n, r, {}}, {}, {}};
    std::vector<float> su(m * r), sv(n * r);
    for (auto& x : su) x = (rng() & 1) ? 1.0f : -1.0f;
    for (auto& x : sv) x = (rng() & 1) ? 1.0f : -1.0f;
    auto pos = [&](size_t k, double s) {
        auto v = randn(rng, k, 0.3);
        for (auto& x : v) x = static_cast<float>(s * std::exp(x));
        return v;
    };
    l.blr->paths.push_back(
        {pos(m, 1.0), pos(r, 1.0), pos(n, 1.0 / std::sqrt(double(n * r))), su, sv});
    return l;
}

struct Problem {
    tune::BlockDims d{32, 4, 2, 8, 48, 1e-6, false};
    tune::BlockParamsT<float> truth;
    std::vector<float> inv_freq{1.0f, 0.3f, 0.1f, 0.03f};
    tune::WindowPairs fit, sel;
};

// A random BLR block and its outputs on random windows.
inline Problem make_setup() {
    std::mt19937_64 rng(42);
    Problem s;
    const int64_t H = 32, L = 16;
    s.truth.in_norm.assign(H, 1.0f);
    s.truth.post_norm.assign(H, 1.0f);
    s.truth.q = blr_linear(rng, 32, H, 6);
    s.truth.k = blr_linear(rng, 16, H, 6);
    s.truth.v = blr_linear(rng, 16, H, 6);
    s.truth.o = blr_linear(rng, H, 32, 6);
    s.truth.gate = blr_linear(rng, 48, H, 8);
    s.truth.up = blr_linear(rng, 48, H, 8);
    s.truth.down = blr_linear(rng, H, 48, 8);
    const auto rope = tune::rope_for<float>(s.inv_freq, L);
    for (int set = 0; set < 2; ++set) {
        auto& pairs = set == 0 ? s.fit : s.sel;
        for (int w = 0; w < (set == 0 ? 12 : 4); ++w) {
            MatF x(L, H, randn(rng, L * H, 1.0));
            tune::BlockActsT<float> a;
            tune::block_forward(s.truth, s.d, rope, x.data(), 1, L, a);
            pairs.x.push_back(x);
            pairs.y.emplace_back(L, H, a.out);
        }
    }
    return s;
}

// Every scale multiplied by exp(N(0, sigma²)).
inline void perturb_scales(tune::BlockParamsT<float>& p, double sigma) {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> nd(0.0f, static_cast<float>(sigma));
    for (auto* l : p.linears())
        if (l->blr)
            for (auto& q : l->blr->paths)
                for (auto* v : {&q.h, &q.l, &q.g})
                    for (auto& x : *v) x *= std::exp(nd(rng));
}

// The sign-tuning problem: the true block with its scales perturbed and a
// tenth of up_proj's left signs flipped (which tenth: `seed`), so sign tuning
// has work to do whose answer is known.
struct SignProblem {
    tune::BlockParamsT<float> start;
    std::vector<size_t> injected;  // the flipped entries of up.paths[0].su
};

inline SignProblem inject_sign_flips(const Problem& s, uint64_t seed) {
    SignProblem sp{s.truth, {}};
    perturb_scales(sp.start, 0.3);
    auto& su = sp.start.up.blr->paths[0].su;
    std::vector<size_t> idx(su.size());
    std::iota(idx.begin(), idx.end(), size_t{0});
    std::shuffle(idx.begin(), idx.end(), std::mt19937_64(seed));
    sp.injected.assign(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(su.size() / 10));
    for (size_t i : sp.injected) su[i] = -su[i];
    return sp;
}

inline tune::TuneOptions sign_options() {
    tune::TuneOptions o;
    o.epochs = 10;
    o.batch_windows = 1;
    o.lr_scales = 5e-3;
    o.lr_signs = 2e-3;
    o.latent_init = 1e-2;
    return o;
}

// The injected flips that tuning put back to the true sign.
inline int64_t undone(const SignProblem& sp, const tune::BlockParamsT<float>& tuned,
                      const tune::BlockParamsT<float>& truth) {
    int64_t n = 0;
    for (size_t i : sp.injected) n += tuned.up.blr->paths[0].su[i] == truth.up.blr->paths[0].su[i];
    return n;
}

}  // namespace cortiq::sign_problem
