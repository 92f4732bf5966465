// --plan auto and --file-bpw (quantize/allocate.hpp, sensitivity.cpp,
// auto_plan.cpp): the allocation against brute force and its budget, exact
// payload bits, and quantize on stories260K: the plan file, bits no more
// than the uniform plan's, the plan file read back giving the same bytes, a
// resumed run reading the journal's plan, and a whole-file budget kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "blr/model.hpp"
#include "calib/calib.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "core/rng.hpp"
#include "io/safetensors.hpp"
#include "io/tokenizer.hpp"
#include "model/llama.hpp"
#include "quantize/allocate.hpp"
#include "quantize/quantize.hpp"
#include "quantize/steps.hpp"
#include "require.hpp"
#include "test_files.hpp"

using namespace cortiq;
namespace fs = std::filesystem;

namespace {

const std::string kModel = test::shared("models/stories260K");
const std::string kCalib = test::shared("text/tinystories-calib.txt");

// A tensor whose cost falls exponentially from kl0 at b = 0.6 (convex in b).
quant::TensorCost curve(const std::string& name, int64_t weights, double kl0, double rate) {
    quant::TensorCost t;
    t.name = name;
    t.weights = weights;
    for (double b : {0.6, 1.0, 1.6}) {
        t.b.push_back(b);
        t.kl.push_back(kl0 * std::exp(-rate * (b - 0.6)));
    }
    return t;
}

double total_cost(const std::vector<quant::TensorCost>& ts, const std::vector<double>& b) {
    double c = 0;
    for (size_t i = 0; i < ts.size(); ++i) c += ts[i].cost(b[i]);
    return c;
}

quant::QuantizeOptions options(const fs::path& out) {
    quant::QuantizeOptions o;
    o.model_dir = kModel;
    o.calib_paths = {kCalib};
    o.out_path = out.string();
    o.bpw = 1.0;
    o.calib.samples = 8;
    o.calib.seqlen = 64;
    o.enc.itq_iters = 10;
    o.sensitivity_windows = 2;
    o.progress = false;
    o.verbose = false;
    return o;
}

}  // namespace

TEST(Allocate, EqualSizesMatchBruteForceAndKeepTheBudget) {
    Rng rng(3);
    for (int trial = 0; trial < 20; ++trial) {
        std::vector<quant::TensorCost> ts;
        for (int i = 0; i < 3; ++i)
            ts.push_back(
                curve("t" + std::to_string(i), 100, 0.1 + rng.uniform(), 0.5 + 3 * rng.uniform()));
        quant::AllocationOptions ao;
        ao.step = 0.1;
        const double budget = 100 * (1.8 + 2.4 * rng.uniform());
        const auto a = quant::allocate_bits(ts, budget, ao);
        EXPECT_LE(a.bits, budget + 1e-6);
        double best = INFINITY;
        for (int i = 0; i <= 10; ++i)
            for (int j = 0; j <= 10; ++j)
                for (int k = 0; k <= 10; ++k) {
                    const std::vector<double> b{0.6 + 0.1 * i, 0.6 + 0.1 * j, 0.6 + 0.1 * k};
                    if (100 * (b[0] + b[1] + b[2]) <= budget + 1e-6)
                        best = std::min(best, total_cost(ts, b));
                }
        EXPECT_LE(total_cost(ts, a.bpw), best * (1 + 1e-9)) << "trial " << trial;
        EXPECT_NEAR(a.predicted_kl, total_cost(ts, a.bpw), 1e-9);
    }
}

TEST(Allocate, UnequalSizesBeatUniformAndKeepWhatIsCheapToKeep) {
    std::vector<quant::TensorCost> ts = {curve("small-sensitive", 1000, 5.0, 3.0),
                                         curve("large-robust", 100000, 0.1, 1.0),
                                         curve("mid", 20000, 1.0, 2.0)};
    const double uniform_bits = 1.0 * (1000 + 100000 + 20000);
    const auto a = quant::allocate_bits(ts, uniform_bits, {});
    EXPECT_LE(a.bits, uniform_bits);
    EXPECT_LT(a.predicted_kl, total_cost(ts, {1.0, 1.0, 1.0}));
    EXPECT_GT(a.bpw[0], a.bpw[1]);  // bits go where they buy the most
    // a table that may stay in bf16, expensive to compress and cheap to keep
    ts.push_back(curve("table", 500, 50.0, 0.5));
    ts.back().may_keep = true;
    const auto k = quant::allocate_bits(ts, uniform_bits + 16 * 500, {});
    EXPECT_TRUE(k.kept[3]);
    EXPECT_EQ(k.bpw[3], 16.0);
    EXPECT_LE(k.bits, uniform_bits + 16 * 500);
    EXPECT_THROW(quant::allocate_bits(ts, 100.0, {}), Error);  // not even 0.6 bpw fits
}

TEST(Allocate, PayloadBitsAreTheEncodersOwn) {
    quant::TensorCost t;
    t.m = 256;
    t.n = 768;
    t.weights = t.m * t.n;
    for (double b : {0.55, 1.0, 1.37, 2.0}) {
        const int64_t r1 = blr::rank_for(t.m, t.n, b, 1), r2 = blr::rank_for(t.m, t.n, b, 2);
        EXPECT_EQ(t.bits(b), std::max(blr::bits(t.m, t.n, r1, 1), blr::bits(t.m, t.n, r2, 2)));
        EXPECT_LE(t.bits(b), b * static_cast<double>(t.weights));
    }
    t.m = t.n = 8;  // too small for rank 1 at 0.5 bpw: the encoder stores rank 1 anyway
    EXPECT_EQ(t.bits(0.5), blr::bits(8, 8, 1, 1));
}

TEST(PlanAuto, SameBitsAPlanFileThatRoundTripsAndResumes) {
    REQUIRE_DATA_AT(kModel);
    const fs::path d = test::scratch_dir("cortiq_planauto_", "a");
    const auto uniform = quant::quantize(options(d / "u.safetensors"));
    auto o = options(d / "a.safetensors");
    o.plan_auto = true;
    const auto rep = quant::quantize(o);
    ASSERT_TRUE(fs::exists(d / "a.safetensors.plan.json"));
    // the budget is the uniform plan's payloads at the larger of their one-
    // and two-path sizes (TensorCost::bits); the encoder's choice of paths
    // may store either, so the uniform file itself may hold a little less
    const double budget = rep.plan["budget_bits"].get<double>();
    EXPECT_LE(static_cast<double>(rep.linear_bits), budget);
    EXPECT_GE(budget, static_cast<double>(uniform.linear_bits));
    EXPECT_LE(static_cast<double>(rep.linear_bits),
              1.02 * static_cast<double>(uniform.linear_bits));
    const nlohmann::json plan = nlohmann::json::parse(std::ifstream(d / "a.safetensors.plan.json"));
    EXPECT_EQ(plan.size(), rep.tensors.size());
    bool differs = false;
    for (const auto& t : rep.tensors) {
        ASSERT_TRUE(plan.contains(t.name)) << t.name;
        const double b = plan[t.name].get<double>();
        EXPECT_GE(b, 0.6 - 1e-9);
        EXPECT_LE(b, 1.6 + 1e-9);
        EXPECT_EQ(t.bpw_target, b);
        differs |= b != 1.0;
    }
    EXPECT_TRUE(differs);
    EXPECT_GT(rep.sensitivity_seconds, 0.0);
    EXPECT_TRUE(rep.to_json()["plan"].contains("tensors"));
    EXPECT_NE(rep.summary().find("plan auto:"), std::string::npos) << rep.summary();
    // the plan file read back: the same bytes
    auto o2 = options(d / "p.safetensors");
    o2.plan_path = (d / "a.safetensors.plan.json").string();
    quant::quantize(o2);
    EXPECT_EQ(test::slurp(d / "a.safetensors"), test::slurp(d / "p.safetensors"));
    // interrupted, then resumed: the journal's plan, not a new measurement
    auto o3 = options(d / "r.safetensors");
    o3.plan_auto = true;
    o3.interrupt_after_layer = 1;
    EXPECT_THROW(quant::quantize(o3), Error);
    ASSERT_TRUE(fs::exists(d / "r.safetensors.journal/plan.json"));
    o3.interrupt_after_layer = -1;
    o3.resume = true;
    const auto rep3 = quant::quantize(o3);
    EXPECT_TRUE(rep3.plan.value("resumed", false));
    EXPECT_EQ(test::slurp(d / "a.safetensors"), test::slurp(d / "r.safetensors"));
    fs::remove_all(d);
}

// The reference kept at fewer positions (a large vocabulary's case, forced
// here by a small reference_bytes): the same tensors, each cost falling with
// its bits, and each within a factor of three of the cost measured at every
// position (2 windows of 64 tokens: the sampling noise of 16 positions a
// window, not a different measurement).
TEST(PlanAuto, FewerPositionsMeasureTheSameCosts) {
    REQUIRE_DATA_AT(kModel);
    model::Model m = model::Model::load(kModel);
    const io::Tokenizer tok = io::Tokenizer::load(kModel);
    calib::CalibOptions co;
    co.samples = 8;
    co.seqlen = 64;
    const auto cs = calib::make_calib_set(tok, test::slurp(kCalib), co, {kCalib});
    const std::vector<std::vector<int32_t>> windows(cs.fit.begin(), cs.fit.begin() + 2);
    auto o = options("unused.safetensors");
    std::vector<quant::Sensitivity> runs;
    for (int64_t bytes : {int64_t{256} << 20, int64_t{8 * 512 * 2 * 16}}) {
        quant::SensitivityRequest rq{o, m, cs, windows, {}, false, false, 1.0, 16.0, 16.0, bytes};
        for (int64_t l = 0; l < 2; ++l)
            for (const char* lin : {"self_attn.v_proj", "mlp.down_proj"})
                rq.decoder.insert(quant::tensor_name(m.config(), l, lin));
        Progress bar("sensitivity", 1, "weights", false, nullptr);
        runs.push_back(quant::measure_sensitivity(rq, bar));
    }
    EXPECT_EQ(runs[0].stride, 1);
    EXPECT_EQ(runs[1].stride, 4);  // 16 of each window's 64 positions
    ASSERT_EQ(runs[0].costs.size(), 4u);
    ASSERT_EQ(runs[1].costs.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
        const auto &a = runs[0].costs[i], &b = runs[1].costs[i];
        EXPECT_EQ(a.name, b.name);
        for (size_t k = 0; k < 3; ++k) {
            EXPECT_GT(b.kl[k], a.kl[k] / 3) << a.name << " point " << k;
            EXPECT_LT(b.kl[k], a.kl[k] * 3) << a.name << " point " << k;
        }
        EXPECT_GT(a.kl.front(), a.kl.back()) << a.name;  // more bits, less damage
    }
}

TEST(PlanAuto, FileBudgetCountsEveryByte) {
    REQUIRE_DATA_AT(kModel);
    const fs::path d = test::scratch_dir("cortiq_planauto_", "f");
    for (double f : {2.5, 4.0}) {
        auto o = options(d / "f.safetensors");
        o.file_bpw = f;
        o.plan_auto = true;
        o.force = true;
        const auto rep = quant::quantize(o);
        const double got = 8.0 * static_cast<double>(fs::file_size(d / "f.safetensors")) /
                           static_cast<double>(rep.total_params);
        EXPECT_LE(got, f) << "--file-bpw " << f;
        EXPECT_GT(got, 0.6 * f) << "--file-bpw " << f;  // most of the budget is used
        const auto m = model::Model::load((d / "f.safetensors").string());
        // stories260K's tied table is a third of its parameters: at 2.5 bits
        // per parameter it cannot stay in bf16
        if (f == 2.5) EXPECT_TRUE(m.embedding().packed());
    }
    {  // the embedding left in the mapped checkpoint compresses to the same bytes
        auto a = options(d / "eager.safetensors");
        a.file_bpw = 2.5;
        a.plan_auto = true;
        auto b = a;
        a.map_weights = false;
        b.map_weights = true;
        b.out_path = (d / "mapped.safetensors").string();
        quant::quantize(a);
        quant::quantize(b);
        const auto fa = io::SafetensorsFile::open(a.out_path);
        const auto fb = io::SafetensorsFile::open(b.out_path);
        ASSERT_EQ(fa.tensors().size(), fb.tensors().size());
        for (const auto& t : fa.tensors()) {
            const auto x = fa.bytes(t), y = fb.bytes(fb.info(t.name));
            EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << t.name;
        }
        EXPECT_TRUE(model::Model::load(b.out_path).embedding().packed());
    }
    // a budget the norms and the metadata already exceed: one error, and
    // neither an output nor a journal left behind
    auto o = options(d / "small.safetensors");
    o.file_bpw = 0.5;
    o.plan_auto = true;
    try {
        quant::quantize(o);
        ADD_FAILURE() << "--file-bpw 0.5 was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--file-bpw 0.5"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(d / "small.safetensors"));
    EXPECT_FALSE(fs::exists(d / "small.safetensors.journal"));
    o.file_bpw = 0;
    o.enc.method = encode::Method::rtn_sign;  // no ranks to choose
    EXPECT_THROW(quant::quantize(o), Error);
    EXPECT_FALSE(fs::exists(d / "small.safetensors.journal"));
    fs::remove_all(d);
}
