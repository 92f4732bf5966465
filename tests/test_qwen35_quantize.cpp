// `cortiq quantize` on the tiny Qwen3.5 model of tests/golden/tiny-qwen35:
// every DeltaNet and gated-attention projection compressed through the
// calibration hooks, the 8-row in_proj_b / in_proj_a kept as they are unless a
// plan names them, the vision tower and mtp.* carried unchanged, the output
// loads and runs (scoring, cached decoding, ppl), an interrupted run resumes
// into the same bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"
#include "eval/ppl.hpp"
#include "forward_reference.hpp"
#include "io/safetensors.hpp"
#include "io/tokenizer.hpp"
#include "model/llama.hpp"
#include "quality.hpp"
#include "quantize/quantize.hpp"
#include "quantize/record_grams.hpp"
#include "require.hpp"
#include "test_files.hpp"

using namespace cortiq;
using namespace cortiq::test;

namespace {

const fs::path kTiny = kGolden / "tiny-qwen35";
const fs::path kCalib = kData / "text/tinystories-calib.txt";

quant::QuantizeOptions options(const fs::path& out) {
    quant::QuantizeOptions o;
    o.model_dir = kTiny.string();
    o.calib_paths = {kCalib.string()};
    o.out_path = out.string();
    o.bpw = 1.0;
    o.calib.samples = 6;
    o.calib.seqlen = 96;
    o.enc.itq_iters = 20;
    o.progress = false;
    o.verbose = false;
    return o;
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The number printed after the last `key` (": ppl 12.3456 | ..."), NaN when
// absent.
double number_after(const std::string& out, const std::string& key) {
    const size_t at = out.rfind(key);
    return at == std::string::npos ? NAN : std::stod(out.substr(at + key.size()));
}

// A linear layer's weight: *_proj.weight, in_proj_qkv/z/a/b.weight.
bool is_linear(const std::string& name) {
    for (const char* tail : {"_proj.weight", "in_proj_qkv.weight", "in_proj_z.weight",
                             "in_proj_a.weight", "in_proj_b.weight"})
        if (ends_with(name, tail)) return true;
    return false;
}

TEST(Qwen35Quantize, CompressesEveryProjectionAndRuns) {
    REQUIRE_DATA_AT(kCalib);
    const auto d = scratch_dir("cortiq_q35q_", "run");
    const auto rep = quant::quantize(options(d / "a.safetensors"));
    std::printf("%s\n", rep.summary().c_str());
    const auto src = io::Checkpoint::open(kTiny.string());
    const auto out = io::Checkpoint::open((d / "a.safetensors").string());

    // every linear layer of every block but in_proj_b / in_proj_a, as payloads
    int64_t expected = 0, small = 0;
    for (const auto& name : src.names()) {
        if (name.rfind("model.language_model.layers.", 0) != 0 || !is_linear(name)) continue;
        const bool is_small =
            ends_with(name, "in_proj_a.weight") || ends_with(name, "in_proj_b.weight");
        (is_small ? small : expected) += 1;
        EXPECT_EQ(out.info(name).dtype == io::DType::U8, !is_small) << name;
    }
    EXPECT_EQ(expected, 3 * 6 + 7);  // 3 DeltaNet blocks (qkv, z, out, 3 MLP), 1 attention (4 + 3)
    EXPECT_EQ(static_cast<int64_t>(rep.tensors.size()), expected);
    EXPECT_EQ(static_cast<int64_t>(rep.kept_small.size()), small);
    EXPECT_EQ(small, 6);
    EXPECT_NE(rep.summary().find("6 small tensors kept"), std::string::npos);
    for (const auto& r : rep.tensors) {
        EXPECT_GT(r.bpw, 0.9) << r.name;
        EXPECT_LE(r.bpw, 1.0) << r.name;
    }
    // what the runtime does not read is carried byte for byte
    int64_t carried = 0;
    for (const auto& name : src.names()) {
        if (name.rfind("model.visual.", 0) != 0 && name.rfind("mtp.", 0) != 0) continue;
        ++carried;
        const auto a = src.bytes(name), b = out.bytes(name);
        EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << name;
    }
    EXPECT_GT(carried, 2);
    const auto insp = run_cli("inspect " + (d / "a.safetensors").string());
    EXPECT_EQ(insp.code, 0) << insp.out;
    EXPECT_NE(insp.out.find("carried unchanged, not run by cortiq: model.visual.*"),
              std::string::npos)
        << insp.out;
    EXPECT_NE(insp.out.find("mtp.* (2 tensors)"), std::string::npos) << insp.out;

    // the output runs: packed layers, cached decoding as the full pass, ppl
    const auto mq = model::Model::load((d / "a.safetensors").string());
    const std::vector<int32_t> seq = {5, 17, 300, 1024, 7, 99, 2048, 3, 11, 4000, 42, 8};
    const MatF full = mq.forward(seq);
    for (float v : full.vec()) ASSERT_TRUE(std::isfinite(v));
    auto cache = mq.make_cache(static_cast<int64_t>(seq.size()));
    std::span<const int32_t> all(seq);
    const MatF pre = mq.forward(all.subspan(0, 9), cache);
    double worst = rel_err(pre.data(), full.data(), pre.size());
    for (size_t t = 9; t < seq.size(); ++t) {
        const MatF step = mq.forward(all.subspan(t, 1), cache);
        worst =
            std::max(worst, rel_err(step.data(), full.row(static_cast<int64_t>(t)), step.cols()));
    }
    EXPECT_LT(worst, 1e-5);
    {  // 16 windows of held-out text
        std::ifstream in(kData / "text/tinystories-valid.txt");
        std::string text(12000, '\0');
        in.read(text.data(), static_cast<std::streamsize>(text.size()));
        std::ofstream(d / "valid.txt") << text;
    }
    const auto ppl = run_cli("ppl " + (d / "a.safetensors").string() + " --text " +
                             (d / "valid.txt").string() + " --ctx 128");
    EXPECT_EQ(ppl.code, 0) << ppl.out;
    const auto ppl_float =
        run_cli("ppl " + kTiny.string() + " --text " + (d / "valid.txt").string() + " --ctx 128");
    EXPECT_EQ(ppl_float.code, 0) << ppl_float.out;
    const double pq = number_after(ppl.out, ": ppl "), pf = number_after(ppl_float.out, ": ppl ");
    std::printf("held-out ppl %.4g (float) -> %.4g (1 bpw)\n", pf, pq);
    // Both scored, finite. No bound on their ratio: the tiny model's weights
    // are random (float 3.5e15 on this text, 1 bpw 5.5e24: a ratio of 1.6e9),
    // so the quality bounds are per tensor
    // (EveryProjectionReportsItsTrueHeldOutErrorNearRtnSign).
    EXPECT_TRUE(std::isfinite(pf)) << ppl_float.out;
    EXPECT_TRUE(std::isfinite(pq)) << ppl.out;

    // an interrupted run resumes from its journal into the same bytes
    auto o2 = options(d / "b.safetensors");
    o2.interrupt_after_layer = 1;
    EXPECT_THROW(quant::quantize(o2), Error);
    o2.interrupt_after_layer = -1;
    o2.resume = true;
    const auto rep2 = quant::quantize(o2);
    EXPECT_EQ(rep2.resumed_layers, 2);
    EXPECT_EQ(slurp(d / "a.safetensors"), slurp(d / "b.safetensors"));
    fs::remove_all(d);
}

// The compression itself, in bounds that compare within the run
// (tests/quality.hpp): with plain sequential calibration every DeltaNet and
// attention projection, at rtn-sign's bits per weight for its shape, has
// against the true held-out Grams of its input the held-out error the run
// reports, within kRtnSlack of rtn-sign's on the same Grams. The weights are
// random (no structure to find at 1-2 bpw): measured 0.893x (layer 0's
// down_proj) to 1.091x (layer 3's v_proj) rtn-sign's error over the 25.
constexpr double kRtnSlack = 1.15;
TEST(Qwen35Quantize, EveryProjectionReportsItsTrueHeldOutErrorNearRtnSign) {
    if (!fs::exists(kCalib)) GTEST_SKIP() << "no shared data (calibration text)";
    const auto d = scratch_dir("cortiq_q35q_", "quality");
    auto o = options(d / "q.safetensors");
    o.match_original = false;
    o.calib.samples = 16;
    o.calib.seqlen = 128;
    o.plan_path = (d / "plan.json").string();
    write_rtn_budget_plan(kTiny.string(), o.plan_path);  // each at rtn-sign's bytes
    const auto rep = quant::quantize(o);
    const auto qs = tensor_quality(o, rep);
    ASSERT_EQ(qs.size(), 25u);
    for (const auto& q : qs)
        std::printf("%-52s reported %.5f true %.5f rtn-sign %.5f\n", q.name.c_str(), q.err_reported,
                    q.err_true, q.err_rtn);
    for (const auto& miss : quality_misses(qs, {{"", kRtnSlack}})) ADD_FAILURE() << miss;
    fs::remove_all(d);
}

TEST(Qwen35Quantize, APlanCanCompressTheSmallTensors) {
    REQUIRE_DATA_AT(kCalib);
    const auto d = scratch_dir("cortiq_q35q_", "plan");
    std::ofstream(d / "plan.json") << R"({"*in_proj_a*": 4})";
    auto o = options(d / "p.safetensors");
    o.plan_path = (d / "plan.json").string();
    const auto rep = quant::quantize(o);
    EXPECT_EQ(rep.kept_small.size(), 3u);  // in_proj_b only
    for (const auto& n : rep.kept_small) EXPECT_TRUE(ends_with(n, "in_proj_b.weight")) << n;
    const auto out = io::Checkpoint::open((d / "p.safetensors").string());
    EXPECT_EQ(out.info("model.language_model.layers.0.linear_attn.in_proj_a.weight").dtype,
              io::DType::U8);
    EXPECT_NO_THROW(model::Model::load((d / "p.safetensors").string()));
    fs::remove_all(d);
}

// `cortiq bench --from-model M --tensor T --calib TEXT` on Qwen3.5 names: the
// weight is the checkpoint's, the Grams are the recorded input of that linear
// (in_proj_z reads what in_proj_qkv reads: the same Grams), symmetric with a
// positive diagonal; a name of the other layer type is a clear error.
TEST(Qwen35Quantize, BenchRecordsTheGramsOfAQwen35Linear) {
    REQUIRE_DATA_AT(kCalib);
    const std::vector<std::string> calib{kCalib.string()};
    const std::string p = "model.language_model.layers.";
    const auto qkv = quant::bench_input_recorded(
        kTiny.string(), p + "0.linear_attn.in_proj_qkv.weight", calib, 4, 64);
    const auto z = quant::bench_input_recorded(kTiny.string(), p + "0.linear_attn.in_proj_z.weight",
                                               calib, 4, 64);
    const auto out = quant::bench_input_recorded(kTiny.string(),
                                                 p + "0.linear_attn.out_proj.weight", calib, 4, 64);
    const auto q =
        quant::bench_input_recorded(kTiny.string(), p + "3.self_attn.q_proj.weight", calib, 4, 64);
    const auto ck = io::Checkpoint::open(kTiny.string());
    for (const auto* b : {&qkv, &z, &out, &q}) {
        const int64_t n = b->w.cols();
        ASSERT_EQ(b->h_fit.rows(), n);
        ASSERT_EQ(b->h_sel.cols(), n);
        for (int64_t i = 0; i < n; ++i) {
            EXPECT_GT(b->h_fit(i, i), 0.0);
            for (int64_t j = 0; j < i; ++j) EXPECT_EQ(b->h_fit(i, j), b->h_fit(j, i));
        }
    }
    EXPECT_EQ(z.h_fit.vec(), qkv.h_fit.vec());
    EXPECT_NE(out.h_fit.vec(), qkv.h_fit.vec());
    const MatF wz = ck.load_matf(p + "0.linear_attn.in_proj_z.weight");
    ASSERT_EQ(z.w.rows(), wz.rows());
    for (int64_t i = 0; i < wz.size(); ++i) ASSERT_EQ(z.w.data()[i], wz.data()[i]);
    // layer 0 is a DeltaNet layer, layer 3 full attention
    EXPECT_THROW(
        quant::bench_input_recorded(kTiny.string(), p + "0.self_attn.q_proj.weight", calib, 4, 64),
        Error);
    EXPECT_THROW(quant::bench_input_recorded(kTiny.string(), p + "3.linear_attn.out_proj.weight",
                                             calib, 4, 64),
                 Error);
}

}  // namespace

// --tune block+kd on the trained Qwen3.5 model, on the CPU: only BLR
// payloads change (every other tensor byte-identical, every payload the same
// size: rank and paths kept), each block's held-out error and the
// distillation's held-out KL never end above where they started, and a run
// interrupted after a tuned layer resumes into the same bytes (block tuning
// on its cosine schedule, the default for this model).
TEST(Qwen35Quantize, TunesHybridBlocksChangingOnlyThePayloads) {
    const fs::path trained = kGolden / "tiny-qwen35-trained";
    REQUIRE_DATA_AT(kCalib);
    const auto d = scratch_dir("cortiq_q35t_", "run");
    auto tuned_options = [&](const fs::path& out) {
        auto o = options(out);
        o.model_dir = trained.string();
        o.calib.samples = 8;
        o.calib.seqlen = 80;  // windows past the delta rule's checkpoint interval (64)
        o.tune_mode = "block+kd";
        o.tune.epochs = 2;
        o.kd.epochs = 1;
        o.tune_lr_schedule_auto = true;  // the command line's: a cosine for this model
        return o;
    };
    auto plain = tuned_options(d / "plain.safetensors");
    plain.tune_mode = "none";
    quant::quantize(plain);
    const auto rep = quant::quantize(tuned_options(d / "a.safetensors"));
    std::printf("%s\n", rep.summary().c_str());

    const auto p = io::SafetensorsFile::open((d / "plain.safetensors").string());
    const auto t = io::SafetensorsFile::open((d / "a.safetensors").string());
    ASSERT_EQ(p.tensors().size(), t.tensors().size());
    int changed = 0;
    for (const auto& info : p.tensors()) {
        const auto& ti = t.info(info.name);
        ASSERT_EQ(ti.dtype, info.dtype) << info.name;
        ASSERT_EQ(ti.shape, info.shape) << info.name;
        ASSERT_EQ(ti.nbytes(), info.nbytes()) << info.name;
        const auto a = p.bytes(info), b = t.bytes(ti);
        const bool same = std::equal(a.begin(), a.end(), b.begin(), b.end());
        if (info.dtype != io::DType::U8) EXPECT_TRUE(same) << info.name << " changed";
        changed += !same;
    }
    EXPECT_GT(changed, 0) << "tuning changed no payload";
    const auto meta = nlohmann::json::parse(t.metadata().at("cortiq"));
    EXPECT_EQ(meta.at("tune").at("lr_schedule"), "cosine") << meta.at("tune").dump();

    // every block was tuned, DeltaNet and attention alike
    const int64_t layers = model::Model::load(trained.string()).num_layers();
    ASSERT_EQ(static_cast<int64_t>(rep.tuned_blocks.size()), layers);
    for (const auto& b : rep.tuned_blocks)
        EXPECT_LE(b.at("sel_after").get<double>(), b.at("sel_before").get<double>()) << b.dump();
    ASSERT_TRUE(rep.distilled.is_object());
    EXPECT_LE(rep.distilled.at("kl_sel_after").get<double>(),
              rep.distilled.at("kl_sel_before").get<double>())
        << rep.distilled.dump();

    // interrupted after layer 1 (a DeltaNet layer, tuned), resumed: same bytes
    auto o2 = tuned_options(d / "b.safetensors");
    o2.interrupt_after_layer = 1;
    EXPECT_THROW(quant::quantize(o2), Error);
    o2.interrupt_after_layer = -1;
    o2.resume = true;
    quant::quantize(o2);
    EXPECT_EQ(slurp(d / "a.safetensors"), slurp(d / "b.safetensors"));
    fs::remove_all(d);
}

// A hybrid checkpoint whose conv kernel has the wrong shape: --tune block
// stops before any work with one error naming the tensor and its shapes.
TEST(Qwen35Quantize, AConvKernelOfTheWrongShapeIsNamed) {
    REQUIRE_DATA_AT(kCalib);
    const auto d = scratch_dir("cortiq_q35bad_", "run");
    const fs::path bad = d / "model";
    fs::create_directories(bad);
    for (const auto& e : fs::directory_iterator(kTiny))
        if (e.path().extension() != ".safetensors")
            fs::copy_file(e.path(), bad / e.path().filename());
    const auto src = io::SafetensorsFile::open((kTiny / "model.safetensors").string());
    io::SafetensorsWriter w;
    std::string conv;
    for (const auto& t : src.tensors()) {
        const auto bytes = src.bytes(t);
        std::vector<int64_t> shape = t.shape;
        std::vector<uint8_t> data(bytes.begin(), bytes.end());
        if (conv.empty() && ends_with(t.name, "linear_attn.conv1d.weight")) {
            conv = t.name;
            shape.back() -= 1;  // [C, 1, K] → [C, 1, K − 1]
            data.resize(data.size() / (shape.back() + 1) * shape.back());
        }
        w.add(t.name, t.dtype, shape, std::move(data));
    }
    ASSERT_FALSE(conv.empty());
    w.write((bad / "model.safetensors").string());
    auto o = options(d / "out.safetensors");
    o.model_dir = bad.string();
    o.tune_mode = "block";
    try {
        quant::quantize(o);
        ADD_FAILURE() << "a wrong conv kernel shape was accepted";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(conv), std::string::npos) << msg;
    }
    EXPECT_FALSE(fs::exists(d / "out.safetensors"));
    fs::remove_all(d);
}
