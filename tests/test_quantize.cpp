// cortiq quantize end to end on stories260K: a valid compressed file whose
// perplexity is finite and above the original's, a resumed run that is
// byte-identical to an uninterrupted one, and bad input refused cleanly.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "blr/sign.hpp"
#include "eval/ppl.hpp"
#include "io/safetensors.hpp"
#include "io/tokenizer.hpp"
#include "model/llama.hpp"
#include "quantize/quantize.hpp"

using namespace cortiq;
namespace fs = std::filesystem;

namespace {

const std::string kData = CORTIQ_SHARED_DATA;
const std::string kModel = kData + "/models/stories260K";
const std::string kCalib = kData + "/text/tinystories-calib.txt";

fs::path tmp_dir(const char* tag) {
    fs::path d = fs::temp_directory_path() /
                 (std::string("cortiq_q_") + tag + "_" + std::to_string(getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

quant::QuantizeOptions base_options(const fs::path& out) {
    quant::QuantizeOptions o;
    o.model_dir = kModel;
    o.calib_path = kCalib;
    o.out_path = out.string();
    o.bpw = 1.0;
    o.calib.samples = 6;
    o.calib.seqlen = 96;
    o.enc.itq_iters = 20;
    o.progress = false;
    o.verbose = false;
    return o;
}

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

struct CliRun {
    int code;
    std::string out;
};
CliRun run_cli(const std::string& args) {
    FILE* p = popen((std::string(CORTIQ_CLI) + " " + args + " 2>&1").c_str(), "r");
    std::string out;
    std::array<char, 4096> buf{};
    size_t k;
    while ((k = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), k);
    const int st = pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

}  // namespace

class Quantize : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!fs::exists(kModel)) GTEST_SKIP() << "no " << kModel;
    }
};

TEST_F(Quantize, ProducesAValidFileThatRunsAndResumesByteIdentically) {
    const fs::path d = tmp_dir("run");
    auto o = base_options(d / "a.safetensors");
    const auto rep = quant::quantize(o);
    ASSERT_EQ(rep.tensors.size(), 5u * 7u);
    EXPECT_LE(static_cast<double>(rep.linear_bits) / rep.linear_params, 1.0);
    EXPECT_FALSE(fs::exists(d / "a.safetensors.journal"));
    // every payload validates; untouched tensors keep their bytes
    const auto f = io::SafetensorsFile::open((d / "a.safetensors").string());
    const auto src = io::Checkpoint::open(kModel);
    int payloads = 0;
    for (const auto& t : f.tensors()) {
        if (t.dtype == io::DType::U8) {
            EXPECT_NO_THROW(blr::validate_any(f.bytes(t), t.name));
            ++payloads;
        } else {
            const auto a = f.bytes(t), b = src.bytes(t.name);
            EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << t.name;
        }
    }
    EXPECT_EQ(payloads, 35);
    EXPECT_NE(quant::inspect((d / "a.safetensors").string()).find("all payloads valid"),
              std::string::npos);
    // the compressed model runs, with its own embedded tokenizer
    const auto mq = model::Model::load((d / "a.safetensors").string());
    const auto mf = model::Model::load(kModel);
    const auto tok = io::Tokenizer::load((d / "a.safetensors").string());
    std::ifstream tf(kData + "/text/tinystories-valid.txt");
    std::string text(40000, '\0');
    tf.read(text.data(), static_cast<std::streamsize>(text.size()));
    eval::PplOptions po;
    po.ctx = 256;
    po.progress = false;
    const double pq = eval::perplexity(mq, tok, text, po).ppl,
                 pf = eval::perplexity(mf, tok, text, po).ppl;
    EXPECT_TRUE(std::isfinite(pq));
    EXPECT_GT(pq, pf);
    // 64-wide layers at 1 bpw get rank 14: far worse than FP, but not noise
    // (a uniform guess over 512 tokens scores 512).
    EXPECT_LT(pq, 0.8 * 512);

    // an interrupted run (stopped after layer 2's journal entry) resumes into
    // the same bytes
    auto o2 = base_options(d / "b.safetensors");
    o2.interrupt_after_layer = 2;
    EXPECT_THROW(quant::quantize(o2), Error);
    EXPECT_FALSE(fs::exists(d / "b.safetensors"));
    EXPECT_TRUE(fs::exists(d / "b.safetensors.journal/layer_2.safetensors"));
    o2.interrupt_after_layer = -1;
    EXPECT_THROW(quant::quantize(o2), Error);  // journal exists: needs --resume or --force
    o2.resume = true;
    const auto rep2 = quant::quantize(o2);
    EXPECT_EQ(rep2.resumed_layers, 3);
    EXPECT_EQ(slurp(d / "a.safetensors"), slurp(d / "b.safetensors"));
    // a different budget cannot resume that journal
    auto o3 = base_options(d / "c.safetensors");
    o3.interrupt_after_layer = 0;
    EXPECT_THROW(quant::quantize(o3), Error);
    o3.interrupt_after_layer = -1;
    o3.resume = true;
    o3.bpw = 1.5;
    EXPECT_THROW(quant::quantize(o3), Error);
    fs::remove_all(d);
}

TEST_F(Quantize, BaselinesUseTheSamePipeline) {
    const fs::path d = tmp_dir("base");
    for (auto m : {encode::Method::rtn_sign, encode::Method::svid}) {
        auto o = base_options(d / "x.safetensors");
        o.enc.method = m;
        o.force = true;
        o.calib.samples = 4;
        const auto rep = quant::quantize(o);
        const auto mq = model::Model::load((d / "x.safetensors").string());
        EXPECT_EQ(mq.num_layers(), 5);
        for (const auto& t : rep.tensors) EXPECT_EQ(t.method, encode::method_name(m));
    }
    fs::remove_all(d);
}

TEST_F(Quantize, BadInputGivesOneClearErrorAndNoOutput) {
    const fs::path d = tmp_dir("bad");
    const std::string q = (d / "o.safetensors").string();
    const std::string args = "quantize " + kModel + " --bpw 1 --samples 4 --seqlen 64 -q -o " + q;
    // calibration text too short
    std::ofstream(d / "short.txt") << "Once upon a time.";
    auto r = run_cli(args + " --calib " + (d / "short.txt").string());
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("tokens"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(q));
    // output exists without --force
    std::ofstream(q) << "x";
    r = run_cli(args + " --calib " + kCalib);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
    EXPECT_EQ(slurp(q), "x");
    fs::remove(q);
    // unknown architecture; missing tokenizer; non-finite weights
    fs::create_directories(d / "m");
    for (const char* f :
         {"model.safetensors", "tokenizer.json", "tokenizer_config.json", "config.json"})
        fs::copy_file(kModel + "/" + f, d / "m" / f);
    std::string cfg = slurp(d / "m/config.json");
    std::string bad = cfg;
    bad.replace(bad.find("\"llama\""), 7, "\"gpt2\"");
    std::ofstream(d / "m/config.json") << bad;
    r = run_cli("quantize " + (d / "m").string() + " --calib " + kCalib + " -q -o " + q);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("gpt2"), std::string::npos) << r.out;
    std::ofstream(d / "m/config.json") << cfg;
    fs::remove(d / "m/tokenizer.json");
    r = run_cli("quantize " + (d / "m").string() + " --calib " + kCalib + " -q -o " + q);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("tokenizer"), std::string::npos) << r.out;
    fs::copy_file(kModel + "/tokenizer.json", d / "m/tokenizer.json");
    {
        // a NaN in layer 1's q_proj
        io::SafetensorsWriter w;
        const auto ck = io::Checkpoint::open(kModel);
        for (const auto& name : ck.names()) {
            const auto& info = ck.info(name);
            auto b = ck.bytes(name);
            std::vector<uint8_t> bytes(b.begin(), b.end());
            if (name == "model.layers.1.self_attn.q_proj.weight") {
                const float nan = NAN;
                std::memcpy(bytes.data() + 40, &nan, 4);
            }
            w.add(name, info.dtype, info.shape, std::move(bytes));
        }
        w.write((d / "m/model.safetensors").string());
    }
    r = run_cli("quantize " + (d / "m").string() + " --calib " + kCalib +
                " --samples 4 --seqlen 64 -q -o " + q);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("non-finite"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(q));
    fs::remove_all(d);
}
