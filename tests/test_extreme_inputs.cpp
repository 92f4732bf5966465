// Bad and extreme input, and the regressions the fuzz
// targets found: safetensors with repeated names, oversized headers or
// non-finite values; config token ids out of range; the journal's checks;
// Grams that are zero or rank-deficient, weights with dead rows or columns or
// a huge dynamic range: each is encoded into a valid payload (no NaN, no
// silently zero scale) or refused with a cortiq::Error that says why.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "blr/gauge.hpp"
#include "blr/model.hpp"
#include "blr/sign.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"
#include "encode/cpu/stages.hpp"
#include "encode/gram_check.hpp"
#include "encode/synthetic.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "io/tokenizer.hpp"
#include "linalg/blas.hpp"
#include "quantize/journal.hpp"

namespace fs = std::filesystem;
using namespace cortiq;

namespace {

class TempDir {
  public:
    TempDir() {
        path_ = fs::temp_directory_path() /
                fmt::format("cortiq_x_{}_{}", ::getpid(),
                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

  private:
    fs::path path_;
};

void write_raw(const std::string& path, const std::string& header, const std::string& data,
               uint64_t length) {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
    out << header << data;
}

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
    write_raw(path, header, data, header.size());
}

// The message of the cortiq::Error that f() throws ("" if none; an
// InvariantError or another exception fails the test).
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

void expect_has(const std::string& msg, std::vector<std::string> needles) {
    EXPECT_FALSE(msg.empty()) << "accepted";
    for (const auto& n : needles)
        EXPECT_NE(msg.find(n), std::string::npos) << "message lacks '" << n << "': " << msg;
}

std::string f32_bytes(std::vector<float> v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

}  // namespace

// ---------------------------------------------------------------- safetensors

TEST(ExtremeSafetensors, RepeatedTensorNamesAreRefused) {
    TempDir d;
    const auto p = d.file("dup.safetensors");
    write_raw(p,
              R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
              R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              f32_bytes({1, 2}));
    expect_has(error_of([&] { io::SafetensorsFile::open(p); }), {p, "'w'", "more than once"});
    // the same name inside an entry or in the metadata is not a repeat
    write_raw(p,
              R"({"__metadata__":{"w":"x"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
              f32_bytes({1}));
    EXPECT_NO_THROW(io::SafetensorsFile::open(p));
}

TEST(ExtremeSafetensors, OversizedHeaderIsRefusedBeforeParsing) {
    TempDir d;
    const auto p = d.file("big.safetensors");
    // a length beyond the 100 MB limit, in a file long enough to hold it
    // would be; refused without reading it
    write_raw(p, "{}", "", uint64_t{100'000'001});
    expect_has(error_of([&] { io::SafetensorsFile::open(p); }), {p, "exceeds", "100000000"});
    write_raw(p, "{}", "", ~uint64_t{0});
    expect_has(error_of([&] { io::SafetensorsFile::open(p); }), {p, "header length"});
}

TEST(ExtremeSafetensors, NonFiniteWeightsAreNamedAtLoad) {
    TempDir d;
    const auto p = d.file("nan.safetensors");
    write_raw(p, R"({"a.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})",
              f32_bytes({1, 2, 3, 4, 5, NAN}));
    const auto ck = io::Checkpoint::open(p);
    expect_has(error_of([&] { ck.load_matf("a.weight"); }),
               {p, "'a.weight'", "non-finite", "nan", "flat index 5", "[1, 2]"});
    // F16 infinity, BF16 NaN: the first bad element is the one named
    const uint16_t h[4] = {0x3c00, 0x7c00, 0x3c00, 0x7c00};
    const uint16_t b[2] = {0x7fc0, 0x3f80};
    write_raw(p,
              R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},)"
              R"("b":{"dtype":"BF16","shape":[1,1,2],"data_offsets":[8,12]}})",
              std::string(reinterpret_cast<const char*>(h), 8) +
                  std::string(reinterpret_cast<const char*>(b), 4));
    const auto ck2 = io::Checkpoint::open(p);
    expect_has(error_of([&] { ck2.load_floats("h"); }), {"'h'", "inf", "flat index 1"});
    expect_has(error_of([&] { ck2.load_floats("b"); }), {"'b'", "nan", "[0, 0, 0]"});
}

// A shape with a zero dimension holds no bytes, but its other dimensions
// multiplied past int64 when the tensor was flattened to rows × cols (signed
// overflow; seen while writing fuzz_safetensors). And an empty tensor's
// non-finite scan read past an empty list (fuzz_safetensors, UBSan: reference
// binding to null pointer), fixed in to_floats before it was committed.
TEST(ExtremeSafetensors, FuzzRegressionShapeWithAZeroAndHugeDimensions) {
    TempDir d;
    const auto p = d.file("z.safetensors");
    write_raw(p, R"({"w":{"dtype":"F32","shape":[2305843009213693952,4,0],"data_offsets":[0,0]}})",
              "");
    expect_has(error_of([&] { io::SafetensorsFile::open(p); }), {"'w'", "overflow"});
    write_raw(p, R"({"w":{"dtype":"F32","shape":[1000,0,7],"data_offsets":[0,0]}})", "");
    const auto ck = io::Checkpoint::open(p);
    EXPECT_EQ(ck.load_matf("w").size(), 0);
}

// ---------------------------------------------------------------- tokenizer

// Ids that would size a table (a sparse huge id: gigabytes for one entry) or
// overflow (an added token at INT32_MAX), and post-processor ids outside the
// vocab (they go into every encoded sequence), are refused by name.
TEST(ExtremeTokenizer, IdsOutsideTheVocabAreRefused) {
    TempDir d;
    const std::string model = R"("model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]})";
    auto load = [&](const std::string& json) {
        std::ofstream(d.file("tokenizer.json")) << json;
        return error_of([&] { io::Tokenizer::load(d.file("tokenizer.json")); });
    };
    EXPECT_EQ(load("{" + model + "}"), "");
    expect_has(load(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1000000000},"merges":[]}})"),
               {"tokenizer.json", "bad id 1000000000", "'b'"});
    expect_has(load("{" + model + R"(,"added_tokens":[{"id":2147483647,"content":"<x>"}]})"),
               {"tokenizer.json", "added token id 2147483647"});
    expect_has(load("{" + model + R"(,"added_tokens":[{"id":4294967298,"content":"<x>"}]})"),
               {"added token id 4294967298"});
    expect_has(load("{" + model +
                    R"(,"post_processor":{"type":"TemplateProcessing","single":[)"
                    R"({"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],)"
                    R"("special_tokens":{"<s>":{"ids":[7]}}}})"),
               {"post-processor token id 7"});
}

// Found by fuzz_tokenizer_load (UBSan: "1.99223e+21 is outside the range of
// representable values of type 'long'"): a vocab id written as a float was
// converted to an integer. Every integer of tokenizer.json is now checked to
// be one, in range, before it is converted.
TEST(ExtremeTokenizer, FuzzRegressionFloatIdsAreRefused) {
    TempDir d;
    auto load = [&](const std::string& json) {
        std::ofstream(d.file("tokenizer.json")) << json;
        return error_of([&] { io::Tokenizer::load(d.file("tokenizer.json")); });
    };
    const std::string model = R"("model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]})";
    expect_has(load(R"({"model":{"type":"BPE","vocab":{"a":1.99223e+21},"merges":[]}})"),
               {"tokenizer.json", "not an integer", "'a'"});
    expect_has(load("{" + model + R"(,"added_tokens":[{"id":4.3e22,"content":"<x>"}]})"),
               {"added token id"});
    expect_has(load("{" + model +
                    R"(,"post_processor":{"type":"TemplateProcessing","single":[)"
                    R"({"SpecialToken":{"id":"<s>"}}],"special_tokens":{"<s>":{"ids":[1e30]}}}})"),
               {"token id", "integer"});
    expect_has(load("{" + model + R"(,"decoder":{"type":"Strip","content":" ","start":1e300}})"),
               {"start", "integer"});
    expect_has(load("{" + model +
                    R"(,"post_processor":{"type":"RobertaProcessing","cls":["<s>",-3],)"
                    R"("sep":["</s>",1]}})"),
               {"cls id", "out of range"});
}

// ---------------------------------------------------------------- config

TEST(ExtremeConfig, TokenIdsAreRangeChecked) {
    const std::string base = R"({"model_type":"llama","hidden_size":64,"intermediate_size":128,)"
                             R"("num_hidden_layers":2,"num_attention_heads":4,"vocab_size":512)";
    auto cfg = [&](const std::string& extra) {
        return io::ModelConfig::parse(base + extra + "}", "cfg.json");
    };
    EXPECT_EQ(cfg(R"(,"bos_token_id":1,"eos_token_id":[2,511],"pad_token_id":0)").bos_token_id, 1);
    EXPECT_EQ(cfg(R"(,"bos_token_id":null,"eos_token_id":null)").bos_token_id, -1);
    expect_has(error_of([&] { cfg(R"(,"bos_token_id":512)"); }),
               {"cfg.json", "bos_token_id", "512", "vocab_size 512"});
    expect_has(error_of([&] { cfg(R"(,"eos_token_id":[2,-1])"); }), {"eos_token_id", "-1"});
    expect_has(error_of([&] { cfg(R"(,"pad_token_id":4294967297)"); }), {"pad_token_id"});
    expect_has(error_of([&] { cfg(R"(,"eos_token_id":"2")"); }), {"eos_token_id", "integer"});
    expect_has(error_of([&] { cfg(R"(,"rms_norm_eps":-1)"); }), {"rms_norm_eps"});
    expect_has(error_of([&] {
                   io::ModelConfig::parse(
                       R"({"model_type":"llama","hidden_size":64,"intermediate_size":128,)"
                       R"("num_hidden_layers":2,"num_attention_heads":4,"vocab_size":512,)"
                       R"("head_dim":4611686018427387904})",
                       "cfg.json");
               }),
               {"head_dim"});
}

// ---------------------------------------------------------------- f16 scales

namespace {

// A random model of one path with the given scale vectors.
blr::Factors model_with(const VecD& h, const VecD& l, const VecD& g, uint64_t seed) {
    Rng rng(seed);
    blr::Factors md;
    md.m = static_cast<int64_t>(h.size());
    md.n = static_cast<int64_t>(g.size());
    md.r = static_cast<int64_t>(l.size());
    blr::Path p;
    p.h = h;
    p.l = l;
    p.g = g;
    p.su = MatD(md.m, md.r);
    p.sv = MatD(md.n, md.r);
    for (auto& v : p.su.vec()) v = rng.uniform() < 0.5 ? -1 : 1;
    for (auto& v : p.sv.vec()) v = rng.uniform() < 0.5 ? -1 : 1;
    md.paths.push_back(std::move(p));
    return md;
}

// Every non-zero scale of the payload is stored non-zero and finite, and the
// payload's weight equals the model's within f16 rounding (entry by entry,
// relative to the entry's own scale h_i·g_j·Σ|ℓ|).
void expect_stored_faithfully(const blr::Factors& md) {
    const auto bytes = blr::pack(md);
    ASSERT_NO_THROW(blr::validate(bytes));
    const blr::Factors back = blr::unpack(bytes);
    const auto& p = md.paths[0];
    const auto& q = back.paths[0];
    for (int64_t i = 0; i < md.m; ++i) EXPECT_EQ(p.h[i] == 0, q.h[i] == 0) << "h " << i;
    for (int64_t k = 0; k < md.r; ++k) EXPECT_EQ(p.l[k] == 0, q.l[k] == 0) << "l " << k;
    for (int64_t j = 0; j < md.n; ++j) EXPECT_EQ(p.g[j] == 0, q.g[j] == 0) << "g " << j;
    const MatD a = md.dense(), b = back.dense();
    double lsum = 0;
    for (double v : p.l) lsum += std::abs(v);
    for (int64_t i = 0; i < md.m; ++i)
        for (int64_t j = 0; j < md.n; ++j) {
            const double scale = std::abs(p.h[i] * p.g[j]) * lsum;
            EXPECT_LE(std::abs(a(i, j) - b(i, j)), 3e-3 * scale) << i << "," << j;
        }
}

}  // namespace

// The Gram checks (by tiles, in parallel) find a bad entry
// wherever it lies: in a diagonal tile, in a tile far from the diagonal, in the
// last partial tile; a symmetric Gram passes.
TEST(ExtremeGram, EveryBadEntryIsFoundWhereverItLies) {
    const int64_t n = 200;  // tiles of 64: three full, one partial
    MatD g(n, n);
    Rng rng(2);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j <= i; ++j) g(i, j) = g(j, i) = rng.normal();
    for (int64_t i = 0; i < n; ++i) g(i, i) = std::abs(g(i, i)) + 1.0;
    EXPECT_NO_THROW(encode::check_gram(g, "layer", "fit"));
    auto message = [&](const MatD& bad) {
        try {
            encode::check_gram(bad, "layer", "fit");
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    for (const auto [i, j] : {std::pair<int64_t, int64_t>{5, 3}, {150, 3}, {3, 150}, {199, 130}}) {
        MatD asym = g;
        asym(i, j) += 1e-3;
        const std::string m = message(asym);
        EXPECT_NE(m.find("not symmetric at (" + std::to_string(std::max(i, j)) + ", " +
                         std::to_string(std::min(i, j)) + ")"),
                  std::string::npos)
            << m;
        MatD nan = g;
        nan(i, j) = std::nan("");
        EXPECT_NE(message(nan).find("non-finite"), std::string::npos) << i << "," << j;
    }
    MatD neg = g;
    neg(170, 170) = -1.0;
    EXPECT_NE(message(neg).find("negative diagonal entry -1 at 170"), std::string::npos);
}

TEST(ExtremeScales, F16OverflowOfTheBalancedGaugeIsRescaled) {
    // One large output scale among small ones: the geometric-mean balance
    // puts it at ~1e7, past f16 (before: an internal error).
    VecD h(16, 1e-3);
    h[3] = 1e5;
    const auto md = model_with(h, VecD(4, 1.0), VecD(8, 1.0), 1);
    expect_stored_faithfully(md);
}

TEST(ExtremeScales, F16UnderflowNeverStoresASilentZero) {
    // One tiny output scale among unit ones: the balance stored it as 0.
    VecD h(16, 1.0);
    h[5] = 1e-9;
    const auto md = model_with(h, VecD(4, 1.0), VecD(8, 1.0), 2);
    expect_stored_faithfully(md);
    // dead rows, latents and columns stay exactly zero
    h[5] = 0;
    VecD l(4, 2.0), g(8, 0.5);
    l[1] = 0;
    g[7] = 0;
    expect_stored_faithfully(model_with(h, l, g, 3));
    expect_stored_faithfully(model_with(VecD(16, 0.0), l, g, 4));
}

TEST(ExtremeScales, ARangeBeyondF16IsRefusedClearly) {
    VecD h(8, 1.0);
    h[0] = 1e-12;
    h[1] = 1e6;
    const auto md = model_with(h, VecD(2, 1.0), VecD(8, 1.0), 5);
    expect_has(error_of([&] { blr::pack(md); }), {"f16", "output scales"});
    // a weight whose entries exceed what three f16 factors can reach
    const auto huge = model_with(VecD(4, 1e7), VecD(2, 1e7), VecD(4, 1e7), 6);
    expect_has(error_of([&] { blr::pack(huge); }), {"f16"});
}

TEST(ExtremeScales, SignPayloadScalesAreBalancedIntoF16) {
    MatD s(2, 3);
    for (auto& v : s.vec()) v = 1;
    const VecD h = {1e6, 2e6}, g = {1e-6, 3e-6, 1e-7};
    const auto bytes = blr::pack_sign(s, h, g);
    ASSERT_NO_THROW(blr::validate_sign(bytes));
    const MatF w = blr::dequant_sign(bytes);
    for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j) EXPECT_NEAR(w(i, j), h[i] * g[j], 2e-3 * h[i] * g[j]);
    expect_has(error_of([&] { blr::pack_sign(s, {1e12, 1e-12}, {1, 1, 1}); }), {"f16"});
}

// ---------------------------------------------------------------- encoder

namespace {

// Encodes w against (h_fit, h_sel) at 1 bpw; returns the error message, or ""
// after checking that the payload is valid with finite weights.
std::string encode_or_refuse(const MatD& w, const MatD& hf, const MatD& hs) {
    return error_of([&] {
        const encode::cpu::InputContext ic(hf, hs, 0.03, "t");
        encode::Options o;
        o.itq_iters = 10;
        o.bpw = 1.0;
        const auto e = encode::cpu::encode_tensor(w, ic, o);
        blr::validate_any(e.payload, "t", w.rows(), w.cols());
        const MatF dq = blr::dequant_any(e.payload);
        for (int64_t k = 0; k < dq.size(); ++k) ASSERT_TRUE(std::isfinite(dq.data()[k])) << k;
        EXPECT_TRUE(std::isfinite(e.err_fit) && std::isfinite(e.err_sel));
    });
}

}  // namespace

TEST(ExtremeEncode, ZeroAndRankDeficientGrams) {
    const auto s = encode::synthetic_layer(24, 48, 11);
    // zero Gram: no activations, refused by name
    expect_has(encode_or_refuse(s.w, MatD(48, 48), MatD(48, 48)), {"t", "zero"});
    // rank 3: inputs that span three directions
    Rng rng(12);
    MatD x(48, 3);
    for (auto& v : x.vec()) v = rng.normal();
    const MatD h = la::gemm(x, false, x, true);
    EXPECT_EQ(encode_or_refuse(s.w, h, h), "");
    // a Gram with dead inputs (zero rows and columns)
    MatD hd = s.h_fit;
    for (int64_t i = 0; i < 48; ++i) hd(i, 7) = hd(7, i) = hd(i, 30) = hd(30, i) = 0;
    EXPECT_EQ(encode_or_refuse(s.w, hd, hd), "");
}

TEST(ExtremeEncode, DeadRowsAndColumnsOfTheWeight) {
    const auto s = encode::synthetic_layer(24, 48, 13);
    MatD w = s.w;
    for (int64_t j = 0; j < 48; ++j) w(2, j) = w(17, j) = 0;
    for (int64_t i = 0; i < 24; ++i) w(i, 5) = w(i, 40) = 0;
    EXPECT_EQ(encode_or_refuse(w, s.h_fit, s.h_sel), "");
    EXPECT_EQ(encode_or_refuse(MatD(24, 48), s.h_fit, s.h_sel), "");  // all zero
}

TEST(ExtremeEncode, HugeDynamicRangeIsEncodedOrRefusedClearly) {
    const auto s = encode::synthetic_layer(24, 48, 17);
    for (const double span : {1e3, 1e6, 1e12}) {
        SCOPED_TRACE(span);
        MatD w = s.w;  // rows scaled from 1/span to span
        for (int64_t i = 0; i < 24; ++i) {
            const double f = std::pow(span, 2.0 * i / 23.0 - 1.0);
            for (int64_t j = 0; j < 48; ++j) w(i, j) *= f;
        }
        const std::string msg = encode_or_refuse(w, s.h_fit, s.h_sel);
        if (!msg.empty()) expect_has(msg, {"f16"});
    }
    MatD big = s.w;  // entries near float's limit
    for (auto& v : big.vec()) v *= 1e30;
    const std::string msg = encode_or_refuse(big, s.h_fit, s.h_sel);
    if (!msg.empty()) expect_has(msg, {"f16"});
}

// ---------------------------------------------------------------- journal

namespace {

quant::LayerRecord record_of(const std::vector<std::string>& names, int64_t m, int64_t n) {
    quant::LayerRecord rec;
    Rng rng(3);
    for (const auto& name : names) {
        VecD h(m), l(1, 1.0), g(n);
        for (auto& v : h) v = 1 + rng.uniform();
        for (auto& v : g) v = 1 + rng.uniform();
        rec.payloads.emplace_back(name, blr::pack(model_with(h, l, g, 9)));
        quant::TensorReport r;
        r.name = name;
        r.method = "nvg";
        r.m = m;
        r.n = n;
        rec.reports.push_back(r);
    }
    return rec;
}

}  // namespace

TEST(ExtremeJournal, EntriesAreCheckedAndErrorsNameTheFile) {
    TempDir d;
    const std::string out = d.file("o.safetensors");
    const nlohmann::json settings = {{"method", "nvg"}};
    const std::string q = "model.layers.0.self_attn.q_proj.weight",
                      k = "model.layers.0.self_attn.k_proj.weight";
    const std::vector<quant::JournalTensor> both = {{q, 4, 8}, {k, 4, 8}};
    {
        const quant::Journal j(out, settings, false, false);
        j.save(0, record_of({q, k}, 4, 8));
        j.save(1, record_of({q}, 4, 8));            // layer 1's file holding layer 0's tensor
        fs::copy_file(j.file_of(0), j.file_of(2));  // layer 0's entry under layer 2's name
    }
    const quant::Journal j(out, settings, true, false);
    // the settings record the version that wrote them
    std::ifstream sf(d.file("o.safetensors.journal/settings.json"));
    EXPECT_EQ(nlohmann::json::parse(sf).at("cortiq_version"), quant::program_version());

    const auto rec = j.load(0, both);
    ASSERT_TRUE(rec);
    EXPECT_EQ(rec->payloads.size(), 2u);
    EXPECT_FALSE(j.load(3, both));  // no entry
    expect_has(error_of([&] { j.load(0, {{q, 4, 8}}); }), {j.file_of(0), k, "does not belong"});
    expect_has(error_of([&] {
                   j.load(0, {{q, 4, 8}, {k, 4, 8}, {"model.layers.0.x", 4, 8}});
               }),
               {j.file_of(0), "incomplete", "model.layers.0.x"});
    expect_has(error_of([&] { j.load(0, {{q, 4, 8}, {k, 8, 4}}); }), {j.file_of(0), "8x4"});
    expect_has(error_of([&] { j.load(2, both); }), {j.file_of(2), "belongs to layer 0"});
    // a report whose integers are floats (undefined to convert)
    {
        quant::LayerRecord bad = record_of({q, k}, 4, 8);
        const quant::Journal j2(d.file("p.safetensors"), settings, false, false);
        j2.save(0, bad);
        auto f = io::SafetensorsFile::open(j2.file_of(0));
        io::SafetensorsWriter w;
        for (const auto& t : f.tensors()) w.add(t.name, t.dtype, t.shape, f.bytes(t));
        for (auto [key, value] : f.metadata()) {
            if (key == "reports") {
                auto rj = nlohmann::json::parse(value);
                rj[q]["shape"] = {4e30, 8};
                value = rj.dump();
            }
            w.set_metadata(key, value);
        }
        w.write(j2.file_of(0));
        expect_has(error_of([&] { j2.load(0, both); }), {j2.file_of(0), "malformed report"});
    }
    // a corrupt entry: truncated
    fs::resize_file(j.file_of(0), fs::file_size(j.file_of(0)) - 3);
    expect_has(error_of([&] { j.load(0, both); }), {j.file_of(0)});
}

TEST(ExtremeJournal, AnotherVersionOrUnreadableSettingsAreNotResumed) {
    TempDir d;
    const std::string out = d.file("o.safetensors");
    const nlohmann::json settings = {{"method", "nvg"}};
    { quant::Journal(out, settings, false, false); }
    const std::string sp = d.file("o.safetensors.journal/settings.json");
    nlohmann::json s = settings;
    s["cortiq_version"] = "0.0.1";
    std::ofstream(sp) << s.dump();
    expect_has(error_of([&] { quant::Journal(out, settings, true, false); }),
               {sp, "cortiq 0.0.1", "--force"});
    std::ofstream(sp) << "{\"method\": ";
    expect_has(error_of([&] { quant::Journal(out, settings, true, false); }), {sp, "--force"});
    EXPECT_NO_THROW(quant::Journal(out, settings, false, true));  // --force starts over
}
