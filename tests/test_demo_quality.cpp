// The bundled demo (models/demo, scripts/demo.sh) at 1 bit per weight: the
// compressed model's held-out perplexity over the original's, bounded from
// above. Both perplexities come from the same run on the same text, so the
// ratio does not depend on the machine beyond the encoder's float rounding.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "eval/ppl.hpp"
#include "io/text_file.hpp"
#include "io/tokenizer.hpp"
#include "model/llama.hpp"
#include "quantize/quantize.hpp"
#include "test_files.hpp"

using namespace cortiq;
namespace fs = std::filesystem;

namespace {

const std::string kDemo = std::string(CORTIQ_SOURCE_DIR) + "/models/demo";
// The bound on the ratio. Measured (held-out ppl, float 84.97) with 48, 56,
// 64, 72 and 80 calibration windows of 256 tokens (each a different choice of
// windows over calib.txt): 172.48, 160.79, 158.02, 152.72 and 159.37, ratios
// 2.030, 1.892, 1.860, 1.797 and 1.876. The largest, 2.03, times 1.10 (the
// spread of those five, 2.030 / 1.797 = 1.13, is the size of change another
// choice of windows brings; rounding on another machine brings less).
constexpr double kBound = 2.03 * 1.10;

double heldout_ppl(const model::Model& m, const io::Tokenizer& tok) {
    eval::PplOptions po;
    po.ctx = 256;
    po.progress = false;
    return eval::perplexity(m, tok, io::read_text_file(kDemo + "/heldout.txt", "held-out text"), po)
        .ppl;
}

}  // namespace

// scripts/demo.sh's settings (64 windows of 256 tokens of calib.txt, the
// defaults otherwise; --tune auto is none on the CPU): 84.97 -> 158.02.
TEST(DemoQuality, OneBitPerWeightStaysWithinItsPerplexityRatio) {
    const fs::path d = test::scratch_dir("cortiq_demo_q_", "ratio");
    quant::QuantizeOptions o;
    o.model_dir = kDemo;
    o.calib_paths = {kDemo + "/calib.txt"};
    o.out_path = (d / "demo.safetensors").string();
    o.bpw = 1.0;
    o.calib.samples = 64;
    o.calib.seqlen = 256;
    o.progress = false;
    o.verbose = false;
    const auto rep = quant::quantize(o);
    EXPECT_LE(static_cast<double>(rep.linear_bits) / rep.linear_params, 1.0);
    const auto tok = io::Tokenizer::load(kDemo);
    const double pf = heldout_ppl(model::Model::load(kDemo), tok);
    const double pq = heldout_ppl(model::Model::load(o.out_path), tok);
    std::printf("demo at 1 bpw: held-out ppl %.3f -> %.3f (%.4fx)\n", pf, pq, pq / pf);
    EXPECT_GT(pq, pf);
    EXPECT_LE(pq / pf, kBound);
    fs::remove_all(d);
}
