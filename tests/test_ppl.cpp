// Perplexity by the plain protocol: the window arithmetic on token ids, and
// the reference figures of shared/data/README.md (transformers, FP32) for
// every model × held-out text, within 0.1 %.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "eval/ppl.hpp"
#include "io/tokenizer.hpp"
#include "model/llama.hpp"
#include "model/ops.hpp"
#include "require.hpp"

namespace fs = std::filesystem;
using namespace cortiq;

namespace {

const fs::path kData = cortiq::test::shared_data();

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST(Ppl, WindowNllIsCrossEntropy) {
    MatF logits(3, 4);
    for (int64_t i = 0; i < logits.size(); ++i) logits.data()[i] = 0.1f * static_cast<float>(i % 5);
    const std::vector<int32_t> toks = {0, 3, 1};
    double expect = 0;
    for (int64_t i = 0; i < 2; ++i) {
        double s = 0;
        for (int64_t j = 0; j < 4; ++j) s += std::exp(static_cast<double>(logits(i, j)));
        expect += std::log(s) - logits(i, toks[i + 1]);
    }
    EXPECT_NEAR(eval::window_nll(logits, toks), expect, 1e-6);  // exp in float
}

TEST(Ppl, Windows) {
    REQUIRE_DATA_AT(kData / "models");
    const auto m = model::Model::load((kData / "models/stories260K").string());
    std::vector<int32_t> ids;
    for (int i = 0; i < 200; ++i) ids.push_back(3 + (i * 37) % 500);
    eval::PplOptions opt;
    opt.ctx = 64;
    opt.progress = false;
    const auto r = eval::perplexity(m, ids, opt);
    EXPECT_EQ(r.windows, 3);  // 200 / 64, tail of 8 dropped
    EXPECT_EQ(r.predictions, 3 * 63);
    EXPECT_EQ(r.tokens, 200);
    // Same figure by hand: each window on its own.
    double nll = 0;
    for (int w = 0; w < 3; ++w) {
        std::vector<int32_t> win(ids.begin() + 64 * w, ids.begin() + 64 * (w + 1));
        nll += eval::window_nll(m.forward(win), win);
    }
    EXPECT_NEAR(r.nll, nll / (3 * 63), 1e-9);
    EXPECT_NEAR(r.ppl, std::exp(r.nll), 1e-9);

    // BOS per window: BOS + 63 text tokens, still 63 predictions each.
    opt.bos = true;
    opt.bos_id = 1;
    const auto rb = eval::perplexity(m, ids, opt);
    EXPECT_EQ(rb.windows, 3);  // 200 / 63
    EXPECT_EQ(rb.predictions, 3 * 63);
    std::vector<int32_t> win = {1};
    win.insert(win.end(), ids.begin() + 63, ids.begin() + 126);
    const double second = eval::window_nll(m.forward(win), win);
    EXPECT_GT(second, 0);

    opt.max_windows = 1;
    EXPECT_EQ(eval::perplexity(m, ids, opt).windows, 1);
    opt.ctx = 1000;
    EXPECT_THROW(eval::perplexity(m, ids, opt), Error);  // not one full window
}

struct PplCase {
    const char* model;
    const char* text;
    double ppl;  // shared/data/README.md, plain protocol, ctx 512
};

class PplReference : public ::testing::TestWithParam<PplCase> {};

TEST_P(PplReference, MatchesTransformers) {
    REQUIRE_DATA_AT(kData / "models");
    const auto c = GetParam();
    const auto dir = (kData / "models" / c.model).string();
    io::Tokenizer tok = [&] {
        try {
            return io::Tokenizer::load(dir);
        } catch (const std::exception& e) {
            ADD_FAILURE() << "tokenizer: " << e.what();
            throw;
        }
    }();
    const auto m = model::Model::load(dir);
    eval::PplOptions opt;
    opt.ctx = 512;
    opt.progress = false;
    const auto r = eval::perplexity(m, tok, read_text(kData / "text" / c.text), opt);
    std::printf("%s %s: %s\n", c.model, c.text, r.summary().c_str());
    EXPECT_NEAR(r.ppl, c.ppl, 1e-3 * c.ppl) << c.model << " " << c.text;
}

INSTANTIATE_TEST_SUITE_P(
    SharedData, PplReference,
    ::testing::Values(PplCase{"stories260K", "tinystories-valid.txt", 8.4685},
                      PplCase{"stories260K", "austen-heldout.txt", 47.6789},
                      PplCase{"stories260K", "kjv-heldout.txt", 61.8607},
                      PplCase{"tiny-llama-6m", "tinystories-valid.txt", 29.9361},
                      PplCase{"tiny-llama-6m", "austen-heldout.txt", 32.3967},
                      PplCase{"tiny-llama-6m", "kjv-heldout.txt", 43.0293},
                      PplCase{"tiny-qwen3-6m", "tinystories-valid.txt", 29.5934},
                      PplCase{"tiny-qwen3-6m", "austen-heldout.txt", 31.8113},
                      PplCase{"tiny-qwen3-6m", "kjv-heldout.txt", 43.0291}),
    [](const ::testing::TestParamInfo<PplCase>& i) {
        std::string n = std::string(i.param.model) + "_" + i.param.text;
        for (char& ch : n)
            if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
        return n;
    });
