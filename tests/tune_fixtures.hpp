// Random BLR and dense layers in float64 for the tuning tests
// (test_tune_grad, test_tune_grad_gpu): the same draws in both, so the GPU
// test runs on test_tune_grad's fixture.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "tune/block.hpp"

namespace cortiq::tune::fixtures {

using Vec = std::vector<double>;

inline Vec randn(std::mt19937_64& rng, size_t n, double s = 1.0) {
    std::normal_distribution<double> nd(0.0, s);
    Vec v(n);
    for (auto& x : v) x = nd(rng);
    return v;
}

inline Vec random_signs(std::mt19937_64& rng, size_t n) {
    Vec v(n);
    for (auto& x : v) x = (rng() & 1) ? 1.0 : -1.0;
    return v;
}

// m × n BLR layer of rank r with `paths` paths of random scales and signs.
inline LinearT<double> blr_linear(std::mt19937_64& rng, int64_t m, int64_t n, int64_t r, int paths,
                                  bool bias) {
    LinearT<double> l{m, n, BlrWeightsT<double>{m, n, r, {}}, {}, {}};
    for (int p = 0; p < paths; ++p) {
        const double s = 1.0 / std::sqrt(static_cast<double>(n * r));
        BlrPathT<double> q{randn(rng, m, 1.0), randn(rng, r, 1.0), randn(rng, n, s),
                           random_signs(rng, m * r), random_signs(rng, n * r)};
        l.blr->paths.push_back(std::move(q));
    }
    if (bias) l.bias = randn(rng, m, 0.1);
    return l;
}

inline LinearT<double> dense_linear(std::mt19937_64& rng, int64_t m, int64_t n) {
    return {m, n, std::nullopt, randn(rng, m * n, 1.0 / std::sqrt(static_cast<double>(n))), {}};
}

// The sizes of a block fixture: test_tune_grad's (8, 4, 2, 4, 12; 2 windows
// of 5) and larger ones (test_tune_grad_gpu).
struct Size {
    int64_t hidden, heads, kv_heads, head_dim, ffn, windows, L;
    int64_t rank;  // the rank of the widest layers (test_tune_grad: 3..5)
};
constexpr Size kSmall{8, 4, 2, 4, 12, 2, 5, 0};

struct Fixture {
    BlockDims d;
    BlockParamsT<double> p;
    std::vector<float> inv_freq;
    int64_t windows = 2, L = 5;
    Vec x, c;  // input, and the loss weights: loss = Σ c ∘ out
};

// A random block of size s (test_tune_grad's draws for kSmall), its input and
// the loss weights.
inline Fixture make_fixture(bool qwen3, uint64_t seed, const Size& s = kSmall) {
    std::mt19937_64 rng(seed);
    Fixture f;
    f.d = BlockDims{s.hidden, s.heads, s.kv_heads, s.head_dim, s.ffn, 1e-6, qwen3};
    f.windows = s.windows;
    f.L = s.L;
    const int64_t H = s.hidden, qw = s.heads * s.head_dim, kw = s.kv_heads * s.head_dim,
                  ffn = s.ffn;
    auto ones_ish = [&](int64_t n) {
        Vec v = randn(rng, n, 0.2);
        for (auto& x : v) x += 1.0;
        return v;
    };
    f.p.in_norm = ones_ish(H);
    f.p.post_norm = ones_ish(H);
    if (qwen3) {
        f.p.q_norm = ones_ish(s.head_dim);
        f.p.k_norm = ones_ish(s.head_dim);
    }
    const bool bias = !qwen3;  // Qwen2-style q/k/v biases
    const int64_t r = s.rank;
    f.p.q = blr_linear(rng, qw, H, r ? r : 3, 2, bias);
    f.p.k = blr_linear(rng, kw, H, r ? r : 3, 1, bias);
    f.p.v = dense_linear(rng, kw, H);  // a layer kept dense
    f.p.o = blr_linear(rng, H, qw, r ? r : 4, 2, false);
    f.p.gate = blr_linear(rng, ffn, H, r ? r : 4, 1, false);
    f.p.up = blr_linear(rng, ffn, H, r ? r : 4, 2, false);
    f.p.down = blr_linear(rng, H, ffn, r ? r : 5, 2, false);
    if (s.head_dim == 4) {
        f.inv_freq = {1.0f, 0.1f};
    } else {
        for (int64_t j = 0; j < s.head_dim / 2; ++j)
            f.inv_freq.push_back(static_cast<float>(std::pow(
                10000.0, -2.0 * static_cast<double>(j) / static_cast<double>(s.head_dim))));
    }
    f.x = randn(rng, f.windows * f.L * H);
    f.c = randn(rng, f.windows * f.L * H);
    return f;
}

// A Qwen3.5 gated-attention block: q_proj makes [query | gate] per head,
// q/k norms, RoPE on half of each head (partial rotary), no biases.
inline Fixture make_gated_attention_fixture(uint64_t seed, const Size& s = kSmall) {
    Fixture f = make_fixture(true, seed, s);
    std::mt19937_64 rng(seed + 1000);
    f.d.attn_gate = true;
    f.d.rotary_dim = s.head_dim / 2;
    const int64_t qw = s.heads * s.head_dim;
    f.p.q = blr_linear(rng, 2 * qw, s.hidden, s.rank ? s.rank : 3, 2, false);
    f.inv_freq.resize(static_cast<size_t>(f.d.rotary_dim / 2));
    return f;
}

// A Qwen3.5 Gated DeltaNet block: 2 key heads and 4 value heads (two value
// heads per key head), dk 3, dv 4, a convolution of width 4; windows of 67
// tokens, so the delta rule's backward crosses a checkpoint (every 64).
inline Fixture make_delta_fixture(uint64_t seed) {
    std::mt19937_64 rng(seed);
    Fixture f;
    const int64_t H = 8, ffn = 12;
    f.d = BlockDims{H, 0, 0, 0, ffn, 1e-6, false};
    f.d.delta = {2, 4, 3, 4, 4};
    f.windows = 2;
    f.L = 67;
    const DeltaDims& dd = f.d.delta;
    auto ones_ish = [&](int64_t n) {
        Vec v = randn(rng, n, 0.2);
        for (auto& x : v) x += 1.0;
        return v;
    };
    f.p.delta = true;
    f.p.in_norm = ones_ish(H);
    f.p.post_norm = ones_ish(H);
    f.p.qkv = blr_linear(rng, dd.conv_dim(), H, 4, 2, false);
    f.p.z = blr_linear(rng, dd.value_dim(), H, 3, 1, false);
    f.p.b = dense_linear(rng, dd.v_heads, H);  // small layers stay dense, as in quantize
    f.p.a = dense_linear(rng, dd.v_heads, H);
    f.p.out = blr_linear(rng, H, dd.value_dim(), 4, 2, false);
    f.p.conv = randn(rng, dd.conv_dim() * dd.conv_kernel, 0.5);
    f.p.a_log = randn(rng, dd.v_heads, 0.5);
    f.p.dt_bias = randn(rng, dd.v_heads, 0.5);
    f.p.gnorm = ones_ish(dd.dv);
    f.p.gate = blr_linear(rng, ffn, H, 4, 1, false);
    f.p.up = blr_linear(rng, ffn, H, 4, 2, false);
    f.p.down = blr_linear(rng, H, ffn, 5, 2, false);
    f.x = randn(rng, f.windows * f.L * H);
    f.c = randn(rng, f.windows * f.L * H);
    return f;
}

}  // namespace cortiq::tune::fixtures
