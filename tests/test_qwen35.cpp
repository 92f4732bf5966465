// Qwen3.5 (hybrid Gated DeltaNet + gated attention) on the CPU: the config,
// logits of the tiny random model of tests/golden/tiny-qwen35 against
// transformers 5.17, the delta rule's step form against its chunkwise form,
// cached decoding against the full pass, and both checkpoint layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli_run.hpp"
#include "core/rng.hpp"
#include "eval/ppl.hpp"
#include "forward_reference.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "io/tokenizer.hpp"
#include "model/delta_ops.hpp"
#include "model/generate.hpp"
#include "model/llama.hpp"
#include "qwen35_golden.hpp"
#include "require.hpp"
#include "test_files.hpp"

using namespace cortiq;
using namespace cortiq::test;

namespace {

const fs::path kTiny = kGolden / "tiny-qwen35";
// The small model trained on public-domain text (scripts/golden/train_qwen35.py),
// whose perplexities mean something.
const fs::path kTrained = kGolden / "tiny-qwen35-trained";

// Tolerance against transformers: float32 here and there, different summation
// orders. transformers' own float32 logits differ from its float64 ones by
// 1.7e-6 of the largest logit on this model; 1e-4 leaves a wide margin and is
// far below any real mistake (a wrong norm, gate or decay moves logits by
// whole units).
constexpr double kGoldenTol = 1e-4;

// Max |a − b| over the kept rows, and max |b| (the logit scale).
std::pair<double, double> compare(const model::Model& m, const Golden35& g) {
    return golden_diff(g, [&](const std::vector<int32_t>& s) { return m.forward(s); });
}

TEST(Qwen35, ConfigOfThePublishedLayout) {
    const auto c = io::ModelConfig::load(kTiny.string());
    EXPECT_EQ(c.model_type, "qwen3_5_text");
    ASSERT_EQ(c.num_layers, 4);
    ASSERT_TRUE(c.hybrid());
    for (int64_t l = 0; l < 3; ++l) EXPECT_TRUE(c.is_delta(l)) << l;
    EXPECT_FALSE(c.is_delta(3));
    EXPECT_EQ(c.delta.k_heads, 4);
    EXPECT_EQ(c.delta.v_heads, 8);
    EXPECT_EQ(c.delta.conv_dim(), 2 * 4 * 16 + 8 * 16);
    EXPECT_EQ(c.delta.conv_kernel, 4);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.rotary_dim(), 8);  // partial_rotary_factor 0.25
    EXPECT_EQ(c.q_proj_dim(), 2 * 4 * 32);
    EXPECT_TRUE(c.attn_gate && c.norm_offset && c.qk_norm && c.tie_word_embeddings);
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
    const auto ck = io::Checkpoint::open(kTiny.string());
    auto r = c;
    io::resolve_prefix(r, ck);
    EXPECT_EQ(r.prefix, "model.language_model.");
    EXPECT_NO_THROW(io::check_checkpoint(r, ck));
    EXPECT_NE(c.summary().find("3 Gated DeltaNet layers"), std::string::npos) << c.summary();
}

TEST(Qwen35, ConfigDefaultsAndErrors) {
    // qwen3_5_text without layer_types: full_attention_interval (default 4)
    nlohmann::json j = {{"model_type", "qwen3_5_text"},
                        {"hidden_size", 64},
                        {"intermediate_size", 96},
                        {"num_hidden_layers", 8},
                        {"num_attention_heads", 2},
                        {"num_key_value_heads", 1},
                        {"vocab_size", 100},
                        {"full_attention_interval", 2}};
    auto c = io::ModelConfig::from_json(j, "test");
    for (int64_t l = 0; l < 8; ++l) EXPECT_EQ(c.is_delta(l), l % 2 == 0) << l;
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.rotary_dim(), 64);
    EXPECT_EQ(c.delta.v_heads, 32);
    j["layer_types"] = {"linear_attention", "sliding_attention"};
    EXPECT_THROW(io::ModelConfig::from_json(j, "test"), Error);  // 2 types for 8 layers
    j["layer_types"] = std::vector<std::string>(8, "mamba");
    EXPECT_THROW(io::ModelConfig::from_json(j, "test"), Error);
    j.erase("layer_types");
    j["linear_num_value_heads"] = 6;  // not a multiple of 16 key heads
    EXPECT_THROW(io::ModelConfig::from_json(j, "test"), Error);
    EXPECT_THROW(io::ModelConfig::from_json({{"model_type", "qwen3_5"}}, "test"), Error);
}

TEST(Qwen35, LogitsMatchTransformers) {
    const auto g = load_golden35(kTiny);
    const auto m = model::Model::load(kTiny.string());
    const auto [worst, scale] = compare(m, g);
    std::printf("tiny-qwen35: max |logit − transformers| %.3g, max |logit| %.3g (rel %.3g)\n",
                worst, scale, worst / scale);
    EXPECT_GT(scale, 1.0);
    EXPECT_LT(worst, kGoldenTol * scale);
}

// The trained model: logits of held-out text against transformers, and the
// plain-protocol perplexity of the first 4 windows of each held-out text
// against transformers' (ref_ppl.json, float32 from the same BF16 weights).
// A mean NLL that agrees to 1e-4 relative moves the perplexity by about
// 4e-4 relative; the two runtimes agree far closer (~1e-8) on this model.
void check_trained_model(const fs::path& dir) {
    SCOPED_TRACE(dir.filename().string());
    const auto g = load_golden35(dir);
    const auto m = model::Model::load(dir.string());
    const auto [worst, scale] = compare(m, g);
    std::printf("%s: max |logit − transformers| %.3g, max |logit| %.3g (rel %.3g)\n",
                dir.filename().c_str(), worst, scale, worst / scale);
    EXPECT_GT(scale, 1.0);
    EXPECT_LT(worst, kGoldenTol * scale);
    REQUIRE_DATA_AT(kData / "text");
    std::ifstream in(dir / "ref_ppl.json");
    const auto ref = nlohmann::json::parse(in);
    const auto tok = io::Tokenizer::load(dir.string());
    eval::PplOptions opt;
    opt.progress = false;
    opt.max_windows = 4;
    for (const char* text : {"tinystories-valid", "austen-heldout", "kjv-heldout"}) {
        std::ifstream f(kData / "text" / (std::string(text) + ".txt"), std::ios::binary);
        const std::string body((std::istreambuf_iterator<char>(f)),
                               std::istreambuf_iterator<char>());
        const auto ids = tok.encode(body, false);
        const double want = ref.at(text).at("ppl_4").get<double>();
        const double got = eval::perplexity(m, ids, opt).ppl;
        std::printf("%s: ppl %.6f, transformers %.6f\n", text, got, want);
        EXPECT_NEAR(got, want, 1e-4 * want) << text;
        EXPECT_LT(got, 200.0) << "a trained model, not a random one";
    }
}

TEST(Qwen35, TrainedModelMatchesTransformersLogitsAndPerplexity) {
    check_trained_model(kTrained);
}

// tiny-qwen35-6m: the 6.7 M model of the README's tables (scripts/golden/train_qwen35.py
// --preset 6m), held to the same agreement.
TEST(Qwen35, SixMillionModelMatchesTransformersLogitsAndPerplexity) {
    check_trained_model(kGolden / "tiny-qwen35-6m");
}

TEST(Qwen35, CausalLmLayoutGivesTheSameLogits) {
    // The text model alone under model. with a flat qwen3_5_text config (the
    // layout of transformers 4.x's Qwen3_5ForCausalLM).
    const auto dir = scratch_dir("cortiq_q35_", "causal");
    const auto ck = io::Checkpoint::open(kTiny.string());
    io::SafetensorsWriter wr;
    const std::string pre = "model.language_model.";
    for (const auto& name : ck.names()) {
        if (name.rfind(pre, 0) != 0) continue;  // the vision tower and mtp.* go
        const auto& t = ck.info(name);
        wr.add("model." + name.substr(pre.size()), t.dtype, t.shape, ck.bytes(name));
    }
    wr.write((dir / "model.safetensors").string());
    auto cfg = nlohmann::json::parse(slurp(kTiny / "config.json"));
    auto text = cfg.at("text_config");
    text["model_type"] = "qwen3_5_text";
    std::ofstream(dir / "config.json") << text.dump();
    const auto a = model::Model::load(kTiny.string());
    const auto b = model::Model::load(dir.string());
    EXPECT_EQ(b.config().prefix, "model.");
    const auto g = load_golden35(kTiny);
    const MatF la = a.forward(g.seqs[1]), lb = b.forward(g.seqs[1]);
    EXPECT_EQ(la.vec(), lb.vec());
    fs::remove_all(dir);
}

TEST(Qwen35, CachedDecodingMatchesTheFullPass) {
    // A prefill across a chunk boundary (70 tokens: chunks of 64 and 6), one
    // token at a time (the step form), then a chunk of 5 on the cached state.
    const auto g = load_golden35(kTiny);
    const auto m = model::Model::load(kTiny.string());
    const auto& seq = g.seqs[0];
    const int64_t T = static_cast<int64_t>(seq.size()), V = m.config().vocab_size;
    const MatF full = m.forward(seq);
    auto cache = m.make_cache(T);
    std::span<const int32_t> all(seq);
    std::vector<MatF> parts;
    parts.push_back(m.forward(all.subspan(0, 70), cache));
    for (int64_t t = 70; t < T - 5; ++t) parts.push_back(m.forward(all.subspan(t, 1), cache));
    parts.push_back(m.forward(all.subspan(T - 5, 5), cache));
    int64_t row = 0;
    double worst = 0;
    for (const auto& p : parts)
        for (int64_t i = 0; i < p.rows(); ++i, ++row)
            worst = std::max(worst, rel_err(p.row(i), full.row(row), V));
    EXPECT_EQ(row, T);
    std::printf("cached decoding vs full pass: max rel err per row %.3g\n", worst);
    EXPECT_LT(worst, 1e-5);
    // clear() restarts from zero states
    cache.clear();
    const MatF again = m.forward(all.subspan(0, 3), cache);
    EXPECT_LT(rel_err(again.data(), full.data(), 3 * V), 1e-6);
}

TEST(Qwen35, GreedyGenerationMatchesFullPasses) {
    // generate() decodes through the cache (prefill, then the step form); each
    // of its tokens must be the argmax of a full pass over everything before it.
    const auto g = load_golden35(kTiny);
    const auto m = model::Model::load(kTiny.string());
    const std::vector<int32_t> prompt(g.seqs[1].begin(), g.seqs[1].begin() + 5);
    model::GenerateOptions go;
    go.max_tokens = 12;
    const auto out = model::generate(m, prompt, go);
    ASSERT_EQ(out.size(), 12u);
    std::vector<int32_t> ids = prompt;
    for (int32_t tok : out) {
        const MatF l = m.forward(ids);
        const float* last = l.row(l.rows() - 1);
        EXPECT_EQ(tok, std::max_element(last, last + l.cols()) - last) << "after " << ids.size();
        ids.push_back(tok);
    }
    const auto cli = run_cli("generate " + kTiny.string() +
                             " --prompt \"Once upon a time\" --max-tokens 8 --json");
    EXPECT_EQ(cli.code, 0) << cli.out;
    EXPECT_NE(cli.out.find("\"generated_tokens\":8"), std::string::npos) << cli.out;
}

// Random inputs of the delta rule: L2-normalised q, k; decays in (−1, 0].
struct RuleInputs {
    std::vector<float> qkv, g, beta;
    model::DeltaRule r;
};

RuleInputs random_rule(int64_t T, int64_t kh, int64_t vh, int64_t dk, int64_t dv, uint64_t seed) {
    RuleInputs in;
    Rng rng(seed);
    const int64_t ld = 2 * kh * dk + vh * dv;
    in.qkv.resize(static_cast<size_t>(T * ld));
    for (auto& x : in.qkv) x = static_cast<float>(rng.normal());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < 2 * kh; ++h) {
            float* p = in.qkv.data() + t * ld + h * dk;
            double ss = 0;
            for (int64_t i = 0; i < dk; ++i) ss += p[i] * p[i];
            for (int64_t i = 0; i < dk; ++i) p[i] = static_cast<float>(p[i] / std::sqrt(ss));
        }
    in.g.resize(static_cast<size_t>(T * vh));
    in.beta.resize(in.g.size());
    for (auto& x : in.g) x = static_cast<float>(-0.5 * rng.uniform());
    for (auto& x : in.beta) x = static_cast<float>(rng.uniform());
    in.r = {in.qkv.data(),
            in.qkv.data() + kh * dk,
            in.qkv.data() + 2 * kh * dk,
            in.g.data(),
            in.beta.data(),
            T,
            ld,
            ld,
            kh,
            vh,
            dk,
            dv};
    return in;
}

TEST(Qwen35, DeltaRuleStepFormMatchesChunkForm) {
    // 150 tokens: two full chunks of 64 and a partial one; 2 key heads serving
    // 4 value heads; a non-zero starting state.
    const int64_t T = 150, kh = 2, vh = 4, dk = 16, dv = 8;
    const auto in = random_rule(T, kh, vh, dk, dv, 11);
    Rng rng(5);
    std::vector<float> s0(static_cast<size_t>(vh * dk * dv));
    for (auto& x : s0) x = static_cast<float>(0.3 * rng.normal());
    auto s_step = s0, s_chunk = s0;
    std::vector<float> o_step(static_cast<size_t>(T * vh * dv)), o_chunk(o_step.size());
    model::gated_delta_recurrent(in.r, s_step.data(), vh * dv, o_step.data());
    model::gated_delta_chunked(in.r, 64, s_chunk.data(), vh * dv, o_chunk.data());
    const double eo = rel_err(o_chunk.data(), o_step.data(), T * vh * dv);
    const double es = rel_err(s_chunk.data(), s_step.data(), vh * dk * dv);
    std::printf("delta rule chunk vs step: output rel err %.3g, state rel err %.3g\n", eo, es);
    EXPECT_LT(eo, 1e-5);
    EXPECT_LT(es, 1e-5);
    // chunks of 1 are the step form's arithmetic in another order
    auto s1 = s0;
    std::vector<float> o1(o_step.size());
    model::gated_delta_chunked(in.r, 1, s1.data(), vh * dv, o1.data());
    EXPECT_LT(rel_err(o1.data(), o_step.data(), T * vh * dv), 1e-5);
}

TEST(Qwen35, ConvolutionStateCarriesAcrossCalls) {
    // One call over 9 rows equals calls of 4, 1 and 4 rows sharing the state.
    const int64_t T = 9, C = 5, K = 4;
    Rng rng(3);
    std::vector<float> x(static_cast<size_t>(T * C)), w(static_cast<size_t>(C * K));
    for (auto& v : x) v = static_cast<float>(rng.normal());
    for (auto& v : w) v = static_cast<float>(rng.normal());
    std::vector<float> st(static_cast<size_t>((K - 1) * C), 0.0f), y(x.size());
    model::causal_conv1d_silu(x.data(), T, C, w.data(), K, st.data(), y.data());
    std::vector<float> st2((K - 1) * C, 0.0f), y2(x.size());
    int64_t t0 = 0;
    for (int64_t n : {4, 1, 4}) {
        model::causal_conv1d_silu(x.data() + t0 * C, n, C, w.data(), K, st2.data(),
                                  y2.data() + t0 * C);
        t0 += n;
    }
    EXPECT_EQ(y, y2);
    EXPECT_EQ(st, st2);
    // the first row sees only itself: silu(w[c, K−1] x[0, c])
    for (int64_t c = 0; c < C; ++c) {
        const float a = w[c * K + K - 1] * x[c];
        EXPECT_FLOAT_EQ(y[c], a / (1 + std::exp(-a)));
    }
}

}  // namespace
