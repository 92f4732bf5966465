// The calibration pieces of quantize --match original, without a whole run:
// the drift-corrected target and its shrinkage against the objective they
// solve, and the Grams and cross Grams that SequentialCalib steps block by
// block against whole forward passes (bit for bit where the same sums are
// made). On stories260K and random matrices.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "calib/calib.hpp"
#include "calib/sequential.hpp"
#include "core/rng.hpp"
#include "io/tokenizer.hpp"
#include "linalg/blas.hpp"
#include "model/llama.hpp"
#include "quantize/quantize.hpp"
#include "require.hpp"

using namespace cortiq;
namespace fs = std::filesystem;

namespace {

const std::string kData = cortiq::test::shared_data().string();
const std::string kModel = kData + "/models/stories260K";
const std::string kCalib = kData + "/text/tinystories-calib.txt";

}  // namespace

class CalibGrams : public ::testing::Test {
  protected:
    void SetUp() override { REQUIRE_DATA_AT(kModel); }
};

// --match original: encoding W_t = W (C + cI) A⁻¹ in the damped metric A is the
// same problem as matching the original outputs, ‖W X_o − Ŵ X_c‖² + c‖Ŵ − W‖²:
// for any two candidates Ŵ the two objectives differ by the same amount, W_t
// does better than W on the original outputs, and without drift W_t = W.
TEST(DriftTarget, EncodingTheTargetMatchesTheOriginalOutputs) {
    const int64_t m = 7, n = 5, T = 200;
    Rng rng(3);
    auto randn = [&](int64_t r, int64_t c) {
        MatD a(r, c);
        for (auto& v : a.vec()) v = rng.normal();
        return a;
    };
    const MatD w = randn(m, n), x_o = randn(T, n);
    MatD x_c = x_o;  // the compressed model's inputs: drifted
    for (auto& v : x_c.vec()) v = 0.8 * v + 0.3 * rng.normal();
    MatD h = la::gemm(x_c, true, x_c, false), cross = la::gemm(x_o, true, x_c, false);
    for (auto& v : h.vec()) v /= T;
    for (auto& v : cross.vec()) v /= T;
    double c = 0;
    for (int64_t i = 0; i < n; ++i) c += 0.03 * h(i, i) / n;
    const MatD w_t = quant::drift_target(w, cross, h, c);
    auto objective = [&](const MatD& wh) {  // ‖W X_o − Ŵ X_c‖²/T + c‖Ŵ − W‖²
        const MatD y = la::gemm(x_o, false, w, true);
        const MatD yh = la::gemm(x_c, false, wh, true);
        double s = 0, d = 0;
        for (int64_t i = 0; i < y.size(); ++i)
            s += (y.data()[i] - yh.data()[i]) * (y.data()[i] - yh.data()[i]);
        for (int64_t i = 0; i < w.size(); ++i)
            d += (wh.data()[i] - w.data()[i]) * (wh.data()[i] - w.data()[i]);
        return s / T + c * d;
    };
    auto metric = [&](const MatD& wh) {  // tr((Ŵ − W_t) A (Ŵ − W_t)ᵀ)
        MatD e = wh, a = h;
        for (int64_t i = 0; i < e.size(); ++i) e.data()[i] -= w_t.data()[i];
        for (int64_t i = 0; i < n; ++i) a(i, i) += c;
        return la::frob_dot(la::gemm(e, false, a, false), e);
    };
    const MatD w1 = randn(m, n), w2 = randn(m, n);
    EXPECT_NEAR(objective(w1) - objective(w2), metric(w1) - metric(w2),
                1e-9 * std::abs(objective(w1)));
    // W_t minimises the objective; W, the uncorrected target, is off by metric(W) > 0
    EXPECT_NEAR(objective(w) - objective(w_t), metric(w), 1e-9 * objective(w));
    EXPECT_GT(metric(w), 0.02 * objective(w));
    // C = H: no drift, and no correction at all (not the products' rounding,
    // which depends on the BLAS's threads), so W_t = W bit for bit
    const MatD same = quant::drift_target(w, h, h, c);
    EXPECT_EQ(same.vec(), w.vec());
    const MatD none = quant::drift_step(w, h, h, c);
    for (double v : none.vec()) EXPECT_EQ(v, 0.0);
    // D = W_t − W
    const MatD d = quant::drift_step(w, cross, h, c);
    for (int64_t i = 0; i < w.size(); ++i)
        EXPECT_NEAR(d.data()[i], w_t.data()[i] - w.data()[i],
                    1e-12 * (1 + std::abs(w_t.data()[i])));
}

// The cross Gram of the original and the compressed model's inputs, stepped
// block by block, equals Σ x_o x_cᵀ / T from two whole forward passes (their
// hooks), after a layer is replaced and the states advance through it; with
// nothing replaced yet it is the Gram itself.
// Four windows of 64 tokens of tinystories-calib, tokenized for kModel.
static calib::CalibSet four_calib_windows() {
    const io::Tokenizer tok = io::Tokenizer::load(kModel);
    calib::CalibOptions co;
    co.samples = 4;
    co.seqlen = 64;
    std::ifstream f(kCalib);
    return calib::make_calib_set(tok, std::string(std::istreambuf_iterator<char>(f), {}), co,
                                 "tinystories-calib");
}

// grams_with_cross runs the compressed model's forward once for both: the
// same sums in the same order as grams() and cross_grams(), bit for bit, at
// every input of a layer after a weight was replaced and the states moved.
TEST_F(CalibGrams, GramsWithCrossEqualTheTwoPassesBitForBit) {
    model::Model m = model::Model::load(kModel);
    const model::Model orig = model::Model::load(kModel);
    const calib::CalibSet cs = four_calib_windows();
    calib::SequentialCalib states(m, cs, model::Device::cpu, &orig);
    MatF w = m.linear(0, "mlp.up_proj").w->dense();
    for (int64_t i = 0; i < w.size(); ++i) w.data()[i] *= (i % 3) ? 0.7f : -0.4f;
    m.linear(0, "mlp.up_proj").w = std::make_unique<model::DenseLinear>(std::move(w));
    states.weight_changed(0, "mlp.up_proj");
    states.advance(0);
    auto same = [](const MatD& a, const MatD& b) {
        return a.rows() == b.rows() && a.cols() == b.cols() && a.vec() == b.vec();
    };
    for (const char* input :
         {"self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj"}) {
        const auto all = states.grams_with_cross(1, input);
        const auto [h_fit, h_sel] = states.grams(1, input);
        const auto [c_fit, c_sel] = states.cross_grams(1, input);
        EXPECT_TRUE(same(all.h_fit, h_fit)) << input;
        EXPECT_TRUE(same(all.h_sel, h_sel)) << input;
        EXPECT_TRUE(same(all.cross_fit, c_fit)) << input;
        EXPECT_TRUE(same(all.cross_sel, c_sel)) << input;
        // the states differ from the original's after the replaced layer
        EXPECT_FALSE(same(all.h_fit, all.cross_fit)) << input;
    }
}

// On the CPU there is no device copy to hand to distillation: the release
// returns none and the states stay usable, bit for bit as before.
TEST_F(CalibGrams, ReleaseOnTheCpuKeepsTheStates) {
    model::Model m = model::Model::load(kModel);
    const model::Model orig = model::Model::load(kModel);
    calib::SequentialCalib states(m, four_calib_windows(), model::Device::cpu, &orig);
    const auto before = states.grams(0, "mlp.gate_proj");
    states.release_gpu();
    const auto after = states.grams(0, "mlp.gate_proj");
    EXPECT_EQ(before.first.vec(), after.first.vec());
    EXPECT_EQ(before.second.vec(), after.second.vec());
}

TEST_F(CalibGrams, CrossGramMatchesTwoForwardPasses) {
    model::Model m = model::Model::load(kModel);
    const model::Model orig = model::Model::load(kModel);
    const calib::CalibSet cs = four_calib_windows();
    calib::SequentialCalib states(m, cs, model::Device::cpu, &orig);
    auto rel = [](const MatD& a, const MatD& b) {  // ‖a − b‖_F / ‖b‖_F
        double num = 0, den = 0;
        for (int64_t i = 0; i < b.size(); ++i) {
            num += std::pow(a.data()[i] - b.data()[i], 2);
            den += std::pow(b.data()[i], 2);
        }
        return std::sqrt(num / den);
    };
    // nothing replaced yet: both models give the same inputs, and the cross
    // Gram is the Gram bit for bit (no drift, whatever the BLAS's threads)
    EXPECT_EQ(states.cross_grams(0, "self_attn.q_proj").first.vec(),
              states.grams(0, "self_attn.q_proj").first.vec());
    for (const char* lin : {"self_attn.q_proj", "self_attn.v_proj", "mlp.up_proj"}) {
        MatF w = m.linear(0, lin).w->dense();
        for (int64_t i = 0; i < w.size(); ++i) w.data()[i] *= (i % 3) ? 0.7f : -0.4f;
        m.linear(0, lin).w = std::make_unique<model::DenseLinear>(std::move(w));
        states.weight_changed(0, lin);
    }
    const auto [c0, c0_sel] = states.cross_grams(0, "self_attn.o_proj");
    states.advance(0);
    const auto [c1, c1_sel] = states.cross_grams(1, "mlp.gate_proj");
    // the same from whole forward passes of both models
    auto brute = [&](int64_t layer, std::string_view input, bool held_out) {
        const int64_t width =
            input == "self_attn.o_proj" ? m.config().q_dim() : m.config().hidden_size;
        calib::CrossGramAccumulator acc(width, width);
        for (const auto& win : held_out ? cs.sel : cs.fit) {
            std::vector<float> xo;
            const model::LinearInputHook keep = [&](int64_t l, std::string_view in, const float* x,
                                                    int64_t rows, int64_t cols) {
                if (l == layer && in == input) xo.assign(x, x + rows * cols);
            };
            const model::LinearInputHook pair = [&](int64_t l, std::string_view in, const float* x,
                                                    int64_t rows, int64_t) {
                if (l == layer && in == input) acc.add(xo.data(), x, rows);
            };
            model::ForwardOptions fo;
            fo.hook = &keep;
            orig.forward(win, fo);
            fo.hook = &pair;
            m.forward(win, fo);
        }
        return acc.mean();
    };
    for (auto [c, want, what] :
         {std::tuple{&c0, brute(0, "self_attn.o_proj", false), "layer 0 o_proj"},
          std::tuple{&c1, brute(1, "mlp.gate_proj", false), "layer 1 gate"},
          std::tuple{&c0_sel, brute(0, "self_attn.o_proj", true), "layer 0 o_proj, held out"},
          std::tuple{&c1_sel, brute(1, "mlp.gate_proj", true), "layer 1 gate, held out"}}) {
        ASSERT_EQ(c->rows(), want.rows()) << what;
        EXPECT_LT(rel(*c, want), 1e-5) << what;
    }
    // and it is not the plain Gram any more
    EXPECT_GT(rel(c1, states.grams(1, "mlp.gate_proj").first), 1e-2);
}

// The correction's shrinkage α minimises the held-out objective over [0, 1]:
// a fit set smaller than the input width gives a correction that partly fits
// its noise (α well below 1, and better than α = 1 on held-out data); a large
// fit set keeps nearly all of it.
TEST(DriftTarget, ShrinkageTrustsTheCorrectionAsFarAsHeldOutDataSupportsIt) {
    const int64_t m = 6, n = 24;
    Rng rng(5);
    const MatD mix = [&] {  // the drift: x_c = x_o M + noise
        MatD a(n, n);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) a(i, j) = (i == j ? 0.7 : 0.0) + 0.05 * rng.normal();
        return a;
    }();
    auto draw = [&](int64_t T, MatD& h, MatD& cross) {
        MatD x_o(T, n);
        for (auto& v : x_o.vec()) v = rng.normal();
        MatD x_c = la::gemm(x_o, false, mix, false);
        for (auto& v : x_c.vec()) v += 0.4 * rng.normal();
        h = la::gemm(x_c, true, x_c, false);
        cross = la::gemm(x_o, true, x_c, false);
        for (auto& v : h.vec()) v /= T;
        for (auto& v : cross.vec()) v /= T;
    };
    MatD w(m, n);
    for (auto& v : w.vec()) v = rng.normal();
    MatD h_sel, c_sel;
    draw(20000, h_sel, c_sel);
    auto held_out = [&](const MatD& wh) {  // ‖W X_o − Ŵ X_c‖²/T up to a constant
        return la::frob_dot(la::gemm(wh, false, h_sel, false), wh) -
               2 * la::frob_dot(la::gemm(w, false, c_sel, false), wh);
    };
    for (const int64_t t_fit : {int64_t{12}, int64_t{20000}}) {
        MatD h, cross;
        draw(t_fit, h, cross);
        const double c = 0.01 * la::trace(h) / n;
        const MatD d = quant::drift_step(w, cross, h, c);
        const double alpha = quant::drift_shrinkage(w, d, c_sel, h_sel);
        auto with = [&](double a) {
            MatD x = w;
            for (int64_t i = 0; i < x.size(); ++i) x.data()[i] += a * d.data()[i];
            return held_out(x);
        };
        EXPECT_GE(alpha, 0.0);
        EXPECT_LE(alpha, 1.0);
        for (double a : {0.0, 0.25, 0.5, 0.75, 1.0})
            EXPECT_LE(with(alpha), with(a) + 1e-12 * std::abs(with(a))) << t_fit << " " << a;
        if (t_fit < n)
            EXPECT_LT(alpha, 0.9) << "a fit set of " << t_fit << " rows";
        else
            EXPECT_GT(alpha, 0.95) << "a fit set of " << t_fit << " rows";
    }
}
