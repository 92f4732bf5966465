// The backward passes of tune/ (grad_ops, block) against central finite
// differences in float64: every gradient a tuning step uses — the block input,
// the BLR scales h, ℓ, g and the signs as real numbers (what the
// straight-through estimator passes on), the norm weights — for a Llama-style
// block with biases and a Qwen3-style block with q/k norms; and the
// distillation loss and embedding backward on their own.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "tune/block.hpp"
#include "tune/grad_ops.hpp"
#include "tune_fixtures.hpp"

namespace cortiq::tune {
namespace {

using namespace fixtures;

struct Fixture {
    BlockDims d;
    BlockParamsT<double> p;
    RopeT<double> rope;
    int64_t windows = 2, L = 5;
    Vec x, c;  // input, and the loss weights: loss = Σ c ∘ out

    double loss() {
        BlockActsT<double> a;
        block_forward(p, d, rope, x.data(), windows, L, a);
        double s = 0;
        for (size_t i = 0; i < c.size(); ++i) s += c[i] * a.out[i];
        return s;
    }
};

Fixture make_fixture(bool qwen3, uint64_t seed) {
    std::mt19937_64 rng(seed);
    Fixture f;
    f.d = BlockDims{8, 4, 2, 4, 12, 1e-6, qwen3};
    const int64_t H = 8, qw = 16, kw = 8, ffn = 12;
    auto ones_ish = [&](int64_t n) {
        Vec v = randn(rng, n, 0.2);
        for (auto& x : v) x += 1.0;
        return v;
    };
    f.p.in_norm = ones_ish(H);
    f.p.post_norm = ones_ish(H);
    if (qwen3) {
        f.p.q_norm = ones_ish(4);
        f.p.k_norm = ones_ish(4);
    }
    const bool bias = !qwen3;  // Qwen2-style q/k/v biases
    f.p.q = blr_linear(rng, qw, H, 3, 2, bias);
    f.p.k = blr_linear(rng, kw, H, 3, 1, bias);
    f.p.v = dense_linear(rng, kw, H);  // a layer kept dense
    f.p.o = blr_linear(rng, H, qw, 4, 2, false);
    f.p.gate = blr_linear(rng, ffn, H, 4, 1, false);
    f.p.up = blr_linear(rng, ffn, H, 4, 2, false);
    f.p.down = blr_linear(rng, H, ffn, 5, 2, false);
    std::vector<float> inv_freq{1.0f, 0.1f};
    f.rope = rope_for<double>(inv_freq, f.L);
    f.x = randn(rng, f.windows * f.L * H);
    f.c = randn(rng, f.windows * f.L * H);
    return f;
}

// |analytic − numeric| ≤ tol · max(1, |numeric|) for every entry of `v`
void check(Fixture& f, Vec& v, const Vec& analytic, const std::string& what) {
    ASSERT_EQ(v.size(), analytic.size()) << what;
    const double h = 1e-6;
    for (size_t i = 0; i < v.size(); ++i) {
        const double keep = v[i];
        v[i] = keep + h;
        const double up = f.loss();
        v[i] = keep - h;
        const double down = f.loss();
        v[i] = keep;
        const double num = (up - down) / (2 * h);
        ASSERT_NEAR(analytic[i], num, 1e-6 * std::max(1.0, std::abs(num)))
            << what << " entry " << i;
    }
}

void check_block(bool qwen3) {
    Fixture f = make_fixture(qwen3, qwen3 ? 7 : 3);
    BlockActsT<double> a;
    block_forward(f.p, f.d, f.rope, f.x.data(), f.windows, f.L, a);
    BlockGradsT<double> g = zero_grads(f.p);
    Vec dx(f.x.size());
    block_backward(f.p, f.d, f.rope, a, f.c.data(), dx.data(), g);

    check(f, f.x, dx, "dx");
    check(f, f.p.in_norm, g.in_norm, "input norm");
    check(f, f.p.post_norm, g.post_norm, "post-attention norm");
    if (qwen3) {
        check(f, f.p.q_norm, g.q_norm, "q norm");
        check(f, f.p.k_norm, g.k_norm, "k norm");
    }
    const char* names[] = {"q", "k", "v", "o", "gate", "up", "down"};
    auto lins = f.p.linears();
    int checked = 0;
    for (size_t i = 0; i < lins.size(); ++i) {
        if (!lins[i]->blr) continue;
        for (size_t p = 0; p < lins[i]->blr->paths.size(); ++p) {
            auto& q = lins[i]->blr->paths[p];
            const auto& gq = g.blr[i]->paths[p];
            const std::string w = std::string(names[i]) + " path " + std::to_string(p);
            check(f, q.h, gq.h, w + " h");
            check(f, q.l, gq.l, w + " l");
            check(f, q.g, gq.g, w + " g");
            check(f, q.su, gq.su, w + " S_U");
            check(f, q.sv, gq.sv, w + " S_V");
            ++checked;
        }
    }
    EXPECT_EQ(checked, 10);
}

TEST(TuneGrad, LlamaBlockWithBiasesMatchesFiniteDifferences) {
    check_block(false);
}

TEST(TuneGrad, Qwen3BlockWithQkNormsMatchesFiniteDifferences) {
    check_block(true);
}

TEST(TuneGrad, DistillationLossMatchesFiniteDifferencesAndVanishesAtTheTeacher) {
    std::mt19937_64 rng(11);
    const int64_t rows = 3, vocab = 7;
    Vec logits = randn(rng, rows * vocab), teacher = randn(rng, rows * vocab), tlogp(rows * vocab);
    for (int64_t i = 0; i < rows; ++i) {
        double s = 0;
        for (int64_t j = 0; j < vocab; ++j) s += std::exp(teacher[i * vocab + j]);
        for (int64_t j = 0; j < vocab; ++j)
            tlogp[i * vocab + j] = teacher[i * vocab + j] - std::log(s);
    }
    Vec grad(rows * vocab), scratch(rows * vocab);
    const double loss =
        kl_forward_backward(logits.data(), tlogp.data(), rows, vocab, 0.5, grad.data());
    EXPECT_GT(loss, 0);
    for (size_t i = 0; i < logits.size(); ++i) {
        const double keep = logits[i], h = 1e-6;
        logits[i] = keep + h;
        const double up =
            kl_forward_backward(logits.data(), tlogp.data(), rows, vocab, 0.5, scratch.data());
        logits[i] = keep - h;
        const double down =
            kl_forward_backward(logits.data(), tlogp.data(), rows, vocab, 0.5, scratch.data());
        logits[i] = keep;
        EXPECT_NEAR(grad[i], (up - down) / (2 * h), 1e-7);
    }
    // the student equal to the teacher (up to a constant per row): zero loss and gradient
    Vec shifted = teacher;
    for (auto& v : shifted) v += 3.0;
    EXPECT_NEAR(kl_forward_backward(shifted.data(), tlogp.data(), rows, vocab, 1.0, grad.data()), 0,
                1e-12);
    for (double v : grad) EXPECT_NEAR(v, 0, 1e-12);
}

TEST(TuneGrad, EmbeddingBackwardAddsEachRowToItsToken) {
    const int64_t dim = 3;
    const std::vector<int32_t> tokens{2, 0, 2};
    Vec table(4 * dim), out(tokens.size() * dim), dout(tokens.size() * dim);
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<double>(i);
    for (size_t i = 0; i < dout.size(); ++i) dout[i] = 1.0 + static_cast<double>(i);
    embedding_forward(table.data(), dim, tokens.data(), 3, out.data());
    EXPECT_EQ(out[0], 6.0);
    EXPECT_EQ(out[3], 0.0);
    Vec dtable(table.size(), 0.0);
    embedding_backward(dout.data(), dim, tokens.data(), 3, dtable.data());
    // the loss Σ dout ∘ out is linear in the table: its gradient is exact
    for (int64_t j = 0; j < dim; ++j) {
        EXPECT_EQ(dtable[2 * dim + j], dout[j] + dout[2 * dim + j]);
        EXPECT_EQ(dtable[0 * dim + j], dout[dim + j]);
        EXPECT_EQ(dtable[1 * dim + j], 0.0);
    }
}

}  // namespace
}  // namespace cortiq::tune
