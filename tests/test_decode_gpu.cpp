// Decoding on the GPU as `cortiq generate` runs it: the decode step as a
// replayed CUDA graph against the same kernels launched one by one, the fp16
// KV cache against the float32 one, several sequences decoded together
// against each alone, and the dense fp16 runtime against the float32 one.
// Every test skips without a GPU (or the shared data).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "forward_reference.hpp"
#include "gpu_skip.hpp"
#include "model/gpu_model.hpp"
#include "model/llama.hpp"
#include "quantize/quantize.hpp"
#include "quick_quantize.hpp"

using namespace cortiq;
using namespace cortiq::test;

namespace {

// fp16 keeps 11 significant bits: a cached key or value is off by at most
// u = 2^-11 of itself. A layer's attention output is a convex combination of
// values (off by ≤ u) weighted by softmax(q·k/√d), whose scores move by ≤
// u·|q·k|/√d; on these models the scores stay below 16 in magnitude, so a
// layer's output moves by ≤ u·(1 + 2·16) relative. Summed over the layers
// (the residual stream adds them), the logits' relative change is bounded by
// u·33·L; the test allows that bound.
double f16_cache_bound(int64_t layers) {
    return std::ldexp(1.0, -11) * 33.0 * static_cast<double>(layers);
}
// Up to 16 rows a packed layer gives each row the bits it gives alone
// (test_blr_linear_gpu.cpp), but the float head and, past 16 rows, the batch
// path (activations rounded to fp16 for the tensor cores) do not: each
// layer's output stays within the packed layers'
// GPU-against-CPU bound (test_blr_linear_gpu.cpp's kLayerTol, 1e-3) of the
// other path's, and the residual stream adds the layers' differences, so the
// logits of an L-layer model stay within L·kLayerTol (as f16_cache_bound
// sums its layers).
constexpr double kPackedLayerTol = 1e-3;
double packed_rows_bound(int64_t layers) {
    return kPackedLayerTol * static_cast<double>(layers);
}
// Float layers: cuBLAS picks other kernels for other row counts; float32
// rounding in other orders only (test_forward_gpu.cpp's kCacheTol).
constexpr double kFloatRowsTol = 1e-5;
// Dense fp16 weights and inputs against float32: 2^-11 per weight and per
// input, sums in float32; 1e-2 of the logits is about 20× that rounding
// over these models' depths, and a wrong weight gives O(1).
constexpr double kF16WeightsTol = 1e-2;

double rel_diff(const MatF& a, const MatF& b) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < a.size(); ++i) {
        const double d = double{a.data()[i]} - b.data()[i];
        num += d * d;
        den += double{b.data()[i]} * b.data()[i];
    }
    return std::sqrt(num / den);
}

int32_t argmax(const MatF& l, int64_t row = 0) {
    const float* p = l.data() + row * l.cols();
    return static_cast<int32_t>(std::max_element(p, p + l.cols()) - p);
}

fs::path model_path(const std::string& name) {
    return name == "tiny-qwen35" ? kGolden / name : kData / "models" / name;
}

// A prompt of n ids from a fixed generator (the ids below the vocabulary).
std::vector<int32_t> prompt_ids(int64_t n, int64_t vocab, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> p;
    for (int64_t i = 0; i < n; ++i)
        p.push_back(static_cast<int32_t>(rng.uniform() * static_cast<double>(vocab - 1)) + 1);
    return p;
}

// Greedy decode of `steps` tokens after `prompt`, every step's logits kept;
// with `forced`, those tokens are fed instead of the greedy ones (the same
// inputs for two runtimes).
std::vector<MatF> decode_logits(model::GpuModel& gm, const std::vector<int32_t>& prompt,
                                int64_t steps, const std::vector<int32_t>* forced = nullptr) {
    gm.reset_cache(static_cast<int64_t>(prompt.size()) + steps + 1);
    std::vector<MatF> out;
    out.push_back(gm.forward_cached(prompt, true));
    for (int64_t t = 0; t < steps; ++t) {
        const int32_t next = forced ? (*forced)[static_cast<size_t>(t)] : argmax(out.back());
        const std::vector<int32_t> one{next};
        out.push_back(gm.forward_cached(one, true));
    }
    return out;
}

std::vector<int32_t> greedy_of(const std::vector<MatF>& logits) {
    std::vector<int32_t> ids;
    for (const MatF& l : logits) ids.push_back(argmax(l));
    return ids;
}

class DecodeGpu : public ::testing::TestWithParam<std::string> {};

// The graph and the kernels one by one run the same kernels with the same
// grids (the attention grid from the step's size class in both): the same
// bits, at contexts that cross several size classes (every 128 positions).
TEST_P(DecodeGpu, GraphStepEqualsKernelsLaunchedOneByOne) {
    REQUIRE_GPU();
    REQUIRE_DATA_AT(model_path(GetParam()));
    const auto m = model::Model::load(model_path(GetParam()).string());
    for (const model::KvFormat kv : {model::KvFormat::f32, model::KvFormat::f16}) {
        model::GpuOptions with, without;
        with.kv = without.kv = kv;
        without.graphs = false;
        model::GpuModel g(m, with), e(m, without);
        const auto prompt = prompt_ids(20, m.config().vocab_size, 3);
        const auto a = decode_logits(g, prompt, 300);
        const auto b = decode_logits(e, prompt, 300);
        ASSERT_EQ(a.size(), b.size());
        for (size_t t = 0; t < a.size(); ++t) ASSERT_EQ(a[t].vec(), b[t].vec()) << "step " << t;
        EXPECT_GE(g.graph_captures(), 3);  // positions 20..320: size classes 1, 2 and 3
        EXPECT_GE(g.graph_replays(), 290);
        EXPECT_EQ(e.graph_replays(), 0);
    }
}

// The fp16 cache against the float32 one on the same inputs: every step's
// logits within the bound from fp16 rounding; the greedy token the same
// wherever the float32 logits' top-two margin exceeds twice the step's
// largest logit change (where it cannot flip).
TEST_P(DecodeGpu, F16CacheStaysWithinTheRoundingBoundOfF32) {
    REQUIRE_GPU();
    REQUIRE_DATA_AT(model_path(GetParam()));
    const auto m = model::Model::load(model_path(GetParam()).string());
    model::GpuOptions o32, o16;
    o32.kv = model::KvFormat::f32;
    o16.kv = model::KvFormat::f16;
    model::GpuModel g32(m, o32), g16(m, o16);
    const auto prompt = prompt_ids(24, m.config().vocab_size, 5);
    const auto ref = decode_logits(g32, prompt, 300);
    const auto fed = greedy_of(ref);
    const auto got = decode_logits(g16, prompt, 300, &fed);
    const double bound = f16_cache_bound(m.config().num_layers);
    double worst = 0;
    int64_t kept = 0, decisive = 0;
    for (size_t t = 0; t < ref.size(); ++t) {
        const double e = rel_diff(got[t], ref[t]);
        worst = std::max(worst, e);
        EXPECT_LE(e, bound) << "step " << t;
        std::vector<float> sorted = ref[t].vec();
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
        double change = 0;
        for (int64_t i = 0; i < ref[t].size(); ++i)
            change = std::max(change, std::fabs(double{got[t].data()[i]} - ref[t].data()[i]));
        if (sorted[0] - sorted[1] > 2 * change) {
            ++decisive;
            kept += argmax(got[t]) == argmax(ref[t]);
        }
    }
    EXPECT_EQ(kept, decisive);
    // A cache that is not read at all (or read as float32) would change
    // nothing; fp16 rounding must show.
    EXPECT_GT(worst, 0.0);
    RecordProperty("worst_relative_change", std::to_string(worst));
}

// Four prompts of different lengths decoded together (one decode_step a
// token) against each decoded alone through its own cache: the same logits
// within the bound of the kernels' row counts, greedy tokens fed alike.
TEST_P(DecodeGpu, SequencesDecodedTogetherMatchEachAlone) {
    REQUIRE_GPU();
    REQUIRE_DATA_AT(model_path(GetParam()));
    const auto m = model::Model::load(model_path(GetParam()).string());
    const int64_t vocab = m.config().vocab_size, steps = 40;
    for (const int64_t B : {2, 4}) {
        model::GpuModel together(m), alone(m);
        std::vector<std::vector<int32_t>> prompts;
        for (int64_t s = 0; s < B; ++s) prompts.push_back(prompt_ids(5 + 7 * s, vocab, 11 + s));
        // each alone first: its greedy tokens are then fed to the batch
        std::vector<std::vector<MatF>> single;
        for (const auto& p : prompts) single.push_back(decode_logits(alone, p, steps));
        together.reset_cache(128, B);
        for (int64_t s = 0; s < B; ++s) {
            const MatF l = together.forward_cached(prompts[static_cast<size_t>(s)], true, s);
            EXPECT_LE(rel_diff(l, single[static_cast<size_t>(s)][0]), kFloatRowsTol);
        }
        const double tol = kFloatRowsTol;  // float models (the packed one: below)
        for (int64_t t = 0; t < steps; ++t) {
            std::vector<int32_t> next;
            for (int64_t s = 0; s < B; ++s)
                next.push_back(argmax(single[static_cast<size_t>(s)][static_cast<size_t>(t)]));
            const MatF l = together.decode_step(next);
            ASSERT_EQ(l.rows(), B);
            for (int64_t s = 0; s < B; ++s) {
                MatF row(1, vocab);
                std::copy(l.data() + s * vocab, l.data() + (s + 1) * vocab, row.data());
                EXPECT_LE(rel_diff(row, single[static_cast<size_t>(s)][static_cast<size_t>(t + 1)]),
                          tol)
                    << "B " << B << " sequence " << s << " step " << t;
            }
        }
        for (int64_t s = 0; s < B; ++s)
            EXPECT_EQ(together.cache_length(s),
                      static_cast<int64_t>(prompts[static_cast<size_t>(s)].size()) + steps);
    }
}

// The dense fp16 runtime (the packed one's baseline) against float32
// weights: logits within fp16 rounding; its weights take half the bytes.
TEST_P(DecodeGpu, DenseF16WeightsAgreeWithF32) {
    REQUIRE_GPU();
    REQUIRE_DATA_AT(model_path(GetParam()));
    const auto m = model::Model::load(model_path(GetParam()).string());
    model::GpuOptions o16;
    o16.weights = model::WeightFormat::f16;
    model::GpuModel g32(m), g16(m, o16);
    const auto prompt = prompt_ids(48, m.config().vocab_size, 9);
    EXPECT_LE(rel_diff(g16.forward(prompt), g32.forward(prompt)), kF16WeightsTol);
    const auto a = decode_logits(g32, prompt, 16);
    const auto fed = greedy_of(a);
    const auto b = decode_logits(g16, prompt, 16, &fed);
    for (size_t t = 0; t < a.size(); ++t) EXPECT_LE(rel_diff(b[t], a[t]), kF16WeightsTol);
    EXPECT_LT(g16.weight_bytes(), 0.6 * g32.weight_bytes());
}

// The fp16 head against the float32 one on the same hidden states (every
// kernel before the head is the same): logit j = x · w_j, x the final norm's
// output, with x and w_j rounded to fp16 (2^-11 each) and the products summed
// in float32 in either GEMM (n·2^-24 each), so |Δ_j| ≤ (2^-10 + 2^-20 +
// n·2^-23) Σ_i |x_i w_ji| ≤ (…) ‖x‖ ‖w_j‖, and ‖x‖ ≤ √n·G (the normed row has
// RMS below 1; G: the largest gain of the final norm, w or 1 + w). A head read
// from the wrong rows or a wrong table is off by O(1) per logit.
TEST_P(DecodeGpu, F16HeadStaysWithinItsRoundingBound) {
    REQUIRE_GPU();
    REQUIRE_DATA_AT(model_path(GetParam()));
    const auto m = model::Model::load(model_path(GetParam()).string());
    const int64_t n = m.config().hidden_size, vocab = m.config().vocab_size;
    const MatF head = m.head_shares_embedding() ? m.embedding().dense() : m.lm_head().w->dense();
    double gain = 0;
    for (const float w : m.final_norm())
        gain = std::max({gain, std::fabs(double{w}), std::fabs(1.0 + w)});
    std::vector<double> row_norm(static_cast<size_t>(vocab));
    for (int64_t j = 0; j < vocab; ++j) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += double{head(j, i)} * head(j, i);
        row_norm[static_cast<size_t>(j)] = std::sqrt(s);
    }
    const double factor = (std::ldexp(1.0, -10) + std::ldexp(1.0, -20) +
                           static_cast<double>(n) * std::ldexp(1.0, -23)) *
                          std::sqrt(static_cast<double>(n)) * gain;
    model::GpuOptions o16;
    o16.head = model::HeadFormat::f16;
    model::GpuModel g32(m), g16(m, o16);
    const auto prompt = prompt_ids(24, vocab, 5);
    const auto a = decode_logits(g32, prompt, 40);
    const auto fed = greedy_of(a);
    const auto b = decode_logits(g16, prompt, 40, &fed);
    double worst = 0, moved = 0;
    for (size_t t = 0; t < a.size(); ++t)
        for (int64_t j = 0; j < vocab; ++j) {
            const double d = std::fabs(double{b[t](0, j)} - a[t](0, j));
            moved = std::max(moved, d);
            worst = std::max(worst, d / (factor * row_norm[static_cast<size_t>(j)]));
        }
    std::printf("%s: fp16 head moves a logit by at most %.3g, %.3g of its bound\n",
                GetParam().c_str(), moved, worst);
    EXPECT_LE(worst, 1.0);
    EXPECT_GT(moved, 0.0);  // the fp16 head is in use
    // an untied head halves; a tied one is an fp16 copy beside the table
    if (!m.head_shares_embedding())
        EXPECT_EQ(g32.weight_bytes() - g16.weight_bytes(), 2 * vocab * n);
    else
        EXPECT_EQ(g16.weight_bytes() - g32.weight_bytes(), 2 * vocab * n);
}

INSTANTIATE_TEST_SUITE_P(Models, DecodeGpu,
                         ::testing::Values("stories260K", "tiny-llama-6m", "tiny-qwen35"),
                         [](const auto& info) {
                             std::string s = info.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

// The packed runtime: the same properties on a compressed stories260K.
TEST(DecodeGpuPacked, GraphFp16CacheAndBatchOnAPackedModel) {
    REQUIRE_GPU();
    REQUIRE_DATA();
    const fs::path d =
        fs::temp_directory_path() / ("cortiq_decode_packed_" + std::to_string(getpid()));
    fs::create_directories(d);
    const quant::QuantizeOptions o = quick_stories_options(d / "q.safetensors");
    quant::quantize(o);
    const auto m = model::Model::load(o.out_path);
    const auto prompt = prompt_ids(20, m.config().vocab_size, 21);
    // graph against kernels one by one: the same bits
    model::GpuOptions with, without;
    without.graphs = false;
    model::GpuModel g(m, with), e(m, without);
    const auto a = decode_logits(g, prompt, 150), b = decode_logits(e, prompt, 150);
    for (size_t t = 0; t < a.size(); ++t) ASSERT_EQ(a[t].vec(), b[t].vec()) << "step " << t;
    EXPECT_GE(g.graph_replays(), 140);
    // fp16 cache within its bound
    model::GpuOptions o16;
    o16.kv = model::KvFormat::f16;
    model::GpuModel h(m, o16);
    const auto fed = greedy_of(a);
    const auto c = decode_logits(h, prompt, 150, &fed);
    for (size_t t = 0; t < a.size(); ++t)
        EXPECT_LE(rel_diff(c[t], a[t]), f16_cache_bound(m.config().num_layers)) << "step " << t;
    // the dense fp16 runtime made from the bits (dequantised on the device)
    model::GpuOptions w16;
    w16.weights = model::WeightFormat::f16;
    model::GpuModel f(m, w16);
    EXPECT_LE(rel_diff(f.forward(prompt), g.forward(prompt)), kF16WeightsTol);
    EXPECT_GT(f.weight_bytes(), 2 * g.weight_bytes());
    // 16 sequences together against each alone
    const int64_t B = 16, vocab = m.config().vocab_size;
    std::vector<std::vector<MatF>> single;
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t s = 0; s < B; ++s) {
        prompts.push_back(prompt_ids(3 + s, vocab, 100 + s));
        single.push_back(decode_logits(e, prompts.back(), 12));
    }
    g.reset_cache(40, B);
    for (int64_t s = 0; s < B; ++s) g.forward_cached(prompts[static_cast<size_t>(s)], true, s);
    for (int64_t t = 0; t < 12; ++t) {
        std::vector<int32_t> next;
        for (int64_t s = 0; s < B; ++s)
            next.push_back(argmax(single[static_cast<size_t>(s)][static_cast<size_t>(t)]));
        const MatF l = g.decode_step(next);
        for (int64_t s = 0; s < B; ++s) {
            MatF row(1, vocab);
            std::copy(l.data() + s * vocab, l.data() + (s + 1) * vocab, row.data());
            EXPECT_LE(rel_diff(row, single[static_cast<size_t>(s)][static_cast<size_t>(t + 1)]),
                      packed_rows_bound(m.config().num_layers))
                << "sequence " << s << " step " << t;
        }
    }
    fs::remove_all(d);
}

}  // namespace
