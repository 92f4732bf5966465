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

// The block of tune_fixtures.hpp with its RoPE table and the loss Σ c ∘ out.
struct Problem {
    Fixture f;
    RopeT<double> rope = rope_for<double>(f.inv_freq, f.L);

    double loss() {
        BlockActsT<double> a;
        block_forward(f.p, f.d, rope, f.x.data(), f.windows, f.L, a);
        double s = 0;
        for (size_t i = 0; i < f.c.size(); ++i) s += f.c[i] * a.out[i];
        return s;
    }
};

// |analytic − numeric| ≤ tol · max(1, |numeric|) for every entry of `v`
// (every `stride`-th entry, the last one always)
void check(Problem& pr, Vec& v, const Vec& analytic, const std::string& what, size_t stride = 1) {
    ASSERT_EQ(v.size(), analytic.size()) << what;
    const double h = 1e-6;
    std::vector<size_t> entries;
    for (size_t i = 0; i < v.size(); i += stride) entries.push_back(i);
    if (!v.empty() && entries.back() + 1 != v.size()) entries.push_back(v.size() - 1);
    for (size_t i : entries) {
        const double keep = v[i];
        v[i] = keep + h;
        const double up = pr.loss();
        v[i] = keep - h;
        const double down = pr.loss();
        v[i] = keep;
        const double num = (up - down) / (2 * h);
        ASSERT_NEAR(analytic[i], num, 1e-6 * std::max(1.0, std::abs(num)))
            << what << " entry " << i;
    }
}

// Every gradient of the block of f (dx, norms, each BLR path's scales and
// signs) against finite differences, every `stride`-th entry of each;
// returns the BLR paths checked.
int check_all(Problem& pr, bool qk_norm, size_t stride = 1) {
    Fixture& f = pr.f;
    BlockActsT<double> a;
    block_forward(f.p, f.d, pr.rope, f.x.data(), f.windows, f.L, a);
    BlockGradsT<double> g = zero_grads(f.p);
    Vec dx(f.x.size());
    block_backward(f.p, f.d, pr.rope, a, f.c.data(), dx.data(), g);

    check(pr, f.x, dx, "dx", stride);
    check(pr, f.p.in_norm, g.in_norm, "input norm", stride);
    check(pr, f.p.post_norm, g.post_norm, "post-attention norm", stride);
    if (qk_norm) {
        check(pr, f.p.q_norm, g.q_norm, "q norm", stride);
        check(pr, f.p.k_norm, g.k_norm, "k norm", stride);
    }
    const char* names[] = {"q", "k", "v", "o", "gate", "up", "down", "qkv", "z", "b", "a", "out"};
    auto lins = f.p.linears();
    int checked = 0;
    for (size_t i = 0; i < lins.size(); ++i) {
        if (!lins[i]->blr) continue;
        for (size_t p = 0; p < lins[i]->blr->paths.size(); ++p) {
            auto& q = lins[i]->blr->paths[p];
            const auto& gq = g.blr[i]->paths[p];
            const std::string w = std::string(names[i]) + " path " + std::to_string(p);
            check(pr, q.h, gq.h, w + " h", stride);
            check(pr, q.l, gq.l, w + " l", stride);
            check(pr, q.g, gq.g, w + " g", stride);
            check(pr, q.su, gq.su, w + " S_U", stride);
            check(pr, q.sv, gq.sv, w + " S_V", stride);
            ++checked;
        }
    }
    return checked;
}

void check_block(bool qwen3) {
    Problem pr{make_fixture(qwen3, qwen3 ? 7 : 3)};
    EXPECT_EQ(check_all(pr, qwen3), 10);
}

// A backward without the signs' gradients (zero_grads(p, false), for a tuner
// whose signs are fixed) gives dx and every other gradient bit for bit, and
// no gradient of the signs.
TEST(TuneGrad, FixedSignsSkipTheirGradientsAndChangeNoOther) {
    for (const bool qwen3 : {false, true}) {
        Fixture f = make_fixture(qwen3, qwen3 ? 7 : 3);
        const RopeT<double> rope = rope_for<double>(f.inv_freq, f.L);
        BlockActsT<double> a;
        block_forward(f.p, f.d, rope, f.x.data(), f.windows, f.L, a);
        BlockGradsT<double> with = zero_grads(f.p), without = zero_grads(f.p, false);
        Vec dx_with(f.x.size()), dx_without(f.x.size());
        block_backward(f.p, f.d, rope, a, f.c.data(), dx_with.data(), with);
        block_backward(f.p, f.d, rope, a, f.c.data(), dx_without.data(), without);
        EXPECT_TRUE(dx_with == dx_without);
        EXPECT_TRUE(with.in_norm == without.in_norm && with.post_norm == without.post_norm);
        EXPECT_TRUE(with.q_norm == without.q_norm && with.k_norm == without.k_norm);
        int paths = 0;
        for (size_t i = 0; i < with.blr.size(); ++i) {
            if (!with.blr[i]) continue;
            for (size_t p = 0; p < with.blr[i]->paths.size(); ++p, ++paths) {
                const auto &gw = with.blr[i]->paths[p], &go = without.blr[i]->paths[p];
                EXPECT_TRUE(gw.h == go.h && gw.l == go.l && gw.g == go.g) << i;
                EXPECT_FALSE(gw.su.empty());
                EXPECT_TRUE(go.su.empty() && go.sv.empty()) << i;
            }
        }
        EXPECT_EQ(paths, 10);
    }
}

TEST(TuneGrad, LlamaBlockWithBiasesMatchesFiniteDifferences) {
    check_block(false);
}

TEST(TuneGrad, Qwen3BlockWithQkNormsMatchesFiniteDifferences) {
    check_block(true);
}

// Qwen3.5's attention block: the output gate made by q_proj, partial RoPE.
TEST(TuneGrad, Qwen35GatedAttentionBlockMatchesFiniteDifferences) {
    Problem pr{make_gated_attention_fixture(13)};
    EXPECT_EQ(check_all(pr, true), 10);
}

// Qwen3.5's Gated DeltaNet block, windows longer than the delta rule's
// checkpoint interval.
TEST(TuneGrad, Qwen35GatedDeltaNetBlockMatchesFiniteDifferences) {
    Problem pr{make_delta_fixture(17)};
    ASSERT_GT(pr.f.L, kTuneDeltaChunk);
    // every 17th entry: each loss evaluation runs the whole delta rule, and
    // 17 is prime to every layout's period (heads, dk, dv, rank, hidden)
    EXPECT_EQ(check_all(pr, false, 17), 10);  // qkv 2, z 1, out 2, gate 1, up 2, down 2
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
