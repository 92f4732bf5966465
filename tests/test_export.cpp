// cortiq export: a compressed file back to a Hugging Face folder. The folder
// scores as the compressed file dequantised (exactly in float32; in bfloat16
// as the dequantised weights rounded to bfloat16), keeps every other tensor
// byte for byte and the config as stored (but for a separately compressed
// head of a tied model: untied, also inside Qwen3.5's text_config), shards
// with an index when asked; a non-empty folder is refused without --force,
// bad input is one error naming the file and tensor, and no temporary folder
// is left behind.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "blr/sign.hpp"
#include "cli_run.hpp"
#include "core/half.hpp"
#include "eval/ppl.hpp"
#include "export/export.hpp"
#include "forward_reference.hpp"
#include "io/safetensors.hpp"
#include "io/tokenizer.hpp"
#include "model/linear.hpp"
#include "model/llama.hpp"
#include "quantize/quantize.hpp"
#include "test_files.hpp"

using namespace cortiq;
using cortiq::test::kData;
using cortiq::test::kGolden;
using cortiq::test::run_cli;
using cortiq::test::slurp;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path kStories = kData / "models/stories260K";
const fs::path kQwen35 = kGolden / "tiny-qwen35";
const fs::path kCalib = kData / "text/tinystories-calib.txt";

// A quick compressed file of `model` (a few calibration windows, no tuning).
fs::path quantize(const fs::path& model, const fs::path& out, bool head) {
    quant::QuantizeOptions o;
    o.model_dir = model.string();
    o.calib_paths = {kCalib.string()};
    o.out_path = out.string();
    o.bpw = 1.0;
    o.include_head = head;
    o.calib.samples = 4;
    o.calib.seqlen = 64;
    o.enc.itq_iters = 10;
    o.tune_mode = "none";
    o.progress = false;
    o.verbose = false;
    quant::quantize(o);
    return out;
}

// The first 30 kB of the held-out text, as a file for `cortiq ppl`.
fs::path ppl_text(const fs::path& dir) {
    std::ifstream in(kData / "text/tinystories-valid.txt", std::ios::binary);
    std::string text(30000, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    const fs::path p = dir / "valid.txt";
    std::ofstream(p, std::ios::binary) << text;
    return p;
}

const std::string kPplFlags = " --ctx 128 --max-windows 12 --threads 2 --json --quiet";

// `cortiq ppl MODEL ...`'s perplexity (the JSON line it prints).
double cli_ppl(const std::string& model, const fs::path& text, const std::string& extra = "") {
    const auto r = run_cli("ppl " + model + " --text " + text.string() + kPplFlags + extra);
    EXPECT_EQ(r.code, 0) << r.out;
    const size_t at = r.out.rfind('{');
    if (r.code != 0 || at == std::string::npos) return NAN;
    return json::parse(r.out.substr(at))["ppl"].get<double>();
}

// Entries of `dir` (names), sorted.
std::set<std::string> listing(const fs::path& dir) {
    std::set<std::string> s;
    for (const auto& e : fs::directory_iterator(dir)) s.insert(e.path().filename().string());
    return s;
}

std::vector<uint8_t> bytes_of(const io::Checkpoint& c, const std::string& name) {
    const auto b = c.bytes(name);
    return {b.begin(), b.end()};
}

// The payload's dequantised weight in `dtype`, as the folder must hold it.
std::vector<uint8_t> expected_weight(std::span<const uint8_t> payload, io::DType dtype) {
    const MatF w = blr::dequant_any(payload);
    std::vector<uint8_t> out(static_cast<size_t>(w.size()) * io::dtype_size(dtype));
    if (dtype == io::DType::F32) {
        std::memcpy(out.data(), w.data(), out.size());
        return out;
    }
    for (int64_t i = 0; i < w.size(); ++i) {
        const uint16_t h =
            dtype == io::DType::BF16 ? float_to_bf16(w.data()[i]) : float_to_half(w.data()[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
}

// Every tensor of the compressed file in the folder: payloads as their
// dequantised weight in `dtype` under the same name, the rest byte for byte
// (and equal to the original model's tensor where it has one).
void expect_tensors(const fs::path& file, const fs::path& folder, const fs::path& original,
                    io::DType dtype) {
    const auto src = io::Checkpoint::open(file.string());
    const auto out = io::Checkpoint::open(folder.string());
    const auto orig = io::Checkpoint::open(original.string());
    ASSERT_EQ(src.names(), out.names());
    int payloads = 0, copied = 0;
    for (const auto& name : src.names()) {
        const auto& s = src.info(name);
        const auto& o = out.info(name);
        if (s.dtype == io::DType::U8) {
            ++payloads;
            const auto shape = blr::payload_shape(src.bytes(name), name);
            EXPECT_EQ(o.dtype, dtype) << name;
            EXPECT_EQ(o.shape, (std::vector<int64_t>{shape.m, shape.n})) << name;
            EXPECT_TRUE(bytes_of(out, name) == expected_weight(src.bytes(name), dtype)) << name;
        } else {
            ++copied;
            EXPECT_EQ(o.dtype, s.dtype) << name;
            EXPECT_EQ(o.shape, s.shape) << name;
            EXPECT_TRUE(bytes_of(out, name) == bytes_of(src, name)) << name;
            if (orig.has(name)) EXPECT_TRUE(bytes_of(out, name) == bytes_of(orig, name)) << name;
        }
    }
    EXPECT_GT(payloads, 0);
    EXPECT_GT(copied, 0);
}

class Export : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!fs::exists(kStories) || !fs::exists(kCalib)) GTEST_SKIP() << "no shared data";
        dir_ = test::scratch_dir("cortiq_export_",
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
    }
    void TearDown() override {
        if (!dir_.empty()) fs::remove_all(dir_);
    }
    fs::path dir_;
};

}  // namespace

// stories260K ties its head; quantized with --include-head it holds a
// compressed lm_head.weight, which the float32 folder must use: config.json
// unties it, and the folder scores as the file dequantised.
TEST_F(Export, Float32FolderScoresAsTheDequantisedFile) {
    const fs::path q = quantize(kStories, dir_ / "q.safetensors", /*head=*/true);
    const fs::path out = dir_ / "hf";
    const auto r = run_cli("export " + q.string() + " " + out.string() + " --dtype f32");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("tie_word_embeddings false"), std::string::npos) << r.out;
    EXPECT_EQ(listing(out), (std::set<std::string>{"config.json", "model.safetensors",
                                                   "tokenizer.json", "tokenizer_config.json"}));
    EXPECT_EQ(slurp(out / "tokenizer.json"), slurp(kStories / "tokenizer.json"));
    EXPECT_EQ(slurp(out / "tokenizer_config.json"), slurp(kStories / "tokenizer_config.json"));
    json cfg = json::parse(slurp(out / "config.json"));
    EXPECT_FALSE(cfg["tie_word_embeddings"].get<bool>());
    json stored = json::parse(slurp(kStories / "config.json"));
    stored["tie_word_embeddings"] = false;
    EXPECT_EQ(cfg, stored);  // nothing else changed
    expect_tensors(q, out, kStories, io::DType::F32);
    // transformers reads "format" from a shard's metadata
    EXPECT_EQ(
        io::SafetensorsFile::open((out / "model.safetensors").string()).metadata().at("format"),
        "pt");

    const fs::path text = ppl_text(dir_);
    const double folder = cli_ppl(out.string(), text);
    const double dequant = cli_ppl(q.string(), text, " --dequant");
    // the same float32 weights through the same code: equal up to the
    // printing of a double
    EXPECT_NEAR(folder, dequant, 1e-6 * dequant);
    EXPECT_TRUE(std::isfinite(folder));
}

// bfloat16: each dequantised weight rounded to nearest even; the folder then
// scores as the dequantised model whose linear weights are so rounded.
TEST_F(Export, Bfloat16FolderScoresAsTheRoundedWeights) {
    const fs::path q = quantize(kStories, dir_ / "q.safetensors", /*head=*/false);
    hf::ExportOptions o;
    o.in_path = q.string();
    o.out_dir = (dir_ / "hf").string();
    o.dtype = io::DType::BF16;
    const auto rep = hf::export_folder(o);
    EXPECT_EQ(rep.dequantised, 5 * 7);
    EXPECT_FALSE(rep.untied_head);
    // a tied model without its own head keeps the config as stored
    EXPECT_EQ(slurp(dir_ / "hf/config.json"), slurp(kStories / "config.json"));
    expect_tensors(q, dir_ / "hf", kStories, io::DType::BF16);

    model::LoadOptions lo;
    lo.dequant = true;
    auto m = model::Model::load(q.string(), lo);
    for (int64_t l = 0; l < m.num_layers(); ++l)
        for (const auto& name : model::Model::linear_names()) {
            model::Linear& lin = m.linear(l, name);
            MatF w = lin.w->dense();
            for (int64_t i = 0; i < w.size(); ++i)
                w.data()[i] = bf16_to_float(float_to_bf16(w.data()[i]));
            lin.w = std::make_unique<model::DenseLinear>(std::move(w));
        }
    const fs::path text = ppl_text(dir_);
    const auto tok = io::Tokenizer::load(kStories.string());
    eval::PplOptions po;
    po.ctx = 128;
    po.max_windows = 12;
    po.progress = false;
    const double rounded = eval::perplexity(m, tok, slurp(text), po).ppl;
    const double folder = cli_ppl((dir_ / "hf").string(), text);
    EXPECT_NEAR(folder, rounded, 1e-6 * rounded);
}

// Qwen3.5 (the multimodal layout, tied, quantized with its head): the config
// keeps its text_config nesting with the tie turned off at both levels; the
// vision tower and mtp.* come through unchanged; small shards give an index
// that maps every tensor; the carried generation and special-token files are
// written back; the folder scores as the file dequantised.
TEST_F(Export, Qwen35FolderKeepsTheNestedConfigAndShards) {
    const fs::path src = dir_ / "model";
    fs::create_directories(src);
    for (const char* f :
         {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
        fs::copy_file(kQwen35 / f, src / f);
    fs::copy_file(kGolden / "tiny-qwen35-trained/generation_config.json",
                  src / "generation_config.json");
    std::ofstream(src / "special_tokens_map.json") << R"({"eos_token": "<|endoftext|>"})"
                                                   << "\n";
    const fs::path q = quantize(src, dir_ / "q.safetensors", /*head=*/true);

    hf::ExportOptions o;
    o.in_path = q.string();
    o.out_dir = (dir_ / "hf").string();
    o.dtype = io::DType::F32;
    o.max_shard_bytes = 400'000;
    const auto rep = hf::export_folder(o);
    EXPECT_TRUE(rep.untied_head);
    const fs::path out = dir_ / "hf";
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                          "special_tokens_map.json"})
        EXPECT_EQ(slurp(out / f), slurp(src / f)) << f;
    json cfg = json::parse(slurp(out / "config.json"));
    json stored = json::parse(slurp(src / "config.json"));
    ASSERT_TRUE(stored["tie_word_embeddings"].get<bool>());
    EXPECT_FALSE(cfg["tie_word_embeddings"].get<bool>());
    EXPECT_FALSE(cfg["text_config"]["tie_word_embeddings"].get<bool>());
    stored["tie_word_embeddings"] = false;
    stored["text_config"]["tie_word_embeddings"] = false;
    EXPECT_EQ(cfg, stored);

    ASSERT_TRUE(fs::exists(out / "model.safetensors.index.json"));
    EXPECT_FALSE(fs::exists(out / "model.safetensors"));
    const json index = json::parse(slurp(out / "model.safetensors.index.json"));
    std::set<std::string> shards;
    uint64_t total = 0;
    const auto ck = io::Checkpoint::open(out.string());
    for (const auto& [name, file] : index["weight_map"].items()) {
        shards.insert(file.get<std::string>());
        const auto f = io::SafetensorsFile::open((out / file.get<std::string>()).string());
        ASSERT_NE(f.find(name), nullptr) << name << " not in " << file;
        total += f.find(name)->nbytes();
    }
    EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
    EXPECT_EQ(static_cast<int64_t>(index["weight_map"].size()),
              static_cast<int64_t>(ck.names().size()));
    EXPECT_GE(shards.size(), 2u);
    for (const auto& s : shards) {
        EXPECT_NE(s.find("-of-"), std::string::npos) << s;
        const auto f = io::SafetensorsFile::open((out / s).string());
        uint64_t bytes = 0;
        for (const auto& t : f.tensors()) bytes += t.nbytes();
        // over the limit only as one tensor larger than it
        if (bytes > o.max_shard_bytes) EXPECT_EQ(f.tensors().size(), 1u) << s;
    }
    expect_tensors(q, out, src, io::DType::F32);  // the vision tower and mtp.* among them
    EXPECT_TRUE(ck.has("mtp.fc.weight"));

    const fs::path text = ppl_text(dir_);
    const double folder = cli_ppl(out.string(), text);
    const double dequant = cli_ppl(q.string(), text, " --dequant");
    EXPECT_NEAR(folder, dequant, 1e-6 * dequant);
}

// A folder that is not empty is refused without --force and left as it was;
// an empty one is used; --force replaces a full one. No temporary sibling
// stays behind, and one a killed run left is removed.
TEST_F(Export, RefusesAFullFolderWithoutForceAndLeavesNoTemporaries) {
    const fs::path q = quantize(kStories, dir_ / "q.safetensors", /*head=*/false);
    const fs::path out = dir_ / "hf";
    fs::create_directories(out);
    std::ofstream(out / "notes.txt") << "keep me\n";
    const std::string cmd = "export " + q.string() + " " + out.string();
    auto r = run_cli(cmd);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_EQ(listing(out), std::set<std::string>{"notes.txt"});

    const fs::path stale = dir_ / "hf.tmp.999999999";  // above any pid: its writer is gone
    fs::create_directories(stale);
    std::ofstream(stale / "model.safetensors") << "partial";
    r = run_cli(cmd + " --force");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_FALSE(fs::exists(out / "notes.txt"));
    EXPECT_TRUE(fs::exists(out / "model.safetensors"));
    EXPECT_EQ(listing(dir_), (std::set<std::string>{"hf", "q.safetensors"}));

    fs::remove_all(out);
    fs::create_directories(out);  // empty: no --force needed
    r = run_cli(cmd + " --dtype f16");
    ASSERT_EQ(r.code, 0) << r.out;
    expect_tensors(q, out, kStories, io::DType::F16);
    EXPECT_EQ(listing(dir_), (std::set<std::string>{"hf", "q.safetensors"}));
}

// Not a cortiq file, a folder, a corrupt payload: one error line naming the
// file (and the tensor); nothing written.
TEST_F(Export, BadInputIsOneErrorNamingFileAndTensor) {
    const fs::path out = dir_ / "hf";
    auto expect_error = [&](const std::string& in, const std::string& words) {
        const auto r = run_cli("export " + in + " " + out.string());
        EXPECT_EQ(r.code, 1) << r.out;
        EXPECT_EQ(r.out.rfind("cortiq: error: ", 0), 0u) << r.out;
        EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
        EXPECT_NE(r.out.find(words), std::string::npos) << r.out;
        EXPECT_FALSE(fs::exists(out));
    };
    const std::string plain = (kStories / "model.safetensors").string();
    expect_error(plain, plain + ": not a cortiq file");
    expect_error(kStories.string(), "a folder, not a cortiq file");
    expect_error((dir_ / "missing.safetensors").string(), "missing.safetensors");

    const fs::path q = quantize(kStories, dir_ / "q.safetensors", /*head=*/false);
    const std::string victim = "model.layers.2.mlp.down_proj.weight";
    {
        const auto f = io::SafetensorsFile::open(q.string());
        io::SafetensorsWriter w;
        for (const auto& t : f.tensors()) {
            const auto b = f.bytes(t);
            std::vector<uint8_t> bytes(b.begin(), b.end());
            if (t.name == victim) bytes[0] ^= 0xff;  // the magic
            w.add(t.name, t.dtype, t.shape, std::move(bytes));
        }
        for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
        w.write((dir_ / "bad.safetensors").string());
    }
    const std::string bad = (dir_ / "bad.safetensors").string();
    expect_error(bad, bad + ": tensor '" + victim + "'");
    EXPECT_EQ(listing(dir_), (std::set<std::string>{"bad.safetensors", "q.safetensors"}));
}

TEST(ExportOptions, ParsesDtypesAndShardSizes) {
    EXPECT_EQ(hf::parse_export_dtype("bf16"), io::DType::BF16);
    EXPECT_EQ(hf::parse_export_dtype("F16"), io::DType::F16);
    EXPECT_EQ(hf::parse_export_dtype("f32"), io::DType::F32);
    EXPECT_THROW(hf::parse_export_dtype("int8"), Error);
    EXPECT_EQ(hf::parse_shard_size("5GB"), 5'000'000'000u);
    EXPECT_EQ(hf::parse_shard_size("300kB"), 300'000u);
    EXPECT_EQ(hf::parse_shard_size("1.5MB"), 1'500'000u);
    EXPECT_EQ(hf::parse_shard_size("4096"), 4096u);
    EXPECT_THROW(hf::parse_shard_size("5 parsecs"), Error);
    EXPECT_THROW(hf::parse_shard_size("-1GB"), Error);
}
